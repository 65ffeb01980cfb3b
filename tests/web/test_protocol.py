"""What one client may take of ``waitbound serve`` (``waitbound.web._protocol``): a
real server on loopback, raw sockets as slow, large or many clients. The deadlines are
made small here; the tests take their real time only.

No bound here depends on the machine's speed: every other timer that could close a
connection (uvicorn's keep-alive) is pushed to a minute for these tests, so a close seen
within :data:`CLOSED_WITHIN_S` can only be the deadline under test, however late a loaded
machine runs its timers; the lower bounds hold on any machine (a timer never fires
early)."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest

from tests.fakes import FakeClock
from waitbound import MemoryStore, WorkerSettings
from waitbound.web._config import ServeConfig
from waitbound.web._protocol import MAX_HEAD_BYTES, LimitedH11Protocol, Limits, connection_cap
from waitbound.web._run import serve
from waitbound.web._service import Service

TOKEN = "t" * 32
CLOSED_WITHIN_S = 20.0
"""A close seen this soon is the deadline under test (every other timer is a minute)."""
QUICK = Limits(head_timeout_s=0.3, body_timeout_s=0.6, max_connections=8)
PARTIAL_HEAD = b"POST /webhooks/reports HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: "


@pytest.fixture(autouse=True)
def _no_other_closer(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn's keep-alive timer (5 s in production) waits a minute here."""
    monkeypatch.setattr("waitbound.web._bounded.KEEP_ALIVE_S", 60)


@asynccontextmanager
async def serving(limits: Limits) -> AsyncIterator[tuple[str, int]]:
    """``serve`` on 127.0.0.1 with *limits* for the block; yields its host and port."""
    service = Service(store=MemoryStore(), config=ServeConfig(), clock=FakeClock(), token=TOKEN)
    stop = anyio.Event()
    urls: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(
            lambda: serve(
                service,
                "127.0.0.1",
                0,
                worker=False,
                worker_settings=WorkerSettings(idle_s=0.05),
                stop=stop,
                handle_signals=False,
                on_listening=urls.append,
                sweep_every_s=3600,
                rng=random.Random(1),
                limits=limits,
            )
        )
        with anyio.fail_after(20):
            while not urls:
                await anyio.sleep(0.01)
        host, _, port = urls[0].removeprefix("http://").rpartition(":")
        try:
            yield host, int(port)
        finally:
            stop.set()


async def closed_after_s(stream: anyio.abc.SocketStream, limit_s: float = 40.0) -> float:
    """Read until the server closes the connection; return how long that took, failing
    after *limit_s* seconds. What the server sent meanwhile must be nothing."""
    started = time.monotonic()
    with anyio.fail_after(limit_s):
        try:
            data = await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
            return time.monotonic() - started
    raise AssertionError(f"the server answered {data[:80]!r} instead of closing")


async def healthy(host: str, port: int) -> int:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"http://{host}:{port}/healthz")).status_code


@pytest.mark.parametrize(
    "first", [b"", PARTIAL_HEAD], ids=["nothing sent", "a head never finished"]
)
def test_a_connection_without_a_whole_head_is_closed_at_the_head_deadline(first: bytes) -> None:
    """A connection that sends nothing, or stops mid-header, is closed without an answer
    once the head deadline passes; the server goes on answering others."""

    async def main() -> tuple[float, int]:
        async with serving(QUICK) as (host, port):
            stream = await anyio.connect_tcp(host, port)
            async with stream:
                if first:
                    await stream.send(first)
                took_s = await closed_after_s(stream)
            return took_s, await healthy(host, port)

    took_s, status = anyio.run(main)
    assert QUICK.head_timeout_s - 0.05 <= took_s < CLOSED_WITHIN_S
    assert status == 200


def test_a_head_trickled_a_byte_at_a_time_is_closed_at_the_head_deadline() -> None:
    """Slowloris: a byte every 0.05 s keeps any per-read timer alive, not the deadline,
    which counts from the connection's start."""

    async def main() -> float:
        async with serving(QUICK) as (host, port):
            stream = await anyio.connect_tcp(host, port)
            async with stream:
                await stream.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                started = time.monotonic()
                with anyio.fail_after(40):
                    try:
                        while True:
                            await stream.send(b"X-a: b\r\n")
                            await anyio.sleep(0.05)
                    except (anyio.BrokenResourceError, ConnectionResetError, OSError):
                        return time.monotonic() - started

    assert anyio.run(main) < CLOSED_WITHIN_S


def test_a_head_over_64_kib_is_a_400_and_the_connection_closed() -> None:
    """A header line growing past 64 KiB: 400 and closed, without reading the rest (the
    h11 parser's cap; httptools has none)."""

    async def main() -> bytes:
        async with serving(QUICK) as (host, port):
            stream = await anyio.connect_tcp(host, port)
            async with stream:
                await stream.send(PARTIAL_HEAD + b"a" * (MAX_HEAD_BYTES + 1024))
                answer = b""
                with anyio.fail_after(40):
                    try:
                        while True:
                            answer += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                        pass
            return answer

    assert anyio.run(main).startswith(b"HTTP/1.1 400 ")


def test_a_slow_body_is_closed_at_the_body_deadline() -> None:
    """A form whose body never comes (``POST /sign-in``, open to anyone): closed
    without an answer once the body deadline passes."""

    async def main() -> float:
        async with serving(QUICK) as (host, port):
            stream = await anyio.connect_tcp(host, port)
            async with stream:
                await stream.send(
                    b"POST /sign-in HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"content-type: application/x-www-form-urlencoded\r\n"
                    b"content-length: 1000\r\n\r\nname=a"
                )
                return await closed_after_s(stream)

    took_s = anyio.run(main)
    assert QUICK.body_timeout_s - 0.05 <= took_s < CLOSED_WITHIN_S


def test_connections_past_the_cap_are_closed_at_once_and_the_server_recovers() -> None:
    """With 4 connections open (the cap), a fifth is closed at once, long before any
    deadline; once they go, the server answers again."""
    limits = Limits(head_timeout_s=120.0, body_timeout_s=120.0, max_connections=4)

    async def main() -> tuple[float, int | None, int]:
        async with serving(limits) as (host, port):
            held = [await anyio.connect_tcp(host, port) for _ in range(4)]
            for stream in held:
                await stream.send(PARTIAL_HEAD)
            await anyio.sleep(0.1)  # the server has taken them
            extra = await anyio.connect_tcp(host, port)
            async with extra:
                took_s = await closed_after_s(extra)
            try:
                full: int | None = await healthy(host, port)
            except httpx.TransportError:
                full = None  # closed at once, as the fifth
            for stream in held:
                await stream.aclose()
            with anyio.fail_after(40):
                while (status := await healthy(host, port)) != 200:
                    await anyio.sleep(0.05)
            return took_s, full, status

    took_s, full, status = anyio.run(main)
    assert took_s < CLOSED_WITHIN_S  # long before the 120 s head deadline
    assert full is None
    assert status == 200


def test_the_cap_leaves_half_of_a_low_file_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process allowed 256 open files takes 128 connections at most; one allowed
    20,000 takes the cap."""
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda which: (256, 4096))
    assert connection_cap(256) == 128
    monkeypatch.setattr(resource, "getrlimit", lambda which: (20_000, 20_000))
    assert connection_cap(256) == 256


def test_the_default_deadlines() -> None:
    """10 s for a request's head, 30 s then for its body; 256 connections."""
    assert (LimitedH11Protocol.head_timeout_s, LimitedH11Protocol.body_timeout_s) == (10.0, 30.0)
    assert Limits().max_connections == 256
