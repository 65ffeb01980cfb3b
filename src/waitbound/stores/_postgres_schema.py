"""The PostgreSQL store's schema: one SQL script per version, applied by :func:`upgrade`.

``waitbound db upgrade`` applies the pending scripts (and the row rewrites some versions
need: schema 4 re-encodes provider bytes no query could read, schema 5 rewrites every
record as its parts) in one transaction under an advisory lock; opening a store
never migrates it. A schema written by a newer waitbound is refused (``docs/stores.md``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from waitbound._base._errors import SchemaVersionError, StoreError, UsageError
from waitbound.stores._codec import dump_json, load_json, to_text
from waitbound.stores._postgres_conn import connection_info, dsn_secrets, failures, redact_dsn
from waitbound.stores._postgres_sql import SET_QUERY
from waitbound.stores._protocol import decode_record
from waitbound.stores._rows import PART_COLUMNS, RecordRows
from waitbound.stores._rows_v4 import ROW_COLUMNS as V4_ROW_COLUMNS
from waitbound.stores._rows_v4 import V5_DROPPED, record_of_v4_row

__all__ = [
    "DEFAULT_SCHEMA",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "V5_DROPPED",
    "apply_migrations",
    "checked_schema",
    "ensure_calendar",
    "newer_schema",
    "schema_version",
    "upgrade",
    "where",
]


DEFAULT_SCHEMA: Final = "waitbound"


MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: operations and their audit log.
    """
    CREATE TABLE {schema}.operations (
        operation_id     text PRIMARY KEY,
        version          integer NOT NULL,
        phase            text NOT NULL,
        outcome          text,
        next_poll_at     timestamptz NOT NULL,
        lease_owner      text,
        lease_expires_at timestamptz,
        created_at       timestamptz NOT NULL,
        data             json NOT NULL
    );
    CREATE INDEX operations_due ON {schema}.operations (phase, next_poll_at);
    CREATE TABLE {schema}.audit_events (
        operation_id text NOT NULL REFERENCES {schema}.operations (operation_id),
        seq          integer NOT NULL,
        at           timestamptz NOT NULL,
        kind         text NOT NULL,
        summary      text NOT NULL,
        data         json NOT NULL,
        prev_hash    text NOT NULL,
        hash         text NOT NULL,
        PRIMARY KEY (operation_id, seq)
    );
    """,
    # 2: the push path: which operation a provider's job is, the inbox, the outbox;
    # audit events in (at, operation, seq) order for GET /events (ids in byte order).
    """
    CREATE TABLE {schema}.webhook_jobs (
        provider     text NOT NULL,
        job_id       text NOT NULL,
        operation_id text NOT NULL,
        PRIMARY KEY (provider, job_id)
    );
    CREATE TABLE {schema}.inbox (
        provider      text NOT NULL,
        webhook_id    text NOT NULL,
        received_at   timestamptz NOT NULL,
        job_id        text,
        event_type    text,
        authoritative boolean NOT NULL,
        payload       json NOT NULL,
        operation_id  text,
        applied_at    timestamptz,
        PRIMARY KEY (provider, webhook_id)
    );
    CREATE INDEX inbox_pending ON {schema}.inbox (received_at, webhook_id COLLATE "C")
        WHERE operation_id IS NOT NULL AND applied_at IS NULL;
    CREATE INDEX inbox_unmatched ON {schema}.inbox (provider, job_id)
        WHERE operation_id IS NULL;
    CREATE TABLE {schema}.outbox (
        delivery_id      text PRIMARY KEY,
        operation_id     text NOT NULL,
        channel          text NOT NULL,
        target           text,
        payload          json NOT NULL,
        created_at       timestamptz NOT NULL,
        next_attempt_at  timestamptz NOT NULL,
        status           text NOT NULL,
        attempts         integer NOT NULL,
        delivered_at     timestamptz,
        last_error       text,
        replay_of        text,
        lease_owner      text,
        lease_expires_at timestamptz
    );
    CREATE INDEX outbox_due ON {schema}.outbox (status, next_attempt_at);
    CREATE INDEX outbox_operation ON {schema}.outbox (operation_id, status, next_attempt_at);
    CREATE INDEX audit_events_at
        ON {schema}.audit_events (at, operation_id COLLATE "C", seq);
    """,
    # 3: the record split (waitbound.stores._rows): hot fields as typed columns, what an
    # answer changes as the small ``poll`` JSON, the cold rest in ``data`` (every row is
    # rewritten from its whole-record JSON by _rewrite_v3, in the same transaction).
    """
    ALTER TABLE {schema}.operations
        ADD COLUMN in_flight text,
        ADD COLUMN submit_attempts integer NOT NULL DEFAULT 0,
        ADD COLUMN status_requests_used integer NOT NULL DEFAULT 0,
        ADD COLUMN result_requests_used integer NOT NULL DEFAULT 0,
        ADD COLUMN cancel_requests_used integer NOT NULL DEFAULT 0,
        ADD COLUMN confirm_requests_used integer NOT NULL DEFAULT 0,
        ADD COLUMN transport_failures_used integer NOT NULL DEFAULT 0,
        ADD COLUMN rate_limited_used integer NOT NULL DEFAULT 0,
        ADD COLUMN attempt integer NOT NULL DEFAULT 0,
        ADD COLUMN audit_seq integer NOT NULL DEFAULT 0,
        ADD COLUMN audit_head text NOT NULL DEFAULT '',
        ADD COLUMN audit_mac text,
        ADD COLUMN poll json NOT NULL DEFAULT '{{}}',
        ADD COLUMN data_version integer NOT NULL DEFAULT 0;
    """,
    # 4: the inbox's sign-in sessions (waitbound.stores._sessions): only hashes of their
    # secrets are kept. And provider bytes the database cannot hold
    # (waitbound.stores._codec): _rewrite_v4 re-encodes, in the same transaction, the JSON
    # values holding a NUL or surrogate escape (they fail every ``->>`` over their table)
    # and the text values starting with U+0010.
    """
    CREATE TABLE {schema}.sessions (
        session_id   text PRIMARY KEY,
        path_hash    text NOT NULL,
        who          text NOT NULL,
        role         text NOT NULL,
        via          text NOT NULL,
        created_at   timestamptz NOT NULL,
        last_seen_at timestamptz NOT NULL,
        expires_at   timestamptz NOT NULL,
        revoked_at   timestamptz
    );
    CREATE INDEX sessions_expiry ON {schema}.sessions (expires_at);
    """,
    # 5: the record as parts (waitbound.stores._rows): one JSON column per part. Every
    # row is rewritten from the format the schema had before the upgrade by
    # _rewrite_v5, which then drops the columns of schemas 1-4 that schema 5 no longer
    # has (V5_DROPPED), in the same transaction.
    # And, additive: the groups of operations waited on together (waitbound.stores._groups),
    # two tables of their own; and the schedule history (waitbound._model._history): one row of
    # duration evidence per finished operation, the newest HISTORY_LIMIT per key.
    """
    ALTER TABLE {schema}.operations
        ADD COLUMN contract json NOT NULL DEFAULT '{{}}',
        ADD COLUMN submission json NOT NULL DEFAULT '{{}}',
        ADD COLUMN counters json NOT NULL DEFAULT '{{}}',
        ADD COLUMN schedule json NOT NULL DEFAULT '{{}}',
        ADD COLUMN lease json NOT NULL DEFAULT '{{}}',
        ADD COLUMN answer json NOT NULL DEFAULT '{{}}',
        ADD COLUMN ending json NOT NULL DEFAULT '{{}}',
        ADD COLUMN oversight json NOT NULL DEFAULT '{{}}',
        ADD COLUMN push json NOT NULL DEFAULT '{{}}',
        ADD COLUMN audit json NOT NULL DEFAULT '{{}}';
    CREATE TABLE {schema}.op_groups (
        group_id      text PRIMARY KEY,
        kind          text NOT NULL,
        created_at    timestamptz NOT NULL,
        deadline_at   timestamptz,
        max_requests  integer,
        requests_used integer NOT NULL DEFAULT 0,
        state         text NOT NULL,
        reason        text,
        ended_at      timestamptz,
        version       integer NOT NULL DEFAULT 1
    );
    CREATE TABLE {schema}.op_group_members (
        group_id     text NOT NULL,
        position     integer NOT NULL,
        operation_id text NOT NULL,
        PRIMARY KEY (group_id, position)
    );
    CREATE INDEX op_group_members_operation ON {schema}.op_group_members (operation_id);
    CREATE TABLE {schema}.schedule_history (
        seq             bigserial PRIMARY KEY,
        key             text NOT NULL,
        operation_id    text NOT NULL UNIQUE,
        accepted_at     timestamptz NOT NULL,
        pending_seen_at timestamptz,
        ended_seen_at   timestamptz,
        outcome         text NOT NULL,
        finished_at     timestamptz NOT NULL
    );
    CREATE INDEX schedule_history_key ON {schema}.schedule_history (key, seq);
    CREATE TABLE IF NOT EXISTS {schema}.pace_calendar (
        origin  text NOT NULL,
        bucket  bigint NOT NULL,
        planned integer NOT NULL,
        PRIMARY KEY (origin, bucket)
    );
    """,
)
"""The schema, one SQL script per version (``{schema}`` is the quoted schema name).
Version N is ``MIGRATIONS[N - 1]``; a released script is never edited, only appended to."""


SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this waitbound reads and writes."""


_SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def apply_migrations(conn: psycopg.Connection[TupleRow], schema: str, label: str) -> list[int]:
    """Apply the pending migrations inside the caller's transaction."""
    ident = sql.Identifier(schema)
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
    if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {}.schema_migrations"
            " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)"
        ).format(ident)
    )
    rows = conn.execute(sql.SQL("SELECT version FROM {}.schema_migrations").format(ident))
    found = {int(version) for (version,) in rows.fetchall()}
    if max(found, default=0) > SCHEMA_VERSION:
        raise newer_schema(label, schema, max(found))
    applied = []
    was = max(found, default=0)
    for version, script in enumerate(MIGRATIONS, start=1):
        if version in found:
            continue
        conn.execute(sql.SQL(script).format(schema=ident))
        if version == 4:
            _rewrite_v4(conn, schema)
        if version == 5:
            rewrite_v5(conn, schema, label, was=was)
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.schema_migrations (version, applied_at) VALUES (%s, now())"
            ).format(ident),
            (version,),
        )
        applied.append(version)
    return applied


def rewrite_v5(conn: psycopg.Connection[TupleRow], schema: str, label: str, *, was: int) -> None:
    """Schema 5's row rewrite: read every record in the format the schema had (version
    *was*: whole-record JSON up to 2, the split row of 3 and 4), write it as its parts,
    then drop :data:`V5_DROPPED`. (An upgrade from 2 skips schema 3's own split: each
    row is read once and written once.) A fresh schema has no rows: only the drop runs.

    Raises:
        StoreError: a stored record cannot be read (its id named; the caller's
            transaction is rolled back, so nothing is changed).
    """
    ident = sql.Identifier(schema)
    rows = RecordRows(lambda at: at)
    parts = ", ".join(f"{column} = %s::json" for column in PART_COLUMNS)
    update = sql.SQL(
        "UPDATE {schema}.operations SET " + SET_QUERY + ", " + parts + " WHERE operation_id = %s"
    ).format(schema=ident)
    v4_columns = V4_ROW_COLUMNS.replace(", poll,", ", poll::text,").removesuffix(", data")
    columns = "operation_id, data::text" if was <= 2 else f"{v4_columns}, data::text"
    found = conn.execute(
        sql.SQL("SELECT " + columns + " FROM {}.operations").format(ident)
    ).fetchall()
    for values in found:
        operation_id = values[0]
        try:
            record = decode_record(values[1]) if was <= 2 else record_of_v4_row(values)
        except StoreError as exc:
            raise StoreError(
                f"store {where(label, schema)}: operation {operation_id!r} cannot be "
                f"upgraded ({exc}); nothing was changed"
            ) from None
        row = rows.row(record, replaces=0)
        conn.execute(update, (*row.query, *row.texts, operation_id))
    drop = ", ".join(f"DROP COLUMN {column}" for column in V5_DROPPED)
    conn.execute(sql.SQL("ALTER TABLE {}.operations " + drop).format(ident))


