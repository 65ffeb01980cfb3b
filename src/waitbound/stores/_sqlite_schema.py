"""The SQLite store's schema: one script per version (``PRAGMA user_version``), and the
tables a file of each version holds. ``stores/sqlite.py`` applies the pending scripts
when it opens a file for writing."""

from __future__ import annotations

from typing import Final

__all__ = ["ADDED_IN_5", "MIGRATIONS", "SCHEMA_VERSION", "TABLES"]

MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: operations and their audit log.
    """
CREATE TABLE IF NOT EXISTS operations (
    operation_id     TEXT PRIMARY KEY,
    version          INTEGER NOT NULL,
    phase            TEXT NOT NULL,
    outcome          TEXT,
    next_poll_at     TEXT NOT NULL,
    lease_owner      TEXT,
    lease_expires_at TEXT,
    created_at       TEXT NOT NULL,
    data             TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS operations_due ON operations (phase, next_poll_at);
CREATE TABLE IF NOT EXISTS audit_events (
    operation_id TEXT NOT NULL REFERENCES operations (operation_id),
    seq          INTEGER NOT NULL,
    at           TEXT NOT NULL,
    kind         TEXT NOT NULL,
    summary      TEXT NOT NULL,
    data         TEXT NOT NULL,
    prev_hash    TEXT NOT NULL,
    hash         TEXT NOT NULL,
    PRIMARY KEY (operation_id, seq)
);
""",
    # 2: the push path: which operation a provider's job is, the inbox, the outbox;
    # audit events in (at, operation, seq) order for GET /events.
    """
CREATE TABLE webhook_jobs (
    provider     TEXT NOT NULL,
    job_id       TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    PRIMARY KEY (provider, job_id)
);
CREATE TABLE inbox (
    provider      TEXT NOT NULL,
    webhook_id    TEXT NOT NULL,
    received_at   TEXT NOT NULL,
    job_id        TEXT,
    event_type    TEXT,
    authoritative INTEGER NOT NULL,
    payload       TEXT NOT NULL,
    operation_id  TEXT,
    applied_at    TEXT,
    PRIMARY KEY (provider, webhook_id)
);
CREATE INDEX inbox_pending ON inbox (received_at, webhook_id)
    WHERE operation_id IS NOT NULL AND applied_at IS NULL;
CREATE INDEX inbox_unmatched ON inbox (provider, job_id) WHERE operation_id IS NULL;
CREATE TABLE outbox (
    delivery_id      TEXT PRIMARY KEY,
    operation_id     TEXT NOT NULL,
    channel          TEXT NOT NULL,
    target           TEXT,
    payload          TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    next_attempt_at  TEXT NOT NULL,
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL,
    delivered_at     TEXT,
    last_error       TEXT,
    replay_of        TEXT,
    lease_owner      TEXT,
    lease_expires_at TEXT
);
CREATE INDEX outbox_due ON outbox (status, next_attempt_at);
CREATE INDEX outbox_operation ON outbox (operation_id, status, next_attempt_at);
CREATE INDEX audit_events_at ON audit_events (at, operation_id, seq);
""",
    # 3: the record split (waitbound.stores._rows): hot fields as typed columns, what an
    # answer changes as the small ``poll`` JSON, the cold rest in ``data`` (rewritten
    # from the whole-record JSON of every row by _rewrite_v3, in the same transaction).
    """
ALTER TABLE operations ADD COLUMN in_flight TEXT;
ALTER TABLE operations ADD COLUMN submit_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN status_requests_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN result_requests_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN cancel_requests_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN confirm_requests_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN transport_failures_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN rate_limited_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN audit_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN audit_head TEXT NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN audit_mac TEXT;
ALTER TABLE operations ADD COLUMN poll TEXT NOT NULL DEFAULT '{}';
ALTER TABLE operations ADD COLUMN data_version INTEGER NOT NULL DEFAULT 0;
""",
    # 4: the inbox's sign-in sessions (waitbound.stores._sessions): only hashes of their
    # secrets are kept.
    """
CREATE TABLE sessions (
    session_id   TEXT PRIMARY KEY,
    path_hash    TEXT NOT NULL,
    who          TEXT NOT NULL,
    role         TEXT NOT NULL,
    via          TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    last_seen_at TEXT NOT NULL,
    expires_at   TEXT NOT NULL,
    revoked_at   TEXT
);
CREATE INDEX sessions_expiry ON sessions (expires_at);
""",
    # 5: the record as parts (waitbound.stores._rows): one JSON column per part. Every
    # row is rewritten from the format the file had before the upgrade by
    # _rewrite_v5, which then drops the schema-3 columns (_rows_v4.V5_DROPPED), in the
    # same transaction.
    # And, additive: the groups of operations waited on together (waitbound.stores._groups),
    # two tables of their own; and the schedule history (waitbound._model._history): one row of
    # duration evidence per finished operation, the newest HISTORY_LIMIT per key.
    """
ALTER TABLE operations ADD COLUMN contract TEXT NOT NULL DEFAULT '{}';
ALTER TABLE operations ADD COLUMN submission TEXT NOT NULL DEFAULT '{}';
ALTER TABLE operations ADD COLUMN counters TEXT NOT NULL DEFAULT '{}';
ALTER TABLE operations ADD COLUMN schedule TEXT NOT NULL DEFAULT '{}';
ALTER TABLE operations ADD COLUMN lease TEXT NOT NULL DEFAULT '{}';
ALTER TABLE operations ADD COLUMN answer TEXT NOT NULL DEFAULT '{}';
ALTER TABLE operations ADD COLUMN ending TEXT NOT NULL DEFAULT '{}';
ALTER TABLE operations ADD COLUMN oversight TEXT NOT NULL DEFAULT '{}';
ALTER TABLE operations ADD COLUMN push TEXT NOT NULL DEFAULT '{}';
ALTER TABLE operations ADD COLUMN audit TEXT NOT NULL DEFAULT '{}';
CREATE TABLE op_groups (
    group_id      TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    deadline_at   TEXT,
    max_requests  INTEGER,
    requests_used INTEGER NOT NULL DEFAULT 0,
    state         TEXT NOT NULL,
    reason        TEXT,
    ended_at      TEXT,
    version       INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE op_group_members (
    group_id     TEXT NOT NULL,
    position     INTEGER NOT NULL,
    operation_id TEXT NOT NULL,
    PRIMARY KEY (group_id, position)
);
CREATE INDEX op_group_members_operation ON op_group_members (operation_id);
CREATE TABLE schedule_history (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    key             TEXT NOT NULL,
    operation_id    TEXT NOT NULL UNIQUE,
    accepted_at     TEXT NOT NULL,
    pending_seen_at TEXT,
    ended_seen_at   TEXT,
    outcome         TEXT NOT NULL,
    finished_at     TEXT NOT NULL
);
CREATE INDEX schedule_history_key ON schedule_history (key, seq);
CREATE TABLE pace_calendar (
    origin  TEXT NOT NULL,
    bucket  BIGINT NOT NULL,
    planned INTEGER NOT NULL,
    PRIMARY KEY (origin, bucket)
);
""",
)
"""The schema, one script per version: version N is ``MIGRATIONS[N - 1]``. A released
script is never edited, only appended to."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version (``PRAGMA user_version``) this waitbound reads and writes."""

TABLES: Final[dict[int, frozenset[str]]] = {
    1: frozenset({"operations", "audit_events"}),
    2: frozenset({"operations", "audit_events", "webhook_jobs", "inbox", "outbox"}),
    3: frozenset({"operations", "audit_events", "webhook_jobs", "inbox", "outbox"}),
    4: frozenset({"operations", "audit_events", "webhook_jobs", "inbox", "outbox", "sessions"}),
    5: frozenset(
        {
            "operations",
            "audit_events",
            "webhook_jobs",
            "inbox",
            "outbox",
            "sessions",
            "op_groups",
            "op_group_members",
            "schedule_history",
            "pace_calendar",
        }
    ),
}
"""The tables a file of each schema version holds, exactly (but see :data:`ADDED_IN_5`)."""

ADDED_IN_5: Final = frozenset({"pace_calendar"})
"""Tables added to schema 5 before it was released: a schema-5 file written by an
earlier build lacks them, and gets them (``CREATE TABLE IF NOT EXISTS``) when it is
opened for writing; read-only, it is read without them."""
