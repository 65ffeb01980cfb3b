"""Kill -9 a running `waitbound wait`, run it again: budgets and schedule hold across both."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from waitbound import SQLiteStore
from waitbound.sim import Simulator, parse_scenario

SCENARIO = parse_scenario(
    {
        "id": "never-ends",
        "endpoints": {
            "status": [{"code": 200, "body": {"id": "job-k", "state": "RUNNING"}, "delay_s": 0.3}]
        },
    }
)
MAX_REQUESTS = 6


def _args(base_url: str, store: Path) -> list[str]:
    # The plan keeps the budget's last look late (0.2 of a spacing, here 3 s, before the
    # deadline), so a loaded machine's restart still sends it in time (docs/waiting.md).
    return [
        sys.executable, "-m", "waitbound", "wait", f"{base_url}/status",
        "--state-path", "state", "--pending", "RUNNING", "--succeeded", "DONE",
        "--job-id-path", "id", "--deadline", "20s", "--max-requests", str(MAX_REQUESTS),
        "--base-delay", "0.4s", "--max-delay", "15s", "--request-timeout", "3s",
        "--operation-id", "op-kill", "--store", str(store), "--json",
    ]  # fmt: skip


def _until(condition: Callable[[], object], timeout_s: float = 15) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.01)


@pytest.mark.e2e
@pytest.mark.parametrize("moment", ["sleeping", "request_in_flight"])
def test_killed_wait_resumes_without_exceeding_its_budget(moment: str, tmp_path: Path) -> None:
    """SIGKILL mid-wait, restart with the same id: never more requests than the budget,
    never earlier than the stored next poll time, nothing after the deadline."""
    store_path = tmp_path / "store.db"
    with Simulator(SCENARIO) as simulator:
        first = subprocess.Popen(_args(simulator.base_url, store_path), stdout=subprocess.PIPE)
        _until(store_path.exists)
        store = SQLiteStore(store_path)
        if moment == "sleeping":
            _until(lambda: simulator.count("status") >= 2)
        else:
            _until(lambda: (r := store.get("op-kill")) is not None and r.in_flight == "status")
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        before = store.get("op-kill")
        assert before is not None
        assert before.outcome is None
        assert before.status_requests_used >= simulator.count("status")
        restarted_at = time.time()
        second = subprocess.run(
            _args(simulator.base_url, store_path), capture_output=True, text=True, check=False
        )
        log = simulator.log()
    outcome = json.loads(second.stdout)
    after_restart = [e for e in log if e.endpoint == "status" and e.at.timestamp() > restarted_at]
    assert len([e for e in log if e.endpoint == "status"]) <= MAX_REQUESTS
    assert outcome["outcome"] == "escalated"
    assert outcome["reason"] == "request_budget_exhausted"
    assert outcome["status_requests_used"] == MAX_REQUESTS
    assert outcome["job_id"] == "job-k"
    assert after_restart
    assert after_restart[0].at >= before.next_poll_at
    assert all(e.at < before.deadline_at for e in log)
    kinds = [s.event.kind for s in store.audit("op-kill")]
    assert "resumed" in kinds
    if moment == "request_in_flight":
        assert "answer_lost" in kinds
    store.close()