_V4_JSON: Final = (
    ("operations", "data"),
    ("operations", "poll"),
    ("audit_events", "data"),
    ("inbox", "payload"),
    ("outbox", "payload"),
)

_V4_TEXT: Final = (
    ("audit_events", "summary"),
    ("inbox", "webhook_id"),
    ("inbox", "job_id"),
    ("inbox", "event_type"),
    ("webhook_jobs", "job_id"),
    ("outbox", "target"),
    ("outbox", "last_error"),
)

_UNHOLDABLE: Final = r"\\u(0000|[dD][89a-fA-F])"
"""A JSON text's NUL or surrogate escape (or an escaped backslash before ``u0000``:
re-encoding such a text changes nothing)."""


def _rewrite_v4(conn: psycopg.Connection[TupleRow], schema: str) -> None:
    """Re-encode the values schema 3 stored as written that schema 4 stores escaped
    (see :mod:`waitbound.stores._codec`): each JSON value holding a NUL or surrogate
    escape, and each provider text starting with U+0010. The values they decode to are
    unchanged, so every audit chain verifies as before."""
    for table, column in _V4_JSON:
        rows = conn.execute(
            sql.SQL("SELECT ctid, {column}::text FROM {table} WHERE {column}::text ~ %s").format(
                column=sql.Identifier(column), table=sql.Identifier(schema, table)
            ),
            (_UNHOLDABLE,),
        ).fetchall()
        update = sql.SQL("UPDATE {table} SET {column} = %s::json WHERE ctid = %s").format(
            column=sql.Identifier(column), table=sql.Identifier(schema, table)
        )
        for ctid, text in rows:
            encoded = dump_json(load_json(text))
            if encoded != text:
                conn.execute(update, (encoded, ctid))
    for table, column in _V4_TEXT:
        rows = conn.execute(
            sql.SQL("SELECT ctid, {column} FROM {table} WHERE left({column}, 1) = %s").format(
                column=sql.Identifier(column), table=sql.Identifier(schema, table)
            ),
            ("\x10",),
        ).fetchall()
        update = sql.SQL("UPDATE {table} SET {column} = %s WHERE ctid = %s").format(
            column=sql.Identifier(column), table=sql.Identifier(schema, table)
        )
        for ctid, text in rows:
            conn.execute(update, (to_text(text), ctid))


