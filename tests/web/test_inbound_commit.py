"""The webhook receiver's group commit, and the wake of ``serve``'s worker.

Deliveries are sent concurrently to the receiver in one event loop (``ASGITransport``);
the store's batch write is held on a threading event while the others queue, so which
deliveries share a transaction is decided by the test, never by the machine's speed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import httpx
import jmespath
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from tests.fakes import FakeClock
from tests.stores import pg
from tests.stores.test_store_contract import events, make_record
from tests.web.signing import SECRET_A, T0, body_of, standard_headers
from waitbound import MemoryStore, StoreError
from waitbound._engine._group_commit import GroupCommit, inline
from waitbound._model._push import InboundDelivery
from waitbound._profile._webhooks import Scheme
from waitbound.web._config import Receiver, ServeConfig
from waitbound.web._inbound import receive_webhook
from waitbound.web._inbound_commit import InboundCommit
from waitbound.web._run import worker_wake
from waitbound.web._service import Nudge, Service

RECEIVER = Receiver(
    name="reports",
    scheme=Scheme.STANDARD,
    secrets=(SECRET_A,),
    job_id=jmespath.compile("data.id"),
    job_id_text="data.id",
)


class Held(MemoryStore):
    """A memory store whose batch writes wait for ``release`` (in the writer's thread)
    and note each batch's webhook ids once written."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.writing = threading.Event()
        self.batches: list[list[str]] = []

    def put_deliveries(self, deliveries: Sequence[InboundDelivery]) -> list[InboundDelivery | None]:
        self.writing.set()
        self.release.wait(30)  # a safety net only: the test releases it
        stored = super().put_deliveries(deliveries)
        self.batches.append([d.webhook_id for d in deliveries])
        return stored


def _service(store: Any, inbound: InboundCommit) -> Service:
    return Service(
        store=store,
        config=ServeConfig(receivers={"reports": RECEIVER}),
        clock=FakeClock(T0),
        token="t" * 32,
        delivered=lambda _: None,
        inbound=inbound,
    )


def _post(client: httpx.AsyncClient, msg_id: str, job: str = "job-1") -> Any:
    body = body_of({"type": "job.completed", "data": {"id": job}})
    return client.post(
        "/webhooks/reports", headers=standard_headers(SECRET_A, body, msg_id=msg_id), content=body
    )


def _app(service: Service) -> Starlette:
    app = Starlette(routes=[Route("/webhooks/{provider}", receive_webhook, methods=["POST"])])
    app.state.service = service
    return app


async def _until(condition: Any) -> None:
    """Let the loop run until *condition()* holds (checkpoints, no timer)."""
    while not condition():
        await anyio.sleep(0)


def test_deliveries_arriving_together_share_a_transaction_and_wait_for_its_commit() -> None:
    """The first delivery's batch is being written; five more arrive and queue. None of
    the five is answered before the batch holding it committed; they are written
    together, in one transaction; each is answered 200, stored once."""
    store = Held()
    inbound = InboundCommit(pause_s=0)
    service = _service(store, inbound)
    answers: dict[str, int] = {}

    async def main() -> None:
        transport = httpx.ASGITransport(app=_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            async def send(msg_id: str) -> None:
                answers[msg_id] = (await _post(client, msg_id)).status_code

            with anyio.fail_after(30):  # a safety net only
                async with anyio.create_task_group() as group:
                    group.start_soon(send, "msg_0")
                    await _until(store.writing.is_set)
                    for i in range(1, 6):
                        group.start_soon(send, f"msg_{i}")
                    await _until(lambda: len(inbound.group(store).queue) == 5)
                    assert answers == {}  # nothing answered before its commit
                    store.release.set()

    anyio.run(main)
    assert store.batches == [["msg_0"], [f"msg_{i}" for i in range(1, 6)]]
    assert answers == {f"msg_{i}": 200 for i in range(6)}
    assert sorted(d.webhook_id for d in store.inbox(limit=100)) == [f"msg_{i}" for i in range(6)]


def test_the_pause_ends_once_every_request_in_flight_has_queued_or_left() -> None:
    """A commit pause whose sleep never ends by itself: with four requests in flight,
    the batch is written as soon as the four queued; with three in flight of which one
    leaves without a delivery (rejected), as soon as the other two queued."""
    never = anyio.Event()

    async def forever(_: float) -> None:
        await never.wait()

    written: list[list[int]] = []

    def write(items: Sequence[int]) -> list[int]:
        written.append(list(items))
        return [item * 10 for item in items]

    in_flight = [4]
    group: GroupCommit[int, int] = GroupCommit(
        write, inline, pause_s=0.05, sleep=forever, in_flight=lambda: in_flight[0]
    )
    results: list[int] = []

    async def main() -> None:
        async def put(item: int) -> None:
            results.append(await group.put(item))

        with anyio.fail_after(30):  # a safety net only
            async with anyio.create_task_group() as tasks:
                for item in range(4):
                    tasks.start_soon(put, item)
            in_flight[0] = 3
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(put, 7)
                tasks.start_soon(put, 8)
                await _until(lambda: len(group.queue) == 2)
                assert written == [[0, 1, 2, 3]]  # the two wait for the third
                in_flight[0] = 2  # the third request was refused: it leaves
                group.check()

    anyio.run(main)
    assert [sorted(batch) for batch in written] == [[0, 1, 2, 3], [7, 8]]
    assert sorted(results) == [0, 10, 20, 30, 70, 80]
    assert group.batches == [4, 2]


def test_the_receiver_counts_its_requests_in_flight() -> None:
    """Each webhook request counts as in flight while it is handled, accepted or not."""
    inbound = InboundCommit(pause_s=0)
    seen: list[int] = []

    class Counting(Held):
        def put_deliveries(self, deliveries: Sequence[InboundDelivery]) -> list[Any]:
            seen.append(inbound.in_flight)
            return super().put_deliveries(deliveries)

    counting = Counting()
    counting.release.set()
    service = _service(counting, inbound)

    async def main() -> None:
        transport = httpx.ASGITransport(app=_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            assert (await _post(client, "msg_0")).status_code == 200
            bad = await client.post("/webhooks/reports", content=b"{}")
            assert bad.status_code == 400

    anyio.run(main)
    assert seen == [1]
    assert inbound.in_flight == 0


def test_a_duplicate_in_the_same_batch_is_answered_as_a_duplicate() -> None:
    """The same delivery sent twice at once (a provider's retry racing the original):
    one transaction, one row; the second answer says duplicate."""
    store = Held()
    inbound = InboundCommit(pause_s=0)
    service = _service(store, inbound)
    bodies: list[dict[str, Any]] = []

    async def main() -> None:
        transport = httpx.ASGITransport(app=_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            async def send(msg_id: str) -> None:
                bodies.append((await _post(client, msg_id)).json())

            with anyio.fail_after(30):  # a safety net only
                async with anyio.create_task_group() as group:
                    group.start_soon(send, "msg_first")
                    await _until(store.writing.is_set)
                    group.start_soon(send, "msg_twice")
                    group.start_soon(send, "msg_twice")
                    await _until(lambda: len(inbound.group(store).queue) == 2)
                    store.release.set()

    anyio.run(main)
    assert store.batches == [["msg_first"], ["msg_twice", "msg_twice"]]
    duplicates = sorted(b["duplicate"] for b in bodies)
    assert duplicates == [False, False, True]
    assert len(store.inbox(limit=100)) == 2


def test_one_delivery_the_store_refuses_fails_only_its_own_request() -> None:
    """The batch's transaction fails; each delivery is then stored on its own: the one
    the store refuses is 503 (the provider retries it), the others 200 and stored."""

    class Picky(Held):
        def put_deliveries(self, deliveries: Sequence[InboundDelivery]) -> list[Any]:
            self.writing.set()
            self.release.wait(30)
            if any(d.webhook_id == "msg_bad" for d in deliveries):
                raise StoreError("value too long")
            return super().put_deliveries(deliveries)

        def put_delivery(self, delivery: InboundDelivery) -> InboundDelivery | None:
            if delivery.webhook_id == "msg_bad":
                raise StoreError("value too long")
            return super().put_delivery(delivery)

    store = Picky()
    inbound = InboundCommit(pause_s=0)
    service = _service(store, inbound)
    codes: dict[str, int] = {}

    async def main() -> None:
        transport = httpx.ASGITransport(app=_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            async def send(msg_id: str) -> None:
                codes[msg_id] = (await _post(client, msg_id)).status_code

            with anyio.fail_after(30):  # a safety net only
                async with anyio.create_task_group() as group:
                    group.start_soon(send, "msg_0")
                    await _until(store.writing.is_set)
                    for msg_id in ("msg_1", "msg_bad", "msg_2"):
                        group.start_soon(send, msg_id)
                    await _until(lambda: len(inbound.group(store).queue) == 3)
                    store.release.set()

    anyio.run(main)
    assert codes == {"msg_0": 200, "msg_1": 200, "msg_bad": 503, "msg_2": 200}
    assert sorted(d.webhook_id for d in store.inbox(limit=100)) == ["msg_0", "msg_1", "msg_2"]


# --- serve's worker wakes on the store's NOTIFY as on its own webhooks ------------------


class Listening(MemoryStore):
    """A memory store with a ``wait_for_wakeup`` the test fires."""

    def __init__(self) -> None:
        super().__init__()
        self.fire = anyio.Event()
        self.waited: list[float] = []

    async def wait_for_wakeup(self, timeout_s: float) -> bool:
        self.waited.append(timeout_s)
        await self.fire.wait()
        return True


def test_serves_worker_wakes_on_a_store_wakeup_and_on_its_webhooks() -> None:
    """The joined wake returns when the store wakes it (another process's change) and,
    separately, when the sweep applied a webhook; each time with the pause given."""
    store = Listening()
    hinted = Nudge()
    wake = worker_wake(store, hinted)
    order: list[str] = []

    async def main() -> None:
        with anyio.fail_after(30):  # a safety net only: both wakes are fired below
            async with anyio.create_task_group() as group:

                async def by_store() -> None:
                    await wake(3600)
                    order.append("store")

                group.start_soon(by_store)
                await _until(lambda: store.waited == [3600])
                store.fire.set()
            store.fire = anyio.Event()
            hinted()  # the sweep applied a delivery
            await wake(3600)
            order.append("webhook")

    anyio.run(main)
    assert order == ["store", "webhook"]
    assert store.waited == [3600, 3600]


def test_a_store_without_wakeups_leaves_the_webhook_wake_alone() -> None:
    """SQLite and the memory store have no NOTIFY: the wake is the sweep's nudge itself."""
    hinted = Nudge()
    assert worker_wake(MemoryStore(), hinted) == hinted.wait


@pytest.fixture
def schema() -> Iterator[str]:
    with pg.fresh_schema() as name:
        yield name


def test_serves_worker_on_postgresql_wakes_on_another_processes_change(schema: str) -> None:
    """A real PostgreSQL store: serve's worker waiting an hour is woken when another
    store (another process's connection) creates an operation due now."""
    from waitbound.stores.postgres import PostgresStore

    store = PostgresStore(pg.DSN, schema=schema, min_size=1, max_size=2)
    writer = PostgresStore(pg.DSN, schema=schema, min_size=1, max_size=2)
    wake = worker_wake(store, Nudge())
    woken: list[bool] = []

    async def main() -> None:
        assert await store.wait_for_wakeup(0.01) is False  # listening from here
        with anyio.fail_after(30):  # a safety net only: the create wakes it
            async with anyio.create_task_group() as group:

                async def waiting() -> None:
                    await wake(3600)
                    woken.append(True)

                group.start_soon(waiting)
                await anyio.to_thread.run_sync(
                    lambda: writer.create(make_record("op-1"), events("created"))
                )

    try:
        anyio.run(main)
    finally:
        store.close()
        writer.close()
    assert woken == [True]
