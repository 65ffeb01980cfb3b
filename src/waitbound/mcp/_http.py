"""``waitbound mcp --transport http``: the MCP server over streamable HTTP, with the
doors and bounds of ``waitbound serve``.

In order, for every HTTP request (pure ASGI layers, so streamed answers pass through):

1. ``Host`` must name this server (``waitbound.web._hosts``: on every bind address,
   the names derived from it plus ``--allowed-host``), else ``400 unknown_host``;
2. an ``Origin``, when a browser sends one, must be the ``Host``'s own (host and port),
   else ``403 cross_origin`` (``waitbound.web._auth.cross_origin``);
3. the connection budget (``waitbound.web._budget``): ``GET /healthz`` may use the
   reserve; past the general share every other request is ``503 busy``; at most
   ``max_streams`` standalone SSE streams (``GET /mcp``) are open;
4. ``GET /healthz`` answers ``{"ok": true}`` without a token;
5. ``Authorization: Bearer TOKEN`` must be a token of the token file (the SDK's
   ``BearerAuthBackend`` and ``RequireAuthMiddleware`` over a
   :class:`HolderVerifier`), else ``401``; with ``--no-auth`` (loopback only) every
   request is its MCP session's instead (``waitbound.mcp._principal``);
6. the SDK's streamable HTTP app, at most :data:`MAX_SESSIONS` sessions (one more is
   503), each closed after :data:`SESSION_IDLE_S` seconds without a request; a
   session answers only the credential that opened it (the SDK's rule).

Every request is served as :data:`~waitbound.mcp._principal.NOBODY` until a handler
names its principal. The server runs on ``waitbound.web._bounded`` (the head and body
deadlines, the connection cap below half the file descriptors) with the background
worker beside it: a worker that fails stops the process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

import anyio
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from waitbound._engine._worker import WorkerSettings
from waitbound.mcp._jobs import Jobs
from waitbound.mcp._principal import NOBODY, OPEN_SESSION_KEY, acting_for
from waitbound.web._auth import cross_origin
from waitbound.web._bounded import bounded_server, budget_of, listen, run_beside, url_of
from waitbound.web._budget import BudgetGuard
from waitbound.web._hosts import HostGuard, allowed_hosts
from waitbound.web._protocol import Limits
from waitbound.web._tokens import Holder, match_token

__all__ = [
    "MAX_SESSIONS",
    "MCP_PATH",
    "SESSION_IDLE_S",
    "HolderVerifier",
    "http_app",
    "serve_http",
]

MCP_PATH: Final = "/mcp"
MAX_SESSIONS: Final = 100
"""Streamable HTTP sessions open at once, at most (the SDK's default is 10,000)."""
SESSION_IDLE_S: Final = 600.0
"""A session without a request in flight (nor an open stream) this long is closed (s)."""
_SHARED_CLIENT: Final = "shared token"


class HolderVerifier:
    """The SDK's ``TokenVerifier`` over the token file's holders: a token is its
    holder's (compared in constant time with every token), with its name and role in
    the access token's claims; any other is refused."""

    def __init__(self, holders: Sequence[Holder]) -> None:
        self.holders = tuple(holders)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access of *token*'s holder, or ``None``."""
        holder = match_token(token, self.holders)
        if holder is None:
            return None
        return AccessToken(
            token=token,
            client_id=holder.name or _SHARED_CLIENT,
            subject=holder.name or _SHARED_CLIENT,
            scopes=[holder.role],
            claims={"waitbound_name": holder.name, "waitbound_role": holder.role},
        )


def _reserved(method: str, path: str) -> bool:
    return method in ("GET", "HEAD") and path == "/healthz"


def _stream(method: str, path: str) -> bool:
    return method == "GET" and path == MCP_PATH


class _Front:
    """Steps 2, 4 and the principal of the module's list, then *app*."""

    def __init__(self, app: ASGIApp, *, open_sessions: bool) -> None:
        self.app = app
        self.open_sessions = open_sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        why = cross_origin(Headers(scope=scope), scope.get("scheme", "http"))
        if why is not None:
            await JSONResponse(
                {"error": "cross_origin", "detail": f"{why}; nothing was done"}, status_code=403
            )(scope, receive, send)
            return
        if scope["path"] == "/healthz" and scope["method"] in ("GET", "HEAD"):
            await JSONResponse({"ok": True})(scope, receive, send)
            return
        if self.open_sessions:
            scope = dict(scope)
            scope[OPEN_SESSION_KEY] = True
        with acting_for(NOBODY):
            await self.app(scope, receive, send)


def http_app(
    server: MCPServer[None],
    *,
    holders: Sequence[Holder] | None,
    hosts: frozenset[str],
    budget: object,
    max_sessions: int = MAX_SESSIONS,
    session_idle_s: float = SESSION_IDLE_S,
) -> ASGIApp:
    """The ASGI application of the module's list over *server*.

    Args:
        holders: the token file's tokens; ``None``: no authentication (``--no-auth``,
            every request is its MCP session's).
        hosts: the ``Host`` names answered.
        budget: the ``ConnectionBudget`` of the bounded server.
    """
    sdk = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        max_sessions=max_sessions,
        session_idle_timeout=session_idle_s,
        # the Host and Origin checks are the layers in front, on every bind address
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    inner: ASGIApp = sdk
    if holders is not None:
        required = RequireAuthMiddleware(sdk, [])
        inner = AuthenticationMiddleware(
            AuthContextMiddleware(required),
            backend=BearerAuthBackend(HolderVerifier(holders)),
        )
    app: ASGIApp = _Front(inner, open_sessions=holders is None)
    app = BudgetGuard(app, budget=budget, reserved=_reserved, stream=_stream)  # type: ignore[arg-type]
    return _Lifespan(HostGuard(app, hosts=hosts), sdk)


class _Lifespan:
    """*app* for HTTP requests; the lifespan (the SDK's session manager) to *sdk*."""

    def __init__(self, app: ASGIApp, sdk: ASGIApp) -> None:
        self.app = app
        self.sdk = sdk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.sdk(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def serve_http(
    server: MCPServer[None],
    jobs: Jobs,
    host: str,
    port: int,
    *,
    holders: Sequence[Holder] | None,
    allowed: Iterable[str] = (),
    settings: WorkerSettings | None = None,
    limits: Limits = Limits(),  # noqa: B008 - frozen value
    stop: anyio.Event | None = None,
    on_listening: Callable[[str], None] | None = None,
    handle_signals: bool = True,
) -> None:
    """Serve *server* on *host*:*port* (``0``: any free port) with its background
    worker (:meth:`Jobs.drive`) beside it, until a signal or *stop*.

    Args:
        holders: the token file's tokens (``None``: ``--no-auth``; the caller checks
            that *host* is loopback).
        allowed: more ``Host`` names to answer to (``--allowed-host``).
        limits: deadlines and connection caps (``waitbound.web._protocol``).
        on_listening: called with ``http://HOST:PORT`` once the server accepts.

    Raises:
        UsageError: the address cannot be bound, or the server did not start.
        WaitboundError: the worker failed (after the server shut down).
    """
    sock = listen(host, port)
    url = url_of(sock)
    cap, budget = budget_of(limits)
    app = http_app(server, holders=holders, hosts=allowed_hosts(host, allowed), budget=budget)
    bounded = bounded_server(app, limits, cap, budget)
    stop = stop or anyio.Event()

    async def drive() -> None:
        await jobs.drive(stop, settings)

    try:
        await run_beside(
            bounded,
            [sock],
            [drive],
            stop=stop,
            on_listening=None if on_listening is None else lambda: on_listening(url),
            handle_signals=handle_signals,
        )
    finally:
        sock.close()
