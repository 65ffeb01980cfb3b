"""The PostgreSQL store's connection: its DSN without secrets, and errors as one line.

``redact_dsn`` shows a DSN without its password (in the URI's userinfo or a
``password=`` parameter); a psycopg failure becomes a :class:`StoreError` naming the
store by that label, keeping only the server's primary message and SQLSTATE (its DETAIL
and CONTEXT may quote another operation's row), every secret of the DSN scrubbed and the
length bounded (``docs/stores.md``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final
from urllib.parse import unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import PoolTimeout

from waitbound._base._errors import StoreError, UsageError

__all__ = ["connection_info", "dsn_secrets", "failures", "redact_dsn"]


_URI: Final = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://)(?P<rest>[^?#]*)", re.IGNORECASE)


_PASSWORD_PARAM: Final = re.compile(
    r"(?P<key>\bpassword\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|[^\s&]*)", re.IGNORECASE
)


_QUOTED: Final = re.compile(r'"[^"]*"')


def redact_dsn(dsn: str) -> str:
    """*dsn* with its password (``user:password@`` or ``password=…``) replaced by ``***``."""
    text = _PASSWORD_PARAM.sub(lambda m: m["key"] + "***", dsn)
    match = _URI.match(text)
    if match:
        userinfo, at, hostpart = match["rest"].rpartition("@")
        if at and ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            text = f"{match['head']}{user}:***@{hostpart}{text[match.end() :]}"
    return text


def dsn_secrets(dsn: str) -> list[str]:
    """The password(s) written in *dsn*, raw and percent-decoded, to scrub from messages."""
    found = [m["value"].strip("'") for m in _PASSWORD_PARAM.finditer(dsn)]
    match = _URI.match(dsn)
    if match:
        userinfo, at, _ = match["rest"].rpartition("@")
        if at and ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    found += [unquote(s) for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def _scrub(message: str, secrets: Sequence[str]) -> str:
    """One line, with every secret replaced by ``***``."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    for secret in secrets:
        line = line.replace(secret, "***")
    return line


@contextmanager
def failures(label: str, secrets: Sequence[str]) -> Iterator[None]:
    """Turn a driver or pool failure into a one-line StoreError without the password."""
    try:
        yield
    except psycopg.Error as exc:
        raise StoreError(f"store {label}: {_reason(exc, secrets)}") from None
    except PoolTimeout as exc:
        raise StoreError(f"store {label}: {_scrub(str(exc), secrets)}") from None
    except (ValueError, TypeError, KeyError) as exc:
        if isinstance(exc, StoreError | UsageError):
            raise
        raise StoreError(
            f"store {label}: a stored value is damaged ({type(exc).__name__})"
        ) from None


def _reason(exc: psycopg.Error, secrets: Sequence[str]) -> str:
    """What a driver or server failure says, as one bounded line without a secret.

    Only the server's primary message (and its SQLSTATE) is kept: its ``DETAIL`` and
    ``CONTEXT`` lines quote the data of the rows involved, which may be another
    operation's.
    """
    diag = exc.diag
    primary = diag.message_primary if diag is not None else None
    if primary:
        text = primary if not diag.sqlstate else f"{primary} (SQLSTATE {diag.sqlstate})"
    else:
        text = str(exc)
    line = _scrub(text, secrets)
    return line if len(line) <= 300 else line[:299] + "…"


def connection_info(dsn: str, connect_timeout_s: float, label: str, secrets: Sequence[str]) -> str:
    """*dsn* checked, with ``connect_timeout`` added unless it names one.

    A DSN libpq cannot parse is not shown at all, nor the pieces libpq quotes from it:
    a misspelt ``password`` is not recognised as one, so redaction cannot be trusted.
    """
    if not dsn.strip():
        raise UsageError("the PostgreSQL DSN is empty")
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        reason = _QUOTED.sub(lambda m: m[0] if len(m[0]) <= 3 else '"…"', _scrub(str(exc), secrets))
        raise StoreError(
            f"the PostgreSQL DSN cannot be parsed ({reason}); expected "
            "postgresql://user@host:5432/dbname or host=… port=… dbname=… (not shown: "
            "it may hold a password)"
        ) from None
    if "connect_timeout" in params:
        return dsn
    with failures(label, secrets):
        return make_conninfo(dsn, connect_timeout=max(1, round(connect_timeout_s)))
