"""The worker: every due operation driven to its outcome, one owner at a time."""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import replace
from datetime import datetime

import anyio
import httpx
import pytest

from tests.core.harness import SEED
from tests.fakes import START, FakeClock
from waitbound import (
    DelaySource,
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    UsageError,
    WorkerSettings,
    parse_profile,
    start,
    work,
)
from waitbound._push import InboundDelivery
from waitbound._record import Push

PROFILE = parse_profile({"state": "status", "pending": ["running"], "succeeded": ["done"]})
FAST = Policy(base_delay_s=0.02, max_delay_s=0.05, min_delay_s=0.01, deadline_s=30)


class Provider:
    """Each job answers running twice, then done; overlapping requests for one job are noted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()
        self.in_flight: set[str] = set()
        self.overlaps = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        job = request.url.path
        with self.lock:
            self.overlaps += job in self.in_flight
            self.in_flight.add(job)
            self.seen[job] += 1
            count = self.seen[job]
        await anyio.sleep(0.005)
        with self.lock:
            self.in_flight.discard(job)
        return httpx.Response(200, json={"status": "done" if count >= 3 else "running"})


def test_worker_drives_every_operation_to_its_outcome_until_idle() -> None:
    """40 detached operations, one worker: each ends succeeded after exactly 3 polls."""
    store = MemoryStore()
    ids = [
        start(
            Operation(status_url=f"http://p{i % 3}.test/jobs/{i}", profile=PROFILE, policy=FAST),
            store=store,
        ).operation_id
        for i in range(40)
    ]
    provider = Provider()

    async def main() -> int:
        async with httpx.AsyncClient(transport=httpx.MockTransport(provider)) as client:
            return await work(
                store,
                settings=WorkerSettings(concurrency=8, until_idle=True, idle_s=0.05),
                client=client,
            )

    steps = anyio.run(main)
    outcomes = [store.get(i).outcome for i in ids]  # type: ignore[union-attr]
    assert outcomes == [OutcomeKind.SUCCEEDED] * 40
    assert set(provider.seen.values()) == {3}
    assert provider.overlaps == 0
    assert steps == 120
    assert store.pending_summary() == (0, None)


def test_worker_stops_when_asked_and_leaves_no_lease_behind() -> None:
    """Setting stop ends the worker after its steps in flight; no operation stays leased."""
    store = MemoryStore()
    slow = Policy(base_delay_s=5, max_delay_s=5, deadline_s=60)
    op = start(Operation(status_url="http://p.test/jobs/1", profile=PROFILE, policy=slow),
               store=store)  # fmt: skip
    provider = Provider()

    async def main() -> None:
        stop = anyio.Event()
        transport = httpx.MockTransport(provider)
        async with (
            httpx.AsyncClient(transport=transport) as client,
            anyio.create_task_group() as group,
        ):
            group.start_soon(lambda: work(store, client=client, stop=stop,
                                              settings=WorkerSettings(idle_s=0.05)))  # fmt: skip
            await anyio.sleep(0.3)
            stop.set()

    anyio.run(main)
    record = store.get(op.operation_id)
    assert record is not None
    assert record.status_requests_used == 1
    assert record.lease_owner is None
    assert record.outcome is None


@pytest.mark.parametrize("field", ["concurrency", "per_origin_burst"])
def test_worker_settings_are_checked(field: str) -> None:
    """Nonsense settings are refused with one line."""
    with pytest.raises(UsageError, match=field):
        WorkerSettings(**{field: 0})  # type: ignore[arg-type]


def test_a_webhook_delivery_makes_the_worker_poll_at_once() -> None:
    """An operation expecting webhooks is polled on the backup schedule; a delivery stored
    meanwhile is swept by the worker's next pass and the job is polled at once (no
    virtual time passes), then found done."""
    clock = FakeClock()
    store = MemoryStore()
    policy = Policy(
        base_delay_s=5, max_delay_s=120, deadline_s=600, backoff_growth=2, backoff_jitter_floor=0.5
    )
    first = start(
        Operation(status_url="http://p.test/jobs/1", profile=PROFILE, policy=policy, job_id="j-1"),
        store=store,
        clock=clock,
    )
    record = store.get(first.operation_id)
    assert record is not None
    store.save(replace(record, push=Push(webhook="reports")), [])
    polls: list[datetime] = []

    async def provider(request: httpx.Request) -> httpx.Response:
        polls.append(clock.now())
        return httpx.Response(200, json={"status": "done" if len(polls) > 1 else "running"})

    async def main() -> None:
        settings = WorkerSettings(until_idle=True, idle_s=0.01)
        transport = httpx.MockTransport(provider)
        with anyio.fail_after(10):
            async with (
                httpx.AsyncClient(transport=transport) as client,
                anyio.create_task_group() as group,
            ):
                group.start_soon(
                    lambda: work(
                        store, settings=settings, client=client, clock=clock,
                        rng=random.Random(SEED),
                    )
                )  # fmt: skip
                while not polls:
                    await anyio.sleep(0.005)
                await anyio.sleep(0.05)  # the worker idles: the backup poll is not due
                assert len(polls) == 1
                scheduled = store.get(first.operation_id)
                assert scheduled is not None
                assert scheduled.delay_source is DelaySource.BACKUP_POLLING
                expected = random.Random(SEED).uniform(10, 20)  # raw = 5 x 4 (backup_factor)
                assert (scheduled.next_poll_at - START).total_seconds() == pytest.approx(expected)
                store.put_delivery(
                    InboundDelivery(provider="reports", webhook_id="msg_1", received_at=START,
                                    job_id="j-1", payload={"data": {"id": "j-1"}})
                )  # fmt: skip

    anyio.run(main)
    done = store.get(first.operation_id)
    assert done is not None
    assert done.outcome is OutcomeKind.SUCCEEDED
    assert polls == [START, START]
    assert done.push.deliveries == 1
    assert store.pending_deliveries(limit=10) == []


def test_an_empty_inbox_costs_the_worker_one_query_a_pass() -> None:
    """The sweep asks pending_deliveries once a pass and nothing else when it is empty."""
    calls: list[int] = []

    class CountingStore(MemoryStore):
        def pending_deliveries(self, *, limit: int) -> list[InboundDelivery]:
            calls.append(limit)
            return super().pending_deliveries(limit=limit)

    store = CountingStore()
    anyio.run(lambda: work(store, settings=WorkerSettings(until_idle=True)))
    assert calls == [100]


def test_a_wake_ends_the_workers_idle_pause_at_once() -> None:
    """With an hour's idle pause, a wake that returns makes the worker look for due work
    at once: the operation made due meanwhile is polled without the pause running out."""
    clock = FakeClock()
    store = MemoryStore()
    later = Policy(base_delay_s=5, max_delay_s=120, deadline_s=7200)
    first = start(
        Operation(status_url="http://p.test/jobs/1", profile=PROFILE, policy=later),
        store=store,
        clock=clock,
    )
    record = store.get(first.operation_id)
    assert record is not None
    store.save(replace(record, next_poll_at=START.replace(year=START.year + 1)), [])
    stop = anyio.Event()
    pauses: list[float] = []
    polls: list[str] = []

    async def wake(pause_s: float) -> None:
        pauses.append(pause_s)
        if len(pauses) == 1:  # "a webhook made it due": the worker must look now
            due = store.get(first.operation_id)
            assert due is not None
            store.save(replace(due, next_poll_at=clock.now()), [])
            return
        stop.set()
        await anyio.sleep_forever()

    async def provider(request: httpx.Request) -> httpx.Response:
        polls.append(request.url.path)
        return httpx.Response(200, json={"status": "done"})

    async def main() -> None:
        settings = WorkerSettings(idle_s=3600)
        async with httpx.AsyncClient(transport=httpx.MockTransport(provider)) as client:
            with anyio.fail_after(10):
                await work(store, settings=settings, client=client, clock=clock, stop=stop,
                           wake=wake, rng=random.Random(SEED))  # fmt: skip

    anyio.run(main)
    assert polls == ["/jobs/1"]
    assert pauses[0] == 3600
    done = store.get(first.operation_id)
    assert done is not None
    assert done.outcome is OutcomeKind.SUCCEEDED
