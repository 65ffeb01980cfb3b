"""The clients waitbound builds itself: one shared per process (sync), one per event
loop (async), none shared across a fork, a caller's own never closed.

These run ``wait`` against the real simulator on loopback; constructions are counted by
wrapping ``httpx.Client.__init__`` / ``httpx.AsyncClient.__init__``, so any path that
builds a client is seen.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from waitbound import (
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    Reason,
    WorkerSettings,
    parse_profile,
    start,
    wait,
    wait_async,
    work,
)
from waitbound.sim import Simulator, parse_scenario
from waitbound.transports import (
    ShardedTransport,
    _clients,
    new_async_client,
    shared_client,
    worker_limits,
)

PROFILE = parse_profile({"state": "status", "pending": ["running"], "succeeded": ["done"]})
DONE = {"code": 200, "body": {"status": "done"}}
RUNNING = {"code": 200, "body": {"status": "running"}}
POLICY = Policy(base_delay_s=0.001, max_delay_s=0.001, min_delay_s=0.001, deadline_s=30)


class Built:
    """Every ``httpx.Client`` / ``httpx.AsyncClient`` built while installed, with the
    keyword arguments it was built with."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sync: list[httpx.Client] = []
        self.async_: list[httpx.AsyncClient] = []
        self.kwargs: list[dict[str, Any]] = []
        self.entered = threading.Event()
        self.hold: threading.Event | None = None
        for cls, into in ((httpx.Client, self.sync), (httpx.AsyncClient, self.async_)):
            monkeypatch.setattr(cls, "__init__", self._wrap(cls.__init__, into))

    def _wrap(self, init: Any, into: list[Any]) -> Any:
        def counted(client: Any, *args: Any, **kwargs: Any) -> None:
            self.entered.set()
            if self.hold is not None:
                self.hold.wait(5)
            init(client, *args, **kwargs)
            into.append(client)
            self.kwargs.append(kwargs)

        return counted


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An empty registry of shared clients for this test; its clients closed after."""
    registry = _clients._Shared()
    monkeypatch.setattr(_clients, "_shared", registry)
    yield
    if registry.client is not None:
        registry.client.close()


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch, fresh: None) -> Built:
    return Built(monkeypatch)


def _sim(*status: dict[str, object]) -> Simulator:
    return Simulator(parse_scenario({"id": "clients", "endpoints": {"status": list(status)}}))


def _op(sim: Simulator, **policy: Any) -> Operation:
    import dataclasses

    return Operation(
        status_url=f"{sim.base_url}/status",
        profile=PROFILE,
        policy=dataclasses.replace(POLICY, **policy),
    )


def _no_sleep(seconds: float) -> None:
    """Return at once: the policy's delays are a millisecond."""


def test_two_waits_share_one_client(built: Built) -> None:
    """Two ``wait`` calls with ``client=None`` in one process build one client between them."""
    with _sim(DONE) as sim:
        first = wait(_op(sim), store=MemoryStore(), sleep=_no_sleep)
        second = wait(_op(sim), store=MemoryStore(), sleep=_no_sleep)
        assert sim.count("status") == 2
    assert first.outcome is OutcomeKind.SUCCEEDED
    assert second.outcome is OutcomeKind.SUCCEEDED
    assert len(built.sync) == 1
    assert built.sync[0] is shared_client()
    assert not built.sync[0].is_closed
    assert built.kwargs[0]["follow_redirects"] is False
    assert built.kwargs[0]["http2"] is False


def test_shared_client_survives_failed_calls(built: Built) -> None:
    """A wait whose requests all fail, and one that raises mid-loop, leave the shared
    client open for the next call."""

    class Crash(Exception):
        pass

    def crash(seconds: float) -> None:
        raise Crash

    with _sim(RUNNING) as sim:
        refused = f"http://127.0.0.1:{_free_port()}/status"
        broken = Operation(status_url=refused, profile=PROFILE, policy=POLICY)
        failed = wait(broken, store=MemoryStore(), sleep=_no_sleep)
        assert failed.reason is Reason.PROVIDER_FAILURE
        with pytest.raises(Crash):  # a delay no request's time can use up: it sleeps
            wait(_op(sim, min_delay_s=5, max_delay_s=5), store=MemoryStore(), sleep=crash)
    assert len(built.sync) == 1
    assert not built.sync[0].is_closed
    with _sim(DONE) as sim:
        after = wait(_op(sim), store=MemoryStore(), sleep=_no_sleep)
    assert after.outcome is OutcomeKind.SUCCEEDED
    assert len(built.sync) == 1


def test_callers_client_is_used_and_never_closed(built: Built) -> None:
    """A client the caller passes sends the requests and stays open; none is built."""
    with _sim(DONE) as sim, httpx.Client() as mine:
        built.sync.clear()
        outcome = wait(_op(sim), store=MemoryStore(), sleep=_no_sleep, client=mine)
        assert outcome.outcome is OutcomeKind.SUCCEEDED
        assert not mine.is_closed
    assert built.sync == []
    assert _clients._shared.client is None


