"""Store throughput: operation transitions per second, SQLite and PostgreSQL.

A transition is what one poll step persists, with the same pure controller as the
drivers. Two paths are measured side by side:

*per operation* (``waitbound wait``'s loop, ``waitbound._engine._driver._drive``):

1. ``store.get`` the record;
2. ``plan`` → a reservation: the request counted and the lease taken, saved by
   compare-and-swap with its ``reserved`` audit event, in one transaction;
3. ``observe`` the answer → saved by compare-and-swap with its ``observed`` and
   ``scheduled`` audit events, in one transaction.

*batched* (the worker, ``waitbound._engine._worker``), N operations a round:

1. ``store.reserve_due`` of N: one transaction selects the due operations, ``plan``
   reserves each (lease and counter, ``reserved`` event), and writes them all;
2. ``observe`` each answer → one ``store.save_many`` of the N answers (the group
   commit), one transaction, each a compare-and-swap with its two events.

*batched, answers 1 a commit*: the same rounds, but each answer is its own
``save_many`` of one, as the worker's group commit wrote them under steady load before
its commit pause (answers arrive one by one, and a commit returns before the next):
the difference between the two batched rows is what the commit pause buys the store.

Only the HTTP request itself is left out: the answer is a canned
``200 {"status": "running"}`` observation. Each worker is a process with its own
store (one database: SQLite in one file, PostgreSQL in one scratch schema, dropped
afterwards); per operation, each drives its own operations; batched, the workers
reserve from all of them, as real workers do.

Usage: ``python -m benchmarks.store_throughput [--quick] [--repeat N]
[--profile STORE] [--batch N] [--only sqlite|postgres]``.
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
from waitbound import Observation, Operation, Policy, Record, SystemClock, WorkerSettings, start
from waitbound._engine._lease import new_owner
from waitbound._model._audit import AuditEvent
from waitbound._rules._controller import Send, observe, plan
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

BATCHES = ((0, 0), (WorkerSettings().concurrency, 0), (64, 0), (64, 1))
"""(operations a round, answers a commit): 0 operations is the per-operation path; then
the worker's default concurrency and 64, every answer of a round in one commit (0);
then 64 a round with each answer its own commit (1: no commit pause)."""

LEASE_S = WorkerSettings().lease_s


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


def batch_round(
    store: Store, owner: str, rng: random.Random, size: int, per_commit: int = 0
) -> int:
    """One round of the worker's path: reserve up to *size* due operations in one
    transaction, then persist their answers with one ``save_many`` (*per_commit* > 0:
    one ``save_many`` per that many answers); return how many."""
    clock = SystemClock()
    now = clock.now()

    def reserve(record: Record) -> tuple[Record, tuple[AuditEvent, ...]]:
        decision = plan(record, now, owner=owner, lease_s=LEASE_S)
        assert isinstance(decision, Send), f"{record.operation_id}: {type(decision).__name__}"
        return decision.transition.record, decision.transition.events

    reserved = store.reserve_due(owner=owner, now=now, limit=size, plan=reserve)
    at = clock.now()
    answers = [
        observe(
            record,
            Observation(
                kind="status", at=at, http_status=200, body={"status": "running"}, elapsed_s=0.001
            ),
            rng=rng,
        )
        for record in reserved
    ]
    items = [(a.record, a.events) for a in answers]
    step = per_commit or max(1, len(items))
    for first in range(0, len(items), step):
        written = store.save_many(items[first : first + step])
        assert all(isinstance(w, Record) for w in written), "an answer of ours conflicted"
    return len(reserved)


def _run_worker(  # noqa: PLR0917 - a child process's arguments
    spec: StoreSpec,
    worker: int,
    sizes: Sizes,
    batch: int,
    go: Queue[float],
    out: Queue[int],
    per_commit: int = 0,
) -> None:
    """Create the operations, say so (``out``), then take the start time from *go*:
    warm up until it (wall clock), then count transitions for ``measure_s``."""
    store = spec.open()
    ids = create_operations(store, worker, sizes.operations)
    owner, rng = new_owner(), random.Random(worker)
    out.put(-1)
    start_at = go.get(timeout=600)
    done = 0
    end_at = start_at + sizes.measure_s
    for operation_id in itertools.cycle(ids):
        now = time.time()
        if now >= end_at:
            break
        if batch:
            count = batch_round(store, owner, rng, batch, per_commit)
        else:
            transition(store, operation_id, owner, rng)
            count = 1
        done += count if now >= start_at else 0
    store.close()
    out.put(done)


def measure(
    spec: StoreSpec, workers: int, sizes: Sizes, batch: int = 0, per_commit: int = 0
) -> float:
    """Transitions per second of *workers* processes on *spec*, together (*batch*
    operations a round; 0: one at a time, the per-operation path; *per_commit*: answers
    a commit, 0 for all of a round)."""
    out: Queue[int] = SPAWN.Queue()
    go: Queue[float] = SPAWN.Queue()
    children = [
        SPAWN.Process(target=_run_worker, args=(spec, w, sizes, batch, go, out, per_commit))
        for w in range(workers)
    ]
    for child in children:
        child.start()
    # Spawning, importing and creating the operations take a second or more per process
    # (much more on a loaded machine): every worker starts the clock together once all
    # are ready.
    for _ in children:
        out.get(timeout=600)
    start_at = time.time() + sizes.warmup_s
    for _ in children:
        go.put(start_at)
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


def profile(kind: str, sizes: Sizes, batch: int = 0) -> None:
    """Run one worker in this process under cProfile and print where the time goes."""
    with store_spec(kind, 1) as spec, tempfile.TemporaryDirectory() as folder:
        store = spec.open()
        ids = create_operations(store, 0, sizes.operations)
        owner, rng = new_owner(), random.Random(0)
        profiler = cProfile.Profile()
        count, started = 0, time.perf_counter()
        profiler.enable()
        for operation_id in itertools.cycle(ids):
            if batch:
                count += batch_round(store, owner, rng, batch)
            else:
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
    parser.add_argument(
        "--batch", type=int, default=0, help="with --profile: the worker's path, N a round"
    )
    parser.add_argument("--only", choices=("sqlite", "postgres"), help="one store's rows only")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.profile:
        profile(args.profile, sizes, args.batch)
        return
    repeat = args.repeat or (1 if args.quick else 3)
    info = machine()
    print_machine(info)
    rows = []
    for (kind, workers), (batch, per_commit) in itertools.product(
        (("sqlite", 1), ("postgres", 1), ("postgres", 4)), BATCHES
    ):
        if args.only and kind != args.only:
            continue
        path = f"batched, {batch} a round" if batch else "per operation"
        if per_commit:
            path += f", answers {per_commit} a commit"
        if kind == "postgres" and info["postgresql"] == "unreachable":
            rows.append((kind, workers, path, "not run: PostgreSQL unreachable", "-", "-", "-"))
            continue
        rates = []
        for _ in range(repeat):
            with store_spec(kind, workers) as spec:
                rates.append(measure(spec, workers, sizes, batch, per_commit))
        rate = statistics.median(rates)
        headline = batch and not per_commit and (kind == "sqlite" or workers == 4)
        target = TARGETS[kind] if headline else None
        rows.append(
            (
                kind,
                workers,
                path,
                f"{rate:,.0f}",
                " / ".join(f"{r:,.0f}" for r in rates),
                f">= {target:,.0f}" if target else "-",
                verdict(rate, target) if target else "-",
            )
        )
    print_table(
        f"Store throughput: transitions/s (median of {repeat}; {sizes.measure_s:g} s each)",
        ("store", "workers", "path", "transitions/s", "runs", "target", "verdict"),
        rows,
    )


if __name__ == "__main__":
    main()
