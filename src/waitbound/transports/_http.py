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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from urllib.parse import urljoin, urlsplit

import httpx

from waitbound._clock import Clock
from waitbound._contract import Profile
from waitbound._controller import Request
from waitbound._json import JSON
from waitbound._observation import Observation, kept_header_names

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


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, parts.hostname, parts.port or default


def _next_url(url: str, response: httpx.Response) -> str | None:
    """The same-origin redirect target, or ``None`` when *response* is no redirect."""
    if not response.has_redirect_location:
        return None
    return urljoin(url, response.headers["location"])


def _timeout(settings: HttpSettings, timeout_s: float) -> httpx.Timeout:
    return httpx.Timeout(timeout_s, connect=min(settings.connect_timeout_s, timeout_s))


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {"user-agent": USER_AGENT, "accept": "application/json", **headers}


def _observation(
    request: Request,
    response: httpx.Response,
    body: bytes,
    *,
    problem: str | None,
    profile: Profile,
    at: datetime,
    elapsed_s: float,
) -> Observation:
    kept = kept_header_names(profile)
    headers = {k.lower(): v for k, v in response.headers.items() if k.lower() in kept}
    request_id = next((headers[h] for h in profile.request_id_headers if h in headers), None)
    parsed: JSON = None
    if problem is None and body.strip():
        try:
            parsed = json.loads(body)
        except ValueError:
            if request.kind == "result":
                parsed = body.decode("utf-8", errors="replace")
            else:
                problem = "a body that is not JSON"
    return Observation(
        kind=request.kind,
        at=at,
        http_status=response.status_code,
        headers=headers,
        body=parsed,
        body_problem=problem,
        request_id=request_id[:200] if request_id else None,
        elapsed_s=elapsed_s,
    )


def _failure(request: Request, exc: Exception, *, at: datetime, elapsed_s: float) -> Observation:
    if isinstance(exc, httpx.TimeoutException | _TooSlow):
        what = f"no answer within {request.timeout_s:.3g}s (timeout)"
    elif isinstance(exc, httpx.RemoteProtocolError):
        what = "the connection closed without a complete response"
    elif isinstance(exc, httpx.ConnectError):
        what = "could not connect"
    else:
        what = f"transport error ({type(exc).__name__})"
    return Observation(kind=request.kind, at=at, transport_error=what, elapsed_s=elapsed_s)


def _redirect_problem(url: str, target: str, hops: int, settings: HttpSettings) -> str | None:
    if _origin(target) != _origin(url):
        return f"a redirect to another origin ({_origin(target)[1]}), not followed"
    if hops >= settings.max_redirects:
        return f"more than {settings.max_redirects} redirects"
    return None


def _too_large(settings: HttpSettings) -> str:
    return f"a body larger than {settings.max_body_bytes} bytes"


def send_sync(
    client: httpx.Client,
    request: Request,
    *,
    headers: Mapping[str, str],
    profile: Profile,
    clock: Clock,
    settings: HttpSettings = HttpSettings(),
) -> Observation:
    """Send *request* with a blocking client and observe the answer.

    Never raises for HTTP or transport trouble: a timeout, a dropped connection or
    a refused connection becomes an observation with ``transport_error``.
    """
    start = clock.monotonic()
    url = request.url
    try:
        for hops in range(settings.max_redirects + 1):
            left = request.timeout_s - (clock.monotonic() - start)
            if left <= 0:
                raise _TooSlow
            with client.stream(
                "GET", url, headers=_headers(headers), timeout=_timeout(settings, left)
            ) as response:
                target = _next_url(url, response)
                problem = target and _redirect_problem(url, target, hops, settings)
                if target and not problem:
                    url = target
                    continue
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if clock.monotonic() - start > request.timeout_s:
                        raise _TooSlow
                    if len(body) > settings.max_body_bytes:
                        problem = _too_large(settings)
                        break
                return _observation(
                    request,
                    response,
                    bytes(body),
                    problem=problem or None,
                    profile=profile,
                    at=clock.now(),
                    elapsed_s=clock.monotonic() - start,
                )
    except (httpx.HTTPError, _TooSlow) as exc:
        return _failure(request, exc, at=clock.now(), elapsed_s=clock.monotonic() - start)
    raise AssertionError("unreachable: the redirect loop always returns")


async def send_async(
    client: httpx.AsyncClient,
    request: Request,
    *,
    headers: Mapping[str, str],
    profile: Profile,
    clock: Clock,
    settings: HttpSettings = HttpSettings(),
) -> Observation:
    """Send *request* with an async client and observe the answer (see :func:`send_sync`)."""
    start = clock.monotonic()
    url = request.url
    try:
        for hops in range(settings.max_redirects + 1):
            left = request.timeout_s - (clock.monotonic() - start)
            if left <= 0:
                raise _TooSlow
            async with client.stream(
                "GET", url, headers=_headers(headers), timeout=_timeout(settings, left)
            ) as response:
                target = _next_url(url, response)
                problem = target and _redirect_problem(url, target, hops, settings)
                if target and not problem:
                    url = target
                    continue
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if clock.monotonic() - start > request.timeout_s:
                        raise _TooSlow
                    if len(body) > settings.max_body_bytes:
                        problem = _too_large(settings)
                        break
                return _observation(
                    request,
                    response,
                    bytes(body),
                    problem=problem or None,
                    profile=profile,
                    at=clock.now(),
                    elapsed_s=clock.monotonic() - start,
                )
    except (httpx.HTTPError, _TooSlow) as exc:
        return _failure(request, exc, at=clock.now(), elapsed_s=clock.monotonic() - start)
    raise AssertionError("unreachable: the redirect loop always returns")
