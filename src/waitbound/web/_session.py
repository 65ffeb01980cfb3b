"""The inbox's sign-in sessions, kept in the store, and their CSRF token.

Signing in makes a session row in the store (``waitbound.stores._sessions``: who, role,
how, created, last seen, expiry; revoked at sign-out or by an operator) and two random
secrets, of which the store keeps only SHA-256 digests:

- the session id, the value of the cookie ``waitbound_session`` (32 random bytes,
  opaque: nothing is readable in it);
- the path key: every page of the session is served under ``/s/KEY/…`` (:func:`base_of`),
  and the cookie's ``Path`` is that prefix.

Browsers do not isolate cookies by port (RFC 6265 §8.5): a cookie set by
``127.0.0.1:8765`` is sent to every port of ``127.0.0.1`` whose path matches. With the
cookie scoped to an unguessable path, a page on another port is never sent it (it does
not know the path to ask for), and a cookie obtained some other way is refused without
the path key of its own session. ``SameSite=Strict`` and ``HttpOnly`` stay; ``Secure``
when the request came over https. See ``docs/serve.md``, "Sessions".

The CSRF token every form carries is HMAC-SHA256 of the session id (so the store holds
nothing that forges it); it is compared in constant time. Requests with
``Authorization: Bearer TOKEN`` (scripts) need none: a browser never sends that header
by itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final
from urllib.parse import urlsplit

from waitbound._base._clock import Clock, SystemClock
from waitbound.stores import Store
from waitbound.stores._sessions import SessionRow, sessions_of
from waitbound.web._tokens import ADMIN, allows

__all__ = [
    "BASE_KEY",
    "BEARER_DECIDER",
    "MAX_NAME_CHARS",
    "PATH_KEY_PATTERN",
    "PRINCIPAL_KEY",
    "SESSION_COOKIE",
    "SESSION_MAX_AGE_S",
    "TOUCH_EVERY_S",
    "Principal",
    "Session",
    "Sessions",
    "base_of",
    "check_name",
    "digest",
    "local_path",
    "principal_of",
]

SESSION_COOKIE: Final = "waitbound_session"
SESSION_MAX_AGE_S: Final = 12 * 3600
"""How long a session lasts after sign-in (seconds)."""
TOUCH_EVERY_S: Final = 60.0
"""A session's ``last_seen_at`` is written at most this often (seconds)."""
MAX_NAME_CHARS: Final = 64
"""The longest name a person may sign in with."""
BEARER_DECIDER: Final = "bearer"
"""Who a decision made with the shared token is recorded as, unless its form names someone."""
PRINCIPAL_KEY: Final = "waitbound.principal"
"""Where the authentication middleware puts the :class:`Principal` in the ASGI scope."""
BASE_KEY: Final = "waitbound.base"
"""Where the session-path middleware puts a request's ``/s/KEY`` prefix (``""``: none)."""
PATH_KEY_PATTERN: Final = re.compile(r"/s/([A-Za-z0-9_-]{32})(/.*)?")
"""A path under a session's prefix: its key and the rest."""
_CSRF_LABEL: Final = b"waitbound csrf v1"


def digest(secret: str) -> str:
    """Hex SHA-256 of *secret* (what the store keeps of a session's secrets)."""
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


def base_of(path_key: str) -> str:
    """``/s/KEY``: the prefix a session's pages are served under."""
    return f"/s/{path_key}"


def _csrf(session_value: str) -> str:
    mac = hmac.new(session_value.encode(), _CSRF_LABEL, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """A signed-in person's session, as read for one request.

    Attributes:
        row: the store's row (who, role, via, times).
        csrf: the token every form of theirs carries.
        base: ``/s/KEY``, the prefix of its pages.
    """

    row: SessionRow
    csrf: str
    base: str

    @property
    def name(self) -> str:
        """Who signed in (recorded as the decider)."""
        return self.row.who


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """Who made a request.

    Attributes:
        who: the name a decision is recorded under (a named token's owner, a session's
            person, a proxy's user; :data:`BEARER_DECIDER` for a script with the shared
            token).
        role: ``viewer``, ``decider`` or ``admin``.
        shared: the shared (unnamed) token authorized it.
        via: ``bearer``, ``session`` or ``proxy``.
        session: the signed-in session, if that is how.
        csrf: the token its forms must carry (``None``: none needed, a bearer request).
        base: the prefix of its pages (``""``: the plain paths).
    """

    who: str = BEARER_DECIDER
    role: str = ADMIN
    shared: bool = True
    via: str = "bearer"
    session: Session | None = None
    csrf: str | None = None
    base: str = ""

    @property
    def name(self) -> str:
        """Who a decision is recorded as."""
        return self.who

    def may(self, needed: str) -> bool:
        """Whether this principal's role allows *needed* (see ``waitbound.web._tokens``)."""
        return allows(self.role, needed)

    def csrf_ok(self, given: str | None) -> bool:
        """Whether a form's ``csrf`` value is acceptable: any for a bearer request, the
        principal's token (compared in constant time) otherwise."""
        if self.csrf is None:
            return True
        if not given:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.csrf.encode())


