"""Groups of operations in every store (memory, SQLite, real PostgreSQL): kept with
their members in order, their spending counted atomically up to the budget and never
past it, ended once, found by member; and a schema-4 file gains the tables (v4 → v5)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.stores import pg
from waitbound import MemoryStore, SQLiteStore, Store, UsageError
from waitbound.stores import _sqlite_schema
from waitbound.stores._groups import GroupRow, groups_of, is_group_id, new_group_id

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
            made = PostgresStore(pg.require_postgres(), schema=schema, max_size=4)
            yield made
            made.close()


def group(n: int, **changes: object) -> GroupRow:
    fields: dict[str, object] = {
        "group_id": f"grp_{n:020x}",
        "kind": "all",
        "members": (f"op-{n}-b", f"op-{n}-a", f"op-{n}-c"),
        "created_at": T0 + timedelta(minutes=n),
        "deadline_at": T0 + timedelta(minutes=n, seconds=90),
        "max_requests": 3,
    }
    fields.update(changes)
    return GroupRow(**fields)  # type: ignore[arg-type]


def test_a_group_is_kept_and_read_back_identical_with_its_members_in_order(store: Store) -> None:
    """create then get: the same row (members in the order given, times aware UTC); an
    unknown id is None; a second create of the id is refused."""
    groups = groups_of(store)
    groups.create_group(group(1))
    assert groups.get_group(group(1).group_id) == group(1)
    assert groups.get_group("grp_" + "f" * 20) is None
    with pytest.raises(UsageError, match="exists already"):
        groups.create_group(group(1))
    unbounded = group(2, deadline_at=None, max_requests=None)
    groups.create_group(unbounded)
    assert groups.get_group(unbounded.group_id) == unbounded


def test_spending_counts_up_to_the_budget_and_never_past_it(store: Store) -> None:
    """spend: each call counts one (committed) until the budget; then None, nothing
    counted; an unbounded group always counts."""
    groups = groups_of(store)
    groups.create_group(group(1))
    used = [
        row.requests_used
        for row in (groups.spend_group(group(1).group_id) for _ in range(3))
        if row
    ]
    assert used == [1, 2, 3]
    assert groups.spend_group(group(1).group_id) is None
    stored = groups.get_group(group(1).group_id)
    assert stored is not None
    assert (stored.requests_used, stored.requests_left) == (3, 0)
    groups.create_group(group(2, max_requests=None))
    for _ in range(5):
        assert groups.spend_group(group(2).group_id) is not None
    assert groups.spend_group("grp_" + "f" * 20) is None


def test_two_spenders_at_once_never_take_more_than_the_budget(store: Store) -> None:
    """Eight threads spending a budget of 3 at once: exactly 3 calls count."""
    groups = groups_of(store)
    groups.create_group(group(1))
    counted: list[int] = []
    lock = threading.Lock()

    def spend() -> None:
        for _ in range(3):
            row = groups.spend_group(group(1).group_id)
            if row is not None:
                with lock:
                    counted.append(row.requests_used)

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(counted) == [1, 2, 3]


def test_a_group_ends_once_and_then_spends_nothing(store: Store) -> None:
    """end: waiting → stopped with its reason and time; a second end changes nothing;
    an ended group counts no request."""
    groups = groups_of(store)
    groups.create_group(group(1))
    at = T0 + timedelta(minutes=5)
    ended = groups.end_group(group(1).group_id, state="stopped", reason="deadline_exceeded", at=at)
    assert ended is not None
    assert (ended.state, ended.reason, ended.ended_at) == ("stopped", "deadline_exceeded", at)
    again = groups.end_group(group(1).group_id, state="done", reason=None, at=at + timedelta(1))
    assert again == ended
    assert groups.spend_group(group(1).group_id) is None


def test_groups_are_found_by_member_and_listed_newest_first(store: Store) -> None:
    """groups_of_operation: every group naming it, newest first; list_groups filters by
    state."""
    groups = groups_of(store)
    groups.create_group(group(1, members=("op-x", "op-y")))
    groups.create_group(group(2, members=("op-y",)))
    groups.create_group(group(3, members=("op-z",)))
    assert [g.group_id for g in groups.groups_of_operation("op-y")] == [
        group(2).group_id,
        group(1).group_id,
    ]
    assert groups.groups_of_operation("op-none") == []
    groups.end_group(group(2).group_id, state="stopped", reason="request_budget_exhausted", at=T0)
    assert [g.group_id for g in groups.list_groups(state="stopped")] == [group(2).group_id]
    assert [g.group_id for g in groups.list_groups(limit=2)] == [
        group(3).group_id,
        group(2).group_id,
    ]


def test_a_group_id_is_grp_and_20_hex_digits() -> None:
    """new_group_id: fresh each time, recognised by is_group_id; an operation id is not."""
    first, second = new_group_id(), new_group_id()
    assert first != second
    assert is_group_id(first)
    assert len(first) == 24
    assert not is_group_id("op_0123")


def test_a_schema_4_sqlite_file_gains_the_group_tables_when_opened(tmp_path: Path) -> None:
    """A store at schema 4 opened for writing is brought to schema 5 (upgrade() reports
    [5]); its operations table is untouched and groups can be kept."""
    path = tmp_path / "v4.db"
    db = sqlite3.connect(path)
    for version in (1, 2, 3, 4):
        db.executescript(_sqlite_schema.MIGRATIONS[version - 1])
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    store = SQLiteStore(path)
    try:
        assert store.upgrade() == [5]
        groups_of(store).create_group(group(1))
        assert groups_of(store).get_group(group(1).group_id) == group(1)
    finally:
        store.close()


def test_a_schema_4_postgres_schema_gains_the_group_tables_on_upgrade() -> None:
    """`db upgrade` on a PostgreSQL schema at version 4 applies [5] only."""
    import psycopg
    from psycopg import sql

    from waitbound.stores import _postgres_schema
    from waitbound.stores.postgres import PostgresStore, upgrade

    dsn = pg.require_postgres()
    with pg.fresh_schema(upgraded=False) as schema:
        ident = sql.Identifier(schema)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {}.schema_migrations"
                    " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)"
                ).format(ident)
            )
            for version in (1, 2, 3, 4):
                conn.execute(sql.SQL(_postgres_schema.MIGRATIONS[version - 1]).format(schema=ident))
                conn.execute(
                    sql.SQL("INSERT INTO {}.schema_migrations VALUES (%s, now())").format(ident),
                    (version,),
                )
        assert upgrade(dsn, schema=schema) == [5]
        store = PostgresStore(dsn, schema=schema, max_size=1)
        try:
            groups_of(store).create_group(group(1))
            assert groups_of(store).get_group(group(1).group_id) == group(1)
        finally:
            store.close()


def test_a_request_counted_and_not_sent_is_given_back_never_below_zero(store: Store) -> None:
    """release: gives back one counted request (the budget has room again), whatever the
    group's state; at zero it stays zero; an unknown group is None."""
    groups = groups_of(store)
    groups.create_group(group(1))
    for _ in range(3):
        groups.spend_group(group(1).group_id)
    assert groups.spend_group(group(1).group_id) is None
    released = groups.release_group(group(1).group_id)
    assert released is not None
    assert (released.requests_used, released.requests_left) == (2, 1)
    assert groups.spend_group(group(1).group_id) is not None
    groups.create_group(group(2))
    again = groups.release_group(group(2).group_id)
    assert again is not None
    assert again.requests_used == 0
    assert groups.release_group("grp_" + "f" * 20) is None
