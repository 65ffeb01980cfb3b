"""A connection pool kept small: httpx's own transport, split into shards of a few
connections each.

Why: httpcore 1.0's connection pool re-examines every connection it holds (and polls
every idle one's socket, ``has_expired`` → ``is_readable``, a ``getpeername`` and a
``poll`` each) for every queued request, twice per request (when it starts and when its
response closes): O(connections x requests) per request. With 32 requests in flight
through one pool that is about 2,000 connection checks per request and doubles the CPU
a request costs (measured: 2.1 ms against 0.9-1.0 ms with shards of 4; see
``docs/waiting.md``). Upstream: encode/httpcore pull requests 928 and 1035 (open).

How: each shard is an ordinary ``httpx.AsyncHTTPTransport`` (HTTP/1.1, keep-alive,
``httpx.Limits``) of at most ``2 * shard_size`` connections. A request goes to the
least busy shard (the first among equals, so a lightly loaded client keeps reusing the
same connections); a shard is added only when every shard has ``shard_size`` requests in
flight, up to ``max_connections / shard_size`` shards, after which requests wait in the
least busy shard's pool as they would in one big pool. A request counts as in flight
until its response is closed. Nothing here speaks HTTP: the shards do.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from typing import Final

import httpx

from waitbound.transports._bounded import bounded

__all__ = ["SHARD_SIZE", "ShardedTransport"]

SHARD_SIZE: Final = 4
"""Requests in flight per shard before another shard is opened."""


class _Released(httpx.AsyncByteStream):
    """A response body that tells its shard when the response is closed (once)."""

    def __init__(self, stream: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._stream = stream
        self._release: Callable[[], None] | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


class ShardedTransport(httpx.AsyncBaseTransport):
    """An async transport of small ``httpx.AsyncHTTPTransport`` shards (see the module).

    Args:
        max_connections: the most connections in flight across all shards (the
            client's concurrency); at least 1.
        keepalive_expiry_s: seconds an idle connection stays open.
        shard_size: requests in flight per shard before another is opened.
        make_shard: builds one shard from its ``httpx.Limits`` (tests pass their own).

    Raises:
        ValueError: *max_connections* or *shard_size* below 1.
    """

    def __init__(
        self,
        *,
        max_connections: int,
        keepalive_expiry_s: float,
        shard_size: int = SHARD_SIZE,
        make_shard: Callable[[httpx.Limits], httpx.AsyncBaseTransport] | None = None,
    ) -> None:
        if max_connections < 1 or shard_size < 1:
            raise ValueError(
                f"max_connections and shard_size must be at least 1, "
                f"got {max_connections} and {shard_size}"
            )
        self.shard_size = min(shard_size, max_connections)
        self.max_shards = math.ceil(max_connections / self.shard_size)
        kept = 2 * self.shard_size  # room for idle connections to a second origin
        self.limits = httpx.Limits(
            max_connections=kept,
            max_keepalive_connections=kept,
            keepalive_expiry=keepalive_expiry_s,
        )
        self._make = make_shard or _http11
        self.shards: list[httpx.AsyncBaseTransport] = []
        self.busy: list[int] = []
        """Requests in flight per shard (sent, response not yet closed)."""

    def _pick(self) -> int:
        """The shard for the next request: the least busy, or a new one when all are full."""
        if self.busy:
            index = min(range(len(self.busy)), key=self.busy.__getitem__)
            if self.busy[index] < self.shard_size or len(self.shards) >= self.max_shards:
                return index
        self.shards.append(self._make(self.limits))
        self.busy.append(0)
        return len(self.shards) - 1

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send *request* through the chosen shard; it stays counted until the response
        is closed (or the shard raised)."""
        index = self._pick()
        self.busy[index] += 1

        def release() -> None:
            self.busy[index] -= 1

        try:
            response = await self.shards[index].handle_async_request(request)
        except BaseException:
            release()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Released(response.stream, release),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close every shard (and their connections)."""
        shards, self.shards, self.busy = self.shards, [], []
        for shard in shards:
            await shard.aclose()


def _http11(limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    """A shard: httpx's transport, its reads and writes bounded by the request's deadline
    (``transports._bounded``)."""
    return bounded(httpx.AsyncHTTPTransport(limits=limits, http1=True, http2=False))
