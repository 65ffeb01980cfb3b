"""The origin pacing calendar as rows of a SQL table (``pace_calendar``, schema 5).

One copy of the statements for SQLite and PostgreSQL (they differ only in their
parameter mark). A row is one origin's count of polls planned in one bucket (a whole
number of seconds since the Unix epoch, ``waitbound._model._pacing.BUCKET_S`` wide). The
caller runs :meth:`CalendarRows.pace` inside one write transaction, serialized per
origin (SQLite: the store's write lock; PostgreSQL: an advisory lock on the origin).

Inside it, the work does not grow with how far ahead the poll is: the window's mean
is one ``sum`` over the origin's rows in it (an index range of the primary key), and
the first bucket with room is found by reading only occupied buckets from the planned
one, in order and in batches of :data:`FULL_BATCH`, up to the first gap
(:func:`waitbound._model._pacing.first_room`). The sum and the first batch are one statement:
a pace is a prune, a read and an upsert, as many round trips as a walk took.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Final

from waitbound._model._pacing import Span, first_room, room, settle, span
from waitbound.stores._codec import Execute

__all__ = ["CALENDAR_DDL", "FULL_BATCH", "CalendarRows"]

CALENDAR_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS {table} (origin TEXT NOT NULL, bucket BIGINT NOT NULL,"
    " planned INTEGER NOT NULL, PRIMARY KEY (origin, bucket))"
)
"""The table (``{table}``: its SQL name). ``IF NOT EXISTS``: a schema-5 store made
before the calendar existed gets it where the store opens (SQLite) or at its first
``pace`` (PostgreSQL); see ``docs/stores.md``."""


FULL_BATCH: Final = 64
"""How many full buckets one read of the gap search fetches."""

SWEEP_EVERY_S: Final = 60
"""Other origins' past buckets are pruned by one store object at most this often
(seconds of the callers' *now*): that prune reads the whole table (no index leads with
the bucket), while the origin's own past, pruned at every pace, is a range of the
primary key."""


class CalendarRows:
    """The statements of one store's ``pace_calendar`` table.

    Args:
        table: the table's name as SQL (quoted and schema-qualified where needed).
        mark: the parameter mark (``?`` or ``%s``).
        keep_s: buckets of other origins older than this before now are pruned too,
            at most every :data:`SWEEP_EVERY_S` (seconds; 0 in SQLite, whose writes are
            serialized; a margin in PostgreSQL, so the prune never touches a row
            another origin's transaction holds, whatever the workers' clock skew).

    One object per store object (it remembers when it last pruned other origins).
    """

    def __init__(self, table: str, *, mark: str, keep_s: int = 0) -> None:
        self._keep_s = keep_s
        self.create = CALENDAR_DDL.format(table=table)
        self._prune = f"DELETE FROM {table} WHERE origin = {mark} AND bucket < {mark}"
        self._sweep = f"DELETE FROM {table} WHERE bucket < {mark}"  # every origin's
        self._swept: int | None = None
        """The bucket of this object's last sweep of every origin's past."""
        self._read = (  # the first batch of occupied buckets from the planned one, and
            # the window's total as a row without a bucket: one round trip for both
            f"SELECT bucket, planned FROM (SELECT bucket, planned FROM {table}"
            f" WHERE origin = {mark} AND bucket >= {mark} AND bucket <= {mark}"
            f" ORDER BY bucket LIMIT {FULL_BATCH}) AS near"
            f" UNION ALL SELECT NULL, coalesce(sum(planned), 0) FROM {table}"
            f" WHERE origin = {mark} AND bucket >= {mark} AND bucket <= {mark}"
        )
        self._full = (
            f"SELECT bucket FROM {table} WHERE origin = {mark} AND bucket >= {mark}"
            f" AND bucket <= {mark} AND planned >= {mark} ORDER BY bucket LIMIT {FULL_BATCH}"
        )
        self._add = (
            f"INSERT INTO {table} AS c (origin, bucket, planned) VALUES ({mark}, {mark}, 1)"
            " ON CONFLICT (origin, bucket) DO UPDATE SET planned = c.planned + 1"
        )
        self._size = f"SELECT count(*) FROM {table}"

    def pace(
        self,
        execute: Execute,
        origin: str,
        planned_at: datetime,
        *,
        latest_at: datetime,
        now: datetime,
        rng_offset: float,
    ) -> datetime:
        """See :meth:`~waitbound.stores.Store.pace` (in the caller's transaction)."""
        where = span(planned_at, latest_at=latest_at, now=now)
        execute(self._prune, (origin, where.first))
        swept = self._swept
        if swept is None or not 0 <= where.first - swept < SWEEP_EVERY_S:
            execute(self._sweep, (where.first - self._keep_s,))
            self._swept = where.first
        bucket, at = where.planned, planned_at
        if latest_at > planned_at:
            rows = execute(
                self._read,
                (origin, where.planned, where.latest, origin, where.first, where.mean_last),
            ).fetchall()
            total = sum(int(n) for b, n in rows if b is None)
            near = sorted((int(b), int(n)) for b, n in rows if b is not None)
            allowed = room(total, where)
            found = first_room(self._full_buckets(execute, origin, where, allowed, near), where)
            bucket, at = settle(
                found, where, planned_at, latest_at=latest_at, rng_offset=rng_offset
            )
        execute(self._add, (origin, bucket))
        return at

    def _full_buckets(
        self,
        execute: Execute,
        origin: str,
        where: Span,
        allowed: int,
        near: list[tuple[int, int]],
    ) -> Iterator[int]:
        """The origin's buckets from ``where.planned`` to ``where.latest`` holding
        *allowed* polls or more, ascending: first those of *near* (the first batch of
        occupied buckets, already read), then, only if the search goes past them,
        further batches read lazily."""
        yield from (bucket for bucket, count in near if count >= allowed)
        if len(near) < FULL_BATCH:
            return
        start = near[-1][0] + 1
        while start <= where.latest:
            rows = execute(self._full, (origin, start, where.latest, allowed)).fetchall()
            for (bucket,) in rows:
                yield int(bucket)
            if len(rows) < FULL_BATCH:
                return
            start = int(rows[-1][0]) + 1

    def size(self, execute: Execute) -> int:
        """How many rows the table holds."""
        (count,) = execute(self._size, ()).fetchone()
        return int(count)
