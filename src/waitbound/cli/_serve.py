"""``serve``: the HTTP service of the push path (webhooks in, SSE out) with the worker
in the same process; and its token file. A thin adapter over ``waitbound.web``; see
``docs/serve.md``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import stat
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Final

import anyio
import click
import platformdirs

import waitbound
from waitbound import UsageError
from waitbound._base._config_file import read_bounded
from waitbound._base._private_dirs import make_private_dirs
from waitbound._base._secrets import credential_values
from waitbound._engine._outbox import resolve_notify_secret, webhook_signer
from waitbound._observe._metrics import metering, observe_store
from waitbound.cli._exits import EXIT_CODES_HELP
from waitbound.cli._flags import MAX_RESPONSE_OPTION, STORE_HELP, http_settings
from waitbound.cli._params import DURATION_HELP, WholeRange
from waitbound.cli._store_access import opened_store
from waitbound.cli._telemetry import LOG_FORMAT_OPTION, apply_log_format, configure_sdk
from waitbound.cli._worker import DRIVE_OPTIONS, credentials, drive_settings

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from waitbound.web._config import ServeConfig
    from waitbound.web._tokens import Holder

__all__ = [
    "DEFAULT_PORT",
    "TOKEN_FILE_HELP",
    "default_token_file",
    "is_loopback",
    "read_holders",
    "read_or_create_token",
    "read_token",
    "serve_command",
    "tokens_of",
    "warn_if_readable",
]

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
TOKEN_FILE_HELP: Final = (
    "File holding the service's bearer token [default: the user config directory's "
    "waitbound/serve-token]."
)
_SERVE_IN_MEMORY: Final = (
    "webhooks and the inbox act on stored operations, and no other command can add one to it"
)
_MAX_TOKEN_FILE_BYTES: Final = 4096
_MIN_TOKEN_CHARS: Final = 16
_TOKEN: Final = re.compile(r"[A-Za-z0-9._~+/-]+=*")
"""RFC 6750 §2.1 ``b64token``: what an ``Authorization: Bearer`` value may be."""
_SERVE_EXTRA: Final = (
    "waitbound serve needs the serve extra (starlette, uvicorn, sse-starlette, jinja2, "
    "itsdangerous); "
    "install it with: pip install 'waitbound[serve]'"
)


def default_token_file() -> Path:
    """Where the token lives unless ``--token-file`` says: the user config directory's
    ``waitbound/serve-token`` (``platformdirs``)."""
    return platformdirs.user_config_path("waitbound") / "serve-token"


def read_token(path: Path) -> str:
    """The token in *path*: its text without surrounding whitespace.

    Raises:
        UsageError: the file is missing, unreadable, not a regular file (a FIFO would
            block), too large, empty, or holds something that is not one bearer token
            (never quoted).
    """
    try:
        raw = read_bounded(path, _MAX_TOKEN_FILE_BYTES)
    except FileNotFoundError:
        raise UsageError(
            f"token file {path} does not exist; start `waitbound serve` once to create it, "
            "or give --token-file"
        ) from None
    except OSError as exc:
        raise UsageError(f"token file {path} cannot be read ({exc.strerror or exc})") from None
    if len(raw) > _MAX_TOKEN_FILE_BYTES:
        raise UsageError(f"token file {path} is larger than {_MAX_TOKEN_FILE_BYTES} bytes")
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        token = "\x00"
    if not token:
        raise UsageError(f"token file {path} is empty; put a token in it or delete it")
    if not _TOKEN.fullmatch(token) or len(token) < _MIN_TOKEN_CHARS:
        raise UsageError(
            f"token file {path} does not hold one bearer token (at least {_MIN_TOKEN_CHARS} "
            "of A-Z a-z 0-9 - . _ ~ + /, on one line): give a file holding only your own "
            "token, not a file of named tokens"
        )
    return token


def read_or_create_token(path: Path) -> tuple[str, bool]:
    """The token in *path*; when there is no such file, a new one
    (``secrets.token_urlsafe(32)``) written there with mode 0600 (its folder 0700).

    Returns:
        The token, and whether it was created now.

    Raises:
        UsageError: as :func:`read_token`, or the file cannot be created.
    """
    if path.exists() or path.is_symlink():
        return read_token(path), False
    token = secrets.token_urlsafe(32)
    try:
        make_private_dirs(path.parent)
    except OSError as exc:
        raise UsageError(f"token file {path} cannot be created ({exc.strerror or exc})") from None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return read_token(path), False
    except OSError as exc:
        raise UsageError(f"token file {path} cannot be created ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(token + "\n")
            file.flush()
            os.fsync(file.fileno())
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise UsageError(f"token file {path} cannot be written ({exc.strerror or exc})") from None
    return token, True


def _loose_mode(path: Path) -> int | None:
    """The file's mode when group or others may read it, else ``None``."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None
    return mode if mode & 0o077 else None


def is_loopback(host: str) -> bool:
    """Whether *host* names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _load_config(path: Path | None) -> ServeConfig:
    """``serve.toml`` (none: no receivers, no notify secret)."""
    from waitbound.web._config import ServeConfig, load_serve_config

    return ServeConfig() if path is None else load_serve_config(path)


def read_holders(path: Path) -> tuple[Holder, ...]:
    """The tokens of a token file: one token (the shared one, an ``admin``), or lines of
    ``NAME ROLE TOKEN`` (see ``waitbound.web._tokens`` and ``docs/serve.md``).

    Raises:
        UsageError: as :func:`read_token`; or a line that is not a token nor
            ``NAME ROLE TOKEN`` (one line naming the file and line, never a token).
    """
    from waitbound.web._tokens import parse_tokens

    try:
        raw = read_bounded(path, _MAX_TOKEN_FILE_BYTES * 16)
    except FileNotFoundError:
        raise UsageError(f"token file {path} does not exist") from None
    except OSError as exc:
        raise UsageError(f"token file {path} cannot be read ({exc.strerror or exc})") from None
    if len(raw) > _MAX_TOKEN_FILE_BYTES * 16:
        raise UsageError(f"token file {path} is larger than {_MAX_TOKEN_FILE_BYTES * 16} bytes")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise UsageError(f"token file {path} is not ASCII text") from None
    return parse_tokens(text, f"token file {path}")


def warn_if_readable(path: Path, what: str) -> None:
    """Warn (stderr) when *path* may be read by group or others: it holds secrets."""
    if (mode := _loose_mode(path)) is not None:
        click.echo(
            f"waitbound: warning: {what} {path} can be read by other users "
            f"(mode {mode:04o}); chmod 600 it",
            err=True,
        )


def tokens_of(path: Path) -> tuple[str, tuple[Holder, ...]]:
    """The service's tokens (and the shared one, or the first): a new shared token is
    made and printed once when the file does not exist; a token file others may read is
    warned about."""
    from waitbound.web._tokens import ADMIN, Holder

    if not path.exists() and not path.is_symlink():
        token, created = read_or_create_token(path)
        if created:
            click.echo(f"a new token was written to {path}: {token}")
            return token, (Holder(name=None, role=ADMIN, token=token),)
    holders = read_holders(path)
    warn_if_readable(path, "token file")
    shared = next((h for h in holders if h.shared), holders[0])
    return shared.token, holders


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
    audit_key = waitbound.load_audit_key()
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
            clock=waitbound.SystemClock(),
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
