"""One request, sync or async, over httpx: the only place waitbound touches the network.

Both functions follow the same rules, kept in the pure helpers below so the two
short I/O loops carry no policy:

- a total timeout of ``request.timeout_s`` seconds around the whole exchange (connect,
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
from dataclasses import dataclass
from typing import Final

import anyio
import httpx

from waitbound._base._clock import Clock
from waitbound._base._failpoints import hit
from waitbound._base._json import JSON, NestingError, parse_provider_json
from waitbound._base._secrets import redact_headers, redact_text
from waitbound._base._urls import origin, resolve
from waitbound._model._observation import Observation, Request, kept_header_names
from waitbound._profile._contract import Profile
from waitbound.transports._decode import Decoder
from waitbound.transports._fence import CHECKED_EVENTS, Fence
from waitbound.transports._threads import run_in_thread

__all__ = ["ACCEPT_ENCODING", "HttpSettings", "send_async", "send_sync"]

USER_AGENT: Final = "waitbound/0.1"
ACCEPT_ENCODING: Final = "gzip, deflate"
"""The content codings waitbound decodes itself, bounded (RFC 9110 §8.4.1)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSettings:
    """Limits for one request.

    Attributes:
        max_body_bytes: the most decoded body bytes read; a larger body is not read
            further (the observation says why). Compressed bodies are capped as they
            are decoded.
        max_redirects: same-origin redirects followed before giving up.
        connect_timeout_s: the connect timeout in seconds, never more than the
            request's total timeout.
    """

    max_body_bytes: int = 1024 * 1024
    max_redirects: int = 5
    connect_timeout_s: float = 10.0


class _TooSlow(Exception):
    """The total request timeout passed, or the exchange was abandoned."""


_PAUSE_POINTS: Final = {
    "connection.connect_tcp.complete": "send.after_connect",
    "connection.connect_unix_socket.complete": "send.after_connect",
    "http11.send_request_body.complete": "send.after_send",
    "http2.send_request_body.complete": "send.after_send",
}
"""httpcore ``trace`` events after which a pause failpoint may stall the exchange."""


