"""Fleet pressure: 1,000 operations created within one second; does the fleet poll in waves?

Two fleets of 1,000 operations, each started evenly within one second against the
simulator (a child process, loopback HTTP), each operation polling until its
request budget is spent:

- ``waitbound``: the operations are recorded with ``waitbound.start`` while one
  worker (``waitbound.work`` in a child process) drives them. The schedule is
  waitbound's own backoff from 5 s, capped at 10 s (``base_delay_s=5``,
  ``max_delay_s=10``): the first delay is drawn from 2.5-5 s, every later one from
  5-10 s, so from the third poll on the fleet is in its steady state. Target: the
  ratio below <= 1.5.
- ``fixed 5 s``: 1,000 naive pollers (GET, sleep 5 s, GET, ...), the comparison. They
  are plain asyncio tasks with a minimal HTTP/1.1 client on 100 kept-alive
  connections, so that the client can send a 1,000-request wave at once, as 1,000
  independent clients would. (A single waitbound worker cannot: it serves about 300
  polls per second on this machine, see ``benchmarks/scale.py``, and would smear the
  wave itself. That is also why waitbound's mean interval here, 7.5 s, keeps the
  fleet's mean load, 133 req/s, well inside the worker's capacity: the figure must
  show the schedule, not the worker's limit.)

The figure: the peak-to-mean ratio of requests per second arriving at the simulator
(1 s bins) from the third poll on: the window opens when the last operation has made
its third poll and closes when the first operation has made its last, so neither the
start nor the tail is counted. For waitbound, the worker's lateness (reservation time
minus ``next_poll_at``, from the audit log) shows it kept up with the schedule.

Usage: ``python -m benchmarks.fleet_pressure [--quick] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
from anyio.abc import ByteStream

from benchmarks._common import (
    PROFILE,
    RUNNING,
    StoreSpec,
    WorkerProcess,
    arrival,
    machine,
    percentile,
    print_machine,
    print_table,
    simulator,
    verdict,
)
from waitbound import AuditEvent, Operation, Policy, SQLiteStore, WorkerSettings, start

RATIO_TARGET = 1.5
FIXED_INTERVAL_S = 5.0
BASE_DELAY_S, MAX_DELAY_S = 5.0, 10.0
CONNECTIONS = 100
SCENARIO = {"id": "fleet", "endpoints": {"status": [RUNNING]}}
SETTINGS = WorkerSettings(
    concurrency=64,
    per_origin_concurrency=64,
    per_origin_rate=100_000,
    per_origin_burst=1_000,
    until_idle=True,
)
"""One worker; the simulator is one origin standing for many, so the per-origin
politeness limits are lifted: waves must be spread by the schedule, not a limiter."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """Operations started within one second; status requests each waitbound operation
    and each naive poller sends (about a minute of polling)."""

    operations: int
    waitbound_polls: int
    fixed_polls: int


FULL = Sizes(operations=1_000, waitbound_polls=10, fixed_polls=13)
QUICK = Sizes(operations=100, waitbound_polls=5, fixed_polls=5)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pressure:
    """Requests per second at the simulator in the window (1 s bins)."""

    ratio: float
    peak: int
    mean: float
    window_s: float


def pressure(log: list[dict[str, object]]) -> Pressure:
    """The peak-to-mean ratio from the third poll on (see the module docstring)."""
    polls: dict[int, list[datetime]] = defaultdict(list)
    for entry in log:
        index = int(parse_qs(urlsplit(str(entry["path"])).query)["i"][0])
        polls[index].append(arrival(entry))
    for times in polls.values():
        times.sort()
    opens = max(times[2] for times in polls.values())
    closes = min(times[-1] for times in polls.values())
    bins = [0] * int((closes - opens).total_seconds())
    if not bins:
        raise RuntimeError("the window is shorter than one second; allow more polls")
    for times in polls.values():
        for at in times:
            second = int((at - opens).total_seconds())
            if opens <= at and second < len(bins):
                bins[second] += 1
    mean = statistics.fmean(bins)
    return Pressure(ratio=max(bins) / mean, peak=max(bins), mean=mean, window_s=len(bins))


def run_waitbound(sizes: Sizes) -> tuple[Pressure, float, float]:
    """The waitbound fleet: its pressure, the seconds its creation took, and the
    worker's p99 lateness in seconds."""
    policy = Policy(
        base_delay_s=BASE_DELAY_S,
        max_delay_s=MAX_DELAY_S,
        max_requests=sizes.waitbound_polls,
        deadline_s=600,
    )
    with tempfile.TemporaryDirectory(prefix="wbbench-") as folder, simulator(SCENARIO) as sim:
        path = Path(folder) / "fleet.db"
        store = SQLiteStore(path)
        worker = WorkerProcess(StoreSpec(path=str(path)), SETTINGS, go_at_once=False)
        worker.wait_ready()
        began = time.perf_counter()
        for i in range(sizes.operations):
            time.sleep(max(0.0, began + i / sizes.operations - time.perf_counter()))
            operation = Operation(
                status_url=f"{sim.base_url}/status?i={i}", profile=PROFILE, policy=policy
            )
            start(operation, operation_id=f"fleet-{i:05d}", store=store)
            if i == 0:
                worker.go()
        created_s = time.perf_counter() - began
        worker.report()
        lateness = [
            (event.at - datetime.fromisoformat(str(event.data["next_poll_at"]))).total_seconds()
            for i in range(sizes.operations)
            for event in _reservations(store, f"fleet-{i:05d}")[2:]  # from the third poll on
        ]
        store.close()
        return pressure(sim.log()), created_s, percentile(lateness, 99)


