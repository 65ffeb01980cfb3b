"""The ``waitbound`` command line. A thin adapter over the public API."""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO, TypeVar

import anyio
import click
from rich.console import Console

import waitbound
from waitbound import (
    AuditEvent,
    Operation,
    Outcome,
    Policy,
    Profile,
    Record,
    Store,
    Submission,
    UsageError,
    WaitboundError,
    WorkerSettings,
)
from waitbound._json import JSON
from waitbound._urls import redact_url
from waitbound.cli._params import duration, parse_header, split_values
from waitbound.cli._render import printable, record_summary, story_line
from waitbound.profiles import builtin_names, builtin_profile, resolve_profile

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])

_INLINE_LISTS = ("pending", "succeeded", "partial", "failed", "canceled", "expired")
_INLINE_PATHS = {
    "state_path": "state",
    "result_path": "result",
    "error_path": "error",
    "job_id_path": "job_id",
    "poll_hint_path": "poll_hint",
}
_STORE_HELP = (
    "SQLite file, PostgreSQL DSN or 'memory:'; default $WAITBOUND_STORE or the user state "
    "directory."
)


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    invoke_without_command=True,
)
@click.version_option(waitbound.__version__, prog_name="waitbound")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Wait on long-running operations at external APIs: bounded, durable, auditable."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def _profile(profile_spec: str | None, inline: dict[str, object]) -> Profile:
    """The profile: a file or built-in name, with inline flags replacing its keys."""
    table: dict[str, JSON] = {}
    name = "inline"
    if profile_spec is not None:
        loaded = resolve_profile(profile_spec)
        table, name = dict(loaded.source), loaded.name
    for option, key in _INLINE_PATHS.items():
        if inline.get(option) is not None:
            table[key] = str(inline[option])
    for key in _INLINE_LISTS:
        values = split_values(inline.get(key))  # type: ignore[arg-type]
        if values is not None:
            table[key] = values
    if inline.get("require"):
        table["require_on_success"] = list(inline["require"])  # type: ignore[call-overload]
    if not table:
        raise UsageError("no profile: give --profile FILE|NAME or --state-path with value lists")
    return waitbound.parse_profile(table, name=name)


def _flag_names(message: str) -> str:
    """Name the command-line flags in a Policy error (``max_delay_s`` → ``--max-delay``)."""
    return re.sub(
        r"\b(deadline|max_requests|max_transport_failures|max_rate_limited|base_delay"
        r"|max_delay|min_delay|not_found_grace|request_timeout)(?:_s)?\b",
        lambda m: "--" + m.group(1).replace("_", "-"),
        message,
    )


def _policy(options: dict[str, object]) -> Policy:
    names = {
        "deadline": "deadline_s",
        "max_requests": "max_requests",
        "max_transport_failures": "max_transport_failures",
        "max_rate_limited": "max_rate_limited",
        "base_delay": "base_delay_s",
        "max_delay": "max_delay_s",
        "min_delay": "min_delay_s",
        "not_found_grace": "not_found_grace_s",
        "request_timeout": "request_timeout_s",
    }
    try:
        return Policy(**{field: options.pop(flag) for flag, field in names.items()})  # type: ignore[arg-type]
    except UsageError as exc:
        raise UsageError(_flag_names(str(exc))) from None


class _Progress:
    """Story lines on stderr as events are persisted (when stderr is a terminal)."""

    def __init__(self, enabled: bool | None) -> None:
        show = sys.stderr.isatty() if enabled is None else enabled
        self.console = Console(stderr=True, highlight=False) if show else None

    def __call__(self, event: AuditEvent) -> None:
        if self.console is not None:
            self.console.print(story_line(event), markup=False, soft_wrap=True)

    def note(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, markup=False, soft_wrap=True)


class Interrupted(WaitboundError):
    """Ctrl-C or SIGTERM while driving an operation; the record is saved."""

    def __init__(self, operation_id: str) -> None:
        self.operation_id = operation_id
        super().__init__(
            f"interrupted; operation {operation_id} is saved: resume it with "
            f"'waitbound wait --operation-id {operation_id}'"
        )


