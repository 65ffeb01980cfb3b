"""The driver's effects: what its steps yield and the interpreters carry out.

The loop (``waitbound._engine._driver``) yields :class:`_Sleep` and :class:`_Send`; one
request's exchange (:data:`Exchange`) also yields :class:`_Persist`, :class:`_Reread`
and :class:`_Pause`. The sync and async interpreters
(``waitbound._engine._interpreters``) carry them out with the :class:`Tools` they are
handed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass

from waitbound._base._clock import Clock
from waitbound._model._audit import AuditEvent
from waitbound._model._record import Record
from waitbound._rules._controller import Request, Transition
from waitbound.stores import Store
from waitbound.transports import Fence

__all__ = [
    "Credentials",
    "EventSink",
    "Exchange",
    "Tools",
]

EventSink = Callable[[AuditEvent], None]
Credentials = Mapping[str, str] | Callable[[Record], Mapping[str, str]]
"""The caller's headers: one mapping for every operation, or a function giving each
operation's own, or :class:`~waitbound._rules._credentials.BoundCredentials` (headers
bound to configured places, whatever a record says). See
:func:`~waitbound._rules._credentials.headers_for`."""


@dataclass(frozen=True, slots=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Send:
    request: Request
    headers: Mapping[str, str]
    content: bytes | None
    secrets: tuple[str, ...]
    record: Record
    """The reserved record the request is sent for (its span's attributes)."""
    fence: Fence | None = None
    """Its lease's last moment, checked by the transport right before a connection is
    opened for it and right before its bytes are written (``transports._fence``)."""


@dataclass(frozen=True, slots=True)
class _Persist:
    """Write the answer's transition; answer with the stored record or the ConflictError."""

    transition: Transition


@dataclass(frozen=True, slots=True)
class _Reread:
    """Read the record again (after a conflict); answer with it, or ``None``."""

    operation_id: str


@dataclass(frozen=True, slots=True)
class _Pause:
    """Stall the step here for *seconds* (a pause failpoint); answer with ``None``."""

    seconds: float


Exchange = Generator["_Send | _Persist | _Reread | _Pause", object, Record | None]
"""One reserved request's exchange (see :func:`waitbound._engine._driver.exchange`)."""


@dataclass(frozen=True, slots=True)
class Tools:
    """What both interpreters are handed: the store, time, randomness, the event sink."""

    store: Store
    clock: Clock
    rng: random.Random
    on_event: EventSink | None
    headers: Callable[[Record], Mapping[str, str]]
    per_origin: bool = False
    """The headers are a function giving each operation its own (see :data:`Credentials`)."""
