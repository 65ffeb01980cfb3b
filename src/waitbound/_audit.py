"""The audit log: append-only, hash-chained events that read like a story.

Each stored event carries ``prev_hash`` and ``hash = sha256(prev_hash + canonical
JSON of the event)``, so editing, dropping or reordering an event breaks the chain
(:func:`verify_chain`). Stores append events in the same transaction as the record
change they describe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from waitbound._errors import StoreError
from waitbound._json import JSON, canonical_json

__all__ = [
    "GENESIS_HASH",
    "AuditEvent",
    "StoredAuditEvent",
    "seal",
    "seal_all",
    "verify_chain",
]

GENESIS_HASH = "0" * 64


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvent:
    """One thing that happened to an operation.

    Attributes:
        at: when, aware UTC.
        kind: a short machine name (``created``, ``reserved``, ``observed``,
            ``scheduled``, ``finished``, ...).
        summary: one sentence a person can read.
        data: machine fields: state, requests used, next poll time and its delay
            source, HTTP status, request id, ... (never a secret).
    """

    at: datetime
    kind: str
    summary: str
    data: Mapping[str, JSON] = field(default_factory=dict)

    def payload(self, operation_id: str, seq: int) -> dict[str, JSON]:
        """The canonical content the hash covers."""
        return {
            "operation_id": operation_id,
            "seq": seq,
            "at": self.at.isoformat(),
            "kind": self.kind,
            "summary": self.summary,
            "data": dict(self.data),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredAuditEvent:
    """An audit event as stored: numbered from 1 and chained by hash."""

    operation_id: str
    seq: int
    event: AuditEvent
    prev_hash: str
    hash: str


def seal(operation_id: str, seq: int, event: AuditEvent, prev_hash: str) -> StoredAuditEvent:
    """Number and chain one event after the event whose hash is *prev_hash*."""
    digest = hashlib.sha256(
        (prev_hash + canonical_json(event.payload(operation_id, seq))).encode()
    ).hexdigest()
    return StoredAuditEvent(
        operation_id=operation_id, seq=seq, event=event, prev_hash=prev_hash, hash=digest
    )


def seal_all(
    operation_id: str, events: Sequence[AuditEvent], *, last_seq: int, last_hash: str
) -> list[StoredAuditEvent]:
    """Seal *events* in order after the stored event ``(last_seq, last_hash)``."""
    sealed = []
    for offset, event in enumerate(events, start=1):
        stored = seal(operation_id, last_seq + offset, event, last_hash)
        sealed.append(stored)
        last_hash = stored.hash
    return sealed


def verify_chain(
    events: Sequence[StoredAuditEvent], *, head: tuple[int, str] | None = None
) -> None:
    """Check that *events* (one operation's, in order) form an unbroken chain.

    Args:
        events: the stored events, in order.
        head: the ``(audit_seq, audit_head)`` the operation's record names; when
            given, the chain must end exactly there (so removed last events show).

    Raises:
        StoreError: the first event whose number, link or hash does not match, or a
            chain that ends before or after the record's head.
    """
    prev = GENESIS_HASH
    for expected_seq, stored in enumerate(events, start=1):
        again = seal(stored.operation_id, expected_seq, stored.event, prev)
        if stored.seq != expected_seq or stored.prev_hash != prev or stored.hash != again.hash:
            raise StoreError(
                f"audit log of operation {stored.operation_id} is broken at event "
                f"{stored.seq}: it was changed, removed or reordered"
            )
        prev = stored.hash
    if head is not None and head != (len(events), prev):
        operation = events[0].operation_id if events else "?"
        raise StoreError(
            f"audit log of operation {operation} ends at event {len(events)}, but its record "
            f"names event {head[0]}: events were removed or added"
        )
