"""The service's bearer token (RFC 6750 §2.1): every endpoint requires
``Authorization: Bearer TOKEN`` but the public ones (the webhook receiver, which
authenticates by signature, and ``/healthz``).

A pure ASGI middleware, so streamed responses (SSE) pass through untouched. The token
is compared in constant time (:func:`hmac.compare_digest`) and never logged or echoed.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BearerAuth", "bearer_token", "is_public", "token_matches"]

_REALM = 'Bearer realm="waitbound"'


def is_public(path: str) -> bool:
    """Whether *path* is served without the token: ``/healthz`` and the receiver
    (``/webhooks/{provider}``, which checks signatures instead)."""
    return path == "/healthz" or path.startswith("/webhooks/")


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` value (the scheme is
    case-insensitive), or ``None`` when the header is absent or not a bearer token."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def token_matches(given: str, expected: str) -> bool:
    """Whether *given* is the token, compared in constant time (any text, as bytes)."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def _unauthorized(error: str, detail: str, challenge: str) -> JSONResponse:
    return JSONResponse(
        {"error": error, "detail": detail}, status_code=401, headers={"WWW-Authenticate": challenge}
    )


class BearerAuth:
    """Answer 401 (JSON ``{"error", "detail"}``, ``WWW-Authenticate: Bearer``) to a
    request without the right token, unless its path is public.

    Args:
        app: the application behind.
        token: the service's token.
        public: whether a path needs no token (default :func:`is_public`).
    """

    def __init__(
        self, app: ASGIApp, *, token: str, public: Callable[[str], bool] = is_public
    ) -> None:
        self.app = app
        self._token = token
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.public(scope["path"]):
            await self.app(scope, receive, send)
            return
        given = bearer_token(Headers(scope=scope).get("authorization"))
        if given is None:
            response = _unauthorized(
                "unauthorized",
                "this endpoint needs the service's token: Authorization: Bearer TOKEN "
                "(the token file of waitbound serve)",
                _REALM,
            )
        elif not token_matches(given, self._token):
            response = _unauthorized(
                "invalid_token",
                "the bearer token is not the service's token",
                f'{_REALM}, error="invalid_token"',
            )
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)
