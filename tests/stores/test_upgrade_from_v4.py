"""Stores written by the schema-4 release (tests/stores/fixtures, made by
make_v4_fixtures.py) upgrade to schema 5 (the record as parts) with every operation
(each field of its record), counter, inbox, outbox and session row and every audit
verdict intact: through the real ``waitbound db upgrade`` CLI."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import run_cli
from tests.stores import pg
from tests.stores.make_v4_fixtures import facts
from waitbound import SQLiteStore, StoreError, open_store
from waitbound._engine._audit_check import verify_audit

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXPECTED: dict[str, Any] = json.loads((FIXTURES / "v4-expected.json").read_text())
ADDED_FIELDS: dict[str, Any] = {
    "pending_seen_at": None,
    "ended_seen_at": None,
    "cancel_accepted_at": None,
    "cancel_refused_at": None,
    "cancel_refused": None,
    "estimated_end_at": None,
    "estimate_from": None,
}
"""Record fields added after the schema-4 release (the learned schedule's evidence, when
a cancel was accepted or refused): an upgraded record has them empty; every field the release
wrote is as it was."""
for _operation in EXPECTED["operations"].values():
    _operation["record"] = {**_operation["record"], **ADDED_FIELDS}
KEY = bytes.fromhex(EXPECTED["audit_key_hex"])


def _expected() -> dict[str, Any]:
    return {k: v for k, v in EXPECTED.items() if k not in ("audit_key_hex", "pg_schema")}


def _found(store: Any) -> dict[str, Any]:
    """The facts of *store*, through JSON as the expected ones were written."""
    found: dict[str, Any] = json.loads(json.dumps(facts(store), sort_keys=True))
    return found


def _user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def _copy(tmp_path: Path) -> Path:
    path = tmp_path / "v4.db"
    shutil.copyfile(FIXTURES / "v4.db", path)
    return path


def test_the_fixture_holds_what_the_tests_need() -> None:
    """The v4 fixture covers every phase, a decision, grants, inbox, outbox, sessions,
    and audit verdicts that differ with and without the key (so keeping them is a
    real check)."""
    records = [op["record"] for op in EXPECTED["operations"].values()]
    assert {r["phase"] for r in records} == {
        "submitting",
        "waiting",
        "fetching_result",
        "done",
    }
    assert any(r["decisions"] for r in records)
    assert any(r["grants"]["requests"] for r in records)
    assert len(EXPECTED["inbox"]) == 2
    assert len(EXPECTED["outbox"]) == 2
    assert len(EXPECTED["sessions"]) == 2
    assert EXPECTED["verify_with_key"] != EXPECTED["verify_without_key"]


def test_db_upgrade_migrates_a_v4_sqlite_store_keeping_every_fact(tmp_path: Path) -> None:
    """`waitbound db upgrade` on the v4 file applies 5; every record (every field, as
    ``to_json`` gave it), audit event, head, inbox, outbox and session row and every
    audit verdict (with and without the key) is as the v4 release left it."""
    path = _copy(tmp_path)
    assert _user_version(path) == 4
    done = run_cli(tmp_path, "db", "upgrade", "--store", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"store": str(path), "applied": [5], "version": 5}
    assert _user_version(path) == 5
    store = SQLiteStore(path, read_only=True)
    try:
        assert _found(store) == _expected()
    finally:
        store.close()
    again = run_cli(tmp_path, "db", "upgrade", "--store", str(path), "--json")
    assert json.loads(again.stdout)["applied"] == []


def test_a_v4_file_opened_read_only_is_read_and_left_as_it_is(tmp_path: Path) -> None:
    """Read-only: the v4 file's records read from its split rows; nothing is migrated."""
    path = _copy(tmp_path)
    before = (FIXTURES / "v4.db").read_bytes()
    store = open_store(path, read_only=True)
    try:
        assert _found(store) == _expected()
    finally:
        store.close()
    assert _user_version(path) == 4
    assert path.read_bytes() == before


