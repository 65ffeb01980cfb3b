"""The durable record of one operation: a small frozen value made of frozen parts.

A record is ten parts (:mod:`waitbound._model._record_parts`: ``contract``,
``submission``, ``counters``, ``schedule``, ``lease``, ``answer``, ``ending``,
``oversight``, ``push``, ``audit``) and a ``version``.

How a record changes: one way. :meth:`Record.evolve` takes whole parts (and
``version``) and shares the others; a part changes through its own constructor, by
:meth:`~waitbound._model._record_parts.Part.evolve` (``dataclasses.replace``) or a named
transition built on it::

    record.evolve(lease=record.lease.released())
    record.evolve(
        counters=record.counters.with_request("status"),
        schedule=record.schedule.evolve(next_poll_at=at, delay_source=None),
    )

``Record(...)`` takes parts (and ``version``) too; a new record is built from its parts
(``waitbound._engine._operation``). The parts not changed are the same objects, already
encoded, so a store writes and encodes only the parts a write changed. Every write is
checked against ``version`` (compare-and-swap).

How a record is read: by its parts (``record.schedule.next_poll_at``), which is how the
engine's transitions read it. Every field of every part is also a read-only property of
the record by its own name (``record.next_poll_at``, :mod:`waitbound._model._record_fields`)
for the people who read records; nothing is written by those names.

A record is stored as its parts' JSON (a column each) or as one flat versioned JSON
object (:meth:`Record.to_json`, ``RECORD_SCHEMA``, the keys of :data:`FIELD_NAMES` in
their order) holding only allowlisted fields: no raw headers, no secrets.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import FrozenInstanceError, dataclass
from datetime import datetime
from typing import Final, TypedDict, Unpack

from waitbound._base._errors import SchemaVersionError, StoreError
from waitbound._base._json import JSON
from waitbound._base._urls import origin, origin_only, redact_url, url_without_userinfo
from waitbound._model._outcome import Outcome, OutcomeKind
from waitbound._model._record_fields import FlatFields
from waitbound._model._record_parts import (
    NAMES,
    PARTS,
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
)
from waitbound._profile._policy import MAX_COUNT, Policy

__all__ = [
    "FIELD_NAMES",
    "MAX_COUNT",
    "PLACES",
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
    "RecordParts",
    "RequestKind",
    "Schedule",
    "Submission",
    "assemble",
    "decode_fields",
    "field_json",
    "record_of_fields",
    "reported_counts",
]

_UNFETCHED: Final = {Phase.FETCHING_RESULT: "result", Phase.FETCHING_ERRORS: "errors page"}
"""The piece an operation fetches after the provider's terminal answer, by phase."""

