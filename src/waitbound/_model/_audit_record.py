"""The record's side of its audit: the standard fields every audit event carries
(:func:`audit_event`), and what a record asserts, as one digest the audit key signs
with the chain's head.

The head MAC (``Record.audit_mac``, see ``docs/audit.md``) binds the chain to the
record; version 2 also covers :data:`ASSERTED_FIELDS`, so a database writer without the
key who changes a record's outcome, reason, result, counters or decisions is found by
``waitbound audit verify`` (``forged_record``), ``show`` and ``wait --operation-id``.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Final

from waitbound._base._json import JSON
from waitbound._model._audit import (
    HASHED,
    AuditEvent,
    AuditFinding,
    EventKind,
    StoredAuditEvent,
    diagnose_chain,
    head_is_authentic,
    mac_asserted,
)
from waitbound._model._record import Record, field_json

__all__ = [
    "ASSERTED_FIELDS",
    "asserted_digest",
    "audit_event",
    "diagnose_record",
    "record_is_forged",
]


def _standard_data(record: Record) -> dict[str, JSON]:
    return {
        "phase": record.phase.value,
        "state": record.provider_state,
        "requests_used": record.requests_used,
        "max_requests": record.max_requests,
        "next_poll_at": record.next_poll_at.isoformat() if not record.is_finished else None,
        "delay_source": record.delay_source.value if record.delay_source else None,
    }


def audit_event(
    record: Record, at: datetime, kind: EventKind, summary: str, **extra: JSON
) -> AuditEvent:
    """An audit event with the record's standard story fields, after the change (its
    ``kind`` stored as the plain string)."""
    return AuditEvent(
        at=at, kind=EventKind(kind).value, summary=summary, data=_standard_data(record) | extra
    )


ASSERTED_FIELDS: Final[tuple[str, ...]] = (
    "status_url",
    "result_url",
    "job_id",
    "policy",
    "deadline_at",
    "business_deadline_at",
    "phase",
    "outcome",
    "reason",
    "settled_outcome",
    "stopped_phase",
    "provider_state",
    "submit_attempts",
    "status_requests_used",
    "transport_failures_used",
    "rate_limited_used",
    "result_requests_used",
    "confirm_requests_used",
    "cancel_requests_used",
    "cancel_requested_at",
    "cancel_requested_by",
    "cancel_reason",
    "result",
    "error",
    "counts",
    "usage",
    "errors",
    "finished_at",
    "result_fetched_at",
    "grants",
    "decision_request",
    "decisions",
    "decided_by",
)
"""The fields a record asserts: how it ended and why, what it returned, what it spent
of which budget, and who decided what. (Not the lease, the version or the next poll
time: a claim without the key changes those and keeps the MAC.)"""


_ASSERTED: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""The asserted fields' encoder, made once (the text ``json.dumps`` gives)."""


def asserted_digest(record: Record) -> str:
    """Hex SHA-256 of the canonical JSON (sorted keys, no spaces, UTF-8 with
    ``surrogatepass``; a non-finite float as ``NaN``/``Infinity``) of
    ``{field: value}`` for every field of :data:`ASSERTED_FIELDS`, each as the record's
    JSON writes it."""
    fields = {name: field_json(record, name) for name in ASSERTED_FIELDS}
    text = _ASSERTED.encode(fields)
    return hashlib.sha256(text.encode(*HASHED)).hexdigest()


def diagnose_record(
    record: Record, events: list[StoredAuditEvent], *, key: bytes | None = None
) -> AuditFinding | None:
    """The first finding of *record*'s chain (:func:`waitbound.diagnose_chain` against
    the head, MAC and asserted fields the record names), or ``None`` when it is intact."""
    return diagnose_chain(
        record.operation_id,
        events,
        head=(record.audit_seq, record.audit_head),
        mac=record.audit_mac,
        key=key,
        asserted=asserted_digest(record) if key is not None else None,
    )


def record_is_forged(record: Record, key: bytes) -> bool:
    """Whether *record*'s MAC proves it was changed without *key*: the MAC does not
    match its head, or (version 2) its asserted fields. A record without a MAC, or
    with a version-1 MAC that matches, is not proved forged (see ``docs/audit.md``)."""
    if record.audit_mac is None:
        return False
    if not head_is_authentic(
        key, record.operation_id, record.audit_seq, record.audit_head, record.audit_mac
    ):
        return True
    signed = mac_asserted(record.audit_mac)
    return signed is not None and signed != asserted_digest(record)
