"""Worker processes that stall past their lease (``WAITBOUND_FAILPOINT=…:pause=S``),
on the real CLI and simulator: no two requests of one operation in flight, no request
after the outcome, no answer recorded against another request; SIGTERM during a stall.

The stall is a failpoint, so what the stalled worker does when it wakes never depends on
the machine's speed: its lease (1 s) has run out by its own monotonic clock after a
pause of 3 s, whoever took the operation over meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from tests.stores.pg import fresh_database
from waitbound import AuditEvent, Operation, OutcomeKind, Policy, Record, parse_profile, start
from waitbound.sim import Simulator, parse_scenario
from waitbound.stores import open_store

PROFILE = parse_profile(
    {"state": "status", "pending": ["running"], "succeeded": ["done"],
     "result_url": "result_url"}
)  # fmt: skip
SCENARIO = {
    "id": "stall",
    "endpoints": {
        "status": [
            {"code": 200, "body": {"status": "running"}, "delay_s": 0.05, "repeat": 3},
            {"code": 200, "body": {"status": "done", "result_url": "{base_url}/result"}},
        ],
        "result": [{"code": 200, "body": {"rows": 1}}],
    },
}
POLICY = Policy(base_delay_s=0.1, max_delay_s=0.2, deadline_s=60, max_requests=20)
PAUSE_S = 3.0


def _worker(store: str, *flags: str, failpoint: str | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("WAITBOUND_FAILPOINT", None)
    if failpoint:
        env["WAITBOUND_FAILPOINT"] = failpoint
    return subprocess.Popen(
        [sys.executable, "-m", "waitbound", "worker", "--store", store, *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _reserved_by(store: str, operation_id: str, process: subprocess.Popen[str]) -> Record:
    """Wait (a condition, not a duration) until *process* holds a reservation of the
    operation; return the record."""
    opened = open_store(store)
    try:
        end = time.monotonic() + 30
        while True:
            record = opened.get(operation_id)
            assert record is not None
            owner = record.lease_owner or ""
            if record.in_flight and f":{process.pid}:" in owner:
                return record
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < end, "the worker never reserved the operation"
            time.sleep(0.02)
    finally:
        opened.close()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store of each kind the fleet shares."""
    if request.param == "sqlite":
        yield str(tmp_path / "fleet.db")
        return
    with fresh_database() as dsn:
        yield dsn


def _check(sim: Simulator, record: Record, events: list[AuditEvent]) -> None:
    """The promises a stall keeps, read from the simulator's log and the story."""
    log = sorted(sim.log(), key=lambda e: e.at_s)
    for before, after in pairwise(log):
        assert after.at_s >= before.answered_at_s, "two requests of one operation in flight"
    assert sim.count("result") <= 1
    assert record.finished_at is not None
    assert all(entry.at <= record.finished_at for entry in log), "a request after the outcome"
    # each request the provider got is recorded once: observed (answered, or failed at
    # the client: a timeout on a loaded machine), or noted as a late answer
    observed = [e for e in events if e.kind == "observed"]
    answered = [e for e in observed if e.data.get("http_status") is not None]
    late = [e for e in events if e.kind == "late_answer"]
    assert len(answered) + len(late) <= len(log) <= len(observed) + len(late), [
        e.summary for e in events
    ]


@pytest.mark.e2e
@pytest.mark.parametrize("point", ["reserved-status", "answered-status", "saving-status"])
def test_a_worker_process_stalled_past_its_lease_never_doubles_a_request(
    store_url: str, point: str
) -> None:
    """Worker A stalls 3 s (lease 1 s) at the point; workers B (and C, on PostgreSQL)
    take the operation over: the provider never has two of its requests in flight, and
    the story says what became of A's request (not sent, or a late answer)."""
    with Simulator(parse_scenario(SCENARIO)) as sim:
        store = open_store(store_url)
        op = start(Operation(status_url=f"{sim.base_url}/status", profile=PROFILE,
                             policy=POLICY), store=store)  # fmt: skip
        store.close()
        flags = ("--until-idle", "--lease", "1s")
        stalled = _worker(store_url, *flags, failpoint=f"{point}:1:pause={PAUSE_S}")
        _reserved_by(store_url, op.operation_id, stalled)
        others = [_worker(store_url, *flags) for _ in range(2 if "postgres" in store_url else 1)]
        for worker in (stalled, *others):
            _, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err
        opened = open_store(store_url)
        record = opened.get(op.operation_id)
        events = [s.event for s in opened.audit(op.operation_id)]
        kinds = [e.kind for e in events]
        opened.close()
        assert record is not None
        assert record.outcome is OutcomeKind.SUCCEEDED
        _check(sim, record, events)
    if point == "reserved-status":
        assert "send_skipped" in kinds  # A's lease had run out: it sent nothing
    elif "answer_lost" in kinds:  # taken over while A held its answer
        assert "late_answer" in kinds


@pytest.mark.e2e
@pytest.mark.parametrize("lease", ["1s", "30s"])
def test_sigterm_during_a_stall_sends_nothing_and_exits_promptly(
    tmp_path: Path, lease: str
) -> None:
    """SIGTERM while a worker stalls after reserving: whether its lease ran out (1 s) or
    still holds (30 s), the request is not sent; the reservation is released (nothing in
    flight, not counted) and the worker exits 0 soon after the stall ends."""
    store_url = str(tmp_path / "s.db")
    with Simulator(parse_scenario(SCENARIO)) as sim:
        store = open_store(store_url)
        op = start(Operation(status_url=f"{sim.base_url}/status", profile=PROFILE,
                             policy=POLICY), store=store)  # fmt: skip
        store.close()
        worker = _worker(store_url, "--lease", lease, failpoint=f"reserved:1:pause={PAUSE_S}")
        _reserved_by(store_url, op.operation_id, worker)
        worker.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        _, err = worker.communicate(timeout=60)
        took_s = time.monotonic() - signalled
        assert worker.returncode == 0, err
        assert sim.count("status") == 0
    opened = open_store(store_url)
    record = opened.get(op.operation_id)
    kinds = [s.event.kind for s in opened.audit(op.operation_id)]
    opened.close()
    assert record is not None
    assert (record.in_flight, record.lease_owner, record.status_requests_used) == (None, None, 0)
    assert kinds[-1] == "send_skipped"
    # the stall itself (at most PAUSE_S), then the release: not a request's timeout
    assert took_s < PAUSE_S + 15
