"""The Store contract, run against every store; then what only the SQLite file adds.

The parametrized suite talks to the :class:`waitbound.Store` protocol only: memory,
SQLite and PostgreSQL (a fresh schema per test on ``$WAITBOUND_TEST_PG_DSN``; skipped
when the server cannot be reached, failed instead when ``$CI`` is set). A new backend
joins by adding one entry to ``_BACKENDS``.
"""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import waitbound
from tests.stores import pg
from waitbound import (
    AuditEvent,
    ConflictError,
    DelaySource,
    MemoryStore,
    OutcomeKind,
    Phase,
    Policy,
    Reason,
    Record,
    SchemaVersionError,
    SQLiteStore,
    Store,
    StoreError,
    UsageError,
)

T0 = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


@dataclass
class Backend:
    """One database of one store kind; :meth:`open` opens another store on it."""

    kind: str
    opener: Callable[[], Store]
    shareable: bool
    """Whether one store object may be used from several threads at once."""
    opened: list[Store] = field(default_factory=list)

    def open(self) -> Store:
        """Open a store on this backend's database (closed when the test ends)."""
        store = self.opener()
        self.opened.append(store)
        return store


@contextmanager
def _memory(tmp_path: Path) -> Iterator[Backend]:
    shared = MemoryStore()  # "the same database" is the same object
    yield Backend("memory", lambda: shared, shareable=True)


@contextmanager
def _sqlite(tmp_path: Path) -> Iterator[Backend]:
    # SQLiteStore keeps one connection and no lock: one store per thread.
    yield Backend("sqlite", lambda: SQLiteStore(tmp_path / "s.db"), shareable=False)


@contextmanager
def _postgres(tmp_path: Path) -> Iterator[Backend]:
    from waitbound.stores.postgres import PostgresStore

    with pg.fresh_schema() as schema:
        yield Backend(
            "postgres", lambda: PostgresStore(pg.DSN, schema=schema, max_size=4), shareable=True
        )


_BACKENDS: dict[str, Callable[[Path], AbstractContextManager[Backend]]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "postgres": _postgres,
}


