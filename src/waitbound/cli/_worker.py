"""``worker``: drive every due operation in a store, with credentials bound to origins."""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import anyio
import click

from waitbound._base._errors import StoreError, UsageError, WaitboundError
from waitbound._base._json import JSON
from waitbound._engine._outbox import resolve_notify_secret, webhook_signer
from waitbound._engine._worker import WorkerSettings, work
from waitbound._model._audit import AuditEvent, EventKind
from waitbound.cli._credentials import OriginCredentials, from_flags, load_credentials
from waitbound.cli._exits import EXIT_CODES_HELP
from waitbound.cli._flags import MAX_RESPONSE_OPTION, STORE_HELP, http_settings, options
from waitbound.cli._params import (
    DURATION_HELP,
    STORED_TEXT,
    NumberRange,
    WholeRange,
    duration,
    positive_duration,
)
from waitbound.cli._progress import Progress
from waitbound.cli._render import worker_summary_lines
from waitbound.cli._store_access import opened_store, store_failed
from waitbound.cli._telemetry import LOG_FORMAT_OPTION, apply_log_format

__all__ = ["DRIVE_OPTIONS", "WORKER_IN_MEMORY", "drive_settings", "worker"]

WORKER_IN_MEMORY = "no other command can add an operation to it, so a worker has nothing to drive"


def credentials(
    header_for: Sequence[tuple[str, str]], credentials_file: Path | None
) -> OriginCredentials:
    """The worker's credentials: ``--header-for`` flags and a ``--credentials`` file.

    Raises:
        UsageError: a bad origin, header or file (one line naming it).
    """
    found = from_flags(header_for)
    if credentials_file is not None:
        found = found.merged(load_credentials(credentials_file), "--credentials")
    return found


def drive_settings(
    *,
    concurrency: int,
    lease: float,
    commit_pause: float,
    per_origin_concurrency: int,
    per_origin_rate: float,
    label_prefix: str,
    until_idle: bool = False,
) -> WorkerSettings:
    """The worker's settings from :data:`DRIVE_OPTIONS`' flags (``worker``, and the
    worker ``serve`` runs, which has no ``--until-idle``): the burst per origin is the
    rate's whole part, at least 1."""
    return WorkerSettings(
        concurrency=concurrency,
        until_idle=until_idle,
        lease_s=lease,
        commit_pause_s=commit_pause,
        per_origin_concurrency=per_origin_concurrency,
        per_origin_rate=per_origin_rate,
        per_origin_burst=max(1, int(per_origin_rate)),
        label_prefix=label_prefix,
    )


DRIVE_OPTIONS = options(
    click.option(
        "--concurrency",
        type=WholeRange(1, 10_000),
        default=16,
        show_default=True,
        help="Operations driven at once: requests in flight together (1 to 10000).",
    ),
    click.option(
        "--lease",
        callback=positive_duration,
        default="30s",
        show_default=True,
        metavar="DURATION",
        help="How long a reserved operation is this worker's; a request's timeout ends 1 s "
        "before it (a tenth of the lease when shorter).",
    ),
    click.option(
        "--commit-pause",
        callback=duration,
        default="2ms",
        show_default=True,
        metavar="DURATION",
        help="How long the answers' group commit waits for the other requests in flight, "
        "so one transaction writes many (0 to 100ms; 0: write each at once). Reservations "
        "are never delayed.",
    ),
    click.option(
        "--per-origin-concurrency",
        type=WholeRange(1, 10_000),
        default=8,
        show_default=True,
        help="Requests in flight together to one origin (1 to 10000).",
    ),
    click.option(
        "--per-origin-rate",
        type=NumberRange(min=0.001, max=1_000_000),
        default=20.0,
        show_default=True,
        help="Requests per second to one origin (per worker).",
    ),
    click.option(
        "--header-for",
        "header_for",
        nargs=2,
        multiple=True,
        metavar="ORIGIN 'NAME: VALUE'",
        help="A header for one origin (scheme://host[:port]) only (repeatable); never stored.",
    ),
    click.option(
        "--credentials",
        "credentials_file",
        type=click.Path(dir_okay=False, path_type=Path),
        help="TOML file of [[credentials]] origin = …, headers = {…} (${ENV} expanded).",
    ),
    click.option(
        "--label-prefix",
        type=STORED_TEXT,
        default="",
        help="Drive only operations whose label starts with this.",
    ),
)
"""The flags of the worker's driving, shared by ``waitbound worker`` and ``serve``."""


