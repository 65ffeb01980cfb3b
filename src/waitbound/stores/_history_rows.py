"""The schedule history as rows of a SQL table (``schedule_history``, schema 5).

One copy of the statements for SQLite and PostgreSQL: they differ only in their
parameter mark and in how an instant is written and read. A row is one piece of
:class:`~waitbound._model._history.Evidence`; ``seq`` grows with every row ever inserted (it
is never reused), so the newest ``seq`` of a key is its history's version.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from waitbound._model._history import HISTORY_LIMIT, Evidence, ScheduleSummary, evidence_of
from waitbound._model._outcome import OutcomeKind
from waitbound._model._record import Record
from waitbound.stores._codec import Execute

__all__ = ["HistoryRows"]

_COLUMNS: Final = (
    "key, operation_id, accepted_at, pending_seen_at, ended_seen_at, outcome, finished_at"
)


class HistoryRows:
    """The statements of one store's ``schedule_history`` table.

    Args:
        table: the table's name as SQL (quoted and schema-qualified where needed).
        mark: the parameter mark (``?`` or ``%s``).
        instant: how an aware instant is written (``None`` stays ``None``).
        read_instant: how a stored instant is read back (aware UTC).
    """

    def __init__(
        self,
        table: str,
        *,
        mark: str,
        instant: Callable[[datetime | None], object],
        read_instant: Callable[[Any], datetime | None],
    ) -> None:
        self._instant = instant
        self._read = read_instant
        marks = ", ".join([mark] * 7)
        conflict = "ON CONFLICT (operation_id) DO NOTHING"
        self._insert = f"INSERT INTO {table} ({_COLUMNS}) VALUES ({marks}) {conflict}"
        self._trim = (
            f"DELETE FROM {table} WHERE key = {mark} AND seq <= (SELECT seq FROM {table}"
            f" WHERE key = {mark} ORDER BY seq DESC LIMIT 1 OFFSET {mark})"
        )
        self._select = (
            f"SELECT {_COLUMNS} FROM {table} WHERE key = {mark} ORDER BY seq DESC LIMIT {mark}"
        )
        self._version = f"SELECT max(seq) FROM {table} WHERE key = {mark}"
        self._summaries = (
            f"SELECT key, count(*), sum(CASE WHEN ended_seen_at IS NULL THEN 1 ELSE 0 END),"
            f" max(finished_at), max(seq) FROM {table} GROUP BY key ORDER BY key"
        )
        self._forget = f"DELETE FROM {table} WHERE key = {mark}"

    def record(self, execute: Execute, stored: Record) -> None:
        """The history's part of a record write (in its transaction): the evidence the
        record owes (:func:`~waitbound._model._history.evidence_of`), once per operation,
        the key's oldest rows beyond :data:`~waitbound._model._history.HISTORY_LIMIT` dropped."""
        evidence = evidence_of(stored)
        if evidence is None:
            return
        cursor = execute(
            self._insert,
            (
                evidence.key,
                evidence.operation_id,
                self._instant(evidence.accepted_at),
                self._instant(evidence.pending_seen_at),
                self._instant(evidence.ended_seen_at),
                evidence.outcome.value,
                self._instant(evidence.finished_at),
            ),
        )
        if cursor.rowcount == 1:
            execute(self._trim, (evidence.key, evidence.key, HISTORY_LIMIT))

    def history(self, execute: Execute, key: str) -> list[Evidence]:
        """The key's evidence, newest first."""
        rows = execute(self._select, (key, HISTORY_LIMIT)).fetchall()
        found = []
        for row in rows:
            accepted, finished = self._read(row[2]), self._read(row[6])
            assert accepted is not None
            assert finished is not None
            found.append(
                Evidence(
                    key=str(row[0]),
                    operation_id=str(row[1]),
                    accepted_at=accepted,
                    pending_seen_at=self._read(row[3]),
                    ended_seen_at=self._read(row[4]),
                    outcome=OutcomeKind(row[5]),
                    finished_at=finished,
                )
            )
        return found

    def version(self, execute: Execute, key: str) -> int:
        """The key's history version (0: no history)."""
        row = execute(self._version, (key,)).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def summaries(self, execute: Execute) -> list[ScheduleSummary]:
        """Every key's summary, by key."""
        return [
            ScheduleSummary(
                key=str(key),
                jobs=int(jobs),
                censored=int(censored or 0),
                newest_at=self._read(newest),
                version=int(version),
            )
            for key, jobs, censored, newest, version in execute(self._summaries, ()).fetchall()
        ]

    def forget(self, execute: Execute, key: str) -> int:
        """Drop the key's history; return how many rows it held."""
        return int(execute(self._forget, (key,)).rowcount)
