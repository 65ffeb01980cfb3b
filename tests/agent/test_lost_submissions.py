"""A keyed MCP submission whose answer was lost (the server was killed mid-submit).

The agent may resend it with its idempotency key until its deadline; until then it is
``submitting`` and never reported as started. Nobody resending it, it is settled at
its deadline by the background worker or the first look (escalated ``provider_failure``:
it may have created a job; a person decides, with ``abandon``), and listed by
``escalations``. ``tasks/cancel`` settles it at once instead of refusing it.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.agent.test_mcp_tools import RECEIPT, RUNNING, SECRET, config
from waitbound import Phase, SQLiteStore, WorkerSettings, escalations
from waitbound.mcp import Jobs, parse_config
from waitbound.sim import Simulator, parse_scenario
from waitbound.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Lost:
    jobs: Jobs
    store: SQLiteStore
    clock: FakeClock
    sim: Simulator
    operation_id: str

    def after_deadline(self) -> None:
        record = self.store.get(self.operation_id)
        assert record is not None
        self.clock.advance((record.deadline_at - self.clock.now()).total_seconds() + 1)


@asynccontextmanager
async def lost_submission(tmp_path: Path, **provider: Any) -> AsyncIterator[Lost]:
    """A keyed job started, then left as a server killed mid-submit leaves it."""
    scenario = parse_scenario(
        {"id": "lost", "endpoints": {"submit": [RECEIPT], "status": [RUNNING]}}, source="test"
    )
    clock = FakeClock(datetime.now(UTC))
    with Simulator(scenario) as sim:
        parsed = parse_config(
            config(sim.base_url, **provider), base_dir=tmp_path, environ={"REPORTS_TOKEN": SECRET}
        )
        store = SQLiteStore(tmp_path / "s.db")
        try:
            jobs = Jobs(parsed, store, clock=clock)
            started = await jobs.start_job("reports", idempotency_key="k-lost")
            record = store.get(str(started["operation_id"]))
            assert record is not None
            store.save(
                record.evolve(
                    ending=record.ending.evolve(phase=Phase.SUBMITTING),
                    counters=record.counters.evolve(submit_attempts=1),
                    submission=record.submission.evolve(job_id=None),
                    lease=record.lease.held(
                        f"{socket.gethostname()}:999999999:dead",
                        record.created_at + timedelta(hours=1),
                    ),
                ),
                [],
            )
            yield Lost(jobs, store, clock, sim, record.operation_id)
        finally:
            store.close()


async def test_a_lost_keyed_submission_is_never_reported_as_started(tmp_path: Path) -> None:
    """Before its deadline: ``submitting``, NOT known to have started, resend with the
    key; the task is ``working`` with the same words, never "has STARTED"."""
    async with lost_submission(tmp_path) as lost:
        sent = len(lost.sim.log())
        looked = await lost.jobs.check_job(lost.operation_id)
        task = await lost.jobs.task_now(lost.operation_id)
        assert len(lost.sim.log()) == sent
    message, status_message = str(looked["message"]), str(task["statusMessage"])
    assert looked["status"] == "submitting"
    assert "NOT known to have started" in message
    assert "same idempotency_key" in message
    assert task["status"] == "working"
    assert "NOT known to have started" in status_message
    assert "STARTED" not in status_message


async def test_a_lost_keyed_submission_past_its_deadline_is_settled_by_the_worker(
    tmp_path: Path,
) -> None:
    """Past its deadline with nobody looking: the MCP server's background worker
    escalates it (``provider_failure``, it may have created a job), ``escalations``
    lists it with ``abandon``, and its task asks for a decision."""
    async with lost_submission(tmp_path) as lost:
        lost.after_deadline()
        sent = len(lost.sim.log())
        with anyio.fail_after(20):
            await lost.jobs.drive(anyio.Event(), WorkerSettings(until_idle=True, idle_s=0.05))
        record = lost.store.get(lost.operation_id)
        listed = escalations(store=lost.store, clock=lost.clock)
        task = lost.jobs.task(lost.operation_id)
        assert len(lost.sim.log()) == sent  # nothing is resent without its body
    assert record is not None
    assert record.outcome is not None
    assert record.outcome.value == "escalated"
    assert record.reason is not None
    assert record.reason.value == "provider_failure"
    assert "may have created a job" in str(record.error)
    [escalation] = [e for e in listed if e.operation_id == lost.operation_id]
    assert "abandon" in [option for option, _ in escalation.options]
    assert task["status"] == "input_required"


async def test_a_lost_keyed_submission_past_its_deadline_ends_at_the_first_look(
    tmp_path: Path,
) -> None:
    """``check_job`` past the deadline ends it honestly too (no worker needed)."""
    async with lost_submission(tmp_path) as lost:
        lost.after_deadline()
        looked = await lost.jobs.check_job(lost.operation_id)
    assert looked["status"] == "escalated"
    assert looked["reason"] == "provider_failure"
    assert "abandon" in str(looked["escalation"])


async def test_tasks_cancel_settles_a_lost_submission_instead_of_refusing_it(
    tmp_path: Path,
) -> None:
    """``tasks/cancel`` on a submission with no known job: nothing can be canceled at
    the provider, so it is stopped (never resent) and a person decides."""
    async with lost_submission(tmp_path, allow_cancel=True) as lost:
        lost.jobs.cancel_task(lost.operation_id)
        record = lost.store.get(lost.operation_id)
        task = lost.jobs.task(lost.operation_id)
    assert record is not None
    assert record.outcome is not None
    assert record.outcome.value == "escalated"
    assert record.decision_request is not None
    assert task["status"] == "input_required"
