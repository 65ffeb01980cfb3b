"""Time as a parameter: the Clock protocol and the system clock.

The core never reads a clock; drivers hand it ``now`` (aware UTC). Tests use a
fake clock whose sleeps advance virtual time (see ``tests/fakes.py``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "SystemClock", "utc"]


class Clock(Protocol):
    """Where drivers read the time.

    ``now()`` is wall time (aware UTC) for everything persisted; ``monotonic()``
    is in seconds, for measuring durations inside one process.
    """

    def now(self) -> datetime:
        """Return the current time, aware UTC."""
        ...

    def monotonic(self) -> float:
        """Return a monotonic reading in seconds."""
        ...


class SystemClock:
    """The real clock: ``datetime.now(UTC)`` and ``time.monotonic()``."""

    def now(self) -> datetime:
        """Return the current time, aware UTC."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """Return ``time.monotonic()`` in seconds."""
        return time.monotonic()


def utc(value: datetime) -> datetime:
    """Return *value* as aware UTC.

    Raises:
        ValueError: if *value* is naive (no time zone): an instant must say its zone.
    """
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value.isoformat()} has no time zone; use UTC")
    return value.astimezone(UTC)
