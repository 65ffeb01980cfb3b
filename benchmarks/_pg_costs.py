"""Calibrate the fleet simulation's database cost model against the real PostgreSQL.

In a scratch schema with waitbound's real tables (``wbbench_<random>``, dropped
afterwards), three kinds of transaction are timed, each the way the batching worker
issues it (one statement per kind, arrays bound with ``unnest``, the writes and the
``COMMIT`` in one pipeline):

- ``claim`` of *n*: ``SELECT … FOR UPDATE SKIP LOCKED LIMIT n`` of the due
  operations (their ~2.3 KB JSON returned), then one ``UPDATE`` setting lease, version
  and data of the *n* rows and one ``INSERT`` of *n* audit events (the reservations);
- ``observe`` of *n*: one compare-and-swap ``UPDATE`` of *n* rows (phase, next poll,
  lease cleared, new data) and one ``INSERT`` of *n* audit events (group commit);
- ``insert``: a new operation and its first audit event (``waitbound.start``).

Each is timed with ``synchronous_commit`` on (the server's setting) and off. The run
with it off is the work that occupies a server core (client and server on one
machine: minus the client's own CPU time, measured with ``time.process_time``); the
difference is the WAL flush, which the simulation counts as latency that does not
occupy a core (PostgreSQL flushes the commits waiting at the same moment together).
A straight line ``a + b * n`` is fitted to the medians (see :func:`fit`).
"""

from __future__ import annotations

import functools
import json
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks._common import PG_DSN, pg_schema
from benchmarks._fleet_model import DbCosts, Line

SIZES = (1, 4, 16, 64, 256)
"""Batch sizes timed (rows per transaction)."""

ROWS = 60_000
"""Operations in the scratch table: enough that every claim finds due rows."""

_DATA = json.dumps({"schema": 2, "pad": "x" * 2200}, separators=(",", ":"))
"""A record's JSON of the size waitbound writes (about 2.3 KB)."""

