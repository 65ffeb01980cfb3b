"""One request, sync or async, over httpx: the only place waitbound touches the network.

Both functions follow the same rules, kept in the pure helpers below so the two
short I/O loops carry no policy:

- a total timeout (connect, redirects and body included) of ``request.timeout_s``;
- redirects followed only within the same origin (scheme, host, port), at most
  ``max_redirects`` hops;
- the body read in chunks and capped at ``max_body_bytes`` (default 1 MiB);
- only hint and request-id headers kept (see ``kept_header_names``); the caller's
  headers (credentials) are sent and never recorded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import httpx

from waitbound._clock import Clock
from waitbound._contract import Profile
from waitbound._controller import Request
from waitbound._json import JSON
from waitbound._observation import Observation, kept_header_names
from waitbound._secrets import redact_bytes
from waitbound._urls import origin, resolve

__all__ = ["HttpSettings", "send_async", "send_sync"]

USER_AGENT: Final = "waitbound/0.1"


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSettings:
    """Limits for one request.

    Attributes:
        max_body_bytes: a larger body is not read further (the observation says why).
        max_redirects: same-origin redirects followed before giving up.
        connect_timeout_s: the connect timeout, never more than the request's timeout.
    """

    max_body_bytes: int = 1024 * 1024
    max_redirects: int = 5
    connect_timeout_s: float = 10.0


class _TooSlow(Exception):
    """The total request timeout passed while the body was still arriving."""


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
        self.headers = {"user-agent": USER_AGENT, "accept": "application/json", **headers}
        self.profile = profile
        self.clock = clock
        self.settings = settings
        self.start = clock.monotonic()
        self.body = bytearray()
        self.problem: str | None = None

    def hops(self) -> range:
        return range(self.settings.max_redirects + 1)

    def _elapsed_s(self) -> float:
        return self.clock.monotonic() - self.start

    def timeout(self) -> httpx.Timeout:
        """The timeout of the next hop: whatever is left of the total."""
        left = self.request.timeout_s - self._elapsed_s()
        if left <= 0:
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
        elif hops >= self.settings.max_redirects:
            self.problem = f"more than {self.settings.max_redirects} redirects"
        else:
            self.url = target
            return True
        return False

    def take(self, chunk: bytes) -> bool:
        """Add a body chunk; ``True`` when the cap is passed and reading must stop.

        Raises:
            _TooSlow: the total timeout passed while the body was arriving.
        """
        self.body += chunk
        if self._elapsed_s() > self.request.timeout_s:
            raise _TooSlow
        if len(self.body) > self.settings.max_body_bytes:
            self.problem = f"a body larger than {self.settings.max_body_bytes} bytes"
            return True
        return False

    def done(self, response: httpx.Response) -> Observation:
        """The observation of a complete HTTP answer."""
        kept = kept_header_names(self.profile)
        headers = {k.lower(): v for k, v in response.headers.items() if k.lower() in kept}
        request_id = next(
            (headers[h] for h in self.profile.request_id_headers if h in headers), None
        )
        parsed: JSON = None
        problem = self.problem
        body = redact_bytes(bytes(self.body), self.secrets)
        if problem is None and body.strip():
            try:
                parsed = json.loads(body)
            except RecursionError:
                problem = "a body nested too deeply to read"
            except ValueError:
                if self.request.kind == "result":
                    parsed = body.decode("utf-8", errors="replace")
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
        )

    def failed(self, exc: Exception) -> Observation:
        """The observation of a transport failure, described without the URL."""
        if isinstance(exc, httpx.TimeoutException | _TooSlow):
            what = f"no answer within {self.request.timeout_s:.3g}s (timeout)"
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
        )


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

    Never raises for HTTP or transport trouble: a timeout, a dropped connection or
    a refused connection becomes an observation with ``transport_error``. *secrets*
    are replaced by ``[redacted]`` in the answer's body before it is read.
    """
    exchange = _Exchange(request, headers, profile, clock, settings, secrets=secrets)
    try:
        for hops in exchange.hops():
            with client.stream(
                request.method,
                exchange.url,
                headers=exchange.headers,
                content=content,
                timeout=exchange.timeout(),
            ) as response:
                if exchange.redirected(response, hops):
                    continue
                for chunk in response.iter_bytes():
                    if exchange.take(chunk):
                        break
                return exchange.done(response)
    except (httpx.HTTPError, _TooSlow) as exc:
        return exchange.failed(exc)
    raise AssertionError("unreachable: the last hop always returns")


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
    """Send *request* with an async client and observe the answer (see :func:`send_sync`)."""
    exchange = _Exchange(request, headers, profile, clock, settings, secrets=secrets)
    try:
        for hops in exchange.hops():
            async with client.stream(
                request.method,
                exchange.url,
                headers=exchange.headers,
                content=content,
                timeout=exchange.timeout(),
            ) as response:
                if exchange.redirected(response, hops):
                    continue
                async for chunk in response.aiter_bytes():
                    if exchange.take(chunk):
                        break
                return exchange.done(response)
    except (httpx.HTTPError, _TooSlow) as exc:
        return exchange.failed(exc)
    raise AssertionError("unreachable: the last hop always returns")
