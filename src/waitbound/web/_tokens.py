"""Who holds a token of ``waitbound serve``, and what their role lets them do.

The token file (``--token-file``) holds either ONE token on one line — the shared token
of earlier releases — or named tokens, one a line: ``NAME ROLE TOKEN`` (``#`` starts a
comment; blank lines are skipped). A role is ``viewer`` (sees every page and endpoint),
``decider`` (also decides) or ``admin`` (also lists and revokes sessions). A named
token's decisions are recorded as made by its NAME; nobody types who they are.

The shared token is an ``admin`` whose holder types a name at sign-in: that name is
recorded marked as typed, ``"ann (shared token)"``, so the audit log says the name was
not proven. A file may hold the shared token among named ones (at most one such line).
See ``docs/serve.md``, "People and roles".
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from waitbound._base._errors import UsageError

__all__ = [
    "ADMIN",
    "DECIDER",
    "MIN_TOKEN_CHARS",
    "ROLES",
    "SHARED_MARK",
    "VIEWER",
    "Holder",
    "allows",
    "match_token",
    "parse_tokens",
]

VIEWER: Final = "viewer"
DECIDER: Final = "decider"
ADMIN: Final = "admin"
ROLES: Final = (VIEWER, DECIDER, ADMIN)
"""The roles, each allowing what the one before it does and more."""
SHARED_MARK: Final = " (shared token)"
"""Added to a name typed by a holder of the shared token, wherever it is recorded."""
MIN_TOKEN_CHARS: Final = 16
_TOKEN: Final = re.compile(r"[A-Za-z0-9._~+/-]+=*")
"""RFC 6750 §2.1 ``b64token``: what an ``Authorization: Bearer`` value may be."""
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Holder:
    """One token and who holds it.

    Attributes:
        name: its owner (recorded as ``by``); ``None`` for the shared token.
        role: ``viewer``, ``decider`` or ``admin``.
        token: the bearer token; never shown.
    """

    name: str | None
    role: str
    token: str = field(repr=False)

    @property
    def shared(self) -> bool:
        """Whether this is the unnamed, shared token."""
        return self.name is None


def allows(role: str, needed: str) -> bool:
    """Whether *role* may do what *needed* may (``admin`` ⊇ ``decider`` ⊇ ``viewer``)."""
    return role in ROLES and needed in ROLES and ROLES.index(role) >= ROLES.index(needed)


def match_token(given: str, holders: Sequence[Holder]) -> Holder | None:
    """The holder of *given*, compared in constant time with every token (the time
    taken does not say which one matched, or how much of one)."""
    found: Holder | None = None
    raw = given.encode("utf-8", "replace")
    for holder in holders:
        if hmac.compare_digest(raw, holder.token.encode("utf-8")) and found is None:
            found = holder
    return found


def _token(text: str, where: str) -> str:
    if not _TOKEN.fullmatch(text) or len(text) < MIN_TOKEN_CHARS:
        raise UsageError(
            f"{where} does not hold a bearer token (at least {MIN_TOKEN_CHARS} of "
            "A-Z a-z 0-9 - . _ ~ + /)"
        )
    return text


def parse_tokens(text: str, where: str) -> tuple[Holder, ...]:
    """The holders a token file's *text* names (*where* names the file in messages).

    Raises:
        UsageError: empty; a line that is neither ``TOKEN`` nor ``NAME ROLE TOKEN``; a
            bad name or role; a name or token given twice; two shared tokens. One line,
            never quoting a token.
    """
    holders: list[Holder] = []
    lines = [
        (number, line.split("#", 1)[0].split())
        for number, line in enumerate(text.splitlines(), start=1)
    ]
    for number, words in lines:
        at = f"{where} line {number}"
        if not words:
            continue
        if len(words) == 1:
            holders.append(Holder(name=None, role=ADMIN, token=_token(words[0], at)))
            continue
        if len(words) != 3:
            raise UsageError(f"{at}: a line is TOKEN, or NAME ROLE TOKEN (three words)")
        name, role, token = words
        if not _NAME.fullmatch(name):
            raise UsageError(
                f"{at}: a name is 1-64 of A-Z a-z 0-9 . _ @ + -, starting with a letter or digit"
            )
        if role not in ROLES:
            raise UsageError(f"{at}: the role must be one of {', '.join(ROLES)}")
        holders.append(Holder(name=name, role=role, token=_token(token, at)))
    if not holders:
        raise UsageError(f"{where} is empty; put a token in it or delete it")
    _unique((h.token for h in holders), f"{where}: a token is given twice")
    _unique((h.name or "" for h in holders if h.name), f"{where}: a name is given twice")
    if sum(h.shared for h in holders) > 1:
        raise UsageError(f"{where}: at most one line is a token without a name")
    return tuple(holders)


def _unique(values: Iterable[str], message: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise UsageError(message)
        seen.add(value)
