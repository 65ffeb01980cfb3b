"""Security headers on every answer of ``waitbound serve``: a Content-Security-Policy
that allows nothing inline and nothing from elsewhere (CSP Level 3), no framing
(``frame-ancestors 'none'`` and ``X-Frame-Options: DENY``, RFC 7034), no referrer elsewhere
(``Referrer-Policy: same-origin``: never to another origin, another port included; a
form's own ``Origin`` is then its real origin, not ``null``) and no content sniffing
(``X-Content-Type-Options: nosniff``). See ``docs/inbox.md``.

A pure ASGI middleware: streamed answers (SSE) pass through untouched, only their head
gains the headers.
"""

from __future__ import annotations

from typing import Final

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "SecurityHeaders"]

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}
"""The headers every answer carries."""


class SecurityHeaders:
    """Add :data:`SECURITY_HEADERS` to every HTTP answer of *app* (replacing any the
    application set)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
