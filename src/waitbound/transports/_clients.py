"""The httpx clients waitbound builds itself: their settings, and one shared per process.

A call given no client (``waitbound.wait(client=None)`` and the other calls of the
public API) borrows a shared one instead of building its own: building an
``httpx.Client`` loads the CA bundle (about 28 ms of CPU, even for ``http://`` URLs),
and a fresh client reuses no connection. The rules:

- **sync**: one ``httpx.Client`` per process, created on first use under a lock (two
  threads never build two), closed at interpreter exit (``atexit``);
- **async**: one ``httpx.AsyncClient`` per running asyncio event loop (an async client
  is bound to the loop that opened its connections). It is closed when the loop shuts
  down its async generators (``asyncio.run`` and ``anyio.run`` do, before closing the
  loop) and forgotten once its loop is closed. Where the loop cannot be identified
  (trio, or a loop that cannot be a key) each call builds its own client and closes it;
- **fork**: a child process never uses its parent's clients (httpx clients are not
  fork-safe: the connections would be shared); they are forgotten in the child
  (``os.register_at_fork``) and built afresh on first use;
- a client the caller passes is used as given and never closed by waitbound.

Every client waitbound builds speaks HTTP/1.1 only (no HTTP/2), keeps connections alive
per origin (httpx's connection pool; an async client's split in small shards,
``transports._pool``), never follows redirects itself (waitbound follows
same-origin redirects within the request budget, ``transports._http``), and keeps
httpx's ``trust_env=True``: the proxy variables (``HTTPS_PROXY``, ``NO_PROXY``) and
``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` are honoured. Those are read once, when a client is
built; they cost nothing per request (measured, ``docs/waiting.md``).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import urllib.request
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Final

import httpx
from sniffio import AsyncLibraryNotFoundError, current_async_library

from waitbound.transports._bounded import mark_bounded
from waitbound.transports._pool import ShardedTransport

__all__ = [
    "DEFAULT_CONCURRENCY",
    "KEEPALIVE_EXPIRY_S",
    "borrow_async_client",
    "borrow_client",
    "new_async_client",
    "new_client",
    "shared_client",
    "worker_limits",
]

KEEPALIVE_EXPIRY_S: Final = 5.0
"""Seconds an idle kept-alive connection stays open (httpx's default): shorter than
common servers' idle timeouts, so a connection is rarely closed under a new request."""


def worker_limits(concurrency: int) -> httpx.Limits:
    """The connection pool of a client sending *concurrency* requests at once.

    Every request in flight may have its own connection and every one of them stays
    alive when idle (httpx's default keeps only 20, so a worker with more slots would
    open and close connections on every pass).

    Raises:
        ValueError: *concurrency* is below 1.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    return httpx.Limits(
        max_connections=concurrency,
        max_keepalive_connections=concurrency,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )


DEFAULT_CONCURRENCY: Final = 100
"""Requests in flight at once through a client built for no stated concurrency (the
shared ones): httpx's own default ``max_connections``."""


def new_client() -> httpx.Client:
    """A blocking client with waitbound's settings (see the module docstring)."""
    return httpx.Client(
        follow_redirects=False,
        http1=True,
        http2=False,
        limits=httpx.Limits(
            max_connections=DEFAULT_CONCURRENCY,
            max_keepalive_connections=20,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
        ),
    )


def new_async_client(concurrency: int = DEFAULT_CONCURRENCY) -> httpx.AsyncClient:
    """An async client with waitbound's settings, for *concurrency* requests at once.

    Its connections are kept in small pools (``ShardedTransport``: httpcore's one pool
    costs O(connections) per request), at most *concurrency* in flight. When the
    environment names a proxy (``HTTPS_PROXY`` and the like, read by
    ``urllib.request.getproxies`` as httpx does), httpx's own transport and proxy
    handling are used instead, with :func:`worker_limits` (a client given its own
    transport would ignore the proxy variables).

    Raises:
        ValueError: *concurrency* is below 1.
    """
    if urllib.request.getproxies():
        return httpx.AsyncClient(
            follow_redirects=False, http1=True, http2=False, limits=worker_limits(concurrency)
        )
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    transport = ShardedTransport(max_connections=concurrency, keepalive_expiry_s=KEEPALIVE_EXPIRY_S)
    return mark_bounded(httpx.AsyncClient(follow_redirects=False, transport=transport))


@dataclass(slots=True)
class _Kept:
    """A loop's shared async client and the async generator that closes it."""

    client: httpx.AsyncClient
    closer: AsyncGenerator[None, None]


class _Shared:
    """This process's shared clients (a fresh, empty one after a fork)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.client: httpx.Client | None = None
        self.loops: dict[asyncio.AbstractEventLoop, _Kept] = {}


_shared = _Shared()


def _forget_in_child() -> None:
    """After a fork, in the child: drop the parent's clients without closing them
    (closing would touch connections the parent still uses)."""
    global _shared  # noqa: PLW0603 - the process's one registry, replaced in a child
    _shared = _Shared()


os.register_at_fork(after_in_child=_forget_in_child)


def _close_at_exit() -> None:
    with _shared.lock:
        client, _shared.client = _shared.client, None
    if client is not None:
        client.close()


atexit.register(_close_at_exit)


def shared_client() -> httpx.Client:
    """This process's shared blocking client, built on first use (thread-safe).

    The same client is returned to every caller and thread until the process exits
    (it is closed then); a client found closed is replaced. Never close it yourself.
    """
    shared = _shared
    client = shared.client
    if client is None or client.is_closed:
        with shared.lock:
            client = shared.client
            if client is None or client.is_closed:
                client = shared.client = new_client()
    return client


async def _close_with_loop(
    loop: asyncio.AbstractEventLoop, kept: dict[asyncio.AbstractEventLoop, _Kept]
) -> AsyncGenerator[None, None]:
    """Suspended for the loop's lifetime; the loop's ``shutdown_asyncgens`` resumes it
    to close the loop's shared client while the loop still runs."""
    try:
        yield
    finally:
        entry = kept.pop(loop, None)
        if entry is not None:
            await entry.client.aclose()


async def _loop_client() -> httpx.AsyncClient | None:
    """The running asyncio loop's shared client (built on first use), or ``None`` when
    the loop cannot be identified (another async library, a loop that is no key)."""
    try:
        if current_async_library() != "asyncio":
            return None
        loop = asyncio.get_running_loop()
        hash(loop)
    except (AsyncLibraryNotFoundError, RuntimeError, TypeError):
        return None
    shared = _shared
    with shared.lock:
        for closed in [other for other in shared.loops if other.is_closed()]:
            del shared.loops[closed]
        entry = shared.loops.get(loop)
        if entry is not None and not entry.client.is_closed:
            return entry.client
        client = new_async_client()
        closer = _close_with_loop(loop, shared.loops)
        shared.loops[loop] = _Kept(client=client, closer=closer)
    # Starting the generator registers it with the running loop (its firstiter hook),
    # so that the loop's shutdown closes the client. It reaches its ``yield`` at once.
    await closer.asend(None)
    return client


def borrow_client(given: httpx.Client | None) -> httpx.Client:
    """The blocking client to send with: *given* as it is, else the shared one.

    Neither is to be closed by the borrower.
    """
    return given if given is not None else shared_client()


async def borrow_async_client(
    given: httpx.AsyncClient | None,
) -> tuple[httpx.AsyncClient, bool]:
    """The async client to send with, and whether the borrower must close it after.

    *given* as it is (``False``: the caller's, never closed by waitbound); else the
    running loop's shared client (``False``); else, where the loop cannot be identified
    (trio), a client for this call alone (``True``).
    """
    if given is not None:
        return given, False
    shared = await _loop_client()
    if shared is not None:
        return shared, False
    return new_async_client(), True
