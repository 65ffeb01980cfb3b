"""Scale: 100,000 operations in flight in one worker, 500 polls/s, against the simulator.

Setup: 100,000 operations are recorded in one SQLite store with ``waitbound.start``,
operation ``i`` with a clock reading ``T0 + i / 500`` s, so the first polls fall due
at a steady 500 per second from ``T0`` on (a fleet in steady state, not a start-up
burst). The first poll answers ``running`` and the next is scheduled 2x the measured
span or later, so every request in the window is a first poll whose due time is known.
One worker (``waitbound.work`` in a child process) drives the store against the
simulator (another child process) over loopback HTTP.

Measured: the worker's resident memory (peak, ``VmHWM``), and for every operation
due in the window the lag from its ``next_poll_at`` to its request's arrival at the
simulator (millisecond resolution); an operation never polled counts with the lag
it had reached when the worker stopped. Targets: RSS <= 150 MB; p99 lag <= 250 ms
while sustaining 500 polls/s.

With ``--store postgres`` the operations are recorded in a scratch PostgreSQL schema
instead (``$WAITBOUND_BENCH_PG_DSN``). ``--commit-pause MS`` sets the worker's commit
pause (``WorkerSettings.commit_pause_s``; default: the shipped default); the report
gives the mean answers per group commit. ``--operations N`` and ``--measure S`` shrink
a run (a rate sweep: ``--rate`` with fewer operations).

Usage: ``python -m benchmarks.scale [--quick] [--profile] [--rate POLLS_PER_S]
[--store sqlite|postgres] [--commit-pause MS] [--operations N] [--measure S]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from benchmarks._common import (
    PG_DSN,
    PROFILE,
    RUNNING,
    StoreSpec,
    WorkerProcess,
    arrival,
    machine,
    percentile,
    pg_schema,
    print_machine,
    print_table,
    simulator,
    top_of_profile,
    verdict,
)
from waitbound import Operation, Policy, WorkerSettings, start
from waitbound.stores import Store

RSS_TARGET_MB = 150.0
LAG_P99_TARGET_S = 0.250
SETTINGS = WorkerSettings(
    concurrency=32, per_origin_concurrency=32, per_origin_rate=100_000, per_origin_burst=1_000
)
"""One worker. Every simulated job shares one origin (the simulator), so the per-origin
politeness limits are lifted: this measures the worker, not its rate limiter."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """Operations in flight, polls per second due, seconds measured and warmed up."""

    operations: int
    rate: float
    measure_s: float
    warmup_s: float


FULL = Sizes(operations=100_000, rate=500.0, measure_s=120.0, warmup_s=5.0)
QUICK = Sizes(operations=3_000, rate=500.0, measure_s=5.0, warmup_s=1.0)


class _At:
    """A clock that reads one instant: when an operation is recorded as created."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return time.monotonic()


def record_fleet(store: Store, base_url: str, sizes: Sizes, t0: datetime) -> None:
    """Record the operations; operation ``i`` is first due at ``t0 + i / rate``."""
    span_s = sizes.operations / sizes.rate
    later_s = 2 * span_s + 10  # no second poll before every first poll is done
    policy = Policy(base_delay_s=later_s, max_delay_s=later_s, deadline_s=later_s + 3_600)
    for i in range(sizes.operations):
        operation = Operation(status_url=f"{base_url}/status?i={i}", profile=PROFILE, policy=policy)
        due = t0 + timedelta(seconds=i / sizes.rate)
        start(operation, operation_id=f"scale-{i:06d}", store=store, clock=_At(due))


@contextmanager
def scratch_store(kind: str, folder: Path, name: str) -> Iterator[StoreSpec]:
    """A new empty store: a SQLite file in *folder*, or a scratch PostgreSQL schema."""
    if kind == "sqlite":
        yield StoreSpec(path=str(folder / f"{name}.db"))
        return
    with pg_schema() as schema:
        yield StoreSpec(dsn=PG_DSN, schema=schema, pool_size=4)


def creation_s(kind: str, folder: Path, base_url: str, count: int) -> float:
    """Seconds to record *count* operations, measured on a throwaway store."""
    with scratch_store(kind, folder, "calibrate") as spec:
        store = spec.open()
        sizes = Sizes(operations=count, rate=1.0, measure_s=0, warmup_s=0)
        began = time.perf_counter()
        record_fleet(store, base_url, sizes, datetime.now(UTC))
        store.close()
        return time.perf_counter() - began


