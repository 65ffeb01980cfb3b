"""The inbox's sign-in session and its CSRF token.

A person signs in with the service's token and their name; the session is the cookie
``waitbound_session``: their name and a random CSRF token, signed with HMAC-SHA256
(itsdangerous ``URLSafeTimedSerializer``) under a key made at random when the process
starts, stamped with the time it was issued and refused after
:data:`SESSION_MAX_AGE_S`. The cookie is ``HttpOnly``, ``SameSite=Strict``, ``Path=/``
and ``Secure`` when the request came over https. The token is never in it. Restarting
``waitbound serve`` signs everyone out (a new key).

Every form that changes something carries the session's CSRF token (``csrf``); it is
compared in constant time. Requests with ``Authorization: Bearer TOKEN`` (scripts)
need none: a browser never sends that header by itself.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from itsdangerous import BadSignature, TimestampSigner, URLSafeTimedSerializer

from waitbound._clock import Clock, SystemClock

__all__ = [
    "BEARER_DECIDER",
    "MAX_NAME_CHARS",
    "PRINCIPAL_KEY",
    "SESSION_COOKIE",
    "SESSION_MAX_AGE_S",
    "Principal",
    "Session",
    "Sessions",
    "check_name",
    "local_path",
    "principal_of",
]

SESSION_COOKIE: Final = "waitbound_session"
SESSION_MAX_AGE_S: Final = 12 * 3600
"""How long a session lasts after sign-in (seconds)."""
MAX_NAME_CHARS: Final = 64
"""The longest name a person may sign in with."""
BEARER_DECIDER: Final = "bearer"
"""Who a decision made with the bearer token is recorded as, unless its form names someone."""
PRINCIPAL_KEY: Final = "waitbound.principal"
"""Where the authentication middleware puts the :class:`Principal` in the ASGI scope."""
_SALT: Final = "waitbound.session"


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """A signed-in person.

    Attributes:
        name: who they said they are (recorded as the decider).
        csrf: the token every form of theirs carries.
    """

    name: str
    csrf: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """Who made a request: a signed-in person (``session``) or a script holding the
    token (``session`` is ``None``)."""

    session: Session | None = None

    @property
    def name(self) -> str:
        """The person's name, or :data:`BEARER_DECIDER`."""
        return self.session.name if self.session is not None else BEARER_DECIDER

    def csrf_ok(self, given: str | None) -> bool:
        """Whether a form's ``csrf`` value is acceptable: any for a bearer request, the
        session's token (compared in constant time) for a person."""
        if self.session is None:
            return True
        if not given:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.session.csrf.encode())


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
    a header injection (control characters, spaces), never the sign-in page itself."""
    if not target or len(target) > 2000 or not target.startswith("/"):
        return default
    if target.startswith(("//", "/\\")) or "\\" in target:
        return default
    if any(not c.isprintable() or c.isspace() for c in target):
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or parts.path in ("/sign-in", "/sign-out"):
        return default
    return target


class _ClockSigner(TimestampSigner):
    """itsdangerous' timestamp signer on the service's clock (tests use a fake one)."""

    def __init__(self, *args: Any, clock: Clock, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clock = clock

    def get_timestamp(self) -> int:
        return int(self._clock.now().timestamp())


class Sessions:
    """Issue and read session cookies.

    Args:
        key: the signing key (default: 32 random bytes, new in each process).
        clock: when a session is issued and how old it is.
        max_age_s: how long a session lasts (seconds).
    """

    def __init__(
        self,
        *,
        key: bytes | None = None,
        clock: Clock | None = None,
        max_age_s: float = SESSION_MAX_AGE_S,
    ) -> None:
        self.max_age_s = max_age_s
        self._serializer = URLSafeTimedSerializer(
            key if key is not None else secrets.token_bytes(32),
            salt=_SALT,
            signer=_ClockSigner,
            signer_kwargs={"clock": clock or SystemClock(), "digest_method": hashlib.sha256},
        )

    def issue(self, name: str) -> tuple[Session, str]:
        """A new session for *name* (a fresh CSRF token) and its cookie value."""
        session = Session(name=name.strip(), csrf=secrets.token_urlsafe(24))
        value = self._serializer.dumps({"n": session.name, "c": session.csrf})
        return session, value

    def read(self, value: str | None) -> Session | None:
        """The session a cookie value holds, or ``None``: absent, forged, or older than
        ``max_age_s``."""
        if not value or len(value) > 4096:
            return None
        try:
            data = self._serializer.loads(value, max_age=math.ceil(self.max_age_s))
        except (BadSignature, ValueError, TypeError):
            return None
        if not isinstance(data, dict):
            return None
        name, csrf = data.get("n"), data.get("c")
        if not isinstance(name, str) or not isinstance(csrf, str) or check_name(name):
            return None
        return Session(name=name, csrf=csrf)

    def cookie(self, value: str, *, secure: bool) -> str:
        """The ``Set-Cookie`` value that keeps a session."""
        flags = f"Max-Age={int(self.max_age_s)}; Path=/; HttpOnly; SameSite=Strict"
        return f"{SESSION_COOKIE}={value}; {flags}" + ("; Secure" if secure else "")

    @staticmethod
    def cleared(*, secure: bool) -> str:
        """The ``Set-Cookie`` value that ends a session."""
        flags = "Max-Age=0; Path=/; HttpOnly; SameSite=Strict"
        return f"{SESSION_COOKIE}=; {flags}" + ("; Secure" if secure else "")
