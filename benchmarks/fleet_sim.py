"""Fleet simulation: 1,000,000 operations, 16 workers, one PostgreSQL-like database.

A discrete-event simulation on a virtual clock (no sockets, no threads; the model is
``benchmarks/_fleet_model.py``): operations arrive at a steady rate, each is polled on
waitbound's real schedule (``waitbound._profile._schedule.backoff_delay_s`` with the real
``Policy`` defaults, the deadline set to 1 h) until its job ends; workers claim and
reserve many due operations in one transaction, send the requests, and group-commit
the observations; the database runs at most ``cores`` transactions at once, each
costing a fixed time plus a time per row, calibrated against the real PostgreSQL
(``benchmarks/_pg_costs.py``, ``--calibrate``).

Printed: the cost model; the headline fleet (``--operations`` at ``--rate`` per
second, ``--workers`` workers) on an 8-core and a 32-core database; the eager claim
loop (pause 0) beside the paced one (``--sweep-operations``); and a sweep over
workers (4/8/16/32) and batch sizes (1/16/64) that shows which limit each fleet meets
first: the database (cores busy), the workers' CPU, or their slots (requests in
flight, bound by the provider's latency); and three times the load with 72 workers,
batch 1 against batch 64, where the database itself saturates. Figures are over the
second half of the arrivals (the steady part); outcomes and requests per job over the
whole run.

Usage: ``python -m benchmarks.fleet_sim [--quick] [--operations N] [--workers N]
[--seed N] [--rate PER_S] [--calibrate] [--no-sweep]``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace

from benchmarks._common import PG_DSN, machine, print_machine, print_table
from benchmarks._fleet_model import DbCosts, Fleet, Line, Result, simulate

CALIBRATED = DbCosts(
    claim=Line(fixed_s=0.000_455, per_row_s=0.000_061_4),
    observe=Line(fixed_s=0.000_179, per_row_s=0.000_056_0),
    insert=Line(fixed_s=0.000_079, per_row_s=0.0),
    flush_s=0.000_276,
    client_claim=Line(fixed_s=0.000_482, per_row_s=0.000_034_0),
    client_observe=Line(fixed_s=0.000_310, per_row_s=0.000_023_9),
)
"""The cost model measured by ``--calibrate`` on the machine of docs/benchmarks.md: the
median of three calibrations, each constant on its own (the machine was shared)."""

POLL_CPU_S = 0.002
"""The worker's CPU per poll outside the store: the issue's target for the HTTP path
and the controller (today about 2-3 ms in the client alone, docs/benchmarks.md)."""

CORES = (8, 32)
SWEEP_WORKERS = (4, 8, 16, 32)
SWEEP_BATCHES = (1, 16, 64)
SATURATION_WORKERS = 72
"""Workers for the saturation runs: enough CPU for three times the headline's load."""
SATURATED_LAG_S = 1.0
"""A fleet whose p99 lag passes this (seconds) does not keep up."""


def limit_of(result: Result) -> str:
    """Which resource the fleet leans on most, and whether it keeps up."""
    busiest = {
        "database": result.db_utilisation,
        "worker CPU": max(result.worker_utilisation),
        "worker slots": result.slot_utilisation,
    }
    name = max(busiest, key=lambda key: busiest[key])
    keeps_up = result.lag_p99_s <= SATURATED_LAG_S
    return f"{'keeps up' if keeps_up else 'SATURATED'}: {name} {busiest[name]:.0%}"


def _ms(seconds: float) -> str:
    if seconds < 0.01:
        return f"{seconds * 1000:.2f} ms"
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.0f} s"


def capacities(result: Result) -> tuple[float, float]:
    """Polls per second the database would carry with every core busy, and one worker
    with its core busy, at this run's cost per poll (a straight extrapolation: fuller
    batches under more load make it conservative)."""
    cpu = statistics.fmean(result.worker_utilisation)
    database = result.polls_per_s / result.db_utilisation if result.db_utilisation else math.inf
    worker = result.polls_per_s / len(result.worker_utilisation) / cpu if cpu else math.inf
    return database, worker


