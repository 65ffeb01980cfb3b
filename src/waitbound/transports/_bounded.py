"""The async clients' real-time bound, kept by their network streams.

A request's total timeout is a deadline on the monotonic clock (``time.monotonic``,
which is asyncio's clock), set for the task sending it (:func:`deadline_of`). The
network backend of every connection pool waitbound builds (:func:`bounded`) clamps
each connect, TLS handshake, read and write to the time left before it, so a server
trickling its headers one byte at a time is cut off at the deadline (httpx's own
timeouts are per operation) — and checked between reads, not only around the whole
exchange.

Past the deadline a write or a connect fails at once, but a read still gets
:data:`GRACE_S` to take bytes that have already arrived: a process that was frozen (a
GC or VM pause, ``SIGSTOP``) while its answer arrived reads that answer on waking
instead of calling it a timeout, so a result answered during a stall is not asked for
again. A server still trickling gets no more than that grace per read.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final

import httpcore
import httpx

__all__ = ["GRACE_S", "bounded", "deadline_of", "is_bounded"]

GRACE_S: Final = 0.005
"""Seconds a read past the deadline waits for bytes (those already received are read)."""

_DEADLINE: ContextVar[float | None] = ContextVar("waitbound_request_deadline", default=None)
_BOUNDED: weakref.WeakSet[httpx.AsyncClient] = weakref.WeakSet()


@contextmanager
def deadline_of(left_s: float) -> Iterator[None]:
    """Bound this task's network operations to *left_s* seconds from now (real time)."""
    token = _DEADLINE.set(time.monotonic() + left_s)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _left(timeout: float | None, error: type[Exception], *, grace: bool = False) -> float | None:
    """*timeout* clamped to the time left before the task's deadline.

    Raises:
        Exception: *error*, when the deadline passed (a read gets :data:`GRACE_S`).
    """
    at = _DEADLINE.get()
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        if not grace:
            raise error("the request's total timeout passed")
        left = GRACE_S
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self.inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self.inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout, grace=True))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self.inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def start_tls(
        self,
        ssl_context: object,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(await self.inner.start_tls(ssl_context, server_hostname, left))  # type: ignore[arg-type]

    def get_extra_info(self, info: str) -> object:
        return self.inner.get_extra_info(info)


class _Backend(httpcore.AsyncNetworkBackend):
    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self.inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: object = None,
    ) -> httpcore.AsyncNetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        stream = await self.inner.connect_tcp(host, port, left, local_address, socket_options)  # type: ignore[arg-type]
        return _Stream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: object = None
    ) -> httpcore.AsyncNetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(await self.inner.connect_unix_socket(path, left, socket_options))  # type: ignore[arg-type]

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def bounded(transport: httpx.AsyncHTTPTransport) -> httpx.AsyncHTTPTransport:
    """*transport* with its pool's network backend bounded by the task's deadline.

    httpx does not take a network backend, so its pool's is wrapped in place (httpx's
    ``_pool``, httpcore's ``_network_backend``; ``tests/transports`` checks it holds).
    """
    pool = transport._pool
    pool._network_backend = _Backend(pool._network_backend)
    return transport


def mark_bounded(client: httpx.AsyncClient) -> httpx.AsyncClient:
    """Note that every transport of *client* is :func:`bounded`; returns it."""
    _BOUNDED.add(client)
    return client


def is_bounded(client: httpx.AsyncClient) -> bool:
    """Whether *client* was built with :func:`bounded` transports (waitbound's own)."""
    return client in _BOUNDED
