"""An in-memory store, for tests and short-lived programs. Nothing survives the process."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime

from waitbound._audit import AuditEvent, StoredAuditEvent
from waitbound._errors import ConflictError, UsageError
from waitbound._record import Record
from waitbound.stores._protocol import (
    DRIVABLE_PHASES,
    advance,
    claimed,
    decode_record,
    encode_record,
    is_claimable,
)

__all__ = ["MemoryStore"]


class MemoryStore:
    """A :class:`~waitbound.stores.Store` in a dict, thread-safe.

    Records are kept encoded, as a durable store keeps them, so what comes back has
    been through the same encoding.

    Args:
        audit_key: the audit key; every write then signs the chain head it leaves
            (``Record.audit_mac``, see ``docs/audit.md``). ``None``: heads are not signed.
    """

    def __init__(self, *, audit_key: bytes | None = None) -> None:
        self._audit_key = audit_key
        self._lock = threading.Lock()
        self._records: dict[str, tuple[int, str]] = {}
        self._events: dict[str, list[StoredAuditEvent]] = {}

    def create(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.create`."""
        with self._lock:
            if record.operation_id in self._records:
                raise UsageError(f"operation {record.operation_id!r} exists already")
            stored, sealed = advance(record, events, self._audit_key)
            self._records[record.operation_id] = (stored.version, encode_record(stored))
            self._events[record.operation_id] = sealed
            return stored

    def get(self, operation_id: str) -> Record | None:
        """See :meth:`Store.get`."""
        with self._lock:
            entry = self._records.get(operation_id)
        return decode_record(entry[1]) if entry else None

    def save(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.save`."""
        with self._lock:
            entry = self._records.get(record.operation_id)
            if entry is None or entry[0] != record.version:
                raise ConflictError(record.operation_id, record.version)
            stored, sealed = advance(record, events, self._audit_key)
            self._records[record.operation_id] = (stored.version, encode_record(stored))
            self._events[record.operation_id].extend(sealed)
            return stored

    def claim_due(
        self, *, owner: str, now: datetime, lease_s: float, limit: int, label_prefix: str = ""
    ) -> list[Record]:
        """See :meth:`Store.claim_due`."""
        with self._lock:
            records = [decode_record(text) for _, text in self._records.values()]
            due = sorted(
                (r for r in records if is_claimable(r, now, label_prefix)),
                key=lambda r: r.next_poll_at,
            )[:limit]
            taken = []
            for record in due:
                stored, _ = advance(
                    claimed(record, owner=owner, now=now, lease_s=lease_s), [], self._audit_key
                )
                self._records[record.operation_id] = (stored.version, encode_record(stored))
                taken.append(stored)
            return taken

    def pending_summary(self) -> tuple[int, datetime | None]:
        """See :meth:`Store.pending_summary`."""
        with self._lock:
            records = [decode_record(text) for _, text in self._records.values()]
        open_ = [r for r in records if not r.is_finished]
        drivable = [r.next_poll_at for r in open_ if r.phase.value in DRIVABLE_PHASES]
        return len(open_), min(drivable, default=None)

    def audit(self, operation_id: str) -> list[StoredAuditEvent]:
        """See :meth:`Store.audit`."""
        with self._lock:
            return list(self._events.get(operation_id, ()))

    def recent(
        self, *, label_prefix: str = "", limit: int = 50, open_only: bool = False
    ) -> list[Record]:
        """See :meth:`Store.recent`."""
        with self._lock:
            records = [decode_record(text) for _, text in self._records.values()]
        records = [
            r
            for r in records
            if (r.label or "").startswith(label_prefix) and not (open_only and r.is_finished)
        ]
        records.sort(key=lambda r: (r.created_at, r.operation_id), reverse=True)
        return records[:limit]

    def close(self) -> None:
        """Nothing to release."""