def _reservations(store: SQLiteStore, operation_id: str) -> list[AuditEvent]:
    """The operation's ``reserved`` audit events, in order."""
    return [s.event for s in store.audit(operation_id) if s.event.kind == "reserved"]


async def _get(stream: ByteStream, target: str, host: str) -> None:
    """One HTTP/1.1 GET on a kept-alive connection; the answer is read and dropped."""
    await stream.send(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next((int(line[15:]) for line in lines if line.startswith(b"content-length:")), 0)
    while len(body) < length:
        body += await stream.receive()


async def _naive_fleet(base_url: str, sizes: Sizes) -> None:
    """Start the naive pollers evenly within one second; wait until all are done."""
    where = urlsplit(base_url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    send, receive = anyio.create_memory_object_stream[ByteStream](CONNECTIONS)
    for _ in range(CONNECTIONS):
        send.send_nowait(await anyio.connect_tcp(host, port))
    began = anyio.current_time()

    async def poller(i: int) -> None:
        await anyio.sleep_until(began + i / sizes.operations)
        for poll in range(sizes.fixed_polls):
            if poll:
                await anyio.sleep(FIXED_INTERVAL_S)
            stream = await receive.receive()
            try:
                await _get(stream, f"/status?i={i}", where.netloc)
            finally:
                send.send_nowait(stream)

    async with anyio.create_task_group() as group:
        for i in range(sizes.operations):
            group.start_soon(poller, i)
    while True:
        try:
            await receive.receive_nowait().aclose()
        except anyio.WouldBlock:
            break


def run_fixed(sizes: Sizes) -> Pressure:
    """The naive fixed-interval fleet's pressure."""
    with simulator(SCENARIO) as sim:
        anyio.run(_naive_fleet, sim.base_url, sizes)
        return pressure(sim.log())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a smoke check")
    parser.add_argument("--repeat", type=int, default=1, help="runs per fleet (median)")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    print_machine(machine())
    ours = [run_waitbound(sizes) for _ in range(args.repeat)]
    fixed = [run_fixed(sizes) for _ in range(args.repeat)]
    rows = []
    for name, runs, target in (
        (
            f"waitbound, backoff {BASE_DELAY_S:g}-{MAX_DELAY_S:g} s",
            [p for p, _, _ in ours],
            RATIO_TARGET,
        ),
        (f"fixed {FIXED_INTERVAL_S:g} s interval", fixed, None),
    ):
        ratio = statistics.median(r.ratio for r in runs)
        rows.append(
            (
                name,
                f"{ratio:.2f}",
                ", ".join(f"{r.ratio:.2f}" for r in runs),
                ", ".join(f"{r.peak}/{r.mean:.0f}" for r in runs),
                ", ".join(f"{r.window_s:.0f}" for r in runs),
                f"<= {target:g}" if target else "-",
                verdict(ratio, target, at_most=True) if target else "-",
            )
        )
    print_table(
        f"Fleet pressure: {sizes.operations:,} operations started within one second "
        f"(median of {args.repeat})",
        ("fleet", "peak/mean", "runs", "peak/mean req/s", "window s", "target", "verdict"),
        rows,
    )
    late = ", ".join(f"{late_s * 1000:.0f}" for _, _, late_s in ours)
    created = ", ".join(f"{created_s:.2f}" for _, created_s, _ in ours)
    print(
        f"\nwaitbound: operations recorded within {created} s; "
        f"worker lateness p99 from the third poll on: {late} ms"
    )


if __name__ == "__main__":
    main()
