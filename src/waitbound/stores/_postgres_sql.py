"""The PostgreSQL store's own statements: its ``operations`` table's (reads, claims and
the one-statement record write, which also charges groups, appends the audit events
and notifies), its advisory locks' keys, and how a statement built here runs.
(The statements it shares with SQLite are in ``_audit_rows``, ``_inbox_rows``,
``_outbox_rows``, ``_history_rows`` and ``_calendar_rows``.) ``{schema}`` in a
statement is the store's schema, as an identifier."""

from __future__ import annotations

import hashlib
from typing import Any, Final, LiteralString, cast

import psycopg
from psycopg.rows import TupleRow

from waitbound.stores._codec import Execute
from waitbound.stores._rows import PART_COLUMNS, QUERY_COLUMNS

__all__ = [
    "QUERIES",
    "READ",
    "SET_QUERY",
    "job_lock_key",
    "pace_lock_key",
    "q",
    "run",
    "write_query",
]

SET_QUERY: Final = ", ".join(f"{column} = %s" for column in QUERY_COLUMNS)
"""The ``SET`` of the query columns (every write sets them)."""

READ: Final = ", ".join(("operation_id", "version", *(f"{c}::text" for c in PART_COLUMNS)))
"""The row's columns as :meth:`RecordRows.record` reads them."""


def write_query(changed: tuple[int, ...]) -> str:
    """One record's write as ONE statement (atomic by itself, so a save needs no
    ``BEGIN``/``COMMIT`` round trips): the compare-and-swap update of its row, the
    requests it reserves charged to the member's waiting groups (``_groups.charges``;
    none: nothing is scanned), its audit events appended only when the update took, and
    a ``NOTIFY`` when the write made the operation due sooner than before. Returns one
    row when the update took, none on a conflict. *changed*: the indices of the parts
    written (in ``PART_COLUMNS``)."""
    parts = "".join(f", {PART_COLUMNS[index]} = %s::json" for index in changed)
    return (
        "WITH before AS (SELECT next_poll_at, phase FROM {schema}.operations"
        " WHERE operation_id = %s),"
        " updated AS (UPDATE {schema}.operations SET "
        + SET_QUERY
        + parts
        + " WHERE operation_id = %s AND version = %s RETURNING 1),"
        " charged AS (UPDATE {schema}.op_groups SET requests_used = requests_used + %s,"
        " version = version + 1 WHERE %s::integer > 0 AND state = 'waiting'"
        " AND group_id <> %s AND group_id IN (SELECT group_id FROM {schema}.op_group_members"
        " WHERE operation_id = %s) AND EXISTS (SELECT 1 FROM updated)),"
        " appended AS (INSERT INTO {schema}.audit_events"
        " (operation_id, seq, at, kind, summary, data, prev_hash, hash)"
        " SELECT * FROM unnest(%s::text[], %s::integer[], %s::timestamptz[], %s::text[],"
        " %s::text[], %s::json[], %s::text[], %s::text[])"
        " WHERE EXISTS (SELECT 1 FROM updated))"
        " SELECT CASE WHEN %s::boolean AND (before.phase <> ALL(%s::text[])"
        " OR %s::timestamptz < before.next_poll_at) THEN pg_notify(%s, %s) END"
        " FROM updated, before"
    )


