"""The schema-5 row: a record's parts as JSON columns, each written only when it
changed and encoded once, and a per-store cache that never decides what is stored
(SQLite; the contract suite covers every store's round trips)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

from tests.stores.test_store_contract import events, make_record
from waitbound import SQLiteStore
from waitbound._model._record import FIELD_NAMES, PLACES
from waitbound._model._record_parts import PARTS
from waitbound.stores._codec import dump_json
from waitbound.stores._rows import ALL_PARTS, PART_COLUMNS, RecordRows


def _columns(path: Path, operation_id: str = "op-1") -> dict[str, str]:
    db = sqlite3.connect(path)
    try:
        row = db.execute(
            f"SELECT {', '.join(PART_COLUMNS)} FROM operations WHERE operation_id = ?",
            (operation_id,),
        ).fetchone()
        return dict(zip(PART_COLUMNS, row, strict=True))
    finally:
        db.close()


def _written(changed: tuple[int, ...]) -> set[str]:
    return {PART_COLUMNS[index] for index in changed}


def test_every_record_field_has_exactly_one_place() -> None:
    """The parts split the record's flat fields without overlap; ``version`` is the
    record's own, ``push`` a whole part."""
    places = [*list(PLACES), "version"]
    assert sorted(places) == sorted(FIELD_NAMES)
    assert len(set(places)) == len(places)
    assert tuple(attr for attr, _ in PARTS) == PART_COLUMNS


def test_a_poll_step_writes_only_the_parts_it_changed(tmp_path: Path) -> None:
    """Counters, the last answer and the schedule change (and the audit head with the
    events): only those four parts are written; contract, submission, ending,
    oversight, push and lease keep their stored text."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        created = store.create(make_record(), events("created"))
        before = _columns(path)
        stepped = created.evolve(
            counters=created.counters.evolve(status_requests_used=1),
            answer=created.answer.evolve(provider_state="running"),
            schedule=created.schedule.evolve(attempt=1),
        )
        rows = store._rows  # the store's own cache: what its next save would write
        assert _written(rows.row(stepped.evolve(version=2), replaces=1).changed) == {
            "counters",
            "answer",
            "schedule",
        }
        saved = store.save(stepped, events("observed"))
        after = _columns(path)
        unchanged = {"contract", "submission", "lease", "ending", "oversight", "push"}
        assert {c: after[c] for c in unchanged} == {c: before[c] for c in unchanged}
        assert after["counters"] != before["counters"]
        assert saved.version == 2
        got = store.get("op-1")
        assert got is not None
        assert (got.status_requests_used, got.provider_state, got.attempt) == (1, "running", 1)
        assert got.audit_seq == 2
    finally:
        store.close()


def test_a_part_is_encoded_once_and_unchanged_parts_are_shared() -> None:
    """A part's text is computed once and kept (the same string object comes back);
    a change copies only the part it touches."""
    record = make_record()
    contract = record.contract
    assert contract.text(dump_json) is contract.text(dump_json)
    changed = record.evolve(
        contract=record.contract.evolve(label="renamed"), schedule=record.schedule.evolve(attempt=2)
    )
    assert changed.contract is not contract
    assert changed.schedule is not record.schedule
    assert changed.counters is record.counters
    assert changed.submission is record.submission
    assert changed.push is record.push


def test_a_contract_change_rewrites_only_the_contract(tmp_path: Path) -> None:
    """A label change writes the contract part again (and nothing else of the parts)."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        created = store.create(make_record(), events("created"))
        renamed = created.evolve(contract=created.contract.evolve(label="renamed"))
        assert _written(store._rows.row(renamed.evolve(version=2), replaces=1).changed) == {
            "contract"
        }
        store.save(renamed, [])
        assert '"label":"renamed"' in _columns(path)["contract"]
    finally:
        store.close()


def test_a_store_whose_cache_is_stale_reads_and_writes_what_is_stored(tmp_path: Path) -> None:
    """Store A caches version 1; B changes the contract; A reads B's change, and a save
    through A of a record B read writes every part (A's entry is of another version)."""
    path = tmp_path / "s.db"
    a, b = SQLiteStore(path), SQLiteStore(path)
    try:
        created = a.create(make_record(), events("created"))
        assert a.get("op-1") is not None
        from_b = b.get("op-1")
        assert from_b is not None
        b.save(from_b.evolve(contract=from_b.contract.evolve(label="from-b")), [])
        seen = a.get("op-1")
        assert seen is not None
        assert seen.label == "from-b"
        again = b.get("op-1")
        assert again is not None
        a.save(again.evolve(contract=again.contract.evolve(label="through-a")), [])
        fresh = SQLiteStore(path)
        try:
            got = fresh.get("op-1")
            assert got is not None
            assert got.label == "through-a"
            assert got.to_json() == {
                **again.evolve(contract=again.contract.evolve(label="through-a")).to_json(),
                "version": again.version + 1,
            }
        finally:
            fresh.close()
        assert created.version == 1
    finally:
        a.close()
        b.close()


def test_the_cache_is_bounded() -> None:
    """A RecordRows of size 2 keeps the two most recently used operations: a save of
    the evicted one writes every part, one of a kept one only what changed."""
    rows = RecordRows(lambda at: at.isoformat(), size=2)
    records = {}
    for name in ("op-1", "op-2", "op-3"):
        record = replace(make_record(name), version=1)
        rows.written(record, rows.row(record, replaces=0))
        records[name] = record
    for name, want in (("op-1", ALL_PARTS), ("op-2", ()), ("op-3", ())):
        assert rows.row(replace(records[name], version=2), replaces=1).changed == want, name
