"""Poll overhead: durable poll cycles through ``waitbound.wait`` against a bare httpx loop.

Setup: ONE simulator in its own process serves a job that answers ``running`` for ever.
In the same run, alternating, each repeated ``--runs`` times:

- **bare**: a plain ``httpx.Client`` (kept alive, default settings) GETs the status URL
  *N* times, reading each answer;
- **durable (SQLite)** and **durable (memory)**: ``waitbound.wait`` on that status URL
  with a policy of ``max_requests=N`` and tiny delays (``base_delay_s`` and
  ``min_delay_s`` 1 µs) and an injected ``sleep`` that returns at once, so the
  operation makes *N* status requests and ends ``escalated`` /
  ``request_budget_exhausted``: every cycle is a full durable step (the reservation
  persisted before the request, the observation and its audit events after), not a
  wait. ``client=None``: the process's shared client, as a caller who passes none gets.

Measured: cycles (requests) per second of each, their medians over the runs, and the
ratio durable ÷ bare of the medians (target ≥ 0.8); this process's CPU per cycle (all
its threads; the simulator's process is not counted); then a cProfile of one durable
(SQLite) run, its heaviest functions (the request itself runs in a helper thread, which
cProfile does not see: it shows as the caller's wait on a lock).

``--otel-sdk`` installs the OpenTelemetry SDK first (a tracer provider exporting every
span to an in-memory exporter through a simple processor, a meter provider with an
in-memory reader): the cost of the instrumentation when it records (``docs/benchmarks.md``).
Without it, no SDK is installed and every hook is the API's no-op.

Usage: ``python -m benchmarks.poll_overhead [--quick] [--polls N] [--runs R] [--otel-sdk]``.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from benchmarks._common import (
    PROFILE,
    RUNNING,
    machine,
    print_machine,
    print_table,
    simulator,
    top_of_profile,
    verdict,
)
from waitbound import (
    MemoryStore,
    Operation,
    OutcomeKind,
    Phase,
    Policy,
    Record,
    SQLiteStore,
    wait,
)
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)
from waitbound.stores import Store

RATIO_TARGET = 0.8
FULL_POLLS, FULL_RUNS = 2_000, 5
QUICK_POLLS, QUICK_RUNS = 200, 2


def _policy(polls: int, **learned: object) -> Policy:
    """*polls* status requests, each due 1 µs after the last; a deadline far away.
    *learned*: ``schedule="learned"`` and its key (the learned kind)."""
    return Policy(
        deadline_s=3600.0,
        max_requests=polls,
        base_delay_s=1e-6,
        max_delay_s=1e-6,
        min_delay_s=1e-6,
        request_timeout_s=30.0,
        **learned,  # type: ignore[arg-type]
    )


LEARNED_KEY = "poll-overhead"


def _learned_store() -> MemoryStore:
    """A memory store holding 200 finished jobs of an hour under :data:`LEARNED_KEY`:
    the learned kind plans every poll (the job never outlives the history)."""
    store = MemoryStore()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(200):
        end = start + timedelta(seconds=3600 + i)
        record = Record(
            contract=Contract(
                operation_id=f"history-{i}",
                profile=PROFILE,
                policy=Policy(schedule_key=LEARNED_KEY),
                created_at=start,
            ),
            submission=Submission(status_url="http://history.test/jobs/1"),
            schedule=Schedule(deadline_at=start + timedelta(hours=2), next_poll_at=start),
        )
        created = store.create(record, [])
        finished = created.evolve(
            ending=created.ending.evolve(
                phase=Phase.DONE, outcome=OutcomeKind.SUCCEEDED, finished_at=end
            ),
            answer=created.answer.evolve(
                pending_seen_at=end - timedelta(seconds=30), ended_seen_at=end
            ),
        )
        store.save(finished, [])
    return store


def next_delay_cost_us(calls: int = 20_000) -> tuple[float, float]:
    """CPU µs of one learned look-up plus one planned step on a realistic plan (cap
    60 s, 1,000 log-normal jobs), and of the same look-up without a plan (formula)."""
    import random

    from waitbound._engine._schedule_models import ScheduleModels
    from waitbound._model._history import Evidence
    from waitbound._rules._learned import estimate, plan

    rng = random.Random(1)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    evidence = []
    for i in range(1000):
        d = min(7200.0, 60.0 * math.exp(rng.gauss(0.0, 1.4)))
        evidence.append(
            Evidence(
                operation_id=str(i),
                key="k",
                accepted_at=start,
                pending_seen_at=start + timedelta(seconds=max(0.0, d - 20)),
                ended_seen_at=start + timedelta(seconds=d),
                outcome=OutcomeKind.SUCCEEDED,
                finished_at=start + timedelta(seconds=d),
            )
        )
    model = plan(
        estimate(evidence, resolution_s=0.5, max_step_s=15.0),
        key="k",
        history_version=1,
        floor_s=1.0,
        cap_s=60.0,
        lag_target_s=16.0,
    )
    store = _learned_store()
    models = ScheduleModels(store)
    record = store.get("history-0")
    assert record is not None
    learned = record.evolve(
        contract=record.contract.evolve(policy=Policy(schedule="learned", schedule_key=LEARNED_KEY))
    )
    models(learned, start)  # planned once, then cached
    began = time.process_time()
    for i in range(calls):
        models(learned, start)
        model.next_delay_s((i * 7.3) % 900.0)
    per_call = (time.process_time() - began) / calls * 1e6
    formula = record.evolve(contract=record.contract.evolve(policy=Policy()))
    began = time.process_time()
    for _ in range(calls):
        models(formula, start)
    return per_call, (time.process_time() - began) / calls * 1e6


@dataclass(frozen=True, slots=True)
class Run:
    """One run: seconds of real time, and of this process's CPU (all threads)."""

    wall_s: float
    cpu_s: float


