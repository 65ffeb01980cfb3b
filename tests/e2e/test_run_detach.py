"""`waitbound run --detach`: submitted, recorded, returned at once; a worker finishes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.runner import cli
from waitbound import OutcomeKind, SQLiteStore
from waitbound.sim import Simulator, parse_scenario

STATE = ["--state-path", "status", "--pending", "running", "--succeeded", "done"]
PACE = ["--base-delay", "0.1s", "--max-delay", "0.2s", "--deadline", "30s"]


@pytest.mark.e2e
def test_run_detach_submits_records_and_returns_at_once_for_a_worker(tmp_path: Path) -> None:
    """run --detach sends the job request once, polls nothing, prints the operation as
    wait --detach does (done false) and exits 4; worker --until-idle then finishes it."""
    scenario = parse_scenario(
        {"id": "run-detach", "endpoints": {
            "submit": [{"code": 202, "headers": {"Location": "{base_url}/status"},
                        "body": {"id": "job-1"}}],
            "status": [{"code": 200, "body": {"status": "running"}},
                       {"code": 200, "body": {"status": "done"}}],
        }}
    )  # fmt: skip
    store = str(tmp_path / "s.db")
    with Simulator(scenario) as sim:
        started = cli("run", "POST", f"{sim.base_url}/jobs", *STATE, *PACE, "--detach",
                      "--json", "--operation-id", "op-d", "--store", store)  # fmt: skip
        assert (sim.count("submit"), sim.count("status")) == (1, 0)
        done = cli("worker", "--until-idle", "--store", store, timeout=60)
        submits = sim.count("submit")
    assert started.returncode == 4, started.stderr
    printed = json.loads(started.stdout)
    assert printed["operation_id"] == "op-d"
    assert printed["done"] is False
    assert "NOT complete" in printed["message"]
    assert done.returncode == 0, done.stderr
    assert submits == 1
    opened = SQLiteStore(store)
    record = opened.get("op-d")
    opened.close()
    assert record is not None
    assert record.outcome is OutcomeKind.SUCCEEDED