class _Exchange:
    """The bookkeeping of one request, without I/O: redirect hops, total time, body cap."""

    def __init__(
        self,
        request: Request,
        headers: Mapping[str, str],
        profile: Profile,
        clock: Clock,
        settings: HttpSettings,
        *,
        secrets: Sequence[str],
        fence: Fence | None = None,
        sleep: Callable[[float], object] = time.sleep,
        asleep: Callable[[float], Awaitable[object]] = anyio.sleep,
    ) -> None:
        self.request = request
        self.secrets = secrets
        self.url = request.url
        self.caller_headers = headers
        self.profile = profile
        self.clock = clock
        self.settings = settings
        self.start = clock.monotonic()
        self.fence = fence
        self.deadline = self.start + request.timeout_s
        """The monotonic reading (*clock*'s) by which the whole exchange is over: its
        total timeout, cut to the fence's end."""
        if fence is not None:
            self.deadline = min(self.deadline, fence.ends_at)
        self.sleep = sleep
        self.asleep = asleep
        self.sent = False
        """The first hop's head is being written (its last-moment check passed)."""
        self.body = bytearray()
        self.problem: str | None = None
        self.decoder: Decoder | None = None
        self.received = False
        self.followed = 0
        """Redirects followed so far."""
        self.abandoned = threading.Event()
        """Set when the caller stopped waiting: the exchange stops at its next step."""

    @property
    def redirect_limit(self) -> int:
        """Redirects this request may follow: the settings' limit, within its budget."""
        budget = self.request.redirect_budget
        return (
            self.settings.max_redirects
            if budget is None
            else min(self.settings.max_redirects, budget)
        )

    def hops(self) -> range:
        return range(self.redirect_limit + 1)

    def request_headers(self) -> httpx.Headers:
        """The headers to send: ours, the caller's over them, our Accept-Encoding last.

        Raises:
            ValueError: a caller's header cannot be sent (not ASCII or latin-1).
        """
        merged = httpx.Headers({"user-agent": USER_AGENT, "accept": "application/json"})
        merged.update(self.caller_headers)
        merged["accept-encoding"] = ACCEPT_ENCODING
        return merged

    def target(self) -> httpx.URL:
        """The next hop's URL, parsed by httpx.

        Raises:
            httpx.InvalidURL: httpx cannot use it (an IDNA error included).
        """
        try:
            url = httpx.URL(self.url)
            url.host  # noqa: B018 - an xn-- label is decoded (and may fail) only when read
        except ValueError as exc:
            raise httpx.InvalidURL(type(exc).__name__) from None
        return url

    def _elapsed_s(self) -> float:
        return self.clock.monotonic() - self.start

    def _check(self) -> None:
        """Raise :class:`_TooSlow` when the total timeout passed or the caller gave up."""
        if self.abandoned.is_set() or self.clock.monotonic() > self.deadline:
            raise _TooSlow

    def last_moment(self) -> None:
        """Check, right before a connection is opened or a request's head is written,
        that it may still go: the fence while nothing of the request has left (not
        after a redirect), then the total timeout.

        Raises:
            Fenced: the fence closed; nothing of the request was sent.
            _TooSlow: the total timeout passed, or the exchange was abandoned.
        """
        if self.fence is not None and not self.sent and not self.followed:
            self.fence.check(self.clock)
        if self.abandoned.is_set() or self.clock.monotonic() >= self.deadline:
            raise _TooSlow

    def timeout(self) -> httpx.Timeout:
        """The timeout of the next hop, whatever is left of the total, once the hop
        may go (:meth:`last_moment`, for a transport that runs no ``trace``).

        Raises:
            Fenced: the fence closed before the first hop.
            _TooSlow: nothing is left, or the exchange was abandoned.
        """
        self.last_moment()
        left = self.deadline - self.clock.monotonic()
        return httpx.Timeout(left, connect=min(self.settings.connect_timeout_s, left))

    def _traced(self, name: str) -> float:
        """One httpcore ``trace`` event: the last-moment check before a connection or a
        head; a pause failpoint after a connect or a send (seconds to stall, or 0)."""
        if name in CHECKED_EVENTS:
            self.last_moment()
            if name.endswith("send_request_headers.started"):
                self.sent = True
            return 0.0
        point = _PAUSE_POINTS.get(name)
        return hit(point, f"{point}-{self.request.kind}") if point else 0.0

    def _woken(self) -> None:
        """After a pause: when nothing of the request has left yet, the fence at once
        (before any await where the exchange's timeout could cancel it first).

        Raises:
            Fenced: the fence closed during the pause.
        """
        if self.fence is not None and not self.sent and not self.followed:
            self.fence.check(self.clock)

    def trace(self, name: str, info: object) -> None:
        """httpcore's blocking ``trace`` extension (see :meth:`_traced`).

        Raises:
            Fenced: see :meth:`last_moment`.
            _TooSlow: see :meth:`last_moment`.
        """
        if pause := self._traced(name):
            self.sleep(pause)
            self._woken()

    async def atrace(self, name: str, info: object) -> None:
        """httpcore's async ``trace`` extension (see :meth:`_traced`); a pause is
        shielded from the exchange's timeout, as a frozen process is.

        Raises:
            Fenced: see :meth:`last_moment`.
            _TooSlow: see :meth:`last_moment`.
        """
        if pause := self._traced(name):
            with anyio.CancelScope(shield=True):
                await self.asleep(pause)
            self._woken()

    def redirected(self, response: httpx.Response, hops: int) -> bool:
        """Whether to follow *response* to the next hop (same origin, within the hop limit)."""
        if not response.has_redirect_location:
            return False
        try:
            target = resolve(self.url, response.headers["location"])
            elsewhere = origin(target) != origin(self.url)
        except ValueError as exc:
            self.problem = f"a redirect to a URL that cannot be used ({exc})"
            return False
        if self.request.kind == "submit":
            return False  # a submission is never sent twice; its 3xx is the answer
        if elsewhere:
            self.problem = f"a redirect to another origin ({origin(target)[1]}), not followed"
        elif hops >= self.redirect_limit:
            self.problem = (
                f"more than {self.settings.max_redirects} redirects"
                if self.redirect_limit == self.settings.max_redirects
                else f"a redirect the request budget has no room for ({hops} followed)"
            )
        else:
            self.url = target
            self.followed = hops + 1
            return True
        return False

    def begin(self, response: httpx.Response) -> bool:
        """Prepare to read *response*'s body; ``False`` when it must not be read.

        A response built whole in memory (``httpx.MockTransport`` answers) was read and
        decoded by httpx already: its body passes through as identity.
        """
        coding = "" if response.is_stream_consumed else response.headers.get("content-encoding")
        try:
            self.decoder = Decoder(coding or "")
        except ValueError as exc:
            self.problem = str(exc)
            return False
        return True

    def take(self, raw: bytes) -> bool:
        """Decode and add a raw body chunk; ``True`` when the cap is passed and reading stops.

        Raises:
            _TooSlow: the total timeout passed while the body was arriving.
        """
        assert self.decoder is not None
        self._check()
        if not raw:
            return False
        self.received = True
        room = self.settings.max_body_bytes + 1 - len(self.body)
        try:
            self.body += self.decoder.decode(raw, room)
        except ValueError as exc:
            self.problem = str(exc)
            return True
        if len(self.body) > self.settings.max_body_bytes:
            self.problem = f"a body larger than {self.settings.max_body_bytes} bytes"
            return True
        return False

    def end(self) -> None:
        """The body ended: a compressed one must have ended where its coding says."""
        assert self.decoder is not None
        if self.problem is not None:
            return  # reading stopped early (over the cap, damaged): the first problem stands
        try:
            self.decoder.finish(self.received)
        except ValueError as exc:
            self.problem = str(exc)

    def done(self, response: httpx.Response) -> Observation:
        """The observation of a complete HTTP answer, every kept value redacted."""
        kept = kept_header_names(self.profile)
        headers = redact_headers(
            {k.lower(): v for k, v in response.headers.items() if k.lower() in kept},
            self.secrets,
        )
        request_id = next(
            (headers[h] for h in self.profile.request_id_headers if h in headers), None
        )
        parsed: JSON = None
        problem = None if self.problem is None else redact_text(self.problem, self.secrets)
        body = bytes(self.body)
        if problem is None and body.strip():
            try:  # redacts before and after parsing
                parsed = parse_provider_json(body, secrets=self.secrets)
            except NestingError as exc:
                problem = str(exc)
            except ValueError:
                if self.request.kind in ("result", "errors"):  # text: a document, JSON Lines
                    text = body.decode("utf-8", errors="replace")
                    parsed = redact_text(text, self.secrets)
                else:
                    problem = "a body that is not JSON"
        return Observation(
            kind=self.request.kind,
            at=self.clock.now(),
            http_status=response.status_code,
            headers=headers,
            body=parsed,
            body_problem=problem,
            request_id=request_id[:200] if request_id else None,
            elapsed_s=self._elapsed_s(),
            redirects=self.followed,
        )

    def failed(self, exc: Exception) -> Observation:
        """The observation of a transport failure, described without the URL."""
        if isinstance(exc, httpx.TimeoutException | _TooSlow):
            return self.timed_out()
        if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
            what = f"the URL cannot be used ({type(exc).__name__})"
        elif isinstance(exc, httpx.RemoteProtocolError):
            what = "the connection closed without a complete response"
        elif isinstance(exc, httpx.ConnectError):
            what = "could not connect"
        else:
            what = f"transport error ({type(exc).__name__})"
        return Observation(
            kind=self.request.kind,
            at=self.clock.now(),
            transport_error=what,
            elapsed_s=self._elapsed_s(),
            redirects=self.followed,
        )

    def timed_out(self) -> Observation:
        """The observation of an exchange that did not finish within its total timeout."""
        return Observation(
            kind=self.request.kind,
            at=self.clock.now(),
            transport_error=f"no answer within {self.deadline - self.start:.3g}s (timeout)",
            elapsed_s=self._elapsed_s(),
            redirects=self.followed,
        )


_OBSERVED: Final = (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError, _TooSlow)
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
    settings: HttpSettings = HttpSettings(),
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
    settings: HttpSettings = HttpSettings(),
    secrets: Sequence[str] = (),
    fence: Fence | None = None,
    sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
) -> Observation:
    """Send *request* with an async client and observe the answer (see :func:`send_sync`).

    The whole exchange runs inside an anyio cancel scope of ``request.timeout_s``
    seconds (``anyio.move_on_after``); a cancelled exchange closes its response and
    becomes the timeout observation. Never raises for HTTP, transport or URL trouble;
    raises :class:`Fenced` when the *fence* closed before anything was sent (a pause
    failpoint stalls with *sleep*, shielded from the timeout, as a frozen process is).
    """
    exchange = _Exchange(
        request, headers, profile, clock, settings, secrets=secrets, fence=fence, asleep=sleep
    )
    with anyio.move_on_after(max(0.0, exchange.deadline - clock.monotonic())):
        return await _exchange_async(client, exchange, content)
    return exchange.timed_out()
