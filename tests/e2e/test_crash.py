"""kill -9 a worker at chosen points, restart it: budgets hold, results once.

The worker process dies by SIGKILL at a failpoint (``WAITBOUND_FAILPOINT``): after a
request was reserved and before it was sent, after its answer arrived and before that
was persisted — for status and for result requests — at the first, second or third
time one of its three operations gets there. A second worker then finishes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from waitbound import (
    Operation,
    OutcomeKind,
    Phase,
    Policy,
    Reason,
    Record,
    SQLiteStore,
    parse_profile,
    start,
    verify_audit,
)
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)
from waitbound.sim import Simulator, parse_scenario

POINTS = ("reserved-status", "answered-status", "reserved-result", "answered-result")
MAX_DELAY_S = 3
MAX_REQUESTS = 22
"""At the 3 s cap, 22 requests cover the 60 s deadline even after a lost answer or two
(the plan does not spread them), and the learned schedule's delays stay at most 3 s."""
PROFILE = parse_profile(
    {"state": "status", "pending": ["running"], "succeeded": ["done"],
     "result_url": "result_url"}
)  # fmt: skip
SCENARIO = {
    "id": "crash",
    "endpoints": {
        "status": [
            {"code": 200, "body": {"status": "running"}, "repeat": 2},
            {"code": 200, "body": {"status": "done", "result_url": "{base_url}/result"}},
        ],
        "result": [{"code": 200, "body": {"rows": 1}}],
    },
}
OPERATIONS = 3
CASES = [
    pytest.param(point, nth, id=f"{point}-{nth}" + ("-learned" if "answered" in point else ""))
    for point in POINTS
    for nth in range(1, OPERATIONS + 1)
]
"""Every failpoint at each of the three operations' turns: the eleven kills that the
seeded campaign this replaces drew from its 50 seeds (``reserved-result`` at the second
turn it never drew). The operations of a kill after an answer arrived follow the
learned schedule, origin-paced (the seeds' odd half did), the others the formula."""


