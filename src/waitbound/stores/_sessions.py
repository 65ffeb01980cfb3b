"""The inbox's sign-in sessions, kept in the store (schema 4, table ``sessions``).

A session row holds who signed in, with which role and how, when, when last seen, when
it ends and whether it was revoked; of its two secrets (the cookie's opaque id and the
path key its pages live under, see ``waitbound.web._session``) only SHA-256 digests:
a reader of the store can list and revoke sessions, never use one.

``session_id`` is the hex SHA-256 of the cookie's value; an operator names a session by
its first :data:`SHOWN_ID_CHARS` characters (``waitbound sessions``). One small
implementation per kind of store, reached with :func:`sessions_of`: a dict for a
MemoryStore, one copy of the SQL for SQLite and PostgreSQL, which reach the store's
tables through :class:`~waitbound.stores._protocol.SQLTables` (the records' ``Store``
protocol is unchanged).
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, Protocol

from waitbound._base._clock import utc
from waitbound._base._errors import StoreError, UsageError
from waitbound.stores._protocol import SQLTables, Store
from waitbound.stores._sql_dialect import SQLAccess

__all__ = ["SHOWN_ID_CHARS", "SessionRow", "SessionStore", "sessions_of"]

SHOWN_ID_CHARS: Final = 12
"""How much of a session's id is shown and accepted to name it (hex characters)."""
_COLUMNS: Final = (
    "session_id, path_hash, who, role, via, created_at, last_seen_at, expires_at, revoked_at"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRow:
    """One signed-in session.

    Attributes:
        session_id: hex SHA-256 of the cookie's opaque value.
        path_hash: hex SHA-256 of the path key its pages are served under.
        who: the person (a named token's owner, a proxy's user, or a typed name).
        role: ``viewer``, ``decider`` or ``admin``.
        via: how they signed in (``token NAME``, ``shared token``, ``proxy``).
        created_at, last_seen_at, expires_at: aware UTC instants.
        revoked_at: when it was revoked (sign-out or an operator), else ``None``.
    """

    session_id: str
    path_hash: str
    who: str
    role: str
    via: str
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None

    @property
    def shown_id(self) -> str:
        """The id an operator sees and types."""
        return self.session_id[:SHOWN_ID_CHARS]

    def is_open(self, now: datetime) -> bool:
        """Not revoked, not expired at *now*."""
        return self.revoked_at is None and now < self.expires_at

    def shown_json(self) -> dict[str, str | None]:
        """The session as ``waitbound sessions --json`` and ``GET /sessions`` show it
        (no secret: its shown id, who, role, how, RFC 3339 times)."""
        return {
            "id": self.shown_id,
            "who": self.who,
            "role": self.role,
            "via": self.via,
            "created_at": self.created_at.isoformat(),
            "last_seen_at": self.last_seen_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


class SessionStore(Protocol):
    """Where sessions are kept (thread-safe; every method one transaction)."""

    def put_session(self, row: SessionRow) -> None:
        """Keep a new session."""

    def get_session(self, session_id: str) -> SessionRow | None:
        """The session with this full id, or ``None``."""

    def touch_session(self, session_id: str, at: datetime) -> None:
        """Record that the session was used at *at*."""

    def revoke_sessions(self, *, at: datetime, shown_id: str | None = None) -> list[SessionRow]:
        """Revoke the open session whose id starts with *shown_id* (at least
        :data:`SHOWN_ID_CHARS` characters), or every open one (``None``); return those
        revoked (as they were).

        Raises:
            UsageError: *shown_id* is too short or names more than one session.
        """

    def list_sessions(self, *, now: datetime, ended: bool = False) -> list[SessionRow]:
        """The open sessions at *now* (with *ended*: the revoked and expired too),
        newest first."""

    def prune_sessions(self, *, before: datetime) -> int:
        """Delete the sessions that ended (expired or revoked) before *before*."""


def _checked_prefix(shown_id: str) -> str:
    prefix = shown_id.strip().lower()
    if len(prefix) < SHOWN_ID_CHARS or any(c not in "0123456789abcdef" for c in prefix):
        raise UsageError(
            f"a session id is at least {SHOWN_ID_CHARS} hex characters, as "
            "`waitbound sessions list` shows it"
        )
    return prefix


def _one(found: Sequence[SessionRow], shown_id: str) -> list[SessionRow]:
    if len(found) > 1:
        raise UsageError(f"session id {shown_id[:64]!r} names more than one session; give more")
    return list(found)


class _MemorySessions:
    """A dict under a lock (a MemoryStore's sessions)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, SessionRow] = {}

    def put_session(self, row: SessionRow) -> None:
        with self._lock:
            self._rows[row.session_id] = row

    def get_session(self, session_id: str) -> SessionRow | None:
        with self._lock:
            return self._rows.get(session_id)

    def touch_session(self, session_id: str, at: datetime) -> None:
        with self._lock:
            row = self._rows.get(session_id)
            if row is not None:
                self._rows[session_id] = replace(row, last_seen_at=at)

    def revoke_sessions(self, *, at: datetime, shown_id: str | None = None) -> list[SessionRow]:
        prefix = _checked_prefix(shown_id) if shown_id is not None else ""
        with self._lock:
            found = [
                r for r in self._rows.values() if r.is_open(at) and r.session_id.startswith(prefix)
            ]
            if shown_id is not None:
                found = _one(found, shown_id)
            for row in found:
                self._rows[row.session_id] = replace(row, revoked_at=at)
            return found

    def list_sessions(self, *, now: datetime, ended: bool = False) -> list[SessionRow]:
        with self._lock:
            rows = [r for r in self._rows.values() if ended or r.is_open(now)]
        return sorted(rows, key=lambda r: (r.created_at, r.session_id), reverse=True)

    def prune_sessions(self, *, before: datetime) -> int:
        with self._lock:
            gone = [
                key
                for key, r in self._rows.items()
                if r.expires_at < before or (r.revoked_at is not None and r.revoked_at < before)
            ]
            for key in gone:
                del self._rows[key]
            return len(gone)


def _row(values: Sequence[object]) -> SessionRow:
    def at(value: object) -> datetime:
        return utc(value if isinstance(value, datetime) else datetime.fromisoformat(str(value)))

    sid, path_hash, who, role, via, created, seen, expires, revoked = values
    return SessionRow(
        session_id=str(sid),
        path_hash=str(path_hash),
        who=str(who),
        role=str(role),
        via=str(via),
        created_at=at(created),
        last_seen_at=at(seen),
        expires_at=at(expires),
        revoked_at=at(revoked) if revoked is not None else None,
    )


class _SQLSessions:
    """The ``sessions`` table of a SQLite or PostgreSQL store, through the store's own
    transactions (``%s`` or ``?`` placeholders, times as ISO text or timestamptz)."""

    def __init__(self, tables: SQLAccess) -> None:
        self._transaction = tables.transaction
        self._table = tables.dialect.table("sessions")
        self._mark = tables.dialect.mark
        self._text_times = tables.dialect.text_times

    def _sql(self, text: str) -> str:
        return text.replace("{t}", self._table).replace("?", self._mark)

    def _at(self, value: datetime | None) -> object:
        if value is None:
            return None
        return utc(value).isoformat() if self._text_times else utc(value)

    def _run(self, text: str, args: Sequence[object] = ()) -> list[tuple[object, ...]]:
        with self._transaction() as db:
            try:
                cursor = db.execute(self._sql(text), tuple(args))
            except sqlite3.OperationalError as exc:
                raise StoreError(f"the store's sessions cannot be used ({exc})") from None
            return list(cursor.fetchall()) if cursor.description is not None else []

    def put_session(self, row: SessionRow) -> None:
        self._run(
            f"INSERT INTO {{t}} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row.session_id,
                row.path_hash,
                row.who,
                row.role,
                row.via,
                self._at(row.created_at),
                self._at(row.last_seen_at),
                self._at(row.expires_at),
                self._at(row.revoked_at),
            ),
        )

    def get_session(self, session_id: str) -> SessionRow | None:
        rows = self._run(f"SELECT {_COLUMNS} FROM {{t}} WHERE session_id = ?", (session_id,))
        return _row(rows[0]) if rows else None

    def touch_session(self, session_id: str, at: datetime) -> None:
        self._run(
            "UPDATE {t} SET last_seen_at = ? WHERE session_id = ?", (self._at(at), session_id)
        )

    def revoke_sessions(self, *, at: datetime, shown_id: str | None = None) -> list[SessionRow]:
        prefix = _checked_prefix(shown_id) if shown_id is not None else ""
        now = self._at(at)
        with self._transaction() as db:
            found = [
                _row(values)
                for values in db.execute(
                    self._sql(
                        f"SELECT {_COLUMNS} FROM {{t}} WHERE revoked_at IS NULL"
                        " AND expires_at > ? AND substr(session_id, 1, ?) = ?"
                    ),
                    (now, len(prefix), prefix),
                ).fetchall()
            ]
            if shown_id is not None:
                found = _one(found, shown_id)
            for row in found:
                db.execute(
                    self._sql("UPDATE {t} SET revoked_at = ? WHERE session_id = ?"),
                    (now, row.session_id),
                )
        return found

    def list_sessions(self, *, now: datetime, ended: bool = False) -> list[SessionRow]:
        where = "" if ended else " WHERE revoked_at IS NULL AND expires_at > ?"
        rows = self._run(
            f"SELECT {_COLUMNS} FROM {{t}}{where} ORDER BY created_at DESC, session_id DESC",
            () if ended else (self._at(now),),
        )
        return [_row(values) for values in rows]

    def prune_sessions(self, *, before: datetime) -> int:
        at = self._at(before)
        with self._transaction() as db:
            cursor = db.execute(
                self._sql("DELETE FROM {t} WHERE expires_at < ? OR revoked_at < ?"), (at, at)
            )
            return int(cursor.rowcount or 0)


_MEMORY: weakref.WeakKeyDictionary[Store, _MemorySessions] = weakref.WeakKeyDictionary()
_MEMORY_LOCK: Final = threading.Lock()


def sessions_of(store: Store) -> SessionStore:
    """The sessions kept in *store* (a MemoryStore's live as long as it does).

    Raises:
        UsageError: a store kind without sessions (another implementation of ``Store``).
    """
    from waitbound.stores.memory import MemoryStore

    if isinstance(store, MemoryStore):
        with _MEMORY_LOCK:
            found = _MEMORY.get(store)
            if found is None:
                found = _MemorySessions()
                _MEMORY[store] = found
            return found
    if isinstance(store, SQLTables):
        return _SQLSessions(store.sql_tables())
    raise UsageError(f"a {type(store).__name__} keeps no sign-in sessions")