def run(
    sizes: Sizes, profile_path: Path | None, *, kind: str = "sqlite", settings: WorkerSettings
) -> list[tuple[object, ...]]:
    """One run; returns the result rows."""
    with (
        tempfile.TemporaryDirectory(prefix="wbbench-") as folder,
        simulator({"id": "scale", "endpoints": {"status": [RUNNING]}}) as sim,
        scratch_store(kind, Path(folder), "scale") as spec,
    ):
        per_op_s = creation_s(kind, Path(folder), sim.base_url, 300) / 300
        lead_s = sizes.operations * per_op_s * 1.3 + 5
        t0 = datetime.now(UTC) + timedelta(seconds=lead_s)
        store = spec.open()
        began = time.perf_counter()
        record_fleet(store, sim.base_url, sizes, t0)
        created_s = time.perf_counter() - began
        store.close()
        if datetime.now(UTC) >= t0:  # the machine slowed down while recording
            raise SystemExit(
                f"recording took {created_s:.0f} s, past its {lead_s:.0f} s lead: the first "
                "polls fell due before the worker started; run again on a quieter machine"
            )
        span_s = min(sizes.operations / sizes.rate, sizes.measure_s + sizes.warmup_s)
        worker = WorkerProcess(
            spec,
            settings,
            run_s=(t0 - datetime.now(UTC)).total_seconds() + span_s + 1,
            profile_path=profile_path,
            go_at_once=False,
        )
        worker.wait_ready()
        worker_at = datetime.now(UTC)
        worker.go()
        report = worker.report(timeout_s=lead_s + span_s + 120)
        stopped_at = report.stopped_at
        log = sim.log()
        db_mib = Path(spec.path).stat().st_size / 1024**2 if spec.path else float("nan")
    window_from = max(t0, worker_at) + timedelta(seconds=sizes.warmup_s)
    window_to = t0 + timedelta(seconds=span_s)
    requested = {int(parse_qs(urlsplit(e["path"]).query)["i"][0]): arrival(e) for e in log}
    lags, never = [], 0
    first = max(0, int((window_from - t0).total_seconds() * sizes.rate))
    last = min(sizes.operations, int((window_to - t0).total_seconds() * sizes.rate))
    for i in range(first, last):
        due = t0 + timedelta(seconds=i / sizes.rate)
        polled = requested.get(i)
        never += polled is None
        lags.append(((polled or stopped_at) - due).total_seconds())
    window_s = (window_to - window_from).total_seconds()
    arrived = sum(1 for at in requested.values() if window_from <= at < window_to)
    p50, p99 = percentile(lags, 50), percentile(lags, 99)
    rss_mb = report.peak_rss_mib * 2**20 / 1e6
    per_commit = report.committed / report.commits if report.commits else 0.0
    print(
        f"{sizes.operations:,} operations recorded in {created_s:.0f} s ({kind}"
        f"{f', file {db_mib:.0f} MiB' if spec.path else ''}); worker ran "
        f"{report.elapsed_s:.0f} s, {report.steps:,} steps, commit pause "
        f"{settings.commit_pause_s * 1000:g} ms, {report.commits:,} group commits of "
        f"{per_commit:.2f} answers on average; window {window_s:.0f} s, {len(lags):,} polls "
        f"due in it, {never} never polled"
    )
    return [
        ("worker resident memory, peak (MB)", f"{rss_mb:.0f}", f"<= {RSS_TARGET_MB:.0f} MB",
         verdict(rss_mb, RSS_TARGET_MB, at_most=True)),
        ("polls/s in the window", f"{arrived / window_s:.0f}", f"{sizes.rate:.0f} due/s",
         verdict(arrived / window_s, 0.98 * sizes.rate)),
        ("lag p50 (ms)", f"{p50 * 1000:.0f}", "-", "-"),
        ("lag p95 (ms)", f"{percentile(lags, 95) * 1000:.0f}", "-", "-"),
        ("lag p99 (ms)", f"{p99 * 1000:.0f}", "<= 250 ms",
         verdict(p99, LAG_P99_TARGET_S, at_most=True)),
        ("lag max (ms)", f"{max(lags) * 1000:.0f}", "-", "-"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a smoke check")
    parser.add_argument("--profile", action="store_true", help="cProfile the worker")
    parser.add_argument("--rate", type=float, help="polls due per second (default 500)")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--commit-pause", type=float, help="the worker's commit pause, in ms")
    parser.add_argument("--operations", type=int, help="operations recorded (default 100,000)")
    parser.add_argument("--measure", type=float, help="seconds measured (default 120)")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.rate:
        sizes = replace(sizes, rate=args.rate)
    if args.operations:
        sizes = replace(sizes, operations=args.operations)
    if args.measure:
        sizes = replace(sizes, measure_s=args.measure)
    settings = SETTINGS
    if args.commit_pause is not None:
        settings = replace(settings, commit_pause_s=args.commit_pause / 1000)
    print_machine(machine())
    with tempfile.TemporaryDirectory() as folder:
        profile_path = Path(folder) / "worker.prof" if args.profile else None
        rows = run(sizes, profile_path, kind=args.store, settings=settings)
        print_table(
            f"Scale: {sizes.operations:,} operations in flight ({args.store}), one worker, "
            f"{sizes.rate:.0f} polls/s due, commit pause {settings.commit_pause_s * 1000:g} ms",
            ("figure", "measured", "target", "verdict"),
            rows,
        )
        if profile_path is not None:
            print(top_of_profile(profile_path, 30))
            print(top_of_profile(profile_path, 30, sort="cumulative"))


if __name__ == "__main__":
    main()
