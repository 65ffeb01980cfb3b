"""Store throughput: operation transitions per second, SQLite and PostgreSQL.

A transition is what one poll step persists, through the same Store calls and the
same pure controller as the driver's loop (``waitbound._driver._drive``):

1. ``store.get`` the record;
2. ``plan`` → a reservation: the request counted and the lease taken, saved by
   compare-and-swap with its ``reserved`` audit event, in one transaction;
3. ``observe`` the answer → saved by compare-and-swap with its ``observed`` and
   ``scheduled`` audit events, in one transaction.

Only the HTTP request itself is left out: the answer is a canned
``200 {"status": "running"}`` observation. Each worker is a process with its own
store and its own operations (distinct operations, one database): SQLite in one
file, PostgreSQL in one scratch schema, dropped afterwards.

Usage: ``python -m benchmarks.store_throughput [--quick] [--repeat N] [--profile STORE]``.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path

from benchmarks._common import (
    PG_DSN,
    PROFILE,
    SPAWN,
    StoreSpec,
    machine,
    pg_schema,
    print_machine,
    print_table,
    top_of_profile,
    verdict,
)
from waitbound import Observation, Operation, Policy, SystemClock, start
from waitbound._controller import Send, observe, plan
from waitbound._driver import new_owner
from waitbound.stores import Store

POLICY = Policy(
    base_delay_s=0.001,
    max_delay_s=0.001,
    min_delay_s=0.001,
    deadline_s=86_400,
    max_requests=100_000,
)
"""Due again a millisecond after each answer, with budgets no run reaches."""

TARGETS = {"sqlite": 5_000.0, "postgres": 2_000.0}
"""Transitions per second (issue 4): SQLite; PostgreSQL with 4 workers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """How big a run is: operations per worker, seconds measured, seconds warming up."""

    operations: int
    measure_s: float
    warmup_s: float


FULL = Sizes(operations=200, measure_s=10.0, warmup_s=1.0)
QUICK = Sizes(operations=20, measure_s=1.0, warmup_s=0.2)


def create_operations(store: Store, worker: int, count: int) -> list[str]:
    """Record *count* operations for *worker* (nothing is sent)."""
    return [
        start(
            Operation(
                status_url=f"http://127.0.0.1:9/status?w={worker}&i={i}",
                profile=PROFILE,
                policy=POLICY,
            ),
            operation_id=f"bench-w{worker}-{i}",
            store=store,
        ).operation_id
        for i in range(count)
    ]


def transition(store: Store, operation_id: str, owner: str, rng: random.Random) -> None:
    """One poll step's persistence: read, reserve (persisted), observe (persisted)."""
    clock = SystemClock()
    record = store.get(operation_id)
    assert record is not None
    decision = plan(record, clock.now(), owner=owner)
    assert isinstance(decision, Send), f"{operation_id} not due: {type(decision).__name__}"
    reserved = store.save(decision.transition.record, decision.transition.events)
    answer = Observation(
        kind="status", at=clock.now(), http_status=200, body={"status": "running"}, elapsed_s=0.001
    )
    after = observe(reserved, answer, rng=rng)
    store.save(after.record, after.events)


def _run_worker(
    spec: StoreSpec, worker: int, sizes: Sizes, start_at: float, out: Queue[int]
) -> None:
    """Warm up until *start_at* (wall clock), then count transitions for ``measure_s``."""
    store = spec.open()
    ids = create_operations(store, worker, sizes.operations)
    owner, rng = new_owner(), random.Random(worker)
    done = 0
    end_at = start_at + sizes.measure_s
    for operation_id in itertools.cycle(ids):
        now = time.time()
        if now >= end_at:
            break
        transition(store, operation_id, owner, rng)
        done += now >= start_at
    store.close()
    out.put(done)


def measure(spec: StoreSpec, workers: int, sizes: Sizes) -> float:
    """Transitions per second of *workers* processes on *spec*, together."""
    out: Queue[int] = SPAWN.Queue()
    # Spawning, importing and creating the operations take about a second per process.
    start_at = time.time() + 2.0 + 0.5 * workers + sizes.warmup_s
    children = [
        SPAWN.Process(target=_run_worker, args=(spec, w, sizes, start_at, out))
        for w in range(workers)
    ]
    for child in children:
        child.start()
    counts = [out.get(timeout=300) for _ in children]
    for child in children:
        child.join(10)
    if time.time() < start_at + sizes.measure_s:
        raise RuntimeError("a worker finished before the measurement ended")
    return sum(counts) / sizes.measure_s


@contextmanager
def store_spec(kind: str, workers: int) -> Iterator[StoreSpec]:
    """A fresh, empty store of *kind* (``sqlite`` or ``postgres``)."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="wbbench-") as folder:
            yield StoreSpec(path=str(Path(folder) / "bench.db"))
    else:
        with pg_schema(PG_DSN) as schema:
            yield StoreSpec(dsn=PG_DSN, schema=schema, pool_size=1)


def profile(kind: str, sizes: Sizes) -> None:
    """Run one worker in this process under cProfile and print where the time goes."""
    with store_spec(kind, 1) as spec, tempfile.TemporaryDirectory() as folder:
        store = spec.open()
        ids = create_operations(store, 0, sizes.operations)
        owner, rng = new_owner(), random.Random(0)
        profiler = cProfile.Profile()
        count, started = 0, time.perf_counter()
        profiler.enable()
        for operation_id in itertools.cycle(ids):
            transition(store, operation_id, owner, rng)
            count += 1
            if time.perf_counter() - started > sizes.measure_s:
                break
        profiler.disable()
        store.close()
        dump = Path(folder) / "profile"
        profiler.dump_stats(dump)
        print(f"{kind}: {count} transitions in {sizes.measure_s:g} s under cProfile")
        print(top_of_profile(dump, 30))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a smoke check")
    parser.add_argument("--repeat", type=int, default=None, help="runs per row (median)")
    parser.add_argument("--profile", choices=("sqlite", "postgres"), help="profile one worker")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.profile:
        profile(args.profile, sizes)
        return
    repeat = args.repeat or (1 if args.quick else 3)
    info = machine()
    print_machine(info)
    rows = []
    for kind, workers in (("sqlite", 1), ("sqlite", 4), ("postgres", 1), ("postgres", 4)):
        if kind == "postgres" and info["postgresql"] == "unreachable":
            rows.append((kind, workers, "not run: PostgreSQL unreachable", "-", "-", "-"))
            continue
        rates = []
        for _ in range(repeat):
            with store_spec(kind, workers) as spec:
                rates.append(measure(spec, workers, sizes))
        rate = statistics.median(rates)
        target = TARGETS[kind] if kind == "sqlite" or workers == 4 else None
        rows.append(
            (
                kind,
                workers,
                f"{rate:,.0f}",
                " / ".join(f"{r:,.0f}" for r in rates),
                f">= {target:,.0f}" if target else "-",
                verdict(rate, target) if target else "-",
            )
        )
    print_table(
        f"Store throughput: transitions/s (median of {repeat}; {sizes.measure_s:g} s each)",
        ("store", "workers", "transitions/s", "runs", "target", "verdict"),
        rows,
    )


if __name__ == "__main__":
    main()