QUERIES: Final = {
    "insert": "INSERT INTO {schema}.operations (operation_id, "
    + ", ".join((*QUERY_COLUMNS, *PART_COLUMNS))
    + ", created_at) VALUES ("
    + ", ".join(["%s"] * (len(QUERY_COLUMNS) + 1) + ["%s::json"] * len(PART_COLUMNS))
    + ", %s) ON CONFLICT (operation_id) DO NOTHING RETURNING 1",
    "get": "SELECT " + READ + " FROM {schema}.operations WHERE operation_id = %s",
    "notify": "SELECT pg_notify(%s, %s)",
    "reserve_due": "SELECT " + READ + " FROM {schema}.operations"
    " WHERE phase = ANY(%s) AND next_poll_at <= %s"
    " AND (lease_expires_at IS NULL OR lease_expires_at <= %s OR lease_owner = ANY(%s))"
    " ORDER BY next_poll_at, operation_id LIMIT %s FOR UPDATE SKIP LOCKED",
    "reserve_due_labelled": "SELECT " + READ + " FROM {schema}.operations"
    " WHERE phase = ANY(%s) AND next_poll_at <= %s"
    " AND (lease_expires_at IS NULL OR lease_expires_at <= %s OR lease_owner = ANY(%s))"
    " AND left(coalesce(contract->>'label', ''), %s) = %s"
    " ORDER BY next_poll_at, operation_id LIMIT %s FOR UPDATE SKIP LOCKED",
    "next_claimable": "SELECT min(greatest(next_poll_at, lease_expires_at))"
    " FROM {schema}.operations WHERE phase = ANY(%s)",
    "next_claimable_labelled": "SELECT min(greatest(next_poll_at, lease_expires_at))"
    " FROM {schema}.operations WHERE phase = ANY(%s)"
    " AND left(coalesce(contract->>'label', ''), %s) = %s",
    "holders": "SELECT DISTINCT lease_owner FROM {schema}.operations"
    " WHERE phase = ANY(%s) AND next_poll_at <= %s AND lease_expires_at > %s"
    " AND lease_owner IS NOT NULL ORDER BY lease_owner LIMIT 100",
    "holders_labelled": "SELECT DISTINCT lease_owner FROM {schema}.operations"
    " WHERE phase = ANY(%s) AND next_poll_at <= %s AND lease_expires_at > %s"
    " AND lease_owner IS NOT NULL AND left(coalesce(contract->>'label', ''), %s) = %s"
    " ORDER BY lease_owner LIMIT 100",
    "recent": "SELECT " + READ + " FROM {schema}.operations"
    " WHERE left(coalesce(contract->>'label', ''), %s) = %s AND (outcome IS NULL OR NOT %s)"
    " ORDER BY created_at DESC, operation_id DESC LIMIT %s",
    # every operation: no row's JSON is read by the server
    "recent_all": "SELECT " + READ + " FROM {schema}.operations"
    " WHERE (outcome IS NULL OR NOT %s) ORDER BY created_at DESC, operation_id DESC LIMIT %s",
    "heads": "SELECT operation_id, audit_seq, audit_head FROM {schema}.operations"
    ' ORDER BY operation_id COLLATE "C"',
    "summary": "SELECT count(*) FILTER (WHERE outcome IS NULL),"
    " min(next_poll_at) FILTER (WHERE phase = ANY(%s)) FROM {schema}.operations",
    # -- the push path (ids are ordered and compared byte-wise, COLLATE "C", as the
    # other stores order them, whatever the database's collation)
    "push_lock": "SELECT pg_advisory_xact_lock(%s)",
    "pace_lock": "SELECT pg_advisory_xact_lock(%s), set_config('synchronous_commit', 'off', true)",
}


def pace_lock_key(schema: str, origin: str) -> int:
    """The advisory lock one origin's pacing takes (a signed 64-bit key)."""
    text = f"waitbound pace\x1f{schema}\x1f{origin}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def job_lock_key(schema: str, provider: str, job_id: str) -> int:
    """The advisory lock a job's registration and its deliveries take (a signed 64-bit
    key), so the look-back never misses a delivery stored at the same moment."""
    text = f"waitbound push\x1f{schema}\x1f{provider}\x1f{job_id}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def run(conn: psycopg.Connection[TupleRow]) -> Execute:
    """*conn*'s ``execute`` as the history's statements (built from checked names and
    fixed text only, see :class:`HistoryRows`) run them."""

    def execute(query: str, params: tuple[Any, ...]) -> psycopg.Cursor[TupleRow]:
        return conn.execute(cast("LiteralString", query), params)  # type: ignore[redundant-cast]

    return execute


def q(text: str) -> LiteralString:
    """A shared statement (built from checked names and fixed text only) as psycopg
    takes a query."""
    return cast("LiteralString", text)  # type: ignore[redundant-cast]
