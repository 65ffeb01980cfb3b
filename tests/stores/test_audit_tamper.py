"""Tampering with a real store's rows is detected by ``waitbound audit verify``.

For SQLite and PostgreSQL (a fresh database per test, see ``tests/stores/pg.py``), two
operations are recorded through the public API (``waitbound.wait`` against a scripted
provider, the store holding the audit key), then one of them is tampered with by raw
SQL, as someone with write access to the database but not the key would: edit, delete,
insert, reorder and truncate events, rewrite the record's head, and rewrite events and
head together. Each case must be named (problem and first bad event) by
:func:`waitbound.verify_audit` and by the real CLI, which exits 6 with one line.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import waitbound
from tests.cli.helpers import cli_env, run_cli
from tests.fakes import FakeClock, ScriptedProvider
from tests.stores import pg
from waitbound import AuditProblem, Operation, Policy, SQLiteStore, Store, parse_profile
from waitbound._base._clock import utc
from waitbound._model._audit import GENESIS_HASH, StoredAuditEvent, seal
from waitbound._model._record import PLACES
from waitbound._model._record_parts import PARTS
from waitbound.stores._rows import QUERY_COLUMNS

KEY = b"an audit key of 32 bytes, or so!"
URL = "http://provider.test/status"
PROFILE = {"state": "status", "pending": ["running"], "succeeded": ["done"], "job_id": "id"}
SCRIPT = {
    "/status": [
        (200, {"status": "running", "id": "j1"}),
        (200, {"status": "running", "id": "j1"}),
        (200, {"status": "done", "id": "j1"}),
    ]
}
EVENTS = 10
"""What the script records: created, 3 x (reserved, observed, scheduled) less the last
scheduled, finished."""


@dataclass
class Target:
    """A store holding ``op-a`` (to tamper with) and ``op-b`` (left alone)."""

    kind: str
    spec: str
    open: Callable[[bytes | None], Store]
    execute: Callable[[str, Sequence[object]], list[tuple[Any, ...]]]

    def events(self, operation_id: str = "op-a") -> list[StoredAuditEvent]:
        store = self.open(None)
        try:
            return store.audit(operation_id)
        finally:
            store.close()

    def findings(self, key: bytes | None = None) -> list[waitbound.AuditFinding]:
        store = self.open(None)
        try:
            return waitbound.verify_audit(store, key=key)
        finally:
            store.close()

    def part_json(self, column: str, operation_id: str = "op-a") -> dict[str, Any]:
        [(text,)] = self.execute(
            f"SELECT {column} FROM operations WHERE operation_id = ?", (operation_id,)
        )
        data: dict[str, Any] = json.loads(text) if isinstance(text, str) else text
        return data

    def set_record(self, changes: dict[str, Any], operation_id: str = "op-a") -> None:
        """Rewrite fields of the stored record as a tamperer would: each in the JSON of
        the part holding it (schema 5), and in its typed query column when it has one."""
        for name, value in changes.items():
            if name in QUERY_COLUMNS:
                self.execute(
                    f"UPDATE operations SET {name} = ? WHERE operation_id = ?",
                    (value, operation_id),
                )
            column = PARTS[PLACES[name][0]][0]
            data = self.part_json(column, operation_id) | {name: value}
            self.execute(
                f"UPDATE operations SET {column} = ? WHERE operation_id = ?",
                (json.dumps(data), operation_id),
            )


def _record_operations(store: Store) -> None:
    for operation_id in ("op-a", "op-b"):
        clock = FakeClock()
        provider = ScriptedProvider(clock, SCRIPT)
        outcome = waitbound.wait(
            Operation(status_url=URL, profile=parse_profile(PROFILE), policy=Policy()),
            operation_id=operation_id,
            store=store,
            client=provider.client(),
            clock=clock,
            sleep=clock.sleep,
            rng=random.Random(7),
        )
        assert outcome.outcome is waitbound.OutcomeKind.SUCCEEDED


@contextmanager
def _sqlite(tmp_path: Path) -> Iterator[Target]:
    path = tmp_path / "audited.db"

    def execute(sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        db = sqlite3.connect(path)
        try:
            with db:
                return list(db.execute(sql, tuple(params)).fetchall())
        finally:
            db.close()

    yield Target("sqlite", str(path), lambda key: SQLiteStore(path, audit_key=key), execute)


@contextmanager
def _postgres(tmp_path: Path) -> Iterator[Target]:
    import psycopg

    from waitbound.stores.postgres import PostgresStore

    with pg.fresh_database() as dsn:

        def execute(sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(b"SET search_path TO waitbound")
                cursor = conn.execute(sql.replace("?", "%s").encode(), tuple(params))
                return list(cursor.fetchall()) if cursor.description else []

        yield Target(
            "postgres", dsn, lambda key: PostgresStore(dsn, audit_key=key, max_size=2), execute
        )


_TARGETS = {"sqlite": _sqlite, "postgres": _postgres}


@pytest.fixture(params=sorted(_TARGETS))
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """A SQLite file or a PostgreSQL database with two operations written with the key."""
    with _TARGETS[request.param](tmp_path) as opened:
        store = opened.open(KEY)
        try:
            _record_operations(store)
        finally:
            store.close()
        assert len(opened.events()) == EVENTS
        yield opened


# --- the tampering, as raw SQL by someone without the key ------------------------------


def _forged(target: Target, seq: int, prev_hash: str, *, like: int) -> StoredAuditEvent:
    """An event the forger seals correctly (the hash is plain SHA-256: anyone can)."""
    model = target.events()[like - 1].event
    forged = waitbound.AuditEvent(
        at=model.at, kind=model.kind, summary="forged: " + model.summary, data=model.data
    )
    return seal("op-a", seq, forged, prev_hash)


def _insert(target: Target, stored: StoredAuditEvent) -> None:
    target.execute(
        "INSERT INTO audit_events (operation_id, seq, at, kind, summary, data, prev_hash, hash)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            stored.operation_id,
            stored.seq,
            stored.event.at.isoformat(),
            stored.event.kind,
            stored.event.summary,
            json.dumps(dict(stored.event.data)),
            stored.prev_hash,
            stored.hash,
        ),
    )


def _renumber(target: Target, *, from_seq: int, by: int) -> None:
    """Move events ``from_seq..`` by *by* (through negative numbers: the key is unique)."""
    target.execute(
        "UPDATE audit_events SET seq = -seq WHERE operation_id = 'op-a' AND seq >= ?", (from_seq,)
    )
    target.execute(
        "UPDATE audit_events SET seq = -seq + ? WHERE operation_id = 'op-a' AND seq < 0", (by,)
    )


def _reseal_from(target: Target, seq: int, summary: str) -> None:
    """Rewrite event *seq*'s summary and recompute the hashes of it and every later event,
    then the record's head: a consistent forgery only the audit key can catch."""
    events = target.events()
    prev = events[seq - 2].hash if seq > 1 else GENESIS_HASH
    for stored in events[seq - 1 :]:
        event = stored.event
        if stored.seq == seq:
            event = waitbound.AuditEvent(
                at=event.at, kind=event.kind, summary=summary, data=event.data
            )
        again = seal("op-a", stored.seq, event, prev)
        target.execute(
            "UPDATE audit_events SET summary = ?, prev_hash = ?, hash = ?"
            " WHERE operation_id = 'op-a' AND seq = ?",
            (event.summary, again.prev_hash, again.hash, stored.seq),
        )
        prev = again.hash
    target.set_record({"audit_head": prev})


