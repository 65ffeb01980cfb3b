"""Inbox pages: server time to render In flight, Needs a decision and Finished with
1,000 operations in flight in a SQLite store.

The application of ``waitbound serve`` (``waitbound.web._app.create_app``: the auth
and security-header middleware, the page routes, Jinja2) is called in process through
``httpx.ASGITransport``; one run is the time from sending the request to holding the
whole body, with the bearer token, one request at a time. The store is a real SQLite
file; each page reads it as it does when served (the store's ``recent``, the
escalations, ``pending_summary``). Each in-flight operation was polled once (state,
progress, one request used). A second store adds 1,000 finished operations (50 of
them escalated with a decision open) beside the 1,000 in flight.

Usage: ``python -m benchmarks.inbox_pages [--quick] [--runs N] [--profile PATH]``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx

from benchmarks._common import machine, percentile, print_machine, print_table, verdict
from waitbound import Clock, Observation, Operation, Policy, SQLiteStore, parse_profile, start
from waitbound._base._json import JSON
from waitbound._engine._lease import new_owner
from waitbound._rules._controller import Finish, Send, observe, plan
from waitbound.stores import Store
from waitbound.web._app import create_app
from waitbound.web._config import ServeConfig
from waitbound.web._service import Service

TARGET_MS = 300.0
"""Server time to render a page of 1,000 operations in flight (issue 13)."""
TOKEN = "tok_" + "b" * 40
PAGES = ("/in-flight", "/", "/finished")
PROFILE = parse_profile(
    {
        "state": "status",
        "pending": ["running"],
        "succeeded": ["done"],
        "failed": ["failed"],
        "progress": "progress",
    },
    name="bench",
)
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class _At:
    """A clock stopped at one instant (the store's records are made at known times)."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return self.at.timestamp()


def _poll_once(store: Store, operation_id: str, now: datetime, body: JSON) -> None:
    """One status request's reservation and answer, persisted as the driver does."""
    record = store.get(operation_id)
    assert record is not None
    decision = plan(record, now, owner=new_owner())
    assert isinstance(decision, Send), f"{operation_id} not due: {type(decision).__name__}"
    reserved = store.save(decision.transition.record, decision.transition.events)
    answer = Observation(kind="status", at=now, http_status=200, body=body, elapsed_s=0.05)
    after = observe(reserved, answer, rng=random.Random(1))
    store.save(after.record, after.events)


def fill(store: Store, in_flight: int, finished: int, escalated: int) -> None:
    """*in_flight* operations polled once (running); *finished* more that ended, of which
    *escalated* stopped with their budget used up (a decision open), the rest alternate
    succeeded and failed."""
    policy = Policy(deadline_s=86_400, max_requests=30, base_delay_s=5, max_delay_s=60)
    for n in range(in_flight):
        at = T0 + timedelta(seconds=n)
        operation = Operation(
            status_url=f"https://api.example/v1/jobs/{n}",
            profile=PROFILE,
            policy=policy,
            label=f"team-{n % 5}/exports",
        )
        start(operation, operation_id=f"flight-{n:05d}", store=store, clock=_At(at))
        body: JSON = {"status": "running", "progress": {"done": n % 100, "of": 100}}
        _poll_once(store, f"flight-{n:05d}", at, body)
    one = Policy(deadline_s=86_400, max_requests=1, base_delay_s=5, max_delay_s=60)
    for n in range(finished):
        at = T0 - timedelta(hours=1) + timedelta(seconds=n)
        stops = n < escalated
        operation = Operation(
            status_url=f"https://api.example/v1/jobs/done-{n}",
            profile=PROFILE,
            policy=one if stops else policy,
            label=f"team-{n % 5}/reports",
        )
        start(operation, operation_id=f"done-{n:05d}", store=store, clock=_At(at))
        end = "running" if stops else ("done" if n % 2 else "failed")
        _poll_once(store, f"done-{n:05d}", at, {"status": end})
        if stops:  # the budget is used: the next plan escalates
            record = store.get(f"done-{n:05d}")
            assert record is not None
            ending = plan(record, at + timedelta(seconds=5), owner=new_owner())
            assert isinstance(ending, Finish), type(ending).__name__
            store.save(ending.transition.record, ending.transition.events)


Found = dict[str, tuple[list[float], list[float], int]]
"""Per page: wall milliseconds per run, CPU milliseconds per run, the body's bytes."""


async def _measure(store: Store, clock: Clock, runs: int) -> Found:
    """Each page *runs* times (after two warm-up requests): the wall time of each run
    (request sent to body held), the process's CPU time during it (every thread: the
    store is read in a worker thread), and the body's size."""
    service = Service(store=store, config=ServeConfig(), clock=clock, token=TOKEN)
    app = create_app(service)
    transport = httpx.ASGITransport(app=app)
    found: Found = {}
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://inbox.test",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as client:
        for path in PAGES:
            for _ in range(2):
                (await client.get(path)).raise_for_status()
            times, cpu = [], []
            size = 0
            for _ in range(runs):
                started, used = time.perf_counter(), time.process_time()
                answer = await client.get(path)
                body = answer.content
                times.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - used) * 1000)
                answer.raise_for_status()
                size = len(body)
            found[path] = (times, cpu, size)
    return found


def _rows(name: str, found: Found) -> list[Sequence[object]]:
    rows: list[Sequence[object]] = []
    for path, (times, cpu, size) in found.items():
        median = statistics.median(times)
        rows.append(
            (
                name,
                f"`{path}`",
                f"{size / 1024:.0f} KiB",
                f"{median:.0f} ms",
                f"{percentile(times, 90):.0f} ms",
                f"{max(times):.0f} ms",
                f"{statistics.median(cpu):.0f} ms",
                f"< {TARGET_MS:.0f} ms",
                verdict(median, TARGET_MS, at_most=True),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 operations, 5 runs")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--profile", type=Path, help="write a cProfile of the runs here")
    options = parser.parse_args()
    in_flight = 100 if options.quick else 1_000
    runs = 5 if options.quick else options.runs
    print_machine(machine(pg_dsn=None))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    clock = _At(T0 + timedelta(seconds=in_flight + 30))
    rows: list[Sequence[object]] = []
    with tempfile.TemporaryDirectory() as folder:
        for name, finished, escalated in (
            (f"{in_flight:,} in flight", 0, 0),
            (f"{in_flight:,} in flight + {in_flight:,} finished", in_flight, in_flight // 20),
        ):
            path = Path(folder) / f"{finished}.db"
            store = SQLiteStore(path)
            filling = time.perf_counter()
            fill(store, in_flight, finished, escalated)
            print(f"{name}: filled in {time.perf_counter() - filling:.1f} s")
            profiler = cProfile.Profile() if options.profile else None
            if profiler is not None:
                profiler.enable()
            found = anyio.run(_measure, store, clock, runs)
            if profiler is not None and options.profile:
                profiler.disable()
                profiler.dump_stats(f"{options.profile}.{finished}")
            rows += _rows(name, found)
            store.close()
    print_table(
        f"Inbox pages: server time per page, {runs} runs each (in process, ASGITransport)",
        ("store", "page", "body", "median", "p90", "max", "CPU (median)", "target", "verdict"),
        rows,
    )


if __name__ == "__main__":
    main()
