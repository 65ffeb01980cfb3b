"""The names ``waitbound serve`` answers to: a ``Host`` allow-list against DNS rebinding.

A page on a site whose name an attacker makes resolve to 127.0.0.1 (DNS rebinding) is,
to the browser, same-origin with a service listening there: the ``Origin`` check
compares ``Origin`` with ``Host``, and both then name the attacker's site. What tells
them apart is the ``Host`` itself: a request for ``evil.example`` was never meant for
this service. So a served process answers only requests whose ``Host`` names it —
on a loopback address, the loopback names (``127.0.0.1``, ``localhost``, ``::1``, and
the ``--host`` given), plus the names ``[auth] allowed_hosts`` of ``serve.toml`` lists
(the public name a reverse proxy passes on) — and answers any other ``400
unknown_host`` before routing, authentication or a body is read. Ports are not
compared (a proxy may pass its own). See ``docs/serve.md`` (threat model).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LOOPBACK_NAMES", "HostGuard", "allowed_hosts", "host_name"]

LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "::1"})
"""The names a loopback listener answers to without configuration."""


def host_name(value: str) -> str | None:
    """The host of a ``Host`` header value (RFC 9110 §7.2: ``host[:port]``, an IPv6
    address in brackets), lower-cased, without a trailing dot; ``None`` when it is not one."""
    try:
        name = urlsplit(f"//{value.strip()}").hostname
    except ValueError:
        return None
    return name.rstrip(".") if name else None


def allowed_hosts(listen_host: str, configured: Iterable[str] = ()) -> frozenset[str] | None:
    """The host names a listener on *listen_host* answers to, or ``None`` for any.

    A loopback listener (a loopback address or ``localhost``) answers to
    :data:`LOOPBACK_NAMES`, *listen_host* and *configured*; a listener on another
    address answers to *listen_host* and *configured* when names are configured, and to
    any name when none are (an operator who opened ``serve`` to the network names it).
    """
    names = {n for n in (host_name(c) for c in configured) if n}
    own = host_name(listen_host) or listen_host.lower()
    try:
        loopback = own == "localhost" or ipaddress.ip_address(own).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return frozenset(names | LOOPBACK_NAMES | {own})
    return frozenset(names | {own}) if names else None


class HostGuard:
    """Answer ``400 unknown_host`` to a request whose ``Host`` is not one of *hosts*."""

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        name = host_name(Headers(scope=scope).get("host", ""))
        if name in self.hosts:
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            {
                "error": "unknown_host",
                "detail": "this service does not answer to that Host; an operator lists "
                "the names a proxy passes on in [auth] allowed_hosts of serve.toml",
            },
            status_code=400,
        )
        await response(scope, receive, send)