def row(label: Sequence[object], result: Result) -> list[object]:
    """One table row of *result*."""
    cpu = result.worker_utilisation
    database, worker = capacities(result)
    return [
        *label,
        f"{result.claims_per_s:,.0f}",
        f"{result.claim_txns_per_s:,.0f}",
        f"{result.txns_per_s:,.0f}",
        f"{result.rows_per_s:,.0f}",
        f"{result.db_utilisation:.0%}",
        f"{_ms(result.db_wait_p99_s)}",
        f"{statistics.fmean(cpu):.0%} / {max(cpu):.0%}",
        f"{result.slot_utilisation:.0%}",
        f"{_ms(result.lag_p50_s)} / {_ms(result.lag_p95_s)} / {_ms(result.lag_p99_s)}",
        f"{result.due_backlog_at_end:,}",
        f"{database:,.0f}",
        f"{worker:,.0f}",
        limit_of(result),
    ]


HEADERS = [
    "claims/s",
    "claim txns/s",
    "txns/s",
    "rows/s",
    "db busy",
    "db wait p99",
    "worker CPU mean / max",
    "slots",
    "lag p50 / p95 / p99",
    "due backlog",
    "db carries (polls/s)",
    "one worker carries (polls/s)",
    "limit",
]


def print_costs(costs: DbCosts) -> None:
    """Print the cost model."""
    print_table(
        "Database cost model (seconds; a core is held for fixed + per row x rows)",
        ["kind", "server fixed", "server per row", "client CPU fixed", "client CPU per row"],
        [
            ["claim", *_line(costs.claim), *_line(costs.client_claim)],
            ["observe", *_line(costs.observe), *_line(costs.client_observe)],
            ["insert", *_line(costs.insert), "-", "-"],
        ],
    )
    print(f"\nWAL flush per commit (latency, no core held): {costs.flush_s * 1000:.2f} ms")


def _line(line: Line) -> list[str]:
    return [f"{line.fixed_s * 1000:.3f} ms", f"{line.per_row_s * 1000:.3f} ms"]


