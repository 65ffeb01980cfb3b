"""The schema-3 row split: the cold JSON is written only when it changes, and the
per-store cache never decides what is stored (SQLite; the contract suite covers every
store's round trips)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

from tests.stores.test_store_contract import events, make_record
from waitbound import SQLiteStore
from waitbound.stores._rows import COLD_FIELDS, HOT_COLUMNS, POLL_FIELDS, RecordRows


def _row(path: Path, operation_id: str = "op-1") -> tuple[str, int, int]:
    db = sqlite3.connect(path)
    try:
        data, data_version, version = db.execute(
            "SELECT data, data_version, version FROM operations WHERE operation_id = ?",
            (operation_id,),
        ).fetchone()
        return str(data), int(data_version), int(version)
    finally:
        db.close()


def test_every_record_field_has_exactly_one_place() -> None:
    """Hot columns, poll JSON and cold JSON split the record's fields without overlap."""
    from waitbound._record import FIELD_NAMES

    places = [*HOT_COLUMNS, *POLL_FIELDS, *COLD_FIELDS, "operation_id"]
    assert sorted(places) == sorted(FIELD_NAMES)


def test_a_poll_step_leaves_the_cold_json_as_it_was(tmp_path: Path) -> None:
    """Counters, lease and the last answer change: ``data`` and ``data_version`` do not."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        created = store.create(make_record(), events("created"))
        before = _row(path)
        stepped = store.save(
            replace(created, status_requests_used=1, provider_state="running", attempt=1),
            events("observed"),
        )
        data, data_version, version = _row(path)
        assert (data, data_version) == before[:2]
        assert version == stepped.version == 2
        got = store.get("op-1")
        assert got is not None
        assert (got.status_requests_used, got.provider_state) == (1, "running")
    finally:
        store.close()


def test_a_cold_change_rewrites_the_cold_json_with_a_new_data_version(tmp_path: Path) -> None:
    """A label (cold) change writes ``data`` again, stamped with the new version."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        created = store.create(make_record(), events("created"))
        store.save(replace(created, label="renamed"), [])
        data, data_version, version = _row(path)
        assert '"label":"renamed"' in data
        assert data_version == version == 2
    finally:
        store.close()


def test_a_store_whose_cache_is_stale_reads_and_writes_what_is_stored(tmp_path: Path) -> None:
    """Store A caches version 1; B changes the cold part; A reads B's change (another
    data_version), and a save through A of a record B read writes its cold part."""
    path = tmp_path / "s.db"
    a, b = SQLiteStore(path), SQLiteStore(path)
    try:
        created = a.create(make_record(), events("created"))
        assert a.get("op-1") is not None
        from_b = b.get("op-1")
        assert from_b is not None
        b.save(replace(from_b, label="from-b"), [])
        seen = a.get("op-1")
        assert seen is not None
        assert seen.label == "from-b"
        again = b.get("op-1")
        assert again is not None
        a.save(replace(again, label="through-a"), [])  # A's entry is of another version
        fresh = SQLiteStore(path)
        try:
            got = fresh.get("op-1")
            assert got is not None
            assert got.label == "through-a"
            assert got.to_json() == {
                **replace(again, label="through-a").to_json(),
                "version": again.version + 1,
            }
        finally:
            fresh.close()
        assert created.version == 1
    finally:
        a.close()
        b.close()


def test_the_cache_is_bounded() -> None:
    """A RecordRows of size 2 keeps the two most recently used operations."""
    rows = RecordRows(lambda at: at.isoformat(), size=2)
    for name in ("op-1", "op-2", "op-3"):
        record = replace(make_record(name), version=1)
        rows.written(record, rows.row(record, replaces=0))
    assert rows.cached_data_version("op-1") == -1
    assert rows.cached_data_version("op-2") == 1
    assert rows.cached_data_version("op-3") == 1
