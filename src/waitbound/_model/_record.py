"""The durable record of one operation: a small frozen value made of frozen parts.

A record is ten parts (:mod:`waitbound._model._record_parts`: ``contract``, ``submission``,
``counters``, ``schedule``, ``lease``, ``answer``, ``ending``, ``oversight``, ``push``,
``audit``) and a ``version``. Every change is :meth:`Record.evolve` (flat field names,
routed to the parts they live in) or :meth:`Record.with_parts` (whole parts); both copy
only the parts they change, so the others keep their encoding. Every write is checked
against ``version`` (compare-and-swap). Each flat field (``record.status_requests_used``,
``record.next_poll_at``, ...) is read from its part. A record is stored as its parts'
JSON (a store writes only the parts a write changed) or as one flat versioned JSON
object (:meth:`Record.to_json`, ``RECORD_SCHEMA``) holding only allowlisted fields: no
raw headers, no secrets.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import FrozenInstanceError, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final, TypedDict, Unpack

from waitbound._base._errors import SchemaVersionError, StoreError
from waitbound._base._json import JSON, JSONScalar
from waitbound._base._urls import origin, origin_only, redact_url, url_without_userinfo
from waitbound._model._outcome import Outcome, OutcomeKind, Reason
from waitbound._model._record_parts import (
    PARTS,
    PLACES,
    RECORD_SCHEMA,
    Answer,
    AuditHead,
    Contract,
    Counters,
    Decision,
    DecisionRequest,
    Ending,
    Grants,
    Lease,
    Oversight,
    Part,
    Phase,
    Push,
    RequestKind,
    Schedule,
    Submission,
    decode_value,
    evolve_part,
)
from waitbound._profile._contract import Profile
from waitbound._profile._policy import MAX_COUNT, Policy
from waitbound._profile._protocol import FinalStateVia, UrlKind
from waitbound._profile._schedule import DelaySource

__all__ = [
    "FIELD_NAMES",
    "MAX_COUNT",
    "RECORD_SCHEMA",
    "Answer",
    "AuditHead",
    "Contract",
    "Counters",
    "Decision",
    "DecisionRequest",
    "Ending",
    "Grants",
    "Lease",
    "Oversight",
    "Phase",
    "Policy",
    "Push",
    "Record",
    "RecordChanges",
    "RequestKind",
    "Schedule",
    "Submission",
    "assemble",
    "decode_fields",
    "field_json",
    "reported_counts",
]

_UNFETCHED: Final = {Phase.FETCHING_RESULT: "result", Phase.FETCHING_ERRORS: "errors page"}
"""The piece an operation fetches after the provider's terminal answer, by phase."""


