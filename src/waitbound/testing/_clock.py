"""Virtual time for tests: a clock whose sleeps advance it and are recorded."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

__all__ = ["START", "FakeClock", "VirtualTimeExceeded"]

#: Where a :class:`FakeClock` starts by default (aware UTC).
START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class VirtualTimeExceeded(AssertionError):
    """Virtual time ran past the fake clock's ``limit_s``: the code kept waiting.

    Raised by :meth:`FakeClock.sleep` (and ``advance``) so that a loop without a deadline
    fails fast instead of polling forever in virtual time.

    Attributes:
        limit_s: the clock's limit in seconds of virtual time.
        sleeps: how many sleeps the code took before it ran past the limit.
    """

    def __init__(self, limit_s: float, sleeps: int) -> None:
        super().__init__(
            f"no deadline? virtual time passed the fake clock's limit of {limit_s:g} s after "
            f"{sleeps} sleeps: the code under test kept waiting; give it a deadline "
            "(or raise FakeClock(limit_s=...) if the wait is meant to be that long)"
        )
        self.limit_s = limit_s
        self.sleeps = sleeps


class FakeClock:
    """Virtual time: ``sleep`` advances it and records each sleep in seconds.

    Usable as waitbound's ``clock=`` (it has ``now()`` and ``monotonic()``) and its
    ``sleep=`` (:meth:`sleep`, or :meth:`async_sleep` for the async API); the ``provider``
    fixture's simulator reads it too, so answers scripted ``after_s`` seconds later come
    when the code has slept that long. Safe to read from the simulator's threads.

    Args:
        start: the initial wall time (aware UTC).
        limit_s: seconds of virtual time after which :meth:`sleep` raises
            :class:`VirtualTimeExceeded`; ``None`` means no limit.

    Attributes:
        sleeps: every sleep taken, in seconds, in order.
    """

    def __init__(self, start: datetime = START, *, limit_s: float | None = None) -> None:
        if start.tzinfo is None:
            raise ValueError(f"naive datetime {start.isoformat()} has no time zone; use UTC")
        self._lock = threading.Lock()
        self._now = start
        self._mono = 1000.0
        self._origin = self._mono
        self.limit_s = limit_s
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        """Return the current virtual time, aware UTC."""
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        """Return the virtual monotonic reading in seconds."""
        with self._lock:
            return self._mono

    @property
    def elapsed_s(self) -> float:
        """Seconds of virtual time since the clock was made."""
        with self._lock:
            return self._mono - self._origin

    def advance(self, seconds: float) -> None:
        """Move virtual time forward by *seconds* without recording a sleep.

        Raises:
            ValueError: *seconds* is negative.
            VirtualTimeExceeded: the clock passed its ``limit_s``.
        """
        if seconds < 0:
            raise ValueError(f"time moves forward only; got {seconds} s")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._mono += seconds
            over = self.limit_s is not None and self._mono - self._origin > self.limit_s
        if over and self.limit_s is not None:
            raise VirtualTimeExceeded(self.limit_s, len(self.sleeps))

    def sleep(self, seconds: float) -> None:
        """Record a sleep of *seconds* and advance virtual time by it (never really sleeps).

        Raises:
            VirtualTimeExceeded: the clock passed its ``limit_s``.
        """
        self.sleeps.append(seconds)
        self.advance(max(0.0, seconds))

    async def async_sleep(self, seconds: float) -> None:
        """The coroutine form of :meth:`sleep`, for the async API's ``sleep=``."""
        self.sleep(seconds)