def schema_version(conn: psycopg.Connection[TupleRow], schema: str) -> int:
    """The newest applied migration (0 when the schema or its migrations table is missing)."""
    table = sql.Identifier(schema, "schema_migrations").as_string(conn)
    (exists,) = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone() or (False,)
    if not exists:
        return 0
    row = conn.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(
            sql.Identifier(schema, "schema_migrations")
        )
    ).fetchone()
    return int(row[0]) if row else 0


def checked_schema(schema: str) -> str:
    if not _SCHEMA_NAME.fullmatch(schema):
        raise UsageError(
            f"schema name {schema!r} is not a lowercase identifier (a-z, 0-9, _; at most 63)"
        )
    return schema


def ensure_calendar(conn: psycopg.Connection[TupleRow], schema: str) -> None:
    """Create the pacing calendar of a schema-5 store made before it (``CREATE TABLE IF
    NOT EXISTS``, inside the caller's transaction, under the schema's upgrade lock so
    two processes doing it at once do not collide in the catalogue)."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {}.pace_calendar (origin text NOT NULL,"
            " bucket bigint NOT NULL, planned integer NOT NULL, PRIMARY KEY (origin, bucket))"
        ).format(sql.Identifier(schema))
    )


def _lock_key(schema: str) -> int:
    """The advisory lock that serializes upgrades of one schema (a signed 64-bit key)."""
    digest = hashlib.sha256(f"waitbound db upgrade {schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def where(label: str, schema: str) -> str:
    return label if schema == DEFAULT_SCHEMA else f"{label} (schema {schema})"


def newer_schema(label: str, schema: str, found: int) -> SchemaVersionError:
    return SchemaVersionError(
        f"store {where(label, schema)} has schema version {found}, newer than this "
        f"waitbound understands ({SCHEMA_VERSION}); upgrade waitbound to use it"
    )


def upgrade(
    dsn: str, *, schema: str = DEFAULT_SCHEMA, connect_timeout_s: float = 10.0
) -> list[int]:
    """Bring the store's schema to :data:`SCHEMA_VERSION`; return the versions applied.

    Creates the schema when it is missing. Every pending migration and its row in
    ``schema_migrations`` is applied in ONE transaction under a transaction-scoped
    advisory lock (``pg_advisory_xact_lock``), so a second upgrade running at the same
    time waits for the first, then finds nothing to do and returns ``[]``.

    Raises:
        StoreError: the server cannot be reached or refused a statement (nothing is
            changed: the transaction is rolled back).
        SchemaVersionError: the schema was written by a newer waitbound.
        UsageError: an invalid schema name.
    """
    schema = checked_schema(schema)
    label, secrets = redact_dsn(dsn), dsn_secrets(dsn)
    conninfo = connection_info(dsn, connect_timeout_s, label, secrets)
    with failures(label, secrets), psycopg.connect(conninfo) as conn:
        return apply_migrations(conn, schema, label)