@dataclass(frozen=True, slots=True, init=False)
class Record:
    """Our durable record of waiting on one job. Instants are aware UTC.

    Made of parts (each a frozen value, see :mod:`waitbound._model._record_parts`):
    ``contract`` (what it was created with), ``submission`` (where the job is),
    ``counters`` (budgets spent), ``schedule`` (deadline, next poll), ``lease`` (who
    holds it, the request in flight), ``answer`` (the last answer), ``ending`` (phase,
    outcome, result), ``oversight`` (grants, decisions, cancel requests), ``push``
    (webhooks in, completion out) and ``audit`` (the chain's head), plus ``version``.
    Every field of every part is also readable by its own name on the record
    (``record.next_poll_at`` is ``record.schedule.next_poll_at``), and
    ``Record(**fields)`` takes those flat names (or whole parts).

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

    Raises:
        TypeError: ``Record(...)`` given a name that is neither a field nor a part, or
            without a required field (``operation_id``, ``profile``, ``policy``,
            ``status_url``, ``created_at``, ``deadline_at``, ``next_poll_at``).
    """

    contract: Contract
    submission: Submission
    counters: Counters
    schedule: Schedule
    lease: Lease
    answer: Answer
    ending: Ending
    oversight: Oversight
    push: Push
    audit: AuditHead
    version: int

    if TYPE_CHECKING:  # the flat fields, read from the parts (see PLACES)
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
        settled_reason: Reason | None
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
        last_delay_s: float | None
        last_hint_s: float | None
        hints_followed: int
        hints_true: int
        grant_ends_at: datetime | None
        status_requests_used: int
        transport_failures_used: int
        rate_limited_used: int
        result_requests_used: int
        success_seen_at: datetime | None
        doubted_at: datetime | None
        confirm_requests_used: int
        in_flight: RequestKind | None
        trusted_origins: tuple[str, ...]
        cancelable: bool | None
        estimated_end_at: datetime | None
        estimate_from: str | None
        cancel_on_deadline: bool
        cancel_due: bool
        cancel_requests_used: int
        cancel_requested_at: datetime | None
        cancel_requested_by: str | None
        cancel_reason: str | None
        cancel_accepted_at: datetime | None
        cancel_refused_at: datetime | None
        cancel_refused: str | None
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
        decision_request: DecisionRequest | None
        decisions: tuple[Decision, ...]
        decided_by: str | None
        credential_label: str | None
        audit_seq: int
        audit_head: str
        audit_mac: str | None

    def __init__(self, **values: Unpack[RecordFields]) -> None:
        given: dict[int, object] = {}
        grouped: dict[int, dict[str, object]] = {}
        version: object = 0
        for name, value in values.items():
            place = _EVERY_PLACE.get(name)
            if place is None:
                raise TypeError(f"Record.__init__() got an unexpected keyword argument {name!r}")
            index, field_name = place
            if index == _VERSION:
                version = value
            elif field_name is None:
                given[index] = value
            else:
                grouped.setdefault(index, {})[field_name] = value
        for index, (attr, kind) in enumerate(PARTS):
            changes = grouped.get(index)
            if index in given:
                part = given[index]
                if changes:
                    part = evolve_part(part, changes)  # type: ignore[type-var]
            else:
                part = kind(**changes) if changes else _DEFAULT_PARTS.get(attr) or kind()
            object.__setattr__(self, attr, part)
        object.__setattr__(self, "version", version)

    def evolve(self, **changes: Unpack[RecordChanges]) -> Record:
        """A copy of this record with *changes* (flat field name → new value) applied,
        each routed to the part it lives in: only the parts touched are copied (the
        others, and their kept encodings, are shared).

        Equal to ``dataclasses.replace(self, **changes)``, built by setting slots
        directly instead of running the frozen ``__init__`` (neither ``Record`` nor its
        parts has a ``__post_init__``, so nothing is skipped).

        Raises:
            TypeError: a name in *changes* is not a field of :class:`Record` (the same
                message ``dataclasses.replace`` gives).
        """
        parts = list(_PARTS_OF(self))
        version = self.version
        grouped: dict[int, dict[str, object]] = {}
        for name, value in changes.items():
            place = PLACES.get(name)
            if place is None:
                if name == "version":
                    version = value  # type: ignore[assignment]
                    continue
                raise TypeError(f"Record.__init__() got an unexpected keyword argument {name!r}")
            index, field_name = place
            if field_name is None:
                parts[index] = value
            else:
                found = grouped.get(index)
                if found is None:
                    grouped[index] = {field_name: value}
                else:
                    found[field_name] = value
        for index, fields in grouped.items():
            parts[index] = evolve_part(parts[index], fields)
        return assemble(parts, version)

    def with_parts(self, **parts: Unpack[PartChanges]) -> Record:
        """A copy of this record with whole parts replaced (part name → new part), and
        ``version`` when given; the other parts are shared.

        Raises:
            TypeError: a name is not a part (nor ``version``).
        """
        found = list(_PARTS_OF(self))
        version = self.version
        for name, value in parts.items():
            index = _PART_INDEX.get(name)
            if index is None:
                if name != "version":
                    raise TypeError(f"Record.with_parts() got an unexpected part {name!r}")
                version = value  # type: ignore[assignment]
            else:
                found[index] = value
        return assemble(found, version)

    def parts(self) -> tuple[Part, ...]:
        """The record's parts, in the order of :data:`~waitbound._model._record_parts.PARTS`."""
        found: tuple[Part, ...] = _PARTS_OF(self)
        return found

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
            errors_url=self.shown_errors_url,
            options=self.decision_request.options if self.decision_request else (),
            decided_by=self.decided_by,
            next_check_at=None if self.is_finished else self.next_poll_at,
            provider_outcome=self.provider_outcome,
            unfetched=self.unfetched,
            note=self.late_cancel,
        )

    @property
    def late_cancel(self) -> str | None:
        """The note on an end the status look after a cancel the provider did not
        accept showed the job had already reached: "the cancel … was refused by the
        provider (HTTP 409): it came too late, the job had already ended"; ``None``
        when no cancel was refused before the end (see ``_canceling.py``)."""
        words = self.cancel_refused
        if words is None or self.cancel_refused_at is None or self.ended_seen_at is None:
            return None
        return f"{words}: it came too late, the job had already ended"

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

    @property
    def shown_errors_url(self) -> str | None:
        """The errors URL as the outcome shows it: without user info, its query kept
        only when the profile marks it safe (``errors_url_query_safe``)."""
        if self.errors_url is None:
            return None
        if self.profile.errors_url_query_safe:
            return url_without_userinfo(self.errors_url)
        return redact_url(self.errors_url)

    def _unfetched_result_url(self) -> str | None:
        """The result URL, redacted, when the result was not fetched from it."""
        if self.result_url is None or self.result_fetched_at is not None:
            return None
        return redact_url(self.result_url)

    def to_json(self) -> dict[str, JSON]:
        """Encode the record as versioned JSON (``schema`` = :data:`RECORD_SCHEMA`): one
        flat object, every field of :data:`FIELD_NAMES` by name, each part's values as
        its (kept) encoding holds them. Nested values are shared with the parts' kept
        encodings: read them, do not change them."""
        merged: dict[str, JSON] = {}
        for part in _PARTS_OF(self):
            merged.update(part.stored())
        merged["push"] = dict(self.push.stored())
        merged["version"] = self.version
        data: dict[str, JSON] = {"schema": RECORD_SCHEMA}
        for name in FIELD_NAMES:
            data[name] = merged[name]
        return data

    def shown_json(self) -> dict[str, JSON]:
        """:meth:`to_json` as output shows it (``show --json``, ``GET
        /operations/{id}``): every URL without user info or query
        (:func:`~waitbound._base._urls.redact_url`), the completion's target as its origin
        only (:func:`~waitbound._base._urls.origin_only`). Not for reading back."""
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


