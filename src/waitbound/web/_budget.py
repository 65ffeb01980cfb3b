"""The connection budget of ``waitbound serve``: a share of the open connections is kept
for the webhook receiver and ``/healthz``, and the SSE streams have a cap of their own.

Of the connections the server accepts (``Limits.max_connections``), the last
:data:`RESERVED_CONNECTIONS` are the reserve: while more than the rest are open, every
request but ``POST /webhooks/…`` and ``GET /healthz`` is answered **503**
``{"error": "busy"}`` (``Retry-After: 1``), and a connection accepted into the reserve
must send its request's head within :data:`RESERVE_HEAD_TIMEOUT_S` (an idle socket there
is dropped at once, so the reserve frees itself). At most :data:`MAX_STREAMS` SSE
streams (``/events``, ``/operations/{id}/events``) are open at once; one more is
**503** ``{"error": "too_many_streams"}``. So idle sockets, or open streams, cannot keep
a provider's deliveries or a health check out. See ``docs/serve.md``, "Limits".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "MAX_STREAMS",
    "RESERVED_CONNECTIONS",
    "RESERVE_HEAD_TIMEOUT_S",
    "BudgetGuard",
    "ConnectionBudget",
    "is_reserved",
    "is_stream",
    "reserve_of",
]

RESERVED_CONNECTIONS: Final = 16
"""Connections kept for the receiver and ``/healthz`` (at most a quarter of the cap)."""
MAX_STREAMS: Final = 64
"""SSE streams open at once, at most (at most half the cap)."""
RESERVE_HEAD_TIMEOUT_S: Final = 2.0
"""How long a connection accepted into the reserve has to send its request's head (s)."""


def reserve_of(cap: int, reserved: int = RESERVED_CONNECTIONS) -> int:
    """The reserve of a cap of *cap* connections: *reserved*, at most a quarter of it."""
    return max(0, min(reserved, cap // 4))


def is_reserved(method: str, path: str) -> bool:
    """Whether a request may use the reserve: a webhook delivery or a health check."""
    return (method == "POST" and path.startswith("/webhooks/")) or (
        method in ("GET", "HEAD") and path == "/healthz"
    )


def is_stream(method: str, path: str) -> bool:
    """Whether a request opens an SSE stream (``/events``, ``/operations/{id}/events``)."""
    return method == "GET" and (
        path == "/events" or (path.startswith("/operations/") and path.endswith("/events"))
    )


@dataclass(slots=True, kw_only=True)
class ConnectionBudget:
    """The budget's counts.

    Attributes:
        general: connections open at most for any request (the cap less the reserve).
        max_streams: SSE streams open at most.
        count: how many connections are open now (the server sets it; none: 0).
        streams: SSE streams open now.
    """

    general: int
    max_streams: int = MAX_STREAMS
    count: Callable[[], int] = field(default=lambda: 0)
    streams: int = 0


def _answer(error: str, detail: str) -> JSONResponse:
    return JSONResponse(
        {"error": error, "detail": detail}, status_code=503, headers={"Retry-After": "1"}
    )


class BudgetGuard:
    """Answer 503 to a request the budget has no room for (see the module's docstring);
    *reserved* and *stream* say which requests may use the reserve and which open a
    stream (``serve``'s by default; the MCP server names its own)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        budget: ConnectionBudget,
        reserved: Callable[[str, str], bool] = is_reserved,
        stream: Callable[[str, str], bool] = is_stream,
    ) -> None:
        self.app = app
        self.budget = budget
        self.reserved = reserved
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        if self.reserved(method, path):
            await self.app(scope, receive, send)
            return
        if self.budget.count() > self.budget.general:
            await _answer("busy", "the service is at its connection limit; try again in a moment")(
                scope, receive, send
            )
            return
        if not self.stream(method, path):
            await self.app(scope, receive, send)
            return
        if self.budget.streams >= self.budget.max_streams:
            await _answer(
                "too_many_streams",
                f"{self.budget.max_streams} event streams are open, the most this service "
                "serves at once; try again later",
            )(scope, receive, send)
            return
        self.budget.streams += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.budget.streams -= 1
