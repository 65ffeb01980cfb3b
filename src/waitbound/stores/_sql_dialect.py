"""What the SQL shared by SQLite and PostgreSQL asks of its backend: its dialect.

The statements and row codecs of the audit log, the inbox, the outbox, the schedule
history, the pacing calendar, the sign-in sessions and the groups are written once
(``_audit_rows``, ``_inbox_rows``, ``_outbox_rows``, ``_history_rows``,
``_calendar_rows``, ``_sessions``, ``_groups``); a backend supplies only what differs:
the parameter mark, where its tables live, how instants and foreign texts are written
and read, the casts a ``json`` column needs, and the collation ids are ordered by.

A store whose tables other store modules use (sessions, groups) offers them through
:class:`~waitbound.stores._protocol.SQLTables` (its ``sql_tables()``), never through its
private members.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from waitbound._base._clock import utc
from waitbound.stores._codec import Execute, from_sqlite, from_text, to_sqlite, to_text

__all__ = ["POSTGRES", "SQLITE", "Dialect", "SQLAccess", "postgres_dialect"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """One SQL backend's differences.

    Attributes:
        name: ``sqlite`` or ``postgresql``.
        mark: the parameter mark (``?`` or ``%s``).
        prefix: what a table's name is prefixed with (``""``, or a quoted schema and a
            dot: ``"waitbound".``).
        read_json: appended to a ``json`` column read as text (``::text``) or ``""``.
        write_json: appended to a parameter written to a ``json`` column (``::json``).
        collate: appended to an id ordered or compared byte-wise (`` COLLATE "C"``).
        write_instant: an aware instant as the backend's column holds it.
        read_instant: a stored instant (never ``None``) as aware UTC.
        write_text: a foreign text (a provider's id, an error) as a ``TEXT`` column
            holds it (:func:`~waitbound.stores._codec.to_sqlite` or ``to_text``).
        read_text: the string *write_text* stored.
        text_times: whether instants are ISO 8601 texts (SQLite) or ``timestamptz``.
    """

    name: Literal["sqlite", "postgresql"]
    mark: str
    prefix: str = ""
    read_json: str = ""
    write_json: str = ""
    collate: str = ""
    write_instant: Callable[[datetime], object]
    read_instant: Callable[[Any], datetime]
    write_text: Callable[[str], object]
    read_text: Callable[[Any], str]
    text_times: bool

    def table(self, name: str) -> str:
        """The table *name* as SQL (schema-qualified where the backend has schemas)."""
        return self.prefix + name

    def marks(self, count: int) -> str:
        """*count* parameter marks, comma-separated."""
        return ", ".join([self.mark] * count)

    @property
    def is_postgres(self) -> bool:
        """Whether this is PostgreSQL's dialect (where a statement's shape differs)."""
        return self.name == "postgresql"

    def label_is(self, column: str) -> str:
        """The condition (two parameters: the prefix's length, the prefix) that the
        ``label`` in the JSON *column* starts with a prefix (a missing label is ``""``)."""
        if self.is_postgres:
            return f"left(coalesce({column}->>'label', ''), %s) = %s"
        return f"substr(coalesce(json_extract({column}, '$.label'), ''), 1, ?) = ?"

    def instant(self, value: datetime | None) -> object:
        """:attr:`write_instant`, ``None`` kept."""
        return None if value is None else self.write_instant(value)

    def maybe_instant(self, value: Any) -> datetime | None:
        """:attr:`read_instant`, ``None`` kept."""
        return None if value is None else self.read_instant(value)

    def text(self, value: str | None) -> object:
        """:attr:`write_text`, ``None`` kept."""
        return None if value is None else self.write_text(value)


def _sqlite_instant(value: datetime) -> str:
    """An instant as UTC ISO 8601 text: such texts sort as their instants do."""
    return utc(value).isoformat()


def _sqlite_moment(text: Any) -> datetime:
    return utc(datetime.fromisoformat(str(text)))


def _pg_instant(value: datetime) -> datetime:
    return value


def _pg_moment(value: Any) -> datetime:
    assert isinstance(value, datetime)  # a timestamptz column
    return utc(value)


SQLITE: Dialect = Dialect(
    name="sqlite",
    mark="?",
    write_instant=_sqlite_instant,
    read_instant=_sqlite_moment,
    write_text=to_sqlite,
    read_text=from_sqlite,
    text_times=True,
)
"""SQLite's dialect (instants as UTC ISO 8601 texts, surrogates kept as BLOBs)."""

POSTGRES: Dialect = Dialect(
    name="postgresql",
    mark="%s",
    read_json="::text",
    write_json="::json",
    collate=' COLLATE "C"',
    write_instant=_pg_instant,
    read_instant=_pg_moment,
    write_text=to_text,
    read_text=from_text,
    text_times=False,
)
"""PostgreSQL's dialect, tables unqualified (see :func:`postgres_dialect`)."""


def postgres_dialect(schema: str) -> Dialect:
    """PostgreSQL's dialect for the tables of *schema* (a checked lowercase identifier,
    so quoting it needs no escaping)."""
    return replace(POSTGRES, prefix=f'"{schema}".')


@dataclass(frozen=True, slots=True)
class SQLAccess:
    """A SQL store's tables as other store modules use them.

    Attributes:
        dialect: the store's dialect (its tables' names included).
        transaction: opens one transaction of the store (under its lock, with its
            error handling and metrics) and yields its connection, whose ``execute``
            runs a statement with its parameters and answers with a DB-API cursor.
    """

    dialect: Dialect
    transaction: Callable[[], AbstractContextManager[Any]]


def run(connection: Any) -> Execute:
    """*connection*'s ``execute`` as the shared statements run them (statements built
    from checked names and fixed text only)."""
    execute: Execute = connection.execute
    return execute
