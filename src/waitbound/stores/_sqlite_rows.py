"""The SQLite store's own statements for its ``operations`` table, and how it writes
and reads instants: UTC ISO 8601 texts (``datetime.isoformat``), which sort as their
instants do, so SQL compares and orders them as text. (The statements SQLite shares
with PostgreSQL are in ``_audit_rows``, ``_inbox_rows``, ``_outbox_rows``,
``_history_rows`` and ``_calendar_rows``.)"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Final

from waitbound._base._clock import utc
from waitbound.stores._rows import PART_COLUMNS, QUERY_COLUMNS, ROW_COLUMNS

__all__ = ["GET", "INSERT", "instant", "label_filter", "moment", "read_instant", "update"]


def instant(value: datetime | None) -> str | None:
    """An instant as UTC ISO 8601 text: such texts sort as their instants do."""
    return utc(value).isoformat() if value is not None else None


def read_instant(value: object) -> datetime | None:
    return utc(datetime.fromisoformat(str(value))) if value is not None else None


def label_filter(label_prefix: str, column: str = "contract") -> tuple[str, tuple[object, ...]]:
    """The ``AND …`` clause (and its arguments) keeping operations whose label starts with
    *label_prefix* (read from the JSON *column*: the ``contract`` part; ``data`` in a
    file older than schema 5); nothing for the common, unfiltered look (it reads no
    record's JSON)."""
    if not label_prefix:
        return "", ()
    return (
        f" AND substr(coalesce(json_extract({column}, '$.label'), ''), 1, ?) = ?",
        (len(label_prefix), label_prefix),
    )


def moment(text: str) -> datetime:
    """A stored instant (see :func:`instant`) as aware UTC."""
    return utc(datetime.fromisoformat(text))


INSERT: Final = (
    f"INSERT INTO operations (operation_id, {', '.join(QUERY_COLUMNS)},"
    f" {', '.join(PART_COLUMNS)}, created_at)"
    " VALUES (" + ", ".join("?" for _ in range(len(QUERY_COLUMNS) + len(PART_COLUMNS) + 2)) + ")"
)
GET: Final = f"SELECT {ROW_COLUMNS} FROM operations WHERE operation_id = ?"


@functools.cache
def update(changed: tuple[int, ...]) -> str:
    """The compare-and-swap ``UPDATE`` of one row: the query columns and the parts at
    the indices *changed* (one statement text per set of parts; SQLite keeps each
    prepared)."""
    sets = [f"{column} = ?" for column in QUERY_COLUMNS]
    sets += [f"{PART_COLUMNS[index]} = ?" for index in changed]
    return f"UPDATE operations SET {', '.join(sets)} WHERE operation_id = ? AND version = ?"
