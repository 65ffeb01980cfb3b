"""The worker's commit pause: one group commit carries the answers of many steps.

Virtual time throughout (``Autojump``: time moves only when every task is idle, store
calls on the loop), so what is asserted is the order and grouping of writes, never how
fast the machine is.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.core.harness import SEED
from tests.fakes import Autojump, FakeClock, autojump
from waitbound import (
    ConflictError,
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    Record,
    SQLiteStore,
    UsageError,
    WorkerSettings,
    parse_profile,
    start,
    verify_audit,
    work,
)
from waitbound._base._failpoints import inject
from waitbound._engine._worker import DEFAULT_COMMIT_PAUSE_S, MAX_COMMIT_PAUSE_S
from waitbound._rules._controller import lease_margin_s
from waitbound.stores import Store
from waitbound.stores._protocol import Write

PROFILE = parse_profile({"state": "status", "pending": ["running"], "succeeded": ["done"]})
ONCE = Policy(base_delay_s=0.02, max_delay_s=0.05, min_delay_s=0.01, deadline_s=30)


class Batches(MemoryStore):
    """A memory store that notes each ``save_many``: its size and the virtual time."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.batches: list[tuple[int, float]] = []

    def save_many(self, items: Sequence[Write]) -> list[Record | ConflictError]:
        self.batches.append((len(items), self.clock.monotonic()))
        return super().save_many(items)


def _started(store: Store, clock: FakeClock, n: int) -> list[str]:
    return [
        start(
            Operation(status_url=f"http://p.test/jobs/{i}", profile=PROFILE, policy=ONCE),
            store=store,
            clock=clock,
        ).operation_id
        for i in range(n)
    ]


def _run(
    store: Store, handler: Any, clock: FakeClock, jump: Autojump, **settings: Any
) -> int:  # fmt: skip
    async def main() -> int:
        async with (
            httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
            autojump(jump),
        ):
            with anyio.fail_after(60):  # a safety net only: virtual time never waits for it
                return await work(
                    store,
                    settings=WorkerSettings(
                        until_idle=True, concurrency=8, per_origin_concurrency=8, **settings
                    ),
                    client=client,
                    clock=clock,
                    sleep=jump.sleep,
                    rng=random.Random(SEED),
                    inline_store=True,
                )

    return anyio.run(main)


def _staggered(jump: Autojump, step_s: float) -> Any:
    """A provider whose job *i* answers ``done`` after ``(i + 1) * step_s`` (virtual)."""

    async def provider(request: httpx.Request) -> httpx.Response:
        i = int(request.url.path.rsplit("/", 1)[1])
        await jump.sleep((i + 1) * step_s)
        return httpx.Response(200, json={"status": "done"})

    return provider


def test_answers_arriving_within_the_pause_share_one_commit() -> None:
    """Eight answers 0.1 ms apart, a 2 ms pause: one save_many carries all eight."""
    clock = FakeClock()
    jump = Autojump(clock)
    store = Batches(clock)
    ids = _started(store, clock, 8)
    steps = _run(store, _staggered(jump, 0.0001), clock, jump, commit_pause_s=0.002)
    assert steps == 8
    assert [size for size, _ in store.batches] == [8]
    assert all(store.get(i).outcome is OutcomeKind.SUCCEEDED for i in ids)  # type: ignore[union-attr]


def test_without_a_pause_each_answer_is_its_own_commit() -> None:
    """The same answers with commit_pause_s=0: eight commits of one (the old behaviour)."""
    clock = FakeClock()
    jump = Autojump(clock)
    store = Batches(clock)
    _started(store, clock, 8)
    _run(store, _staggered(jump, 0.0001), clock, jump, commit_pause_s=0)
    assert [size for size, _ in store.batches] == [1] * 8


