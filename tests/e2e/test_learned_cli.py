"""`--schedule learned` end to end: the real CLI (`wait`, `run`, `worker`, `schedules`)
on the simulator, reading and adding to the store's schedule history."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.e2e.runner import cli
from waitbound import OutcomeKind, Phase, Policy, Record, SQLiteStore, parse_profile
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)
from waitbound.sim import Simulator, parse_scenario

STATE = ["--state-path", "status", "--pending", "running", "--succeeded", "done"]
PACE = ["--base-delay", "0.1s", "--max-delay", "0.4s", "--deadline", "30s", "--max-requests", "100"]
LEARNED = ["--schedule", "learned", "--schedule-key", "sim-jobs"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _seed(path: Path, count: int, duration_s: float = 20.0) -> None:
    """*count* finished jobs of about *duration_s* in the key's history."""
    store = SQLiteStore(path)
    try:
        for i in range(count):
            record = Record(
                contract=Contract(
                    operation_id=f"seed-{i}",
                    profile=parse_profile({"state": "s", "pending": ["r"], "succeeded": ["d"]}),
                    policy=Policy(schedule_key="sim-jobs"),
                    created_at=T0,
                ),
                submission=Submission(status_url="http://127.0.0.1:1/x"),
                schedule=Schedule(deadline_at=T0 + timedelta(hours=1), next_poll_at=T0),
            )
            created = store.create(record, [])
            end = T0 + timedelta(seconds=duration_s + 0.01 * i)
            store.save(
                created.evolve(
                    ending=created.ending.evolve(
                        phase=Phase.DONE, outcome=OutcomeKind.SUCCEEDED, finished_at=end
                    ),
                    answer=created.answer.evolve(
                        pending_seen_at=end - timedelta(seconds=0.1), ended_seen_at=end
                    ),
                ),
                [],
            )
    finally:
        store.close()


def _sources(path: Path, operation_id: str) -> list[str]:
    store = SQLiteStore(path)
    try:
        return [
            str(e.event.data.get("delay_source"))
            for e in store.audit(operation_id)
            if e.event.kind == "scheduled"
        ]
    finally:
        store.close()


def _scenario() -> object:
    return parse_scenario(
        {"id": "learned", "endpoints": {"status": [
            {"code": 200, "body": {"status": "running"}, "repeat": 2},
            {"code": 200, "body": {"status": "done"}},
        ]}}
    )  # fmt: skip


@pytest.mark.e2e
def test_wait_with_a_learned_schedule_plans_from_the_history_and_adds_to_it(
    tmp_path: Path,
) -> None:
    """With 30 jobs in the key's history, `wait --schedule learned` polls by the learned
    schedule (audited as learned_schedule), and its own job joins the history."""
    store = tmp_path / "s.db"
    _seed(store, 30)
    with Simulator(_scenario()) as sim:  # type: ignore[arg-type]
        done = cli(
            "wait", f"{sim.base_url}/status", *STATE, *PACE, *LEARNED, "--json",
            "--store", str(store),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    operation_id = json.loads(done.stdout)["operation_id"]
    assert "learned_schedule" in _sources(store, operation_id)
    listed = cli("schedules", "--json", "--store", str(store))
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["key"], row["jobs"], row["censored"], row["learned"]) == ("sim-jobs", 31, 0, True)


@pytest.mark.e2e
def test_a_worker_drives_a_detached_learned_operation_and_forget_starts_cold(
    tmp_path: Path,
) -> None:
    """A detached `wait --schedule learned` is driven by `worker` on the learned schedule;
    `schedules forget` empties the key, and the next operation uses the formula."""
    store = tmp_path / "s.db"
    _seed(store, 30)
    with Simulator(_scenario()) as sim:  # type: ignore[arg-type]
        started = cli(
            "wait", f"{sim.base_url}/status", *STATE, *PACE, *LEARNED, "--detach",
            "--json", "--store", str(store),
        )  # fmt: skip
        assert started.returncode == 4, started.stderr
        operation_id = json.loads(started.stdout)["operation_id"]
        worked = cli("worker", "--until-idle", "--store", str(store), timeout=60)
        assert worked.returncode == 0, worked.stderr
    assert "learned_schedule" in _sources(store, operation_id)
    forgot = cli("schedules", "forget", "sim-jobs", "--store", str(store))
    assert forgot.returncode == 0, forgot.stderr
    assert "forgot 31 jobs" in forgot.stdout
    again = cli("schedules", "forget", "sim-jobs", "--store", str(store))
    assert again.returncode == 2
    assert "no schedule history" in again.stderr
    with Simulator(_scenario()) as sim:  # type: ignore[arg-type]
        cold = cli(
            "wait", f"{sim.base_url}/status", *STATE, *PACE, *LEARNED, "--json",
            "--store", str(store),
        )  # fmt: skip
    assert cold.returncode == 0, cold.stderr
    sources = _sources(store, json.loads(cold.stdout)["operation_id"])
    assert "learned_schedule" not in sources
    assert "local_backoff" in sources
