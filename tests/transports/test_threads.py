"""The kept request threads: reused one exchange after another, a blocked one never
delays the next exchange, none inherited across a fork."""

from __future__ import annotations

import os
import threading

import pytest

from waitbound.transports import _threads
from waitbound.transports._threads import MAX_IDLE, run_in_thread


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> _threads._Idle:
    """An empty set of idle threads for this test."""
    idle = _threads._Idle()
    monkeypatch.setattr(_threads, "_idle", idle)
    return idle


def _run(job: object = None) -> str:
    """Run a job in a kept thread and return that thread's name-and-id."""
    done = threading.Event()
    seen: list[str] = []

    def record() -> None:
        seen.append(f"{threading.current_thread().name}:{threading.get_ident()}")
        done.set()

    run_in_thread(record)
    assert done.wait(5)
    return seen[0]


def _settled(idle: _threads._Idle, count: int) -> None:
    """Wait (bounded) until *count* threads are idle again; the job's own signal comes
    just before its thread puts itself back."""
    for _ in range(500):
        with idle.lock:
            if len(idle.queues) >= count:
                return
        threading.Event().wait(0.01)
    raise AssertionError("threads did not come back")


def test_one_thread_serves_exchanges_one_after_another(fresh: _threads._Idle) -> None:
    """Sequential jobs run in the same daemon thread; only one is ever started."""
    names = []
    for _ in range(5):
        names.append(_run())
        _settled(fresh, 1)
    assert len(set(names)) == 1
    assert names[0].startswith("waitbound-request:")
    assert fresh.started == 1


def test_a_blocked_thread_does_not_hold_up_the_next_job(fresh: _threads._Idle) -> None:
    """While one job blocks (an abandoned exchange), the next runs in another thread;
    both threads are kept afterwards."""
    release = threading.Event()
    blocked = threading.Event()

    def stuck() -> None:
        blocked.set()
        release.wait(5)

    run_in_thread(stuck)
    assert blocked.wait(5)
    _run()
    assert fresh.started == 2
    release.set()
    _settled(fresh, 2)
    assert fresh.started == 2


def test_a_failing_job_leaves_its_thread_serving(fresh: _threads._Idle) -> None:
    """A job that raises does not end its thread: the next job runs in it."""

    def boom() -> None:
        raise RuntimeError("job failed")

    run_in_thread(boom)
    _settled(fresh, 1)
    _run()
    assert fresh.started == 1


def test_no_more_than_max_idle_threads_are_kept(fresh: _threads._Idle) -> None:
    """Beyond ``MAX_IDLE`` idle threads, a finishing thread ends instead of waiting."""
    release = threading.Event()
    started = threading.Barrier(MAX_IDLE + 3)
    threads: list[threading.Thread] = []

    def hold() -> None:
        threads.append(threading.current_thread())
        started.wait(5)
        release.wait(5)

    for _ in range(MAX_IDLE + 2):
        run_in_thread(hold)
    started.wait(5)
    assert fresh.started == MAX_IDLE + 2
    release.set()
    _settled(fresh, MAX_IDLE)
    for _ in range(500):  # the two surplus threads end (bounded wait for them)
        if sum(not thread.is_alive() for thread in threads) == 2:
            break
        threading.Event().wait(0.01)
    assert sum(not thread.is_alive() for thread in threads) == 2
    assert len(fresh.queues) == MAX_IDLE


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_with_no_threads(fresh: _threads._Idle) -> None:
    """The parent's kept threads do not exist in a child: it starts its own."""
    _run()
    _settled(fresh, 1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = _threads._idle is not fresh and _threads._idle.queues == []
        ok = ok and _run().startswith("waitbound-request:")
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
