"""The PostgreSQL store's push path: storing webhook deliveries and registering jobs
under each job's advisory lock (so the look-back never misses a delivery stored at the
same moment), the push path's part of a record write, and claiming outbox entries
(``FOR UPDATE SKIP LOCKED``). The statements are the shared ``_inbox_rows`` and
``_outbox_rows``; this is what PostgreSQL adds around them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from waitbound._base._errors import UsageError
from waitbound._model._history import evidence_of
from waitbound._model._push import Channel, InboundDelivery, OutboxEntry
from waitbound._model._record import Record
from waitbound._rules._notices import outbox_entries
from waitbound.stores._codec import to_text
from waitbound.stores._history_rows import HistoryRows
from waitbound.stores._inbox_rows import InboxRows
from waitbound.stores._outbox_rows import OutboxRows
from waitbound.stores._postgres_sql import job_lock_key, q, run
from waitbound.stores._protocol import webhook_key

__all__ = ["PostgresPushPath"]


class PostgresPushPath:
    """``PostgresStore``'s push-path methods (a mixin: the store supplies ``schema``,
    ``_sql``, ``_transaction()`` and the shared rows)."""

    schema: str
    _sql: dict[str, sql.Composed]
    _transaction: Callable[[], AbstractContextManager[psycopg.Connection[TupleRow]]]
    _inbox_rows: InboxRows
    _outbox_rows: OutboxRows
    _history_rows: HistoryRows

    @staticmethod
    def _has_push_writes(stored: Record) -> bool:
        """Whether writing *stored* has push-path statements to run (see
        :meth:`_push_writes`): then the write is a transaction of several statements."""
        return (
            webhook_key(stored) is not None
            or bool(outbox_entries(stored, stored.finished_at or stored.created_at))
            or evidence_of(stored) is not None
        )

    def _push_writes(self, conn: psycopg.Connection[TupleRow], stored: Record) -> None:
        """The push path's part of a record write (see ``Store``), in its transaction.

        A record that neither expects webhooks nor owes a completion (most records) costs
        no statement at all. Registering a job takes its (provider, job id) advisory
        lock, as :meth:`put_delivery` does, so a delivery stored at the same moment is
        either seen by the look-back or sees the registration: never neither.
        """
        key = webhook_key(stored)
        if key is not None:
            lock = job_lock_key(self.schema, key[0], to_text(key[1]))
            conn.execute(self._sql["push_lock"], (lock,))
            self._inbox_rows.register(run(conn), key, stored.operation_id)
        entries = outbox_entries(stored, stored.finished_at or stored.created_at)
        if entries:
            outbox = self._outbox_rows
            with conn.cursor() as cursor:
                cursor.executemany(q(outbox.insert), [outbox.row(e) for e in entries])
        self._history_rows.record(run(conn), stored)  # the schedule history's part

    def put_deliveries(self, deliveries: Sequence[InboundDelivery]) -> list[InboundDelivery | None]:
        """See :meth:`Store.put_deliveries` (one transaction). First every job's advisory
        lock, in the order of their keys; then the inserts, in (provider, webhook id)
        order, deliveries of one id in the order given: two batches naming the same
        jobs or ids never wait for each other in a circle."""
        if not deliveries:
            return []
        locks = sorted({self._lock_of(d) for d in deliveries if d.job_id is not None})
        order = sorted(
            range(len(deliveries)),
            key=lambda i: (deliveries[i].provider, to_text(deliveries[i].webhook_id)),
        )
        stored: list[InboundDelivery | None] = [None] * len(deliveries)
        with self._transaction() as conn:
            for lock in locks:
                conn.execute(self._sql["push_lock"], (lock,))
            for i in order:
                stored[i] = self._put_delivery(conn, deliveries[i], locked=True)
        return stored

    def _lock_of(self, delivery: InboundDelivery) -> int:
        """The advisory lock of *delivery*'s job (it names one)."""
        assert delivery.job_id is not None
        return job_lock_key(self.schema, delivery.provider, to_text(delivery.job_id))

    def _put_delivery(
        self,
        conn: psycopg.Connection[TupleRow],
        delivery: InboundDelivery,
        *,
        locked: bool = False,
    ) -> InboundDelivery | None:
        """Store one delivery in the caller's transaction (``None``: a duplicate), under
        its job's advisory lock (taken here unless *locked*: the caller holds it)."""
        if delivery.job_id is not None and not locked:
            conn.execute(self._sql["push_lock"], (self._lock_of(delivery),))
        return self._inbox_rows.put(run(conn), delivery)

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
        """See :meth:`Store.claim_outbox` (``FOR UPDATE SKIP LOCKED``, one statement).

        Entries another worker is claiming at this moment are skipped, not waited for.
        """
        if limit < 0:
            raise UsageError(f"claim limit must be 0 or more; got {limit}")
        until = now + timedelta(seconds=lease_s)
        with self._transaction() as conn:
            return self._outbox_rows.claim(
                conn,
                owner=owner,
                now=now,
                until=until,
                limit=limit,
                channels=channels,
                operation_id=operation_id,
            )