def test_the_pause_is_bounded_and_never_waits_for_a_slow_answer() -> None:
    """Job 0 answers after 1 ms, job 1 after 1 s: with a 5 ms pause, job 0's answer is
    written exactly 5 ms after it arrived, alone; job 1's when it arrives (every step in
    flight has then queued: no pause at all)."""
    clock = FakeClock()
    jump = Autojump(clock)
    store = Batches(clock)
    _started(store, clock, 2)
    began = clock.monotonic()

    async def provider(request: httpx.Request) -> httpx.Response:
        i = int(request.url.path.rsplit("/", 1)[1])
        await jump.sleep(0.001 if i == 0 else 1.0)
        return httpx.Response(200, json={"status": "done"})

    _run(store, provider, clock, jump, commit_pause_s=0.005)
    [(first, first_at), (second, second_at)] = store.batches
    assert (first, second) == (1, 1)
    assert first_at - began == pytest.approx(0.001 + 0.005)
    assert second_at - began == pytest.approx(1.0)


def test_the_pause_ends_once_every_step_in_flight_has_queued() -> None:
    """Eight answers at the same instant and a long pause (50 ms): they are written at
    that instant, together; the pause is never waited out."""
    clock = FakeClock()
    jump = Autojump(clock)
    store = Batches(clock)
    _started(store, clock, 8)
    began = clock.monotonic()

    async def provider(request: httpx.Request) -> httpx.Response:
        await jump.sleep(0.01)
        return httpx.Response(200, json={"status": "done"})

    _run(store, provider, clock, jump, commit_pause_s=0.05)
    assert [size for size, _ in store.batches] == [8]
    assert store.batches[0][1] - began == pytest.approx(0.01)


def test_every_reservation_is_durable_before_its_request_while_answers_pause(
    tmp_path: Path,
) -> None:
    """A real SQLite store, a 5 ms pause: when each request arrives, its reservation is
    already committed (read back through a second connection to the file), while the
    answers before it may still wait in the pause."""
    clock = FakeClock()
    jump = Autojump(clock)
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    ids = _started(store, clock, 6)
    seen: list[tuple[str | None, int]] = []

    async def provider(request: httpx.Request) -> httpx.Response:
        i = int(request.url.path.rsplit("/", 1)[1])
        other = SQLiteStore(path)
        try:
            held = other.get(ids[i])
        finally:
            other.close()
        assert held is not None
        seen.append((held.in_flight, held.status_requests_used))
        await jump.sleep(0.0005 * (i + 1))
        return httpx.Response(200, json={"status": "done"})

    try:
        _run(store, provider, clock, jump, commit_pause_s=0.005)
        assert seen == [("status", 1)] * 6
        assert all(store.get(i).outcome is OutcomeKind.SUCCEEDED for i in ids)  # type: ignore[union-attr]
        assert verify_audit(store) == []
    finally:
        store.close()


class FailingBatch(SQLiteStore):
    """A SQLite store whose ``save_many`` of more than one record fails inside its
    transaction after every row was written (a disk error at commit, say), while
    ``fail`` is set."""

    fail = True
    saving = False

    def save_many(self, items: Sequence[Write]) -> list[Record | ConflictError]:
        self.saving = True
        try:
            return super().save_many(items)
        finally:
            self.saving = False

    def _write_all(self, db: sqlite3.Connection, items: Sequence[Write]) -> list[Record | None]:
        written = super()._write_all(db, items)
        if self.fail and self.saving and len(items) > 1:
            raise sqlite3.OperationalError("disk I/O error")
        return written


