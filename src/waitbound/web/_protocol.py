"""The HTTP/1.1 connections of ``waitbound serve``: uvicorn's h11 protocol, with the
limits uvicorn lacks against slow or many clients (see ``docs/serve.md``, "Limits").

uvicorn caps a request head's size only with its h11 parser
(``h11_max_incomplete_event_size``; its httptools parser has no cap), times out only a
keep-alive connection idle after an answer (any byte cancels that timer, so a
connection that never finishes a request is never timed out), and its
``limit_concurrency`` answers 503 to requests while still accepting every connection.
:class:`LimitedH11Protocol` adds, per connection:

- a deadline for each request's head (line and headers): :attr:`Limits.head_timeout_s`
  from the connection's start, or from the end of the previous answer;
- then a deadline for its body, :attr:`Limits.body_timeout_s` from the end of the head
  — a backstop behind the application's own bound (``POST /webhooks`` answers 408
  sooner);
- a cap on open connections: a connection accepted while that many are open is closed
  at once, so a flood of half-open connections cannot exhaust the process's file
  descriptors; the last of them are a reserve for the receiver and ``/healthz``
  (``waitbound.web._budget``), where a connection has a shorter deadline for its head.

A connection past a deadline is closed without an answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import ClassVar, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from waitbound.web._budget import MAX_STREAMS, RESERVE_HEAD_TIMEOUT_S, RESERVED_CONNECTIONS

__all__ = [
    "HEAD_TIMEOUT_S",
    "KEEP_ALIVE_S",
    "MAX_CONNECTIONS",
    "MAX_HEAD_BYTES",
    "LimitedH11Protocol",
    "Limits",
    "connection_cap",
    "protocol_of",
]

HEAD_TIMEOUT_S: Final = 10.0
"""How long a connection has to send each request's line and headers (seconds)."""
BODY_TIMEOUT_S: Final = 30.0
"""How long it then has to send the request's body (seconds)."""
KEEP_ALIVE_S: Final = 5
"""How long a connection may stay idle after an answer (seconds; uvicorn's own)."""
MAX_HEAD_BYTES: Final = 65_536
"""The largest request line and headers taken (bytes): a larger head is a 400."""
MAX_CONNECTIONS: Final = 256
"""Open connections at most (fewer when the process may open fewer files)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What one client may take of the server.

    Attributes:
        head_timeout_s: seconds to send a request's line and headers.
        body_timeout_s: seconds, after them, to send its body.
        max_connections: open connections at most (see :func:`connection_cap`).
        reserved_connections: of those, kept for the receiver and ``/healthz`` (at most
            a quarter; see ``waitbound.web._budget``).
        max_streams: SSE streams open at once, at most (at most half the cap).
    """

    head_timeout_s: float = HEAD_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    reserved_connections: int = RESERVED_CONNECTIONS
    max_streams: int = MAX_STREAMS


def connection_cap(limit: int = MAX_CONNECTIONS) -> int:
    """*limit*, or half the process's soft limit on open files when that is lower
    (the store, the worker's requests and the completion webhooks need the rest)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return limit
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return limit
    return max(1, min(limit, soft // 2))


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's head and body, and a
    cap on open connections (``limit_concurrency``); see the module's docstring."""

    head_timeout_s: ClassVar[float] = HEAD_TIMEOUT_S
    body_timeout_s: ClassVar[float] = BODY_TIMEOUT_S
    max_open: ClassVar[int | None] = None
    """Connections open at most (``None``: uvicorn's ``limit_concurrency``)."""
    general_open: ClassVar[int | None] = None
    """Past this many open, a new connection is in the reserve (``waitbound.web._budget``)
    and has :data:`~waitbound.web._budget.RESERVE_HEAD_TIMEOUT_S` for its head."""
    _timer: asyncio.TimerHandle | None = None
    _in_body = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Take the connection, or close it at once when the cap is reached."""
        limit = self.max_open if self.max_open is not None else self.config.limit_concurrency
        if limit is not None and len(self.connections) >= limit:
            self.transport = transport  # connection_lost closes it
            transport.abort()
            return
        super().connection_made(transport)
        general = self.general_open
        in_reserve = general is not None and len(self.connections) > general
        self._deadline(
            min(self.head_timeout_s, RESERVE_HEAD_TIMEOUT_S) if in_reserve else self.head_timeout_s
        )

    def handle_events(self) -> None:
        """uvicorn's; then the deadline of where the request is: its head, its body,
        or none once it is in."""
        super().handle_events()
        state = self.conn.their_state
        if state is h11.IDLE:
            self._in_body = False
        elif state is h11.SEND_BODY:
            if not self._in_body:
                self._in_body = True
                self._deadline(self.body_timeout_s)
        else:
            self._cancel()

    def on_response_complete(self) -> None:
        """uvicorn's; the next request's head has its own deadline (armed first: a
        pipelined request already buffered is handled inside, which disarms it)."""
        self._deadline(self.head_timeout_s)
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        """uvicorn's, leaving no deadline behind."""
        self._cancel()
        super().connection_lost(exc)

    def _deadline(self, seconds: float) -> None:
        self._cancel()
        self._timer = self.loop.call_later(seconds, self._too_slow)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_slow(self) -> None:
        self._timer = None
        if not self.transport.is_closing():
            self.transport.close()


def protocol_of(
    limits: Limits, *, max_open: int | None = None, general_open: int | None = None
) -> type[LimitedH11Protocol]:
    """The protocol class (uvicorn's ``http``) keeping *limits*' deadlines, taking at most
    *max_open* connections, the ones past *general_open* into the reserve."""
    if (limits.head_timeout_s, limits.body_timeout_s, max_open, general_open) == (
        HEAD_TIMEOUT_S,
        BODY_TIMEOUT_S,
        None,
        None,
    ):
        return LimitedH11Protocol
    attributes = {
        "head_timeout_s": limits.head_timeout_s,
        "body_timeout_s": limits.body_timeout_s,
        "max_open": max_open,
        "general_open": general_open,
    }
    return type("LimitedH11Protocol", (LimitedH11Protocol,), attributes)