def _stop_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt: the record is persisted after every step."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _drive(operation_id: str, store: str | None, action: Callable[[Store], _T]) -> _T:
    """Open the store, run *action* on it, close it; Ctrl-C says how to resume."""
    opened = waitbound.open_store(store)
    _stop_on_sigterm()
    try:
        return action(opened)
    except KeyboardInterrupt:
        raise Interrupted(operation_id) from None
    finally:
        opened.close()


def _print_outcome(outcome: Outcome, as_json: bool) -> int:
    if as_json:
        click.echo(json.dumps(outcome.as_json(), ensure_ascii=False))
    else:
        reason = f" ({outcome.reason.value})" if outcome.reason else ""
        status = outcome.outcome.value if outcome.outcome else "still waiting"
        click.echo(f"{outcome.operation_id}: {status}{reason}")
        click.echo(printable(outcome.message))
        for label, value, limit in (
            ("job id", outcome.job_id, 200),
            ("request id", outcome.request_id, 200),
            ("error", outcome.error, 500),
            ("counts", outcome.counts, 500),
            ("usage", outcome.usage, 500),
            ("result", outcome.result, 2000),
        ):
            if value is not None:
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                click.echo(f"{label}: {printable(text[:limit])}")
    return outcome.exit_code


def _options(*decorators: Callable[[_F], _F]) -> Callable[[_F], _F]:
    def apply(function: _F) -> _F:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


PROFILE_OPTIONS = _options(
    click.option("--profile", "profile_spec", help="Profile file (JSON/TOML) or built-in name."),
    click.option("--state-path", help="JMESPath to the state value in the status body."),
    click.option("--pending", help="Comma-separated pending state values."),
    click.option("--succeeded", help="Comma-separated succeeded state values."),
    click.option("--partial", help="Comma-separated partial-success state values."),
    click.option("--failed", help="Comma-separated failed state values."),
    click.option("--canceled", help="Comma-separated canceled state values."),
    click.option("--expired", help="Comma-separated expired state values."),
    click.option("--require", multiple=True, help="JMESPath non-null on success (repeatable)."),
    click.option("--result-path", help="JMESPath to the result in the result document."),
    click.option("--error-path", help="JMESPath to the provider's error."),
    click.option("--job-id-path", help="JMESPath to the provider's job id."),
    click.option("--poll-hint-path", help="JMESPath to a poll hint in seconds."),
)
POLICY_OPTIONS = _options(
    click.option("--deadline", callback=duration, default="10m", show_default=True),
    click.option("--max-requests", type=click.IntRange(min=1), default=30, show_default=True),
    click.option(
        "--max-transport-failures", type=click.IntRange(min=0), default=3, show_default=True
    ),
    click.option("--max-rate-limited", type=click.IntRange(min=0), default=5, show_default=True),
    click.option("--base-delay", callback=duration, default="5s", show_default=True),
    click.option("--max-delay", callback=duration, default="120s", show_default=True),
    click.option("--min-delay", callback=duration, help="Delay floor [default: min(1s, base)]."),
    click.option("--not-found-grace", callback=duration, default="30s", show_default=True),
    click.option("--request-timeout", callback=duration, default="30s", show_default=True),
    click.option("--result-url", help="Result endpoint, fetched once after a terminal success."),
    click.option("--cancel-url", help="Cancel endpoint, when no receipt or profile names one."),
    click.option(
        "--cancel-on-deadline", is_flag=True, help="Send one cancel when the deadline passes."
    ),
)
RUN_OPTIONS = _options(
    click.option("--header", "headers", multiple=True, help="'Name: value': sent, never stored."),
    click.option(
        "--trust-origin",
        "trusted_origins",
        multiple=True,
        help="Another origin (https://host[:port]) that may receive the headers.",
    ),
    click.option("--operation-id", help="Our id for the operation; an existing one is resumed."),
    click.option("--store", help=_STORE_HELP),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout."),
    click.option(
        "--progress/--quiet", default=None, help="Story lines on stderr [default: if a terminal]."
    ),
)
SUBMIT_OPTIONS = _options(
    click.argument(
        "method", type=click.Choice(["POST", "PUT", "PATCH", "DELETE", "GET"], case_sensitive=False)
    ),
    click.argument("url"),
    click.option(
        "--body",
        "body_file",
        type=click.File("rb"),
        help="Request body from FILE, or - for standard input.",
    ),
    click.option("--content-type", default="application/json", show_default=True),
    click.option("--idempotency-key", help="Sent in the profile's idempotency header."),
    click.option(
        "--max-submit-attempts",
        type=click.IntRange(min=1, max=10),
        default=3,
        show_default=True,
        help="With an idempotency key: sends of a submission that got no answer.",
    ),
)