def test_a_paused_batch_that_fails_leaves_no_half_written_row(tmp_path: Path) -> None:
    """The batch's transaction fails after its rows were written: none of them is
    stored (each operation keeps its reservation: counted, leased, its audit chain
    intact), each step's failure is reported, and once the leases run out a worker
    takes the operations again and ends them within their budget."""
    clock = FakeClock()
    jump = Autojump(clock)
    store = FailingBatch(tmp_path / "store.db")
    ids = _started(store, clock, 4)
    requests: list[str] = []

    async def provider(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.path)
        await jump.sleep(0.0001 * len(requests))
        return httpx.Response(200, json={"status": "done"})

    errors: list[str] = []
    try:

        async def main() -> None:
            async with (
                httpx.AsyncClient(transport=httpx.MockTransport(provider)) as client,
                autojump(jump),
            ):
                stop = anyio.Event()

                def on_error(operation_id: str, exc: Exception) -> None:
                    errors.append(operation_id)
                    if len(errors) == 4:
                        stop.set()

                with anyio.fail_after(60):
                    await work(
                        store,
                        settings=WorkerSettings(concurrency=8, per_origin_concurrency=8,
                                                commit_pause_s=0.002, lease_s=5),
                        client=client, clock=clock, sleep=jump.sleep, stop=stop,
                        rng=random.Random(SEED), inline_store=True, on_error=on_error,
                    )  # fmt: skip

        anyio.run(main)
        assert sorted(errors) == sorted(ids)
        for operation_id in ids:
            held = store.get(operation_id)
            assert held is not None
            # The reservation, durable before the request; nothing of the answer.
            assert (held.in_flight, held.status_requests_used, held.outcome) == (
                "status",
                1,
                None,
            )
            assert [e.event.kind for e in store.audit(operation_id)][-1] == "reserved"
        assert verify_audit(store) == []
        store.fail = False
        clock.advance(5.0)  # the leases run out: the operations are taken again
        _run(store, provider, clock, jump, commit_pause_s=0.002, lease_s=5)
        for operation_id in ids:
            done = store.get(operation_id)
            assert done is not None
            assert done.outcome is OutcomeKind.SUCCEEDED
            assert done.status_requests_used == 2  # the lost answer's request stays counted
        assert len(requests) == 8
        assert verify_audit(store) == []
    finally:
        store.close()


def test_a_write_during_the_pause_conflicts_and_the_answer_is_applied_again() -> None:
    """While job 0's answer waits in the pause, someone else writes its record (a
    person's note): the batch's compare-and-swap refuses that one answer only (the
    other is written), the step reads the record again and writes its answer onto it;
    both changes are kept."""
    clock = FakeClock()
    jump = Autojump(clock)
    store = Batches(clock)
    ids = _started(store, clock, 2)

    async def provider(request: httpx.Request) -> httpx.Response:
        i = int(request.url.path.rsplit("/", 1)[1])
        await jump.sleep(0.001 if i == 0 else 0.002)
        if i == 1:  # job 0's answer is queued, the pause runs: a write of someone else
            held = store.get(ids[0])
            assert held is not None
            store.save(held.evolve(contract=held.contract.evolve(label="touched")), [])
        return httpx.Response(200, json={"status": "done"})

    _run(store, provider, clock, jump, commit_pause_s=0.005)
    assert [size for size, _ in store.batches] == [2, 1]
    first = store.get(ids[0])
    assert first is not None
    assert (first.outcome, first.label) == (OutcomeKind.SUCCEEDED, "touched")
    assert first.status_requests_used == 1
    second = store.get(ids[1])
    assert second is not None
    assert second.outcome is OutcomeKind.SUCCEEDED


def test_a_kill_at_the_committing_failpoint_is_reachable_in_process() -> None:
    """The ``committing`` failpoint (after the pause, before the batch's write) is
    passed once per batch; a pause there (a stalled process) delays the write only:
    the three answers (0.1 ms apart) are written together once the last one queued
    and the stall is over."""
    clock = FakeClock()
    jump = Autojump(clock)
    store = Batches(clock)
    _started(store, clock, 3)
    began = clock.monotonic()
    with inject("committing:1:pause=0.5"):
        _run(store, _staggered(jump, 0.0001), clock, jump, commit_pause_s=0.002)
    [(size, at)] = store.batches
    assert size == 3
    assert at - began == pytest.approx(0.0003 + 0.5)


@pytest.mark.parametrize("value", [-0.001, MAX_COMMIT_PAUSE_S * 2, float("nan")])
def test_a_commit_pause_out_of_range_is_refused(value: float) -> None:
    with pytest.raises(UsageError, match="commit_pause_s"):
        WorkerSettings(commit_pause_s=value)


def test_a_short_lease_cuts_the_pause_to_half_its_margin() -> None:
    """The pause a worker keeps never reaches the lease's margin."""
    assert WorkerSettings().commit_pause_used_s == DEFAULT_COMMIT_PAUSE_S
    short = WorkerSettings(lease_s=0.02, commit_pause_s=0.05)
    assert short.commit_pause_used_s == pytest.approx(lease_margin_s(0.02) / 2)
    assert WorkerSettings(commit_pause_s=0).commit_pause_used_s == 0
