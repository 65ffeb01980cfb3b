"""The durable record of one operation, and the policy it was created with.

A record is a frozen value; every change is :meth:`Record.evolve` (what
``dataclasses.replace`` returns, built faster) and every write
is checked against ``version`` (compare-and-swap). It is stored as versioned JSON
(``RECORD_SCHEMA``) holding only allowlisted fields: no raw headers, no secrets.
"""

from __future__ import annotations

import functools
import json
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Final, Literal, TypedDict, TypeVar, Unpack

from waitbound._audit import GENESIS_HASH
from waitbound._clock import utc
from waitbound._contract import Profile, parse_profile
from waitbound._errors import SchemaVersionError, StoreError, UsageError
from waitbound._json import JSON, JSONScalar, canonical_json
from waitbound._outcome import Outcome, OutcomeKind, Reason
from waitbound._protocol import FinalStateVia, UrlKind
from waitbound._schedule import (
    DEFAULT_BACKOFF_GROWTH,
    DEFAULT_BACKOFF_JITTER_FLOOR,
    DEFAULT_BASE_DELAY_S,
    DEFAULT_HINT_JITTER,
    DEFAULT_HINT_JITTER_MAX_S,
    DEFAULT_MAX_DELAY_S,
    DelaySource,
)
from waitbound._urls import origin, origin_only, redact_url

__all__ = [
    "FIELD_NAMES",
    "MAX_COUNT",
    "RECORD_SCHEMA",
    "Decision",
    "DecisionRequest",
    "Grants",
    "Phase",
    "Policy",
    "Push",
    "Record",
    "RequestKind",
    "decode_fields",
    "field_json",
    "reported_counts",
]

