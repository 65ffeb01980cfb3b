"""What the benchmarks share: the machine, a scratch PostgreSQL schema, the simulator
and a worker each in a child process, and small statistics.

The simulator and the worker run in child processes (``multiprocessing``, spawn) so
that neither competes with the other, or with the benchmark's own bookkeeping, for
one Python interpreter lock: on a 2-core machine the worker gets one core and the
simulator the other.
"""

from __future__ import annotations

import cProfile
import io
import math
import multiprocessing
import os
import platform
import pstats
import sqlite3
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import anyio
import httpx

from waitbound import WorkerSettings, open_store, parse_profile, work
from waitbound.stores import Store

PG_DSN = os.environ.get("WAITBOUND_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
"""The PostgreSQL server (``$WAITBOUND_BENCH_PG_DSN``); every run uses a scratch schema."""

PROFILE = parse_profile(
    {"state": "status", "pending": ["running"], "succeeded": ["done"]}, name="bench"
)
"""The contract of the simulated jobs: ``running`` until the budget ends them."""

RUNNING: Mapping[str, object] = {"code": 200, "body": {"status": "running"}}
"""A status answer: the job is still running."""

SPAWN = multiprocessing.get_context("spawn")


# --- the machine -----------------------------------------------------------------


def machine(pg_dsn: str | None = PG_DSN) -> dict[str, str]:
    """Cores, CPU model, RAM, Python, SQLite and (when reachable) PostgreSQL versions."""
    facts = {"cpu": "unknown", "ram": "unknown"}
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                facts["ram"] = f"{int(line.split()[1]) / 1024**2:.1f} GiB"
    postgres = "unreachable"
    if pg_dsn:
        try:
            postgres = pg_server_version(pg_dsn)
        except Exception:  # any failure: the server is reported unreachable
            postgres = "unreachable"
    return {
        "cores": str(os.cpu_count()),
        **facts,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgresql": postgres,
    }


def pg_server_version(dsn: str) -> str:
    """The server's ``server_version``."""
    import psycopg

    with psycopg.connect(dsn, connect_timeout=3) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "unknown"


def print_machine(info: Mapping[str, str]) -> None:
    """Print the machine facts on one line."""
    print(", ".join(f"{key} {value}" for key, value in info.items()))


# --- PostgreSQL --------------------------------------------------------------------


@contextmanager
def pg_schema(dsn: str = PG_DSN) -> Iterator[str]:
    """A scratch schema (``wbbench_<random>``), upgraded, dropped afterwards.

    The tests' schemas and the default ``waitbound`` schema are never touched.
    """
    import psycopg
    from psycopg import sql

    from waitbound.stores.postgres import upgrade

    name = f"wbbench_{uuid.uuid4().hex[:12]}"
    try:
        upgrade(dsn, schema=name)
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSpec:
    """Where a child process opens its store: a SQLite file, or a PostgreSQL schema."""

    path: str | None = None
    dsn: str | None = None
    schema: str | None = None
    pool_size: int = 2

    def open(self) -> Store:
        """Open the store (a ``PostgresStore`` with a pool of ``pool_size``)."""
        if self.dsn is None:
            assert self.path is not None
            return open_store(Path(self.path))
        from waitbound.stores.postgres import PostgresStore

        return PostgresStore(
            self.dsn, schema=self.schema or "waitbound", min_size=1, max_size=self.pool_size
        )


# --- the simulator in a child process -----------------------------------------------


def _serve(scenario: Mapping[str, object], address: Queue[str], stop: Event) -> None:
    from waitbound.sim import Simulator, parse_scenario

    with Simulator(parse_scenario(dict(scenario))) as sim:
        address.put(sim.base_url)
        stop.wait()


@dataclass(frozen=True, slots=True)
class SimulatorProcess:
    """The simulator serving in a child process at ``base_url``."""

    base_url: str

    def log(self) -> list[dict[str, Any]]:
        """The simulator's request log (``GET /_sim/log``), in order of answering."""
        answer = httpx.get(f"{self.base_url}/_sim/log", timeout=300)
        answer.raise_for_status()
        entries: list[dict[str, Any]] = answer.json()
        return entries


@contextmanager
def simulator(scenario: Mapping[str, object]) -> Iterator[SimulatorProcess]:
    """Serve *scenario* (the simulator's scenario format) from a child process."""
    address: Queue[str] = SPAWN.Queue()
    stop = SPAWN.Event()
    child = SPAWN.Process(target=_serve, args=(scenario, address, stop), daemon=True)
    child.start()
    try:
        yield SimulatorProcess(address.get(timeout=60))
    finally:
        stop.set()
        child.join(10)
        if child.is_alive():
            child.terminate()


def arrival(entry: Mapping[str, Any]) -> datetime:
    """When a logged request arrived at the simulator (millisecond resolution)."""
    return datetime.fromisoformat(str(entry["at"]).replace("Z", "+00:00")).astimezone(UTC)


# --- a worker in a child process -------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerReport:
    """What a worker child reported: steps taken, resident memory (MiB), seconds
    worked, when it stopped (aware UTC), and its group commits (``save_many`` calls and
    the answers they wrote)."""

    steps: int
    peak_rss_mib: float
    final_rss_mib: float
    elapsed_s: float
    stopped_at: datetime
    commits: int = 0
    committed: int = 0


def _memory_mib(field: str) -> float:
    """A ``/proc/self/status`` memory field (``VmHWM``: peak RSS; ``VmRSS``: now), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return math.nan


def _work(  # noqa: PLR0917 - a child process's arguments, passed positionally
    spec: StoreSpec,
    settings: WorkerSettings,
    run_s: float | None,
    profile_path: str | None,
    out: Queue[WorkerReport],
    ready: Event,
    go: Event,
) -> None:
    store = spec.open()
    commits = [0, 0]
    save_many = store.save_many

    def counted(items: Sequence[Any]) -> list[Any]:  # the group commits' sizes
        commits[0] += 1
        commits[1] += len(items)
        return save_many(items)

    store.save_many = counted  # type: ignore[method-assign]
    ready.set()
    go.wait()
    started = time.monotonic()

    async def main() -> int:
        stop = anyio.Event()
        async with anyio.create_task_group() as group:
            if run_s is not None:

                async def stop_later() -> None:
                    await anyio.sleep(max(0.0, run_s))
                    stop.set()

                group.start_soon(stop_later)
            steps = await work(store, settings=settings, stop=stop)
            group.cancel_scope.cancel()
        return steps

    profiler = cProfile.Profile() if profile_path else None
    if profiler is not None:
        profiler.enable()
    steps = anyio.run(main)
    if profiler is not None and profile_path:
        profiler.disable()
        profiler.dump_stats(profile_path)
    store.close()
    out.put(
        WorkerReport(
            steps=steps,
            peak_rss_mib=_memory_mib("VmHWM"),
            final_rss_mib=_memory_mib("VmRSS"),
            elapsed_s=time.monotonic() - started,
            stopped_at=datetime.now(UTC),
            commits=commits[0],
            committed=commits[1],
        )
    )


class WorkerProcess:
    """``waitbound.work`` on *spec* in a child process; :meth:`report` waits for it.

    The worker opens its store, then waits for :meth:`go` unless *go_at_once*.

    Args:
        spec: the store to open.
        settings: the worker's settings.
        run_s: stop claiming work this many seconds after going; ``None``: run until
            idle (``settings.until_idle``).
        profile_path: write a cProfile of the worker here.
        go_at_once: start working as soon as the store is open.
    """

    def __init__(
        self,
        spec: StoreSpec,
        settings: WorkerSettings,
        *,
        run_s: float | None = None,
        profile_path: Path | None = None,
        go_at_once: bool = True,
    ) -> None:
        self._out: Queue[WorkerReport] = SPAWN.Queue()
        self._ready, self._go = SPAWN.Event(), SPAWN.Event()
        if go_at_once:
            self._go.set()
        profile = str(profile_path) if profile_path else None
        self._child = SPAWN.Process(
            target=_work,
            args=(spec, settings, run_s, profile, self._out, self._ready, self._go),
            daemon=True,
        )
        self._child.start()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until the worker has opened its store (at most *timeout_s* seconds)."""
        if not self._ready.wait(timeout_s):
            raise RuntimeError("the worker process did not start")

    def go(self) -> None:
        """Let the worker start working."""
        self._go.set()

    def report(self, timeout_s: float = 900.0) -> WorkerReport:
        """Wait (at most *timeout_s* seconds) for the worker to finish and report."""
        try:
            report = self._out.get(timeout=timeout_s)
        finally:
            self._child.join(10)
            if self._child.is_alive():
                self._child.terminate()
        return report


def top_of_profile(path: Path, count: int = 25, sort: str = "tottime") -> str:
    """The *count* heaviest functions of a cProfile dump, as text."""
    text = io.StringIO()
    pstats.Stats(str(path), stream=text).strip_dirs().sort_stats(sort).print_stats(count)
    return text.getvalue()


# --- statistics and tables --------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank *q*-th percentile (0 < q <= 100) of *values*."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def verdict(value: float, target: float, *, at_most: bool = False) -> str:
    """``met`` or ``MISSED`` for *value* against *target* (a minimum unless *at_most*)."""
    met = value <= target if at_most else value >= target
    return "met" if met else "MISSED"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a Markdown table under *title*."""
    print(f"\n{title}\n")
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join(" --- " for _ in headers) + "|")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
