"""``waitbound.web._run.serve`` in process: it listens, sweeps the inbox at once after a
delivery is stored (with or without the worker), drives operations, and stops when told."""

from __future__ import annotations

import random
import sys
from typing import Any

import anyio
import httpx
import pytest

import waitbound
import waitbound.web._run
from tests.fakes import FakeClock
from waitbound import MemoryStore, WorkerSettings
from waitbound._model._push import InboundDelivery
from waitbound.web._config import ServeConfig
from waitbound.web._run import serve
from waitbound.web._service import Nudge, Service

TOKEN = "tok_" + "r" * 40


def _delivery() -> InboundDelivery:
    return InboundDelivery(
        provider="reports",
        webhook_id="msg_1",
        received_at=FakeClock().now(),
        job_id="job-1",
        payload={},
    )


@pytest.mark.parametrize("worker", [True, False])
def test_a_stored_delivery_wakes_the_inbox_sweep_at_once(
    monkeypatch: pytest.MonkeyPatch, worker: bool
) -> None:
    """The sweep runs at start, then right after each nudge (here the periodic sweep is
    an hour away, so only the nudge can have run it), with and without the worker."""
    calls: list[tuple[Any, ...]] = []
    swept = [anyio.Event()]

    def sweep_inbox(store: Any, *, clock: Any, rng: Any, limit: int) -> int:
        calls.append((store, clock, rng, limit))
        swept[0].set()
        return 0

    monkeypatch.setattr(waitbound.web._run, "sweep_inbox", sweep_inbox)
    seen: list[InboundDelivery] = []
    nudge = Nudge(then=seen.append)
    store = MemoryStore()
    service = Service(
        store=store, config=ServeConfig(), clock=FakeClock(), token=TOKEN, delivered=nudge
    )
    urls: list[str] = []

    async def main() -> None:
        stop = anyio.Event()
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(serve_until, service, stop, worker, urls)
                await swept[0].wait()
                swept[0] = anyio.Event()
                await anyio.to_thread.run_sync(nudge, _delivery())  # as a receiver thread would
                await swept[0].wait()
                while not urls:
                    await anyio.sleep(0.01)
                async with httpx.AsyncClient() as http:
                    health = await http.get(f"{urls[0]}/healthz")
                    refused = await http.get(f"{urls[0]}/events")
                stop.set()
        assert health.json()["ok"] is True
        assert refused.status_code == 401

    anyio.run(main)
    assert len(calls) >= 2
    assert calls[0][0] is store
    assert calls[0][3] == 100
    assert seen == [_delivery()]
    assert urls[0].startswith("http://127.0.0.1:")


async def serve_until(service: Service, stop: anyio.Event, worker: bool, urls: list[str]) -> None:
    """``serve`` on a free loopback port until *stop*; its URL is appended to *urls*."""
    await serve(
        service,
        "127.0.0.1",
        0,
        worker=worker,
        worker_settings=WorkerSettings(idle_s=0.05),
        stop=stop,
        handle_signals=False,
        on_listening=urls.append,
        sweep_every_s=3600,
        rng=random.Random(1),
    )


def test_without_an_inbox_module_serve_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``waitbound._engine._inbox`` in this build: no sweep, the service and worker still run;
    a detached operation is driven to its outcome by the worker in the same process."""
    monkeypatch.setitem(sys.modules, "waitbound._engine._inbox", None)
    store = MemoryStore()
    service = Service(store=store, config=ServeConfig(), clock=waitbound.SystemClock(), token=TOKEN)

    def provider(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": "done"})

    operation = waitbound.Operation(
        status_url="http://provider.test/status",
        profile=waitbound.parse_profile(
            {"state": "status", "pending": ["running"], "succeeded": ["done"]}
        ),
    )
    waitbound.start(operation, operation_id="op-1", store=store)
    original = waitbound.work

    async def work(store: Any, **kwargs: Any) -> int:
        async with httpx.AsyncClient(transport=httpx.MockTransport(provider)) as client:
            return await original(store, client=client, **kwargs)

    monkeypatch.setattr(waitbound.web._run, "work", work)  # where serve looks it up

    async def main() -> None:
        stop = anyio.Event()
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(serve_until, service, stop, True, [])
                while store.get("op-1").outcome is None:  # type: ignore[union-attr]
                    await anyio.sleep(0.01)
                stop.set()

    anyio.run(main)
    assert store.get("op-1").outcome is waitbound.OutcomeKind.SUCCEEDED  # type: ignore[union-attr]