RECORD_SCHEMA: Final = 1
_P = TypeVar("_P", "Grants", "DecisionRequest", "Decision", "Push")
RequestKind = Literal["submit", "status", "result", "errors", "cancel"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """The limits and pacing of one wait. Durations are in seconds.

    Attributes:
        deadline_s: from creation to the deadline (``deadline_at``).
        max_requests: requests the operation may send in total: submit attempts,
            status requests, result and errors pages and cancels all spend it.
        max_transport_failures: 5xx answers, timeouts and connection errors tolerated;
            one more escalates ``provider_failure``.
        max_rate_limited: throttled answers (429, a throttling body) tolerated; one
            more escalates ``rate_limited``.
        base_delay_s: backoff base; ``max_delay_s``: backoff cap.
        backoff_growth: each backoff step is this many times the last (from 1, a fixed
            interval, to 10): ``raw = min(max_delay_s, base_delay_s * growth**attempt)``.
        backoff_jitter_floor: the backoff is drawn uniformly from
            ``[backoff_jitter_floor * raw, raw]`` (a fraction from 0 to 1; 1 is no jitter).
        min_delay_s: the floor for every delay (more than 0); ``None`` means
            ``min(1, base_delay_s)``. A provider hint below it is not a minimum: local
            backoff applies.
        not_found_grace_s: how long a 404 or 410 is read as "not visible yet" before
            the job was ever seen (a 2xx body without a state stops at once).
        request_timeout_s: the timeout of one request (never more than the time left).
        confirm_window_s: how long a success without its required fields is re-checked.
        confirm_max_requests: how many more status requests that re-check may send.
        hint_jitter: the upward jitter added to provider hints (a fraction, 0.1 = 10 %).
        hint_jitter_max_s: that jitter is also at most this many seconds: a hint ``h``
            (at or above the floor) is waited
            ``h + uniform(0, min(h * hint_jitter, hint_jitter_max_s))``. Spreading a
            fleet told the same hint is the worker's per-origin pacing, not every
            operation's lag.
        lease_s: how long a worker's lease outlives the request it holds it for.
        business_deadline_s: from creation to the business deadline, after which the
            result would no longer be useful (``None``: none); waiting stops there with
            reason ``business_deadline_exceeded`` even when ``deadline_s`` is later.
        max_extensions: how many grants (``extend``, ``treat_as_pending``, ``cancel``,
            ``fetch_result_again``) people's decisions may give one operation.
        max_extension_s: the longest one grant may extend the deadline by; ``None``
            means ``deadline_s``.
        decision_timeout_s: how long an open decision request waits for a person before
            it is closed as ``decision_timeout``.
        backup_factor: when webhooks are expected (``Record.push.webhook``), local
            backoff's base and cap are multiplied by this: polling becomes the backup
            that still finds endings no webhook announces (at least 1).
        schedule: ``"formula"`` (the backoff above) or ``"learned"``: the next poll
            time chosen from the store's history of this kind of job (see
            ``docs/waiting.md``); with too little history, the formula.
        schedule_key: which history a learned schedule reads and this operation adds
            to (``None``: the profile plus the status URL's origin and path template).
        lag_target_s: the learned schedule's target mean detection lag in seconds
            (``None``: the formula's own lag on the same history, so the learned
            schedule only saves requests).

    Raises:
        UsageError: a value out of range (durations must be finite and positive, at most
            a year; counts whole and at most :data:`MAX_COUNT`).
    """

    deadline_s: float = 600.0
    max_requests: int = 30
    max_transport_failures: int = 3
    max_rate_limited: int = 5
    base_delay_s: float = DEFAULT_BASE_DELAY_S
    max_delay_s: float = DEFAULT_MAX_DELAY_S
    backoff_growth: float = DEFAULT_BACKOFF_GROWTH
    backoff_jitter_floor: float = DEFAULT_BACKOFF_JITTER_FLOOR
    min_delay_s: float | None = None
    not_found_grace_s: float = 30.0
    request_timeout_s: float = 30.0
    confirm_window_s: float = 5.0
    confirm_max_requests: int = 2
    hint_jitter: float = DEFAULT_HINT_JITTER
    hint_jitter_max_s: float = DEFAULT_HINT_JITTER_MAX_S
    lease_s: float = 10.0
    business_deadline_s: float | None = None
    max_extensions: int = 3
    max_extension_s: float | None = None
    decision_timeout_s: float = 7 * 24 * 3600.0
    backup_factor: float = 4.0
    schedule: str = "formula"
    schedule_key: str | None = None
    lag_target_s: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "deadline_s",
            "base_delay_s",
            "max_delay_s",
            "request_timeout_s",
            "lease_s",
            "decision_timeout_s",
        ):
            _check_number(name, getattr(self, name), positive=True)
        for name in ("business_deadline_s", "max_extension_s", "lag_target_s"):
            if getattr(self, name) is not None:
                _check_number(name, getattr(self, name), positive=True)
        for name in ("not_found_grace_s", "confirm_window_s", "hint_jitter", "hint_jitter_max_s"):
            _check_number(name, getattr(self, name), positive=False)
        if self.min_delay_s is not None:  # a zero floor would allow a tight loop
            _check_number("min_delay_s", self.min_delay_s, positive=True)
            if self.min_delay_s > self.max_delay_s:
                raise UsageError(
                    f"min_delay_s ({self.min_delay_s:g}) is above max_delay_s "
                    f"({self.max_delay_s:g}); the floor must not exceed the cap"
                )
        for name in ("max_requests",):
            _check_int(name, getattr(self, name), minimum=1)
        for name in (
            "max_transport_failures",
            "max_rate_limited",
            "confirm_max_requests",
            "max_extensions",
        ):
            _check_int(name, getattr(self, name), minimum=0)
        _check_ratio("backoff_growth", self.backoff_growth, 1.0, 10.0)
        _check_ratio("backoff_jitter_floor", self.backoff_jitter_floor, 0.0, 1.0)
        if not (isinstance(self.backup_factor, int | float) and 1 <= self.backup_factor <= 100):
            raise UsageError(
                f"backup_factor must be a number from 1 to 100, got {self.backup_factor!r}"
            )
        if self.schedule not in SCHEDULES:
            raise UsageError(
                f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}"
            )
        key = self.schedule_key
        if key is not None and not (
            isinstance(key, str) and 0 < len(key) <= MAX_SCHEDULE_KEY and key.isprintable()
        ):
            raise UsageError(
                f"schedule_key must be printable text of 1 to {MAX_SCHEDULE_KEY} characters, "
                f"got {str(key)[:40]!r}"
            )
        if self.max_delay_s < self.base_delay_s:
            raise UsageError(
                f"max_delay_s ({self.max_delay_s:g}) is below base_delay_s "
                f"({self.base_delay_s:g}); raise the cap or lower the base"
            )

    @property
    def floor_s(self) -> float:
        """The smallest delay ever scheduled, in seconds."""
        return self.min_delay_s if self.min_delay_s is not None else min(1.0, self.base_delay_s)

    @property
    def extension_ceiling_s(self) -> float:
        """The longest one grant may extend the deadline by, in seconds."""
        return self.max_extension_s if self.max_extension_s is not None else self.deadline_s