@cli.command()
@click.argument("status_url", required=False)
@PROFILE_OPTIONS
@POLICY_OPTIONS
@RUN_OPTIONS
@click.option(
    "--detach", is_flag=True, help="Record the operation for `waitbound worker`; return at once."
)
def wait(  # noqa: PLR0917 - click passes every option
    status_url: str | None,
    detach: bool,
    headers: Sequence[str],
    trusted_origins: Sequence[str],
    operation_id: str | None,
    store: str | None,
    as_json: bool,
    progress: bool | None,
    result_url: str | None,
    cancel_url: str | None,
    cancel_on_deadline: bool,
    profile_spec: str | None,
    **options: object,
) -> int:
    """Wait on STATUS_URL until the job has one honest outcome.

    Exit codes: 0 succeeded; 1 completed_with_errors, failed, canceled or expired;
    3 timed_out or escalated; 2 a usage or configuration error (nothing stored).
    Resume an operation with --operation-id alone (its stored deadline and budgets apply).
    """
    sent = dict(parse_header(h) for h in headers)
    policy = _policy(options)
    operation = None
    if status_url is not None:
        operation = Operation(
            status_url=status_url,
            profile=_profile(profile_spec, options),
            policy=policy,
            result_url=result_url,
            cancel_url=cancel_url,
            cancel_on_deadline=cancel_on_deadline,
            trusted_origins=tuple(trusted_origins),
        )
    elif operation_id is None:
        raise UsageError("give a STATUS_URL to wait on, or --operation-id to resume")
    op_id = operation_id or waitbound.new_operation_id()
    if detach:
        if operation is None:
            raise UsageError("--detach records a new operation: give its STATUS_URL")
        started = _drive(
            op_id,
            store,
            lambda opened: waitbound.start(operation, operation_id=op_id, store=opened),
        )
        return _print_outcome(started, as_json)
    sink = _Progress(progress)
    sink.note(f"operation {op_id}")
    outcome = _drive(
        op_id,
        store,
        lambda opened: waitbound.wait(
            operation, operation_id=op_id, store=opened, headers=sent, on_event=sink
        ),
    )
    return _print_outcome(outcome, as_json)


@cli.command()
@click.option("--store", help=_STORE_HELP)
@click.option("--concurrency", type=click.IntRange(1, 10_000), default=16, show_default=True)
@click.option("--until-idle", is_flag=True, help="Exit 0 once no operation is waiting.")
@click.option("--lease", callback=duration, default="30s", show_default=True)
@click.option(
    "--per-origin-concurrency", type=click.IntRange(1, 10_000), default=8, show_default=True
)
@click.option(
    "--per-origin-rate",
    type=click.FloatRange(min=0.001),
    default=20.0,
    show_default=True,
    help="Requests per second to one origin (per worker).",
)
@click.option("--header", "headers", multiple=True, help="'Name: value': sent, never stored.")
@click.option("--progress/--quiet", default=None, help="Story lines on stderr.")
def worker(  # noqa: PLR0917 - click passes every option
    store: str | None,
    concurrency: int,
    until_idle: bool,
    lease: float,
    per_origin_concurrency: int,
    per_origin_rate: float,
    headers: Sequence[str],
    progress: bool | None,
) -> int:
    """Drive every due operation in the store; many workers may share one store.

    Each operation is owned by one worker at a time (a lease held only while deciding
    and sending one request). SIGTERM or Ctrl-C: the requests in flight finish and
    are persisted, leases are released, and the worker exits 0.
    """
    sent = dict(parse_header(h) for h in headers)
    settings = WorkerSettings(
        concurrency=concurrency,
        until_idle=until_idle,
        lease_s=lease,
        per_origin_concurrency=per_origin_concurrency,
        per_origin_rate=per_origin_rate,
        per_origin_burst=max(1, int(per_origin_rate)),
    )
    opened = waitbound.open_store(store)
    sink = _Progress(progress)

    async def main() -> int:
        stop = anyio.Event()
        async with anyio.create_task_group() as group:

            async def on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        stop.set()
                        return

            group.start_soon(on_signal)
            steps = await waitbound.work(
                opened, settings=settings, headers=sent, on_event=sink, stop=stop
            )
            group.cancel_scope.cancel()
        return steps

    try:
        steps = anyio.run(main)
    finally:
        opened.close()
    sink.note(f"worker stopped after {steps} steps")
    return 0


