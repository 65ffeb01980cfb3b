"""Who may use the service: every endpoint requires the bearer token
(``Authorization: Bearer TOKEN``, RFC 6750 §2.1) or a signed-in person's session
cookie, but the public ones (the webhook receiver, which authenticates by signature,
``/healthz``, the sign-in page and the static files).

The session cookie (``waitbound._session``) is accepted on every ``GET``/``HEAD`` (the
pages, ``/operations/…``, the SSE streams) and on the inbox's own forms (``POST`` to a
page path, which then check its CSRF token). A page without either answers 303 to
``/sign-in?next=…``; every other endpoint 401 (JSON), as before.

A pure ASGI middleware, so streamed responses (SSE) pass through untouched. The token
is compared in constant time (:func:`hmac.compare_digest`) and never logged or echoed.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from urllib.parse import quote

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from waitbound.web._session import PRINCIPAL_KEY, SESSION_COOKIE, Principal, Sessions

__all__ = ["BearerAuth", "bearer_token", "is_page", "is_public", "sign_in_url", "token_matches"]

_REALM = 'Bearer realm="waitbound"'
_PAGES = frozenset({"/", "/in-flight", "/finished", "/sign-out"})
_READING = frozenset({"GET", "HEAD"})


def is_public(path: str) -> bool:
    """Whether *path* is served without the token: ``/healthz``, the receiver
    (``/webhooks/{provider}``, which checks signatures instead), the sign-in page and
    the static files (CSS and JavaScript)."""
    return (
        path in ("/healthz", "/sign-in")
        or path.startswith("/webhooks/")
        or path.startswith("/static/")
    )


def is_page(path: str) -> bool:
    """Whether *path* is one of the inbox's pages (HTML for a person), or a form of one."""
    return path in _PAGES or path.startswith("/operation/")


def sign_in_url(path: str, query: str = "") -> str:
    """``/sign-in?next=…``: where a page sends a request without a session."""
    target = path + (f"?{query}" if query else "")
    return "/sign-in" if target == "/" else f"/sign-in?next={quote(target, safe='')}"


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
    request without the right token or a session, unless its path is public; a page
    (:func:`is_page`) answers 303 to the sign-in page instead.

    The request's :class:`Principal` is put in the scope (``PRINCIPAL_KEY``).

    Args:
        app: the application behind.
        token: the service's token.
        public: whether a path needs no token (default :func:`is_public`).
        sessions: reads the session cookie (``None``: only the token is accepted).
        page: whether a path is a page (default :func:`is_page`).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        public: Callable[[str], bool] = is_public,
        sessions: Sessions | None = None,
        page: Callable[[str], bool] = is_page,
    ) -> None:
        self.app = app
        self._token = token
        self.public = public
        self.sessions = sessions
        self.page = page

    def _session(self, scope: Scope, headers: Headers) -> Principal | None:
        """The signed-in person of a request the session cookie may authorize."""
        if self.sessions is None:
            return None
        if scope["method"] not in _READING and not self.page(scope["path"]):
            return None
        cookie = headers.get("cookie")
        value = cookie_parser(cookie).get(SESSION_COOKIE) if cookie else None
        session = self.sessions.read(value)
        return Principal(session=session) if session is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.public(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        given = bearer_token(headers.get("authorization"))
        person = self._session(scope, headers) if given is None else None
        if person is not None:
            scope[PRINCIPAL_KEY] = person
            await self.app(scope, receive, send)
            return
        if given is None and self.page(scope["path"]):
            query = scope.get("query_string", b"").decode("latin-1")
            reading = scope["method"] in _READING
            where = sign_in_url(scope["path"], query) if reading else "/sign-in"
            await RedirectResponse(where, status_code=303)(scope, receive, send)
            return
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
            scope[PRINCIPAL_KEY] = Principal()
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)