def principal_of(scope: dict[str, Any] | Any) -> Principal | None:
    """The :class:`Principal` the authentication middleware found for this request."""
    found = scope.get(PRINCIPAL_KEY)
    return found if isinstance(found, Principal) else None


def check_name(text: str) -> str | None:
    """Why *text* cannot be a sign-in name (``None``: it can): 1 to
    :data:`MAX_NAME_CHARS` printable characters, not only spaces."""
    name = text.strip()
    if not name:
        return "say who you are: your name is recorded with each decision you make"
    if len(name) > MAX_NAME_CHARS:
        return f"a name is at most {MAX_NAME_CHARS} characters"
    if not name.isprintable():
        return "a name is one line of printable text"
    return None


def local_path(target: str | None, default: str = "/") -> str:
    """*target* when it is a path of this service (``/in-flight?label=x``), else
    *default*: never another site (``//evil.example``, ``https://…``, ``/\\evil``), never
    a header injection (control characters, spaces), never the sign-in page itself,
    never a session's prefix (``/s/…``: the new session's own is put in front)."""
    if not target or len(target) > 2000 or not target.startswith("/"):
        return default
    if target.startswith(("//", "/\\", "/s/")) or "\\" in target:
        return default
    if any(not c.isprintable() or c.isspace() for c in target):
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or parts.path in ("/sign-in", "/sign-out"):
        return default
    return target


class Sessions:
    """Issue, read and end the inbox's sessions, kept in *store*.

    Args:
        store: where the sessions are kept (``sessions`` table, schema 4).
        clock: when a session starts, is seen and ends.
        max_age_s: how long a session lasts after sign-in (seconds).
        touch_every_s: how often ``last_seen_at`` is written at most (seconds).

    Every method but :meth:`cookie` and :meth:`cleared` is one store call (blocking: call
    it from a worker thread). They raise :class:`~waitbound.StoreError` when the store fails.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        max_age_s: float = SESSION_MAX_AGE_S,
        touch_every_s: float = TOUCH_EVERY_S,
    ) -> None:
        self.store = sessions_of(store)
        self.clock = clock or SystemClock()
        self.max_age_s = max_age_s
        self.touch_every_s = touch_every_s

    def issue(self, who: str, *, role: str, via: str) -> tuple[Session, str]:
        """A new session for *who* and its cookie value (kept only as a digest)."""
        value = secrets.token_urlsafe(32)
        path_key = secrets.token_urlsafe(24)
        now = self.clock.now()
        row = SessionRow(
            session_id=digest(value),
            path_hash=digest(path_key),
            who=who.strip(),
            role=role,
            via=via,
            created_at=now,
            last_seen_at=now,
            expires_at=now + timedelta(seconds=self.max_age_s),
        )
        self.store.put_session(row)
        return Session(row=row, csrf=_csrf(value), base=base_of(path_key)), value

    def read(self, value: str | None, path_key: str | None) -> Session | None:
        """The open session of a cookie value under its own path key, or ``None``:
        absent, unknown, revoked, expired, or under another prefix (or none)."""
        if not value or not path_key or len(value) > 256:
            return None
        row = self.store.get_session(digest(value))
        now = self.clock.now()
        if row is None or not row.is_open(now):
            return None
        if not hmac.compare_digest(row.path_hash, digest(path_key)):
            return None
        if (now - row.last_seen_at).total_seconds() >= self.touch_every_s:
            self.store.touch_session(row.session_id, now)
        return Session(row=row, csrf=_csrf(value), base=base_of(path_key))

    def still_open(self, session: Session) -> bool:
        """Whether *session* is still open now (neither revoked nor expired): one store
        read, for a stream it holds open."""
        row = self.store.get_session(session.row.session_id)
        return row is not None and row.is_open(self.clock.now())

    def revoke(self, session: Session) -> None:
        """End *session* now (sign-out): its cookie is refused from then on."""
        self.store.revoke_sessions(at=self.clock.now(), shown_id=session.row.session_id)

    def cookie(self, value: str, base: str, *, secure: bool) -> str:
        """The ``Set-Cookie`` value that keeps a session, scoped to its pages' *base*."""
        flags = f"Max-Age={int(self.max_age_s)}; Path={base}; HttpOnly; SameSite=Strict"
        return f"{SESSION_COOKIE}={value}; {flags}" + ("; Secure" if secure else "")

    @staticmethod
    def cleared(base: str, *, secure: bool) -> str:
        """The ``Set-Cookie`` value that removes a session's cookie from the browser."""
        flags = f"Max-Age=0; Path={base}; HttpOnly; SameSite=Strict"
        return f"{SESSION_COOKIE}=; {flags}" + ("; Secure" if secure else "")