def _submission(options: dict[str, Any]) -> Submission:
    """The job request from the flags of ``submit`` / ``run`` (popped from *options*)."""
    policy = _policy(options)
    body_file: BinaryIO | None = options.pop("body_file")
    body = body_file.read() if body_file is not None else b""
    return Submission(
        method=str(options.pop("method")).upper(),
        url=options.pop("url"),
        profile=_profile(options.pop("profile_spec"), options),
        policy=policy,
        body=body,
        content_type=options.pop("content_type") if body else None,
        idempotency_key=options.pop("idempotency_key"),
        max_submit_attempts=options.pop("max_submit_attempts"),
        result_url=options.pop("result_url"),
        cancel_url=options.pop("cancel_url"),
        cancel_on_deadline=bool(options.pop("cancel_on_deadline")),
        trusted_origins=tuple(options.pop("trusted_origins")),
    )


def _submitted(record: Record, as_json: bool) -> int:
    receipt: dict[str, JSON] = {
        "operation_id": record.operation_id,
        "phase": record.phase.value,
        "job_id": record.job_id,
        "status_url": redact_url(record.status_url or ""),
        "next_poll_at": record.next_poll_at.isoformat(),
        "idempotency_key": record.idempotency_key,
        "submit_fingerprint": record.submit_fingerprint,
    }
    if as_json:
        click.echo(json.dumps(receipt, ensure_ascii=False))
    else:
        click.echo(f"{record.operation_id}: submitted; job {printable(record.job_id or '(no id)')}")
        click.echo(f"wait for it: waitbound wait --operation-id {record.operation_id}")
    return 0


def _submit_and_maybe_wait(options: dict[str, Any], *, wait_for_outcome: bool) -> int:
    """The body of ``submit`` and ``run``: they take the same flags."""
    sent = dict(parse_header(h) for h in options.pop("headers"))
    submission = _submission(options)
    op_id = options.pop("operation_id") or waitbound.new_operation_id()
    sink = _Progress(options.pop("progress"))
    if wait_for_outcome:
        sink.note(f"operation {op_id}")
    send = waitbound.run if wait_for_outcome else waitbound.submit

    def act(opened: Store) -> tuple[Outcome, Record | None]:
        outcome = send(submission, operation_id=op_id, store=opened, headers=sent, on_event=sink)
        return outcome, opened.get(op_id)

    outcome, record = _drive(op_id, options.pop("store"), act)
    as_json = bool(options.pop("as_json"))
    if outcome.done or record is None:
        return _print_outcome(outcome, as_json)
    return _submitted(record, as_json)


@cli.command()
@SUBMIT_OPTIONS
@PROFILE_OPTIONS
@POLICY_OPTIONS
@RUN_OPTIONS
def submit(**options: Any) -> int:
    """Send a job request (METHOD URL) once and record its receipt; do not wait.

    The operation is stored before the request is sent. With --json, prints the
    operation id, job id and status URL. Wait for it with `waitbound wait --operation-id`.
    """
    return _submit_and_maybe_wait(options, wait_for_outcome=False)


@cli.command()
@SUBMIT_OPTIONS
@PROFILE_OPTIONS
@POLICY_OPTIONS
@RUN_OPTIONS
def run(**options: Any) -> int:
    """Submit a job (METHOD URL), then wait on it: `submit` and `wait` in one command.

    Same flags as `submit`; same output and exit codes as `wait`.
    """
    return _submit_and_maybe_wait(options, wait_for_outcome=True)


