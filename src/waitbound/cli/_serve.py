"""``serve``: the HTTP service of the push path (webhooks in, SSE out) with the worker
in the same process (its token file: ``cli._tokens``). A thin adapter over
``waitbound.web``; see ``docs/serve.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Final

import anyio
import click

from waitbound._base._audit_key import load_audit_key
from waitbound._base._clock import SystemClock
from waitbound._base._errors import UsageError
from waitbound._base._secrets import credential_values
from waitbound._engine._outbox import resolve_notify_secret, webhook_signer
from waitbound._observe._metrics import metering, observe_store
from waitbound.cli._exits import EXIT_CODES_HELP
from waitbound.cli._flags import MAX_RESPONSE_OPTION, STORE_HELP, http_settings
from waitbound.cli._params import DURATION_HELP, WholeRange
from waitbound.cli._store_access import opened_store
from waitbound.cli._telemetry import LOG_FORMAT_OPTION, apply_log_format, configure_sdk
from waitbound.cli._tokens import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    TOKEN_FILE_HELP,
    default_token_file,
    is_loopback,
    tokens_of,
    warn_if_readable,
)
from waitbound.cli._worker import DRIVE_OPTIONS, credentials, drive_settings

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from waitbound.web._config import ServeConfig

__all__ = ["serve_command"]

_SERVE_IN_MEMORY: Final = (
    "webhooks and the inbox act on stored operations, and no other command can add one to it"
)
_SERVE_EXTRA: Final = (
    "waitbound serve needs the serve extra (starlette, uvicorn, sse-starlette, jinja2, "
    "itsdangerous); "
    "install it with: pip install 'waitbound[serve]'"
)


def _load_config(path: Path | None) -> ServeConfig:
    """``serve.toml`` (none: no receivers, no notify secret)."""
    from waitbound.web._config import ServeConfig, load_serve_config

    return ServeConfig() if path is None else load_serve_config(path)


@click.command(
    "serve",
    help="Serve the push path over HTTP (webhooks in, live events out) and drive the "
    "store's operations as `waitbound worker` does.\n\n"
    "The inbox, for people, is at / (sign in with your token; see "
    "docs/inbox.md). The token file holds one shared token, or lines of NAME ROLE TOKEN "
    "(roles viewer, decider, admin; see docs/serve.md). Every other endpoint but "
    "POST /webhooks/NAME (signed) and /healthz needs 'Authorization: Bearer TOKEN'; "
    "the tokens are read from --token-file, or one is made "
    "and printed once when that file does not exist. Binds 127.0.0.1 by default; another "
    "--host needs --allow-remote. A missing SQLite store is created. SIGTERM or "
    "Ctrl-C: the worker stops claiming, steps in flight finish, streams end, the store "
    "is closed, exit 0. See docs/serve.md.\n\n" + DURATION_HELP + "\n\n" + EXIT_CODES_HELP,
)
@click.option(
    "--host",
    default=DEFAULT_HOST,
    show_default=True,
    help="Address to listen on; one that is not loopback needs --allow-remote.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a --host other machines can reach (the token is then all that guards the "
    "service and the inbox: put TLS in front).",
)
@click.option(
    "--port",
    type=WholeRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port to listen on (0: any free port, printed).",
)
@click.option("--store", help=STORE_HELP)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="serve.toml: [webhooks.NAME] receivers and the [notify] secret [default: none].",
)
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), help=TOKEN_FILE_HELP)
@click.option("--no-worker", is_flag=True, help="Serve only; leave the operations to workers.")
@click.option(
    "--metrics",
    is_flag=True,
    help="Serve Prometheus text at GET /metrics (behind the token; needs the otel extra; "
    "see docs/operations.md).",
)
@click.option(
    "--metrics-public",
    is_flag=True,
    help="With --metrics: /metrics without the token (only on a loopback --host).",
)
@DRIVE_OPTIONS
@MAX_RESPONSE_OPTION
@LOG_FORMAT_OPTION
def serve_command(  # noqa: PLR0917 - click passes every option
    host: str,
    allow_remote: bool,
    port: int,
    store: str | None,
    config_file: Path | None,
    token_file: Path | None,
    no_worker: bool,
    concurrency: int,
    lease: float,
    commit_pause: float,
    per_origin_concurrency: int,
    per_origin_rate: float,
    header_for: Sequence[tuple[str, str]],
    credentials_file: Path | None,
    label_prefix: str,
    max_response_bytes: int | None,
    metrics: bool,
    metrics_public: bool,
    log_format: str,
) -> int:
    if metrics_public and not metrics:
        raise UsageError("--metrics-public goes with --metrics")
    if metrics_public and not is_loopback(host):
        raise UsageError(
            f"--metrics-public serves /metrics without the token: only on a loopback "
            f"--host, not {host}"
        )
    if not is_loopback(host) and not allow_remote:
        raise UsageError(
            f"--host {host} is not a loopback address: other machines could reach the "
            "service and the inbox; add --allow-remote to mean it (and put TLS in front)"
        )
    try:
        from waitbound.web._run import serve
        from waitbound.web._service import Service
    except ImportError:
        raise UsageError(_SERVE_EXTRA) from None
    apply_log_format(log_format)
    reader = configure_sdk(prometheus=metrics)
    config = _load_config(config_file)
    per_origin = credentials(header_for, credentials_file)
    settings = drive_settings(
        concurrency=concurrency,
        lease=lease,
        commit_pause=commit_pause,
        per_origin_concurrency=per_origin_concurrency,
        per_origin_rate=per_origin_rate,
        label_prefix=label_prefix,
    )
    http = http_settings(max_response_bytes)
    audit_key = load_audit_key()
    receivers = ", ".join(sorted(config.receivers)) or "none"
    # serve records deliveries (before any job is recorded, too): it may create the store
    with opened_store(
        store, create=True, then="start waitbound serve again", memory=_SERVE_IN_MEMORY
    ) as opened:
        token, holders = tokens_of(token_file or default_token_file())
        if config_file is not None and config.holds_secrets:
            warn_if_readable(config_file, "serve config")
        if not is_loopback(host):
            click.echo(
                f"waitbound: warning: --host {host} is not a loopback address: the service "
                "and the inbox are reachable from other machines, guarded by the token only "
                "(put TLS in front)",
                err=True,
            )
        notify_secret = resolve_notify_secret(None, config.notify_secret)
        if notify_secret is not None:
            webhook_signer(notify_secret)  # $WAITBOUND_NOTIFY_SECRET too: one line, at start
        held = [v for headers in per_origin.table.values() for v in credential_values(headers)]
        service = Service(
            store=opened,
            config=config,
            clock=SystemClock(),
            token=token,
            secrets=(*held, *([notify_secret] if notify_secret else [])),
            holders=holders,
        )
        signing = "signed" if notify_secret else "left pending: no [notify] secret"

        def listening(url: str) -> None:
            worker = "off" if no_worker else "on"
            click.echo(
                f"waitbound serve: listening on {url} (worker {worker}; receivers: {receivers}; "
                f"completion webhooks {signing})"
            )
            click.echo(f"inbox: {url}/")

        routes, public = _metrics_routes(reader, public=metrics_public)

        async def main() -> None:
            # the store's gauges, for /metrics and for OTLP export alike
            with observe_store(opened, service.clock) if metering() else nullcontext():
                await served()

        async def served() -> None:
            await serve(
                service,
                host,
                port,
                worker=not no_worker,
                worker_settings=settings,
                headers=per_origin.bound() if per_origin.table else None,
                notify_secret=notify_secret,
                on_listening=listening,
                http=http,
                audit_key=audit_key,
                routes=routes,
                public=public,
            )

        anyio.run(main)
    return 0


def _metrics_routes(
    reader: object | None, *, public: bool
) -> tuple[list[BaseRoute], Callable[[str], bool]]:
    """The ``/metrics`` route over the Prometheus reader's registry (none without
    *reader*), and which paths need no token (``/metrics`` too when *public*)."""
    from waitbound.web._auth import is_public

    if reader is None:
        return [], is_public
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    from waitbound.web._metrics import metrics_route

    def collect() -> bytes:
        return generate_latest(REGISTRY)

    def open_path(path: str) -> bool:
        return path == "/metrics" or is_public(path)

    return [metrics_route(collect, CONTENT_TYPE_LATEST)], open_path if public else is_public
