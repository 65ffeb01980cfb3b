"""The parts a :class:`~waitbound._model._record.Record` is made of, and how each is encoded.

An operation's record changes at different rates: what it was created with never (or
only by a person's decision), its counters and schedule at every request, its result
once. So the record is ten frozen parts (see ``docs/architecture.md``):

============  ==============================================================  ==========
part          holds                                                           changed by
============  ==============================================================  ==========
contract      id, profile, policy, creation, business deadline, label,        create, a
              submit attempts allowed, trusted origins, cancel on deadline    decision
submission    where the job is: job id, status/result/cancel/errors URLs,     the receipt,
              how the polling URL is read, the submission's fingerprint       a move
counters      requests spent of each budget                                   reservations
schedule      deadline, next poll time, why then, backoff attempt             observations
lease         the worker holding it, until when, the request in flight        reservations
answer        what the last answer said (state, progress, status, time)       observations
ending        phase, outcome and reason, result, error, counts, errors        the end
oversight     grants, the open decision request, decisions, cancel requests   decisions
push          webhooks expected, completion target, deliveries applied        deliveries
audit         the audit chain's head and its MAC                              every write
============  ==============================================================  ==========

Every part is a :class:`Part`: its stored JSON object (:meth:`Part.stored`, field name
→ JSON) and its stored text (:meth:`Part.text`) are computed once, the first time they
are asked for, and kept with the part. A part changes only through its own constructor:
:meth:`Part.evolve` (``dataclasses.replace``) or a named transition built on it
(:meth:`Lease.released`, :meth:`Lease.held`, :meth:`Counters.with_request`, ...); the
new part is encoded afresh when a store asks. A transition builds new parts only for
what it changes (``record.evolve(lease=record.lease.released())``); the rest are the
same objects, already encoded, so a store writes and encodes only the changed parts.

The small values the parts hold (the phase, grants, decisions) are
:mod:`waitbound._model._record_values`; the record's flat JSON, :mod:`waitbound._model._record`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Final, Self, TypeVar

from waitbound._base._clock import utc
from waitbound._base._json import JSON, JSONScalar, canonical_json
from waitbound._model._audit import GENESIS_HASH
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._model._record_values import Decision, DecisionRequest, Grants, Phase, RequestKind
from waitbound._profile._contract import Profile
from waitbound._profile._contract_parse import parse_profile
from waitbound._profile._policy import Policy, policy_json, quiet_budget_warning
from waitbound._profile._protocol import FinalStateVia, UrlKind
from waitbound._profile._schedule import DelaySource

__all__ = [
    "COUNTERS",
    "NAMES",
    "PARTS",
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
    "Part",
    "Phase",
    "Push",
    "RequestKind",
    "Schedule",
    "Submission",
    "decode_part",
    "decode_value",
    "field_value_json",
    "value_json",
]

RECORD_SCHEMA: Final = 1
"""The format of a stored record (its flat JSON's ``schema``, and its contract part's:
a row carries it once). A newer one is refused with a message to upgrade."""


class Part:
    """A part of a record: a frozen value whose encoding is computed once and kept.

    Subclasses are frozen slotted dataclasses; :meth:`stored` and :meth:`text` fill two
    slots of their own the first time they are called (a part never changes, so
    neither does its encoding).
    """

    __slots__ = ("_stored", "_text")
    _stored: dict[str, JSON]
    _text: str

    def evolve(self, **changes: object) -> Self:
        """A new part: this one with *changes* (field name → value), made by its own
        constructor (``dataclasses.replace``); its encoding is computed afresh.

        Raises:
            TypeError: a name in *changes* is not a field of this part.
        """
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def stored(self) -> dict[str, JSON]:
        """The part as stored: ``{field name: JSON value}`` (instants as RFC 3339
        text, tuples as lists, the profile as its name and table). Shared: read it,
        never change it."""
        try:
            return self._stored
        except AttributeError:
            found = {
                name: field_value_json(name, getattr(self, name)) for name in NAMES[type(self)]
            }
            if type(self) is Contract:  # each stored record names its format once
                found["schema"] = RECORD_SCHEMA
            object.__setattr__(self, "_stored", found)
            return found

    def text(self, dump: Callable[[object], str]) -> str:
        """``dump(self.stored())``, computed by the first call and kept (every store
        encodes with the same ``dump``: ``waitbound.stores._codec.dump_json``)."""
        try:
            return self._text
        except AttributeError:
            found = dump(self.stored())
            object.__setattr__(self, "_text", found)
            return found

    def keep_text(self, text: str) -> None:
        """Keep *text* as this part's stored text: a store read it and decoded this
        part from it, so writing the part again (a write that names every part)
        encodes nothing."""
        object.__setattr__(self, "_text", text)


@dataclass(frozen=True, slots=True, kw_only=True)
class Push(Part):
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Contract(Part):
    """What the operation was created with: set once (a person's decision may give it a
    new profile or policy). See :class:`~waitbound._model._record.Record` for each field."""

    operation_id: str
    profile: Profile
    policy: Policy
    created_at: datetime
    business_deadline_at: datetime | None = None
    final_state_via: FinalStateVia | None = None
    label: str | None = None
    max_submit_attempts: int = 1
    trusted_origins: tuple[str, ...] = ()
    cancel_on_deadline: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission(Part):
    """Where the job is and how it was asked for: set by the submission and its receipt
    (a poll answer naming a new polling URL moves ``status_url``)."""

    status_url: str | None
    caller_url: str | None = None
    poll_kind: UrlKind = UrlKind.STATUS
    poll_header: str | None = None
    location_url: str | None = None
    result_url: str | None = None
    cancel_url: str | None = None
    errors_url: str | None = None
    job_id: str | None = None
    submit_method: str | None = None
    submit_url: str | None = None
    submit_fingerprint: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Counters(Part):
    """What the operation spent of each budget (requests counted when reserved)."""

    submit_attempts: int = 0
    status_requests_used: int = 0
    transport_failures_used: int = 0
    rate_limited_used: int = 0
    result_requests_used: int = 0
    confirm_requests_used: int = 0
    cancel_requests_used: int = 0

    def used(self, kind: RequestKind) -> int:
        """The requests counted against *kind*'s counter (:data:`COUNTERS`)."""
        count: int = getattr(self, COUNTERS[kind])
        return count

    def with_request(self, kind: RequestKind, count: int = 1) -> Counters:
        """These counters with *count* more requests of *kind* (a reservation: 1; an
        answer's redirects: how many were followed)."""
        if count == 0:
            return self
        name = COUNTERS[kind]
        return self.evolve(**{name: getattr(self, name) + count})

    def without_request(self, kind: RequestKind) -> Counters:
        """These counters with one request of *kind* fewer (never below 0): a reserved
        request that was never sent."""
        name = COUNTERS[kind]
        return self.evolve(**{name: max(0, getattr(self, name) - 1)})


