"""Failpoints: kill this process at a named point, for crash tests only.

``WAITBOUND_FAILPOINT=NAME:N`` makes the N-th pass through :func:`hit` with that name
send SIGKILL to this process — the same death as ``kill -9``, at a chosen moment.
Unset (always, outside tests), :func:`hit` is a dictionary lookup.

Points: ``reserved`` (a request is counted and persisted, not yet sent) and
``answered`` (its answer arrived, not yet persisted); each is also named with the
request kind, e.g. ``reserved-result``. ``final``: the driver has just persisted a
record that is final (``Record.is_final``: an outcome, no decision request open), by a
finish without a request or by an answer's transition; its outbox entries are stored
with it and none is delivered yet.
"""

from __future__ import annotations

import os
import signal
from typing import Final

__all__ = ["hit"]

_SPEC: Final = os.environ.get("WAITBOUND_FAILPOINT", "")
_NAME, _, _COUNT = _SPEC.partition(":")
_seen = 0


def hit(*names: str) -> None:
    """Die here if this is the failpoint's N-th pass (any of *names* may match)."""
    global _seen  # noqa: PLW0603 - one counter per process, by design
    if not _SPEC or _NAME not in names:
        return
    _seen += 1
    if str(_seen) == _COUNT:
        os.kill(os.getpid(), signal.SIGKILL)
