"""What the commands share: exit codes, flags, stores, progress and hints."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import Any, Final, TypeVar

import click
from rich.console import Console
from rich.live import Live
from rich.text import Text

import waitbound
from waitbound import (
    AuditEvent,
    HttpSettings,
    Outcome,
    Policy,
    Profile,
    SchemaVersionError,
    Store,
    StoreError,
    UsageError,
    WaitboundError,
)
from waitbound._base._json import JSON
from waitbound._base._urls import redact_url
from waitbound._model._record import MAX_COUNT
from waitbound._profile._policy import budget_disagreement, quiet_budget_warning
from waitbound._profile._schedule import (
    DEFAULT_BACKOFF_GROWTH,
    DEFAULT_BACKOFF_JITTER_FLOOR,
    DEFAULT_BASE_DELAY_S,
    DEFAULT_HINT_JITTER_MAX_S,
    DEFAULT_MAX_DELAY_S,
)
from waitbound.cli._params import (
    MAX_RESPONSE_BYTES,
    MIN_RESPONSE_BYTES,
    STORED_TEXT,
    NumberRange,
    WholeRange,
    duration,
    positive_duration,
    split_values,
)
from waitbound.cli._render import (
    LiveStatus,
    StoryGrouper,
    option_lines,
    printable,
    status_line,
)
from waitbound.profiles import resolve_profile
from waitbound.stores import STORE_ENV, is_postgres_dsn

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])

EXIT_SUCCEEDED: Final = 0
EXIT_NOT_SUCCEEDED: Final = 1
EXIT_USAGE: Final = 2
EXIT_STOPPED: Final = 3
EXIT_STILL_WAITING: Final = 4
EXIT_STORE: Final = 5
EXIT_AUDIT_BROKEN: Final = 6
EXIT_INTERRUPTED: Final = 130

EXIT_CODES_HELP: Final = (
    "Exit codes: 0 succeeded; 1 completed_with_errors, failed, canceled or expired; "
    "2 a usage or configuration error (nothing stored); 3 timed_out or escalated; "
    "4 still waiting (--detach, cancel --no-wait); 5 the store failed (disk full, "
    "read-only, unreachable); 6 an audit chain is broken (audit verify, show, audit "
    "story); 130 interrupted (the operation is saved)."
)

AUDIT_KEY_FILE_HELP: Final = (
    "File holding the audit key (at least 16 bytes); default $WAITBOUND_AUDIT_KEY_FILE or "
    "$WAITBOUND_AUDIT_KEY. With a key, every chain head's MAC is checked too."
)

STORE_HELP: Final = (
    "SQLite file or PostgreSQL DSN; default $WAITBOUND_STORE or the user state directory. "
    "'memory:' keeps nothing: only `wait STATUS_URL` and `run` (not detached) take it."
)

_INLINE_LISTS = ("pending", "succeeded", "partial", "failed", "canceled", "expired")
_INLINE_PATHS = {
    "state_path": "state",
    "result_path": "result",
    "error_path": "error",
    "job_id_path": "job_id",
    "poll_hint_path": "poll_hint",
}


class Interrupted(WaitboundError):
    """Ctrl-C or SIGTERM while driving an operation; the record is saved."""

    def __init__(self, hint: str, operation_id: str) -> None:
        self.operation_id = operation_id
        super().__init__(f"interrupted; operation {operation_id} is saved: resume it with {hint}")


class StoreFailed(WaitboundError):
    """The store failed under a command (disk full, read-only, unreachable); exit 5."""


def options(*decorators: Callable[[_F], _F]) -> Callable[[_F], _F]:
    """Apply several click decorators, first on top."""

    def apply(function: _F) -> _F:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


# --- profile and policy -------------------------------------------------------------


def profile_from_flags(profile_spec: str | None, inline: dict[str, object]) -> Profile:
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


def flag_names(message: str) -> str:
    """Name the command-line flags in a Policy error (``max_delay_s`` → ``--max-delay``)."""
    return re.sub(
        r"\b(business_deadline|deadline|max_requests|max_transport_failures|max_rate_limited"
        r"|base_delay|max_delay|min_delay|not_found_grace|request_timeout|backoff_growth"
        r"|backoff_jitter_floor|hint_jitter_max|first_poll_after|schedule_key|lag_target"
        r")(?:_s)?\b",
        lambda m: "--" + m.group(1).replace("_", "-"),
        message,
    )


_POLICY_FLAGS: Final = {
    "deadline": "deadline_s",
    "business_deadline": "business_deadline_s",
    "max_requests": "max_requests",
    "max_transport_failures": "max_transport_failures",
    "max_rate_limited": "max_rate_limited",
    "base_delay": "base_delay_s",
    "max_delay": "max_delay_s",
    "min_delay": "min_delay_s",
    "backoff_growth": "backoff_growth",
    "backoff_jitter_floor": "backoff_jitter_floor",
    "hint_jitter_max": "hint_jitter_max_s",
    "not_found_grace": "not_found_grace_s",
    "request_timeout": "request_timeout_s",
    "schedule": "schedule",
    "schedule_key": "schedule_key",
    "lag_target": "lag_target_s",
    "origin_pacing": "origin_pacing",
}


def policy_from_flags(flags: dict[str, object]) -> Policy:
    """The policy from the limit and pacing flags (popped from *flags*)."""
    try:
        with quiet_budget_warning():  # said once below, as one line
            policy = Policy(**{field: flags.pop(flag) for flag, field in _POLICY_FLAGS.items()})  # type: ignore[arg-type]
    except UsageError as exc:
        raise UsageError(flag_names(str(exc))) from None
    if (disagreement := budget_disagreement(policy)) is not None:
        click.echo(f"warning: {flag_names(disagreement)}", err=True)
    return policy


def http_settings(max_response_bytes: int | None) -> HttpSettings:
    """The HTTP limits of ``--max-response-bytes`` (the API's default when not given)."""
    if max_response_bytes is None:
        return HttpSettings()
    return HttpSettings(max_body_bytes=max_response_bytes)


def _budget(minimum: int) -> WholeRange:
    return WholeRange(min=minimum, max=MAX_COUNT)


MAX_RESPONSE_OPTION = click.option(
    "--max-response-bytes",
    type=WholeRange(MIN_RESPONSE_BYTES, MAX_RESPONSE_BYTES),
    help="The largest answer read from the provider, in bytes (1024 to 1073741824) "
    "[default: 1048576].",
)

PROFILE_OPTIONS = options(
    click.option("--profile", "profile_spec", help="Profile file (JSON/TOML) or built-in name."),
    click.option("--state-path", help="JMESPath to the state value in the status body."),
    click.option("--pending", type=STORED_TEXT, help="Comma-separated pending state values."),
    click.option("--succeeded", type=STORED_TEXT, help="Comma-separated succeeded state values."),
    click.option(
        "--partial", type=STORED_TEXT, help="Comma-separated partial-success state values."
    ),
    click.option("--failed", type=STORED_TEXT, help="Comma-separated failed state values."),
    click.option("--canceled", type=STORED_TEXT, help="Comma-separated canceled state values."),
    click.option("--expired", type=STORED_TEXT, help="Comma-separated expired state values."),
    click.option("--require", multiple=True, help="JMESPath non-null on success (repeatable)."),
    click.option(
        "--result-path",
        help="JMESPath to the result in the status body (a fetched result document is "
        "taken whole).",
    ),
    click.option("--error-path", help="JMESPath to the provider's error."),
    click.option("--job-id-path", help="JMESPath to the provider's job id."),
    click.option("--poll-hint-path", help="JMESPath to a poll hint in seconds."),
)
POLICY_OPTIONS = options(
    click.option(
        "--deadline",
        callback=duration,
        default="10m",
        show_default=True,
        metavar="DURATION",
        help="How long from the operation's creation it may wait; no request is sent at "
        "or after it (at most a year).",
    ),
    click.option(
        "--business-deadline",
        callback=duration,
        metavar="DURATION",
        help="After this long the result is no longer useful: waiting stops with reason "
        "business_deadline_exceeded, even before --deadline [default: none].",
    ),
    click.option(
        "--max-requests",
        type=_budget(1),
        default=30,
        show_default=True,
        help="Requests the operation may send, status and result alike (1 to 100000).",
    ),
    click.option(
        "--max-transport-failures",
        type=_budget(0),
        default=3,
        show_default=True,
        help="5xx answers, timeouts and connection errors allowed; one more escalates "
        "provider_failure (0 to 100000).",
    ),
    click.option(
        "--max-rate-limited",
        type=_budget(0),
        default=5,
        show_default=True,
        help="429s and throttling bodies allowed; one more escalates rate_limited (0 to 100000).",
    ),
    click.option(
        "--base-delay",
        callback=duration,
        metavar="DURATION",
        default=f"{DEFAULT_BASE_DELAY_S:g}s",
        show_default=True,
        help="The first backoff delay.",
    ),
    click.option(
        "--max-delay",
        callback=duration,
        metavar="DURATION",
        default=f"{DEFAULT_MAX_DELAY_S:g}s",
        show_default=True,
        help="The backoff cap.",
    ),
    click.option(
        "--min-delay",
        callback=positive_duration,
        metavar="DURATION",
        help="Delay floor, more than 0; a provider hint below it is not a minimum "
        "[default: min(1s, base)].",
    ),
    click.option(
        "--backoff-growth",
        type=NumberRange(1, 10),
        default=DEFAULT_BACKOFF_GROWTH,
        show_default=True,
        help="Each backoff step is this many times the last (1 to 10; 1 = fixed interval).",
    ),
    click.option(
        "--backoff-jitter-floor",
        type=NumberRange(0, 1),
        default=DEFAULT_BACKOFF_JITTER_FLOOR,
        show_default=True,
        help="A backoff delay is drawn from [this x raw, raw] (0 to 1; 1 = no jitter).",
    ),
    click.option(
        "--hint-jitter-max",
        callback=duration,
        metavar="DURATION",
        default=f"{DEFAULT_HINT_JITTER_MAX_S:g}s",
        show_default=True,
        help="The upward jitter on a provider hint is at most 10 % of it and at most this.",
    ),
    click.option(
        "--not-found-grace",
        callback=duration,
        default="30s",
        show_default=True,
        metavar="DURATION",
        help="How long a 404 (or a body without its state) before the job was ever seen "
        "means 'not visible yet'.",
    ),
    click.option(
        "--request-timeout",
        callback=duration,
        default="30s",
        show_default=True,
        metavar="DURATION",
        help="The most one request may take; never more than the time left before the deadline.",
    ),
    click.option(
        "--schedule",
        type=click.Choice(["formula", "learned"]),
        default="formula",
        show_default=True,
        help="When to poll: the backoff formula, or learned from this store's history of "
        "the same kind of job (the formula until it has enough).",
    ),
    click.option(
        "--schedule-key",
        type=STORED_TEXT,
        metavar="KEY",
        help="The history a learned schedule reads and adds to [default: the profile, and "
        "the status URL's origin and path with ids replaced].",
    ),
    click.option(
        "--lag-target",
        callback=positive_duration,
        metavar="DURATION",
        help="The learned schedule's target mean detection lag [default: the formula's own "
        "lag on the same history: the same lag, fewer requests].",
    ),
    click.option(
        "--origin-pacing",
        is_flag=True,
        help="Pace the status polls through this store's per-origin calendar: many "
        "operations due in the same second are spread (each moved later only, by at most "
        "--max-delay, never past the deadline).",
    ),
    click.option("--result-url", help="Result endpoint, fetched once after a terminal success."),
    click.option("--cancel-url", help="Cancel endpoint, when no receipt or profile names one."),
    click.option(
        "--cancel-on-deadline",
        is_flag=True,
        help="Send one cancel before the deadline, with time kept for one status look after it.",
    ),
)
PROGRESS_OPTIONS = options(
    click.option(
        "--progress/--quiet",
        default=None,
        help="Story lines on stderr, and a live status line on a terminal "
        "[default: if stderr is a terminal].",
    ),
    click.option("--events", "every_event", is_flag=True, help="One story line per audit event."),
    click.option(
        "--follow",
        is_flag=True,
        help="One story line on stderr per audit event of the operation, in order, "
        "whoever wrote it (this process, a serve's webhook, a person's decision).",
    ),
)
RUN_OPTIONS = options(
    click.option("--header", "headers", multiple=True, help="'Name: value': sent, never stored."),
    click.option(
        "--trust-origin",
        "trusted_origins",
        multiple=True,
        help="Another origin (https://host[:port]) that may receive the headers.",
    ),
    click.option(
        "--operation-id",
        type=STORED_TEXT,
        help="Our id for the operation; an existing one is resumed.",
    ),
    click.option(
        "--credential-label",
        help="A non-secret name for the credentials the headers carry (1-128 printable "
        "characters), kept on the record: a person resumes a denied operation only with "
        "other ones.",
    ),
    click.option("--store", help=STORE_HELP),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout."),
    PROGRESS_OPTIONS,
    MAX_RESPONSE_OPTION,
)


# --- stores -------------------------------------------------------------------------


def shown_store(spec: str | None) -> str | None:
    """The store as a message or hint may show it: a DSN's password is ``***``."""
    if spec is None:
        return None
    if is_postgres_dsn(spec):
        try:
            from waitbound.stores.postgres import redact_dsn
        except ImportError:
            return redact_url(spec)
        return redact_dsn(spec)
    return spec


def resume_hint(
    operation_id: str, store: str | None, header_names: Sequence[str], command: str = "wait"
) -> str:
    """The command that resumes *operation_id*: its store, and its headers by name only."""
    words = ["waitbound", command, "--operation-id", operation_id]
    shown = shown_store(store)
    if shown is not None:
        words += ["--store", shown]
    hint = shlex.join(words)
    for name in header_names:
        hint += f" --header '{name}: …'"
    return f"`{hint}`"


def _advice(message: str) -> str:
    lowered = message.lower()
    if "full" in lowered:
        return "free disk space"
    if "readonly" in lowered or "read-only" in lowered:
        return "make the store file and its folder writable"
    return "fix the store"


def store_failed(exc: StoreError, then: str) -> StoreFailed:
    """A store failure as one line saying what to do, then *then*."""
    return StoreFailed(f"{exc}; nothing half-written was kept. {_advice(str(exc))}, then {then}")


def _is_usage(exc: StoreError) -> bool:
    return isinstance(exc, UsageError | SchemaVersionError)


MEMORY_EMPTY: Final = "it starts empty, so there is nothing for this command to read or change"
"""Why a command that acts on stored operations refuses the memory store."""


def refuse_memory_store(spec: str | None, why: str | None) -> None:
    """Refuse ``memory:`` (from ``--store`` or ``$WAITBOUND_STORE``) for a command it
    makes meaningless, saying *why*; ``None`` allows it.

    Raises:
        UsageError: the store is ``memory:`` and *why* is given.
    """
    chosen = spec if spec is not None else os.environ.get(STORE_ENV)
    if why is not None and chosen is not None and chosen.strip() == "memory:":
        raise UsageError(
            f"the memory store (memory:) keeps nothing once this command ends: {why}; "
            "give --store a SQLite file or a PostgreSQL DSN"
        )


@contextmanager
def opened_store(
    spec: str | None,
    *,
    create: bool = False,
    read_only: bool = False,
    then: str,
    memory: str | None = MEMORY_EMPTY,
) -> Iterator[Store]:
    """Open the store for what the command does; a store failure names what to do next.

    Only commands that record operations pass ``create``; ``then`` ends the message of a
    store failure ("run the command again", "resume with …"). ``memory`` says why the
    command refuses the memory store (:func:`refuse_memory_store`); ``None`` for the
    commands that finish their operation themselves (``wait URL``, ``run``).
    """
    refuse_memory_store(spec, memory)
    try:
        store = waitbound.open_store(spec, create=create, read_only=read_only)
    except StoreError as exc:
        if _is_usage(exc):
            raise
        raise store_failed(exc, then) from None
    try:
        yield store
    except StoreError as exc:
        if _is_usage(exc):
            raise
        raise store_failed(exc, then) from None
    finally:
        store.close()


def stop_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt: the record is persisted after every step."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def drive(
    operation_id: str,
    store: str | None,
    action: Callable[[Store], _T],
    *,
    create: bool,
    header_names: Sequence[str] = (),
    progress: Progress | None = None,
    memory: str | None = MEMORY_EMPTY,
) -> _T:
    """Open the store, run *action* on it, close it; Ctrl-C and store failures say how
    to resume (with the store and the header names, never a value). ``memory`` as for
    :func:`opened_store`."""
    hint = resume_hint(operation_id, store, header_names)
    try:
        with opened_store(
            store, create=create, then=f"resume with {hint}", memory=memory
        ) as opened:
            stop_on_sigterm()
            try:
                return action(opened)
            except KeyboardInterrupt:
                raise Interrupted(hint, operation_id) from None
    finally:
        if progress is not None:
            progress.close()