_PARTS_OF: Final = operator.attrgetter(*(attr for attr, _ in PARTS))
"""A record's parts, in :data:`~waitbound._model._record_parts.PARTS` order, as one tuple."""
_PART_INDEX: Final = {attr: index for index, (attr, _) in enumerate(PARTS)}
_VERSION: Final = -1
_EVERY_PLACE: Final[dict[str, tuple[int, str | None]]] = {
    **PLACES,
    **{attr: (index, None) for attr, index in _PART_INDEX.items()},
    "version": (_VERSION, None),
}
"""What ``Record(...)`` takes: each flat field's place, each part, and ``version``."""
_DEFAULT_PARTS: Final[dict[str, Part]] = {
    "counters": Counters(),
    "lease": Lease(),
    "answer": Answer(),
    "ending": Ending(),
    "oversight": Oversight(),
    "push": Push(),
    "audit": AuditHead(),
}
"""The parts a new record starts with when it names none of their fields (shared: a
part is frozen, and its encoding is computed once for every record that holds it)."""

_SLOT_PUTS: Final = tuple(
    Record.__dict__[attr].__set__ for attr in (*(attr for attr, _ in PARTS), "version")
)


def assemble(parts: Sequence[Part], version: int) -> Record:
    """A record of *parts* (one of each kind, in
    :data:`~waitbound._model._record_parts.PARTS` order) and *version*, without ``__init__``
    (what a store builds from the parts it read)."""
    record = object.__new__(Record)
    for put, value in zip(_SLOT_PUTS, (*parts, version), strict=True):
        put(record, value)
    return record