def edit_summary(target: Target) -> None:
    target.execute(
        "UPDATE audit_events SET summary = 'nothing happened' WHERE operation_id = 'op-a'"
        " AND seq = 3",
        (),
    )


def edit_data(target: Target) -> None:
    target.execute(
        "UPDATE audit_events SET data = ? WHERE operation_id = 'op-a' AND seq = 4",
        (json.dumps({"state": "done", "requests_used": 1, "max_requests": 30}),),
    )


def delete_middle(target: Target) -> None:
    target.execute("DELETE FROM audit_events WHERE operation_id = 'op-a' AND seq = 5", ())


def delete_and_renumber(target: Target) -> None:
    target.execute("DELETE FROM audit_events WHERE operation_id = 'op-a' AND seq = 5", ())
    _renumber(target, from_seq=6, by=-1)
    target.set_record({"audit_seq": EVENTS - 1})


def insert_after_the_head(target: Target) -> None:
    last = target.events()[-1]
    _insert(target, _forged(target, EVENTS + 1, last.hash, like=EVENTS))


def insert_in_the_middle(target: Target) -> None:
    _renumber(target, from_seq=4, by=1)
    _insert(target, _forged(target, 4, target.events()[2].hash, like=9))
    target.set_record({"audit_seq": EVENTS + 1})


