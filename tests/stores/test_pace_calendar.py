"""The origin pacing calendar (``Store.pace``), against every store: a lone poll is
never moved, a wave is spread so no bucket holds more than allowed, a poll is never
earlier than planned nor later than its latest time, origins are paced apart, and
the calendar stays bounded."""

from __future__ import annotations

import math
import random
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import waitbound
from tests.stores import pg
from tests.stores.test_store_contract import T0, backend, store
from waitbound import SQLiteStore, Store
from waitbound._model._pacing import SPREAD_FACTOR, choose, span

__all__ = ["backend", "store"]  # the fixtures, imported for pytest

A = "https://api.example:443"
B = "https://other.example:443"


def _at(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def test_a_lone_poll_is_never_moved(store: Store) -> None:
    """One operation on an origin: every poll goes out exactly when planned."""
    now = T0
    for step in range(20):
        planned = now + _at(5.0 + step)
        got = store.pace(A, planned, latest_at=planned + _at(60), now=now, rng_offset=0.5)
        assert got == planned
        now = got


def test_a_wave_is_spread_within_allowed_and_bounds(store: Store) -> None:
    """300 polls planned for one instant: none earlier than planned or later than its
    latest time, and no bucket holds more than the allowed count."""
    rng = random.Random(3)
    planned = T0 + _at(10.25)
    latest = planned + _at(60)
    got = [
        store.pace(A, planned, latest_at=latest, now=T0, rng_offset=rng.random())
        for _ in range(300)
    ]
    assert all(planned <= at <= latest for at in got)
    counts: dict[int, int] = {}
    for at in got:
        counts[math.floor(at.timestamp())] = counts.get(math.floor(at.timestamp()), 0) + 1
    where = span(planned, latest_at=latest, now=T0)
    buckets = where.mean_last - where.first + 1
    assert max(counts.values()) <= math.ceil(SPREAD_FACTOR * 300 / buckets)
    assert len(counts) > 1
    assert got[0] == planned  # the first of the wave was not moved


def test_no_room_up_to_latest_keeps_the_planned_time(store: Store) -> None:
    """With its latest time one bucket away, a wave cannot be spread: bounded lag beats
    a perfect spread, so the polls beyond the room keep their planned time."""
    planned = T0 + _at(5.0)
    latest = planned + _at(0.5)
    got = [store.pace(A, planned, latest_at=latest, now=T0, rng_offset=0.9) for _ in range(50)]
    assert all(planned <= at <= latest for at in got)
    assert got.count(planned) > 1


def test_origins_are_paced_apart(store: Store) -> None:
    """A wave on one origin does not move the polls of another."""
    planned = T0 + _at(5.0)
    for _ in range(100):
        store.pace(A, planned, latest_at=planned + _at(60), now=T0, rng_offset=0.5)
    assert store.pace(B, planned, latest_at=planned + _at(60), now=T0, rng_offset=0.5) == planned


def test_the_calendar_stays_bounded(store: Store) -> None:
    """Buckets before now are pruned: an hour of steady polling keeps about a window's
    worth of buckets, whatever ran before."""
    now = T0
    for _ in range(3600 // 2):
        planned = now + _at(5)
        store.pace(A, planned, latest_at=planned + _at(60), now=now, rng_offset=0.5)
        now += _at(2)
    assert store.calendar_size() <= 15


def test_a_sqlite_schema_5_file_without_the_calendar_gets_it(tmp_path: Path) -> None:
    """A SQLite store written at schema 5 before the calendar existed opens, and paces."""
    path = tmp_path / "old5.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE pace_calendar")
    reopened = SQLiteStore(path)
    try:
        planned = T0 + _at(5)
        assert (
            reopened.pace(A, planned, latest_at=planned + _at(1), now=T0, rng_offset=0) == planned
        )
        assert reopened.calendar_size() == 1
    finally:
        reopened.close()


def test_a_postgres_schema_5_store_without_the_calendar_gets_it() -> None:
    """A PostgreSQL store at schema 5 made before the calendar existed gets the table at
    its first pace."""
    from waitbound.stores.postgres import PostgresStore

    with pg.fresh_schema() as schema:
        pg.execute(f'DROP TABLE "{schema}".pace_calendar')
        opened = PostgresStore(pg.DSN, schema=schema, max_size=1)
        try:
            planned = T0 + _at(5)
            got = opened.pace(A, planned, latest_at=planned + _at(1), now=T0, rng_offset=0)
            assert got == planned
            assert opened.calendar_size() == 1
        finally:
            opened.close()


_OWN_CODE = str(Path(waitbound.__file__).parent)


class _LockedWork:
    """Counts the work a store does while it holds its write transaction (SQLite: the
    file's write lock; PostgreSQL: the origin's advisory lock; memory: the store's lock):
    lines of waitbound's own code run, and SQLite's virtual-machine steps (in
    hundreds). Counting, not timing: the figures do not depend on the machine."""

    def __init__(self, store: Store) -> None:
        self.inside = False
        self.lines = 0
        self.vm_steps = 0
        if hasattr(store, "_transaction"):
            original = store._transaction

            @contextmanager
            def counted() -> Iterator[Any]:
                with original() as db:
                    self.inside = True
                    try:
                        yield db
                    finally:
                        self.inside = False

            store._transaction = counted
        else:
            store._lock = _FlaggedLock(store._lock, self)  # type: ignore[attr-defined]
        db = getattr(store, "_db", None)
        if isinstance(db, sqlite3.Connection):
            db.set_progress_handler(self._step, 100)

    def _step(self) -> int:
        if self.inside:
            self.vm_steps += 1
        return 0

    def _line(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "line" and self.inside:
            self.lines += 1
        return self._line

    def _call(self, frame: FrameType, event: str, arg: object) -> Any:
        return self._line if frame.f_code.co_filename.startswith(_OWN_CODE) else None

    def of(self, call: Callable[[], object]) -> int:
        """The work *call* does under the store's write lock (lines + hundreds of steps)."""
        self.lines = self.vm_steps = 0
        previous = sys.gettrace()
        sys.settrace(self._call)
        try:
            call()
        finally:
            sys.settrace(previous)
        return self.lines + self.vm_steps


class _FlaggedLock:
    def __init__(self, lock: Any, work: _LockedWork) -> None:
        self._held, self._work = lock, work

    def __enter__(self) -> None:
        self._held.acquire()
        self._work.inside = True

    def __exit__(self, *exc: object) -> None:
        self._work.inside = False
        self._held.release()


def test_a_year_ahead_poll_does_no_more_work_under_the_write_lock(store: Store) -> None:
    """A poll planned a day, 180 days or a year ahead is paced with the work of one
    planned a minute ahead, on a calendar that holds a spread wave, counted while the
    store's write lock is held (the calendar walked every second from now to the
    planned poll inside the transaction: 2 s of CPU for 180 days, 4 s for a year, while
    other writers waited)."""
    wave = T0 + _at(30)
    for k in range(150):
        store.pace(A, wave, latest_at=wave + _at(300), now=T0, rng_offset=(k % 10) / 10)
    work = _LockedWork(store)
    costs: dict[float, int] = {}
    for days in (60 / 86_400, 1, 180, 365):
        planned = T0 + timedelta(days=days)
        latest = planned + _at(600)
        paced: list[Any] = []

        def one(p: Any = planned, q: Any = latest, out: list[Any] = paced) -> None:
            out.append(store.pace(A, p, latest_at=q, now=T0, rng_offset=0.5))

        costs[days] = work.of(one)
        assert planned <= paced[0] <= latest
        assert costs[days] > 0
        assert costs[days] <= costs[60 / 86_400] + 10, costs


def test_a_wave_a_year_ahead_is_spread_like_the_pure_rule(store: Store) -> None:
    """200 polls planned for one instant a year ahead: a year's mean leaves room for one
    a second, so each goes to the first free second after the others — the search
    crosses more full buckets than one read holds — and every store places each poll
    where ``choose`` on the same counts does."""
    planned = T0 + timedelta(days=365, seconds=0.25)
    latest = planned + _at(600)
    counts: dict[int, int] = {}
    for k in range(200):
        offset = (k % 7) / 7
        bucket, want = choose(counts, planned, latest_at=latest, now=T0, rng_offset=offset)
        counts[bucket] = counts.get(bucket, 0) + 1
        got = store.pace(A, planned, latest_at=latest, now=T0, rng_offset=offset)
        assert got == want
    assert sorted(counts) == list(range(min(counts), min(counts) + 200))


def test_other_origins_rows_are_not_read_at_every_pace(store: Store) -> None:
    """The calendar of one origin costs the same under the write lock whether other
    origins hold 100 or 600 future seconds: their past is swept at most once a minute,
    not by a scan of the whole table at every pace (lines and SQLite steps counted)."""
    costs = []
    work = _LockedWork(store)
    rounds = (
        ("https://b.example:443", 100, "https://a1.example:443"),
        ("https://c.example:443", 500, "https://a2.example:443"),
    )
    for other, size, paced in rounds:
        for k in range(size):
            at = T0 + timedelta(days=300, seconds=k)
            store.pace(other, at, latest_at=at, now=T0, rng_offset=0.0)
        planned = T0 + _at(30)

        def one(p: Any = planned, name: str = paced) -> None:
            store.pace(name, p, latest_at=p + _at(60), now=T0, rng_offset=0.0)

        costs.append(work.of(one))
    assert costs[1] <= costs[0] + 5, costs


def test_other_origins_past_is_pruned(store: Store) -> None:
    """An origin that stopped polling leaves nothing behind once its seconds are past
    (and, in PostgreSQL, the margin for clock skew): another origin's pace an hour
    later sweeps them."""
    for k in range(20):
        store.pace(B, T0 + _at(5 + k), latest_at=T0 + _at(5 + k), now=T0, rng_offset=0.0)
    later = T0 + timedelta(hours=1)
    store.pace(A, later + _at(5), latest_at=later + _at(5), now=later, rng_offset=0.0)
    assert store.calendar_size() == 1
