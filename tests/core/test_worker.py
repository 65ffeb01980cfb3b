"""The worker: every due operation driven to its outcome, one owner at a time."""

from __future__ import annotations

import random
import socket
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest

from tests.core.harness import SEED
from tests.fakes import START, Autojump, FakeClock, autojump
from waitbound import (
    AuditEvent,
    ConflictError,
    DelaySource,
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    Record,
    UsageError,
    WorkerSettings,
    parse_profile,
    start,
    work,
)
from waitbound._model._push import InboundDelivery
from waitbound._model._record import Push
from waitbound._rules._controller import lease_margin_s
from waitbound.stores._protocol import Write

PROFILE = parse_profile({"state": "status", "pending": ["running"], "succeeded": ["done"]})
FAST = Policy(base_delay_s=0.02, max_delay_s=0.05, min_delay_s=0.01, deadline_s=30)


class Provider:
    """Each job answers running twice, then done, after *latency_s* of virtual time;
    overlapping requests for one job are noted."""

    def __init__(self, jump: Autojump, latency_s: float = 0.005) -> None:
        self.jump, self.latency_s = jump, latency_s
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
        await self.jump.sleep(self.latency_s)
        with self.lock:
            self.in_flight.discard(job)
        return httpx.Response(200, json={"status": "done" if count >= 3 else "running"})


def test_worker_drives_every_operation_to_its_outcome_until_idle() -> None:
    """40 detached operations, one worker: each ends succeeded after exactly 3 polls."""
    store = MemoryStore()
    clock = FakeClock()
    ids = [
        start(
            Operation(status_url=f"http://p{i % 3}.test/jobs/{i}", profile=PROFILE, policy=FAST),
            store=store,
            clock=clock,
        ).operation_id
        for i in range(40)
    ]
    jump = Autojump(clock)
    provider = Provider(jump)
    steps = _run_worker(store, provider, clock, jump, concurrency=8, idle_s=0.05)
    outcomes = [store.get(i).outcome for i in ids]  # type: ignore[union-attr]
    assert outcomes == [OutcomeKind.SUCCEEDED] * 40
    assert set(provider.seen.values()) == {3}
    assert provider.overlaps == 0
    assert steps == 120
    assert store.pending_summary() == (0, None)