@click.command(
    help="Drive every due operation in the store; many workers may share one store.\n\n"
    "Each operation is owned by one worker at a time (a lease held only while deciding "
    "and sending one request). Headers are bound to origins (--header-for ORIGIN, "
    "--credentials FILE): an operation gets only those of the origin it named. "
    "SIGTERM or Ctrl-C: the requests in flight finish and are persisted, leases are "
    "released, and the worker prints its summary and exits 0. The store must exist.\n\n"
    + DURATION_HELP
    + "\n\n"
    "With $WAITBOUND_NOTIFY_SECRET (whsec_…) set, the worker also delivers the store's "
    "completion webhooks (operations created with --notify URL), signed with it and "
    "retried with backoff; without it they stay pending (see `waitbound deliveries`).\n\n"
    + EXIT_CODES_HELP
)
@click.option("--store", help=STORE_HELP)
@click.option("--until-idle", is_flag=True, help="Exit 0 once no operation is waiting.")
@DRIVE_OPTIONS
@click.option("--header", "headers", multiple=True, hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print the exit summary as one JSON object.")
@click.option("--progress/--quiet", default=None, help="Story lines on stderr.")
@MAX_RESPONSE_OPTION
@LOG_FORMAT_OPTION
def worker(  # noqa: PLR0917 - click passes every option
    store: str | None,
    concurrency: int,
    until_idle: bool,
    lease: float,
    commit_pause: float,
    per_origin_concurrency: int,
    per_origin_rate: float,
    header_for: Sequence[tuple[str, str]],
    credentials_file: Path | None,
    headers: Sequence[str],
    label_prefix: str,
    as_json: bool,
    progress: bool | None,
    max_response_bytes: int | None,
    log_format: str,
) -> int:
    if log_format == "json":  # the story goes to the JSON log (waitbound.events) instead
        apply_log_format(log_format)
        progress = False
    if headers:
        raise UsageError(
            "worker takes no --header (it would go to every origin in the store); "
            "give --header-for ORIGIN 'Name: value' or --credentials FILE"
        )
    per_origin = credentials(header_for, credentials_file)
    notify_secret = resolve_notify_secret(None, None)  # $WAITBOUND_NOTIFY_SECRET
    if notify_secret is not None:
        webhook_signer(notify_secret)  # a secret that cannot sign: one line, before starting
    settings = drive_settings(
        concurrency=concurrency,
        until_idle=until_idle,
        lease=lease,
        commit_pause=commit_pause,
        per_origin_concurrency=per_origin_concurrency,
        per_origin_rate=per_origin_rate,
        label_prefix=label_prefix,
    )
    http = http_settings(max_response_bytes)
    sink = Progress(progress, every_event=True, live=False)
    finished: Counter[str] = Counter()
    stopped = "idle" if until_idle else "signal"

    def on_event(event: AuditEvent) -> None:
        if event.kind == EventKind.FINISHED and isinstance(event.data.get("outcome"), str):
            finished[str(event.data["outcome"])] += 1
        sink(event)

    with opened_store(store, then="start the worker again", memory=WORKER_IN_MEMORY) as opened:

        async def main() -> int:
            nonlocal stopped
            stop = anyio.Event()
            async with anyio.create_task_group() as group:

                async def on_signal() -> None:
                    nonlocal stopped
                    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                        async for _ in signals:
                            stopped = "signal"
                            stop.set()
                            return

                group.start_soon(on_signal)
                steps = await work(
                    opened,
                    settings=settings,
                    # PostgreSQL: LISTEN/NOTIFY wakes it for new and resumed operations
                    wake=getattr(opened, "wait_for_wakeup", None),
                    # none held: no story line says a request went without them
                    headers=per_origin.bound() if per_origin.table else None,
                    on_event=on_event,
                    stop=stop,
                    http=http,
                    notify_secret=notify_secret,
                )
                group.cancel_scope.cancel()
            return steps

        errors: list[JSON] = []
        steps = 0
        failure: WaitboundError | None = None
        try:
            steps = anyio.run(main)
        except WaitboundError as exc:
            failure = exc
            errors.append(str(exc))
            stopped = "error"
        try:
            waiting, _ = opened.pending_summary()
        except StoreError:
            waiting = -1
    summary: dict[str, JSON] = {
        "stopped": stopped,
        "steps": steps,
        "finished": dict(sorted(finished.items())),
        "operations_finished": sum(finished.values()),
        "still_waiting": waiting if waiting >= 0 else None,
        "errors": errors,
    }
    sink.close()
    if as_json or log_format == "json":  # a JSON log: the summary is JSON too
        click.echo(json.dumps(summary, ensure_ascii=False))
    else:
        for line in worker_summary_lines(summary):
            click.echo(line)
    if isinstance(failure, StoreError) and not isinstance(failure, UsageError):
        raise store_failed(failure, "start the worker again")
    if failure is not None:
        raise failure
    return 0
