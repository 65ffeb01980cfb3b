"""What only the PostgreSQL store adds: versioned migrations, refusals on open, DSN
redaction, SKIP LOCKED claims, ``open_store`` and ``waitbound db upgrade``.

Every test uses its own schema on ``$WAITBOUND_TEST_PG_DSN`` (see ``tests/stores/pg.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import waitbound
import waitbound.stores
from tests.cli.helpers import closed_port, run_cli
from tests.stores import pg
from tests.stores.test_store_contract import NOW, T0, events, make_record
from waitbound import (
    MemoryStore,
    OutcomeKind,
    Phase,
    SchemaVersionError,
    SQLiteStore,
    StoreError,
    UsageError,
)
from waitbound._model._push import InboundDelivery
from waitbound._model._record import Push
from waitbound.stores import SchemaUpgrade, is_postgres_dsn, open_store, sqlite, upgrade_store
from waitbound.stores._audit_rows import audit_rows
from waitbound.stores._protocol import advance, encode_record

try:
    import psycopg

    from waitbound.stores import _postgres_schema as postgres_schema
    from waitbound.stores import _postgres_sql, postgres
except ImportError:  # pragma: no cover - the test extra installs psycopg
    if os.environ.get("CI"):
        raise
    pytest.skip("psycopg is not installed (pip install -e '.[test]')", allow_module_level=True)

SECRET = "s3cret-Pa55"
LATEST = postgres.SCHEMA_VERSION
ALL = list(range(1, LATEST + 1))
SQLITE_LATEST = sqlite.SCHEMA_VERSION


@pytest.fixture
def dsn() -> str:
    """The test server (skipped, or failed under $CI, when it cannot be reached)."""
    return pg.require_postgres()


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    """A fresh schema, upgraded."""
    with pg.fresh_schema() as name:
        yield name


@pytest.fixture
def bare_schema(dsn: str) -> Iterator[str]:
    """A fresh schema name that nothing has created yet (dropped afterwards if made)."""
    with pg.fresh_schema(upgraded=False) as name:
        yield name


def _versions(schema: str) -> list[int]:
    rows = pg.execute(f'SELECT version FROM "{schema}".schema_migrations ORDER BY version')
    return [int(str(version)) for (version,) in rows]


def _tables(schema: str) -> list[str]:
    rows = pg.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (schema,)
    )
    return [str(name) for (name,) in rows]


def _one_line(error: BaseException) -> str:
    message = str(error)
    assert "\n" not in message
    assert message.strip() == message
    return message


# ---------------------------------------------------------------------------- open


def test_opening_an_unmigrated_schema_is_refused_naming_db_upgrade(
    dsn: str, bare_schema: str
) -> None:
    """The constructor never migrates: a missing schema is a StoreError saying what to run."""
    with pytest.raises(StoreError) as caught:
        postgres.PostgresStore(dsn, schema=bare_schema)
    assert not isinstance(caught.value, SchemaVersionError)
    message = _one_line(caught.value)
    assert f"schema version 0 is older than this waitbound's {LATEST}" in message
    assert f"waitbound db upgrade --store {dsn} --schema {bare_schema}" in message
    assert not pg.schema_exists(bare_schema)


def test_opening_an_older_schema_is_refused_until_upgraded(
    schema: str, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release with one more migration refuses the current schema; upgrade applies it."""
    extra = "CREATE TABLE {schema}.extra (id integer PRIMARY KEY)"
    monkeypatch.setattr(postgres_schema, "MIGRATIONS", (*postgres.MIGRATIONS, extra))
    monkeypatch.setattr(postgres_schema, "SCHEMA_VERSION", LATEST + 1)
    monkeypatch.setattr(postgres, "SCHEMA_VERSION", LATEST + 1)
    with pytest.raises(
        StoreError, match=rf"schema version {LATEST} is older than this waitbound's {LATEST + 1}"
    ):
        postgres.PostgresStore(dsn, schema=schema)
    assert _versions(schema) == ALL
    assert postgres.upgrade(dsn, schema=schema) == [LATEST + 1]
    assert _versions(schema) == [*ALL, LATEST + 1]
    assert "extra" in _tables(schema)
    store = postgres.PostgresStore(dsn, schema=schema)
    store.close()


