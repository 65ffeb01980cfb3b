"""An in-memory store, for tests and short-lived programs. Nothing survives the process."""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from waitbound._base._errors import ConflictError, UsageError
from waitbound._model._audit import AuditEvent, StoredAuditEvent
from waitbound._model._history import HISTORY_LIMIT, Evidence, ScheduleSummary, evidence_of
from waitbound._model._pacing import choose, span
from waitbound._model._push import Channel, InboundDelivery, OutboxEntry, OutboxStatus
from waitbound._model._record import Record, assemble
from waitbound._model._record_parts import PARTS, Part, decode_part
from waitbound._rules._notices import outbox_entries
from waitbound.stores._codec import dump_json, load_object
from waitbound.stores._group_charges import charge_memory, charges
from waitbound.stores._protocol import (
    DRIVABLE_PHASES,
    AuditCursor,
    ClaimsByReservation,
    Planner,
    Write,
    advance,
    cursor_of,
    is_claimable,
    outcomes,
    planned,
    webhook_key,
)

__all__ = ["MemoryStore"]


class MemoryStore(ClaimsByReservation):
    """A :class:`~waitbound.stores.Store` in a dict, thread-safe.

    Records are kept as a durable store keeps them: a write encodes each part it
    changed to its stored text (a value that cannot be stored fails the write), and a
    read returns parts decoded from those texts, so what comes back has been through the
    same encoding. A part is decoded once, by the first read after the write that
    changed it (a wait that only writes decodes nothing).

    Args:
        audit_key: the audit key; every write then signs the chain head it leaves
            (``Record.audit_mac``, see ``docs/audit.md``). ``None``: heads are not signed.
    """

    def __init__(self, *, audit_key: bytes | None = None) -> None:
        self._audit_key = audit_key
        self._lock = threading.Lock()
        self._records: dict[str, _Kept] = {}
        self._events: dict[str, list[StoredAuditEvent]] = {}
        self._jobs: dict[tuple[str, str], str] = {}
        self._inbox: dict[tuple[str, str], InboundDelivery] = {}
        self._outbox: dict[str, OutboxEntry] = {}
        self._history: dict[str, list[tuple[int, Evidence]]] = {}
        self._history_of: set[str] = set()
        self._history_seq = 0
        self._calendar: dict[str, dict[int, int]] = {}
        self._pruned_before = 0

    def create(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.create`."""
        with self._lock:
            if record.operation_id in self._records:
                raise UsageError(f"operation {record.operation_id!r} exists already")
            stored, sealed = advance(record, events, self._audit_key)
            self._records[record.operation_id] = _Kept.of(stored, None)
            self._events[record.operation_id] = sealed
            self._push_writes(stored)
            return stored

    def get(self, operation_id: str) -> Record | None:
        """See :meth:`Store.get`."""
        with self._lock:
            entry = self._records.get(operation_id)
            return entry.read() if entry is not None else None

    def save(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.save`."""
        with self._lock:
            [stored] = self._write_all([(record, events)])
        if stored is None:
            raise ConflictError(record.operation_id, record.version)
        return stored

    def save_many(self, items: Sequence[Write]) -> list[Record | ConflictError]:
        """See :meth:`Store.save_many`."""
        with self._lock:
            return outcomes(self._write_all(items), items)

    def _write_all(self, items: Sequence[Write]) -> list[Record | None]:
        """Write each item by compare-and-swap, under the lock: the stored record, or
        ``None`` for a conflict (nothing of it written). The one write path of records."""
        written: list[Record | None] = []
        for record, events in items:
            entry = self._records.get(record.operation_id)
            if entry is None or entry.written.version != record.version:
                written.append(None)
                continue
            stored, sealed = advance(record, events, self._audit_key)
            self._records[record.operation_id] = _Kept.of(stored, entry)
            self._events[record.operation_id].extend(sealed)
            self._push_writes(stored)
            for counted_by in charges(events):  # the member's groups count it too
                charge_memory(self, stored.operation_id, counted_by)
            written.append(stored)
        return written

    def _push_writes(self, stored: Record) -> None:
        """The push path's part of a record write (see ``Store``), under the lock."""
        key = webhook_key(stored)
        if key is not None:
            self._jobs[key] = stored.operation_id
            for where, delivery in self._inbox.items():
                if delivery.operation_id is None and (delivery.provider, delivery.job_id) == key:
                    self._inbox[where] = replace(delivery, operation_id=stored.operation_id)
        for entry in outbox_entries(stored, stored.finished_at or stored.created_at):
            self._outbox.setdefault(entry.delivery_id, entry)
        evidence = evidence_of(stored)
        if evidence is not None and evidence.operation_id not in self._history_of:
            self._history_seq += 1
            kept = self._history.setdefault(evidence.key, [])
            kept.append((self._history_seq, evidence))
            self._history_of.add(evidence.operation_id)
            for _, dropped in kept[:-HISTORY_LIMIT]:
                self._history_of.discard(dropped.operation_id)
            del kept[:-HISTORY_LIMIT]

    def schedule_history(self, key: str) -> list[Evidence]:
        """See :meth:`Store.schedule_history`."""
        with self._lock:
            return [evidence for _, evidence in reversed(self._history.get(key, []))]

    def history_version(self, key: str) -> int:
        """See :meth:`Store.history_version`."""
        with self._lock:
            kept = self._history.get(key)
            return kept[-1][0] if kept else 0

    def schedules(self) -> list[ScheduleSummary]:
        """See :meth:`Store.schedules`."""
        with self._lock:
            return [
                ScheduleSummary(
                    key=key,
                    jobs=len(kept),
                    censored=sum(1 for _, e in kept if e.censored),
                    newest_at=max(e.finished_at for _, e in kept),
                    version=kept[-1][0],
                )
                for key, kept in sorted(self._history.items())
                if kept
            ]

    def forget_schedule(self, key: str) -> int:
        """See :meth:`Store.forget_schedule`."""
        with self._lock:
            kept = self._history.pop(key, [])
            for _, dropped in kept:
                self._history_of.discard(dropped.operation_id)
            return len(kept)

    def pace(
        self,
        origin: str,
        planned_at: datetime,
        *,
        latest_at: datetime,
        now: datetime,
        rng_offset: float,
    ) -> datetime:
        """See :meth:`Store.pace` (under the store's lock)."""
        with self._lock:
            where = span(planned_at, latest_at=latest_at, now=now)
            if where.first > self._pruned_before:  # once per bucket: every origin's past
                self._pruned_before = where.first
                for origin_name in list(self._calendar):
                    kept = self._calendar[origin_name]
                    for old in [b for b in kept if b < where.first]:
                        del kept[old]
                    if not kept:
                        del self._calendar[origin_name]
            counts = self._calendar.setdefault(origin, {})
            bucket, at = choose(
                counts, planned_at, latest_at=latest_at, now=now, rng_offset=rng_offset
            )
            counts[bucket] = counts.get(bucket, 0) + 1
            return at

    def calendar_size(self) -> int:
        """How many (origin, bucket) counts the calendar holds (tests: it stays bounded)."""
        with self._lock:
            return sum(len(kept) for kept in self._calendar.values())

    def reserve_due(
        self,
        *,
        owner: str,
        now: datetime,
        limit: int,
        plan: Planner,
        label_prefix: str = "",
        gone_owners: Collection[str] = (),
    ) -> list[Record]:
        """See :meth:`Store.reserve_due`."""
        with self._lock:
            records = [entry.read() for entry in self._records.values()]
            due = sorted(
                (r for r in records if is_claimable(r, now, label_prefix, gone_owners)),
                key=lambda r: r.next_poll_at,
            )[:limit]
            writes = [w for w in (planned(r, owner, plan) for r in due) if w is not None]
            return [stored for stored in self._write_all(writes) if stored is not None]

    def next_claimable(
        self, *, now: datetime, label_prefix: str = ""
    ) -> tuple[datetime | None, list[str]]:
        """See :meth:`Store.next_claimable`."""
        with self._lock:
            records = [entry.read() for entry in self._records.values()]
        drivable = [
            r
            for r in records
            if r.phase.value in DRIVABLE_PHASES and (r.label or "").startswith(label_prefix)
        ]
        earliest = min(
            (max(r.next_poll_at, r.lease_expires_at or r.next_poll_at) for r in drivable),
            default=None,
        )
        holders = {
            r.lease_owner
            for r in drivable
            if r.next_poll_at <= now
            and r.lease_expires_at is not None
            and r.lease_expires_at > now
            and r.lease_owner is not None
        }
        return earliest, sorted(holders)[:100]

    def pending_summary(self) -> tuple[int, datetime | None]:
        """See :meth:`Store.pending_summary`."""
        with self._lock:
            records = [entry.read() for entry in self._records.values()]
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
            records = [entry.read() for entry in self._records.values()]
        records = [
            r
            for r in records
            if (r.label or "").startswith(label_prefix) and not (open_only and r.is_finished)
        ]
        records.sort(key=lambda r: (r.created_at, r.operation_id), reverse=True)
        return records[:limit]

    def heads(self) -> list[tuple[str, int, str]]:
        """See :meth:`Store.heads`."""
        with self._lock:
            rows = sorted((op, entry.written) for op, entry in self._records.items())
        return [(operation_id, r.audit_seq, r.audit_head) for operation_id, r in rows]

    def put_delivery(self, delivery: InboundDelivery) -> InboundDelivery | None:
        """See :meth:`Store.put_delivery`."""
        with self._lock:
            return self._put_delivery(delivery)

    def put_deliveries(self, deliveries: Sequence[InboundDelivery]) -> list[InboundDelivery | None]:
        """See :meth:`Store.put_deliveries`."""
        with self._lock:
            return [self._put_delivery(delivery) for delivery in deliveries]

    def _put_delivery(self, delivery: InboundDelivery) -> InboundDelivery | None:
        key = (delivery.provider, delivery.webhook_id)
        if key in self._inbox:
            return None
        matched = (
            self._jobs.get((delivery.provider, delivery.job_id))
            if delivery.job_id is not None
            else None
        )
        stored = replace(delivery, operation_id=matched)
        self._inbox[key] = stored
        return stored

    def prune_inbox(self, *, before: datetime) -> tuple[int, int]:
        """See :meth:`~waitbound.stores._protocol.InboxPruning.prune_inbox`."""
        with self._lock:
            gone = [
                key
                for key, d in self._inbox.items()
                if d.received_at < before and (d.applied_at is not None or d.operation_id is None)
            ]
            for key in gone:
                del self._inbox[key]
            return len(gone), len(self._inbox)

    def pending_deliveries(self, *, limit: int) -> list[InboundDelivery]:
        """See :meth:`Store.pending_deliveries`."""
        with self._lock:
            pending = [
                d
                for d in self._inbox.values()
                if d.operation_id is not None and d.applied_at is None
            ]
        return sorted(pending, key=lambda d: (d.received_at, d.webhook_id))[:limit]

    def mark_applied(self, provider: str, webhook_id: str, at: datetime) -> bool:
        """See :meth:`Store.mark_applied`."""
        with self._lock:
            delivery = self._inbox.get((provider, webhook_id))
            if delivery is None or delivery.applied_at is not None:
                return False
            self._inbox[(provider, webhook_id)] = replace(delivery, applied_at=at)
            return True

    def inbox(
        self, *, provider: str | None = None, operation_id: str | None = None, limit: int = 100
    ) -> list[InboundDelivery]:
        """See :meth:`Store.inbox`."""
        with self._lock:
            found = [
                d
                for d in self._inbox.values()
                if (provider is None or d.provider == provider)
                and (operation_id is None or d.operation_id == operation_id)
            ]
        return sorted(found, key=lambda d: (d.received_at, d.webhook_id), reverse=True)[:limit]

    def claim_outbox(
        self,
        *,
        owner: str,
        now: datetime,
        lease_s: float,
        limit: int,
        channels: Sequence[Channel],
        operation_id: str | None = None,
    ) -> list[OutboxEntry]:
        """See :meth:`Store.claim_outbox`."""
        with self._lock:
            due = sorted(
                (
                    e
                    for e in self._outbox.values()
                    if e.status is OutboxStatus.PENDING
                    and e.channel in channels
                    and (operation_id is None or e.operation_id == operation_id)
                    and e.next_attempt_at <= now
                    and (e.lease_expires_at is None or e.lease_expires_at <= now)
                ),
                key=lambda e: (e.next_attempt_at, e.delivery_id),
            )[:limit]
            until = now + timedelta(seconds=lease_s)
            taken = [replace(e, lease_owner=owner, lease_expires_at=until) for e in due]
            for entry in taken:
                self._outbox[entry.delivery_id] = entry
            return taken

    def settle_outbox(self, entry: OutboxEntry) -> bool:
        """See :meth:`Store.settle_outbox`."""
        with self._lock:
            stored = self._outbox.get(entry.delivery_id)
            if (
                stored is None
                or stored.status is not OutboxStatus.PENDING
                or stored.lease_owner != entry.lease_owner
            ):
                return False
            self._outbox[entry.delivery_id] = replace(
                stored,
                status=entry.status,
                attempts=entry.attempts,
                next_attempt_at=entry.next_attempt_at,
                delivered_at=entry.delivered_at,
                last_error=entry.last_error,
                lease_owner=None,
                lease_expires_at=None,
            )
            return True

    def add_outbox(self, entry: OutboxEntry) -> OutboxEntry:
        """See :meth:`Store.add_outbox`."""
        with self._lock:
            if entry.delivery_id in self._outbox:
                raise UsageError(f"delivery {entry.delivery_id!r} exists already")
            self._outbox[entry.delivery_id] = entry
            return entry

    def outbox(
        self,
        *,
        operation_id: str | None = None,
        status: OutboxStatus | None = None,
        limit: int = 100,
    ) -> list[OutboxEntry]:
        """See :meth:`Store.outbox`."""
        with self._lock:
            found = [
                e
                for e in self._outbox.values()
                if (operation_id is None or e.operation_id == operation_id)
                and (status is None or e.status is status)
            ]
        return sorted(found, key=lambda e: (e.created_at, e.delivery_id), reverse=True)[:limit]

    def get_outbox(self, delivery_id: str) -> OutboxEntry | None:
        """See :meth:`Store.get_outbox`."""
        with self._lock:
            return self._outbox.get(delivery_id)

    def audit_after(
        self, cursor: AuditCursor | None, *, label_prefix: str = "", limit: int = 500
    ) -> list[StoredAuditEvent]:
        """See :meth:`Store.audit_after`."""
        with self._lock:
            labelled = {
                operation_id
                for operation_id, entry in self._records.items()
                if (entry.written.label or "").startswith(label_prefix)
            }
            events = [e for op in labelled for e in self._events.get(op, ())]
        after = sorted(
            (e for e in events if cursor is None or cursor_of(e) > cursor), key=cursor_of
        )
        return after[:limit]

    def close(self) -> None:
        """Nothing to release."""


@dataclass(slots=True)
class _Kept:
    """One operation as the store keeps it (changed under the store's lock)."""

    written: Record
    """The record as its last write gave it; each of its parts' stored text computed."""
    decoded: list[tuple[Part, Part] | None]
    """Per part: (a written part, its copy decoded from its stored text), the last one
    a read decoded."""
    last: Record | None = None
    """The record the last read built (``None``: none since the last write)."""

    @classmethod
    def of(cls, stored: Record, before: _Kept | None) -> _Kept:
        """*stored*, written over *before* (its decoded copies still used for the parts
        *stored* did not change). Encodes every part not encoded yet.

        Raises:
            ValueError: a value cannot be stored (not JSON, or nested too deeply).
        """
        for part in stored.parts():
            part.text(dump_json)
        decoded: list[tuple[Part, Part] | None] = (
            list(before.decoded) if before is not None else [None] * len(PARTS)
        )
        return cls(stored, decoded)

    def read(self) -> Record:
        """The record as read back: each part decoded from its stored text (once)."""
        if self.last is not None:
            return self.last
        parts: list[Part] = []
        for index, (part, (_, kind)) in enumerate(zip(self.written.parts(), PARTS, strict=True)):
            pair = self.decoded[index]
            if pair is not None and (pair[0] is part or pair[1] is part):
                parts.append(pair[1])  # written as read: the copy it was decoded to
                continue
            text = part.text(dump_json)
            copy = decode_part(kind, load_object(text))
            copy.keep_text(text)
            self.decoded[index] = (part, copy)
            parts.append(copy)
        self.last = assemble(parts, self.written.version)
        return self.last