_EVENT = json.dumps({"pad": "y" * 300}, separators=(",", ":"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """One kind and size: medians in seconds of wall time (commit synchronous and
    not) and of the client's CPU time."""

    kind: str
    rows: int
    sync_s: float
    async_s: float
    client_cpu_s: float


def fit(points: list[tuple[int, float]]) -> Line:
    """A line through ``(rows, seconds)`` points: the per-row part is the least-squares
    slope over the batches of 16 rows or more, the fixed part the median of what the
    batches of fewer than 16 leave over (so a few noisy large batches cannot swing the
    fixed part, which is what small transactions cost). Both parts are at least 0.
    """
    large = [(float(x), y) for x, y in points if x >= 16] or [(float(x), y) for x, y in points]
    mean_x = statistics.fmean(x for x, _ in large)
    mean_y = statistics.fmean(y for _, y in large)
    spread = sum((x - mean_x) ** 2 for x, _ in large)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in large) / spread if spread else 0.0
    slope = max(slope, 0.0)
    small = [y - slope * x for x, y in points if x < 16] or [mean_y - slope * mean_x]
    return Line(fixed_s=max(statistics.median(small), 0.0), per_row_s=slope)


def costs(timings: list[Timing]) -> DbCosts:
    """The simulation's cost model from *timings* (see the module's docstring)."""

    def client(t: Timing) -> float:
        return t.client_cpu_s

    def line(kind: str, part: Callable[[Timing], float]) -> Line:
        return fit([(t.rows, part(t)) for t in timings if t.kind == kind])

    def server(t: Timing) -> float:
        return max(t.async_s - t.client_cpu_s, 0.0)

    insert = next(t for t in timings if t.kind == "insert")
    return DbCosts(
        claim=line("claim", server),
        observe=line("observe", server),
        insert=Line(fixed_s=server(insert), per_row_s=0.0),
        flush_s=statistics.median(max(t.sync_s - t.async_s, 0.0) for t in timings),
        client_claim=line("claim", client),
        client_observe=line("observe", client),
    )


def _timed(run: Callable[[], object]) -> tuple[float, float]:
    """The wall time and the client's CPU time of one call of *run*, in seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def _medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """The median wall time and the median CPU time of *samples*."""
    return statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples)


def calibrate(dsn: str = PG_DSN, *, repeat: int = 25, rounds: int = 3) -> list[Timing]:
    """Time every kind at every size of :data:`SIZES`: *rounds* rounds of *repeat* runs
    each (fewer for large sizes), the least of the rounds' medians kept (the machine is
    shared: the least disturbed round is the closest to the server's own cost).

    Raises:
        psycopg.OperationalError: the server at *dsn* is unreachable.
    """
    import psycopg
    from psycopg import sql

    with pg_schema(dsn) as schema, psycopg.connect(dsn) as conn:
        ops = sql.Identifier(schema, "operations")
        events = sql.Identifier(schema, "audit_events")
        base = datetime(2026, 1, 1, tzinfo=UTC)
        with conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(
                sql.SQL(
                    "INSERT INTO {} (operation_id, version, phase, next_poll_at,"
                    " created_at, data) VALUES (%s, 1, 'waiting', %s, %s, %s)"
                ).format(ops),
                [
                    (f"op-{i:06d}", base + timedelta(milliseconds=i), base, _DATA)
                    for i in range(ROWS)
                ],
            )
        conn.execute(sql.SQL("ANALYZE {}").format(ops))
        claim_sql = sql.SQL(
            "SELECT operation_id, version, data FROM {} WHERE phase = ANY(%s)"
            " AND next_poll_at <= %s AND (lease_expires_at IS NULL OR lease_expires_at <= %s)"
            " ORDER BY next_poll_at, operation_id LIMIT %s FOR UPDATE SKIP LOCKED"
        ).format(ops)
        reserve_sql = sql.SQL(
            "UPDATE {} AS o SET version = u.version + 1, lease_owner = 'w',"
            " lease_expires_at = %s, data = u.data FROM unnest(%s::text[], %s::int[],"
            " %s::json[]) AS u(id, version, data) WHERE o.operation_id = u.id"
            " AND o.version = u.version"
        ).format(ops)
        observe_sql = sql.SQL(
            "UPDATE {} AS o SET version = u.version + 1, lease_owner = NULL,"
            " lease_expires_at = NULL, next_poll_at = %s, data = u.data"
            " FROM unnest(%s::text[], %s::int[], %s::json[]) AS u(id, version, data)"
            " WHERE o.operation_id = u.id AND o.version = u.version"
        ).format(ops)
        events_sql = sql.SQL(
            "INSERT INTO {} (operation_id, seq, at, kind, summary, data, prev_hash, hash)"
            " SELECT id, seq, %s, 'poll', 'next request in 10s', %s::json, 'p', 'h'"
            " FROM unnest(%s::text[], %s::int[]) AS u(id, seq)"
        ).format(events)
        insert_sql = sql.SQL(
            "INSERT INTO {} (operation_id, version, phase, next_poll_at, created_at, data)"
            " VALUES (%s, 1, 'waiting', %s, %s, %s)"
        ).format(ops)
        seq = iter(range(10, 10**9))
        taken: list[list[tuple[str, int]]] = []
        consumed = [0]
        lease_until = base + timedelta(days=1)

        def claim(rows: int) -> None:
            with conn.transaction():
                # Twice the rows asked for are due: a fleet that keeps up has a small due
                # set (the query sorts all of it: ORDER BY next_poll_at, operation_id).
                consumed[0] += rows
                now = base + timedelta(milliseconds=consumed[0] + rows)
                found: list[tuple[str, int, Any]] = conn.execute(
                    claim_sql, (["waiting"], now, now, rows)
                ).fetchall()
                ids = [row[0] for row in found]
                versions = [row[1] for row in found]
                with conn.pipeline():
                    conn.execute(reserve_sql, (lease_until, ids, versions, [_DATA] * len(ids)))
                    number = next(seq)
                    conn.execute(events_sql, (base, _EVENT, ids, [number] * len(ids)))
            taken.append([(op, version + 1) for op, version in zip(ids, versions, strict=True)])

        def observe(taken: list[tuple[str, int]]) -> None:
            later = base + timedelta(days=30)  # observed rows leave the due set
            with conn.transaction(), conn.pipeline():
                conn.execute(
                    observe_sql,
                    (
                        later,
                        [op for op, _ in taken],
                        [version for _, version in taken],
                        [_DATA] * len(taken),
                    ),
                )
                number = next(seq)
                conn.execute(
                    events_sql, (base, _EVENT, [op for op, _ in taken], [number] * len(taken))
                )

        def insert() -> None:
            key = f"new-{uuid.uuid4().hex}"
            with conn.transaction(), conn.pipeline():
                conn.execute(insert_sql, (key, base, base, _DATA))
                conn.execute(events_sql, (base, _EVENT, [key], [1]))

        measured: dict[tuple[str, int, bool], tuple[float, float]] = {}

        def keep(key: tuple[str, int, bool], value: tuple[float, float]) -> None:
            if key not in measured or value[0] < measured[key][0]:
                measured[key] = value

        for synchronous in [True, False] * rounds:
            conn.execute(f"SET synchronous_commit = {'on' if synchronous else 'off'}")
            conn.commit()
            for rows in SIZES:
                conn.autocommit = True
                conn.execute(sql.SQL("VACUUM {}").format(ops))  # no dead rows before a size
                conn.autocommit = False
                claims: list[tuple[float, float]] = []
                observes: list[tuple[float, float]] = []
                for _ in range(1 + max(5, repeat * 16 // max(rows, 16))):
                    claims.append(_timed(functools.partial(claim, rows)))
                    observes.append(_timed(lambda: observe(taken.pop())))
                keep(("claim", rows, synchronous), _medians(claims[1:]))
                keep(("observe", rows, synchronous), _medians(observes[1:]))
            keep(("insert", 1, synchronous), _medians([_timed(insert) for _ in range(repeat)]))
    return [
        Timing(
            kind=kind,
            rows=rows,
            sync_s=sync_wall,
            async_s=measured[kind, rows, False][0],
            client_cpu_s=(sync_cpu + measured[kind, rows, False][1]) / 2,
        )
        for (kind, rows, synchronous), (sync_wall, sync_cpu) in measured.items()
        if synchronous
    ]
