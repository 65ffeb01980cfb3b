"""Pacing far ahead: what one ``Store.pace`` costs for a poll planned a minute, a day,
180 days or a year ahead (issue 32 item 4).

Each store (memory, SQLite on a temporary file, PostgreSQL in a scratch schema) first
holds a crowded origin: a wave of ``--wave`` polls planned for one instant and spread
by the calendar itself, plus the polls of the earlier distances. Then, per distance,
``--calls`` polls are paced, each planned at its own second (``distance + 7 s * i``)
with ``latest_at`` 600 s later (the default ``max_delay_s``), the way the controller
hands them over. The figure is the wall time of each call (it runs inside the store's
write transaction, so it is also how long the write lock is held): the median and the
slowest, in milliseconds. The calendar used to walk every second from now to the
planned poll: 2 s for a poll 180 days ahead, 4 s for a year.

Usage: ``python -m benchmarks.pace_far [--calls N] [--wave N] [--no-postgres]
[--quick]`` (about 20 s; ``--quick``: 20 calls, a wave of 100).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks._common import PG_DSN, machine, pg_schema, print_machine, print_table
from waitbound import MemoryStore, SQLiteStore, Store

ORIGIN = "https://api.example:443"
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
DISTANCES: Sequence[tuple[str, timedelta]] = (
    ("1 minute", timedelta(minutes=1)),
    ("1 day", timedelta(days=1)),
    ("180 days", timedelta(days=180)),
    ("1 year", timedelta(days=365)),
)
HEADERS = ["store", "planned ahead", "median ms", "slowest ms", "calls"]


@contextmanager
def _stores(postgres: bool) -> Iterator[list[tuple[str, Store]]]:
    with tempfile.TemporaryDirectory() as folder:
        stores: list[tuple[str, Store]] = [
            ("memory", MemoryStore()),
            ("SQLite", SQLiteStore(Path(folder) / "pace.db")),
        ]
        if not postgres:
            yield stores
            return
        from waitbound.stores.postgres import PostgresStore

        with pg_schema(PG_DSN) as schema:
            opened = PostgresStore(PG_DSN, schema=schema, min_size=1, max_size=1)
            try:
                yield [*stores, ("PostgreSQL", opened)]
            finally:
                opened.close()


def measure(store: Store, *, calls: int, wave: int) -> list[tuple[str, float, float]]:
    """(distance, median ms, slowest ms) of *calls* paces per distance on *store*."""
    planned = NOW + timedelta(seconds=30)
    for k in range(wave):
        store.pace(
            ORIGIN,
            planned,
            latest_at=planned + timedelta(seconds=600),
            now=NOW,
            rng_offset=k / wave,
        )
    found = []
    for name, ahead in DISTANCES:
        took = []
        for i in range(calls):
            at = NOW + ahead + timedelta(seconds=7 * i)
            started = time.perf_counter()
            store.pace(ORIGIN, at, latest_at=at + timedelta(seconds=600), now=NOW, rng_offset=0.5)
            took.append((time.perf_counter() - started) * 1000)
        found.append((name, statistics.median(took), max(took)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="paces per distance")
    parser.add_argument("--wave", type=int, default=1000, help="polls crowding the origin")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--quick", action="store_true", help="20 calls, a wave of 100")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.wave = 20, 100
    print_machine(machine(pg_dsn=None if args.no_postgres else PG_DSN))
    rows: list[list[object]] = []
    with _stores(not args.no_postgres) as stores:
        for kind, store in stores:
            for name, median, slowest in measure(store, calls=args.calls, wave=args.wave):
                rows.append([kind, name, f"{median:.3f}", f"{slowest:.3f}", args.calls])
            if kind == "SQLite":
                store.close()
    print_table(
        f"Pacing far ahead: one pace per call, an origin crowded by {args.wave:,} polls",
        HEADERS,
        rows,
    )


if __name__ == "__main__":
    main()
