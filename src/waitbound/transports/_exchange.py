"""The bookkeeping of one request, without I/O: its hops, its total timeout and its
fence, its body cap, and the observation it ends in (``transports._http`` runs it).
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

__all__ = ["ACCEPT_ENCODING", "USER_AGENT", "HttpSettings", "TooSlow", "_Exchange"]

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


class TooSlow(Exception):
    """The total request timeout passed, or the exchange was abandoned."""


_PAUSE_POINTS: Final = {
    "connection.connect_tcp.complete": "send.after_connect",
    "connection.connect_unix_socket.complete": "send.after_connect",
    "http11.send_request_body.complete": "send.after_send",
    "http2.send_request_body.complete": "send.after_send",
}
"""httpcore ``trace`` events after which a pause failpoint may stall the exchange."""
_HEAD_EVENTS: Final = frozenset(
    {"http11.send_request_headers.started", "http2.send_request_headers.started"}
)
"""The events right before a request's head is written."""


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
        self.connected = False
        self.bounded = False
        """The client's network streams keep the total timeout (``transports._bounded``):
        a body chunk already received is taken even past it."""
        """The first hop has its connection (``send.after_connect`` was passed)."""
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
        """Raise :class:`TooSlow` when the total timeout passed (unless the network
        streams keep it: :attr:`bounded`) or the caller gave up."""
        if self.abandoned.is_set() or (not self.bounded and self.clock.monotonic() > self.deadline):
            raise TooSlow

    def last_moment(self) -> None:
        """Check, right before a connection is opened or a request's head is written,
        that it may still go: the fence while nothing of the request has left (not
        after a redirect), then the total timeout.

        Raises:
            Fenced: the fence closed; nothing of the request was sent.
            TooSlow: the total timeout passed, or the exchange was abandoned.
        """
        if self.fence is not None and not self.sent and not self.followed:
            self.fence.check(self.clock)
        if self.abandoned.is_set() or self.clock.monotonic() >= self.deadline:
            raise TooSlow

    def timeout(self) -> httpx.Timeout:
        """The timeout of the next hop, whatever is left of the total, once the hop
        may go (:meth:`last_moment`, for a transport that runs no ``trace``).

        Raises:
            Fenced: the fence closed before the first hop.
            TooSlow: nothing is left, or the exchange was abandoned.
        """
        self.last_moment()
        left = self.deadline - self.clock.monotonic()
        return httpx.Timeout(left, connect=min(self.settings.connect_timeout_s, left))

    def _pause_at(self, name: str) -> float:
        """A pause failpoint at one httpcore ``trace`` event (seconds to stall, or 0):
        ``send.after_connect`` once the request has its connection (opened for it, or
        taken from the pool: then right before its head), ``send.after_send``."""
        point = _PAUSE_POINTS.get(name)
        if point == "send.after_connect":
            self.connected = True
        elif name in _HEAD_EVENTS and not (self.connected or self.sent or self.followed):
            point, self.connected = "send.after_connect", True
        return hit(point, f"{point}-{self.request.kind}") if point else 0.0

    def _check_at(self, name: str, *, woken: bool) -> None:
        """The last-moment check at one httpcore ``trace`` event: before a connection or
        a head (:meth:`last_moment`); after a pause (*woken*), the fence at once while
        nothing of the request has left, before any await where the exchange's timeout
        could cancel it first.

        Raises:
            Fenced: see :meth:`last_moment`.
            TooSlow: see :meth:`last_moment`.
        """
        if woken and self.fence is not None and not self.sent and not self.followed:
            self.fence.check(self.clock)
        if name in CHECKED_EVENTS:
            self.last_moment()
            if name in _HEAD_EVENTS:
                self.sent = True

    def trace(self, name: str, info: object) -> None:
        """httpcore's blocking ``trace`` extension: pause failpoints, the fence.

        Raises:
            Fenced: see :meth:`last_moment`.
            TooSlow: see :meth:`last_moment`.
        """
        pause = self._pause_at(name)
        if pause:
            self.sleep(pause)
        self._check_at(name, woken=bool(pause))

    async def atrace(self, name: str, info: object) -> None:
        """httpcore's async ``trace`` extension (see :meth:`trace`); a pause is
        shielded from the exchange's timeout, as a frozen process is.

        Raises:
            Fenced: see :meth:`last_moment`.
            TooSlow: see :meth:`last_moment`.
        """
        pause = self._pause_at(name)
        if pause:
            with anyio.CancelScope(shield=True):
                await self.asleep(pause)
        self._check_at(name, woken=bool(pause))

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
            TooSlow: the total timeout passed while the body was arriving.
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
        if isinstance(exc, httpx.TimeoutException | TooSlow):
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