def test_a_newer_schema_is_refused_with_upgrade_waitbound_advice(schema: str, dsn: str) -> None:
    """A schema_migrations row above ours: SchemaVersionError on open and on upgrade."""
    pg.execute(f'INSERT INTO "{schema}".schema_migrations VALUES (99, now())')
    with pytest.raises(SchemaVersionError, match="upgrade waitbound") as caught:
        postgres.PostgresStore(dsn, schema=schema)
    assert "99" in _one_line(caught.value)
    with pytest.raises(SchemaVersionError, match="upgrade waitbound"):
        postgres.upgrade(dsn, schema=schema)
    assert _versions(schema) == [*ALL, 99]


def test_the_default_schema_is_named_waitbound() -> None:
    """Without ``schema`` the tables live in the ``waitbound`` schema."""
    assert postgres.DEFAULT_SCHEMA == "waitbound"


@pytest.mark.parametrize("name", ["", "Upper", "has-dash", "1st", "x" * 64, 'a"; drop'])
def test_an_invalid_schema_name_is_a_usage_error(dsn: str, name: str) -> None:
    """Schema names are lowercase identifiers; anything else is refused before connecting."""
    with pytest.raises(UsageError, match="schema name"):
        postgres.PostgresStore(dsn, schema=name)
    with pytest.raises(UsageError, match="schema name"):
        postgres.upgrade(dsn, schema=name)


@pytest.mark.parametrize(("low", "high"), [(2, 1), (-1, 4), (0, 0)])
def test_invalid_pool_sizes_are_a_usage_error(schema: str, dsn: str, low: int, high: int) -> None:
    """min_size <= max_size, max_size >= 1."""
    with pytest.raises(UsageError, match="min_size"):
        postgres.PostgresStore(dsn, schema=schema, min_size=low, max_size=high)


# ---------------------------------------------------------------------------- bad DSNs


def _bad_dsns() -> dict[str, str]:
    port = closed_port()
    return {
        "wrong-port": f"postgresql://postgres@127.0.0.1:{port}/test",
        "uri-password": f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/test",
        "uri-password-encoded": f"postgres://postgres:{SECRET}%40x@127.0.0.1:{port}/test",
        "query-password": f"postgresql://postgres@127.0.0.1:{port}/test?password={SECRET}",
        "keyword-password": f"host=127.0.0.1 port={port} dbname=test password={SECRET}",
        "quoted-password": f"host=127.0.0.1 port={port} password='{SECRET} x'",
        "bad-port-with-password": f"postgresql://u:{SECRET}@127.0.0.1:notaport/test",
        "garbage-with-password": f"host=127.0.0.1 {SECRET} password={SECRET}",
        "misspelt-password": f"host=127.0.0.1 password {SECRET}",
        "bad-escape-in-password": f"postgresql://u:{SECRET}%zz@127.0.0.1/test",
    }


@pytest.mark.parametrize("name", list(_bad_dsns()))
def test_a_bad_dsn_is_a_one_line_store_error_without_the_password(name: str) -> None:
    """Opening or upgrading through a DSN that does not connect: one line, no password."""
    bad = _bad_dsns()[name]
    for attempt in (lambda: postgres.PostgresStore(bad), lambda: postgres.upgrade(bad)):
        with pytest.raises(StoreError) as caught:
            attempt()
        assert not isinstance(caught.value, SchemaVersionError)
        message = _one_line(caught.value)
        assert SECRET not in message
        assert message.startswith(("store ", "the PostgreSQL DSN cannot be parsed"))
        if "password" in name and "parsed" not in message:
            assert "***" in message


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgres://u:p%40w@h/db?sslmode=require", "postgres://u:***@h/db?sslmode=require"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://h/db?password=pw&x=1", "postgresql://h/db?password=***&x=1"),
        ("host=h password=pw dbname=d", "host=h password=*** dbname=d"),
        ("host=h password = 'p w' dbname=d", "host=h password = *** dbname=d"),
        ("host=h PASSWORD=pw", "host=h PASSWORD=***"),
        ("postgresql://u:@h/db", "postgresql://u:***@h/db"),
    ],
)
def test_redact_dsn_hides_only_the_password(dsn: str, shown: str) -> None:
    """User, host, port, database and options stay; the password becomes ***."""
    assert postgres.redact_dsn(dsn) == shown


