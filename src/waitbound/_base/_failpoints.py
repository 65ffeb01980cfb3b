"""Failpoints: kill this process, or stall it, at a named point; for crash tests only.

``WAITBOUND_FAILPOINT=NAME:N`` makes the N-th pass through :func:`hit` with that name
send SIGKILL to this process — the same death as ``kill -9``, at a chosen moment.
``WAITBOUND_FAILPOINT=NAME:N:pause=S`` makes that pass stall for ``S`` seconds instead
— a GC or VM pause, a ``SIGSTOP``, a starved CPU — and then go on: :func:`hit` returns
``S`` and the caller pauses its step there with the sleep it was given (the driver's
``sleep``; the worker's ``sleep``), so under a virtual clock the pause is virtual too.
Unset (always, outside tests), :func:`hit` is a dictionary lookup.

Points: ``reserved`` (a request is counted and persisted, not yet sent),
``send.after_plan`` (its lease was checked and its send planned, nothing opened yet),
``send.after_connect`` (the transport has its connection, opened for it or taken from
the pool, and nothing of the request was written; the lease is checked again after),
``send.after_send`` (its bytes left; its answer not read yet), ``answered``
(its answer arrived, not yet persisted) and ``saving`` (its answer's write is about
to be made: after ``answered``, and again before each write made again after a
conflict); each is also named with the request kind, e.g. ``reserved-result``.
``final``: the driver has just persisted a record that is final (``Record.is_final``:
an outcome, no decision request open), by a finish without a request or by an answer's
transition; its outbox entries are stored with it and none is delivered yet.
``committing``: the worker's group commit has gathered a batch of answers (its commit
pause is over) and is about to write it in one transaction.

In-process tests set a failpoint with :func:`inject` (the same spec, counted afresh).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

__all__ = ["hit", "inject"]


@dataclass(slots=True)
class _Point:
    name: str
    count: int
    pause_s: float | None
    seen: int = 0


def _parse(spec: str) -> _Point | None:
    """``NAME:N`` or ``NAME:N:pause=S`` as a point; ``None`` for an empty or malformed spec."""
    name, _, rest = spec.partition(":")
    count, _, action = rest.partition(":")
    if not name or not count.isdigit():
        return None
    pause_s: float | None = None
    if action:
        word, _, value = action.partition("=")
        try:
            pause_s = float(value)
        except ValueError:
            return None
        if word != "pause" or not pause_s >= 0:
            return None
    return _Point(name, int(count), pause_s)


_FROM_ENV: Final = _parse(os.environ.get("WAITBOUND_FAILPOINT", ""))
_point: _Point | None = _FROM_ENV


def hit(*names: str) -> float:
    """Die here if this is the failpoint's N-th pass (any of *names* may match); for a
    pause failpoint, return the seconds to stall here (0.0 otherwise)."""
    point = _point
    if point is None or point.name not in names:
        return 0.0
    point.seen += 1
    if point.seen != point.count:
        return 0.0
    if point.pause_s is None:
        os.kill(os.getpid(), signal.SIGKILL)
    return point.pause_s or 0.0


@contextmanager
def inject(spec: str) -> Iterator[None]:
    """Set the failpoint *spec* (``NAME:N[:pause=S]``) for the block, counted from zero.

    Raises:
        ValueError: *spec* is not a failpoint.
    """
    global _point  # noqa: PLW0603 - one failpoint per process, by design
    point = _parse(spec)
    if point is None:
        raise ValueError(f"not a failpoint: {spec!r} (NAME:N or NAME:N:pause=SECONDS)")
    before, _point = _point, point
    try:
        yield
    finally:
        _point = before
