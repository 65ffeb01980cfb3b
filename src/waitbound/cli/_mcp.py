"""``waitbound mcp``: serve the agent tools over MCP (stdio or streamable HTTP)."""

from __future__ import annotations

import logging
import socket

import click
import platformdirs

import waitbound
from waitbound._errors import UsageError
from waitbound.cli._params import WholeRange
from waitbound.cli._telemetry import LOG_FORMAT_OPTION, apply_log_format

__all__ = ["MCP_TOOLS", "mcp_command"]

_STORE_HELP = (
    "SQLite file or PostgreSQL DSN [default: the config's server.store, else mcp.db in the "
    "user state directory]. Keep it for the MCP server's own operations: only this "
    "server holds its providers' credentials."
)


MCP_TOOLS = (
    "start_job",
    "await_job",
    "check_job",
    "list_jobs",
    "get_result",
    "cancel_job",
    "request_extension",
)
"""Every tool the MCP server offers (a test checks this against the server)."""


@click.command(
    name="mcp",
    help=f"Serve the {len(MCP_TOOLS)} agent tools ({', '.join(MCP_TOOLS)}) over the Model "
    "Context Protocol; a background worker drives the jobs. request_extension only asks a "
    "person for more time (`waitbound escalations`); no tool decides. A client that "
    "declares the MCP Tasks extension (io.modelcontextprotocol/tasks) on a request gets a "
    "durable task handle from start_job and await_job instead (tasks/get, tasks/update, "
    "tasks/cancel); every operation's story is the resource "
    "waitbound://operations/{operation_id}/story. See docs/mcp.md.",
)
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="TOML file naming the providers (see docs/mcp.md).",
)
@click.option("--store", help=_STORE_HELP)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio for a client that starts the server; http for streamable HTTP.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="With --transport http.")
@click.option(
    "--port",
    type=WholeRange(1, 65535),
    default=8765,
    show_default=True,
    help="With --transport http: the port to listen on (the endpoint is /mcp).",
)
@click.option(
    "--concurrency",
    type=WholeRange(1, 10_000),
    default=16,
    show_default=True,
    help="Jobs the background worker drives at once (1 to 10000).",
)
@LOG_FORMAT_OPTION
def mcp_command(  # noqa: PLR0917 - click passes every option
    config_path: str,
    store: str | None,
    transport: str,
    host: str,
    port: int,
    concurrency: int,
    log_format: str,
) -> int:
    try:
        from waitbound.mcp import Jobs, create_server, load_config
    except ImportError:
        raise UsageError(
            "the MCP server needs the 'mcp' package: pip install 'waitbound[mcp]'"
        ) from None
    config = load_config(config_path)
    if transport == "http":
        _check_port(host, port)
    spec = store or config.store or platformdirs.user_state_path("waitbound") / "mcp.db"
    opened = waitbound.open_store(spec)
    # stdout belongs to the protocol; the SDK's and httpx's chatter stays off stderr too.
    apply_log_format(log_format)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server = create_server(
        Jobs(config, opened), settings=waitbound.WorkerSettings(concurrency=concurrency)
    )
    try:
        if transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port)
    finally:
        opened.close()
    return 0


def _check_port(host: str, port: int) -> None:
    """Refuse at once, in one line, an address that cannot be listened on."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
