"""Test doubles: a scripted httpx transport; the virtual clock is ``waitbound.testing``'s."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from itertools import pairwise

import anyio
import httpx

from waitbound import Observation, Store, WorkerSettings, work
from waitbound.testing import START, FakeClock

Answer = tuple[int, object] | tuple[int, object, Mapping[str, str]] | Exception


class ScriptedProvider:
    """An ``httpx.MockTransport`` handler serving scripted answers per path, in order.

    The last answer repeats. Each request can take ``latency_s`` of virtual time.
    """

    def __init__(
        self,
        clock: FakeClock,
        script: Mapping[str, Sequence[Answer]],
        *,
        latency_s: float = 0.0,
    ) -> None:
        self.clock = clock
        self.script = {path: list(answers) for path, answers in script.items()}
        self.latency_s = latency_s
        self.requests: list[tuple[str, datetime]] = []
        self.seen_headers: list[Mapping[str, str]] = []
        self.timeouts: list[float | None] = []
        self.sent: list[tuple[str, str, bytes]] = []
        """(method, path, body) of every request."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.requests.append((path, self.clock.now()))
        self.seen_headers.append(dict(request.headers))
        self.timeouts.append(request.extensions.get("timeout", {}).get("read"))
        self.sent.append((request.method, path, request.read()))
        self.clock.advance(self.latency_s)
        answers = self.script[path]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        code, body, *rest = answer
        headers = dict(rest[0]) if rest else {}
        if body is None:
            return httpx.Response(code, headers=headers)
        return httpx.Response(code, json=body, headers=headers)

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.requests if p == path)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))

    def async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


def gaps(times: list[datetime]) -> list[float]:
    """Seconds between consecutive instants."""
    return [(b - a).total_seconds() for a, b in pairwise(times)]


class Autojump:
    """Virtual time that moves only when every task of the event loop is idle (the idea
    of trio's autojump clock, on asyncio): :meth:`sleep` waits until nothing else can
    run, then advances *clock* to the earliest sleeper's wake-up and wakes it.

    Use it for every sleep of the code under test (and of the test's own handlers),
    with store calls made on the loop (``work(inline_store=True)``): then no thread and
    no real timer runs beside it, and what happens in virtual time never depends on how
    fast the machine is. Run it with :func:`autojump` (or :meth:`run` in a task).
    """

    QUIET_ROUNDS = 3
    """Loop iterations with nothing else ready before time jumps."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.sleepers: list[tuple[float, int, anyio.Event]] = []
        self.order = itertools.count()
        self.someone: anyio.Event | None = None

    async def sleep(self, seconds: float) -> None:
        """Sleep *seconds* of virtual time (recorded in ``clock.sleeps``)."""
        self.clock.sleeps.append(seconds)
        woken = anyio.Event()
        at = self.clock.monotonic() + max(0.0, seconds)
        entry = (at, next(self.order), woken)
        heapq.heappush(self.sleepers, entry)
        if self.someone is not None:
            self.someone.set()
        try:
            await woken.wait()
        finally:
            if not woken.is_set():  # cancelled: time need not move for it any more
                self.sleepers.remove(entry)
                heapq.heapify(self.sleepers)

    async def run(self) -> None:
        """Wake the sleepers in time order, each once the loop is idle; until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            if not self.sleepers:
                self.someone = anyio.Event()
                await self.someone.wait()
            quiet = 0
            while quiet < self.QUIET_ROUNDS:
                await asyncio.sleep(0)
                quiet = quiet + 1 if not loop._ready else 0  # type: ignore[attr-defined]
            if not self.sleepers:  # the last one was cancelled meanwhile
                continue
            at, _, woken = heapq.heappop(self.sleepers)
            ahead = at - self.clock.monotonic()
            if ahead > 0:
                self.clock.advance(ahead)
            woken.set()


@asynccontextmanager
async def autojump(clock: FakeClock | Autojump) -> AsyncIterator[Autojump]:
    """An :class:`Autojump` for *clock* (or the one given), running for the block."""
    jump = clock if isinstance(clock, Autojump) else Autojump(clock)
    async with anyio.create_task_group() as group:
        group.start_soon(jump.run)
        try:
            yield jump
        finally:
            group.cancel_scope.cancel()


Handler = Callable[[httpx.Request], httpx.Response]
AsyncHandler = Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]


def work_virtually(
    store: Store,
    clock: FakeClock,
    handler: Handler | AsyncHandler | None = None,
    *,
    settings: WorkerSettings = WorkerSettings(until_idle=True),  # noqa: B008 - frozen value
    jump: Autojump | None = None,
    **options: object,
) -> int:
    """``waitbound.work(store, ...)`` on *clock* with :class:`Autojump` sleeps and the
    store's calls on the loop (``inline_store=True``), answering through *handler* (an
    ``httpx.MockTransport`` handler; ``None``: the worker's own client, for runs that
    send no request); *options* go to ``work``. Returns the steps taken.

    Nothing the worker does runs outside the loop, so virtual time moves only when it
    is idle and the run never depends on the machine's speed. Never for real sockets:
    time would jump while a real request is in flight.
    """
    jump = jump or Autojump(clock)

    async def main() -> int:
        client = httpx.AsyncClient(transport=httpx.MockTransport(handler)) if handler else None
        async with autojump(jump):
            try:
                with anyio.fail_after(60):  # a safety net: virtual time never waits for it
                    return await work(
                        store, settings=settings, client=client, clock=clock,
                        sleep=jump.sleep, inline_store=True, **options,  # type: ignore[arg-type]
                    )  # fmt: skip
            finally:
                if client is not None:
                    await client.aclose()

    return anyio.run(main)


__all__ = [
    "START",
    "Answer",
    "AsyncHandler",
    "Autojump",
    "FakeClock",
    "Handler",
    "Observation",
    "ScriptedProvider",
    "autojump",
    "gaps",
    "work_virtually",
]