@pytest.fixture(params=sorted(_BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Every store backend's database, fresh and empty; its stores are closed afterwards."""
    with _BACKENDS[request.param](tmp_path) as opened:
        try:
            yield opened
        finally:
            for store in opened.opened:
                store.close()


@pytest.fixture
def store(backend: Backend) -> Store:
    """Every store backend, fresh and empty."""
    return backend.open()


FULL_PROFILE: dict[str, Any] = {
    "state": "status",
    "pending": ["queued", "running"],
    "succeeded": ["completed"],
    "partial": ["completed_with_errors"],
    "failed": ["failed"],
    "canceled": ["cancelled"],
    "expired": ["expired"],
    "require_on_success": ["output_file_id"],
    "job_id": "id",
    "result": "output",
    "error": "error",
    "poll_hint": "poll_after_seconds",
    "counts": {"succeeded": "counts.ok", "failed": ["counts.bad", "counts.lost"]},
    "http_status_states": {"202": "pending"},
    "hint_headers": {"X-Poll-Interval": "s"},
    "request_id_headers": ["x-request-id"],
    "result_id": "output_file_id",
    "result_url_template": "/files/{result_id}/content",
}


def make_record(operation_id: str = "op-1", **changes: Any) -> Record:
    """A new, waiting record (version 0) with aware-UTC instants."""
    base = Record(
        operation_id=operation_id,
        profile=waitbound.parse_profile(
            {"state": "status", "pending": ["running"], "succeeded": ["done"]}, name="demo"
        ),
        policy=Policy(),
        status_url="https://provider.example/v1/jobs/42",
        created_at=T0,
        deadline_at=T0 + timedelta(minutes=10),
        next_poll_at=T0,
    )
    return replace(base, **changes)


def full_record(operation_id: str = "op-full") -> Record:
    """A finished record with every field set to a non-default value."""
    return make_record(
        operation_id,
        profile=waitbound.parse_profile(FULL_PROFILE, name="batch"),
        policy=Policy(
            deadline_s=90.5,
            max_requests=7,
            max_transport_failures=2,
            max_rate_limited=4,
            base_delay_s=0.25,
            max_delay_s=30.0,
            min_delay_s=0.1,
            not_found_grace_s=12.0,
            request_timeout_s=8.5,
            confirm_window_s=3.0,
            confirm_max_requests=1,
            hint_jitter=0.05,
            lease_s=7.0,
        ),
        result_url="https://provider.example/v1/files/f-9/content",
        job_id="job-42",
        label="mcp:batch",
        phase=Phase.DONE,
        outcome=OutcomeKind.COMPLETED_WITH_ERRORS,
        reason=Reason.CONTRADICTION,
        settled_outcome=OutcomeKind.SUCCEEDED,
        provider_state="completed_with_errors",
        progress={"percent": 99.5, "stage": "écriture ✓"},
        last_http_status=200,
        last_request_id="req-abc",
        last_observed_at=T0 + timedelta(seconds=61, microseconds=7),
        job_seen_at=T0 + timedelta(seconds=5),
        delay_source=DelaySource.PROVIDER_RETRY_AFTER,
        attempt=4,
        status_requests_used=5,
        transport_failures_used=1,
        rate_limited_used=2,
        result_requests_used=1,
        success_seen_at=T0 + timedelta(seconds=60),
        confirm_requests_used=1,
        in_flight="result",
        result={"rows": [1, 2.5, None, True, "x"], "nested": {"k": []}},
        error={"code": "E_PARTIAL", "message": "2 of 10 rows failed"},
        counts={"succeeded": 8, "failed": 2, "total": 10},
        finished_at=T0 + timedelta(seconds=62),
        result_fetched_at=T0 + timedelta(seconds=62),
        lease_owner="host:123:abcd",
        lease_expires_at=T0 + timedelta(seconds=70),
    )


def events(*kinds: str, start_s: int = 0) -> list[AuditEvent]:
    """One audit event per kind, a second apart, with machine data."""
    return [
        AuditEvent(
            at=T0 + timedelta(seconds=start_s + i),
            kind=kind,
            summary=f"{kind} number {start_s + i}",
            data={"n": start_s + i, "state": "running", "ratio": 0.5, "note": None},
        )
        for i, kind in enumerate(kinds)
    ]


def chain_fingerprint(store: Store, operation_id: str) -> list[tuple[int, str, str]]:
    """What identifies a stored audit log: (seq, prev_hash, hash) per event."""
    return [(s.seq, s.prev_hash, s.hash) for s in store.audit(operation_id)]


# ---------------------------------------------------------------------------- create / get


def test_create_returns_version_one_and_get_returns_it(store: Store) -> None:
    """create stores version 1 and get returns a record equal to what create returned."""
    record = make_record()
    created = store.create(record, events("created"))
    assert created.version == 1
    head = store.audit("op-1")[-1]
    assert (created.audit_seq, created.audit_head) == (head.seq, head.hash)
    assert (
        created.to_json()
        == replace(record, version=1, audit_seq=head.seq, audit_head=head.hash).to_json()
    )
    got = store.get("op-1")
    assert got is not None
    assert got.to_json() == created.to_json()


def test_create_twice_is_a_usage_error_and_keeps_the_first(store: Store) -> None:
    """A second create with the same id raises UsageError and changes nothing stored."""
    first = store.create(make_record(), events("created"))
    before = chain_fingerprint(store, "op-1")
    with pytest.raises(UsageError, match="op-1"):
        store.create(make_record(job_id="other", status_url="https://x.example/s"), events("x"))
    got = store.get("op-1")
    assert got is not None
    assert got.to_json() == first.to_json()
    assert chain_fingerprint(store, "op-1") == before


def test_get_unknown_is_none_and_audit_unknown_is_empty(store: Store) -> None:
    """get of an unknown id returns None; its audit log is empty."""
    store.create(make_record("op-known"), events("created"))
    assert store.get("op-unknown") is None
    assert store.audit("op-unknown") == []


@pytest.mark.parametrize(
    "record",
    [make_record("op-defaults"), full_record()],
    ids=["defaults", "every-field"],
)
def test_round_trip_keeps_every_field(store: Store, record: Record) -> None:
    """A record comes back from the store with every field, type and instant intact."""
    store.create(record, [])
    got = store.get(record.operation_id)
    assert got is not None
    assert got.to_json() == replace(record, version=1).to_json()
    assert got.profile.name == record.profile.name
    assert dict(got.profile.source) == dict(record.profile.source)
    assert got.policy == record.policy
    for name in ("phase", "outcome", "reason", "settled_outcome", "delay_source"):
        assert getattr(got, name) == getattr(record, name), name
        assert type(getattr(got, name)) is type(getattr(record, name)), name
    for name in (
        "created_at",
        "deadline_at",
        "next_poll_at",
        "last_observed_at",
        "job_seen_at",
        "success_seen_at",
        "finished_at",
        "result_fetched_at",
        "lease_expires_at",
    ):
        value = getattr(got, name)
        assert value == getattr(record, name), name
        assert value is None or value.utcoffset() == timedelta(0), name
    for name in ("result", "error", "counts", "progress", "provider_state", "in_flight"):
        assert getattr(got, name) == getattr(record, name), name


def test_round_trip_profile_still_classifies(store: Store) -> None:
    """The stored profile is a working state table, not just its text."""
    store.create(full_record(), [])
    got = store.get("op-full")
    assert got is not None
    assert got.profile.classify_value("running") is waitbound.Classification.PENDING
    assert got.profile.classify_value("failed") is waitbound.Classification.FAILED
    assert got.profile.classify_value("mystery") is waitbound.Classification.UNKNOWN


# ---------------------------------------------------------------------------- save


def test_save_with_current_version_bumps_it(store: Store) -> None:
    """save with the stored version writes the change and returns version + 1."""
    created = store.create(make_record(), events("created"))
    changed = replace(created, provider_state="running", status_requests_used=1)
    saved = store.save(changed, events("observed", start_s=1))
    assert saved.version == 2
    head = store.audit("op-1")[-1]
    assert head.seq == 2
    assert (
        saved.to_json()
        == replace(changed, version=2, audit_seq=head.seq, audit_head=head.hash).to_json()
    )
    got = store.get("op-1")
    assert got is not None
    assert got.to_json() == saved.to_json()
    again = store.save(replace(saved, attempt=3), [])
    assert again.version == 3
    stored = store.get("op-1")
    assert stored is not None
    assert stored.version == 3
    assert stored.attempt == 3


@pytest.mark.parametrize("stale_version", [0, 1, 3, 99])
def test_save_with_stale_version_conflicts_and_changes_nothing(
    store: Store, stale_version: int
) -> None:
    """save with any version but the stored one raises ConflictError; record and audit stay."""
    created = store.create(make_record(), events("created"))
    current = store.save(replace(created, provider_state="running"), events("observed"))
    assert current.version == 2
    before = chain_fingerprint(store, "op-1")
    loser = replace(current, version=stale_version, provider_state="done", attempt=9)
    with pytest.raises(ConflictError) as caught:
        store.save(loser, events("lost-write", start_s=10))
    assert caught.value.operation_id == "op-1"
    assert caught.value.expected_version == stale_version
    got = store.get("op-1")
    assert got is not None
    assert got.to_json() == current.to_json()
    assert chain_fingerprint(store, "op-1") == before


def test_save_of_unknown_operation_is_refused_and_creates_nothing(store: Store) -> None:
    """save of a record that was never created raises StoreError and stores nothing."""
    with pytest.raises(StoreError):
        store.save(make_record("op-ghost", version=1), events("observed"))
    assert store.get("op-ghost") is None
    assert store.audit("op-ghost") == []


# ---------------------------------------------------------------------------- audit


@pytest.mark.parametrize(
    "batches",
    [
        [["created"]],
        [["created", "scheduled", "reserved"]],
        [["created"], ["reserved", "observed"], [], ["scheduled"], ["finished"]],
        [[], ["resumed"], ["reserved", "observed", "scheduled"]],
    ],
    ids=["one", "one-batch", "several-saves", "empty-create"],
)
def test_audit_is_one_ordered_chain_across_saves(store: Store, batches: list[list[str]]) -> None:
    """Events from create and every save come back in order, seq 1..n, as one valid chain."""
    written: list[AuditEvent] = []
    offset = 0
    record: Record | None = None
    for i, kinds in enumerate(batches):
        batch = events(*kinds, start_s=offset)
        offset += len(kinds)
        written += batch
        if i == 0:
            record = store.create(make_record(), batch)
        else:
            assert record is not None
            record = store.save(replace(record, attempt=i), batch)
    stored = store.audit("op-1")
    assert [s.seq for s in stored] == list(range(1, len(written) + 1))
    assert [s.event for s in stored] == written
    assert all(s.operation_id == "op-1" for s in stored)
    for earlier, later in itertools.pairwise(stored):
        assert later.prev_hash == earlier.hash
    waitbound.verify_chain(stored)


def test_conflicting_save_leaves_the_chain_continuable(store: Store) -> None:
    """After a lost write, the next good save continues the chain at the right seq."""
    created = store.create(make_record(), events("created"))
    with pytest.raises(ConflictError):
        store.save(replace(created, version=5), events("lost-1", "lost-2"))
    store.save(created, events("observed", start_s=1))
    stored = store.audit("op-1")
    assert [(s.seq, s.event.kind) for s in stored] == [(1, "created"), (2, "observed")]
    waitbound.verify_chain(stored)


def test_operations_have_separate_chains(store: Store) -> None:
    """Interleaved writes to two operations give each its own chain from seq 1."""
    a = store.create(make_record("op-a"), events("created"))
    b = store.create(make_record("op-b"), events("created", "scheduled"))
    a = store.save(a, events("observed", start_s=5))
    b = store.save(b, events("observed", start_s=6))
    store.save(a, events("finished", start_s=7))
    for operation_id, kinds in (
        ("op-a", ["created", "observed", "finished"]),
        ("op-b", ["created", "scheduled", "observed"]),
    ):
        stored = store.audit(operation_id)
        assert [s.event.kind for s in stored] == kinds
        assert [s.seq for s in stored] == [1, 2, 3]
        waitbound.verify_chain(stored)


def test_tampered_chain_is_detected_by_verify_chain(store: Store) -> None:
    """verify_chain refuses a stored log whose events were reordered."""
    store.create(make_record(), events("created", "reserved", "observed"))
    stored = store.audit("op-1")
    waitbound.verify_chain(stored)
    with pytest.raises(StoreError, match="broken"):
        waitbound.verify_chain([stored[0], stored[2], stored[1]])


def test_round_trip_keeps_json_values_exactly(store: Store) -> None:
    """Provider JSON comes back with its exact types: big floats, -0.0, NUL, non-ASCII.

    Regression: PostgreSQL ``jsonb`` turns ``1e+16`` into an integer and ``-0.0`` into
    ``0.0`` (breaking the audit hashes) and refuses ``\\u0000``; the store uses ``json``.
    """
    odd: dict[str, Any] = {
        "big": 1e16,
        "tiny": 5e-324,
        "neg_zero": -0.0,
        "one": 1.0,
        "int": 10**20,
        "nul": "a\u0000b",
        "text": "écriture ✓ \U0001f680",
        "order": {"b": 1, "a": [True, None, 2.5]},
    }
    created = store.create(
        make_record(result=odd, error={"detail": "x\u0000y"}),
        [AuditEvent(at=T0, kind="observed", summary="odd values", data=odd)],
    )
    got = store.get("op-1")
    assert got is not None
    assert got.to_json() == created.to_json()
    assert json.dumps(got.result, sort_keys=True) == json.dumps(odd, sort_keys=True)
    stored = store.audit("op-1")
    assert json.dumps(dict(stored[0].event.data), sort_keys=True) == json.dumps(odd, sort_keys=True)
    waitbound.verify_chain(stored, head=(got.audit_seq, got.audit_head))


# ---------------------------------------------------------------------------- claim_due

NOW = T0 + timedelta(minutes=1)


def _claim(store: Store, owner: str = "w1", now: datetime = NOW, limit: int = 10) -> list[str]:
    return [r.operation_id for r in store.claim_due(owner=owner, now=now, lease_s=30, limit=limit)]


def test_claim_due_leases_a_due_operation_and_changes_nothing_else(store: Store) -> None:
    """A claim writes owner, expiry (now + lease_s) and version + 1; no audit event."""
    created = store.create(make_record(next_poll_at=NOW - timedelta(seconds=5)), events("created"))
    before = chain_fingerprint(store, "op-1")
    [taken] = store.claim_due(owner="w1", now=NOW, lease_s=12.5, limit=10)
    expected = replace(
        created, version=2, lease_owner="w1", lease_expires_at=NOW + timedelta(seconds=12.5)
    )
    assert taken.to_json() == expected.to_json()
    got = store.get("op-1")
    assert got is not None
    assert got.to_json() == expected.to_json()
    assert chain_fingerprint(store, "op-1") == before


NOT_CLAIMABLE: dict[str, dict[str, Any]] = {
    "not-due": {"next_poll_at": NOW + timedelta(microseconds=1)},
    "finished": {
        "phase": Phase.DONE,
        "outcome": OutcomeKind.SUCCEEDED,
        "finished_at": T0,
        "next_poll_at": T0,
    },
    "submitting": {"phase": Phase.SUBMITTING},
    "leased": {"lease_owner": "w0", "lease_expires_at": NOW + timedelta(microseconds=1)},
    "finished-while-fetching": {"phase": Phase.DONE, "outcome": OutcomeKind.FAILED},
}


@pytest.mark.parametrize("changes", NOT_CLAIMABLE.values(), ids=list(NOT_CLAIMABLE))
def test_claim_due_leaves_what_is_not_claimable(store: Store, changes: dict[str, Any]) -> None:
    """Not due, finished, submitting, or leased by someone else: not claimed, not changed."""
    created = store.create(make_record(**changes), [])
    assert _claim(store) == []
    got = store.get("op-1")
    assert got is not None
    assert got.to_json() == created.to_json()


CLAIMABLE: dict[str, dict[str, Any]] = {
    "due-exactly-now": {"next_poll_at": NOW},
    "overdue": {"next_poll_at": T0 - timedelta(days=3)},
    "lease-expired-exactly-now": {"lease_owner": "w0", "lease_expires_at": NOW},
    "lease-expired-long-ago": {"lease_owner": "w0", "lease_expires_at": T0},
    "fetching-result": {"phase": Phase.FETCHING_RESULT},
    "fetching-errors": {"phase": Phase.FETCHING_ERRORS},
}


@pytest.mark.parametrize("changes", CLAIMABLE.values(), ids=list(CLAIMABLE))
def test_claim_due_takes_what_is_due_and_free(store: Store, changes: dict[str, Any]) -> None:
    """Due (next_poll_at <= now), in a drivable phase, with no lease or an expired one."""
    store.create(make_record(**changes), [])
    assert _claim(store) == ["op-1"]
    got = store.get("op-1")
    assert got is not None
    assert (got.lease_owner, got.lease_expires_at) == ("w1", NOW + timedelta(seconds=30))


def test_claim_due_takes_the_oldest_due_first_up_to_the_limit(store: Store) -> None:
    """Claims come earliest next_poll_at first, at most *limit* a time, each once."""
    offsets = [4, 1, 3, 0, 2, 9]  # 9: due only 4 s later
    for i, offset in enumerate(offsets):
        at = NOW - timedelta(seconds=50) + timedelta(seconds=offset)
        store.create(make_record(f"op-{offset}", next_poll_at=at, job_id=str(i)), [])
    now = NOW - timedelta(seconds=45)
    assert _claim(store, now=now, limit=0) == []
    assert _claim(store, now=now, limit=2) == ["op-0", "op-1"]
    assert _claim(store, now=now, limit=2) == ["op-2", "op-3"]
    assert _claim(store, now=now, limit=2) == ["op-4"]
    assert _claim(store, now=now, limit=2) == []
    assert _claim(store, now=now + timedelta(seconds=4), limit=2) == ["op-9"]


def test_claim_due_with_a_label_prefix_takes_only_those_operations(store: Store) -> None:
    for n, label in enumerate(["mcp:a", None, "MCP:b", "mcp:c", "mcpx"]):
        store.create(make_record(f"op-{n}", label=label, next_poll_at=NOW - timedelta(n)), [])
    labelled = store.claim_due(owner="w", now=NOW, lease_s=30, limit=10, label_prefix="mcp:")
    assert sorted(r.operation_id for r in labelled) == ["op-0", "op-3"]
    rest = store.claim_due(owner="w", now=NOW, lease_s=30, limit=10)
    assert sorted(r.operation_id for r in rest) == ["op-1", "op-2", "op-4"]


def test_claim_due_holds_until_the_lease_expires(store: Store) -> None:
    """A second owner gets nothing while the lease runs, and the operation once it ends."""
    store.create(make_record(), [])
    assert _claim(store, owner="w1") == ["op-1"]
    assert _claim(store, owner="w2") == []
    assert _claim(store, owner="w2", now=NOW + timedelta(seconds=29)) == []
    later = NOW + timedelta(seconds=30)
    assert _claim(store, owner="w2", now=later) == ["op-1"]
    got = store.get("op-1")
    assert got is not None
    assert (got.lease_owner, got.version) == ("w2", 3)


def test_a_claim_makes_an_earlier_read_stale(store: Store) -> None:
    """A writer holding the record from before a claim loses its save (ConflictError)."""
    created = store.create(make_record(), [])
    [taken] = store.claim_due(owner="w1", now=NOW, lease_s=30, limit=1)
    with pytest.raises(ConflictError):
        store.save(replace(created, attempt=1), events("lost"))
    saved = store.save(replace(taken, attempt=1, lease_owner=None, lease_expires_at=None), [])
    assert saved.version == 3


def test_claims_from_many_threads_take_each_operation_exactly_once(backend: Backend) -> None:
    """200 due operations, 4 threads on two or more stores of one database claiming 10 at
    a time until none are left: every operation is claimed exactly once."""
    stores = [backend.open() for _ in range(2 if backend.shareable else 4)]
    ids = [f"op-{i:03}" for i in range(200)]
    rng = random.Random(7)
    for i, operation_id in enumerate(ids):
        at = T0 + timedelta(seconds=rng.randrange(60), microseconds=i)
        stores[0].create(make_record(operation_id, next_poll_at=at), [])
    claims: dict[str, list[str]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(4)

    def claim_all(worker: int) -> None:
        mine = claims.setdefault(f"w{worker}", [])
        try:
            start.wait()
            while batch := stores[worker % len(stores)].claim_due(
                owner=f"w{worker}", now=NOW, lease_s=300, limit=10
            ):
                mine += [r.operation_id for r in batch]
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=claim_all, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    taken = [operation_id for mine in claims.values() for operation_id in mine]
    assert sorted(taken) == ids
    for owner, mine in claims.items():
        for operation_id in mine:
            got = stores[1].get(operation_id)
            assert got is not None
            assert got.lease_owner == owner


# ---------------------------------------------------------------------------- pending_summary


def test_pending_summary_of_an_empty_store(store: Store) -> None:
    """No operations: (0, None)."""
    assert store.pending_summary() == (0, None)


def test_pending_summary_counts_open_operations_and_the_earliest_drivable(store: Store) -> None:
    """Counts every operation without an outcome; the earliest next_poll_at is taken among
    drivable phases only (leases do not matter; submitting and finished ones are left out)."""
    store.create(make_record("a", next_poll_at=T0 + timedelta(seconds=30)), [])
    store.create(
        make_record(
            "b",
            next_poll_at=T0 + timedelta(seconds=10, microseconds=5),
            lease_owner="w1",
            lease_expires_at=T0 + timedelta(hours=1),
        ),
        [],
    )
    store.create(
        make_record("c", phase=Phase.FETCHING_RESULT, next_poll_at=T0 + timedelta(seconds=20)), []
    )
    store.create(
        make_record(
            "d",
            phase=Phase.DONE,
            outcome=OutcomeKind.SUCCEEDED,
            next_poll_at=T0 - timedelta(days=1),
        ),
        [],
    )
    store.create(make_record("e", phase=Phase.SUBMITTING, next_poll_at=T0 - timedelta(hours=1)), [])
    count, earliest = store.pending_summary()
    assert count == 4
    assert earliest == T0 + timedelta(seconds=10, microseconds=5)
    assert earliest is not None
    assert earliest.utcoffset() == timedelta(0)


def test_pending_summary_without_drivable_operations(store: Store) -> None:
    """Only a submitting operation open: counted, but no earliest poll time."""
    store.create(make_record("e", phase=Phase.SUBMITTING), [])
    store.create(make_record("d", phase=Phase.DONE, outcome=OutcomeKind.CANCELED), [])
    assert store.pending_summary() == (1, None)


# ---------------------------------------------------------------------------- SQLite only


def _raw(path: Path, *statements: tuple[str, Sequence[object]]) -> None:
    """Run SQL against the file directly, as an outside editor would."""
    db = sqlite3.connect(path)
    try:
        with db:
            for sql, params in statements:
                db.execute(sql, params)
    finally:
        db.close()


def _stored_with_events(path: Path) -> None:
    store = SQLiteStore(path)
    try:
        created = store.create(make_record(), events("created", "reserved"))
        store.save(created, events("observed", "scheduled", "finished", start_s=2))
    finally:
        store.close()


def test_sqlite_data_survives_close_and_reopen(tmp_path: Path) -> None:
    """A record and its audit log are read back intact from a reopened file."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    created = store.create(full_record(), events("created"))
    saved = store.save(replace(created, attempt=5), events("observed", start_s=1))
    written = store.audit("op-full")
    store.close()

    reopened = SQLiteStore(path)
    try:
        got = reopened.get("op-full")
        assert got is not None
        assert got.to_json() == saved.to_json()
        again = reopened.audit("op-full")
        assert again == written
        waitbound.verify_chain(again)
        assert reopened.save(got, []).version == 3
    finally:
        reopened.close()


def test_sqlite_second_connection_with_stale_read_loses(tmp_path: Path) -> None:
    """Two stores on one file: the writer holding a stale version gets ConflictError."""
    path = tmp_path / "s.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    try:
        created = first.create(make_record(), events("created"))
        seen_by_second = second.get("op-1")
        assert seen_by_second is not None
        first.save(replace(created, attempt=1), events("observed", start_s=1))
        with pytest.raises(ConflictError):
            second.save(replace(seen_by_second, attempt=2), events("lost", start_s=2))
        got = second.get("op-1")
        assert got is not None
        assert got.attempt == 1
        assert [s.event.kind for s in second.audit("op-1")] == ["created", "observed"]
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize(
    ("sql", "found"),
    [
        ("UPDATE audit_events SET summary = 'nothing happened' WHERE seq = 2", "edited at event 2"),
        ("UPDATE audit_events SET kind = 'succeeded' WHERE seq = 3", "edited at event 3"),
        ("UPDATE audit_events SET data = '{\"n\": 7}' WHERE seq = 4", "edited at event 4"),
        (
            "UPDATE audit_events SET at = '2030-01-01T00:00:00+00:00' WHERE seq = 1",
            "edited at event 1",
        ),
        ("DELETE FROM audit_events WHERE seq = 3", "deleted at event 3"),
        ("DELETE FROM audit_events WHERE seq = 1", "deleted at event 1"),
    ],
    ids=["edit-summary", "edit-kind", "edit-data", "edit-time", "drop-middle", "drop-first"],
)
def test_sqlite_edited_audit_rows_break_the_chain(tmp_path: Path, sql: str, found: str) -> None:
    """Editing or deleting an audit row behind the store's back makes verify_chain fail,
    naming the first bad event and what was done to it."""
    path = tmp_path / "s.db"
    _stored_with_events(path)
    _raw(path, (sql, ()))
    store = SQLiteStore(path)
    try:
        stored = store.audit("op-1")
    finally:
        store.close()
    with pytest.raises(StoreError, match=f"broken: op-1: {found}:"):
        waitbound.verify_chain(stored)


def test_recent_lists_newest_first_filtered_by_label_prefix(store: Store) -> None:
    for n, label in enumerate(["mcp:a", None, "mcp:b", "MCP:c", "mcp_x", "mcp:a"]):
        at = T0 + timedelta(seconds=n)
        store.create(make_record(f"op-{n}", label=label, created_at=at), [])
    assert [r.operation_id for r in store.recent(label_prefix="mcp:")] == ["op-5", "op-2", "op-0"]
    assert [r.operation_id for r in store.recent(label_prefix="mcp:a", limit=1)] == ["op-5"]
    assert len(store.recent()) == 6
    assert store.recent(label_prefix="%") == []
    finished = replace(store.get("op-5") or make_record(), outcome=OutcomeKind.FAILED)
    store.save(replace(finished, phase=Phase.DONE), [])
    assert [r.operation_id for r in store.recent(label_prefix="mcp:", open_only=True)] == [
        "op-2",
        "op-0",
    ]


def test_sqlite_untouched_chain_verifies(tmp_path: Path) -> None:
    """The same file, unedited, passes verify_chain (the tamper tests' control)."""
    path = tmp_path / "s.db"
    _stored_with_events(path)
    store = SQLiteStore(path)
    try:
        stored = store.audit("op-1")
    finally:
        store.close()
    assert len(stored) == 5
    waitbound.verify_chain(stored)


def test_sqlite_newer_file_schema_is_refused_with_upgrade_advice(tmp_path: Path) -> None:
    """A file whose user_version is newer raises SchemaVersionError saying to upgrade."""
    path = tmp_path / "s.db"
    _stored_with_events(path)
    _raw(path, ("PRAGMA user_version = 99", ()))
    with pytest.raises(SchemaVersionError, match="upgrade") as caught:
        SQLiteStore(path)
    assert "99" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_sqlite_newer_record_schema_is_refused_on_get(tmp_path: Path) -> None:
    """A stored record JSON with a newer "schema" raises SchemaVersionError on get."""
    path = tmp_path / "s.db"
    _stored_with_events(path)
    db = sqlite3.connect(path)
    try:
        (text,) = db.execute("SELECT data FROM operations WHERE operation_id = 'op-1'").fetchone()
    finally:
        db.close()
    data = json.loads(text)
    assert data["schema"] == 1
    data["schema"] = 99
    _raw(path, ("UPDATE operations SET data = ? WHERE operation_id = 'op-1'", (json.dumps(data),)))
    store = SQLiteStore(path)
    try:
        with pytest.raises(SchemaVersionError, match="upgrade"):
            store.get("op-1")
    finally:
        store.close()


def test_sqlite_file_that_is_not_a_database_is_a_one_line_store_error(tmp_path: Path) -> None:
    """Opening a file of garbage bytes raises a one-line StoreError naming the file."""
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database at all\n" * 200)
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path)
    assert not isinstance(caught.value, SchemaVersionError)
    message = str(caught.value)
    assert "\n" not in message
    assert "garbage.db" in message


def test_sqlite_path_under_a_file_is_a_one_line_store_error(tmp_path: Path) -> None:
    """A store path whose parent is a regular file raises a one-line StoreError."""
    parent = tmp_path / "plain-file"
    parent.write_text("not a folder")
    with pytest.raises(StoreError) as caught:
        SQLiteStore(parent / "s.db")
    message = str(caught.value)
    assert "\n" not in message
    assert "s.db" in message