@functools.lru_cache(maxsize=64)
def _policy_json(policy: Policy) -> dict[str, JSON]:
    """A policy as stored (the same few policies are written again and again; the
    callers only read the dict)."""
    return asdict(policy)


@functools.lru_cache(maxsize=64)
def _profile(name: str, table: str) -> Profile:
    """A stored profile, parsed and validated once per distinct table (a profile is
    immutable, so records may share it)."""
    return parse_profile(json.loads(table), name=name)


SCHEDULES: Final = ("formula", "learned")
"""The schedules a :class:`Policy` may name (``Policy.schedule``)."""

MAX_SCHEDULE_KEY: Final = 200
"""The longest ``Policy.schedule_key``, in characters."""

MAX_COUNT: Final = 100_000
"""No budget may exceed this many requests or answers (a larger one is a typo, not a plan)."""

MAX_DURATION_S: Final = 366 * 24 * 3600.0
"""No duration may exceed a year (a deadline further away is a scheduling job, not a wait)."""


def _check_number(name: str, value: object, *, positive: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):  # type: ignore[operator]
        need = "a positive" if positive else "a non-negative"
        raise UsageError(f"{name} must be {need} number of seconds, got {value!r}")
    if name.endswith("_s") and value > MAX_DURATION_S:  # type: ignore[operator]
        raise UsageError(f"{name} must be at most a year ({MAX_DURATION_S:g} s), got {value!r}")