def _run(fleet: Fleet) -> Result:
    started = time.process_time()
    result = simulate(fleet)
    print(
        f"  {fleet.operations:,} ops, {fleet.workers} workers, batch {fleet.batch},"
        f" {fleet.db_cores} cores, pause {fleet.claim_pause_s * 1000:g} ms:"
        f" {time.process_time() - started:.1f} s CPU, {result.events:,} events,"
        f" ended at {result.end_s:,.0f} s virtual",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 operations, a small sweep")
    parser.add_argument("--operations", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--rate", type=float, default=1_000.0, help="arrivals per second")
    parser.add_argument("--concurrency", type=int, default=64, help="slots per worker")
    parser.add_argument("--batch", type=int, default=64, help="rows per transaction at most")
    parser.add_argument("--claim-pause-ms", type=float, default=50.0)
    parser.add_argument("--poll-cpu-ms", type=float, default=POLL_CPU_S * 1000)
    parser.add_argument("--sweep-operations", type=int, default=200_000)
    parser.add_argument("--calibrate", action="store_true", help="measure the costs on PostgreSQL")
    parser.add_argument("--no-sweep", action="store_true")
    options = parser.parse_args()
    for name in ("operations", "workers", "concurrency", "batch", "sweep_operations"):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not options.rate > 0 or options.claim_pause_ms < 0 or not options.poll_cpu_ms >= 0:
        parser.error("--rate must be > 0, --claim-pause-ms and --poll-cpu-ms >= 0")
    operations = 20_000 if options.quick else options.operations
    sweep_operations = 20_000 if options.quick else options.sweep_operations
    print_machine(machine(pg_dsn=PG_DSN))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    costs = CALIBRATED
    if options.calibrate:
        from benchmarks._pg_costs import calibrate
        from benchmarks._pg_costs import costs as fitted

        timings = calibrate(PG_DSN, repeat=5 if options.quick else 25)
        print_table(
            "Calibration (medians, the least of 3 rounds)",
            ["kind", "rows", "commit synchronous", "commit asynchronous", "client CPU"],
            [[t.kind, t.rows, _ms(t.sync_s), _ms(t.async_s), _ms(t.client_cpu_s)] for t in timings],
        )
        costs = fitted(timings)
    print_costs(costs)
    base = Fleet(
        operations=operations,
        rate_per_s=options.rate,
        workers=options.workers,
        concurrency=options.concurrency,
        batch=options.batch,
        db_cores=CORES[0],
        costs=costs,
        poll_cpu_s=options.poll_cpu_ms / 1000,
        claim_pause_s=options.claim_pause_ms / 1000,
        seed=options.seed,
    )
    print(
        f"\nFleet: {operations:,} operations arriving at {options.rate:,.0f}/s"
        f" (over {operations / options.rate:,.0f} s), jobs log-normal (median 60 s, p95"
        f" 600 s), provider latency log-normal (median 50 ms, p95 100 ms), worker CPU"
        f" {options.poll_cpu_ms:g} ms per poll, {options.concurrency} slots per worker,"
        f" policy: base {base.policy.base_delay_s:g} s, cap {base.policy.max_delay_s:g} s,"
        f" deadline {base.policy.deadline_s:g} s, {base.policy.max_requests} requests"
    )
    results = {cores: _run(replace(base, db_cores=cores)) for cores in CORES}
    print_table(
        f"{operations:,} operations, {options.workers} workers, batch {options.batch},"
        f" claim pause {options.claim_pause_ms:g} ms",
        ["db cores", *HEADERS],
        [row([cores], result) for cores, result in results.items()],
    )
    for cores, result in results.items():
        print(
            f"\n{cores} cores: outcomes {result.outcomes}, {result.requests_per_job:.2f}"
            f" requests per job, detection lag mean {result.detection_lag_mean_s:.1f} s,"
            f" in flight at the window's end {result.in_flight_at_end:,}"
        )
    if options.no_sweep:
        return
    loops = [
        row([pause], _run(replace(base, operations=sweep_operations, claim_pause_s=pause / 1000)))
        for pause in sorted({options.claim_pause_ms, 0.0}, reverse=True)
    ]
    print_table(
        f"The claim loop: {sweep_operations:,} operations, {options.workers} workers,"
        f" batch {options.batch}, {CORES[0]} cores",
        ["claim pause (ms)", *HEADERS],
        loops,
    )
    workers = SWEEP_WORKERS[:2] if options.quick else SWEEP_WORKERS
    sweep: list[list[object]] = []
    for cores in CORES:
        for count in workers:
            for size in SWEEP_BATCHES:
                fleet = replace(
                    base, operations=sweep_operations, workers=count, batch=size, db_cores=cores
                )
                sweep.append(row([cores, count, size], _run(fleet)))
    print_table(
        f"Sweep: {sweep_operations:,} operations at {options.rate:,.0f}/s,"
        f" claim pause {options.claim_pause_ms:g} ms",
        ["db cores", "workers", "batch", *HEADERS],
        sweep,
    )
    print_table(*saturation(base, sweep_operations))


def saturation(base: Fleet, operations: int) -> tuple[str, list[str], list[list[object]]]:
    """Three times the load on an 8-core database, with workers enough for it: batch 1
    against the largest batch (the same window as the sweep's)."""
    fleet = replace(
        base,
        operations=3 * operations,
        rate_per_s=3 * base.rate_per_s,
        workers=SATURATION_WORKERS,
        db_cores=CORES[0],
    )
    rows = [row([size], _run(replace(fleet, batch=size))) for size in (1, max(SWEEP_BATCHES))]
    title = (
        f"Where the database saturates: {fleet.operations:,} operations at"
        f" {fleet.rate_per_s:,.0f}/s, {fleet.workers} workers, {fleet.db_cores} cores"
    )
    return title, ["batch", *HEADERS], rows


if __name__ == "__main__":
    main()