def test_worker_stops_when_asked_and_leaves_no_lease_behind() -> None:
    """Setting stop ends the worker after its steps in flight; no operation stays leased."""
    store = MemoryStore()
    clock = FakeClock()
    slow = Policy(base_delay_s=5, max_delay_s=5, deadline_s=60)
    op = start(Operation(status_url="http://p.test/jobs/1", profile=PROFILE, policy=slow),
               store=store, clock=clock)  # fmt: skip
    jump = Autojump(clock)
    provider = Provider(jump)

    async def main() -> None:
        stop = anyio.Event()
        transport = httpx.MockTransport(provider)
        async with (
            httpx.AsyncClient(transport=transport) as client,
            autojump(jump),
            anyio.create_task_group() as group,
        ):
            group.start_soon(lambda: work(store, client=client, stop=stop, clock=clock,
                                          sleep=jump.sleep, inline_store=True,
                                          settings=WorkerSettings(idle_s=0.05)))  # fmt: skip
            await jump.sleep(0.3)
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
    meanwhile is swept by the worker's next pass and the job is polled at once (within
    one idle pause), then found done."""
    clock = FakeClock()
    jump = Autojump(clock)
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
    store.save(record.evolve(push=Push(webhook="reports")), [])
    polls: list[datetime] = []
    settings_idle_s = 0.01

    async def provider(request: httpx.Request) -> httpx.Response:
        polls.append(clock.now())
        return httpx.Response(200, json={"status": "done" if len(polls) > 1 else "running"})

    async def main() -> None:
        settings = WorkerSettings(until_idle=True, idle_s=settings_idle_s)
        transport = httpx.MockTransport(provider)
        with anyio.fail_after(10):
            async with (
                httpx.AsyncClient(transport=transport) as client,
                autojump(jump),
                anyio.create_task_group() as group,
            ):
                group.start_soon(
                    lambda: work(
                        store, settings=settings, client=client, clock=clock,
                        rng=random.Random(SEED), sleep=jump.sleep, inline_store=True,
                    )
                )  # fmt: skip
                while not polls:
                    await jump.sleep(0.005)
                await jump.sleep(0.05)  # the worker idles: the backup poll is not due
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
    assert polls[0] == START
    assert len(polls) == 2
    # the delivery was stored 0.055 s in (the test's own waits): polled one pass later
    assert (polls[1] - START).total_seconds() <= 0.055 + settings_idle_s + 1e-9
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
    store.save(
        record.evolve(
            schedule=record.schedule.evolve(next_poll_at=START.replace(year=START.year + 1))
        ),
        [],
    )
    stop = anyio.Event()
    pauses: list[float] = []
    polls: list[str] = []

    async def wake(pause_s: float) -> None:
        pauses.append(pause_s)
        if len(pauses) == 1:  # "a webhook made it due": the worker must look now
            due = store.get(first.operation_id)
            assert due is not None
            store.save(due.evolve(schedule=due.schedule.evolve(next_poll_at=clock.now())), [])
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


# --- batches, leases and pacing -----------------------------------------------------


class Recording(MemoryStore):
    """A memory store that notes every call the worker makes of it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.batches: list[int] = []

    def get(self, operation_id: str) -> Record | None:
        self.calls.append("get")
        return super().get(operation_id)

    def save(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        self.calls.append("save")
        return super().save(record, events)

    def save_many(self, items: Sequence[Write]) -> list[Record | ConflictError]:
        self.calls.append("save_many")
        self.batches.append(len(items))
        return super().save_many(items)

    def reserve_due(self, **kwargs: Any) -> list[Record]:
        self.calls.append("reserve_due")
        return super().reserve_due(**kwargs)

    def claim_due(self, **kwargs: Any) -> list[Record]:
        self.calls.append("claim_due")
        return super().claim_due(**kwargs)

    def next_claimable(self, **kwargs: Any) -> tuple[datetime | None, list[str]]:
        self.calls.append("next_claimable")
        return super().next_claimable(**kwargs)

    def pending_summary(self) -> tuple[int, datetime | None]:
        self.calls.append("pending_summary")
        return super().pending_summary()


def _started(store: MemoryStore, clock: FakeClock, n: int, policy: Policy = FAST) -> list[str]:
    return [
        start(
            Operation(status_url=f"http://p.test/jobs/{i}", profile=PROFILE, policy=policy),
            store=store,
            clock=clock,
        ).operation_id
        for i in range(n)
    ]


def _run_worker(
    store: MemoryStore, handler: Any, clock: FakeClock, jump: Autojump | None = None,
    **settings: Any,
) -> int:  # fmt: skip
    """Run one worker until idle on virtual time that moves only when it is idle (its
    store calls made on the loop), so nothing depends on the machine's speed."""
    jump = jump or Autojump(clock)

    async def main() -> int:
        async with (
            httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
            autojump(jump),
        ):
            with anyio.fail_after(60):  # a safety net only: virtual time never waits for it
                return await work(
                    store,
                    settings=WorkerSettings(until_idle=True, **settings),
                    client=client,
                    clock=clock,
                    sleep=jump.sleep,
                    rng=random.Random(SEED),
                    inline_store=True,
                )

    return anyio.run(main)


def test_a_reservation_holds_exactly_the_lease_the_worker_asked_for() -> None:
    """While its request is in flight (what a killed worker leaves behind), the
    operation's lease ends lease_s after the reservation, not request timeout + the
    policy's lease_s; the request's timeout ends a margin before the lease."""
    clock = FakeClock()
    store = MemoryStore()
    policy = replace(FAST, request_timeout_s=30, lease_s=60)
    [op] = _started(store, clock, 1, policy)
    leases: list[tuple[float, str | None]] = []

    async def provider(request: httpx.Request) -> httpx.Response:
        held = store.get(op)
        assert held is not None
        assert held.lease_expires_at is not None
        leases.append(((held.lease_expires_at - clock.now()).total_seconds(), held.in_flight))
        return httpx.Response(200, json={"status": "done"})

    _run_worker(store, provider, clock, lease_s=7)
    assert leases == [(7.0, "status")]
    reserved = [e.event for e in store.audit(op) if e.event.kind == "reserved"]
    assert [e.data["timeout_s"] for e in reserved] == [7 - lease_margin_s(7)]
    assert lease_margin_s(7) == pytest.approx(0.7)
    done = store.get(op)
    assert done is not None
    assert (done.outcome, done.lease_owner, done.lease_expires_at) == (
        OutcomeKind.SUCCEEDED,
        None,
        None,
    )


def test_a_worker_waits_out_another_holders_lease_in_one_sleep() -> None:
    """A due operation leased by a live worker elsewhere for 13 s: the worker sleeps until
    the lease expires (one sleep of 13 s) instead of re-reading every 10 ms, and takes
    the operation then; a handful of store reads in all."""
    clock = FakeClock()
    store = Recording()
    [op] = _started(store, clock, 1)
    record = store.get(op)
    assert record is not None
    until = clock.now() + timedelta(seconds=13)
    store.save(record.evolve(lease=record.lease.held("elsewhere:1:x", until)), [])
    store.calls.clear()
    polls: list[datetime] = []
    looks: list[str] = []

    async def provider(request: httpx.Request) -> httpx.Response:
        polls.append(clock.now())
        looks.extend(store.calls)  # every store call until the operation was taken
        return httpx.Response(200, json={"status": "done"})

    _run_worker(store, provider, clock, idle_s=60)
    assert polls == [until]
    assert clock.sleeps[0] == pytest.approx(13.0)
    # One look, one sleep, the reservation (virtual time moves only when the worker is
    # idle, so nothing else runs before the request).
    assert looks == ["reserve_due", "next_claimable", "pending_summary", "reserve_due"]


def test_a_worker_takes_over_a_lease_whose_holder_is_gone() -> None:
    """A lease left by a process of this machine that no longer exists is not waited out:
    the operation is polled at once, its lost answer noted."""
    clock = FakeClock()
    store = MemoryStore()
    [op] = _started(store, clock, 1)
    record = store.get(op)
    assert record is not None
    dead = f"{socket.gethostname()}:{2**22 + 12345}:dead"  # above Linux's pid_max default
    held = record.evolve(
        lease=record.lease.evolve(
            lease_owner=dead, lease_expires_at=clock.now() + timedelta(hours=1), in_flight="status"
        ),
        counters=record.counters.evolve(status_requests_used=1),
    )
    store.save(held, [])
    polls: list[datetime] = []

    async def provider(request: httpx.Request) -> httpx.Response:
        polls.append(clock.now())
        return httpx.Response(200, json={"status": "done"})

    _run_worker(store, provider, clock, idle_s=60)
    assert polls == [START]
    done = store.get(op)
    assert done is not None
    assert done.outcome is OutcomeKind.SUCCEEDED
    assert done.status_requests_used == 2
    assert "answer_lost" in [e.event.kind for e in store.audit(op)]


def test_answers_in_flight_together_are_persisted_together_and_nothing_is_reread() -> None:
    """Eight operations answered at once: their answers go to the store in fewer
    save_many calls than answers (group commit); the worker never calls save or get."""
    clock = FakeClock()
    store = Recording()
    ids = _started(store, clock, 8)
    store.calls.clear()
    arrived = 0
    together = anyio.Event()

    async def provider(request: httpx.Request) -> httpx.Response:
        nonlocal arrived
        arrived += 1
        if arrived == 8:
            together.set()
        await together.wait()
        return httpx.Response(200, json={"status": "done"})

    steps = _run_worker(store, provider, clock, concurrency=8, per_origin_concurrency=8)
    assert steps == 8
    assert all(store.get(i).outcome is OutcomeKind.SUCCEEDED for i in ids)  # type: ignore[union-attr]
    assert "save" not in store.calls
    assert store.calls.count("get") == 8  # the assertion's own reads above
    assert sum(store.batches) == 8
    assert len(store.batches) < 8
    assert max(store.batches) >= 2


def test_per_origin_limits_are_decided_before_the_reservation() -> None:
    """One request at a time per origin: while one is in flight, the other due operations
    of that origin are not reserved (no lease, nothing counted); they wait for their turn."""
    clock = FakeClock()
    jump = Autojump(clock)
    store = MemoryStore()
    ids = _started(store, clock, 3)
    reserved_during: list[int] = []

    async def provider(request: httpx.Request) -> httpx.Response:
        records = [store.get(i) for i in ids]
        reserved_during.append(sum(r is not None and r.in_flight is not None for r in records))
        await jump.sleep(0.002)
        return httpx.Response(200, json={"status": "done"})

    steps = _run_worker(store, provider, clock, jump, concurrency=8, per_origin_concurrency=1)
    assert steps == 3
    assert reserved_during == [1, 1, 1]


def test_a_token_bucket_leaves_operations_unreserved_until_a_token_is_there() -> None:
    """Rate 2/s, burst 1: three due operations of one origin are polled at 0, 0.5 and 1 s
    of virtual time; while waiting for a token, none of them is reserved."""
    clock = FakeClock()
    store = MemoryStore()
    ids = _started(store, clock, 3)
    polls: list[float] = []
    counted: list[int] = []

    async def provider(request: httpx.Request) -> httpx.Response:
        polls.append(clock.elapsed_s)
        records = [store.get(i) for i in ids]
        counted.append(sum(r.status_requests_used for r in records if r is not None))
        return httpx.Response(200, json={"status": "done"})

    _run_worker(store, provider, clock, per_origin_rate=2, per_origin_burst=1, idle_s=60)
    assert polls == pytest.approx([0.0, 0.5, 1.0])
    assert counted == [1, 2, 3]  # never a reservation ahead of its request's token