_COUNTERS: Final = Counters()
_LEASE: Final = Lease()
_ANSWER: Final = Answer()
_ENDING: Final = Ending()
_OVERSIGHT: Final = Oversight()
_PUSH: Final = Push()
_AUDIT: Final = AuditHead()
"""The parts a new record starts with when none is given (shared: a part is frozen, and
its encoding is computed once for every record that holds it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Record(FlatFields):
    """Our durable record of waiting on one job. Instants are aware UTC.

    Made of parts (each a frozen value, see :mod:`waitbound._model._record_parts`):
    ``contract`` (what it was created with), ``submission`` (where the job is),
    ``counters`` (budgets spent), ``schedule`` (deadline, next poll), ``lease`` (who
    holds it, the request in flight), ``answer`` (the last answer), ``ending`` (phase,
    outcome, result), ``oversight`` (grants, decisions, cancel requests), ``push``
    (webhooks in, completion out) and ``audit`` (the chain's head), plus ``version``.
    ``Record(...)`` takes the parts by name (``contract``, ``submission`` and
    ``schedule`` are required; the others start empty) and ``version`` (default 0);
    :meth:`evolve` is the one way to change one.

    Read-only flat names: every field of every part is also readable by its own name
    (``record.next_poll_at`` is ``record.schedule.next_poll_at``,
    :class:`~waitbound._model._record_fields.FlatFields`); none is writable, and none is
    taken by ``Record(...)`` or :meth:`evolve`.

    ``lease.in_flight`` names a request that was reserved (counted and persisted) but
    whose answer is not recorded yet; after a crash it stays counted.

    ``submission.status_url`` is the polling URL; ``poll_kind`` says how its answers are
    read and ``poll_header`` which header named it (a poll answer carrying that header
    moves it). ``caller_url`` pins the URL the caller named once a polling URL has
    moved, so credentials never follow a move. ``location_url`` is the first answer's
    ``Location`` and ``contract.final_state_via`` the caller's or profile's choice of
    where the final state is.

    ``oversight.grants`` are what people's decisions added to the policy's limits; the
    limits that apply are :attr:`max_requests`, :attr:`max_transport_failures`,
    :attr:`max_rate_limited`. ``oversight.decision_request`` is the open request for a
    person's decision (set when the operation stops without an honest outcome, or an
    agent asks for more time), ``decisions`` the decisions made, ``ending.stopped_phase``
    the phase it stopped in (where a decision resumes it). ``audit`` names the last
    event of the audit chain (``audit_seq``, ``audit_head``) and ``audit_mac`` the HMAC
    of that head under the audit key kept outside the store (``None``: written without
    a key). See ``docs/audit.md``.

    Raises:
        TypeError: ``Record(...)`` given a name that is not a part (nor ``version``), or
            without ``contract``, ``submission`` or ``schedule``.
    """

    contract: Contract
    submission: Submission
    counters: Counters = _COUNTERS
    schedule: Schedule
    lease: Lease = _LEASE
    answer: Answer = _ANSWER
    ending: Ending = _ENDING
    oversight: Oversight = _OVERSIGHT
    push: Push = _PUSH
    audit: AuditHead = _AUDIT
    version: int = 0

    def evolve(self, **changes: Unpack[RecordParts]) -> Record:
        """A copy of this record with whole parts replaced (part name → new part) and
        ``version`` when given; the other parts are the same objects (with their kept
        encodings). A part is changed by its own constructor first:
        ``record.evolve(schedule=record.schedule.evolve(next_poll_at=at))``.

        Raises:
            TypeError: a name in *changes* is not a part (nor ``version``).
        """
        values = [*_PARTS_OF(self), self.version]
        for name, value in changes.items():
            index = _INDEX.get(name)
            if index is None:
                raise TypeError(f"Record.evolve() got an unexpected keyword argument {name!r}")
            values[index] = value
        return _assemble(values)

    def parts(self) -> tuple[Part, ...]:
        """The record's parts, in the order of :data:`~waitbound._model._record_parts.PARTS`."""
        found: tuple[Part, ...] = _PARTS_OF(self)
        return found

    @property
    def requests_used(self) -> int:
        """Requests sent so far against ``policy.max_requests``: every kind counts
        (submit attempts, status, result and errors pages, cancels)."""
        return (
            self.counters.submit_attempts
            + self.counters.status_requests_used
            + self.counters.result_requests_used
            + self.counters.cancel_requests_used
        )

    @property
    def max_requests(self) -> int:
        """The request budget that applies: the policy's plus what decisions granted."""
        return self.contract.policy.max_requests + self.oversight.grants.requests

    @property
    def max_transport_failures(self) -> int:
        """Transport failures tolerated: the policy's plus what decisions granted."""
        return (
            self.contract.policy.max_transport_failures + self.oversight.grants.transport_failures
        )

    @property
    def max_rate_limited(self) -> int:
        """Throttled answers tolerated: the policy's plus what decisions granted."""
        return self.contract.policy.max_rate_limited + self.oversight.grants.rate_limited

    @property
    def stop_at(self) -> datetime:
        """When waiting stops: the deadline, or the business deadline when earlier."""
        business = self.contract.business_deadline_at
        return (
            self.schedule.deadline_at
            if business is None
            else min(self.schedule.deadline_at, business)
        )

    def cancel_target(self) -> str | None:
        """The cancel URL: named by a receipt, a status body or the caller, else the
        profile's template (``None`` when the operation has no cancel action)."""
        return self.submission.cancel_url or self.contract.profile.cancel.url(
            status_url=self.submission.status_url, job_id=self.submission.job_id
        )

    @property
    def is_finished(self) -> bool:
        """Whether an outcome is recorded."""
        return self.ending.outcome is not None

    @property
    def is_final(self) -> bool:
        """Whether the outcome is final: recorded, and no decision request is open that
        could resume the operation (its completion is delivered then, once)."""
        return self.ending.outcome is not None and self.oversight.decision_request is None

    def trusts(self, url: str) -> bool:
        """Whether the caller's credentials may go to *url*: the origin the caller named
        (the submit URL, else the status URL) or one of ``trusted_origins``."""
        try:
            wanted = origin(url)
            named = [
                self.submission.caller_url
                or self.submission.submit_url
                or self.submission.status_url
                or "",
                *self.contract.trusted_origins,
            ]
            return any(origin(trusted) == wanted for trusted in named)
        except ValueError:
            return False

    def to_outcome(self) -> Outcome:
        """Return the public :class:`Outcome`; ``outcome`` is ``None`` while still waiting."""
        end = self.ending.finished_at or self.answer.last_observed_at or self.contract.created_at
        return Outcome(
            operation_id=self.contract.operation_id,
            outcome=self.ending.outcome,
            reason=self.ending.reason,
            provider_state=self.answer.provider_state,
            job_id=self.submission.job_id,
            status_requests_used=self.counters.status_requests_used,
            transport_failures_used=self.counters.transport_failures_used,
            rate_limited_used=self.counters.rate_limited_used,
            result_requests_used=self.counters.result_requests_used,
            elapsed_seconds=max(0.0, (end - self.contract.created_at).total_seconds()),
            last_http_status=self.answer.last_http_status,
            request_id=self.answer.last_request_id,
            result=self.ending.result,
            result_url=self._unfetched_result_url(),
            error=self.ending.error,
            counts=reported_counts(self.ending.counts),
            usage=self.ending.usage,
            errors=self.ending.errors,
            errors_url=self.shown_errors_url,
            options=self.oversight.decision_request.options
            if self.oversight.decision_request
            else (),
            decided_by=self.oversight.decided_by,
            next_check_at=None if self.is_finished else self.schedule.next_poll_at,
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
        words = self.oversight.cancel_refused
        if (
            words is None
            or self.oversight.cancel_refused_at is None
            or self.answer.ended_seen_at is None
        ):
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
        if self.ending.outcome is None:
            phase: Phase | None = self.ending.phase
        elif self.ending.outcome in (OutcomeKind.ESCALATED, OutcomeKind.TIMED_OUT):
            phase = self.ending.stopped_phase
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
        return self.ending.settled_outcome or default

    @property
    def shown_errors_url(self) -> str | None:
        """The errors URL as the outcome shows it: without user info, its query kept
        only when the profile marks it safe (``errors_url_query_safe``)."""
        if self.submission.errors_url is None:
            return None
        if self.contract.profile.errors_url_query_safe:
            return url_without_userinfo(self.submission.errors_url)
        return redact_url(self.submission.errors_url)

    def _unfetched_result_url(self) -> str | None:
        """The result URL, redacted, when the result was not fetched from it."""
        if self.submission.result_url is None or self.ending.result_fetched_at is not None:
            return None
        return redact_url(self.submission.result_url)

    def to_json(self) -> dict[str, JSON]:
        """Encode the record as versioned JSON (``schema`` = :data:`RECORD_SCHEMA`): one
        flat object, every field of :data:`FIELD_NAMES` by name, each part's values as
        its (kept) encoding holds them. Nested values are shared with the parts' kept
        encodings: read them, do not change them."""
        return _flat_json(_PARTS_OF(self), self.version)

    def shown_json(self) -> dict[str, JSON]:
        """:meth:`to_json` as output shows it (``show --json``, ``GET
        /operations/{id}``): every URL without user info or query
        (:func:`~waitbound._base._urls.redact_url`), the completion's target as its origin
        only (:func:`~waitbound._base._urls.origin_only`). Not for reading back."""
        return _shown_flat_json(self.to_json())

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> Record:
        """Decode a record written by :meth:`to_json`.

        Raises:
            SchemaVersionError: written by a newer waitbound (upgrade waitbound).
            StoreError: *data* has no valid ``schema``.
            ValueError, KeyError, TypeError, AssertionError: a stored value is damaged.
        """
        parts, version = _parts_of_json(data)
        return assemble(parts, version)


class RecordParts(TypedDict, total=False):
    """What :meth:`Record.evolve` takes: each part by its name, and ``version``."""

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


_PARTS_OF: Final = operator.attrgetter(*(attr for attr, _ in PARTS))
"""A record's parts, in :data:`~waitbound._model._record_parts.PARTS` order, as one tuple."""
_INDEX: Final = {name: index for index, name in enumerate((*(a for a, _ in PARTS), "version"))}
"""Each name :meth:`Record.evolve` takes: its place in a record's slots."""
_SLOT_PUTS: Final = tuple(
    Record.__dict__[attr].__set__ for attr in (*(attr for attr, _ in PARTS), "version")
)


def _assemble(values: Sequence[object]) -> Record:
    record = object.__new__(Record)
    for put, value in zip(_SLOT_PUTS, values, strict=True):
        put(record, value)
    return record


def assemble(parts: Sequence[Part], version: int) -> Record:
    """``Record(**parts, version=version)`` for *parts* given in
    :data:`~waitbound._model._record_parts.PARTS` order (one of each kind), by setting
    the record's slots: what a store builds from the parts it read."""
    return _assemble((*parts, version))


def record_of_fields(values: Mapping[str, object]) -> Record:
    """The record of typed flat values (flat key → value, as
    :func:`decode_fields` decodes a stored flat object):
    how a record stored flat (schemas 1-4) is read.

    Raises:
        TypeError: a required field is missing, or a name is no flat key.
    """
    parts, version = _parts_of_fields(values)
    return assemble(parts, version)


def _frozen(self: Record, name: str, value: object = None) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


# A frozen slotted dataclass's own guard fails with a TypeError for a name that is not a
# field (CPython's ``super(cls, self)`` names the class before ``slots`` rebuilt it); a
# flat name is a property, not a field, so the record keeps its own guard.
Record.__setattr__ = _frozen  # type: ignore[method-assign,assignment]
Record.__delattr__ = _frozen  # type: ignore[method-assign,assignment]


for _attr, _kind in PARTS:  # the read-only flat names (see _record_fields)
    if _attr != "push":  # the whole part is ``record.push``
        for _name in NAMES[_kind]:
            setattr(
                FlatFields,
                _name,
                property(
                    operator.attrgetter(f"{_attr}.{_name}"),
                    doc=f"``{_attr}.{_name}``, read-only (see :class:`Record`).",
                ),
            )
del _attr, _kind, _name


# -- the flat stored JSON -------------------------------------------------------------


FIELD_NAMES: Final[tuple[str, ...]] = (
    "operation_id", "profile", "policy", "status_url", "created_at", "deadline_at",
    "next_poll_at", "business_deadline_at", "caller_url", "poll_kind", "poll_header",
    "location_url", "final_state_via", "result_url", "cancel_url", "errors_url", "job_id",
    "label", "submit_method", "submit_url", "submit_fingerprint", "idempotency_key",
    "submit_attempts", "max_submit_attempts", "phase", "outcome", "reason",
    "settled_outcome", "settled_reason", "provider_state", "progress", "last_http_status",
    "last_request_id", "last_observed_at", "job_seen_at", "pending_seen_at",
    "ended_seen_at", "delay_source", "attempt", "last_delay_s", "last_hint_s",
    "hints_followed", "hints_true", "grant_ends_at", "status_requests_used",
    "transport_failures_used", "rate_limited_used", "result_requests_used",
    "success_seen_at", "doubted_at", "confirm_requests_used", "in_flight",
    "trusted_origins", "cancelable", "estimated_end_at", "estimate_from",
    "cancel_on_deadline", "cancel_due", "cancel_requests_used", "cancel_requested_at",
    "cancel_requested_by", "cancel_reason", "cancel_accepted_at", "cancel_refused_at",
    "cancel_refused", "result", "error", "counts", "usage", "errors", "finished_at",
    "result_fetched_at", "lease_owner", "lease_expires_at", "stopped_phase", "grants",
    "push", "decision_request", "decisions", "decided_by", "credential_label", "audit_seq",
    "audit_head", "audit_mac", "version",
)  # fmt: skip
"""The flat stored object's keys after ``schema``, in the order they are written: every
field of every part by its own name, ``push`` (the whole part, as one object) and
``version``. A stored format: never reordered (a test checks it names each field once)."""

PLACES: Final[dict[str, tuple[int, str | None]]] = {
    **{
        name: (index, name)
        for index, (attr, kind) in enumerate(PARTS)
        if attr != "push"
        for name in NAMES[kind]
    },
    "push": (PARTS.index(("push", Push)), None),
}
"""Where each flat key (but ``version``) lives: (part index in
:data:`~waitbound._model._record_parts.PARTS`, field name in it), or ``None`` for the
key that is a whole part (``push``)."""

_URL_FIELDS: Final = (
    "status_url",
    "caller_url",
    "location_url",
    "result_url",
    "cancel_url",
    "errors_url",
    "submit_url",
)

_DEFAULT_PARTS: Final[dict[str, Part]] = {
    "counters": _COUNTERS,
    "lease": _LEASE,
    "answer": _ANSWER,
    "ending": _ENDING,
    "oversight": _OVERSIGHT,
    "push": _PUSH,
    "audit": _AUDIT,
}
"""The parts a record read from flat JSON takes when the JSON names none of their fields."""


def _flat_json(parts: Sequence[Part], version: int) -> dict[str, JSON]:
    """The flat stored object of a record of *parts* (in
    :data:`~waitbound._model._record_parts.PARTS` order) and *version*: ``schema``, then
    every key of :data:`FIELD_NAMES`, each part's values as its kept encoding holds
    them (nested values are shared with it: read them, do not change them)."""
    merged: dict[str, JSON] = {}
    for part in parts:
        merged.update(part.stored())
    merged["push"] = dict(parts[PLACES["push"][0]].stored())
    merged["version"] = version
    data: dict[str, JSON] = {"schema": RECORD_SCHEMA}
    for name in FIELD_NAMES:
        data[name] = merged[name]
    return data


def _shown_flat_json(data: dict[str, JSON]) -> dict[str, JSON]:
    """*data* (a fresh :func:`flat_json`) as output shows it, changed in place: every URL
    without user info or query (:func:`~waitbound._base._urls.redact_url`), the
    completion's target as its origin only (:func:`~waitbound._base._urls.origin_only`)."""
    for name in _URL_FIELDS:
        url = data.get(name)
        if isinstance(url, str):
            data[name] = redact_url(url)
    push = data.get("push")
    if isinstance(push, dict) and isinstance(push.get("notify_url"), str):
        push["notify_url"] = origin_only(str(push["notify_url"]))
    return data


def _parts_of_json(data: Mapping[str, JSON]) -> tuple[list[Part], int]:
    """The parts and version of a record stored as the flat object *data*.

    Raises:
        SchemaVersionError: written by a newer waitbound (upgrade waitbound).
        StoreError: *data* has no valid ``schema``.
        ValueError, KeyError, TypeError, AssertionError: a stored value is damaged.
    """
    schema = data.get("schema")
    if not isinstance(schema, int):
        raise StoreError(f"a stored record has no valid schema number ({schema!r})")
    if schema > RECORD_SCHEMA:
        raise SchemaVersionError(
            f"operation record schema {schema!r} is newer than this waitbound "
            f"understands ({RECORD_SCHEMA}); upgrade waitbound to read it"
        )
    return _parts_of_fields(decode_fields(data, FIELD_NAMES))


def _parts_of_fields(values: Mapping[str, object]) -> tuple[list[Part], int]:
    """The parts and version of a record given as typed flat values (flat key → value,
    as :func:`decode_fields` gives them): each part built by its constructor from the
    values that live in it; a part none of whose fields is given is the default one.

    Raises:
        TypeError: a required field is missing (``operation_id``, ``profile``,
            ``policy``, ``created_at``, ``status_url``, ``deadline_at``,
            ``next_poll_at``), or a name is no flat key.
    """
    grouped: list[dict[str, object]] = [{} for _ in PARTS]
    given: dict[int, object] = {}
    version: object = 0
    for name, value in values.items():
        if name == "version":
            version = value
            continue
        place = PLACES.get(name)
        if place is None:
            raise TypeError(f"a record has no field {name!r}")
        index, field_name = place
        if field_name is None:
            given[index] = value
        else:
            grouped[index][field_name] = value
    parts: list[Part] = []
    for index, (attr, kind) in enumerate(PARTS):
        if index in given:
            parts.append(given[index])  # type: ignore[arg-type]
        elif grouped[index]:
            parts.append(kind(**grouped[index]))
        else:
            parts.append(_DEFAULT_PARTS.get(attr) or kind())
    assert isinstance(version, int)
    return parts, version


def decode_fields(data: Mapping[str, JSON], names: tuple[str, ...]) -> dict[str, object]:
    """The typed values of the flat keys *names* found in *data* (stored JSON), ready
    for :func:`record_of_fields`; a key absent from *data* is left out (its default
    applies).

    Raises:
        ValueError, KeyError, TypeError, AssertionError: a stored value is damaged.
    """
    return {name: decode_value(name, data[name]) for name in names if name in data}


def field_json(record: Record, name: str) -> JSON:
    """The stored JSON of one flat key of *record* (as :meth:`Record.to_json` writes
    it), read from its part's kept encoding (shared: do not change it)."""
    if name == "version":
        return record.version
    index, field_name = PLACES[name]
    part: Part = getattr(record, PARTS[index][0])
    stored = part.stored()
    return stored if field_name is None else stored[field_name]


def reported_counts(counts: Mapping[str, JSON] | None) -> dict[str, JSON] | None:
    """*counts* when the provider reported at least one of them, else ``None``: counts
    whose every member is null say nothing and are shown nowhere (an older record may
    hold them)."""
    if counts is None or all(value is None for value in counts.values()):
        return None
    return dict(counts)