@cli.command(name="cancel")
@click.argument("operation_id")
@click.option("--reason", help="Why; kept in the audit log.")
@click.option("--requested-by", help="Who asks [default: $USER@host].")
@click.option("--header", "headers", multiple=True, help="'Name: value': sent, never stored.")
@click.option("--store", help=_STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--progress/--quiet", default=None, help="Story lines on stderr.")
def cancel_command(  # noqa: PLR0917 - click passes every option
    operation_id: str,
    reason: str | None,
    requested_by: str | None,
    headers: Sequence[str],
    store: str | None,
    as_json: bool,
    progress: bool | None,
) -> int:
    """Cancel an operation's job through its documented cancel action, then wait for it.

    Refused (exit 2) when the job is not cancelable: the last status answer did not
    say so and the profile does not declare it always cancelable.
    """
    sent = dict(parse_header(h) for h in headers)
    outcome = _drive(
        operation_id,
        store,
        lambda opened: waitbound.cancel(
            operation_id,
            reason=reason,
            requested_by=requested_by,
            store=opened,
            headers=sent,
            on_event=_Progress(progress),
        ),
    )
    return _print_outcome(outcome, as_json)


@cli.group(invoke_without_command=True)
@click.pass_context
def profiles(ctx: click.Context) -> None:
    """List the built-in profiles; `profiles show NAME` prints one."""
    if ctx.invoked_subcommand is None:
        for name in builtin_names():
            description = str(builtin_profile(name).source.get("description", ""))
            click.echo(f"{name:<20} {description.split('. ', maxsplit=1)[0][:76]}")


@profiles.command(name="show")
@click.argument("name")
def profiles_show(name: str) -> int:
    """Print the built-in profile NAME as JSON."""
    click.echo(json.dumps(dict(builtin_profile(name).source), indent=2, ensure_ascii=False))
    return 0


@cli.command()
@click.argument("operation_id")
@click.option("--store", help=_STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def show(operation_id: str, store: str | None, as_json: bool) -> int:
    """Show an operation's record and its audit story, one line per event."""
    opened = waitbound.open_store(store)
    try:
        record = opened.get(operation_id)
        if record is None:
            raise waitbound.OperationNotFoundError(operation_id)
        events = opened.audit(operation_id)
    finally:
        opened.close()
    try:
        waitbound.verify_chain(events, head=(record.audit_seq, record.audit_head))
        chain = "intact"
    except waitbound.StoreError as exc:
        chain = f"broken: {exc}"
    if as_json:
        document: dict[str, JSON] = {
            "record": record.to_json(),
            "outcome": record.to_outcome().as_json() if record.is_finished else None,
            "audit_chain": chain,
            "audit": [
                {
                    "seq": s.seq,
                    "at": s.event.at.isoformat(),
                    "kind": s.event.kind,
                    "summary": s.event.summary,
                    "data": dict(s.event.data),
                    "hash": s.hash,
                }
                for s in events
            ],
        }
        click.echo(json.dumps(document, ensure_ascii=False))
        return 0
    for line in record_summary(record):
        click.echo(line)
    click.echo(f"audit ({len(events)} events, chain {chain}):")
    for stored in events:
        click.echo(f"  {stored.seq:>3} {story_line(stored.event)}")
    return 0


@cli.command()
@click.argument("scenario_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port on 127.0.0.1 (0 picks a free one).",
)
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append every answered request to this file as JSON lines.",
)
def sim(scenario_file: Path, port: int, log_path: Path | None) -> int:
    """Serve a scripted provider (a scenario file) on 127.0.0.1 until stopped."""
    from waitbound.sim import Simulator, load_scenario

    scenario = load_scenario(scenario_file)
    simulator = Simulator(scenario, port=port, log_path=log_path)
    _stop_on_sigterm()
    try:
        simulator.start()
    except OSError as exc:
        raise UsageError(f"cannot serve on 127.0.0.1:{port} ({exc.strerror})") from None
    click.echo(f"serving scenario {scenario.id} on {simulator.base_url}", err=False)
    sys.stdout.flush()
    try:
        simulator.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        simulator.stop()
    return 0
