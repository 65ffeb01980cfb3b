"""The inbox's sign-in sessions in every store (memory, SQLite, real PostgreSQL):
kept with only hashes of their secrets, read back, revoked one or all, listed, pruned;
and a schema-3 file gains the table through its upgrade."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.stores import pg
from waitbound import MemoryStore, SQLiteStore, Store, UsageError
from waitbound.stores import _sqlite_schema, sqlite
from waitbound.stores._sessions import SessionRow, sessions_of

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Every store kind, fresh."""
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "s.db")
        yield opened
        opened.close()
    else:
        from waitbound.stores.postgres import PostgresStore

        with pg.fresh_schema() as schema:
            made = PostgresStore(pg.require_postgres(), schema=schema, max_size=2)
            yield made
            made.close()


def row(n: int, **changes: object) -> SessionRow:
    fields: dict[str, object] = {
        "session_id": f"{n:02x}" * 32,
        "path_hash": f"{n + 100:02x}" * 32,
        "who": f"person-{n}",
        "role": "decider",
        "via": f"token person-{n}",
        "created_at": T0 + timedelta(minutes=n),
        "last_seen_at": T0 + timedelta(minutes=n),
        "expires_at": T0 + timedelta(hours=12),
    }
    fields.update(changes)
    return SessionRow(**fields)  # type: ignore[arg-type]


def test_a_session_is_kept_and_read_back_identical(store: Store) -> None:
    """put then get: the same row (times as aware UTC); an unknown id is None."""
    sessions = sessions_of(store)
    sessions.put_session(row(1))
    assert sessions.get_session(row(1).session_id) == row(1)
    assert sessions.get_session("ff" * 32) is None


def test_touching_a_session_moves_its_last_seen_only(store: Store) -> None:
    """touch: last_seen_at changes, nothing else."""
    sessions = sessions_of(store)
    sessions.put_session(row(1))
    later = T0 + timedelta(hours=1)
    sessions.touch_session(row(1).session_id, later)
    got = sessions.get_session(row(1).session_id)
    assert got is not None
    assert got.last_seen_at == later
    assert got.created_at == row(1).created_at


def test_revoking_one_session_by_its_shown_id_leaves_the_others_open(store: Store) -> None:
    """revoke by the 12-character id: that one is revoked (and listed no more), the
    other stays open."""
    sessions = sessions_of(store)
    sessions.put_session(row(1))
    sessions.put_session(row(2))
    now = T0 + timedelta(hours=1)
    revoked = sessions.revoke_sessions(at=now, shown_id=row(1).shown_id)
    assert [r.session_id for r in revoked] == [row(1).session_id]
    got = sessions.get_session(row(1).session_id)
    assert got is not None
    assert got.revoked_at == now
    assert not got.is_open(now)
    assert [r.who for r in sessions.list_sessions(now=now)] == ["person-2"]
    assert sessions.revoke_sessions(at=now, shown_id=row(1).shown_id) == []


def test_revoking_every_session_ends_them_all(store: Store) -> None:
    """revoke --all: every open session revoked; the list of open ones is empty, the
    list with ended ones still shows them."""
    sessions = sessions_of(store)
    for n in (1, 2, 3):
        sessions.put_session(row(n))
    now = T0 + timedelta(hours=1)
    assert len(sessions.revoke_sessions(at=now)) == 3
    assert sessions.list_sessions(now=now) == []
    assert len(sessions.list_sessions(now=now, ended=True)) == 3


def test_a_short_or_ambiguous_session_id_is_refused(store: Store) -> None:
    """A prefix shorter than 12 hex characters, or not hex: one clear line."""
    sessions = sessions_of(store)
    sessions.put_session(row(1))
    with pytest.raises(UsageError, match="at least 12 hex"):
        sessions.revoke_sessions(at=T0, shown_id="0101")
    with pytest.raises(UsageError, match="at least 12 hex"):
        sessions.revoke_sessions(at=T0, shown_id="zz" * 8)


def test_expired_sessions_are_not_listed_and_are_pruned(store: Store) -> None:
    """Past its expiry a session is not open; prune deletes it, keeps the open one."""
    sessions = sessions_of(store)
    sessions.put_session(row(1, expires_at=T0 + timedelta(minutes=30)))
    sessions.put_session(row(2))
    now = T0 + timedelta(hours=1)
    assert [r.who for r in sessions.list_sessions(now=now)] == ["person-2"]
    assert sessions.prune_sessions(before=now) == 1
    assert sessions.get_session(row(1).session_id) is None
    assert sessions.get_session(row(2).session_id) is not None


def test_a_schema_3_sqlite_file_gains_the_sessions_table_when_opened(tmp_path: Path) -> None:
    """A store at schema 3 opened for writing is brought to the current schema: the
    sessions table exists, upgrade() reports [4, 5] (5: the record as parts and the
    group tables)."""
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path)
    for version in (1, 2, 3):
        db.executescript(_sqlite_schema.MIGRATIONS[version - 1])
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()
    store = SQLiteStore(path)
    try:
        assert store.upgrade() == [4, 5]
        sessions_of(store).put_session(row(1))
        assert sessions_of(store).get_session(row(1).session_id) == row(1)
    finally:
        store.close()
    assert sqlite.SCHEMA_VERSION == 5


def test_a_schema_3_postgres_schema_gains_the_sessions_table_on_upgrade() -> None:
    """`waitbound db upgrade` on a PostgreSQL schema at version 3 applies [4, 5] only."""
    import psycopg
    from psycopg import sql

    from waitbound.stores.postgres import MIGRATIONS, PostgresStore, upgrade

    with pg.fresh_schema(upgraded=False) as schema:
        with psycopg.connect(pg.require_postgres()) as conn:
            ident = sql.Identifier(schema)
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {}.schema_migrations"
                    " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)"
                ).format(ident)
            )
            for version in (1, 2, 3):
                conn.execute(sql.SQL(MIGRATIONS[version - 1]).format(schema=ident))
                conn.execute(
                    sql.SQL("INSERT INTO {}.schema_migrations VALUES (%s, now())").format(ident),
                    (version,),
                )
        assert upgrade(pg.require_postgres(), schema=schema) == [4, 5]
        store = PostgresStore(pg.require_postgres(), schema=schema, max_size=2)
        try:
            sessions_of(store).put_session(row(1))
            assert sessions_of(store).get_session(row(1).session_id) == row(1)
        finally:
            store.close()