def test_creation_is_thread_safe(built: Built) -> None:
    """Threads asking at once while the first client is still being built get that one."""
    built.hold = threading.Event()
    got: list[httpx.Client] = []
    threads = [threading.Thread(target=lambda: got.append(shared_client())) for _ in range(8)]
    threads[0].start()
    assert built.entered.wait(5)  # the first thread is inside the constructor
    for thread in threads[1:]:
        thread.start()
    built.hold.set()
    for thread in threads:
        thread.join(5)
    assert len(got) == 8
    assert len(built.sync) == 1
    assert all(client is built.sync[0] for client in got)


def test_a_closed_shared_client_is_replaced(built: Built) -> None:
    """Someone closed the shared client: the next call builds another."""
    first = shared_client()
    first.close()
    second = shared_client()
    assert second is not first
    assert not second.is_closed


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_uses_the_parents_client(built: Built) -> None:
    """After a fork the child builds its own client; the parent keeps its own, open."""
    parent = shared_client()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's teardown
        ok = _clients._shared.client is None and shared_client() is not parent
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert shared_client() is parent
    assert not parent.is_closed


def test_async_waits_in_one_loop_share_one_client(built: Built) -> None:
    """Two ``wait_async`` calls in one event loop build one ``AsyncClient``; the loop's
    shutdown closes it and the registry forgets it; another loop gets its own."""

    async def twice(sim: Simulator) -> None:
        for _ in range(2):
            outcome = await wait_async(_op(sim), store=MemoryStore(), sleep=_async_no_sleep)
            assert outcome.outcome is OutcomeKind.SUCCEEDED

    with _sim(DONE) as sim:
        anyio.run(twice, sim)
        assert len(built.async_) == 1
        assert built.async_[0].is_closed
        assert _clients._shared.loops == {}
        asyncio.run(twice(sim))
    assert len(built.async_) == 2
    assert built.async_[1].is_closed
    assert built.kwargs[0]["follow_redirects"] is False


def test_async_loop_that_cannot_be_identified_gets_a_client_per_call(
    built: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under another async library (trio) each call builds its own client and closes it."""
    monkeypatch.setattr(_clients, "current_async_library", lambda: "trio")

    async def twice(sim: Simulator) -> None:
        for _ in range(2):
            outcome = await wait_async(_op(sim), store=MemoryStore(), sleep=_async_no_sleep)
            assert outcome.outcome is OutcomeKind.SUCCEEDED
            assert built.async_[-1].is_closed

    with _sim(DONE) as sim:
        anyio.run(twice, sim)
    assert len(built.async_) == 2
    assert _clients._shared.loops == {}


def test_async_callers_client_is_never_closed(built: Built) -> None:
    """A caller's ``AsyncClient`` sends the requests and stays open; none is built."""

    async def main(sim: Simulator) -> None:
        async with httpx.AsyncClient() as mine:
            built.async_.clear()
            outcome = await wait_async(
                _op(sim), store=MemoryStore(), sleep=_async_no_sleep, client=mine
            )
            assert outcome.outcome is OutcomeKind.SUCCEEDED
            assert not mine.is_closed
        assert built.async_ == []

    with _sim(DONE) as sim:
        anyio.run(main, sim)
    assert _clients._shared.loops == {}


def test_worker_client_keeps_a_connection_per_slot(
    built: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``work`` builds its own client, its connections split in shards for its slots
    (one kept alive per slot), and closes it when it returns."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    store = MemoryStore()
    with _sim(DONE) as sim:
        start(_op(sim), store=store)
        steps = anyio.run(
            lambda: work(store, settings=WorkerSettings(concurrency=24, until_idle=True))
        )
    assert steps >= 1
    transports = [kw["transport"] for kw in built.kwargs if "transport" in kw]
    assert len(transports) == 1
    assert isinstance(transports[0], ShardedTransport)
    assert transports[0].max_shards * transports[0].shard_size == 24
    assert all(client.is_closed for client in built.async_)


def test_behind_a_proxy_httpx_handles_the_connections(
    built: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a proxy in the environment, an async client is httpx's own (it reads the
    proxy variables), sized by ``worker_limits``."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.test:3128")
    client = new_async_client(12)
    assert "transport" not in built.kwargs[-1]
    assert built.kwargs[-1]["limits"] == worker_limits(12)
    anyio.run(client.aclose)


def test_worker_limits_refuse_no_slots() -> None:
    """A pool for fewer than one request at a time is a mistake, named."""
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        worker_limits(0)


async def _async_no_sleep(seconds: float) -> None:
    """Return at once: the policy's delays are a millisecond."""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