def _frozen(self: Record, name: str, value: object = None) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


# A frozen slotted dataclass's own guard fails with a TypeError for a name that is not a
# field (CPython's ``super(cls, self)`` names the class before ``slots`` rebuilt it); a
# flat field is a property, not a field, so the record keeps its own guard.
Record.__setattr__ = _frozen  # type: ignore[method-assign,assignment]
Record.__delattr__ = _frozen  # type: ignore[method-assign,assignment]

for _name, (_index, _field) in PLACES.items():
    if _field is not None:
        setattr(
            Record,
            _name,
            property(
                operator.attrgetter(f"{PARTS[_index][0]}.{_field}"),
                doc=f"``{PARTS[_index][0]}.{_field}`` (see :class:`Record`).",
            ),
        )
del _name, _index, _field


class RecordChanges(TypedDict, total=False):
    """The flat fields :meth:`Record.evolve` may change, each with its type: every
    field of every part by its own name, ``push`` (the whole part) and ``version``, in
    the order of :data:`FIELD_NAMES` (a test keeps these and the parts the same)."""

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
    settled_reason: Reason | None
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
    last_delay_s: float | None
    last_hint_s: float | None
    hints_followed: int
    hints_true: int
    grant_ends_at: datetime | None
    status_requests_used: int
    transport_failures_used: int
    rate_limited_used: int
    result_requests_used: int
    success_seen_at: datetime | None
    doubted_at: datetime | None
    confirm_requests_used: int
    in_flight: RequestKind | None
    trusted_origins: tuple[str, ...]
    cancelable: bool | None
    estimated_end_at: datetime | None
    estimate_from: str | None
    cancel_on_deadline: bool
    cancel_due: bool
    cancel_requests_used: int
    cancel_requested_at: datetime | None
    cancel_requested_by: str | None
    cancel_reason: str | None
    cancel_accepted_at: datetime | None
    cancel_refused_at: datetime | None
    cancel_refused: str | None
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


class PartChanges(TypedDict, total=False):
    """What :meth:`Record.with_parts` may replace: each part, and ``version``."""

    contract: Contract
    submission: Submission
    counters: Counters
    schedule: Schedule
    lease: Lease
    answer: Answer
    ending: Ending
    oversight: Oversight
    push: Push
    audit: AuditHead
    version: int


class RecordFields(RecordChanges, total=False):
    """What ``Record(...)`` takes: the flat fields of :class:`RecordChanges` and whole
    parts (a part given with some of its fields: the fields win)."""

    contract: Contract
    submission: Submission
    counters: Counters
    schedule: Schedule
    lease: Lease
    answer: Answer
    ending: Ending
    oversight: Oversight
    audit: AuditHead


FIELD_NAMES: Final[tuple[str, ...]] = tuple(RecordChanges.__annotations__)
"""Every flat field of :class:`Record` (the stored JSON's keys, after ``schema``)."""


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
    """The stored JSON of one flat field of *record* (as :meth:`Record.to_json` writes
    it), read from its part's kept encoding (shared: do not change it)."""
    if name == "version":
        return record.version
    index, field_name = PLACES[name]
    part: Part = getattr(record, PARTS[index][0])
    stored = part.stored()
    return stored if field_name is None else stored[field_name]


def decode_fields(data: Mapping[str, JSON], names: tuple[str, ...]) -> dict[str, object]:
    """The typed values of the flat fields *names* found in *data* (stored JSON), ready
    for ``Record(**values)``; a field absent from *data* is left out (its default
    applies).

    Raises:
        ValueError, KeyError, TypeError, AssertionError: a stored value is damaged.
    """
    return {name: decode_value(name, data[name]) for name in names if name in data}


def reported_counts(counts: Mapping[str, JSON] | None) -> dict[str, JSON] | None:
    """*counts* when the provider reported at least one of them, else ``None``: counts
    whose every member is null say nothing and are shown nowhere (an older record may
    hold them)."""
    if counts is None or all(value is None for value in counts.values()):
        return None
    return dict(counts)
