"""An in-memory store, for tests and short-lived programs. Nothing survives the process."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from waitbound._audit import AuditEvent, StoredAuditEvent
from waitbound._errors import ConflictError, UsageError
from waitbound._record import Record
from waitbound.stores._protocol import advance, decode_record, encode_record

__all__ = ["MemoryStore"]


class MemoryStore:
    """A :class:`~waitbound.stores.Store` in a dict, thread-safe.

    Records are kept encoded, as a durable store keeps them, so what comes back has
    been through the same encoding.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, tuple[int, str]] = {}
        self._events: dict[str, list[StoredAuditEvent]] = {}

    def create(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.create`."""
        with self._lock:
            if record.operation_id in self._records:
                raise UsageError(f"operation {record.operation_id!r} exists already")
            stored, sealed = advance(record, events)
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
            stored, sealed = advance(record, events)
            self._records[record.operation_id] = (stored.version, encode_record(stored))
            self._events[record.operation_id].extend(sealed)
            return stored

    def audit(self, operation_id: str) -> list[StoredAuditEvent]:
        """See :meth:`Store.audit`."""
        with self._lock:
            return list(self._events.get(operation_id, ()))

    def close(self) -> None:
        """Nothing to release."""