def insert_unsealed_in_the_middle(target: Target) -> None:
    _renumber(target, from_seq=4, by=1)
    forged = _forged(target, 4, target.events()[2].hash, like=9)
    _insert(target, dataclasses.replace(forged, hash="0123" * 16))
    target.set_record({"audit_seq": EVENTS + 1})


def swap_two(target: Target) -> None:
    target.execute("UPDATE audit_events SET seq = -1 WHERE operation_id = 'op-a' AND seq = 6", ())
    target.execute("UPDATE audit_events SET seq = 6 WHERE operation_id = 'op-a' AND seq = 7", ())
    target.execute("UPDATE audit_events SET seq = 7 WHERE operation_id = 'op-a' AND seq = -1", ())


def truncate(target: Target) -> None:
    target.execute("DELETE FROM audit_events WHERE operation_id = 'op-a' AND seq > 8", ())


def truncate_and_rewrite_head(target: Target) -> None:
    truncate(target)
    target.set_record({"audit_seq": 8, "audit_head": target.events()[-1].hash})


def rewrite_head(target: Target) -> None:
    target.set_record({"audit_head": "f" * 64})


def rewrite_events_and_head(target: Target) -> None:
    _reseal_from(target, 3, "the job was never started")


def rewrite_and_drop_the_mac(target: Target) -> None:
    _reseal_from(target, 3, "the job was never started")
    target.set_record({"audit_mac": None})


def forge_outcome(target: Target) -> None:
    target.set_record({"outcome": "failed", "reason": None})


def forge_result(target: Target) -> None:
    target.set_record({"result": {"answer": "forged"}})


def forge_counter(target: Target) -> None:
    target.set_record({"status_requests_used": 1})


def forge_decisions(target: Target) -> None:
    target.set_record(
        {"decisions": [{"option": "extend", "by": "mallory", "why": None, "at": T_FORGED}]}
    )


T_FORGED = "2026-01-01T00:00:00+00:00"


CASES: list[tuple[Callable[[Target], None], AuditProblem, int | None, bool]] = [
    # (tampering, problem found, first bad seq, found without the key too)
    (edit_summary, AuditProblem.EDITED, 3, True),
    (edit_data, AuditProblem.EDITED, 4, True),
    (delete_middle, AuditProblem.DELETED, 5, True),
    (delete_and_renumber, AuditProblem.DELETED, 5, True),
    (insert_after_the_head, AuditProblem.INSERTED, EVENTS + 1, True),
    (insert_in_the_middle, AuditProblem.INSERTED, 4, True),
    (insert_unsealed_in_the_middle, AuditProblem.INSERTED, 4, True),
    (swap_two, AuditProblem.REORDERED, 6, True),
    (truncate, AuditProblem.TRUNCATED, 9, True),
    (rewrite_head, AuditProblem.HEAD_MISMATCH, EVENTS, True),
    (truncate_and_rewrite_head, AuditProblem.FORGED_HEAD, None, False),
    (rewrite_events_and_head, AuditProblem.FORGED_HEAD, None, False),
    (rewrite_and_drop_the_mac, AuditProblem.UNAUTHENTICATED, None, False),
    (forge_outcome, AuditProblem.FORGED_RECORD, None, False),
    (forge_result, AuditProblem.FORGED_RECORD, None, False),
    (forge_counter, AuditProblem.FORGED_RECORD, None, False),
    (forge_decisions, AuditProblem.FORGED_RECORD, None, False),
]