def _check_ratio(name: str, value: object, low: float, high: float) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not low <= value <= high:  # type: ignore[operator]
        raise UsageError(f"{name} must be a number from {low:g} to {high:g}, got {value!r}")


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    if value > MAX_COUNT:
        raise UsageError(f"{name} must be at most {MAX_COUNT}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Grants:
    """What people's decisions added to the policy's limits (never a reset: the
    counters keep counting, the limits grow by these).

    Attributes:
        requests, transport_failures, rate_limited: added to ``max_requests``,
            ``max_transport_failures`` and ``max_rate_limited``.
        extensions: how many grants were made (bounded by ``policy.max_extensions``).
        pending_states: provider states a person said to read as pending for this
            operation only (``treat_as_pending``).
    """

    requests: int = 0
    transport_failures: int = 0
    rate_limited: int = 0
    extensions: int = 0
    pending_states: tuple[JSONScalar, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRequest:
    """A decision a person is asked for: an escalation, a timeout, or an agent's request.

    Attributes:
        opened_at: when it was opened.
        due_at: when it is closed as ``decision_timeout`` if nobody answers.
        requested_by: ``waitbound`` (the operation stopped) or who asked (an agent's
            label, e.g. ``agent:mcp:transcode``).
        minutes, checks, why: an agent's proposed extension and its reason (``None``
            for an escalation).
        options: the options open when it was opened (checked again at the decision).
    """

    opened_at: datetime
    due_at: datetime
    options: tuple[str, ...] = ()
    requested_by: str = "waitbound"
    minutes: float | None = None
    checks: int | None = None
    why: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """One decision a person made, as recorded (also an audit event ``decided``).

    Attributes:
        option: what was decided (``extend``, ``cancel``, ``abandon``, …, or
            ``decision_timeout`` when nobody decided in time).
        by: who decided; ``why``: their reason; ``at``: when.
        detail: what the decision changed: the limits before and after, the grant, the
            new profile's version, the credential label, the evidence (never a secret).
    """

    option: str
    by: str
    why: str
    at: datetime
    detail: dict[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Push:
    """The push path of one operation: webhooks expected in, a completion sent out.

    Attributes:
        webhook: the receiver (a ``[webhooks.NAME]`` of ``waitbound serve``) whose
            deliveries about this job are expected; polling then slows to the backup
            schedule (``policy.backup_factor``). ``None``: polling only.
        notify_url: where a signed completion webhook is sent when the operation
            finishes (``None``: none).
        callback: an ``on_complete`` callable is to be called when it finishes (the
            process that waits, or a worker given one, delivers it).
        deliveries: webhook deliveries applied to this operation so far.
        last_delivery_at: when the last one was applied.
    """

    webhook: str | None = None
    notify_url: str | None = None
    callback: bool = False
    deliveries: int = 0
    last_delivery_at: datetime | None = None

    @property
    def notifies(self) -> bool:
        """Whether a completion is delivered anywhere."""
        return self.notify_url is not None or self.callback


class Phase(StrEnum):
    """Where an operation is in its life."""

    SUBMITTING = "submitting"
    """The job request is recorded; its receipt is not (yet)."""
    WAITING = "waiting"
    """Polling the status endpoint."""
    FETCHING_RESULT = "fetching_result"
    """Terminal success seen; fetching the result endpoint (once)."""
    FETCHING_ERRORS = "fetching_errors"
    """Completed with errors; fetching the first page of the errors (once)."""
    DONE = "done"
    """An outcome is recorded; nothing more is sent."""


_UNFETCHED: Final = {Phase.FETCHING_RESULT: "result", Phase.FETCHING_ERRORS: "errors page"}
"""The piece an operation fetches after the provider's terminal answer, by phase."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """Our durable record of waiting on one job. Instants are aware UTC.

    ``in_flight`` names a request that was reserved (counted and persisted) but
    whose answer is not recorded yet; after a crash it stays counted.

    ``status_url`` is the polling URL; ``poll_kind`` says how its answers are read and
    ``poll_header`` which header named it (a poll answer carrying that header moves
    it). ``caller_url`` pins the URL the caller named once a polling URL has moved, so
    credentials never follow a move. ``location_url`` is the first answer's
    ``Location`` and ``final_state_via`` the caller's or profile's choice of where the
    final state is.

    ``grants`` are what people's decisions added to the policy's limits; the limits
    that apply are :attr:`max_requests`, :attr:`max_transport_failures`,
    :attr:`max_rate_limited`. ``decision_request`` is the open request for a person's
    decision (set when the operation stops without an honest outcome, or an agent asks
    for more time), ``decisions`` the decisions made, ``stopped_phase`` the phase it
    stopped in (where a decision resumes it).
    ``audit_seq`` and ``audit_head`` name the last event of the audit chain;
    ``audit_mac`` is the HMAC of that head under the audit key kept outside the store
    (``None``: written without a key). See ``docs/audit.md``.
    """

    operation_id: str
    profile: Profile
    policy: Policy
    status_url: str | None
    created_at: datetime
    deadline_at: datetime
    next_poll_at: datetime
    business_deadline_at: datetime | None = None
    caller_url: str | None = None
    poll_kind: UrlKind = UrlKind.STATUS
    poll_header: str | None = None
    location_url: str | None = None
    final_state_via: FinalStateVia | None = None
    result_url: str | None = None
    cancel_url: str | None = None
    errors_url: str | None = None
    job_id: str | None = None
    label: str | None = None
    submit_method: str | None = None
    submit_url: str | None = None
    submit_fingerprint: str | None = None
    idempotency_key: str | None = None
    submit_attempts: int = 0
    max_submit_attempts: int = 1
    phase: Phase = Phase.WAITING
    outcome: OutcomeKind | None = None
    reason: Reason | None = None
    settled_outcome: OutcomeKind | None = None
    provider_state: JSONScalar = None
    progress: JSON = None
    last_http_status: int | None = None
    last_request_id: str | None = None
    last_observed_at: datetime | None = None
    job_seen_at: datetime | None = None
    pending_seen_at: datetime | None = None
    ended_seen_at: datetime | None = None
    delay_source: DelaySource | None = None
    attempt: int = 0
    status_requests_used: int = 0
    transport_failures_used: int = 0
    rate_limited_used: int = 0
    result_requests_used: int = 0
    success_seen_at: datetime | None = None
    confirm_requests_used: int = 0
    in_flight: RequestKind | None = None
    trusted_origins: tuple[str, ...] = ()
    cancelable: bool | None = None
    cancel_on_deadline: bool = False
    cancel_due: bool = False
    cancel_requests_used: int = 0
    cancel_requested_at: datetime | None = None
    cancel_requested_by: str | None = None
    cancel_reason: str | None = None
    result: JSON = None
    error: JSON = None
    counts: dict[str, JSON] | None = None
    usage: JSON = None
    errors: JSON = None
    finished_at: datetime | None = None
    result_fetched_at: datetime | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    stopped_phase: Phase | None = None
    grants: Grants = Grants()
    push: Push = Push()
    decision_request: DecisionRequest | None = None
    decisions: tuple[Decision, ...] = ()
    decided_by: str | None = None
    credential_label: str | None = None
    audit_seq: int = 0
    audit_head: str = GENESIS_HASH
    audit_mac: str | None = None
    version: int = 0

    def evolve(self, **changes: Unpack[RecordChanges]) -> Record:
        """A copy of this record with *changes* (field name → new value) applied.

        Equal to ``dataclasses.replace(self, **changes)``, but built by setting each
        slot directly instead of running the generated frozen ``__init__`` (a step copies
        its record several times; this takes about 40 % of the time). ``Record`` has no
        ``__post_init__``, so nothing is skipped.

        Raises:
            TypeError: a name in *changes* is not a field of :class:`Record` (the same
                message ``dataclasses.replace`` gives).
        """
        if not _FIELD_SET.issuperset(changes):
            unknown = next(name for name in changes if name not in _FIELD_SET)
            raise TypeError(f"Record.__init__() got an unexpected keyword argument {unknown!r}")
        copy = object.__new__(Record)
        for put, value in zip(_PUTS, _VALUES(self), strict=True):
            put(copy, value)
        for name, value in changes.items():
            _SLOTS[name].__set__(copy, value)
        return copy

    @property
    def requests_used(self) -> int:
        """Requests sent so far against ``policy.max_requests``: every kind counts
        (submit attempts, status, result and errors pages, cancels)."""
        return (
            self.submit_attempts
            + self.status_requests_used
            + self.result_requests_used
            + self.cancel_requests_used
        )

    @property
    def max_requests(self) -> int:
        """The request budget that applies: the policy's plus what decisions granted."""
        return self.policy.max_requests + self.grants.requests

    @property
    def max_transport_failures(self) -> int:
        """Transport failures tolerated: the policy's plus what decisions granted."""
        return self.policy.max_transport_failures + self.grants.transport_failures

    @property
    def max_rate_limited(self) -> int:
        """Throttled answers tolerated: the policy's plus what decisions granted."""
        return self.policy.max_rate_limited + self.grants.rate_limited

    @property
    def stop_at(self) -> datetime:
        """When waiting stops: the deadline, or the business deadline when earlier."""
        business = self.business_deadline_at
        return self.deadline_at if business is None else min(self.deadline_at, business)

    def cancel_target(self) -> str | None:
        """The cancel URL: named by a receipt, a status body or the caller, else the
        profile's template (``None`` when the operation has no cancel action)."""
        return self.cancel_url or self.profile.cancel.url(
            status_url=self.status_url, job_id=self.job_id
        )

    @property
    def is_finished(self) -> bool:
        """Whether an outcome is recorded."""
        return self.outcome is not None

    @property
    def is_final(self) -> bool:
        """Whether the outcome is final: recorded, and no decision request is open that
        could resume the operation (its completion is delivered then, once)."""
        return self.outcome is not None and self.decision_request is None

    def trusts(self, url: str) -> bool:
        """Whether the caller's credentials may go to *url*: the origin the caller named
        (the submit URL, else the status URL) or one of ``trusted_origins``."""
        try:
            wanted = origin(url)
            named = [
                self.caller_url or self.submit_url or self.status_url or "",
                *self.trusted_origins,
            ]
            return any(origin(trusted) == wanted for trusted in named)
        except ValueError:
            return False

    def to_outcome(self) -> Outcome:
        """Return the public :class:`Outcome`; ``outcome`` is ``None`` while still waiting."""
        end = self.finished_at or self.last_observed_at or self.created_at
        return Outcome(
            operation_id=self.operation_id,
            outcome=self.outcome,
            reason=self.reason,
            provider_state=self.provider_state,
            job_id=self.job_id,
            status_requests_used=self.status_requests_used,
            transport_failures_used=self.transport_failures_used,
            rate_limited_used=self.rate_limited_used,
            result_requests_used=self.result_requests_used,
            elapsed_seconds=max(0.0, (end - self.created_at).total_seconds()),
            last_http_status=self.last_http_status,
            request_id=self.last_request_id,
            result=self.result,
            result_url=self._unfetched_result_url(),
            error=self.error,
            counts=reported_counts(self.counts),
            usage=self.usage,
            errors=self.errors,
            options=self.decision_request.options if self.decision_request else (),
            decided_by=self.decided_by,
            next_check_at=None if self.is_finished else self.next_poll_at,
            provider_outcome=self.provider_outcome,
            unfetched=self.unfetched,
        )

    @property
    def unfetched(self) -> str | None:
        """What is still to fetch after the provider's terminal answer, while that end is
        not the outcome: ``"result"`` (phase ``fetching_result``) or ``"errors page"``
        (``fetching_errors``), still being fetched or stopped (escalated, timed out)
        before it was; else ``None``. With one, the job is known to be complete at the
        provider (``settled_outcome``); that piece is what is missing. Only the phases
        after a terminal answer fetch one, so the phase alone decides."""
        if self.outcome is None:
            phase: Phase | None = self.phase
        elif self.outcome in (OutcomeKind.ESCALATED, OutcomeKind.TIMED_OUT):
            phase = self.stopped_phase
        else:
            return None
        return _UNFETCHED.get(phase) if phase is not None else None

    @property
    def provider_outcome(self) -> OutcomeKind | None:
        """The provider's terminal answer while a piece is :attr:`unfetched`: the settled
        outcome (a record without one, written before it was kept, fetched a result
        after a success, or an errors page after a partial success)."""
        missing = self.unfetched
        if missing is None:
            return None
        default = (
            OutcomeKind.SUCCEEDED if missing == "result" else OutcomeKind.COMPLETED_WITH_ERRORS
        )
        return self.settled_outcome or default

    def _unfetched_result_url(self) -> str | None:
        """The result URL, redacted, when the result was not fetched from it."""
        if self.result_url is None or self.result_fetched_at is not None:
            return None
        return redact_url(self.result_url)

    def to_json(self) -> dict[str, JSON]:
        """Encode the record as versioned JSON (``schema`` = :data:`RECORD_SCHEMA`)."""
        data: dict[str, JSON] = {"schema": RECORD_SCHEMA}
        for name in FIELD_NAMES:
            data[name] = field_json(self, name)
        return data

    def shown_json(self) -> dict[str, JSON]:
        """:meth:`to_json` as output shows it (``show --json``, ``GET
        /operations/{id}``): every URL without user info or query
        (:func:`~waitbound._urls.redact_url`), the completion's target as its origin
        only (:func:`~waitbound._urls.origin_only`). Not for reading back."""
        data = self.to_json()
        for name in _URL_FIELDS:
            url = data.get(name)
            if isinstance(url, str):
                data[name] = redact_url(url)
        push = data.get("push")
        if isinstance(push, dict) and isinstance(push.get("notify_url"), str):
            push["notify_url"] = origin_only(str(push["notify_url"]))
        return data

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> Record:
        """Decode a record written by :meth:`to_json`.

        Raises:
            SchemaVersionError: written by a newer waitbound (upgrade waitbound).
        """
        schema = data.get("schema")
        if not isinstance(schema, int):
            raise StoreError(f"a stored record has no valid schema number ({schema!r})")
        if schema > RECORD_SCHEMA:
            raise SchemaVersionError(
                f"operation record schema {schema!r} is newer than this waitbound "
                f"understands ({RECORD_SCHEMA}); upgrade waitbound to read it"
            )
        return cls(**decode_fields(data, FIELD_NAMES))  # type: ignore[arg-type]


FIELD_NAMES: Final[tuple[str, ...]] = tuple(item.name for item in fields(Record))
"""Every field of :class:`Record`, in declaration order."""

_FIELD_SET: Final = frozenset(FIELD_NAMES)
_SLOTS: Final = {name: getattr(Record, name) for name in FIELD_NAMES}
"""Each field's slot (member descriptor); its ``__set__`` bypasses the frozen guard."""
_PUTS: Final = tuple(_SLOTS[name].__set__ for name in FIELD_NAMES)
_VALUES: Final = operator.attrgetter(*FIELD_NAMES)
"""Every field's value of a record, in declaration order, as one tuple."""


class RecordChanges(TypedDict, total=False):
    """The fields :meth:`Record.evolve` may change, each with its type (one key per
    field of :class:`Record`, in the same order; a test keeps the two the same)."""

    operation_id: str
    profile: Profile
    policy: Policy
    status_url: str | None
    created_at: datetime
    deadline_at: datetime
    next_poll_at: datetime
    business_deadline_at: datetime | None
    caller_url: str | None
    poll_kind: UrlKind
    poll_header: str | None
    location_url: str | None
    final_state_via: FinalStateVia | None
    result_url: str | None
    cancel_url: str | None
    errors_url: str | None
    job_id: str | None
    label: str | None
    submit_method: str | None
    submit_url: str | None
    submit_fingerprint: str | None
    idempotency_key: str | None
    submit_attempts: int
    max_submit_attempts: int
    phase: Phase
    outcome: OutcomeKind | None
    reason: Reason | None
    settled_outcome: OutcomeKind | None
    provider_state: JSONScalar
    progress: JSON
    last_http_status: int | None
    last_request_id: str | None
    last_observed_at: datetime | None
    job_seen_at: datetime | None
    pending_seen_at: datetime | None
    ended_seen_at: datetime | None
    delay_source: DelaySource | None
    attempt: int
    status_requests_used: int
    transport_failures_used: int
    rate_limited_used: int
    result_requests_used: int
    success_seen_at: datetime | None
    confirm_requests_used: int
    in_flight: RequestKind | None
    trusted_origins: tuple[str, ...]
    cancelable: bool | None
    cancel_on_deadline: bool
    cancel_due: bool
    cancel_requests_used: int
    cancel_requested_at: datetime | None
    cancel_requested_by: str | None
    cancel_reason: str | None
    result: JSON
    error: JSON
    counts: dict[str, JSON] | None
    usage: JSON
    errors: JSON
    finished_at: datetime | None
    result_fetched_at: datetime | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    stopped_phase: Phase | None
    grants: Grants
    push: Push
    decision_request: DecisionRequest | None
    decisions: tuple[Decision, ...]
    decided_by: str | None
    credential_label: str | None
    audit_seq: int
    audit_head: str
    audit_mac: str | None
    version: int


_URL_FIELDS: Final = (
    "status_url",
    "caller_url",
    "location_url",
    "result_url",
    "cancel_url",
    "errors_url",
    "submit_url",
)


def field_json(record: Record, name: str) -> JSON:
    """The stored JSON of one field of *record* (as :meth:`Record.to_json` writes it)."""
    value = getattr(record, name)
    if name == "profile":
        return {"name": value.name, "table": dict(value.source)}
    if name == "policy":
        return _policy_json(value)
    if name == "decisions":
        return [_part_json(decision) for decision in value]
    return _part_json(value)


def decode_fields(data: dict[str, JSON], names: tuple[str, ...]) -> dict[str, object]:
    """The typed values of the fields *names* found in *data* (stored JSON), ready for
    ``Record(**values)``; a field absent from *data* is left out (its default applies).

    Raises:
        ValueError, KeyError, TypeError, AssertionError: a stored value is damaged.
    """
    values: dict[str, object] = {}
    for name in names:
        if name in data:
            values[name] = _DECODERS.get(name, _same)(data[name])
    return values


def _same(raw: JSON) -> object:
    return raw


def _instant(raw: JSON) -> datetime | None:
    return None if raw is None else utc(datetime.fromisoformat(str(raw)))


def _stored_profile(raw: JSON) -> Profile:
    assert isinstance(raw, dict)
    return _profile(str(raw["name"]), canonical_json(raw["table"]))


def _stored_policy(raw: JSON) -> Policy:
    assert isinstance(raw, dict)
    return Policy(**raw)  # type: ignore[arg-type]


def _optional(kind: Callable[[str], object]) -> Callable[[JSON], object]:
    def decode(raw: JSON) -> object:
        return kind(str(raw)) if raw else None

    return decode


_DECODERS: Final[dict[str, Callable[[JSON], object]]] = {
    "profile": _stored_profile,
    "policy": _stored_policy,
    "grants": lambda raw: _part(Grants, raw) if isinstance(raw, dict) else Grants(),
    "push": lambda raw: _part(Push, raw) if isinstance(raw, dict) else Push(),
    "decision_request": lambda raw: _part(DecisionRequest, raw) if isinstance(raw, dict) else raw,
    "decisions": lambda raw: (
        tuple(_part(Decision, d) for d in raw if isinstance(d, dict))
        if isinstance(raw, list)
        else raw
    ),
    "phase": lambda raw: Phase(str(raw)),
    "stopped_phase": _optional(Phase),
    "outcome": _optional(OutcomeKind),
    "reason": _optional(Reason),
    "settled_outcome": _optional(OutcomeKind),
    "delay_source": _optional(DelaySource),
    "poll_kind": lambda raw: UrlKind(str(raw)),
    "final_state_via": _optional(FinalStateVia),
    "trusted_origins": lambda raw: tuple(raw) if isinstance(raw, list | tuple) else raw,
    **{name: _instant for name in FIELD_NAMES if name.endswith("_at")},
}
"""How each stored field becomes its typed value (others are stored as they are)."""


def _part_json(value: object) -> JSON:
    """A record value as stored: parts as objects, instants as RFC 3339, tuples as lists."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Grants | DecisionRequest | Decision | Push):
        return {item.name: _part_json(getattr(value, item.name)) for item in fields(value)}
    if isinstance(value, tuple):
        return [_part_json(item) for item in value]
    return value  # type: ignore[return-value]


def _part(kind: type[_P], raw: dict[str, JSON]) -> _P:
    """Decode a part written by :func:`_part_json` (unknown keys ignored)."""
    values: dict[str, object] = {}
    for item in fields(kind):
        if item.name not in raw:
            continue
        value: object = raw[item.name]
        if value is not None and (item.name == "at" or item.name.endswith("_at")):
            value = utc(datetime.fromisoformat(str(value)))
        elif isinstance(value, list):
            value = tuple(value)
        values[item.name] = value
    return kind(**values)  # type: ignore[arg-type]


def reported_counts(counts: Mapping[str, JSON] | None) -> dict[str, JSON] | None:
    """*counts* when the provider reported at least one of them, else ``None``: counts
    whose every member is null say nothing and are shown nowhere (an older record may
    hold them)."""
    if counts is None or all(value is None for value in counts.values()):
        return None
    return dict(counts)
