"""Who may use the service, and from where.

Every endpoint requires a bearer token of the token file (``Authorization: Bearer
TOKEN``, RFC 6750 §2.1), a signed-in person's session, or — in trusted-proxy mode — a
user named by the authenticating proxy, but the public ones (the webhook receiver,
which authenticates by signature, ``/healthz``, the sign-in page and the static files).

In order, for each HTTP request (:class:`BearerAuth`, a pure ASGI middleware, so
streamed responses pass through untouched):

1. A path under a session's prefix (``/s/KEY/…``) is served as the path after it; the
   key is kept for the session check (``web/_session.py``).
2. A state-changing request (any method but ``GET``, ``HEAD``, ``OPTIONS``; the
   receiver excepted) is refused (403) when the browser says it comes from elsewhere:
   ``Sec-Fetch-Site`` other than ``same-origin`` or ``none``, or (without that header)
   an ``Origin`` whose host and port are not the request's ``Host`` (another site,
   another port, ``null``).
   This is in addition to the CSRF token of every form.
3. Public paths pass.
4. ``Authorization: Bearer`` must name a token of the file (else 401); the principal is
   its holder, with its role.
5. A request from a trusted proxy's address carrying its user header: that user.
6. The session cookie, under its own prefix, on a ``GET``/``HEAD`` or a page's form.
7. A page without any answers 303 to ``/sign-in?next=…``; every other endpoint 401.
8. The role must allow the request: deciding needs ``decider``, ``/sessions`` ``admin``
   (403 otherwise).

Tokens are compared in constant time and never logged or echoed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, urlsplit

import anyio.to_thread
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from waitbound._base._errors import StoreError
from waitbound.web._session import (
    BASE_KEY,
    BEARER_DECIDER,
    PATH_KEY_PATTERN,
    PRINCIPAL_KEY,
    SESSION_COOKIE,
    Principal,
    Sessions,
    base_of,
)
from waitbound.web._tokens import ADMIN, DECIDER, VIEWER, Holder, match_token

__all__ = [
    "BearerAuth",
    "TrustedProxy",
    "bearer_token",
    "cross_origin",
    "is_page",
    "is_public",
    "needed_role",
    "sign_in_url",
    "token_matches",
]

_REALM = 'Bearer realm="waitbound"'
_PAGES = frozenset({"/", "/in-flight", "/finished", "/sign-out"})
_READING = frozenset({"GET", "HEAD"})
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
_SAME_ORIGIN_SITES: Final = frozenset({"same-origin", "none"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


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


def needed_role(method: str, path: str) -> str:
    """The role a request needs: ``admin`` for ``/sessions…``, ``decider`` for a
    decision (``POST /operation/{id}/decide``), ``viewer`` for the rest."""
    if path == "/sessions" or path.startswith("/sessions/"):
        return ADMIN
    if method not in _SAFE and path.startswith("/operation/") and path.endswith("/decide"):
        return DECIDER
    return VIEWER


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


def _host_port(netloc: str, scheme: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if not host:
        return None
    return host, port if port is not None else _DEFAULT_PORTS.get(scheme, 80)


def cross_origin(headers: Headers, scheme: str) -> str | None:
    """Why a state-changing request comes from another origin (``None``: it does not,
    or no browser sent it: scripts send neither header).

    ``Sec-Fetch-Site`` (Fetch Metadata), when sent, decides: other than
    ``same-origin``/``none`` is refused. Without it, an ``Origin`` (RFC 6454) whose host
    and port differ from the ``Host`` header's — another port of the same host too — or
    an opaque ``null`` one is refused. The scheme is not compared: a proxy in front may
    end TLS.
    """
    site = headers.get("sec-fetch-site")
    if site is not None:  # Fetch Metadata, when sent, is the browser's own word
        if site.strip().lower() in _SAME_ORIGIN_SITES:
            return None
        return f"the browser says this request comes from a {site[:20]!r} page"
    origin = headers.get("origin")
    if origin is None:
        return None
    parts = urlsplit(origin.strip())
    # A Host without a port means the default of the scheme the browser used (the
    # Origin's): behind a proxy that ends TLS, this service itself sees plain http.
    own = _host_port(headers.get("host", ""), parts.scheme or scheme)
    if parts.scheme not in _DEFAULT_PORTS or own is None:
        return "the request's Origin is not this service's"
    theirs = _host_port(parts.netloc, parts.scheme)
    if theirs is None or theirs != own:
        return "the request's Origin is not this service's (another site or port)"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class TrustedProxy:
    """An authenticating reverse proxy whose user header is believed (``[auth]`` in
    ``serve.toml``).

    Attributes:
        addresses: the networks the proxy connects from; the header from any other
            client is ignored.
        user_header: the header naming the signed-in user (e.g. ``X-Forwarded-User``,
            ``X-Auth-Request-User`` as oauth2-proxy sets them).
        role: the role every proxied user has.
    """

    addresses: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    user_header: str = "X-Forwarded-User"
    role: str = DECIDER

    def trusts(self, client: tuple[str, int] | None) -> bool:
        """Whether the connection comes from one of :attr:`addresses`."""
        if client is None:
            return False
        try:
            address = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        return any(address in network for network in self.addresses)


def _unauthorized(error: str, detail: str, challenge: str) -> JSONResponse:
    return JSONResponse(
        {"error": error, "detail": detail}, status_code=401, headers={"WWW-Authenticate": challenge}
    )


def _forbidden(error: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=403)


class BearerAuth:
    """The authentication middleware (see the module's docstring).

    The request's :class:`Principal` is put in the scope (``PRINCIPAL_KEY``), its pages'
    prefix at ``BASE_KEY``.

    Args:
        app: the application behind.
        holders: the token file's tokens.
        public: whether a path needs no token (default :func:`is_public`).
        sessions: reads the session cookie (``None``: only tokens are accepted).
        page: whether a path is a page (default :func:`is_page`).
        proxy: the trusted proxy (``None``: no proxy header is believed).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        holders: Sequence[Holder],
        public: Callable[[str], bool] = is_public,
        sessions: Sessions | None = None,
        page: Callable[[str], bool] = is_page,
        proxy: TrustedProxy | None = None,
    ) -> None:
        self.app = app
        self.holders = tuple(holders)
        self.public = public
        self.sessions = sessions
        self.page = page
        self.proxy = proxy
        self._proxy_key = secrets.token_bytes(32)

    async def _session(self, scope: Scope, headers: Headers, key: str | None) -> Principal | None:
        """The signed-in person of a request the session cookie may authorize."""
        if self.sessions is None or key is None:
            return None
        if scope["method"] not in _READING and not self.page(scope["path"]):
            return None
        cookie = headers.get("cookie")
        value = cookie_parser(cookie).get(SESSION_COOKIE) if cookie else None
        if not value:
            return None
        session = await anyio.to_thread.run_sync(self.sessions.read, value, key)
        if session is None:
            return None
        row = session.row
        return Principal(
            who=row.who,
            role=row.role,
            shared=row.via == "shared token",
            via="session",
            session=session,
            csrf=session.csrf,
            base=session.base,
        )

    def _proxied(self, scope: Scope, headers: Headers) -> Principal | None:
        """The proxy's user, when the request comes from the trusted proxy with its header."""
        if self.proxy is None or not self.proxy.trusts(scope.get("client")):
            return None
        user = (headers.get(self.proxy.user_header) or "").strip()
        if not user or len(user) > 128 or not user.isprintable():
            return None
        csrf = hmac.new(self._proxy_key, user.encode(), hashlib.sha256).hexdigest()
        return Principal(who=user, role=self.proxy.role, shared=False, via="proxy", csrf=csrf)

    async def _principal(
        self, scope: Scope, headers: Headers, key: str | None
    ) -> Principal | Response | None:
        given = bearer_token(headers.get("authorization"))
        if given is not None:
            holder = match_token(given, self.holders)
            if holder is None:
                return _unauthorized(
                    "invalid_token",
                    "the bearer token is not one of the service's tokens",
                    f'{_REALM}, error="invalid_token"',
                )
            return Principal(
                who=holder.name or BEARER_DECIDER,
                role=holder.role,
                shared=holder.shared,
            )
        proxied = self._proxied(scope, headers)
        if proxied is not None:
            return proxied
        try:
            return await self._session(scope, headers, key)
        except StoreError:
            return JSONResponse(
                {"error": "store_unavailable", "detail": "the store failed; try again later"},
                status_code=503,
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = None
        found = PATH_KEY_PATTERN.fullmatch(scope["path"])
        if found is not None:
            key, rest = found.group(1), found.group(2) or "/"
            scope = dict(scope, path=rest, raw_path=rest.encode())
            scope[BASE_KEY] = base_of(key)
        headers = Headers(scope=scope)
        path, method = scope["path"], scope["method"]
        if method not in _SAFE and not path.startswith("/webhooks/"):
            why = cross_origin(headers, scope.get("scheme", "http"))
            if why is not None:
                await _forbidden("cross_origin", f"{why}; nothing was changed")(
                    scope, receive, send
                )
                return
        if self.public(path):
            await self.app(scope, receive, send)
            return
        person = await self._principal(scope, headers, key)
        if isinstance(person, Response):
            await person(scope, receive, send)
            return
        if person is None:
            if self.page(path):
                query = scope.get("query_string", b"").decode("latin-1")
                where = sign_in_url(path, query) if method in _READING else "/sign-in"
                await RedirectResponse(where, status_code=303)(scope, receive, send)
                return
            await _unauthorized(
                "unauthorized",
                "this endpoint needs one of the service's tokens: Authorization: Bearer "
                "TOKEN (the token file of waitbound serve)",
                _REALM,
            )(scope, receive, send)
            return
        needed = needed_role(method, path)
        if not person.may(needed):
            await _forbidden(
                "forbidden", f"this needs the {needed} role; {person.who!r} is a {person.role}"
            )(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = person
        await self.app(scope, receive, send)
