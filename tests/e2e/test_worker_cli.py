"""`waitbound wait --detach` and `waitbound worker`, end to end on the simulator."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.runner import cli
from waitbound import OutcomeKind, SQLiteStore
from waitbound.sim import Simulator, parse_scenario

STATE = ["--state-path", "status", "--pending", "running", "--succeeded", "done"]
PACE = ["--base-delay", "0.1s", "--max-delay", "0.2s", "--deadline", "30s"]


@pytest.mark.e2e
def test_detached_operations_are_finished_by_a_worker(tmp_path: Path) -> None:
    """Three detached waits return at once; one worker --until-idle drives them all home."""
    scenario = parse_scenario(
        {"id": "w", "endpoints": {"status": [
            {"code": 200, "body": {"status": "running"}, "repeat": 6},
            {"code": 200, "body": {"status": "done"}},
        ]}}
    )  # fmt: skip
    store = str(tmp_path / "s.db")
    with Simulator(scenario) as sim:
        detach = ["wait", f"{sim.base_url}/status", *STATE, *PACE, "--detach", "--json"]
        started = [json.loads(cli(*detach, "--store", store).stdout) for _ in range(3)]
        assert sim.count("status") == 0
        assert all(not s["done"] and "NOT complete" in s["message"] for s in started)
        done = cli("worker", "--until-idle", "--store", store, timeout=60)
    assert done.returncode == 0, done.stderr
    opened = SQLiteStore(store)
    outcomes = [opened.get(s["operation_id"]).outcome for s in started]  # type: ignore[union-attr]
    opened.close()
    assert outcomes == [OutcomeKind.SUCCEEDED] * 3


@pytest.mark.e2e
def test_sigterm_stops_a_worker_cleanly(tmp_path: Path) -> None:
    """SIGTERM: the worker finishes what is in flight, releases its leases and exits 0."""
    scenario = parse_scenario(
        {"id": "w", "endpoints": {"status": [{"code": 200, "body": {"status": "running"},
                                              "delay_s": 0.3}]}}
    )  # fmt: skip
    store = str(tmp_path / "s.db")
    with Simulator(scenario) as sim:
        op = json.loads(cli("wait", f"{sim.base_url}/status", *STATE, *PACE, "--detach",
                            "--json", "--store", store).stdout)  # fmt: skip
        worker = subprocess.Popen(
            [sys.executable, "-m", "waitbound", "worker", "--store", store],
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        end = time.monotonic() + 20
        while sim.count("status") < 2:
            assert time.monotonic() < end
            time.sleep(0.02)
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=20)
    assert worker.returncode == 0, err
    opened = SQLiteStore(store)
    record = opened.get(op["operation_id"])
    opened.close()
    assert record is not None
    assert record.lease_owner is None
    assert record.in_flight is None
    assert record.status_requests_used == sim.count("status")
