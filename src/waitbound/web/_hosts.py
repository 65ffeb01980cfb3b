"""The names ``waitbound serve`` answers to: a ``Host`` allow-list against DNS rebinding.

A page on a site whose name an attacker makes resolve to 127.0.0.1 (DNS rebinding) is,
to the browser, same-origin with a service listening there: the ``Origin`` check
compares ``Origin`` with ``Host``, and both then name the attacker's site. What tells
them apart is the ``Host`` itself: a request for ``evil.example`` was never meant for
this service. So a served process answers only requests whose ``Host`` names it —
on a loopback address, the loopback names (``127.0.0.1``, ``localhost``, ``::1``, and
the ``--host`` given); on every address (``0.0.0.0``), those and the machine's own
names; on another address, that address — plus the names ``[auth] allowed_hosts`` of
``serve.toml`` lists (the public name a reverse proxy passes on) — and answers any
other ``400 unknown_host`` before routing, authentication or a body is read, whatever
the address listened on. Ports are not
compared (a proxy may pass its own). See ``docs/serve.md`` (threat model).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LOOPBACK_NAMES", "HostGuard", "allowed_hosts", "host_name", "machine_names"]

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


def machine_names() -> frozenset[str]:
    """This machine's own names: its host name, its fully qualified name and the
    addresses that name resolves to (what a client on the network may call it)."""
    names: set[str] = set()
    try:
        own = socket.gethostname()
        names |= {own.lower(), socket.getfqdn(own).lower()}
        for info in socket.getaddrinfo(own, None, type=socket.SOCK_STREAM):
            names.add(str(info[4][0]).lower())
    except OSError:  # no resolver: the loopback and configured names remain
        pass
    return frozenset(n.rstrip(".") for n in names if n)


def allowed_hosts(listen_host: str, configured: Iterable[str] = ()) -> frozenset[str]:
    """The host names a listener on *listen_host* answers to: never any name.

    A loopback listener (a loopback address or ``localhost``) answers to
    :data:`LOOPBACK_NAMES`, *listen_host* and *configured*; a listener on every address
    (``0.0.0.0``, ``::``) to those and this machine's own names
    (:func:`machine_names`); a listener on another address to that address and
    *configured* (the public name a proxy passes on must be configured).
    """
    names = {n for n in (host_name(c) for c in configured) if n}
    own = host_name(listen_host) or listen_host.strip("[]").lower()
    try:
        address = ipaddress.ip_address(own)
    except ValueError:
        address = None
    if own == "localhost" or (address is not None and address.is_loopback):
        return frozenset(names | LOOPBACK_NAMES | {own})
    if address is not None and address.is_unspecified:
        return frozenset(names | LOOPBACK_NAMES | machine_names())
    return frozenset(names | {own})


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
                "the names a proxy passes on (serve.toml [auth] allowed_hosts, "
                "waitbound mcp --allowed-host)",
            },
            status_code=400,
        )
        await response(scope, receive, send)
