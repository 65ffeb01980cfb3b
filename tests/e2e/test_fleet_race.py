"""Three worker processes on one PostgreSQL store, 300 operations: one owner at a time."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from itertools import pairwise

import pytest

from tests.stores.pg import fresh_database
from waitbound import Operation, OutcomeKind, Policy, parse_profile, start
from waitbound.sim import Simulator, parse_scenario
from waitbound.stores import open_store

OPERATIONS = 300
BUDGET = 3


@pytest.fixture
def fleet_dsn() -> Iterator[str]:
    """A fresh database on the test server, migrated; dropped afterwards."""
    with fresh_database() as dsn:
        yield dsn


@pytest.mark.e2e
def test_three_workers_never_poll_one_operation_at_overlapping_times(fleet_dsn: str) -> None:
    """300 operations, 3 worker processes: no operation is polled by two workers at once,
    none beyond its budget, and every operation ends exactly once."""
    paths = [f"/jobs/{i}" for i in range(OPERATIONS)]
    scenario = parse_scenario(
        {
            "id": "fleet",
            "endpoints": {"status": [{"code": 200, "body": {"status": "running"},
                                      "delay_s": 0.01}]},
            "paths": {"status": paths},
        }
    )  # fmt: skip
    profile = parse_profile({"state": "status", "pending": ["running"], "succeeded": ["done"]})
    # The plan keeps a budget's last request for the deadline's last fifth of a spacing
    # unless the cap is five times the deadline: at this cap the 3 polls go at backoff.
    policy = Policy(base_delay_s=0.05, max_delay_s=600, deadline_s=120, max_requests=BUDGET)
    with Simulator(scenario) as sim:
        store = open_store(fleet_dsn)
        ids = [
            start(Operation(status_url=f"{sim.base_url}{path}", profile=profile, policy=policy),
                  store=store).operation_id
            for path in paths
        ]  # fmt: skip
        store.close()
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "waitbound", "worker", "--until-idle", "--store", fleet_dsn,
                 "--concurrency", "32", "--per-origin-concurrency", "32",
                 "--per-origin-rate", "1000"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
            )
            for _ in range(3)
        ]  # fmt: skip
        for worker in workers:
            _, err = worker.communicate(timeout=300)
            assert worker.returncode == 0, err
        log = sim.log()
    by_path: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for entry in log:
        by_path[entry.path].append((entry.at_s, entry.answered_at_s))
    for path, spans in by_path.items():
        spans.sort()
        assert len(spans) <= BUDGET, path
        for (_, answered), (arrived, _) in pairwise(spans):
            assert arrived >= answered, f"{path} polled by two workers at once"
    store = open_store(fleet_dsn)
    records = [store.get(i) for i in ids]
    finished = [sum(1 for s in store.audit(i) if s.event.kind == "finished") for i in ids]
    store.close()
    assert all(r is not None and r.outcome is OutcomeKind.ESCALATED for r in records)
    assert finished == [1] * OPERATIONS
    assert sum(len(spans) for spans in by_path.values()) == OPERATIONS * BUDGET
