"""One bounded HTTP server for ``waitbound serve`` and ``waitbound mcp --transport http``.

Both fronts run uvicorn's server in their anyio event loop with the same limits
(``waitbound.web._protocol`` and ``waitbound.web._budget``): h11 with a deadline for
each request's head and body and a 64 KiB cap on a head, a cap on open connections
(at most half the process's file descriptors, so a flood of idle sockets is closed at
accept and never exhausts them: the store, the worker's requests and the answers keep
theirs), a reserve of those connections for health checks, a short keep-alive and
accept queue, no WebSocket upgrades. :func:`run_beside` runs the server and the
front's own tasks (its worker, sweeps) side by side: when one of them fails, all stop
and the failure is raised — the process never lingers holding its port but serving
nothing.
"""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, Final

import anyio
import uvicorn
from starlette.types import ASGIApp

from waitbound._base._errors import UsageError
from waitbound.web._budget import ConnectionBudget, reserve_of
from waitbound.web._protocol import (
    KEEP_ALIVE_S,
    MAX_HEAD_BYTES,
    Limits,
    connection_cap,
    protocol_of,
)

__all__ = [
    "GRACEFUL_S",
    "BoundedServer",
    "budget_of",
    "bounded_server",
    "listen",
    "run_beside",
    "url_of",
]

GRACEFUL_S: Final = 5
"""How long shutdown waits for answers in flight before it cancels them (seconds)."""


class BoundedServer(uvicorn.Server):
    """uvicorn's server without its own signal handlers: :func:`run_beside` handles
    the signals, so the front's other tasks stop with the server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to *host*:*port* (``0``: any free port), not yet listening.

    Raises:
        UsageError: the address cannot be bound (in use, not this machine's, …).
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
        except OSError:
            sock.close()
            raise
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; give another --host or --port"
        ) from None
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a bound socket (an IPv6 host in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def budget_of(limits: Limits) -> tuple[int, ConnectionBudget]:
    """The connection cap for *limits* (see ``connection_cap``) and its budget: the
    cap less the reserve for any request, and the cap on streams (at most half)."""
    cap = connection_cap(limits.max_connections)
    general = cap - reserve_of(cap, limits.reserved_connections)
    budget = ConnectionBudget(
        general=general, max_streams=max(1, min(limits.max_streams, cap // 2))
    )
    return cap, budget


def bounded_server(
    app: ASGIApp, limits: Limits, cap: int, budget: ConnectionBudget
) -> BoundedServer:
    """uvicorn's server for *app* under *limits*, taking at most *cap* connections;
    *budget* then counts the server's open connections."""
    config = uvicorn.Config(
        app,
        http=protocol_of(limits, max_open=cap, general_open=budget.general),
        ws="none",
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        limit_concurrency=cap + 1,  # the protocol closes past cap; the budget answers 503
        # a burst of accepts holds its sockets until the next turn of the loop (even
        # those closed past the cap): cap + backlog stays under the descriptors
        backlog=max(1, cap // 2),
        timeout_keep_alive=KEEP_ALIVE_S,
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_S,
    )
    server = BoundedServer(config)
    budget.count = lambda: len(server.server_state.connections)
    return server


async def _watch_signals(stop: anyio.Event, server: uvicorn.Server) -> None:
    """SIGTERM or SIGINT: shut down gracefully; a second one: stop waiting for answers."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            if stop.is_set():
                server.force_exit = True
            stop.set()


async def run_beside(
    server: BoundedServer,
    sockets: Sequence[Any],
    tasks: Sequence[Callable[[], Awaitable[object]]],
    *,
    stop: anyio.Event,
    on_listening: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
    handle_signals: bool = True,
) -> None:
    """Serve on *sockets* with *tasks* running beside the server until *stop* is set
    (or a signal, with *handle_signals*), then shut down: *on_stop* is called, the
    server stops accepting and lets the answers in flight finish (at most
    :data:`GRACEFUL_S` seconds); the tasks are expected to end once *stop* is set.

    Raises:
        UsageError: the server did not start.
        Exception: the first failure of a task (after the rest shut down).
    """
    failures: list[BaseException] = []

    def guarded(task: Callable[[], Awaitable[object]]) -> Callable[[], Coroutine[Any, Any, None]]:
        async def run() -> None:
            try:
                await task()
            except Exception as exc:  # one part failed: the others shut down too
                failures.append(exc)
                stop.set()

        return run

    async def http_server() -> None:
        try:
            await server.serve(sockets=list(sockets))
        except SystemExit:  # uvicorn's way to say the app did not start
            failures.append(UsageError("the HTTP server did not start"))
        finally:
            stop.set()  # the server stopped: so does the rest

    async def shut_down() -> None:
        while not server.started and not stop.is_set():
            await anyio.sleep(0.01)
        if server.started and on_listening is not None:
            on_listening()
        await stop.wait()
        if on_stop is not None:
            on_stop()
        server.should_exit = True

    async with anyio.create_task_group() as outer:
        if handle_signals:
            outer.start_soon(_watch_signals, stop, server)
        async with anyio.create_task_group() as group:
            group.start_soon(http_server)
            group.start_soon(shut_down)
            for task in tasks:
                group.start_soon(guarded(task))
        outer.cancel_scope.cancel()
    if failures:
        raise failures[0]
