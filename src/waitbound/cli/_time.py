"""The clock, sleep and random generator the commands wait with: the system's, unless a
test gives its own.

``waitbound.cli.run(argv, clock=..., sleep=..., rng=...)`` sets them for one command, so a
test runs the real command in-process on virtual time (e.g.
:class:`waitbound.testing.FakeClock`) with a seeded generator (the backoff's jitter)
instead of starting a process that sleeps for real. Nothing else sets them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from waitbound._base._clock import Clock

__all__ = ["timing", "using"]

_Given = tuple[Clock | None, Callable[[float], None] | None, random.Random | None]
_GIVEN: ContextVar[_Given] = ContextVar("waitbound_cli_time", default=(None, None, None))


def timing() -> dict[str, Any]:
    """The ``clock=``, ``sleep=`` and ``rng=`` keywords to pass to the API: none unless a
    test set them."""
    clock, sleep, rng = _GIVEN.get()
    given: dict[str, Any] = {}
    if clock is not None:
        given["clock"] = clock
    if sleep is not None:
        given["sleep"] = sleep
    if rng is not None:
        given["rng"] = rng
    return given


@contextmanager
def using(
    clock: Clock | None,
    sleep: Callable[[float], None] | None,
    rng: random.Random | None = None,
) -> Iterator[None]:
    """Within the block, the commands wait with *clock*, *sleep* and *rng* (``None``: the
    system's)."""
    token = _GIVEN.set((clock, sleep, rng))
    try:
        yield
    finally:
        _GIVEN.reset(token)
