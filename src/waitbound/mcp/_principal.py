"""Who is asking the MCP server, and which operations they reach.

Every request is served on behalf of one :class:`Principal`:

- over streamable HTTP, the holder of the bearer token the request carries (a token of
  the token file ``waitbound serve`` reads: ``NAME ROLE TOKEN`` lines, or one shared
  token); with ``--no-auth`` (loopback only), the MCP session the request belongs to;
- over stdio and in-process, the operator: the person who runs the server, holds its
  configuration and credentials and could read the store directly.

An operation belongs to the principal that started it: its label is
``mcp:OWNER/PROVIDER`` (a named token's NAME, or ``session-ID``), or ``mcp:PROVIDER``
for the operator's and the shared token's (and every operation started before owners
were recorded). A principal reaches only its own operations; an ``admin`` (the
operator, the shared token, a named ``admin``) reaches every one. Decisions and
requests are recorded by the principal's name, never by a name the client sends.

The principal of the request being served is a context variable (:func:`current`),
set by the protocol fronts from the authenticated request (:func:`acting_for`); its
default is the operator, for stdio and in-process use. The HTTP front sets
:data:`NOBODY` for every request before the SDK sees it, so a path that does not name
its principal reaches nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import getpass
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from waitbound._base._errors import UsageError
from waitbound.mcp._labels import LABEL_PREFIX
from waitbound.web._session import BEARER_DECIDER
from waitbound.web._tokens import ADMIN, DECIDER, VIEWER, allows

__all__ = [
    "LOCAL_OWNER",
    "NOBODY",
    "OPEN_SESSION_KEY",
    "Principal",
    "acting_for",
    "current",
    "label_of",
    "operator",
    "owner_of",
    "principal_of_context",
    "principal_of_request",
]

OPEN_SESSION_KEY: Final = "waitbound.mcp.open"
"""Set in a request's ASGI scope when the server runs with ``--no-auth``."""
_SESSION_HEADER: Final = "mcp-session-id"
LOCAL_OWNER: Final = "local"
"""With ``--no-auth``, the owner of the jobs sessionless requests start: they share it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """One party the MCP server serves.

    Attributes:
        owner: the owner recorded on the operations it starts (``None``: the operator's
            operations, labelled ``mcp:PROVIDER``); ``""`` for :data:`NOBODY`.
        role: ``viewer``, ``decider`` or ``admin`` (``waitbound.web._tokens``).
        by: how its decisions and requests are recorded.
    """

    owner: str | None
    role: str
    by: str

    @property
    def admin(self) -> bool:
        """Whether it reaches every principal's operations."""
        return allows(self.role, ADMIN)

    @property
    def decides(self) -> bool:
        """Whether its answer to an elicitation may be a decision (``decider``, ``admin``)."""
        return allows(self.role, DECIDER)

    def reaches(self, label: str | None) -> bool:
        """Whether an operation labelled *label* (an ``mcp:`` one) is this principal's."""
        if self.owner == "":
            return False
        return self.admin or owner_of(label) == self.owner

    @property
    def label_prefix(self) -> str:
        """The label prefix of the operations it may list (``mcp:`` for an admin).

        Raises:
            UsageError: an operator-owned principal that is not an admin (none is made).
        """
        if self.admin:
            return LABEL_PREFIX
        if not self.owner:
            raise UsageError("this request has no principal: it reaches no operation")
        return f"{LABEL_PREFIX}{self.owner}/"

    def label(self, provider: str) -> str:
        """The label of an operation it starts at *provider*.

        Raises:
            UsageError: :data:`NOBODY` starts nothing.
        """
        if self.owner == "":
            raise UsageError("this request has no principal: it may not start a job")
        return f"{LABEL_PREFIX}{provider}" if self.owner is None else label_of(provider, self.owner)

    def key_scope(self, provider: str, key: str) -> str:
        """The operation id of a job it starts with idempotency *key*: the same key of
        two principals names two operations (the operator's keeps the earlier id)."""
        text = f"{provider}\n{key}" if self.owner is None else f"{self.owner}\n{provider}\n{key}"
        return f"mcp-{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def label_of(provider: str, owner: str) -> str:
    """``mcp:OWNER/PROVIDER``."""
    return f"{LABEL_PREFIX}{owner}/{provider}"


def owner_of(label: str | None) -> str | None:
    """The owner in an ``mcp:OWNER/PROVIDER`` label (``None``: the operator's)."""
    rest = (label or "").removeprefix(LABEL_PREFIX)
    owner, slash, _ = rest.partition("/")
    return owner if slash else None


def operator() -> Principal:
    """The operator: stdio and in-process use (an admin recorded as the OS user)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    by = f"os user {user[:24]} (mcp stdio, pid {os.getpid()})"
    return Principal(owner=None, role=ADMIN, by=by)


NOBODY: Final = Principal(owner="", role=VIEWER, by="nobody")
"""What an HTTP request is served as until its principal is known: it reaches nothing."""

_CURRENT: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "waitbound_mcp_principal", default=None
)


def current() -> Principal:
    """The principal of the request being served (the operator outside any request)."""
    found = _CURRENT.get()
    return operator() if found is None else found


@contextlib.contextmanager
def acting_for(principal: Principal) -> Iterator[None]:
    """Serve the block on behalf of *principal*."""
    token = _CURRENT.set(principal)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def principal_of_request(request: Any) -> Principal:
    """The principal of an MCP message that came with *request* (the SDK's
    ``ServerRequestContext.request``: the HTTP request, ``None`` on stdio and
    in-process): the holder of its bearer token, or in ``--no-auth`` mode its session;
    :data:`NOBODY` when it has neither. Without a request, the principal already in
    force (:func:`current`: the operator on stdio, :data:`NOBODY` inside the HTTP
    front)."""
    if request is None:
        return current()
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return NOBODY
    user = scope.get("user")
    token = getattr(user, "access_token", None)
    claims = getattr(token, "claims", None)
    if isinstance(claims, dict) and claims.get("waitbound_role") in (VIEWER, DECIDER, ADMIN):
        name = claims.get("waitbound_name")
        role = str(claims["waitbound_role"])
        if name is None:  # the shared token: the operator's operations, as serve's admin
            return Principal(owner=None, role=role, by=BEARER_DECIDER)
        return Principal(owner=str(name), role=role, by=str(name))
    if scope.get(OPEN_SESSION_KEY):
        headers = dict(scope.get("headers") or [])
        session = headers.get(_SESSION_HEADER.encode(), b"").decode("latin-1")
        if session and session.isalnum() and len(session) <= 64:
            return Principal(owner=f"session-{session}", role=VIEWER, by=f"mcp session {session}")
        if not session:  # a sessionless (2026-07-28) request: every such client is one
            return Principal(owner=LOCAL_OWNER, role=VIEWER, by="mcp local client (no token)")
    return NOBODY


def principal_of_context(context: Any) -> Principal:
    """:func:`principal_of_request` for an SDK context: a ``ServerRequestContext`` (its
    ``request``) or an ``MCPServer`` ``Context`` (its ``request_context``'s)."""
    inner = getattr(context, "_request_context", context)
    return principal_of_request(getattr(inner, "request", None))