class _Timer:
    def __enter__(self) -> _Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.run = Run(time.perf_counter() - self.wall, time.process_time() - self.cpu)


def bare(status_url: str, polls: int) -> Run:
    """*polls* GETs of *status_url* with one plain ``httpx.Client``."""
    with httpx.Client() as client:
        client.get(status_url).raise_for_status()  # connected, warm
        with _Timer() as timer:
            for _ in range(polls):
                client.get(status_url).raise_for_status()
    return timer.run


def durable(status_url: str, polls: int, store: Store, *, learned: bool = False) -> Run:
    """One ``waitbound.wait`` making *polls* durable status requests (*learned*: on the
    learned schedule, its key's history in *store*)."""
    keys = {"schedule": "learned", "schedule_key": LEARNED_KEY} if learned else {}
    operation = Operation(status_url=status_url, profile=PROFILE, policy=_policy(polls, **keys))
    with _Timer() as timer:
        outcome = wait(operation, store=store, sleep=_no_sleep)
    if outcome.reason != "request_budget_exhausted" or outcome.status_requests_used != polls:
        raise RuntimeError(f"unexpected outcome: {outcome.outcome} / {outcome.reason}")
    return timer.run


def _no_sleep(seconds: float) -> None:
    """The injected sleep: returns at once (the policy's delays are 1 µs)."""


def _sqlite(directory: Path, run: int) -> Store:
    return SQLiteStore(directory / f"run-{run}.sqlite")


def _install_sdk() -> None:
    """The OpenTelemetry SDK with in-memory exporters (needs the otel extra)."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    print("OpenTelemetry SDK installed: spans and metrics recorded in memory")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke check")
    parser.add_argument("--polls", type=int, help="requests per run")
    parser.add_argument("--runs", type=int, help="runs of each kind")
    parser.add_argument(
        "--otel-sdk", action="store_true", help="record traces and metrics in memory"
    )
    args = parser.parse_args()
    if args.otel_sdk:
        _install_sdk()
    polls = args.polls or (QUICK_POLLS if args.quick else FULL_POLLS)
    runs = args.runs or (QUICK_RUNS if args.quick else FULL_RUNS)
    print_machine(machine(pg_dsn=None))
    print(f"{polls} requests per run, {runs} runs of each kind, one simulator process")

    scenario = {"id": "poll-overhead", "endpoints": {"status": [RUNNING]}}
    runs_of: dict[str, list[Run]] = {
        "bare": [],
        "durable, SQLite": [],
        "durable, memory": [],
        "durable, memory, learned": [],
    }
    learned_store = _learned_store()
    with simulator(scenario) as sim, tempfile.TemporaryDirectory() as tmp:
        status_url = f"{sim.base_url}/status"
        directory = Path(tmp)
        # Warm-up: the shared client, imports, the SQLite file's first pages.
        bare(status_url, 50)
        durable(status_url, 50, MemoryStore())
        durable(status_url, 50, _sqlite(directory, -1))
        kinds: dict[str, Callable[[int], Run]] = {
            "bare": lambda run: bare(status_url, polls),
            "durable, SQLite": lambda run: durable(status_url, polls, _sqlite(directory, run)),
            "durable, memory": lambda run: durable(status_url, polls, MemoryStore()),
            "durable, memory, learned": lambda run: durable(
                status_url, polls, learned_store, learned=True
            ),
        }
        for run in range(runs):
            for kind, measure in kinds.items():
                runs_of[kind].append(measure(run))

        profile_path = directory / "durable.prof"
        profiler = cProfile.Profile()
        store = _sqlite(directory, runs)
        profiler.enable()
        durable(status_url, polls, store)
        profiler.disable()
        profiler.dump_stats(profile_path)
        top = top_of_profile(profile_path, count=30, sort="tottime")

    rates = {kind: [polls / run.wall_s for run in done] for kind, done in runs_of.items()}
    medians = {kind: statistics.median(values) for kind, values in rates.items()}
    rows = []
    for kind, values in rates.items():
        ratio = medians[kind] / medians["bare"]
        cpu_us = statistics.median(run.cpu_s for run in runs_of[kind]) / polls * 1e6
        rows.append(
            [
                kind,
                f"{medians[kind]:,.0f}",
                " / ".join(f"{value:,.0f}" for value in values),
                f"{1e6 / medians[kind]:,.0f}",
                f"{cpu_us:,.0f}",
                "-" if kind == "bare" else f"{ratio:.2f}",
                "-" if kind == "bare" else verdict(ratio, RATIO_TARGET),
            ]
        )
    print_table(
        "Poll cycles per second (medians; ratio = durable ÷ bare, target ≥ 0.8)",
        ["kind", "cycles/s", "runs", "µs/cycle", "CPU µs/cycle", "ratio", "verdict"],
        rows,
    )
    with_plan, lookup_only = next_delay_cost_us()
    learned_move = medians["durable, memory, learned"] / medians["durable, memory"] - 1.0
    print(
        f"\nLearned schedule: one look-up and one planned step {with_plan:.1f} CPU µs; "
        f"the look-up of a formula policy {lookup_only:.2f} CPU µs; durable (memory) "
        f"cycles/s on the learned schedule {learned_move * 100:+.1f} % against the formula "
        f"(target: within 5 %: {verdict(-abs(learned_move), -0.05)})"
    )
    print("\ncProfile of one durable (SQLite) run, heaviest by own time:\n")
    print(top)


if __name__ == "__main__":
    main()