def test_the_upgraded_v4_store_goes_on_writing_and_signing(tmp_path: Path) -> None:
    """A signed operation saved after the upgrade still verifies with the key, and its
    record reads back field for field (as parts written by the new code)."""
    path = _copy(tmp_path)
    store = SQLiteStore(path, audit_key=KEY)
    try:
        record = store.get("op-decided")
        assert record is not None
        store.save(record.evolve(schedule=record.schedule.evolve(attempt=record.attempt + 1)), [])
        fresh = SQLiteStore(path, audit_key=KEY)
        try:
            got = fresh.get("op-decided")
            assert got is not None
            want = EXPECTED["operations"]["op-decided"]["record"]
            assert json.loads(json.dumps({**got.to_json(), "audit_mac": None})) == {
                **want,
                "attempt": want["attempt"] + 1,
                "version": want["version"] + 1,
                "audit_mac": None,
            }
        finally:
            fresh.close()
        assert verify_audit(store, "op-decided", key=KEY) == []
    finally:
        store.close()


def test_a_damaged_v4_record_fails_the_upgrade_naming_it_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """One operation's cold JSON is not a record: the upgrade stops with its id in one
    line, and the file still holds schema 4 exactly (every table's rows as they were)."""
    path = _copy(tmp_path)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE operations SET data = '[1]' WHERE operation_id = 'op-fetching'")
    before = list(db.iterdump())
    db.close()
    done = run_cli(tmp_path, "db", "upgrade", "--store", str(path))
    assert done.returncode != 0
    assert "'op-fetching' cannot be upgraded" in done.stderr
    assert "Traceback" not in done.stderr
    assert _user_version(path) == 4
    db = sqlite3.connect(path)
    try:
        assert list(db.iterdump()) == before
    finally:
        db.close()


# ---------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def v4_schema() -> Any:
    """The v4 PostgreSQL dump loaded into a fresh schema (its name returned)."""
    import psycopg

    dsn = pg.require_postgres()
    name = pg.new_schema_name()
    text = (FIXTURES / "v4-postgres.sql").read_text().replace(EXPECTED["pg_schema"], name)
    script = "\n".join(line for line in text.splitlines() if not line.startswith("\\"))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(script.encode())
            conn.execute(b"SET search_path TO public")
        yield name
    finally:
        pg.drop_schema(name)


def test_postgres_refuses_a_v4_schema_naming_db_upgrade(v4_schema: str) -> None:
    """Opening a v4 schema: one line naming `waitbound db upgrade`; nothing changed."""
    from waitbound.stores.postgres import PostgresStore

    with pytest.raises(StoreError, match="run `waitbound db upgrade --store") as raised:
        PostgresStore(pg.DSN, schema=v4_schema)
    assert "\n" not in str(raised.value)
    assert "schema version 4 is older than this waitbound's 5" in str(raised.value)


def test_db_upgrade_migrates_a_v4_postgres_schema_keeping_every_fact(
    v4_schema: str, tmp_path: Path
) -> None:
    """`waitbound db upgrade --store DSN --schema S` on the v4 dump applies 5; every fact
    as the v4 release left it, the audit verdicts included; the schema-4 columns are
    gone."""
    import psycopg

    from waitbound.stores.postgres import PostgresStore

    done = run_cli(tmp_path, "db", "upgrade", "--store", pg.DSN, "--schema", v4_schema, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["applied"] == [5]
    store = PostgresStore(pg.DSN, schema=v4_schema, max_size=2)
    try:
        assert _found(store) == _expected()
    finally:
        store.close()
    with psycopg.connect(pg.DSN) as conn:
        columns = {
            name
            for (name,) in conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = 'operations'",
                (v4_schema,),
            ).fetchall()
        }
    assert not columns & {"data", "poll", "data_version", "status_requests_used"}
    assert {"contract", "counters", "schedule", "lease", "answer", "audit"} <= columns


def test_a_damaged_v4_postgres_record_fails_the_upgrade_and_changes_nothing(
    v4_schema: str, tmp_path: Path
) -> None:
    """One operation's cold JSON is not a record: the upgrade names it and leaves the
    schema at version 4 (the transaction rolled back)."""
    import psycopg

    with psycopg.connect(pg.DSN, autocommit=True) as conn:
        conn.execute(
            f"UPDATE {v4_schema}.operations SET data = '[1]' WHERE operation_id = 'op-fetching'"
        )
    done = run_cli(tmp_path, "db", "upgrade", "--store", pg.DSN, "--schema", v4_schema)
    assert done.returncode != 0
    assert "'op-fetching' cannot be upgraded" in done.stderr
    assert "Traceback" not in done.stderr
    with psycopg.connect(pg.DSN) as conn:
        row = conn.execute(f"SELECT max(version) FROM {v4_schema}.schema_migrations").fetchone()
    assert row is not None
    assert row[0] == 4
