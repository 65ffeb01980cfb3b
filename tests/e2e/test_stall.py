"""Worker processes that stall past their lease (``WAITBOUND_FAILPOINT=…:pause=S``),
on the real CLI and simulator: no two requests of one operation in flight, no request
after the outcome, no result fetched twice, no answer recorded against another request;
SIGTERM during a stall. The pause points: ``reserved``, ``send.after_plan``,
``send.after_connect``, ``send.after_send``, ``answered``, ``saving``.

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
from waitbound import (
    AuditEvent,
    Operation,
    OutcomeKind,
    Policy,
    Reason,
    Record,
    parse_profile,
    start,
)
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


def _reserved_by(
    store: str, operation_id: str, process: subprocess.Popen[str], kind: str | None = None
) -> Record:
    """Wait (a condition, not a duration) until *process* holds a reservation of the
    operation (of a *kind* request, when given); return the record."""
    opened = open_store(store)
    try:
        end = time.monotonic() + 30
        while True:
            record = opened.get(operation_id)
            assert record is not None
            owner = record.lease_owner or ""
            mine = record.in_flight and f":{process.pid}:" in owner
            if mine and kind in (None, record.in_flight):
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
    assert sim.count("result") <= 1, "\n".join(f"{e.kind}: {e.summary}" for e in events)
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


UNSENT = ("reserved", "send.after_plan", "send.after_connect")
"""Pause points after which the stalled worker's lease no longer covers its request."""
POINTS = [
    "reserved-status",
    "send.after_plan-status",
    "send.after_connect-status",
    "send.after_send-status",
    "answered-status",
    "saving-status",
    "send.after_plan-result",
    "send.after_connect-result",
    "send.after_send-result",
]
"""Every pause point of a sender: after its reservation, after planning the send
(its lease checked), after opening its connection, after sending, after the answer,
before the save; on a status request, and the send's three on the result request."""


@pytest.mark.e2e
@pytest.mark.parametrize("point", POINTS)
def test_a_worker_process_stalled_past_its_lease_never_doubles_a_request(
    store_url: str, point: str
) -> None:
    """Worker A stalls 3 s (lease 1 s) at the point; workers B (and C, on PostgreSQL)
    take the operation over: the provider never has two of its requests in flight, gets
    no request after the outcome and the result at most once, and the story says what
    became of A's request (not sent, or a late answer). A stall on the result request
    starts the others only once A holds it."""
    name, _, kind = point.rpartition("-")
    with Simulator(parse_scenario(SCENARIO)) as sim:
        store = open_store(store_url)
        op = start(Operation(status_url=f"{sim.base_url}/status", profile=PROFILE,
                             policy=POLICY), store=store)  # fmt: skip
        store.close()
        flags = ("--until-idle", "--lease", "1s")
        stalled = _worker(store_url, *flags, failpoint=f"{point}:1:pause={PAUSE_S}")
        _reserved_by(store_url, op.operation_id, stalled, kind)
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
        ended = (record.outcome, record.reason)
        if kind == "status":
            assert record.outcome is OutcomeKind.SUCCEEDED
        else:  # taken over: the lost result answer is a person's; else A's own answer
            assert ended in ((OutcomeKind.SUCCEEDED, None),
                             (OutcomeKind.ESCALATED, Reason.RESULT_UNCONFIRMED)), ended  # fmt: skip
        _check(sim, record, events)
    if name in UNSENT:
        assert "send_skipped" in kinds  # A's lease had run out: it sent nothing
        if kind == "result":
            assert sim.count("result") == (record.outcome is OutcomeKind.SUCCEEDED)
    elif "answer_lost" in kinds:  # taken over while A held its answer
        assert "late_answer" in kinds


@pytest.mark.e2e
def test_a_result_answered_while_its_sender_stalled_is_read_not_asked_for_again(
    tmp_path: Path,
) -> None:
    """One worker stalls 3 s (lease 1 s, request timeout 0.9 s) right after sending the
    result request, and nobody takes the operation over: on waking it reads the answer
    that arrived meanwhile (not a timeout), saves it as its own request's, and the
    result is fetched once."""
    store_url = str(tmp_path / "s.db")
    with Simulator(parse_scenario(SCENARIO)) as sim:
        store = open_store(store_url)
        op = start(Operation(status_url=f"{sim.base_url}/status", profile=PROFILE,
                             policy=POLICY), store=store)  # fmt: skip
        store.close()
        worker = _worker(store_url, "--until-idle", "--lease", "1s",
                         failpoint=f"send.after_send-result:1:pause={PAUSE_S}")  # fmt: skip
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        assert sim.count("result") == 1
    opened = open_store(store_url)
    record = opened.get(op.operation_id)
    events = [s.event for s in opened.audit(op.operation_id)]
    opened.close()
    assert record is not None
    assert record.outcome is OutcomeKind.SUCCEEDED, [e.summary for e in events]
    assert record.result == {"rows": 1}
    assert not [e for e in events if e.kind in ("late_answer", "answer_lost")]


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
