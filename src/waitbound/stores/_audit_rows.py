"""The audit log as rows of a SQL table (``audit_events``).

One copy of the statements and the row codec for SQLite and PostgreSQL; the backend
supplies its :class:`~waitbound.stores._sql_dialect.Dialect` (parameter mark, schema,
the ``json`` casts, the byte-wise collation of ids, how the label is read from the
``contract`` JSON). Appending runs inside the record write's transaction (SQLite: one
``executemany``; PostgreSQL: its one write statement, ``_postgres_sql``, also appends).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from waitbound._model._audit import AuditEvent, StoredAuditEvent
from waitbound.stores._codec import Execute, dump_json, from_text, load_object, to_text
from waitbound.stores._protocol import AuditCursor
from waitbound.stores._sql_dialect import Dialect

__all__ = ["AuditRows", "audit_rows"]


class AuditRows:
    """The statements of one store's ``audit_events`` table."""

    def __init__(self, dialect: Dialect) -> None:
        d = self._dialect = dialect
        events, operations = d.table("audit_events"), d.table("operations")
        self.append = (
            f"INSERT INTO {events} (operation_id, seq, at, kind, summary, data, prev_hash, hash)"
            f" VALUES ({d.marks(5)}, {d.mark}{d.write_json}, {d.marks(2)})"
        )
        """One event's ``INSERT`` (its parameters: :meth:`rows`)."""
        self._of = (
            f"SELECT seq, at, kind, summary, data{d.read_json}, prev_hash, hash"
            f" FROM {events} WHERE operation_id = {d.mark} ORDER BY seq"
        )
        head = (
            f"SELECT e.operation_id, e.seq, e.at, e.kind, e.summary, e.data{d.read_json},"
            f" e.prev_hash, e.hash FROM {events} AS e"
        )
        join = f" JOIN {operations} AS o ON o.operation_id = e.operation_id"
        labelled = d.label_is("o.contract")
        after = f"(e.at, e.operation_id{d.collate}, e.seq) > ({d.marks(3)})"
        order = f" ORDER BY e.at, e.operation_id{d.collate}, e.seq LIMIT {d.mark}"
        self._after = {  # (labelled, with a cursor): the statement
            (False, False): head + order,
            (False, True): f"{head} WHERE {after}{order}",
            (True, False): f"{head}{join} WHERE {labelled}{order}",
            (True, True): f"{head}{join} WHERE {labelled} AND {after}{order}",
        }

    def rows(self, sealed: Sequence[StoredAuditEvent]) -> list[tuple[object, ...]]:
        """Sealed events as :attr:`append`'s parameters (SQLite: the time as ISO text)."""
        if self._dialect.text_times:
            return audit_rows(sealed, datetime.isoformat)
        return audit_rows(sealed, lambda at: at)

    def events(self, execute: Execute, operation_id: str) -> list[StoredAuditEvent]:
        """The operation's events in order (see :meth:`Store.audit`)."""
        rows = execute(self._of, (operation_id,)).fetchall()
        return [self._event(operation_id, row) for row in rows]

    def after(
        self, execute: Execute, cursor: AuditCursor | None, *, label_prefix: str, limit: int
    ) -> list[StoredAuditEvent]:
        """See :meth:`Store.audit_after`. Instants compare as the backend stores them
        (SQLite: UTC ISO 8601 texts, which sort as their instants do)."""
        args: list[object] = []
        if label_prefix:  # the unfiltered stream reads no record's JSON
            args += [len(label_prefix), label_prefix]
        if cursor is not None:
            args += [self._dialect.instant(cursor[0]), cursor[1], cursor[2]]
        statement = self._after[(bool(label_prefix), cursor is not None)]
        rows = execute(statement, (*args, limit)).fetchall()
        return [self._event(row[0], row[1:]) for row in rows]

    def _event(self, operation_id: str, row: Any) -> StoredAuditEvent:
        """An ``audit_events`` row (seq, at, kind, summary, data, prev_hash, hash) as a
        stored event of *operation_id*."""
        seq, at, kind, summary, data, prev_hash, digest = row
        return StoredAuditEvent(
            operation_id=operation_id,
            seq=int(seq),
            event=AuditEvent(
                at=self._dialect.read_instant(at),
                kind=kind,
                summary=from_text(summary),
                data=load_object(data),
            ),
            prev_hash=prev_hash,
            hash=digest,
        )


def audit_rows(
    sealed: Sequence[StoredAuditEvent], instant: Callable[[datetime], object]
) -> list[tuple[object, ...]]:
    """Sealed events as ``audit_events`` rows, the time converted by *instant*."""
    return [
        (
            s.operation_id,
            s.seq,
            instant(s.event.at),
            s.event.kind,
            to_text(s.event.summary),
            dump_json(dict(s.event.data)),
            s.prev_hash,
            s.hash,
        )
        for s in sealed
    ]
