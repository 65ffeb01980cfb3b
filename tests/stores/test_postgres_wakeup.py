"""PostgreSQL without a check per borrow, and its LISTEN/NOTIFY wake-up (a real server)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING

import anyio
import httpx
import pytest

import waitbound
from tests.fakes import ScriptedProvider
from tests.stores import pg
from tests.stores.test_store_contract import events, make_record
from waitbound import AuditEvent, StoreError, WorkerSettings
from waitbound.testing import FakeClock

if TYPE_CHECKING:
    from waitbound.stores.postgres import PostgresStore


@pytest.fixture
def schema() -> Iterator[str]:
    with pg.fresh_schema() as name:
        yield name


def _store(schema: str, *, min_size: int = 1, max_size: int = 4) -> PostgresStore:
    from waitbound.stores.postgres import PostgresStore

    return PostgresStore(pg.DSN, schema=schema, min_size=min_size, max_size=max_size)


def test_a_broken_connection_fails_its_one_call_and_the_next_call_works(schema: str) -> None:
    """pg_terminate_backend on the pool's only connection: the next call is one clear
    StoreError line, the one after it works (no check round trip per borrow)."""
    store = _store(schema, min_size=1, max_size=1)
    try:
        store.create(make_record("op-1"), events("created"))
        with store._pool.connection() as conn:
            pid = conn.info.backend_pid
        pg.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreError) as raised:
            store.get("op-1")
        assert "\n" not in str(raised.value)
        assert str(raised.value).startswith("store postgresql://")
        got = store.get("op-1")
        assert got is not None
        assert got.version == 1
    finally:
        store.close()


def test_wait_for_wakeup_times_out_without_a_notification(schema: str) -> None:
    """No write: it returns False after the timeout."""
    store = _store(schema)

    async def main() -> bool:
        return await store.wait_for_wakeup(0.05)

    try:
        assert anyio.run(main) is False
    finally:
        store.close()


def test_a_create_and_a_sooner_write_notify_and_a_later_one_does_not(schema: str) -> None:
    """Creating a waiting operation wakes; a write moving next_poll_at earlier wakes; one
    moving it later (an ordinary answer) does not; another schema's writes do not."""
    store = _store(schema)
    writer = _store(schema)
    results: list[bool] = []

    async def main() -> None:
        assert await store.wait_for_wakeup(0.01) is False  # listening from here
        created = writer.create(make_record("op-1"), events("created"))
        results.append(await store.wait_for_wakeup(5))
        later = writer.save(
            created.evolve(
                schedule=created.schedule.evolve(next_poll_at=created.next_poll_at + timedelta(1))
            ),
            [],
        )
        results.append(await store.wait_for_wakeup(0.3))
        writer.save(
            later.evolve(schedule=later.schedule.evolve(next_poll_at=created.next_poll_at)), []
        )
        results.append(await store.wait_for_wakeup(5))
        with pg.fresh_schema() as other_name:
            other = _store(other_name)
            try:
                other.create(make_record("op-x"), events("created"))
            finally:
                other.close()
        results.append(await store.wait_for_wakeup(0.3))

    try:
        anyio.run(main)
    finally:
        store.close()
        writer.close()
    assert results == [True, False, True, False]


def test_an_idle_worker_wakes_for_a_new_operation_long_before_idle_s(schema: str) -> None:
    """A worker idle with idle_s=30 takes a newly created operation's first step at
    once: it is woken by the NOTIFY (bounded generously in real time, < 5 s)."""
    store = _store(schema)
    writer = _store(schema)
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/v1/jobs/42": [(200, {"status": "running"})]})
    reserved = anyio.Event()
    idle = anyio.Event()
    took: list[float] = []

    asked = anyio.Event()

    def answer(request: httpx.Request) -> httpx.Response:
        asked.set()
        return provider(request)

    async def wake(pause_s: float) -> bool:
        """The worker's pause: it found nothing due and waits for a NOTIFY."""
        idle.set()
        return await store.wait_for_wakeup(pause_s)

    def on_event(event: AuditEvent) -> None:
        if event.kind == "reserved":
            reserved.set()

    async def main() -> None:
        assert await store.wait_for_wakeup(0.01) is False  # listening from here
        stop = anyio.Event()
        async with anyio.create_task_group() as group:

            async def run() -> None:
                await waitbound.work(
                    store,
                    settings=WorkerSettings(idle_s=30.0),
                    client=httpx.AsyncClient(transport=httpx.MockTransport(answer)),
                    clock=clock,
                    on_event=on_event,
                    stop=stop,
                    wake=wake,
                )

            group.start_soon(run)
            with anyio.fail_after(30):  # a ceiling only: the worker goes idle at once
                await idle.wait()
            started = time.monotonic()
            record = make_record("op-new", created_at=clock.now(), next_poll_at=clock.now())
            writer.create(
                record.evolve(
                    schedule=record.schedule.evolve(deadline_at=clock.now() + timedelta(hours=1))
                ),
                events("created"),
            )
            with anyio.fail_after(25):  # below the 30 s idle pause: only a NOTIFY wakes it
                await reserved.wait()
            took.append(time.monotonic() - started)
            with anyio.fail_after(30):  # stopped before sending, the step would not send
                await asked.wait()
            stop.set()

    try:
        anyio.run(main)
    finally:
        store.close()
        writer.close()
    assert len(took) == 1
    assert took[0] < 25  # woken by the NOTIFY, not by the end of its 30 s pause
    assert provider.count("/v1/jobs/42") == 1