@pytest.mark.parametrize(
    ("tamper", "problem", "seq", "without_key"), CASES, ids=[c[0].__name__ for c in CASES]
)
def test_tampering_is_named_with_its_first_bad_event(
    target: Target,
    tamper: Callable[[Target], None],
    problem: AuditProblem,
    seq: int | None,
    without_key: bool,
) -> None:
    """verify_audit names the tampering and its first bad event, for op-a only; without
    the key a consistent rewrite of events and head passes (that is what the key is for)."""
    assert target.findings(KEY) == []
    tamper(target)
    [finding] = target.findings(KEY)
    assert (finding.operation_id, finding.problem, finding.seq) == ("op-a", problem, seq)
    unkeyed = target.findings()
    if without_key:
        assert [(f.operation_id, f.problem, f.seq) for f in unkeyed] == [("op-a", problem, seq)]
    else:
        assert unkeyed == []
    assert len(target.events("op-b")) == EVENTS


@pytest.mark.parametrize(
    ("tamper", "problem", "seq"),
    [
        (c[0], c[1], c[2])
        for c in CASES
        if c[0] in (delete_middle, swap_two, rewrite_events_and_head, forge_outcome)
    ],
    ids=["delete_middle", "swap_two", "rewrite_events_and_head", "forge_outcome"],
)
def test_the_cli_says_what_is_wrong_in_one_line_and_exits_6(
    target: Target,
    tmp_path: Path,
    tamper: Callable[[Target], None],
    problem: AuditProblem,
    seq: int | None,
) -> None:
    """audit verify --all (key from a file): one stdout line for the broken operation
    only, exit 6; show of it exits 6 with one stderr line; show of op-b exits 0."""
    key_file = tmp_path / "audit.key"
    key_file.write_bytes(KEY + b"\n")
    tamper(target)
    done = run_cli(
        tmp_path, "audit", "verify", "--all", "--store", target.spec,
        "--audit-key-file", str(key_file),
    )  # fmt: skip
    assert done.returncode == 6, done.stderr
    where = f" at event {seq}" if seq is not None else ""
    assert done.stdout.splitlines() == [done.stdout.strip()]
    assert done.stdout.startswith(f"op-a: {problem.value}{where}: ")
    assert done.stderr == ""
    env = cli_env(tmp_path, WAITBOUND_AUDIT_KEY_FILE=str(key_file))
    shown = run_cli(tmp_path, "show", "op-a", "--store", target.spec, env=env)
    assert shown.returncode == 6
    assert shown.stderr.startswith(f"waitbound: error: audit chain broken: op-a: {problem.value}")
    assert len(shown.stderr.splitlines()) == 1
    assert "Traceback" not in shown.stderr
    assert run_cli(tmp_path, "show", "op-b", "--store", target.spec, env=env).returncode == 0


def test_an_intact_store_verifies_with_and_without_the_key(target: Target, tmp_path: Path) -> None:
    """Untouched: exit 0, one line saying how many operations and whether heads were
    authenticated; --json says so too."""
    done = run_cli(tmp_path, "audit", "verify", "--all", "--store", target.spec)
    assert (done.returncode, done.stderr) == (0, "")
    assert (
        done.stdout
        == "audit intact: 2 operations checked (no audit key: heads not authenticated)\n"
    )
    env = cli_env(tmp_path, WAITBOUND_AUDIT_KEY=KEY.decode())
    keyed = run_cli(tmp_path, "audit", "verify", "op-a", "--json", "--store", target.spec, env=env)
    assert keyed.returncode == 0, keyed.stderr
    assert json.loads(keyed.stdout) == {
        "intact": True,
        "operations": 1,
        "authenticated": True,
        "findings": [],
        "checkpoint": None,
    }


def test_a_checkpoint_catches_a_deleted_operation_and_a_rollback(
    target: Target, tmp_path: Path
) -> None:
    """A checkpoint file taken earlier: a whole operation deleted is 'missing', a chain
    cut back with its head (consistent, no key) is 'rolled_back'; the bare digest no
    longer matches either."""
    taken = run_cli(tmp_path, "audit", "checkpoint", "--json", "--store", target.spec)
    assert taken.returncode == 0, taken.stderr
    saved = tmp_path / "checkpoint.json"
    saved.write_text(taken.stdout)
    digest = json.loads(taken.stdout)["digest"]
    assert run_cli(tmp_path, "audit", "verify", "--all", "--checkpoint", digest,
                   "--store", target.spec).returncode == 0  # fmt: skip
    truncate_and_rewrite_head(target)
    target.execute("DELETE FROM audit_events WHERE operation_id = 'op-b'", ())
    target.execute("DELETE FROM operations WHERE operation_id = 'op-b'", ())
    assert target.findings() == []  # each remaining chain is consistent by itself
    done = run_cli(tmp_path, "audit", "verify", "--all", "--checkpoint", str(saved),
                   "--store", target.spec)  # fmt: skip
    assert done.returncode == 6, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[:2] for line in lines] == [
        ["op-a", " rolled_back at event 10"],
        ["op-b", " missing"],
    ]
    bare = run_cli(tmp_path, "audit", "verify", "--all", "--checkpoint", digest,
                   "--store", target.spec)  # fmt: skip
    assert bare.returncode == 6
    assert bare.stdout.startswith("store: the store's digest ")