COUNTERS: Final[dict[RequestKind, str]] = {
    "submit": "submit_attempts",
    "status": "status_requests_used",
    "result": "result_requests_used",
    "errors": "result_requests_used",
    "cancel": "cancel_requests_used",
}
"""Which counter of :class:`Counters` each kind of request is reserved against."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule(Part):
    """When: the deadline, the next request's time, why then, and the backoff attempt.

    ``last_delay_s`` is the last delay scheduled (seconds; backoff goes on from it, so
    a wait never shrinks after a pending answer; after a throttle without a hint, the
    backoff's step before its ``THROTTLE_FACTOR``, so throttles do not compound) and
    ``last_hint_s`` the last answer's hint (seconds, ``None``: none).
    ``hints_followed`` counts the provider hints this operation followed to a look,
    ``hints_true`` those whose look brought news (the job had ended or its state had
    changed): the evidence that decides whether a hint shorter than the plan is
    followed (``waitbound._rules._plan``)."""

    deadline_at: datetime
    next_poll_at: datetime
    delay_source: DelaySource | None = None
    attempt: int = 0
    last_delay_s: float | None = None
    last_hint_s: float | None = None
    hints_followed: int = 0
    hints_true: int = 0
    grant_ends_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease(Part):
    """Who holds the operation and the request reserved but not yet answered."""

    in_flight: RequestKind | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None

    @staticmethod
    def reserved(kind: RequestKind, owner: str | None, until: datetime) -> Lease:
        """A request of *kind* reserved (counted, not yet answered) by *owner*, who
        holds the operation until *until*."""
        return Lease(in_flight=kind, lease_owner=owner, lease_expires_at=until)

    def released(self) -> Lease:
        """Nothing in flight and nobody holding the operation (an answer recorded, a
        reservation undone); the one shared free lease."""
        return _FREE

    def held(self, owner: str | None, until: datetime | None) -> Lease:
        """This lease held by *owner* until *until* (a claim; what is in flight stays)."""
        return self.evolve(lease_owner=owner, lease_expires_at=until)

    def lapsed(self, at: datetime) -> Lease:
        """This lease ending at *at* (its holder is gone: anyone may take it now)."""
        return self.evolve(lease_expires_at=at)


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer(Part):
    """What the provider's last answer said (allowlisted fields only)."""

    provider_state: JSONScalar = None
    progress: JSON = None
    last_http_status: int | None = None
    last_request_id: str | None = None
    last_observed_at: datetime | None = None
    job_seen_at: datetime | None = None
    pending_seen_at: datetime | None = None
    ended_seen_at: datetime | None = None
    success_seen_at: datetime | None = None
    cancelable: bool | None = None
    doubted_at: datetime | None = None
    """When an answer that is no evidence yet (another job's, an ending its state does
    not name) was first seen; cleared by an answer that is evidence."""
    estimated_end_at: datetime | None = None
    estimate_from: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Ending(Part):
    """Where the operation is in its life and how it ended: phase, outcome and reason,
    what the provider settled on, and what it returned."""

    phase: Phase = Phase.WAITING
    outcome: OutcomeKind | None = None
    reason: Reason | None = None
    settled_outcome: OutcomeKind | None = None
    settled_reason: Reason | None = None
    stopped_phase: Phase | None = None
    result: JSON = None
    error: JSON = None
    counts: dict[str, JSON] | None = None
    usage: JSON = None
    errors: JSON = None
    finished_at: datetime | None = None
    result_fetched_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Oversight(Part):
    """What people asked and decided: grants, the open decision request, the decisions
    made, who decided, the credential chosen, and a requested cancel."""

    grants: Grants = Grants()  # noqa: RUF009 - a frozen value, shared
    decision_request: DecisionRequest | None = None
    decisions: tuple[Decision, ...] = ()
    decided_by: str | None = None
    credential_label: str | None = None
    cancel_due: bool = False
    cancel_requested_at: datetime | None = None
    cancel_requested_by: str | None = None
    cancel_reason: str | None = None
    cancel_accepted_at: datetime | None = None
    cancel_refused_at: datetime | None = None
    cancel_refused: str | None = None

    def cancel_requested(self, at: datetime, by: str | None, reason: str | None) -> Oversight:
        """This oversight with a cancel requested at *at* by *by* for *reason*, due to be
        sent; an earlier cancel's answer (accepted or refused) is forgotten."""
        return self.evolve(
            cancel_due=True,
            cancel_requested_at=at,
            cancel_requested_by=by,
            cancel_reason=reason,
            cancel_accepted_at=None,
            cancel_refused_at=None,
            cancel_refused=None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditHead(Part):
    """The last event of the operation's audit chain and the MAC of that head."""

    audit_seq: int = 0
    audit_head: str = GENESIS_HASH
    audit_mac: str | None = None


_FREE: Final = Lease()


PARTS: Final[tuple[tuple[str, type[Part]], ...]] = (
    ("contract", Contract),
    ("submission", Submission),
    ("counters", Counters),
    ("schedule", Schedule),
    ("lease", Lease),
    ("answer", Answer),
    ("ending", Ending),
    ("oversight", Oversight),
    ("push", Push),
    ("audit", AuditHead),
)
"""Each part's attribute on a record and its class, in the order a record holds them."""

NAMES: Final[dict[type, tuple[str, ...]]] = {
    kind: tuple(item.name for item in fields(kind))
    for kind in (Grants, DecisionRequest, Decision, *(kind for _, kind in PARTS))
}
"""Each part's (and sub-value's) field names, in declaration order."""


# -- encoding ------------------------------------------------------------------------


_AS_THEY_ARE: Final = frozenset((str, int, float, bool, type(None)))
"""Value types stored as they are (most fields): no further test is needed."""


def value_json(value: object) -> JSON:
    """A record value as stored: sub-values as objects, instants as RFC 3339, tuples as
    lists; JSON values as they are."""
    if type(value) in _AS_THEY_ARE:
        return value  # type: ignore[return-value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Grants | DecisionRequest | Decision | Push):
        return {name: value_json(getattr(value, name)) for name in NAMES[type(value)]}
    if isinstance(value, tuple):
        return [value_json(item) for item in value]
    return value  # type: ignore[return-value]


def field_value_json(name: str, value: object) -> JSON:
    """The stored JSON of the field *name* holding *value*."""
    if type(value) in _AS_THEY_ARE:
        return value  # type: ignore[return-value]
    if name == "profile":
        assert isinstance(value, Profile)
        return {"name": value.name, "table": dict(value.source)}
    if name == "policy":
        assert isinstance(value, Policy)
        return policy_json(value)
    if name == "decisions":
        assert isinstance(value, tuple)
        return [value_json(decision) for decision in value]
    return value_json(value)


# -- decoding ------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _profile(name: str, table: str) -> Profile:
    """A stored profile, parsed and validated once per distinct table (a profile is
    immutable, so records may share it)."""
    return parse_profile(json.loads(table), name=name)


def _same(raw: JSON) -> object:
    return raw


def _instant(raw: JSON) -> datetime | None:
    return None if raw is None else utc(datetime.fromisoformat(str(raw)))


def _stored_profile(raw: JSON) -> Profile:
    assert isinstance(raw, dict)
    return _profile(str(raw["name"]), canonical_json(raw["table"]))


def _stored_policy(raw: JSON) -> Policy:
    assert isinstance(raw, dict)
    with quiet_budget_warning():  # warned about when it was made
        return Policy(**raw)  # type: ignore[arg-type]


def _optional(kind: Callable[[str], object]) -> Callable[[JSON], object]:
    def decode(raw: JSON) -> object:
        return kind(str(raw)) if raw else None

    return decode


_V = TypeVar("_V", Grants, DecisionRequest, Decision, Push)
_P = TypeVar("_P", bound=Part)


def _value(kind: type[_V], raw: dict[str, JSON]) -> _V:
    """Decode a sub-value written by :func:`value_json` (unknown keys ignored)."""
    values: dict[str, object] = {}
    for name in NAMES[kind]:
        if name not in raw:
            continue
        value: object = raw[name]
        if value is not None and (name == "at" or name.endswith("_at")):
            value = utc(datetime.fromisoformat(str(value)))
        elif isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return kind(**values)  # type: ignore[arg-type]


_DECODERS: Final[dict[str, Callable[[JSON], object]]] = {
    "profile": _stored_profile,
    "policy": _stored_policy,
    "grants": lambda raw: _value(Grants, raw) if isinstance(raw, dict) else Grants(),
    "push": lambda raw: _value(Push, raw) if isinstance(raw, dict) else Push(),
    "decision_request": lambda raw: _value(DecisionRequest, raw) if isinstance(raw, dict) else raw,
    "decisions": lambda raw: (
        tuple(_value(Decision, d) for d in raw if isinstance(d, dict))
        if isinstance(raw, list)
        else raw
    ),
    "phase": lambda raw: Phase(str(raw)),
    "stopped_phase": _optional(Phase),
    "outcome": _optional(OutcomeKind),
    "reason": _optional(Reason),
    "settled_outcome": _optional(OutcomeKind),
    "settled_reason": _optional(Reason),
    "delay_source": _optional(DelaySource),
    "poll_kind": lambda raw: UrlKind(str(raw)),
    "final_state_via": _optional(FinalStateVia),
    "trusted_origins": lambda raw: tuple(raw) if isinstance(raw, list | tuple) else raw,
    **{
        name: _instant
        for _, kind in PARTS
        for name in NAMES[kind]
        if name.endswith("_at") and kind is not Push
    },
}
"""How each stored field becomes its typed value (others are stored as they are)."""


def decode_value(name: str, raw: JSON) -> object:
    """The typed value of the flat field *name* stored as *raw*."""
    return _DECODERS.get(name, _same)(raw)


def decode_part(kind: type[_P], data: Mapping[str, JSON]) -> _P:
    """The part of class *kind* stored as *data* (:meth:`Part.stored`); a field absent
    from *data* takes its default, unknown keys are ignored.

    Raises:
        ValueError, KeyError, TypeError, AssertionError: a stored value is damaged (or a
            required field is missing).
    """
    if kind is Push:
        return _value(Push, dict(data))  # type: ignore[return-value]
    values = {name: decode_value(name, data[name]) for name in NAMES[kind] if name in data}
    return kind(**values)
