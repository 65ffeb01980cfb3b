"""Daemon threads for blocking exchanges, kept for the next one.

``send_sync`` runs each exchange in a thread it joins for the request's total timeout
(the real-time bound). Starting a thread per request costs about 60 µs of CPU and a
scheduler round trip (200-450 µs of real time on a loaded machine); a kept thread is
handed the next exchange through a queue instead. The threads are daemons, so one
still blocked in an abandoned exchange never holds up interpreter exit (which is why
``concurrent.futures.ThreadPoolExecutor``, whose threads are joined at exit, is not
used). At most ``MAX_IDLE`` idle threads are kept; a forked child starts with none.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from typing import Final

__all__ = ["MAX_IDLE", "run_in_thread"]

MAX_IDLE: Final = 8
"""Idle threads kept for later exchanges; a thread finishing beyond this ends."""


class _Idle:
    """The idle threads of this process (a fresh, empty set after a fork)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queues: list[queue.SimpleQueue[Callable[[], None]]] = []
        self.started = 0
        """Threads started so far (tests read it)."""


_idle = _Idle()


def _forget_in_child() -> None:
    global _idle  # noqa: PLW0603 - the process's one registry, replaced in a child
    _idle = _Idle()


os.register_at_fork(after_in_child=_forget_in_child)


def _serve(jobs: queue.SimpleQueue[Callable[[], None]], idle: _Idle) -> None:
    while True:
        job = jobs.get()
        with contextlib.suppress(Exception):  # a job reports its own outcome
            job()
        with idle.lock:
            if idle is not _idle or len(idle.queues) >= MAX_IDLE:
                return
            idle.queues.append(jobs)


def run_in_thread(job: Callable[[], None]) -> None:
    """Run *job* in a daemon thread: an idle kept one, else a new one. Returns at once.

    *job* must report its own result (it runs unobserved); an exception it lets out
    is dropped.
    """
    idle = _idle
    with idle.lock:
        jobs = idle.queues.pop() if idle.queues else None
        if jobs is None:
            idle.started += 1
    if jobs is None:
        jobs = queue.SimpleQueue()
        thread = threading.Thread(
            target=_serve, args=(jobs, idle), name="waitbound-request", daemon=True
        )
        thread.start()
    jobs.put(job)
