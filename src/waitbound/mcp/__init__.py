"""waitbound for agents: an MCP server whose waiting happens outside the model.

Needs the optional dependency ``mcp`` (``pip install 'waitbound[mcp]'``). Run it with
``waitbound mcp --config FILE``; see ``docs/mcp.md``.
"""

from waitbound.mcp._config import McpConfig, ProviderConfig, load_config, parse_config
from waitbound.mcp._jobs import Jobs
from waitbound.mcp._server import INSTRUCTIONS, create_server

__all__ = [
    "INSTRUCTIONS",
    "Jobs",
    "McpConfig",
    "ProviderConfig",
    "create_server",
    "load_config",
    "parse_config",
]
