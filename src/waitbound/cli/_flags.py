"""The flags the commands share, and what they build: the profile, the policy and the
HTTP limits from their flags, the help texts several commands print."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, TypeVar

import click

from waitbound._base._errors import UsageError
from waitbound._base._json import JSON
from waitbound._profile._contract import Profile
from waitbound._profile._contract_parse import parse_profile
from waitbound._profile._policy import MAX_COUNT, Policy, budget_disagreement, quiet_budget_warning
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
from waitbound.profiles import resolve_profile
from waitbound.transports import HttpSettings

_F = TypeVar("_F", bound=Callable[..., Any])

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
    return parse_profile(table, name=name)


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
    """The policy from the limit and pacing flags (popped from *flags*); its budget
    warning, if any, is said by :func:`warn_budget` once the command's input is checked."""
    try:
        with quiet_budget_warning():
            policy = Policy(**{field: flags.pop(flag) for flag, field in _POLICY_FLAGS.items()})  # type: ignore[arg-type]
    except UsageError as exc:
        raise UsageError(flag_names(str(exc))) from None
    return policy


def warn_budget(policy: Policy) -> None:
    """Say on stderr, as one ``warning:`` line, how *policy*'s budget and deadline
    disagree (``waitbound.BudgetWarning``); nothing when they agree. Called after every
    check of the command's input, so bad input still gets its one line alone."""
    if (disagreement := budget_disagreement(policy)) is not None:
        click.echo(f"warning: {flag_names(disagreement)}", err=True)


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
