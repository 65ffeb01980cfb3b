"""The group commit itself (``waitbound._engine._group_commit``): who leads, what each batch
holds, and what a cancelled or failed task leaves. All on one event loop with gates the
test opens, no timer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
import pytest

from waitbound._engine._group_commit import GroupCommit

_T = TypeVar("_T")


class Gate:
    """An offload that waits for the test to open it before each write."""

    def __init__(self) -> None:
        self.open = anyio.Event()
        self.entered = 0

    async def __call__(self, fn: Callable[..., _T], /, *args: object) -> _T:
        self.entered += 1
        await self.open.wait()
        self.open = anyio.Event()
        return fn(*args)


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await anyio.sleep(0)


def _recorder(
    fail_on: object = None,
) -> tuple[list[list[Any]], Callable[[Sequence[Any]], list[Any]]]:
    written: list[list[Any]] = []

    def write(items: Sequence[Any]) -> list[Any]:
        if fail_on in items:
            raise OSError("disk I/O error")
        written.append(list(items))
        return [f"stored {item}" for item in items]

    return written, write


def test_what_arrives_during_a_write_is_the_next_batch_led_by_one_of_its_tasks() -> None:
    """Task a leads and writes [a]; b, c, d queue meanwhile; the next batch is [b, c, d]
    and every task gets its own result."""
    gate = Gate()
    written, write = _recorder()
    group: GroupCommit[str, str] = GroupCommit(write, gate)
    results: dict[str, str] = {}

    async def put(item: str) -> None:
        results[item] = await group.put(item)

    async def main() -> None:
        with anyio.fail_after(30):  # a safety net only
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(put, "a")
                await _until(lambda: gate.entered == 1)
                for item in "bcd":
                    tasks.start_soon(put, item)
                await _until(lambda: len(group.queue) == 3)
                assert results == {}
                gate.open.set()
                await _until(lambda: gate.entered == 2)
                assert results == {"a": "stored a"}
                gate.open.set()

    anyio.run(main)
    assert written == [["a"], ["b", "c", "d"]]
    assert results == {item: f"stored {item}" for item in "abcd"}
    assert group.batches == [1, 3]


def test_a_leader_cancelled_in_its_pause_writes_nothing_and_the_next_task_leads() -> None:
    """Three tasks queue under a pause that only ends when four are in flight; the leader
    is cancelled: its item is dropped (never written), the next task leads, and once the
    in-flight count falls to the two left, their batch is written."""
    never = anyio.Event()

    async def forever(_: float) -> None:
        await never.wait()

    written, write = _recorder()
    in_flight = [4]

    async def inline(fn: Callable[..., _T], /, *args: object) -> _T:
        return fn(*args)

    group: GroupCommit[str, str] = GroupCommit(
        write, inline, pause_s=1.0, sleep=forever, in_flight=lambda: in_flight[0]
    )
    results: dict[str, str] = {}

    async def main() -> None:
        with anyio.fail_after(30):  # a safety net only
            async with anyio.create_task_group() as tasks:
                leader = anyio.CancelScope()

                async def lead() -> None:
                    with leader:
                        results["a"] = await group.put("a")

                tasks.start_soon(lead)
                await _until(lambda: group.leading)
                for item in "bc":

                    async def put(item: str = item) -> None:
                        results[item] = await group.put(item)

                    tasks.start_soon(put)
                await _until(lambda: len(group.queue) == 3)
                leader.cancel()
                await _until(lambda: len(group.queue) == 2 and group.leading)
                assert written == []
                in_flight[0] = 2
                group.check()

    anyio.run(main)
    assert written == [["b", "c"]]
    assert results == {"b": "stored b", "c": "stored c"}


def test_a_failed_write_fails_its_batch_only() -> None:
    """The batch holding "bad" fails for each of its tasks; the batch before it and the
    one after it are written."""
    gate = Gate()
    written, write = _recorder(fail_on="bad")
    group: GroupCommit[str, str] = GroupCommit(write, gate)
    outcomes: dict[str, str] = {}

    async def put(item: str) -> None:
        try:
            outcomes[item] = await group.put(item)
        except OSError as exc:
            outcomes[item] = f"failed: {exc}"

    async def main() -> None:
        with anyio.fail_after(30):  # a safety net only
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(put, "a")
                await _until(lambda: gate.entered == 1)
                tasks.start_soon(put, "bad")
                tasks.start_soon(put, "b")
                await _until(lambda: len(group.queue) == 2)
                gate.open.set()
                await _until(lambda: gate.entered == 2)
                tasks.start_soon(put, "c")
                await _until(lambda: len(group.queue) == 1)
                gate.open.set()
                await _until(lambda: gate.entered == 3)
                gate.open.set()

    anyio.run(main)
    assert written == [["a"], ["c"]]
    assert outcomes == {
        "a": "stored a",
        "bad": "failed: disk I/O error",
        "b": "failed: disk I/O error",
        "c": "stored c",
    }


@pytest.mark.parametrize("waiting", [2, 16])
def test_each_waiting_task_is_woken_once(waiting: int) -> None:
    """However many tasks wait behind a write, each is woken once: when its batch is
    written (its wake event is set once, never re-armed)."""
    gate = Gate()
    _, write = _recorder()
    group: GroupCommit[int, str] = GroupCommit(write, gate)
    wakes: list[int] = []

    async def put(item: int) -> None:
        await group.put(item)

    async def main() -> None:
        with anyio.fail_after(30):  # a safety net only
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(put, -1)
                await _until(lambda: gate.entered == 1)
                for item in range(waiting):
                    tasks.start_soon(put, item)
                await _until(lambda: len(group.queue) == waiting)
                events = [waiter.wake for _, waiter in group.queue]
                gate.open.set()
                await _until(lambda: gate.entered == 2)
                # The first queued task was woken to lead; nobody else was.
                wakes.append(sum(event.is_set() for event in events))
                gate.open.set()

    anyio.run(main)
    assert wakes == [1]