# --- progress -----------------------------------------------------------------------


class _StatusView:
    """The live line, rendered afresh at each refresh (so the countdown moves)."""

    def __init__(self, status: LiveStatus) -> None:
        self.status = status

    def __rich__(self) -> Text:
        return Text(status_line(self.status, datetime.now(UTC)), no_wrap=True, overflow="ellipsis")


class Progress:
    """Story lines on stderr as events are persisted; on a terminal also a live status line.

    Args:
        enabled: ``--progress`` / ``--quiet``; ``None``: when stderr is a terminal.
        every_event: ``--events``: one line per event instead of one per request.
        as_json: ``--json``; to a pipe, the live line is left out (plain lines only).
        live: whether a live status line may be shown at all (a worker's events are of
            many operations, so it shows plain lines).
        follow: ``--follow``: one line per event of the operation as the store has them,
            in order, others' included (read after each of this process's events);
            shown even when stderr is not a terminal, unless ``--quiet``.
    """

    def __init__(
        self,
        enabled: bool | None,
        *,
        every_event: bool = False,
        as_json: bool = False,
        live: bool = True,
        follow: bool = False,
    ) -> None:
        terminal = sys.stderr.isatty()
        show = (terminal or follow) if enabled is None else enabled
        self.console = Console(stderr=True, highlight=False) if show else None
        self.grouper = StoryGrouper(every_event=every_event or follow)
        self.follow = follow
        self.store: Store | None = None
        self.operation_id = ""
        self.seen = 0
        self.live_allowed = live and show and terminal and not (as_json and not sys.stdout.isatty())
        self.live: Live | None = None
        self.view: _StatusView | None = None

    def start(self, operation_id: str) -> None:
        """Name the operation; on a terminal, start the live status line."""
        self.note(f"operation {operation_id}")
        if self.live_allowed and self.console is not None:
            self.view = _StatusView(LiveStatus(operation_id=operation_id))
            self.live = Live(self.view, console=self.console, refresh_per_second=4, transient=True)
            self.live.start()

    def attach(self, store: Store, operation_id: str) -> None:
        """With ``follow``: read *operation_id*'s events from *store*."""
        self.store, self.operation_id = store, operation_id

    def __call__(self, event: AuditEvent) -> None:
        events = [event]
        if self.follow and self.store is not None:
            # This process's event is persisted: the store has it, after what others wrote.
            stored = [e for e in self.store.audit(self.operation_id) if e.seq > self.seen]
            if stored:
                self.seen = stored[-1].seq
                events = [e.event for e in stored]
        for each in events:
            if self.view is not None:
                self.view.status = self.view.status.after(each)
            for line in self.grouper.push(each):
                self.note(line)

    def note(self, text: str) -> None:
        """Print one line (above the live line, when there is one)."""
        if self.console is not None:
            self.console.print(text, markup=False, soft_wrap=True)

    def close(self) -> None:
        """Print what is held back and stop the live line."""
        for line in self.grouper.flush():
            self.note(line)
        if self.live is not None:
            self.live.stop()
            self.live = None


