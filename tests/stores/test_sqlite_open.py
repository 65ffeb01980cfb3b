"""Opening a SQLite store for what the caller does: create or not, read-only, foreign files."""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

import waitbound
from tests.stores.test_store_contract import T0, events, make_record
from waitbound import (
    MemoryStore,
    OutcomeKind,
    Phase,
    Record,
    SQLiteStore,
    StoreError,
    UsageError,
    open_store,
)
from waitbound._model._push import InboundDelivery
from waitbound._model._record import Push
from waitbound.stores import (
    NotAStoreError,
    SchemaUpgrade,
    StoreNotFoundError,
    _sqlite_open,
    _sqlite_schema,
    sqlite,
    upgrade_store,
)
from waitbound.stores._audit_rows import audit_rows
from waitbound.stores._protocol import advance, encode_record


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stored(path: Path) -> None:
    store = SQLiteStore(path)
    try:
        store.create(make_record(), events("created"))
    finally:
        store.close()


def _raw(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path)
    try:
        for statement in statements:
            db.execute(statement)
        db.commit()
    finally:
        db.close()


def _tables(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        return [name for (name,) in rows]
    finally:
        db.close()


@pytest.mark.parametrize(
    "options", [{"create": False}, {"read_only": True}], ids=["no-create", "read-only"]
)
def test_a_missing_store_is_not_created_when_create_is_false(
    tmp_path: Path, options: dict[str, bool]
) -> None:
    """create=False (or read-only): a missing file is refused; no file, no folder appears."""
    path = tmp_path / "typo" / "x.db"
    with pytest.raises(StoreNotFoundError, match="does not exist") as caught:
        open_store(
            path, create=options.get("create", True), read_only=options.get("read_only", False)
        )
    assert isinstance(caught.value, UsageError)
    assert "x.db" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_create_is_the_default_for_the_python_api(tmp_path: Path) -> None:
    """open_store(path) still creates the file and its folders, as before."""
    store = open_store(tmp_path / "new" / "deeper" / "s.db")
    store.close()
    assert (tmp_path / "new" / "deeper" / "s.db").exists()


def test_read_only_store_reads_and_refuses_writes_leaving_the_file_unchanged(
    tmp_path: Path,
) -> None:
    """A read-only store reads records and audit; a write is a StoreError; no byte changes."""
    path = tmp_path / "s.db"
    _stored(path)
    before = _digest(path)
    store = open_store(path, read_only=True)
    try:
        record = store.get("op-1")
        assert record is not None
        assert [e.event.kind for e in store.audit("op-1")] == ["created"]
        with pytest.raises(StoreError, match="readonly"):
            store.save(record.evolve(schedule=record.schedule.evolve(attempt=1)), [])
    finally:
        store.close()
    assert _digest(path) == before
    # A reader of a WAL file may leave SQLite's (empty) -wal and -shm beside it.
    assert {p.name for p in tmp_path.iterdir()} <= {"s.db", "s.db-wal", "s.db-shm"}
    wal = tmp_path / "s.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0


def test_read_only_opens_immutable_when_the_file_or_folder_is_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not writable (a read-only copy kept for audit): mode=ro&immutable=1, and it reads."""
    path = tmp_path / "copy.db"
    _stored(path)
    assert _sqlite_open.uri(path, create=False, read_only=True).endswith("?mode=ro")
    monkeypatch.setattr("os.access", lambda *args, **kwargs: False)
    uri = _sqlite_open.uri(path, create=False, read_only=True)
    assert uri.startswith("file:///")
    assert uri.endswith("?mode=ro&immutable=1")
    store = open_store(path, read_only=True)
    try:
        assert store.get("op-1") is not None
    finally:
        store.close()


def test_a_path_with_uri_characters_opens_as_that_file(tmp_path: Path) -> None:
    """'?' and '#' in a file name are part of the name, not URI parameters."""
    path = tmp_path / "odd ?mode=memory#x.db"
    _stored(path)
    store = open_store(path, read_only=True)
    try:
        assert store.get("op-1") is not None
    finally:
        store.close()


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_a_foreign_sqlite_database_is_refused_and_gets_no_tables(
    tmp_path: Path, read_only: bool
) -> None:
    """Another program's database: NotAStoreError naming a table; nothing in it changes."""
    path = tmp_path / "app.db"
    _raw(path, "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    before = _digest(path)
    with pytest.raises(NotAStoreError, match="not a waitbound store") as caught:
        open_store(path, read_only=read_only)
    assert "'customers'" in str(caught.value)
    assert isinstance(caught.value, StoreError | UsageError)
    assert _tables(path) == ["customers"]
    assert _digest(path) == before


def test_waitbound_tables_without_the_schema_version_are_refused(tmp_path: Path) -> None:
    """waitbound's tables but user_version 0 (its metadata missing): refused, unchanged."""
    path = tmp_path / "s.db"
    _stored(path)
    _raw(path, "PRAGMA user_version = 0")
    before = _digest(path)
    with pytest.raises(NotAStoreError, match="schema version is missing"):
        open_store(path)
    assert _digest(path) == before


def test_a_waitbound_store_with_an_extra_table_is_refused(tmp_path: Path) -> None:
    """A store file with a table that is not waitbound's is refused, naming that table."""
    path = tmp_path / "s.db"
    _stored(path)
    _raw(path, "CREATE TABLE notes (text TEXT)")
    with pytest.raises(NotAStoreError, match="'notes'"):
        open_store(path)


def test_a_schema_version_without_the_tables_is_refused(tmp_path: Path) -> None:
    """user_version says waitbound, but a table is missing: refused, no table added."""
    path = tmp_path / "s.db"
    _raw(path, "PRAGMA user_version = 1", "CREATE TABLE operations (x TEXT)")
    with pytest.raises(NotAStoreError, match="'audit_events' is missing"):
        open_store(path)
    assert _tables(path) == ["operations"]


def test_an_empty_file_is_made_a_store_only_when_writing(tmp_path: Path) -> None:
    """A zero-byte file: read-only refuses it as empty; a writer makes it a store."""
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    with pytest.raises(NotAStoreError, match="empty"):
        open_store(path, read_only=True)
    open_store(path).close()
    assert _tables(path) == [
        "audit_events",
        "inbox",
        "op_group_members",
        "op_groups",
        "operations",
        "outbox",
        "pace_calendar",
        "schedule_history",
        "sessions",
        "sqlite_sequence",
        "webhook_jobs",
    ]


def test_a_full_store_fails_in_one_line_and_keeps_nothing_half_written(tmp_path: Path) -> None:
    """The file cannot grow (disk full): StoreError saying so; the failed create left no trace."""
    store = SQLiteStore(tmp_path / "s.db")
    try:
        (pages,) = store._db.execute("PRAGMA page_count").fetchone()
        store._db.execute(f"PRAGMA max_page_count = {pages}")
        created = 0
        failure: StoreError | None = None
        for n in range(1000):
            try:
                store.create(make_record(f"op-{n}"), events("created", "reserved"))
            except StoreError as exc:
                failure = exc
                break
            created += 1
        assert failure is not None
        message = str(failure)
        assert "full" in message
        assert "\n" not in message
        assert store.get(f"op-{created}") is None
        assert store.audit(f"op-{created}") == []
        assert store.get("op-0") is not None
    finally:
        store.close()


def test_memory_store_ignores_create_and_read_only(tmp_path: Path) -> None:
    """memory: ignores create/read_only (it holds nothing to protect) and writes no file."""
    assert isinstance(open_store("memory:", create=False, read_only=True), MemoryStore)
    assert list(tmp_path.iterdir()) == []


def test_a_transaction_finalised_after_close_says_nothing(tmp_path: Path) -> None:
    """Ctrl-C can leave a transaction's context manager suspended until after the store
    is closed; finalising it then must not try to roll back on the closed connection
    (which printed a traceback on interrupt)."""
    store = SQLiteStore(tmp_path / "s.db")
    transaction = store._transaction()
    transaction.__enter__()
    store.close()
    interrupt = KeyboardInterrupt()
    assert transaction.__exit__(KeyboardInterrupt, interrupt, None) is False  # not a StoreError


# ---------------------------------------------------------------------------- migrations

V1_SCHEMA = """
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
"""
"""The schema version 1 (every release before the push path), verbatim: a frozen copy."""


def test_the_released_version_1_script_is_unchanged() -> None:
    """A released migration is never edited: files at version 1 exist."""
    assert _sqlite_schema.MIGRATIONS[0] == V1_SCHEMA


def _version_1_file(path: Path) -> Record:
    """A version-1 store as the previous release wrote it, holding one record (returned)."""
    record = make_record(job_id="job-42", push=Push(webhook="reports"))
    stored, sealed = advance(record, events("created", "reserved"))
    db = sqlite3.connect(path)
    try:
        db.executescript(V1_SCHEMA)
        with db:
            db.execute(
                "INSERT INTO operations (operation_id, version, phase, outcome, next_poll_at,"
                " lease_owner, lease_expires_at, created_at, data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    stored.operation_id,
                    stored.version,
                    stored.phase.value,
                    None,
                    stored.next_poll_at.isoformat(),
                    None,
                    None,
                    stored.created_at.isoformat(),
                    encode_record(stored),
                ),
            )
            db.executemany(
                "INSERT INTO audit_events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                audit_rows(sealed, datetime.isoformat),
            )
        db.execute("PRAGMA user_version = 1")
    finally:
        db.close()
    return stored


def _user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        (version,) = db.execute("PRAGMA user_version").fetchone()
        return int(version)
    finally:
        db.close()


def test_a_version_1_file_is_upgraded_when_opened(tmp_path: Path) -> None:
    """Opening a version-1 file adds the push path's tables (version 2) and splits the
    record (version 3) in one transaction; its record and audit log read as before;
    upgrade() reports [2, 3, 4, 5], once."""
    path = tmp_path / "v1.db"
    stored = _version_1_file(path)
    assert _tables(path) == ["audit_events", "operations"]
    store = SQLiteStore(path)
    try:
        assert _user_version(path) == sqlite.SCHEMA_VERSION == 5
        assert _tables(path) == [
            "audit_events",
            "inbox",
            "op_group_members",
            "op_groups",
            "operations",
            "outbox",
            "pace_calendar",
            "schedule_history",
            "sessions",
            "sqlite_sequence",
            "webhook_jobs",
        ]
        got = store.get("op-1")
        assert got is not None
        assert got.to_json() == stored.to_json()
        waitbound.verify_chain(store.audit("op-1"), head=(got.audit_seq, got.audit_head))
        assert [e.event.kind for e in store.audit_after(None)] == ["created", "reserved"]
        assert store.upgrade() == [2, 3, 4, 5]
        assert store.upgrade() == []
        assert store._migrate() == []  # a second opener finds nothing left to apply
        matched = store.put_delivery(
            InboundDelivery(
                provider="reports", webhook_id="wh-1", received_at=T0, job_id="x", payload={}
            )
        )
        assert matched is not None
        assert matched.operation_id is None
        store.save(got, [])  # the migrated record registers its job on its next write
        assert store.put_delivery(replace(matched, webhook_id="wh-2", job_id="job-42")) == (
            replace(matched, webhook_id="wh-2", job_id="job-42", operation_id="op-1")
        )
    finally:
        store.close()
    reopened = SQLiteStore(path)
    try:
        assert reopened.upgrade() == []
    finally:
        reopened.close()


def test_upgrade_store_and_db_upgrade_report_the_migration_of_a_version_1_file(
    tmp_path: Path,
) -> None:
    """upgrade_store on a version-1 file: applied (2, 3, 4, 5), version 5; then nothing."""
    path = tmp_path / "v1.db"
    _version_1_file(path)
    assert upgrade_store(path, create=False) == SchemaUpgrade(
        store=str(path), applied=(2, 3, 4, 5), version=5
    )
    assert upgrade_store(path, create=False).applied == ()


def test_a_version_1_file_opened_read_only_is_read_and_left_as_it_is(tmp_path: Path) -> None:
    """Read-only: the record reads; nothing is migrated, no byte changes."""
    path = tmp_path / "v1.db"
    stored = _version_1_file(path)
    before = _digest(path)
    store = open_store(path, read_only=True)
    try:
        got = store.get("op-1")
        assert got is not None
        assert got.to_json() == stored.to_json()
        assert isinstance(store, SQLiteStore)
        assert store.upgrade() == []
    finally:
        store.close()
    assert _user_version(path) == 1
    assert _digest(path) == before


def test_a_version_1_file_with_a_push_table_is_refused(tmp_path: Path) -> None:
    """Version 1 holds exactly operations and audit_events: an inbox there is foreign."""
    path = tmp_path / "v1.db"
    _version_1_file(path)
    _raw(path, "CREATE TABLE inbox (x TEXT)")
    with pytest.raises(NotAStoreError, match="'inbox'"):
        open_store(path)
    assert _user_version(path) == 1


def test_a_version_2_file_missing_a_push_table_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _stored(path)
    _raw(path, "DROP TABLE outbox")
    with pytest.raises(NotAStoreError, match="'outbox' is missing"):
        open_store(path)
    assert _tables(path) == [
        "audit_events",
        "inbox",
        "op_group_members",
        "op_groups",
        "operations",
        "pace_calendar",
        "schedule_history",
        "sessions",
        "sqlite_sequence",
        "webhook_jobs",
    ]


def test_a_failing_outbox_write_rolls_back_the_outcome(tmp_path: Path) -> None:
    """The outbox entry is written in the record's transaction: when it fails, the
    outcome, its audit events and the look-back are not written either."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        created = store.create(
            make_record(
                job_id="job-42", push=Push(webhook="reports", notify_url="https://d.example/h")
            ),
            events("created"),
        )
        # A trigger that fails at run time, as a full disk would, on the outbox only.
        store._db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON outbox BEGIN SELECT json('not json'); END"
        )
        final = created.evolve(
            ending=created.ending.evolve(
                phase=Phase.DONE, outcome=OutcomeKind.SUCCEEDED, finished_at=T0
            )
        )
        with pytest.raises(StoreError, match="malformed JSON"):
            store.save(final, events("finished", start_s=1))
        got = store.get("op-1")
        assert got is not None
        assert got.to_json() == created.to_json()
        assert [e.event.kind for e in store.audit("op-1")] == ["created"]
        assert store.outbox() == []
    finally:
        store.close()
