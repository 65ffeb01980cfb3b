"""One request, sync or async, over httpx: the only place waitbound touches the network.

Both functions follow the same rules, kept in the pure helpers below so the two
short I/O loops carry no policy:

- a total timeout of ``request.timeout_s`` seconds (ending at the fence's end, when a
  reserved request has one: ``transports._fence``) around the whole exchange (connect,
  every redirect hop, headers and body): a server that trickles its answer a byte at a
  time cannot outlast it, though it defeats httpx's per-operation timeouts;
- redirects followed by waitbound only, within the same origin (scheme, host, port),
  at most ``max_redirects`` hops; httpx is always told ``follow_redirects=False``, so a
  caller's client built to follow redirects never sends credentials to another origin;
- ``Accept-Encoding: gzip, deflate``; the raw body is read in network chunks and
  decoded here, bounded, so at most ``max_body_bytes + 1`` decoded bytes ever exist (a
  gzip bomb stops at the cap); any other ``Content-Encoding`` is a body problem;
- only hint and request-id headers kept (see ``kept_header_names``); the caller's
  headers (credentials) are sent and never recorded, and each secret among them is
  redacted from every kept header value, the request id and the body before the
  observation is built;
- nothing from one request raises: httpx errors (``httpx.InvalidURL`` included, which
  is not an ``httpx.HTTPError``), ``OSError`` and ``ValueError`` become an observation
  with ``transport_error``. A URL httpx refuses reads "the URL cannot be used (...)".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final

import anyio
import httpx

from waitbound._base._clock import Clock
from waitbound._model._observation import Observation, Request
from waitbound._profile._contract import Profile
from waitbound.transports._bounded import deadline_of, is_bounded
from waitbound.transports._exchange import ACCEPT_ENCODING, HttpSettings, TooSlow, _Exchange
from waitbound.transports._fence import Fence
from waitbound.transports._threads import run_in_thread

__all__ = ["ACCEPT_ENCODING", "HttpSettings", "send_async", "send_sync"]

_DEFAULTS: Final = HttpSettings()

_OBSERVED: Final = (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError, TooSlow)
"""What one request may raise that becomes an observation (anything else is a bug)."""


def _exchange_sync(client: httpx.Client, exchange: _Exchange, content: bytes | None) -> Observation:
    """The blocking exchange: every hop and the body, then the observation."""
    try:
        headers = exchange.request_headers()
        for hops in exchange.hops():
            with client.stream(
                exchange.request.method,
                exchange.target(),
                headers=headers,
                content=content,
                timeout=exchange.timeout(),
                follow_redirects=False,
                extensions={"trace": exchange.trace},
            ) as response:
                if exchange.redirected(response, hops):
                    continue
                if exchange.begin(response):
                    if response.is_stream_consumed:
                        exchange.take(response.content)
                    else:
                        for chunk in response.iter_raw():
                            if exchange.take(chunk):
                                break
                    exchange.end()
                return exchange.done(response)
    except _OBSERVED as exc:
        return exchange.failed(exc)
    raise AssertionError("unreachable: the last hop always returns")


async def _exchange_async(
    client: httpx.AsyncClient, exchange: _Exchange, content: bytes | None
) -> Observation:
    """The async exchange: every hop and the body, then the observation."""
    try:
        headers = exchange.request_headers()
        for hops in exchange.hops():
            async with client.stream(
                exchange.request.method,
                exchange.target(),
                headers=headers,
                content=content,
                timeout=exchange.timeout(),
                follow_redirects=False,
                extensions={"trace": exchange.atrace},
            ) as response:
                if exchange.redirected(response, hops):
                    continue
                if exchange.begin(response):
                    if response.is_stream_consumed:
                        exchange.take(response.content)
                    else:
                        async for chunk in response.aiter_raw():
                            if exchange.take(chunk):
                                break
                    exchange.end()
                return exchange.done(response)
    except _OBSERVED as exc:
        return exchange.failed(exc)
    raise AssertionError("unreachable: the last hop always returns")


def send_sync(
    client: httpx.Client,
    request: Request,
    *,
    headers: Mapping[str, str],
    profile: Profile,
    clock: Clock,
    content: bytes | None = None,
    settings: HttpSettings = _DEFAULTS,
    secrets: Sequence[str] = (),
    fence: Fence | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> Observation:
    """Send *request* with a blocking client and observe the answer.

    The exchange runs in a daemon thread (one kept for later exchanges,
    ``transports._threads``) waited on for ``request.timeout_s`` seconds of real time,
    the total bound (connect, redirects, headers, body). When it has not finished by
    then, the timeout observation is returned at once and the exchange is abandoned:
    its thread stops at its next hop or body chunk and closes the response. A thread
    blocked inside one read (a server trickling its headers) stays blocked until that
    read ends (each read is bounded by the time that was left, in seconds); meanwhile
    its connection stays out of the client's pool (the caller's, or the shared one),
    but the wait itself returns on time. *clock* keeps the elapsed-time bookkeeping (a
    fake clock in tests); the wait on the thread is the real-time bound.

    Args:
        client: sends the request; its own ``follow_redirects`` is overridden (never).
        request: what to send, with its total timeout in seconds.
        headers: the caller's headers (credentials); sent, never recorded.
        profile: names the headers to keep (hints, request ids).
        clock: supplies the observation time and elapsed seconds.
        content: the request body (a submission), or ``None``.
        settings: the body cap, redirect limit and connect timeout.
        secrets: replaced by ``[redacted]`` in every kept header value, the request id
            and the body before the observation is built.
        fence: the reserved request's last moment (``transports._fence``): checked
            right before a connection is opened for it and right before its head is
            written; the total timeout ends at its end too. ``None``: no fence.
        sleep: stalls the exchange at a pause failpoint (``send.after_connect``,
            ``send.after_send``), in seconds.

    Returns:
        The observation. Never raises for HTTP, transport or URL trouble: a timeout,
        a dropped or refused connection, or a URL httpx refuses becomes an observation
        with ``transport_error``; an unusable body one with ``body_problem``.

    Raises:
        Fenced: the fence closed before anything of the request was sent.
        Exception: only what is not one request's trouble (a bug, or a handler that
            raises something other than an httpx error, ``OSError`` or ``ValueError``)
            is re-raised here.
    """
    exchange = _Exchange(
        request, headers, profile, clock, settings, secrets=secrets, fence=fence, sleep=sleep
    )
    outcome: list[Observation | BaseException] = []
    finished = threading.Event()

    def run() -> None:
        try:
            outcome.append(_exchange_sync(client, exchange, content))
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)
        finally:
            finished.set()

    run_in_thread(run)
    try:
        finished.wait(max(0.0, exchange.deadline - clock.monotonic()))
    finally:
        if not outcome:
            exchange.abandoned.set()
    if not outcome:
        return exchange.timed_out()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


async def send_async(
    client: httpx.AsyncClient,
    request: Request,
    *,
    headers: Mapping[str, str],
    profile: Profile,
    clock: Clock,
    content: bytes | None = None,
    settings: HttpSettings = _DEFAULTS,
    secrets: Sequence[str] = (),
    fence: Fence | None = None,
    sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
) -> Observation:
    """Send *request* with an async client and observe the answer (see :func:`send_sync`).

    With a client waitbound built (``new_async_client``, the shared ones), the total
    timeout is kept by its network streams: every connect, read and write is cut to the
    time left (``transports._bounded``), and a read past it still takes the bytes that
    had arrived (an answer that came while this process was frozen is read, not called a
    timeout). With a caller's client the whole exchange runs inside an anyio cancel scope
    of the time left (``anyio.move_on_after``); a cancelled exchange closes its response
    and becomes the timeout observation. Never raises for HTTP, transport or URL trouble;
    raises :class:`Fenced` when the *fence* closed before anything was sent (a pause
    failpoint stalls with *sleep*, shielded from the timeout, as a frozen process is).
    """
    exchange = _Exchange(
        request, headers, profile, clock, settings, secrets=secrets, fence=fence, asleep=sleep
    )
    left_s = max(0.0, exchange.deadline - clock.monotonic())
    if is_bounded(client):  # its network streams keep the deadline, read by read
        exchange.bounded = True
        with deadline_of(left_s):
            return await _exchange_async(client, exchange, content)
    with anyio.move_on_after(left_s):
        return await _exchange_async(client, exchange, content)
    return exchange.timed_out()
