"""The clock and sleep the commands wait with: the system's, unless a test gives its own.

``waitbound.cli.run(argv, clock=..., sleep=...)`` sets them for one command, so a test runs
the real command in-process on virtual time (e.g. :class:`waitbound.testing.FakeClock`)
instead of starting a process that sleeps for real. Nothing else sets them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from waitbound._base._clock import Clock

__all__ = ["timing", "using"]

_GIVEN: ContextVar[tuple[Clock | None, Callable[[float], None] | None]] = ContextVar(
    "waitbound_cli_time", default=(None, None)
)


def timing() -> dict[str, Any]:
    """The ``clock=`` and ``sleep=`` keywords to pass to the API: none unless a test set them."""
    clock, sleep = _GIVEN.get()
    given: dict[str, Any] = {}
    if clock is not None:
        given["clock"] = clock
    if sleep is not None:
        given["sleep"] = sleep
    return given


@contextmanager
def using(clock: Clock | None, sleep: Callable[[float], None] | None) -> Iterator[None]:
    """Within the block, the commands wait with *clock* and *sleep* (``None``: the system's)."""
    token = _GIVEN.set((clock, sleep))
    try:
        yield
    finally:
        _GIVEN.reset(token)
