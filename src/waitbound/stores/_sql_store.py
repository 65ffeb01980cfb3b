"""The methods SQLite and PostgreSQL share beyond their statements: the audit log's
reads, the schedule history's and the calendar's reads, and the push path's (the
inbox and the outbox), each one statement of the shared
rows (``_audit_rows``, ``_inbox_rows``, ``_outbox_rows``, ``_history_rows``,
``_calendar_rows``) in one of the backend's
transactions or reads. What differs by backend stays in it: storing deliveries
(PostgreSQL's advisory locks) and claiming outbox entries.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from waitbound._base._errors import UsageError
from waitbound._model._audit import StoredAuditEvent
from waitbound._model._history import Evidence, ScheduleSummary
from waitbound._model._push import InboundDelivery, OutboxEntry, OutboxStatus
from waitbound.stores._audit_rows import AuditRows
from waitbound.stores._calendar_rows import CalendarRows
from waitbound.stores._history_rows import HistoryRows
from waitbound.stores._inbox_rows import InboxRows
from waitbound.stores._outbox_rows import OutboxRows
from waitbound.stores._protocol import AuditCursor
from waitbound.stores._sql_dialect import run

__all__ = ["SharedSQL"]


class SharedSQL:
    """Store methods over the shared rows, for a backend that supplies:

    * ``_audit_rows``, ``_inbox_rows``, ``_outbox_rows``, ``_history_rows``,
      ``_calendar_rows``: its statements;
    * ``_transaction()``: one write transaction, yielding its connection;
    * ``_reading()``: a connection for one read statement;
    * ``_put_delivery(connection, delivery)``: one delivery stored in a transaction;
    * ``_legacy``: nonzero when the store is an older SQLite file opened read-only,
      which has no schedule history nor calendar to read.
    """

    _legacy: int = 0
    _history_rows: HistoryRows
    _calendar_rows: CalendarRows
    _audit_rows: AuditRows
    _inbox_rows: InboxRows
    _outbox_rows: OutboxRows
    _transaction: Callable[[], AbstractContextManager[Any]]
    _reading: Callable[[], AbstractContextManager[Any]]
    _put_delivery: Callable[[Any, InboundDelivery], InboundDelivery | None]

    def put_delivery(self, delivery: InboundDelivery) -> InboundDelivery | None:
        """See :meth:`Store.put_delivery` (one transaction; PostgreSQL: under the job's
        advisory lock)."""
        with self._transaction() as conn:
            return self._put_delivery(conn, delivery)

    def schedule_history(self, key: str) -> list[Evidence]:
        """See :meth:`Store.schedule_history`."""
        if self._legacy:
            return []
        with self._reading() as conn:
            return self._history_rows.history(run(conn), key)

    def history_version(self, key: str) -> int:
        """See :meth:`Store.history_version`."""
        if self._legacy:
            return 0
        with self._reading() as conn:
            return self._history_rows.version(run(conn), key)

    def schedules(self) -> list[ScheduleSummary]:
        """See :meth:`Store.schedules`."""
        if self._legacy:
            return []
        with self._reading() as conn:
            return self._history_rows.summaries(run(conn))

    def calendar_size(self) -> int:
        """See :meth:`Store.calendar_size`."""
        if self._legacy:
            return 0
        with self._reading() as conn:
            return self._calendar_rows.size(run(conn))

    def audit(self, operation_id: str) -> list[StoredAuditEvent]:
        """See :meth:`Store.audit`."""
        with self._reading() as conn:
            return self._audit_rows.events(run(conn), operation_id)

    def audit_after(
        self, cursor: AuditCursor | None, *, label_prefix: str = "", limit: int = 500
    ) -> list[StoredAuditEvent]:
        """See :meth:`Store.audit_after` (operation ids in byte order; SQLite compares
        ``at`` as text: its UTC ISO 8601 instants sort as the instants do)."""
        with self._reading() as conn:
            return self._audit_rows.after(run(conn), cursor, label_prefix=label_prefix, limit=limit)

    def pending_deliveries(self, *, limit: int) -> list[InboundDelivery]:
        """See :meth:`Store.pending_deliveries`."""
        with self._reading() as conn:
            return self._inbox_rows.pending(run(conn), limit)

    def mark_applied(self, provider: str, webhook_id: str, at: datetime) -> bool:
        """See :meth:`Store.mark_applied`."""
        with self._transaction() as conn:
            return self._inbox_rows.mark_applied(run(conn), provider, webhook_id, at)

    def inbox(
        self, *, provider: str | None = None, operation_id: str | None = None, limit: int = 100
    ) -> list[InboundDelivery]:
        """See :meth:`Store.inbox`."""
        with self._reading() as conn:
            return self._inbox_rows.listing(
                run(conn), provider=provider, operation_id=operation_id, limit=limit
            )

    def prune_inbox(self, *, before: datetime) -> tuple[int, int]:
        """See :meth:`~waitbound.stores._protocol.InboxPruning.prune_inbox`."""
        with self._transaction() as conn:
            return self._inbox_rows.prune(run(conn), before)

    def settle_outbox(self, entry: OutboxEntry) -> bool:
        """See :meth:`Store.settle_outbox`."""
        with self._transaction() as conn:
            return self._outbox_rows.settle(run(conn), entry)

    def add_outbox(self, entry: OutboxEntry) -> OutboxEntry:
        """See :meth:`Store.add_outbox`."""
        with self._transaction() as conn:
            if self._outbox_rows.add(run(conn), [entry]) != 1:
                raise UsageError(f"delivery {entry.delivery_id!r} exists already")
        return entry

    def outbox(
        self,
        *,
        operation_id: str | None = None,
        status: OutboxStatus | None = None,
        limit: int = 100,
    ) -> list[OutboxEntry]:
        """See :meth:`Store.outbox`."""
        wanted = status.value if status is not None else None
        with self._reading() as conn:
            return self._outbox_rows.listing(
                run(conn), operation_id=operation_id, status=wanted, limit=limit
            )

    def get_outbox(self, delivery_id: str) -> OutboxEntry | None:
        """See :meth:`Store.get_outbox`."""
        with self._reading() as conn:
            return self._outbox_rows.get(run(conn), delivery_id)