# --- output -------------------------------------------------------------------------


def print_outcome(outcome: Outcome, as_json: bool, costs: Sequence[tuple[str, str]] = ()) -> int:
    """Print an outcome (one JSON object with ``--json``); return its exit code.

    *costs* are the open options with their costs (see ``option_costs``): in JSON as
    ``option_costs``, in text one line each; ``decided_by`` is shown when set.
    """
    if as_json:
        document = outcome.as_json()
        if costs:
            document["option_costs"] = [{"option": o, "cost": c} for o, c in costs]
        click.echo(json.dumps(document, ensure_ascii=False))
    else:
        reason = f" ({outcome.reason.value})" if outcome.reason else ""
        status = outcome.outcome.value if outcome.outcome else "still waiting"
        click.echo(f"{outcome.operation_id}: {status}{reason}")
        click.echo(printable(outcome.message))
        for label, value, limit in (
            ("job id", outcome.job_id, 200),
            ("request id", outcome.request_id, 200),
            ("error", outcome.error, 500),
            ("note", outcome.note, 500),
            ("counts", outcome.counts, 500),
            ("usage", outcome.usage, 500),
            ("result url (not fetched)", outcome.result_url, 500),
            ("errors url", outcome.errors_url, 2000),
            ("result", outcome.result, 2000),
        ):
            if value is not None:
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                click.echo(f"{label}: {printable(text[:limit])}")
        if outcome.decided_by is not None:
            click.echo(f"decided by: {printable(outcome.decided_by)}")
        shown = list(costs) or [(name, name) for name in outcome.options]
        for line in option_lines(outcome.operation_id, shown, indent=""):
            click.echo(line)
    return outcome.exit_code


def header_names(headers: Sequence[tuple[str, str]]) -> list[str]:
    """The names of *headers*, in order, each once."""
    return list(dict.fromkeys(name for name, _ in headers))
