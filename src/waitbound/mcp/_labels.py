"""How an MCP server's operations are labelled: a constant the configuration, the
answers, the principal check and the jobs all read, in a module that imports nothing."""

from __future__ import annotations

from typing import Final

__all__ = ["LABEL_PREFIX"]

LABEL_PREFIX: Final = "mcp:"
"""The label prefix of every operation an MCP server starts (``mcp:PROVIDER``)."""
