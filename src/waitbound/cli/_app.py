"""The ``waitbound`` command line. A thin adapter over the public API."""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import click
from rich.console import Console

import waitbound
from waitbound import AuditEvent, Operation, Policy, Profile, Store, UsageError
from waitbound._json import JSON
from waitbound.cli._params import duration, parse_header, split_values
from waitbound.cli._render import record_summary, story_line

_INLINE_LISTS = ("pending", "succeeded", "partial", "failed", "canceled", "expired")
_INLINE_PATHS = {
    "state_path": "state",
    "result_path": "result",
    "error_path": "error",
    "job_id_path": "job_id",
    "poll_hint_path": "poll_hint",
}
_STORE_HELP = "SQLite file (or 'memory:'); default $WAITBOUND_STORE or the user state directory."


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


def _profile(profile_file: Path | None, inline: dict[str, object]) -> Profile:
    table: dict[str, JSON] = {}
    name = "inline"
    if profile_file is not None:
        loaded = waitbound.load_profile(profile_file)
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
        raise UsageError("no profile: give --profile FILE or --state-path with value lists")
    return waitbound.parse_profile(table, name=name)


def _flag_names(message: str) -> str:
    """Name the command-line flags in a Policy error (``max_delay_s`` → ``--max-delay``)."""
    return re.sub(
        r"\b(deadline|max_requests|max_transport_failures|max_rate_limited|base_delay"
        r"|max_delay|min_delay|not_found_grace|request_timeout)(?:_s)?\b",
        lambda m: "--" + m.group(1).replace("_", "-"),
        message,
    )


def _open(store: str | None) -> Store:
    return waitbound.open_store(store)


class _Progress:
    """Story lines on stderr as events are persisted (when stderr is a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.console = Console(stderr=True, highlight=False) if enabled else None

    def __call__(self, event: AuditEvent) -> None:
        if self.console is not None:
            self.console.print(story_line(event), markup=False, soft_wrap=True)


@cli.command()
@click.argument("status_url", required=False)
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Profile (state table) file, JSON or TOML.",
)
@click.option("--state-path", help="JMESPath to the state value in the status body.")
@click.option("--pending", help="Comma-separated pending state values.")
@click.option("--succeeded", help="Comma-separated succeeded state values.")
@click.option("--partial", help="Comma-separated partial-success state values.")
@click.option("--failed", help="Comma-separated failed state values.")
@click.option("--canceled", help="Comma-separated canceled state values.")
@click.option("--expired", help="Comma-separated expired state values.")
@click.option(
    "--require", multiple=True, help="JMESPath that must be non-null on success (repeatable)."
)
@click.option("--result-path", help="JMESPath to the inline result.")
@click.option("--error-path", help="JMESPath to the provider's error.")
@click.option("--job-id-path", help="JMESPath to the provider's job id.")
@click.option("--poll-hint-path", help="JMESPath to a poll hint in seconds.")
@click.option("--result-url", help="Result endpoint, fetched once after a terminal success.")
@click.option(
    "--deadline", callback=duration, default="10m", show_default=True, help="e.g. 90s, 10m, 1h."
)
@click.option("--max-requests", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--max-transport-failures", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--max-rate-limited", type=click.IntRange(min=0), default=5, show_default=True)
@click.option("--base-delay", callback=duration, default="5s", show_default=True)
@click.option("--max-delay", callback=duration, default="120s", show_default=True)
@click.option(
    "--min-delay", callback=duration, default=None, help="Delay floor [default: min(1s, base)]."
)
@click.option("--not-found-grace", callback=duration, default="30s", show_default=True)
@click.option("--request-timeout", callback=duration, default="30s", show_default=True)
@click.option(
    "--header", "headers", multiple=True, help="'Name: value', sent, never stored (repeatable)."
)
@click.option("--operation-id", help="Our id for the operation; an existing one is resumed.")
@click.option("--store", help=_STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--progress/--quiet", default=None, help="Story lines on stderr [default: if a terminal]."
)
def wait(  # noqa: PLR0917 - click passes every option
    status_url: str | None,
    profile_file: Path | None,
    result_url: str | None,
    deadline: float,
    max_requests: int,
    max_transport_failures: int,
    max_rate_limited: int,
    base_delay: float,
    max_delay: float,
    min_delay: float | None,
    not_found_grace: float,
    request_timeout: float,
    headers: Sequence[str],
    operation_id: str | None,
    store: str | None,
    as_json: bool,
    progress: bool | None,
    **inline: object,
) -> int:
    """Wait on STATUS_URL until the job has one honest outcome.

    Exit codes: 0 succeeded; 1 completed_with_errors, failed, canceled or expired;
    3 timed_out or escalated; 2 a usage or configuration error (nothing stored).
    Resume an operation with --operation-id alone (its stored deadline and budgets apply).
    """
    sent_headers = dict(parse_header(h) for h in headers)
    operation = None
    if status_url is not None:
        try:
            policy = Policy(
                deadline_s=deadline,
                max_requests=max_requests,
                max_transport_failures=max_transport_failures,
                max_rate_limited=max_rate_limited,
                base_delay_s=base_delay,
                max_delay_s=max_delay,
                min_delay_s=min_delay,
                not_found_grace_s=not_found_grace,
                request_timeout_s=request_timeout,
            )
        except UsageError as exc:
            raise UsageError(_flag_names(str(exc))) from None
        operation = Operation(
            status_url=status_url,
            profile=_profile(profile_file, inline),
            policy=policy,
            result_url=result_url,
        )
    elif operation_id is None:
        raise UsageError("give a STATUS_URL to wait on, or --operation-id to resume")
    show = sys.stderr.isatty() if progress is None else progress
    opened = _open(store)
    try:
        _stop_on_sigterm()
        outcome = waitbound.wait(
            operation,
            operation_id=operation_id,
            store=opened,
            headers=sent_headers,
            on_event=_Progress(show),
        )
    finally:
        opened.close()
    if as_json:
        click.echo(json.dumps(outcome.as_json(), ensure_ascii=False))
    else:
        reason = f" ({outcome.reason.value})" if outcome.reason else ""
        click.echo(f"{outcome.operation_id}: {outcome.outcome.value}{reason}")
        if outcome.job_id:
            click.echo(f"job id: {outcome.job_id}")
        if outcome.error is not None:
            click.echo(f"error: {json.dumps(outcome.error, ensure_ascii=False)[:500]}")
        if outcome.result is not None:
            click.echo(f"result: {json.dumps(outcome.result, ensure_ascii=False)[:2000]}")
    return outcome.outcome.exit_code


def _stop_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt: the record is persisted after every step."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@cli.command()
@click.argument("operation_id")
@click.option("--store", help=_STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def show(operation_id: str, store: str | None, as_json: bool) -> int:
    """Show an operation's record and its audit story, one line per event."""
    opened = _open(store)
    try:
        record = opened.get(operation_id)
        if record is None:
            raise waitbound.OperationNotFoundError(operation_id)
        events = opened.audit(operation_id)
    finally:
        opened.close()
    try:
        waitbound.verify_chain(events)
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
    simulator.start()
    click.echo(f"serving scenario {scenario.id} on {simulator.base_url}", err=False)
    sys.stdout.flush()
    try:
        simulator.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        simulator.stop()
    return 0
