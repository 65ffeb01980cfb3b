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
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import anyio
import httpx

from waitbound._base._clock import Clock
from waitbound._base._json import JSON, NestingError, parse_provider_json
from waitbound._base._secrets import redact_headers, redact_text
from waitbound._base._urls import origin, resolve
from waitbound._model._observation import Observation, Request, kept_header_names
from waitbound._profile._contract import Profile
from waitbound.transports._threads import run_in_thread

__all__ = ["ACCEPT_ENCODING", "HttpSettings", "send_async", "send_sync"]

USER_AGENT: Final = "waitbound/0.1"
ACCEPT_ENCODING: Final = "gzip, deflate"
"""The content codings waitbound decodes itself, bounded (RFC 9110 §8.4.1)."""
_IDENTITY: Final = frozenset({"", "identity"})
_WBITS: Final = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS}


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


class _Decoder:
    """Decode one response body's ``Content-Encoding``, never more than asked for.

    Identity passes through; gzip and deflate (zlib-wrapped, or raw as some servers
    send it) go through ``zlib.decompressobj`` with ``max_length``.
    """

    def __init__(self, content_encoding: str) -> None:
        """Prepare for *content_encoding* (the header's value).

        Raises:
            ValueError: a coding other than identity, gzip or deflate, or more than one.
        """
        codings = [c.strip().lower() for c in content_encoding.split(",")]
        codings = [c for c in codings if c not in _IDENTITY]
        if len(codings) > 1 or (codings and codings[0] not in (*_WBITS, "deflate")):
            shown = ascii(content_encoding[:40])
            raise ValueError(f"a body with an unsupported Content-Encoding ({shown})")
        self.coding = codings[0] if codings else None
        self._zlib = None if self.coding is None else self._start()
        self._fed = bytearray()  # deflate: the first bytes, in case they are raw deflate
        self._decided = self.coding != "deflate"

    def _start(self, *, raw_deflate: bool = False) -> zlib._Decompress:
        if self.coding == "deflate":
            return zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS)
        return zlib.decompressobj(_WBITS[str(self.coding)])

    def decode(self, raw: bytes, room: int) -> bytes:
        """At most *room* (``>= 1``) decoded bytes of the next raw chunk.

        Raises:
            ValueError: the compressed data is damaged.
        """
        if self._zlib is None:
            return raw[:room]
        try:
            if not self._decided:
                return self._decode_first(raw, room)
            return self._zlib.decompress(raw, room)
        except zlib.error:
            raise ValueError(f"a {self.coding} body that cannot be decoded") from None

    def _decode_first(self, raw: bytes, room: int) -> bytes:
        """Deflate's first bytes: zlib-wrapped (RFC 9110), else raw deflate (RFC 1951)."""
        assert self._zlib is not None
        self._fed += raw
        try:
            out = self._zlib.decompress(raw, room)
        except zlib.error:
            self._zlib = self._start(raw_deflate=True)
            out = self._zlib.decompress(bytes(self._fed), room)
            self._decided = True
        if out or len(self._fed) >= 2:  # the two-byte zlib header was accepted
            self._decided = True
        if self._decided:
            self._fed.clear()
        return out

    def finish(self, received: bool) -> None:
        """Check the compressed body ended where it should.

        Raises:
            ValueError: a compressed body was cut short.
        """
        if self._zlib is not None and received and not self._zlib.eof:
            raise ValueError(f"a {self.coding} body cut short")


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
    ) -> None:
        self.request = request
        self.secrets = secrets
        self.url = request.url
        self.caller_headers = headers
        self.profile = profile
        self.clock = clock
        self.settings = settings
        self.start = clock.monotonic()
        self.body = bytearray()
        self.problem: str | None = None
        self.decoder: _Decoder | None = None
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
        if self.abandoned.is_set() or self._elapsed_s() > self.request.timeout_s:
            raise _TooSlow

    def timeout(self) -> httpx.Timeout:
        """The timeout of the next hop: whatever is left of the total.

        Raises:
            _TooSlow: nothing is left, or the exchange was abandoned.
        """
        left = self.request.timeout_s - self._elapsed_s()
        if left <= 0 or self.abandoned.is_set():
            raise _TooSlow
        return httpx.Timeout(left, connect=min(self.settings.connect_timeout_s, left))

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
            self.decoder = _Decoder(coding or "")
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
            transport_error=f"no answer within {self.request.timeout_s:.3g}s (timeout)",
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

    Returns:
        The observation. Never raises for HTTP, transport or URL trouble: a timeout,
        a dropped or refused connection, or a URL httpx refuses becomes an observation
        with ``transport_error``; an unusable body one with ``body_problem``.

    Raises:
        Exception: only what is not one request's trouble (a bug, or a handler that
            raises something other than an httpx error, ``OSError`` or ``ValueError``)
            is re-raised here.
    """
    exchange = _Exchange(request, headers, profile, clock, settings, secrets=secrets)
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
        finished.wait(max(0.0, request.timeout_s))
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
) -> Observation:
    """Send *request* with an async client and observe the answer (see :func:`send_sync`).

    The whole exchange runs inside an anyio cancel scope of ``request.timeout_s``
    seconds (``anyio.move_on_after``); a cancelled exchange closes its response and
    becomes the timeout observation. Never raises for HTTP, transport or URL trouble.
    """
    exchange = _Exchange(request, headers, profile, clock, settings, secrets=secrets)
    with anyio.move_on_after(max(0.0, request.timeout_s)):
        return await _exchange_async(client, exchange, content)
    return exchange.timed_out()
