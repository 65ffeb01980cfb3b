"""``waitbound mcp``: serve the agent tools over MCP (stdio or streamable HTTP)."""

from __future__ import annotations

import functools
import logging
import socket
from pathlib import Path

import anyio
import click
import platformdirs

from waitbound._base._errors import UsageError
from waitbound._engine._worker import WorkerSettings
from waitbound._profile._policy import budget_disagreement
from waitbound.cli._params import WholeRange
from waitbound.cli._telemetry import LOG_FORMAT_OPTION, apply_log_format
from waitbound.cli._tokens import default_token_file, is_loopback, tokens_of
from waitbound.stores import open_store

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
    "waitbound://operations/{operation_id}/story. With --transport http every request "
    "but GET /healthz needs a bearer token of --token-file (as waitbound serve), and each "
    "token's holder reaches only the jobs it started (an admin, every job). See "
    "docs/mcp.md.",
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
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="With --transport http: the address to listen on; one that is not loopback "
    "needs --allow-remote.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="With --transport http: allow a --host other machines can reach (the tokens are "
    "then all that guards the server: put TLS in front).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --transport http: the bearer tokens, one shared token or lines of NAME ROLE "
    "TOKEN, as waitbound serve reads them [default: the user config directory's "
    "waitbound/serve-token; made and printed once when it does not exist].",
)
@click.option(
    "--no-auth",
    is_flag=True,
    help="With --transport http on a loopback --host only: no tokens; each MCP session "
    "then reaches only the jobs it started, and its answers never decide.",
)
@click.option(
    "--allowed-host",
    "allowed_host",
    multiple=True,
    help="With --transport http: another Host name to answer to (a proxy's public name); "
    "repeatable.",
)
@click.option(
    "--port",
    type=WholeRange(0, 65535),
    default=8765,
    show_default=True,
    help="With --transport http: the port to listen on (the endpoint is /mcp; 0: any "
    "free port, printed).",
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
    allow_remote: bool,
    token_file: Path | None,
    no_auth: bool,
    allowed_host: tuple[str, ...],
    port: int,
    concurrency: int,
    log_format: str,
) -> int:
    try:
        from waitbound.mcp._config import load_config
        from waitbound.mcp._jobs import Jobs
        from waitbound.mcp._server import create_server
    except ImportError:
        raise UsageError(
            "the MCP server needs the 'mcp' package: pip install 'waitbound[mcp]'"
        ) from None
    config = load_config(config_path)
    holders = None
    if transport == "http":
        _check_doors(host, allow_remote=allow_remote, no_auth=no_auth)
        _check_port(host, port)
        if not no_auth:
            _, holders = tokens_of(token_file or default_token_file())
    # said once the command's input is checked: a refusal stays one line alone
    for name, provider in config.providers.items():
        if (disagreement := budget_disagreement(provider.policy)) is not None:
            click.echo(f"waitbound: warning: providers.{name}.policy: {disagreement}", err=True)
    spec = store or config.store or platformdirs.user_state_path("waitbound") / "mcp.db"
    opened = open_store(spec)
    # stdout belongs to the protocol; the SDK's and httpx's chatter stays off stderr too.
    apply_log_format(log_format)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    jobs = Jobs(config, opened)
    settings = WorkerSettings(concurrency=concurrency)
    try:
        if transport == "stdio":
            create_server(jobs, settings=settings).run("stdio")
        else:
            from waitbound.mcp._http import serve_http

            server = create_server(jobs, settings=settings, worker=False)

            def listening(url: str) -> None:
                doors = "no tokens: each session reaches its own jobs" if no_auth else "tokens"
                click.echo(f"waitbound mcp: listening on {url}/mcp ({doors})", err=True)

            anyio.run(
                functools.partial(
                    serve_http,
                    server,
                    jobs,
                    host,
                    port,
                    holders=holders,
                    allowed=allowed_host,
                    settings=settings,
                    on_listening=listening,
                )
            )
    finally:
        opened.close()
    return 0


def _check_doors(host: str, *, allow_remote: bool, no_auth: bool) -> None:
    """Refuse, in one line, a --host other machines could reach without --allow-remote,
    and --no-auth anywhere but on loopback."""
    if is_loopback(host):
        return
    if no_auth:
        raise UsageError(f"--no-auth serves without tokens: only on a loopback --host, not {host}")
    if not allow_remote:
        raise UsageError(
            f"--host {host} is not a loopback address: other machines could reach the MCP "
            "server and the providers' credentials it holds; add --allow-remote to mean it "
            "(and put TLS in front)"
        )
    click.echo(
        f"waitbound: warning: --host {host} is not a loopback address: the MCP server is "
        "reachable from other machines, guarded by the tokens only (put TLS in front)",
        err=True,
    )


def _check_port(host: str, port: int) -> None:
    """Refuse at once, in one line, an address that cannot be listened on."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
