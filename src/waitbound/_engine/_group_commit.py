"""Group commit: the writes of many tasks of one event loop, many to a transaction.

Each task hands its item to :meth:`GroupCommit.put` and waits. The first task that
finds no write under way leads: it gathers what is queued — waiting, with a commit
pause, until every task in flight has queued its item or the pause has passed — and
writes the whole batch with one call of the caller's *write* (one transaction, off the
event loop), then hands every task its own result. What is queued meanwhile is
written by the next leader: the first task still waiting, woken alone (each waiting
task is woken once, when its batch is written or when it leads). No background task is
needed, so a group commit lives as long as its owner (the worker, the webhook
receiver of ``waitbound serve``) and nothing has to start or stop it.

The rules it keeps: a task hears its result only once the batch holding its item was
written (committed); a batch whose write fails fails every task of that batch, and
writes nothing (the write is one transaction); the pause is bounded and runs with the
caller's *sleep*, so a virtual clock paces it too.

Failpoint ``committing`` (``waitbound._base._failpoints``): passed once per batch, after
the pause and before its write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

import anyio

from waitbound._base._failpoints import hit

__all__ = [
    "DEFAULT_COMMIT_PAUSE_S",
    "MAX_COMMIT_PAUSE_S",
    "GroupCommit",
    "Offload",
    "first_of",
    "in_thread",
    "inline",
]

DEFAULT_COMMIT_PAUSE_S = 0.002
"""How long the group commit waits for more answers once one is queued (seconds),
chosen by measurement (``docs/benchmarks.md``, "The commit pause")."""

MAX_COMMIT_PAUSE_S = 0.1
"""The longest commit pause allowed (seconds): it delays every answer's write."""

_T = TypeVar("_T")
_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


class Offload(Protocol):
    """How a store call is made: ``await offload(fn, *args)``."""

    async def __call__(self, fn: Callable[..., _T], /, *args: object) -> _T: ...


async def in_thread(fn: Callable[..., _T], /, *args: object) -> _T:
    """A store call in a worker thread, off the event loop."""
    return await anyio.to_thread.run_sync(fn, *args)


async def inline(fn: Callable[..., _T], /, *args: object) -> _T:
    """A store call on the event loop itself (tests with a virtual clock)."""
    await anyio.lowlevel.checkpoint()
    return fn(*args)


async def first_of(*waits: Callable[[], Awaitable[object]]) -> None:
    """Return as soon as the first of *waits* returns."""
    async with anyio.create_task_group() as group:

        async def one(wait: Callable[[], Awaitable[object]]) -> None:
            await wait()
            group.cancel_scope.cancel()

        for wait in waits:
            group.start_soon(one, wait)


class _Waiter(Generic[_Result]):
    __slots__ = ("done", "error", "result", "taken", "wake")

    def __init__(self) -> None:
        self.done = False
        self.wake = anyio.Event()
        """Set when its batch was written, or when it is its turn to lead."""
        self.taken = False
        self.result: _Result | None = None
        self.error: Exception | None = None


class GroupCommit(Generic[_Item, _Result]):
    """Items of many tasks written together (see the module).

    Args:
        write: writes a batch in one transaction and returns one result per item, in
            order (called through *offload*, one call at a time).
        offload: how *write* is called (:func:`in_thread`; :func:`inline` in tests).
        pause_s: the commit pause: once something is queued, how long the leader
            waits at most for the items of the other tasks in flight (seconds; 0:
            write what is queued at once).
        sleep: the pause's sleep (``anyio.sleep``, or a virtual clock's).
        in_flight: how many tasks may still queue an item now (themselves included
            once queued): the pause ends as soon as that many are queued.
    """

    def __init__(
        self,
        write: Callable[[Sequence[_Item]], Sequence[_Result]],
        offload: Offload = in_thread,
        *,
        pause_s: float = 0.0,
        sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
        in_flight: Callable[[], int] = lambda: 0,
    ) -> None:
        self.write, self.offload = write, offload
        self.pause_s, self.sleep, self.in_flight = pause_s, sleep, in_flight
        self.queue: list[tuple[_Item, _Waiter[_Result]]] = []
        self.leading = False
        self.full: anyio.Event | None = None
        """Set while the leader pauses: every task in flight has queued."""
        self.batches: list[int] = []
        """The size of every batch written (for tests and benchmarks)."""

    async def put(self, item: _Item) -> _Result:
        """Write *item* with the next batch; return its result once that batch is
        written.

        Raises:
            Exception: what *write* raised for the batch holding *item* (none of that
                batch was written).
        """
        waiter: _Waiter[_Result] = _Waiter()
        entry = (item, waiter)
        self.queue.append(entry)
        self.check()
        try:
            while not waiter.done:
                if not self.leading and not waiter.taken:
                    await self._lead()
                    continue
                # Woken once: its batch is written, or it leads next (never all at once).
                waiter.wake = anyio.Event()
                await waiter.wake.wait()
        except BaseException:
            if not waiter.taken and entry in self.queue:  # never written: not ours to write
                self.queue.remove(entry)
                self.check()
                self._pass_on()
            raise
        if waiter.error is not None:
            raise waiter.error
        return waiter.result  # type: ignore[return-value]

    def check(self) -> None:
        """End the pause when nothing more can arrive: every task in flight queued.
        Call it too when a task in flight ends without queuing."""
        if self.full is not None and len(self.queue) >= self.in_flight():
            self.full.set()

    async def _lead(self) -> None:
        """Gather (with the pause) and write one batch."""
        self.leading = True
        try:
            if self.pause_s > 0:
                await self._gather()
            if self.queue and (pause := hit("committing")):
                await self.sleep(pause)
            batch, self.queue = self.queue, []
            for _, waiter in batch:  # from here on, nothing awaits before the write
                waiter.taken = True
            if batch:
                await self._write(batch)
        finally:
            self.leading = False
            self._pass_on()

    def _pass_on(self) -> None:
        """No write under way: wake the first task still queued to lead the next."""
        if not self.leading and self.queue:
            self.queue[0][1].wake.set()

    async def _gather(self) -> None:
        """Wait until every task in flight has queued, or the pause is over."""
        self.full = anyio.Event()
        try:
            self.check()
            if not self.full.is_set():
                full = self.full
                await first_of(full.wait, lambda: self.sleep(self.pause_s))
        finally:
            self.full = None

    async def _write(self, batch: Sequence[tuple[_Item, _Waiter[_Result]]]) -> None:
        self.batches.append(len(batch))
        try:
            results = await self.offload(self.write, [item for item, _ in batch])
        except Exception as exc:  # every task of this batch reports it
            for _, waiter in batch:
                waiter.error = exc
        else:
            for (_, waiter), result in zip(batch, results, strict=True):
                waiter.result = result
        finally:
            for _, waiter in batch:
                waiter.done = True
                waiter.wake.set()