def _worker(store: Path, failpoint: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("WAITBOUND_FAILPOINT", None)
    if failpoint:
        env["WAITBOUND_FAILPOINT"] = failpoint
    command = [sys.executable, "-m", "waitbound", "worker", "--until-idle", "--lease", "2s"]
    return subprocess.run(
        [*command, "--store", str(store)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.e2e
@pytest.mark.parametrize(("point", "nth"), CASES)
def test_a_killed_worker_never_buys_requests_or_fetches_a_result_twice(
    point: str, nth: int, tmp_path: Path
) -> None:
    """kill -9 at the *nth* time a request reaches *point*, then a restart: every
    operation ends; no operation exceeded its request budget; no result was fetched
    twice; none is blamed on the provider."""
    store_path = tmp_path / "store.db"
    simulators = [Simulator(parse_scenario(SCENARIO)).start() for _ in range(OPERATIONS)]
    try:
        store = SQLiteStore(store_path)
        policy = Policy(
            base_delay_s=0.05,
            max_delay_s=MAX_DELAY_S,
            deadline_s=60,
            max_requests=MAX_REQUESTS,
            request_timeout_s=2,
            lease_s=1,  # a dead worker's request lease expires within 3 s
        )
        learned = point.startswith("answered")  # the learned schedule, origin-paced
        if learned:
            policy = replace(policy, schedule="learned", schedule_key=KEY, origin_pacing=True)
            _seed_history(store)
        ids = [
            start(Operation(status_url=f"{sim.base_url}/status", profile=PROFILE, policy=policy),
                  store=store).operation_id
            for sim in simulators
        ]  # fmt: skip
        store.close()
        crashed = _worker(store_path, f"{point}:{nth}")
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        finished = _worker(store_path, None)
        assert finished.returncode == 0, finished.stderr
    finally:
        for sim in simulators:
            sim.stop()
    store = SQLiteStore(store_path)
    records = [store.get(i) for i in ids]
    store.close()
    for sim, record in zip(simulators, records, strict=True):
        assert record is not None
        assert record.outcome is not None
        assert sim.count("status") + sim.count("result") <= MAX_REQUESTS
        assert sim.count("status") + sim.count("result") <= record.requests_used
        assert sim.count("result") <= 1
        # The provider never failed: a result answer lost to the kill is our fault.
        assert record.reason in (None, Reason.RESULT_UNCONFIRMED), record.error
    if learned:  # the worker planned from the history, before the kill or after it
        assert any(_learned_delays(store_path, i) for i in ids)


KEY = "crash-learned"


def _seed_history(store: SQLiteStore) -> None:
    """Thirty finished jobs of 30-59 s under :data:`KEY` (more than the cold start's
    minimum, and longer than the test's jobs live, so the plan speaks for all of their
    polls), written through the store as any finished operation is."""
    began = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(30):
        ended = began + timedelta(seconds=30.0 + i)
        record = Record(
            contract=Contract(
                operation_id=f"history-{i}",
                profile=PROFILE,
                policy=Policy(schedule_key=KEY),
                created_at=began,
            ),
            submission=Submission(status_url="http://history.test/jobs/1"),
            schedule=Schedule(deadline_at=began + timedelta(hours=1), next_poll_at=began),
        )
        created = store.create(record, [])
        store.save(
            created.evolve(
                ending=created.ending.evolve(
                    phase=Phase.DONE, outcome=OutcomeKind.SUCCEEDED, finished_at=ended
                ),
                answer=created.answer.evolve(
                    pending_seen_at=ended - timedelta(seconds=0.05), ended_seen_at=ended
                ),
            ),
            [],
        )


def _learned_delays(store_path: Path, operation_id: str) -> list[object]:
    """The learned plans (``learned`` of a scheduled event) *operation_id*'s delays were
    planned from: the delay is the plan's, or the budget's pace when that is longer (a
    lost answer spends a request, and the rest must still cover the deadline)."""
    store = SQLiteStore(store_path)
    try:
        events = [e.event for e in store.audit(operation_id)]
    finally:
        store.close()
    return [e.data["learned"] for e in events if e.kind == "scheduled" and "learned" in e.data]


@pytest.mark.e2e
@pytest.mark.parametrize("nth", [1, 2])
def test_a_worker_killed_in_a_paused_group_commit_leaves_no_half_written_row(
    nth: int, tmp_path: Path
) -> None:
    """kill -9 at ``committing`` (a batch of answers gathered by the commit pause, not
    yet written): every operation reads back whole with its audit chain intact, every
    request that reached a provider was counted by a reservation committed before it,
    and a restarted worker ends every operation within its budget."""
    store_path = tmp_path / "store.db"
    simulators = [Simulator(parse_scenario(SCENARIO)).start() for _ in range(4)]
    try:
        store = SQLiteStore(store_path)
        policy = Policy(
            base_delay_s=0.05,
            max_delay_s=MAX_DELAY_S,
            deadline_s=60,
            max_requests=MAX_REQUESTS,
            request_timeout_s=2,
            lease_s=1,
        )
        ids = [
            start(Operation(status_url=f"{sim.base_url}/status", profile=PROFILE, policy=policy),
                  store=store).operation_id
            for sim in simulators
        ]  # fmt: skip
        store.close()
        env = dict(os.environ)
        env["WAITBOUND_FAILPOINT"] = f"committing:{nth}"
        command = [sys.executable, "-m", "waitbound", "worker", "--until-idle", "--lease", "2s"]
        crashed = subprocess.run(
            [*command, "--commit-pause", "50ms", "--store", str(store_path)],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        store = SQLiteStore(store_path)
        try:
            assert verify_audit(store) == []
            for sim, operation_id in zip(simulators, ids, strict=True):
                record = store.get(operation_id)
                assert record is not None
                assert sim.count("status") + sim.count("result") <= record.requests_used
        finally:
            store.close()
        finished = _worker(store_path, None)
        assert finished.returncode == 0, finished.stderr
    finally:
        for sim in simulators:
            sim.stop()
    store = SQLiteStore(store_path)
    try:
        assert verify_audit(store) == []
        for sim, operation_id in zip(simulators, ids, strict=True):
            record = store.get(operation_id)
            assert record is not None
            assert record.outcome is not None
            assert sim.count("status") + sim.count("result") <= min(
                MAX_REQUESTS, record.requests_used
            )
            assert sim.count("result") <= 1
    finally:
        store.close()
