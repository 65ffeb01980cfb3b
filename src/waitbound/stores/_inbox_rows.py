"""The webhook inbox as rows of SQL tables (``inbox``, and ``webhook_jobs``: which
operation a provider's job is).

One copy of the statements and the row codec for SQLite and PostgreSQL; the backend
supplies its :class:`~waitbound.stores._sql_dialect.Dialect`. Where a statement's
shape differs it says so: PostgreSQL stores a delivery in one statement (the match a
subquery, ``RETURNING`` it) under the job's advisory lock, which the backend takes;
SQLite, whose writes are serialised, reads the match first. PostgreSQL's listing is
one statement text whatever the filters (so it runs prepared). Every statement runs in
the caller's transaction (or, PostgreSQL's reads, as one autocommitted statement).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

from waitbound._model._push import InboundDelivery
from waitbound.stores._codec import Execute, load_json
from waitbound.stores._protocol import encode_json
from waitbound.stores._sql_dialect import Dialect

__all__ = ["InboxRows", "delivery_of"]

_COLUMNS: Final = (
    "provider, webhook_id, received_at, job_id, event_type, authoritative, payload,"
    " operation_id, applied_at"
)


class InboxRows:
    """The statements of one store's ``inbox`` and ``webhook_jobs`` tables."""

    def __init__(self, dialect: Dialect) -> None:
        d = self._dialect = dialect
        m = d.mark
        inbox, jobs = d.table("inbox"), d.table("webhook_jobs")
        self._inbox = inbox
        read = _COLUMNS.replace("payload", f"payload{d.read_json}")
        self._read = read
        if d.is_postgres:
            differs = "webhook_jobs.operation_id IS DISTINCT FROM excluded.operation_id"
        else:
            differs = "operation_id IS NOT excluded.operation_id"
        self._register = (
            f"INSERT INTO {jobs} (provider, job_id, operation_id) VALUES ({d.marks(3)})"
            " ON CONFLICT (provider, job_id) DO UPDATE SET operation_id = excluded.operation_id"
            f" WHERE {differs}"
        )
        self._look_back = (
            f"UPDATE {inbox} SET operation_id = {m}"
            f" WHERE provider = {m} AND job_id = {m} AND operation_id IS NULL"
        )
        self._match = f"SELECT operation_id FROM {jobs} WHERE provider = {m} AND job_id = {m}"
        matched = f"(SELECT operation_id FROM {jobs} WHERE provider = {m} AND job_id = {m})"
        self._put = (
            f"INSERT INTO {inbox} ({_COLUMNS})"
            f" VALUES ({d.marks(6)}, {m}{d.write_json}, "
            + (matched if d.is_postgres else m)
            + f", {m}) ON CONFLICT (provider, webhook_id) DO NOTHING"
            + (" RETURNING operation_id" if d.is_postgres else "")
        )
        self._pending = (
            f"SELECT {read} FROM {inbox} WHERE operation_id IS NOT NULL AND applied_at IS NULL"
            f" ORDER BY received_at, webhook_id{d.collate} LIMIT {m}"
        )
        self._mark_applied = (
            f"UPDATE {inbox} SET applied_at = {m}"
            f" WHERE provider = {m} AND webhook_id = {m} AND applied_at IS NULL"
        )
        self._order = (
            f" ORDER BY received_at DESC, webhook_id{d.collate} DESC, provider{d.collate} DESC"
            f" LIMIT {m}"
        )
        self._listing = (  # PostgreSQL's, whatever the filters
            f"SELECT {read} FROM {inbox}"
            f" WHERE ({m}::text IS NULL OR provider = {m})"
            f" AND ({m}::text IS NULL OR operation_id = {m}){self._order}"
        )
        done = f"received_at < {m} AND (applied_at IS NOT NULL OR operation_id IS NULL)"
        self._prune = f"DELETE FROM {inbox} WHERE {done}"
        self._count = f"SELECT count(*) FROM {inbox}"

    def register(self, execute: Execute, key: tuple[str, str], operation_id: str) -> None:
        """Record that the job *key* (provider, job id) is *operation_id*, and match to it
        the deliveries about the job stored before (the look-back). PostgreSQL: under
        the job's advisory lock, which the caller holds."""
        job = (key[0], self._dialect.write_text(key[1]))
        execute(self._register, (*job, operation_id))
        execute(self._look_back, (operation_id, *job))

    def put(self, execute: Execute, delivery: InboundDelivery) -> InboundDelivery | None:
        """Store one delivery, matched to its job's operation when the job is known;
        ``None``: a duplicate (nothing stored). PostgreSQL: under the job's advisory
        lock, which the caller holds."""
        d = self._dialect
        job_id = d.text(delivery.job_id)
        head = (
            delivery.provider,
            d.write_text(delivery.webhook_id),
            d.instant(delivery.received_at),
            job_id,
            d.text(delivery.event_type),
            delivery.authoritative,
            encode_json(delivery.payload),
        )
        if d.is_postgres:
            row = execute(
                self._put, (*head, delivery.provider, job_id, d.instant(delivery.applied_at))
            ).fetchone()
            return None if row is None else replace(delivery, operation_id=row[0])
        found = execute(self._match, (delivery.provider, job_id)).fetchone()
        matched: str | None = found[0] if found else None
        cursor = execute(self._put, (*head, matched, d.instant(delivery.applied_at)))
        if cursor.rowcount != 1:
            return None
        return replace(delivery, operation_id=matched)

    def pending(self, execute: Execute, limit: int) -> list[InboundDelivery]:
        """See :meth:`Store.pending_deliveries`."""
        return self._deliveries(execute(self._pending, (limit,)).fetchall())

    def mark_applied(self, execute: Execute, provider: str, webhook_id: str, at: datetime) -> bool:
        """See :meth:`Store.mark_applied`."""
        d = self._dialect
        args = (d.instant(at), provider, d.write_text(webhook_id))
        return bool(execute(self._mark_applied, args).rowcount == 1)

    def listing(
        self, execute: Execute, *, provider: str | None, operation_id: str | None, limit: int
    ) -> list[InboundDelivery]:
        """See :meth:`Store.inbox`."""
        if self._dialect.is_postgres:
            args: tuple[object, ...] = (provider, provider, operation_id, operation_id, limit)
            return self._deliveries(execute(self._listing, args).fetchall())
        given = {
            column: value
            for column, value in (("provider", provider), ("operation_id", operation_id))
            if value is not None
        }
        where = (" WHERE " + " AND ".join(f"{c} = ?" for c in given)) if given else ""
        statement = f"SELECT {self._read} FROM {self._inbox}{where}{self._order}"
        return self._deliveries(execute(statement, (*given.values(), limit)).fetchall())

    def prune(self, execute: Execute, before: datetime) -> tuple[int, int]:
        """Delete the deliveries received before *before* that were applied or never
        matched; return how many were deleted and how many are left."""
        pruned = execute(self._prune, (self._dialect.instant(before),))
        row = execute(self._count, ()).fetchone()
        return int(pruned.rowcount or 0), int(row[0]) if row else 0

    def _deliveries(self, rows: list[tuple[object, ...]]) -> list[InboundDelivery]:
        d = self._dialect
        return [delivery_of(row, d.read_instant, d.read_text) for row in rows]


def _same(text: Any) -> str:
    return str(text)


def delivery_of(
    row: Sequence[Any], instant: Callable[[Any], datetime], text: Callable[[Any], str] = _same
) -> InboundDelivery:
    """An ``inbox`` row (provider, webhook_id, received_at, job_id, event_type,
    authoritative, payload, operation_id, applied_at) as a delivery; *instant* reads the
    store's stored instants, *text* its provider texts (PostgreSQL: :func:`from_text`)."""
    provider, webhook_id, received_at, job_id, event_type, authoritative, payload, op, applied = row
    return InboundDelivery(
        provider=provider,
        webhook_id=text(webhook_id),
        received_at=instant(received_at),
        job_id=None if job_id is None else text(job_id),
        event_type=None if event_type is None else text(event_type),
        authoritative=bool(authoritative),
        payload=load_json(payload),
        operation_id=op,
        applied_at=None if applied is None else instant(applied),
    )