# ---------------------------------------------------------------------------- upgrade


def test_upgrade_creates_the_schema_then_has_nothing_to_do(dsn: str, bare_schema: str) -> None:
    """The first upgrade applies every version; the second returns []."""
    assert postgres.upgrade(dsn, schema=bare_schema) == ALL
    assert _versions(bare_schema) == ALL
    assert _tables(bare_schema) == [
        "audit_events",
        "inbox",
        "op_group_members",
        "op_groups",
        "operations",
        "outbox",
        "pace_calendar",
        "schedule_history",
        "schema_migrations",
        "sessions",
        "webhook_jobs",
    ]
    assert postgres.upgrade(dsn, schema=bare_schema) == []
    store = postgres.PostgresStore(dsn, schema=bare_schema)
    try:
        assert store.upgrade() == []
    finally:
        store.close()
    assert _versions(bare_schema) == ALL


def test_concurrent_upgrades_apply_each_version_once(
    dsn: str, bare_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four upgrades at once: one applies, the others wait on the advisory lock, then find
    nothing to do."""
    slow = (postgres.MIGRATIONS[0] + "; SELECT pg_sleep(0.5)",)  # hold the lock a while
    monkeypatch.setattr(postgres_schema, "MIGRATIONS", slow)
    start = threading.Barrier(4)
    results: list[list[int]] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            results.append(postgres.upgrade(dsn, schema=bare_schema))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert sorted(results) == [[], [], [], [1]]
    assert _versions(bare_schema) == [1]


def test_a_failing_migration_changes_nothing(
    dsn: str, bare_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration that fails rolls back the whole upgrade: no schema, no version row."""
    broken = (postgres.MIGRATIONS[0] + "; SELECT * FROM no_such_table",)
    monkeypatch.setattr(postgres_schema, "MIGRATIONS", broken)
    with pytest.raises(StoreError, match="no_such_table") as caught:
        postgres.upgrade(dsn, schema=bare_schema)
    _one_line(caught.value)
    assert not pg.schema_exists(bare_schema)


# ---------------------------------------------------------------------------- claims


def test_claim_due_skips_rows_another_transaction_holds(schema: str, dsn: str) -> None:
    """SKIP LOCKED: a row locked elsewhere is passed over at once, not waited for."""
    store = postgres.PostgresStore(dsn, schema=schema)
    try:
        for name in ("op-a", "op-b", "op-c"):
            store.create(make_record(name), events("created"))
        with psycopg.connect(dsn) as other:
            other.execute(
                f'SELECT 1 FROM "{schema}".operations WHERE operation_id = %s FOR UPDATE'.encode(),
                ("op-a",),
            )
            taken: list[str] = []
            worker = threading.Thread(
                target=lambda: taken.extend(
                    r.operation_id
                    for r in store.claim_due(owner="w1", now=NOW, lease_s=30, limit=10)
                )
            )
            worker.start()
            worker.join(timeout=10)
            assert not worker.is_alive(), "claim_due waited for a locked row"
            assert sorted(taken) == ["op-b", "op-c"]
            other.rollback()
        got = store.get("op-a")
        assert got is not None
        assert got.lease_owner is None
        assert [
            r.operation_id for r in store.claim_due(owner="w2", now=NOW, lease_s=30, limit=9)
        ] == ["op-a"]
    finally:
        store.close()


def test_typed_columns_follow_the_record(schema: str, dsn: str) -> None:
    """phase, outcome, next_poll_at and the lease are real columns, kept in step."""
    store = postgres.PostgresStore(dsn, schema=schema)
    try:
        created = store.create(make_record(), [])
        [taken] = store.claim_due(owner="w1", now=NOW, lease_s=30, limit=1)
        assert created.version == 1
        rows = pg.execute(
            f"SELECT version, phase, outcome, next_poll_at, lease_owner, lease_expires_at"
            f' FROM "{schema}".operations'
        )
        assert rows == [(2, "waiting", None, T0, "w1", NOW + timedelta(seconds=30))]
        assert taken.version == 2
    finally:
        store.close()


# ---------------------------------------------------------------------------- open_store


@pytest.mark.parametrize("scheme", ["postgresql://", "postgres://"])
def test_open_store_opens_postgres_for_both_url_schemes(
    scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec starting ``postgresql://`` or ``postgres://`` opens a PostgresStore on it."""
    opened: list[str] = []
    sentinel = MemoryStore()

    def fake(dsn: str, *, audit_key: bytes | None = None) -> MemoryStore:
        opened.append(dsn)
        return sentinel

    monkeypatch.setattr(postgres, "PostgresStore", fake)
    assert open_store(f"  {scheme}u@h/db ") is sentinel
    assert opened == [f"{scheme}u@h/db"]
    assert not is_postgres_dsn("postgresql.db")
    assert not is_postgres_dsn(Path("postgresql://u@h/db"))  # a Path is a file


def test_open_store_on_an_unmigrated_database_names_db_upgrade(dsn: str) -> None:
    """open_store never migrates: the default schema missing is a StoreError to act on."""
    if pg.schema_exists(postgres.DEFAULT_SCHEMA):
        pytest.skip("the test database has a 'waitbound' schema of its own")
    with pytest.raises(StoreError, match="waitbound db upgrade --store") as caught:
        open_store(dsn)
    assert f"--store {dsn}`" in _one_line(caught.value)
    assert not pg.schema_exists(postgres.DEFAULT_SCHEMA)


def test_open_store_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """No psycopg installed: UsageError naming pip install 'waitbound[postgres]'."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)
    monkeypatch.delitem(sys.modules, "waitbound.stores.postgres", raising=False)
    monkeypatch.delattr(waitbound.stores, "postgres", raising=False)
    nowhere = f"postgresql://postgres@127.0.0.1:{closed_port()}/test"  # never a real server
    for attempt in (lambda: open_store(nowhere), lambda: upgrade_store(nowhere)):
        with pytest.raises(UsageError, match=r"pip install 'waitbound\[postgres\]'"):
            attempt()


def test_upgrade_store_reports_what_it_did(dsn: str, bare_schema: str, tmp_path: Path) -> None:
    """upgrade_store: versions applied, then none; SQLite is always current; memory refused."""
    label = f"{dsn} (schema {bare_schema})"
    assert upgrade_store(dsn, schema=bare_schema) == SchemaUpgrade(
        store=label, applied=tuple(ALL), version=LATEST
    )
    assert upgrade_store(dsn, schema=bare_schema) == SchemaUpgrade(
        store=label, applied=(), version=LATEST
    )
    path = tmp_path / "s.db"
    assert upgrade_store(path).applied == ()
    SQLiteStore(path).close()
    assert upgrade_store(str(path)) == SchemaUpgrade(
        store=str(path), applied=(), version=SQLITE_LATEST
    )
    with pytest.raises(UsageError, match="memory"):
        upgrade_store("memory:")
    with pytest.raises(UsageError, match="PostgreSQL"):
        upgrade_store(path, schema="x")


# ---------------------------------------------------------------------------- db upgrade


def _db_upgrade(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(tmp_path, "db", "upgrade", *args)


def test_db_upgrade_applies_then_is_idempotent(dsn: str, bare_schema: str, tmp_path: Path) -> None:
    """`waitbound db upgrade --store DSN`: exit 0 applying every version, then exit 0 with
    nothing."""
    first = _db_upgrade(tmp_path, "--store", dsn, "--schema", bare_schema)
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout == f"store {dsn} (schema {bare_schema}): applied versions 1, 2, 3, 4, 5\n"
    again = _db_upgrade(tmp_path, "--store", dsn, "--schema", bare_schema)
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == f"store {dsn} (schema {bare_schema}): already at version {LATEST}\n"
    assert _versions(bare_schema) == ALL


def test_db_upgrade_of_a_sqlite_file(tmp_path: Path) -> None:
    """A SQLite file is current as soon as it is opened: "already at version 3"."""
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    done = _db_upgrade(tmp_path, "--store", str(path))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"store {path}: already at version {SQLITE_LATEST}\n"


def test_db_upgrade_of_a_missing_sqlite_file_creates_nothing(tmp_path: Path) -> None:
    """`db upgrade --store typo/s.db`: exit 2, the store does not exist; no folder made."""
    done = _db_upgrade(tmp_path, "--store", str(tmp_path / "typo" / "s.db"))
    assert done.returncode == 2, done.stderr
    assert "does not exist" in done.stderr
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize(
    "store",
    [
        f"postgresql://postgres:{SECRET}@127.0.0.1:{{port}}/test",
        f"postgresql://postgres@127.0.0.1:{{port}}/test?password={SECRET}",
        f"postgresql://postgres:{SECRET}@127.0.0.1:notaport/test",
        "memory:",
    ],
    ids=["uri-password", "query-password", "bad-port", "memory"],
)
def test_db_upgrade_refuses_in_one_line_without_the_password(tmp_path: Path, store: str) -> None:
    """A DSN that does not connect: exit 5 (the store failed); the memory store: exit 2
    (there is no schema); one line, no password."""
    done = _db_upgrade(tmp_path, "--store", store.format(port=closed_port()))
    assert "Traceback" not in done.stderr
    assert done.returncode == (2 if store == "memory:" else 5), done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("waitbound: error: ")
    assert SECRET not in done.stderr


def test_db_upgrade_on_a_bad_dsn_changes_nothing(
    dsn: str, bare_schema: str, tmp_path: Path
) -> None:
    """A DSN naming a database that does not exist: exit 5, and no schema appears anywhere."""
    missing = dsn.rsplit("/", 1)[0] + "/wb_no_such_database"
    done = _db_upgrade(tmp_path, "--store", missing, "--schema", bare_schema)
    assert done.returncode == 5
    assert "wb_no_such_database" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not pg.schema_exists(bare_schema)


# ---------------------------------------------------------------------------- the test server


@pytest.mark.parametrize(
    ("ci", "outcome"), [("1", pytest.fail.Exception), (None, pytest.skip.Exception)]
)
def test_an_unreachable_test_server_fails_under_ci_and_skips_elsewhere(
    monkeypatch: pytest.MonkeyPatch, ci: str | None, outcome: type[BaseException]
) -> None:
    """CI never passes by skipping the PostgreSQL tests; a laptop without a server skips."""
    nowhere = f"postgresql://postgres:{SECRET}@127.0.0.1:{closed_port()}/test"
    reason = pg.unreachable(nowhere)
    assert reason is not None
    assert SECRET not in reason
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome):
        pg.require(nowhere, checked=reason)
    assert pg.require(nowhere, checked=None) == nowhere


# ---------------------------------------------------------------------------- the push path


def test_a_version_1_schema_upgrades_to_the_push_path(
    dsn: str, bare_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema the version-1 release made (migration 1 only, one record as it wrote it)
    is refused until upgraded; the upgrade applies [2, 3, 4, 5], and the record and its log
    read as before."""
    with monkeypatch.context() as previous_release:
        previous_release.setattr(postgres_schema, "MIGRATIONS", postgres.MIGRATIONS[:1])
        previous_release.setattr(postgres, "SCHEMA_VERSION", 1)
        assert postgres.upgrade(dsn, schema=bare_schema) == [1]
    created, sealed = advance(make_record(job_id="job-42"), events("created", "reserved"))
    pg.execute(
        f'INSERT INTO "{bare_schema}".operations (operation_id, version, phase, outcome,'
        " next_poll_at, lease_owner, lease_expires_at, created_at, data)"
        " VALUES (%s, %s, %s, NULL, %s, NULL, NULL, %s, %s::json)",
        (
            created.operation_id,
            created.version,
            created.phase.value,
            created.next_poll_at,
            created.created_at,
            encode_record(created),
        ),
    )
    for row in audit_rows(sealed, lambda at: at):
        pg.execute(
            f'INSERT INTO "{bare_schema}".audit_events VALUES (%s, %s, %s, %s, %s, %s, %s, %s)',
            row,
        )
    assert _tables(bare_schema) == ["audit_events", "operations", "schema_migrations"]
    with pytest.raises(StoreError, match="schema version 1 is older than this waitbound's 5"):
        postgres.PostgresStore(dsn, schema=bare_schema)
    assert postgres.upgrade(dsn, schema=bare_schema) == [2, 3, 4, 5]
    assert _versions(bare_schema) == [1, 2, 3, 4, 5]
    assert "inbox" in _tables(bare_schema)
    assert "outbox" in _tables(bare_schema)
    assert "webhook_jobs" in _tables(bare_schema)
    store = postgres.PostgresStore(dsn, schema=bare_schema)
    try:
        assert store.upgrade() == []
        got = store.get("op-1")
        assert got is not None
        assert got.to_json() == created.to_json()
        stored = store.audit("op-1")
        waitbound.verify_chain(stored, head=(got.audit_seq, got.audit_head))
        assert store.audit_after(None) == stored
        store.save(got.evolve(push=Push(webhook="reports")), [])
        put = store.put_delivery(
            InboundDelivery(
                provider="reports", webhook_id="wh-1", received_at=T0, job_id="job-42", payload={}
            )
        )
        assert put is not None
        assert put.operation_id == "op-1"
    finally:
        store.close()


def test_a_failing_outbox_write_rolls_back_the_outcome(schema: str, dsn: str) -> None:
    """The outbox entry is written in the record's transaction: when it fails, the
    outcome and its audit events are not written either."""
    pg.execute(
        f'CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS'
        " $$ BEGIN RAISE EXCEPTION 'outbox refused'; END $$"
    )
    pg.execute(
        f'CREATE TRIGGER refuse BEFORE INSERT ON "{schema}".outbox'
        f' FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse()'
    )
    store = postgres.PostgresStore(dsn, schema=schema)
    try:
        created = store.create(
            make_record(job_id="job-42", push=Push(notify_url="https://d.example/h")),
            events("created"),
        )
        final = created.evolve(
            ending=created.ending.evolve(
                phase=Phase.DONE, outcome=OutcomeKind.SUCCEEDED, finished_at=T0
            )
        )
        with pytest.raises(StoreError, match="outbox refused"):
            store.save(final, events("finished", start_s=1))
        got = store.get("op-1")
        assert got is not None
        assert got.to_json() == created.to_json()
        assert [e.event.kind for e in store.audit("op-1")] == ["created"]
        assert store.outbox() == []
    finally:
        store.close()


def test_put_delivery_waits_for_a_registration_in_progress(schema: str, dsn: str) -> None:
    """A delivery about a job whose registration is uncommitted waits for that
    transaction (the job's advisory lock), then is matched by it."""
    store = postgres.PostgresStore(dsn, schema=schema)
    try:
        with psycopg.connect(dsn) as other:
            key = _postgres_sql.job_lock_key(schema, "reports", "job-42")
            other.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            other.execute(
                f'INSERT INTO "{schema}".webhook_jobs VALUES (%s, %s, %s)'.encode(),
                ("reports", "job-42", "op-elsewhere"),
            )
            results: list[object] = []
            worker = threading.Thread(
                target=lambda: results.append(
                    store.put_delivery(
                        InboundDelivery(
                            provider="reports",
                            webhook_id="wh-1",
                            received_at=T0,
                            job_id="job-42",
                            payload={},
                        )
                    )
                )
            )
            worker.start()
            _until_waiting_on_an_advisory_lock(dsn)
            assert results == []
            other.commit()
        worker.join(timeout=10)
        [put] = results
        assert isinstance(put, InboundDelivery)
        assert put.operation_id == "op-elsewhere"
    finally:
        store.close()


def _until_waiting_on_an_advisory_lock(dsn: str, timeout_s: float = 10.0) -> None:
    """Return once some session waits on an advisory lock (pg_locks), or fail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pg.execute("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"):
            return
        time.sleep(0.01)
    pytest.fail("put_delivery never waited for the job's advisory lock")
