"""Stores written by the schema-2 release (tests/stores/fixtures, made by
make_v2_fixtures.py) upgrade to the current schema (5) with their operations, counters,
inbox, outbox and audit chains intact: through the real ``waitbound db upgrade`` CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import run_cli
from tests.stores import pg
from tests.stores.make_v2_fixtures import facts
from waitbound import SQLiteStore, StoreError, open_store
from waitbound.stores import _sqlite_schema

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXPECTED: dict[str, Any] = json.loads((FIXTURES / "v2-expected.json").read_text())
KEY = bytes.fromhex(EXPECTED["audit_key_hex"])


def _expected() -> dict[str, Any]:
    return {k: v for k, v in EXPECTED.items() if k not in ("audit_key_hex", "pg_schema")}


def _user_version(path: Path) -> int:
    import sqlite3

    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def _copy(tmp_path: Path) -> Path:
    path = tmp_path / "v2.db"
    shutil.copyfile(FIXTURES / "v2.db", path)
    return path


def test_db_upgrade_migrates_a_v2_sqlite_store_keeping_every_fact(tmp_path: Path) -> None:
    """`waitbound db upgrade` on the v2 file: applied 3, 4 (the sessions table) and 5
    (the record as parts, each row read once from its whole-record JSON); every
    operation, counter, phase, inbox and outbox row and every audit
    verdict (with and without the key) as before; `audit verify` says the same."""
    path = _copy(tmp_path)
    assert _user_version(path) == 2
    done = run_cli(tmp_path, "db", "upgrade", "--store", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"store": str(path), "applied": [3, 4, 5], "version": 5}
    assert _user_version(path) == 5
    store = SQLiteStore(path, read_only=True)
    try:
        assert facts(store) == _expected()
    finally:
        store.close()
    again = run_cli(tmp_path, "db", "upgrade", "--store", str(path), "--json")
    assert json.loads(again.stdout)["applied"] == []


def test_the_upgraded_sqlite_rows_hold_the_record_as_parts(tmp_path: Path) -> None:
    """After the upgrade each row holds its parts (the counters in ``counters``, the
    last answer in ``answer``, the head in ``audit`` and in its query columns) and none
    of the columns of schemas 1-4 (``data``, ``poll``, the counter columns)."""
    path = _copy(tmp_path)
    SQLiteStore(path).close()  # opening for writing upgrades it
    import sqlite3

    db = sqlite3.connect(path)
    try:
        columns = {row[1] for row in db.execute("PRAGMA table_info(operations)")}
        rows = db.execute(
            "SELECT operation_id, counters, answer, audit, audit_seq, audit_head FROM operations"
        ).fetchall()
    finally:
        db.close()
    assert not columns & {"data", "poll", "data_version", "status_requests_used", "audit_mac"}
    for op, counters, answer, audit, seq, head in rows:
        want = EXPECTED["operations"][op]
        assert json.loads(counters)["status_requests_used"] == want["status_requests_used"]
        assert json.loads(counters)["rate_limited_used"] == want["rate_limited_used"]
        assert json.loads(answer)["provider_state"] == want["provider_state"]
        assert (json.loads(audit)["audit_seq"], json.loads(audit)["audit_head"]) == (
            want["audit_seq"],
            want["audit_head"],
        )
        assert (seq, head) == (want["audit_seq"], want["audit_head"])


def test_a_v2_file_opened_read_only_is_read_and_left_as_it_is(tmp_path: Path) -> None:
    """Read-only: the v2 file's records read (from their whole-record JSON); nothing is
    migrated."""
    path = _copy(tmp_path)
    before = (FIXTURES / "v2.db").read_bytes()
    store = open_store(path, read_only=True)
    try:
        assert facts(store) == _expected()
    finally:
        store.close()
    assert _user_version(path) == 2
    assert path.read_bytes() == before


def test_the_upgraded_store_goes_on_writing_and_signing(tmp_path: Path) -> None:
    """A signed operation written after the upgrade still verifies with the key (its head
    re-signed as a version-2 MAC), and its cold part is read back exactly."""
    path = _copy(tmp_path)
    store = SQLiteStore(path, audit_key=KEY)
    try:
        record = store.get("op-succeeded")
        assert record is not None
        store.save(record, [])
        fresh = SQLiteStore(path, audit_key=KEY)
        try:
            got = fresh.get("op-succeeded")
            assert got is not None
            assert (got.audit_mac or "").startswith("v2:")
            assert {**got.to_json(), "audit_mac": None} == {
                **record.to_json(),
                "version": record.version + 1,
                "audit_mac": None,
            }
        finally:
            fresh.close()
        from waitbound._engine._audit_check import verify_audit

        assert verify_audit(store, "op-succeeded", key=KEY) == []
    finally:
        store.close()


def test_the_released_v2_scripts_are_unchanged() -> None:
    """Schemas 3 to 5 append migrations; versions 1 and 2 stay as released."""
    assert len(_sqlite_schema.MIGRATIONS) == 5
    assert _sqlite_schema.MIGRATIONS[1].lstrip().startswith("CREATE TABLE webhook_jobs")


# ---------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def v2_schema() -> Any:
    """The v2 PostgreSQL dump loaded into a fresh schema (its name returned)."""
    import psycopg

    dsn = pg.require_postgres()
    name = pg.new_schema_name()
    text = (FIXTURES / "v2-postgres.sql").read_text().replace(EXPECTED["pg_schema"], name)
    script = "\n".join(line for line in text.splitlines() if not line.startswith("\\"))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(script.encode())
            conn.execute(b"SET search_path TO public")
        yield name
    finally:
        pg.drop_schema(name)


def test_postgres_refuses_a_v2_schema_naming_db_upgrade(v2_schema: str) -> None:
    """Opening a v2 schema: one line naming `waitbound db upgrade`; nothing changed."""
    from waitbound.stores.postgres import PostgresStore

    with pytest.raises(StoreError, match="run `waitbound db upgrade --store") as raised:
        PostgresStore(pg.DSN, schema=v2_schema)
    assert "\n" not in str(raised.value)
    assert "schema version 2 is older than this waitbound's 5" in str(raised.value)


def test_db_upgrade_migrates_a_v2_postgres_schema_keeping_every_fact(
    v2_schema: str, tmp_path: Path
) -> None:
    """`waitbound db upgrade --store DSN --schema S` on the v2 dump: applied 3, 4 (the
    sessions table, provider bytes re-encoded) and 5 (the parts); every fact as the v2
    release left it, the audit verdicts included."""
    from waitbound.stores.postgres import PostgresStore

    done = run_cli(tmp_path, "db", "upgrade", "--store", pg.DSN, "--schema", v2_schema, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["applied"] == [3, 4, 5]
    store = PostgresStore(pg.DSN, schema=v2_schema, max_size=2)
    try:
        assert facts(store) == _expected()
    finally:
        store.close()


def test_a_damaged_v2_record_fails_the_upgrade_naming_it_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """One operation's JSON is not a record: the upgrade stops with its id in one line,
    and the file still holds schema 2 exactly (every table's rows as they were)."""
    import sqlite3

    path = _copy(tmp_path)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE operations SET data = '[1]' WHERE operation_id = 'op-waiting'")
    before = list(db.iterdump())
    db.close()
    done = run_cli(tmp_path, "db", "upgrade", "--store", str(path))
    assert done.returncode != 0
    assert "'op-waiting' cannot be upgraded" in done.stderr
    assert "Traceback" not in done.stderr
    assert _user_version(path) == 2
    db = sqlite3.connect(path)
    try:
        assert list(db.iterdump()) == before
    finally:
        db.close()