def test_export_writes_every_event_as_one_json_line(target: Target, tmp_path: Path) -> None:
    """audit export --all --jsonl: one object per event with the documented fields; the
    exported chain re-verifies outside the store."""
    done = run_cli(tmp_path, "audit", "export", "--all", "--jsonl", "--store", target.spec)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 2 * EVENTS
    assert list(rows[0]) == [
        "operation_id", "seq", "at", "kind", "summary", "data", "prev_hash", "hash",
    ]  # fmt: skip
    assert [(r["operation_id"], r["seq"]) for r in rows[:2]] == [("op-a", 1), ("op-a", 2)]
    prev = GENESIS_HASH
    for row in rows[:EVENTS]:
        event = waitbound.AuditEvent(
            at=utc(datetime.fromisoformat(row["at"])),
            kind=row["kind"],
            summary=row["summary"],
            data=row["data"],
        )
        assert row["prev_hash"] == prev
        assert seal("op-a", row["seq"], event, prev).hash == row["hash"]
        prev = row["hash"]


def test_a_forged_outcome_is_never_reported_as_authenticated(
    target: Target, tmp_path: Path
) -> None:
    """The record's outcome changed from succeeded to failed by raw SQL, the chain left
    intact: with the key, `show` exits 6 naming forged_record (never "head
    authenticated"), and `wait --operation-id` refuses it in one line (exit 5) instead
    of reporting the forged outcome."""
    forge_outcome(target)
    env = cli_env(tmp_path, WAITBOUND_AUDIT_KEY=KEY.decode())
    shown = run_cli(tmp_path, "show", "op-a", "--store", target.spec, env=env)
    assert shown.returncode == 6
    assert "head authenticated" not in shown.stdout
    assert shown.stderr.startswith("waitbound: error: audit chain broken: op-a: forged_record")
    waited = run_cli(tmp_path, "wait", "--operation-id", "op-a", "--store", target.spec, env=env)
    assert waited.returncode == 5, (waited.stdout, waited.stderr)
    assert "does not match its audit MAC" in waited.stderr
    assert len(waited.stderr.splitlines()) == 1
    assert "failed" not in waited.stdout
    fine = run_cli(tmp_path, "wait", "--operation-id", "op-b", "--store", target.spec, env=env)
    assert fine.returncode == 0, fine.stderr


def test_a_version_1_mac_keeps_verifying_and_the_next_keyed_write_signs_version_2(
    target: Target,
) -> None:
    """A head signed by the release before (version 1: operation id, seq and head only)
    verifies with the key; a keyed write extending it signs version 2, which covers the
    asserted fields from then on."""
    from waitbound._model._audit import MAC_V2, head_mac

    store = target.open(None)
    try:
        record = store.get("op-a")
    finally:
        store.close()
    assert record is not None
    assert (record.audit_mac or "").startswith(MAC_V2)
    old = head_mac(KEY, "op-a", record.audit_seq, record.audit_head)
    target.set_record({"audit_mac": old})
    assert target.findings(KEY) == []
    store = target.open(KEY)
    try:
        fresh = store.get("op-a")
        assert fresh is not None
        event = waitbound.AuditEvent(at=fresh.created_at, kind="noted", summary="a note")
        saved = store.save(fresh, [event])
    finally:
        store.close()
    assert (saved.audit_mac or "").startswith(MAC_V2)
    assert target.findings(KEY) == []
    forge_outcome(target)
    assert [f.problem for f in target.findings(KEY)] == [AuditProblem.FORGED_RECORD]
