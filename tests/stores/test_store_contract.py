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
from tests.records import with_fields
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
from waitbound._model._audit import StoredAuditEvent
from waitbound._model._push import (
    Channel,
    InboundDelivery,
    OutboxEntry,
    OutboxStatus,
    completion_delivery_id,
)
from waitbound._model._record import (
    Contract,
    DecisionRequest,
    Push,
    Schedule,
    Submission,
)
from waitbound._rules._notices import completion_event, outbox_entries
from waitbound.stores._protocol import AuditCursor, cursor_of

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
        contract=Contract(
            operation_id=operation_id,
            profile=(
                waitbound.parse_profile(
                    {"state": "status", "pending": ["running"], "succeeded": ["done"]}, name="demo"
                )
            ),
            policy=Policy(),
            created_at=T0,
        ),
        submission=Submission(status_url="https://provider.example/v1/jobs/42"),
        schedule=Schedule(deadline_at=T0 + timedelta(minutes=10), next_poll_at=T0),
    )
    return with_fields(base, **changes)


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
            schedule="learned",
            schedule_key="batch exports",
            lag_target_s=12.5,
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
        pending_seen_at=T0 + timedelta(seconds=50),
        ended_seen_at=T0 + timedelta(seconds=60),
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
        == record.evolve(
            audit=record.audit.evolve(audit_seq=head.seq, audit_head=head.hash), version=1
        ).to_json()
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
    assert got.to_json() == record.evolve(version=1).to_json()
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
        "pending_seen_at",
        "ended_seen_at",
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
    changed = created.evolve(
        answer=created.answer.evolve(provider_state="running"),
        counters=created.counters.evolve(status_requests_used=1),
    )
    saved = store.save(changed, events("observed", start_s=1))
    assert saved.version == 2
    head = store.audit("op-1")[-1]
    assert head.seq == 2
    assert (
        saved.to_json()
        == changed.evolve(
            audit=changed.audit.evolve(audit_seq=head.seq, audit_head=head.hash), version=2
        ).to_json()
    )
    got = store.get("op-1")
    assert got is not None
    assert got.to_json() == saved.to_json()
    again = store.save(saved.evolve(schedule=saved.schedule.evolve(attempt=3)), [])
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
    current = store.save(
        created.evolve(answer=created.answer.evolve(provider_state="running")), events("observed")
    )
    assert current.version == 2
    before = chain_fingerprint(store, "op-1")
    loser = current.evolve(
        answer=current.answer.evolve(provider_state="done"),
        schedule=current.schedule.evolve(attempt=9),
        version=stale_version,
    )
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
            record = store.save(record.evolve(schedule=record.schedule.evolve(attempt=i)), batch)
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
        store.save(created.evolve(version=5), events("lost-1", "lost-2"))
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
    expected = created.evolve(
        lease=created.lease.held("w1", NOW + timedelta(seconds=12.5)), version=2
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
        store.save(created.evolve(schedule=created.schedule.evolve(attempt=1)), events("lost"))
    saved = store.save(
        taken.evolve(schedule=taken.schedule.evolve(attempt=1), lease=taken.lease.held(None, None)),
        [],
    )
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


# ---------------------------------------------------------------------------- batches


def _leased(record: Record, owner: str, *kinds: str) -> tuple[Record, list[AuditEvent]]:
    """A reservation-like write of *record*: leased to *owner*, a counter bumped."""
    return (
        record.evolve(
            lease=record.lease.held(owner, NOW + timedelta(seconds=7)),
            counters=record.counters.evolve(status_requests_used=record.status_requests_used + 1),
        ),
        events(*kinds),
    )


def test_save_many_writes_each_item_by_its_own_version(store: Store) -> None:
    """A mixed batch: the stale item yields a ConflictError in its slot and writes
    nothing (neither record nor events); the others are written with their events."""
    a = store.create(make_record("a"), events("created"))
    b = store.create(make_record("b"), events("created"))
    c = store.create(make_record("c"), events("created"))
    store.save(b.evolve(schedule=b.schedule.evolve(attempt=9)), events("meanwhile"))  # b moves on
    before_b = chain_fingerprint(store, "b")
    result = store.save_many(
        [
            (
                a.evolve(schedule=a.schedule.evolve(attempt=1)),
                events("observed", "scheduled", start_s=1),
            ),
            (b.evolve(schedule=b.schedule.evolve(attempt=1)), events("lost", start_s=1)),
            (c.evolve(schedule=c.schedule.evolve(attempt=2)), []),
        ]
    )
    stored_a, conflict_b, stored_c = result
    assert isinstance(stored_a, Record)
    assert isinstance(stored_c, Record)
    assert isinstance(conflict_b, ConflictError)
    assert (stored_a.version, stored_a.attempt, stored_c.version) == (2, 1, 2)
    assert [e.event.kind for e in store.audit("a")] == ["created", "observed", "scheduled"]
    assert chain_fingerprint(store, "b") == before_b
    got_b = store.get("b")
    assert got_b is not None
    assert (got_b.attempt, got_b.version) == (9, 2)
    for operation_id, stored in (("a", stored_a), ("c", stored_c)):
        got = store.get(operation_id)
        assert got is not None
        assert got.to_json() == stored.to_json()
        waitbound.verify_chain(store.audit(operation_id), head=(got.audit_seq, got.audit_head))


def test_save_many_of_one_operation_twice_sees_its_own_first_write(store: Store) -> None:
    """Two items for one operation in a batch: the second read before the first loses;
    one read after it (its version) is written on top."""
    created = store.create(make_record(), events("created"))
    first = created.evolve(schedule=created.schedule.evolve(attempt=1))
    on_top = created.evolve(
        schedule=created.schedule.evolve(attempt=2), version=created.version + 1
    )
    stale = created.evolve(schedule=created.schedule.evolve(attempt=3))
    result = store.save_many([(first, events("one")), (stale, events("x")), (on_top, [])])
    assert [type(r).__name__ for r in result] == ["Record", "ConflictError", "Record"]
    got = store.get("op-1")
    assert got is not None
    assert (got.attempt, got.version) == (2, 3)
    assert [e.event.kind for e in store.audit("op-1")] == ["created", "one"]


def test_save_many_of_nothing_and_of_an_unknown_operation(store: Store) -> None:
    """An empty batch writes nothing; an unknown operation conflicts, creating nothing."""
    assert store.save_many([]) == []
    [result] = store.save_many([(make_record("ghost", version=1), events("x"))])
    assert isinstance(result, ConflictError)
    assert store.get("ghost") is None
    assert store.audit("ghost") == []


def test_reserve_due_offers_what_claim_due_would_and_writes_only_what_plan_returns(
    store: Store,
) -> None:
    """plan sees the due, free operations oldest first (up to the limit); its writes are
    stored with their events; a None leaves the record as it was."""
    for offset in (3, 1, 2, 0):
        store.create(
            make_record(f"op-{offset}", next_poll_at=NOW - timedelta(seconds=10 - offset)),
            events("created"),
        )
    for changes in NOT_CLAIMABLE.values():
        store.create(make_record(f"no-{len(changes)}-{id(changes)}", **changes), [])
    offered: list[str] = []

    def plan(record: Record) -> tuple[Record, list[AuditEvent]] | None:
        offered.append(record.operation_id)
        return None if record.operation_id == "op-1" else _leased(record, "w1", "reserved")

    untouched = store.get("op-1")
    taken = store.reserve_due(owner="w1", now=NOW, limit=3, plan=plan)
    assert offered == ["op-0", "op-1", "op-2"]
    assert [r.operation_id for r in taken] == ["op-0", "op-2"]
    for stored in taken:
        got = store.get(stored.operation_id)
        assert got is not None
        assert got.to_json() == stored.to_json()
        assert (got.lease_owner, got.status_requests_used, got.version) == ("w1", 1, 2)
        assert [e.event.kind for e in store.audit(stored.operation_id)] == [
            "created",
            "reserved",
        ]
        waitbound.verify_chain(store.audit(got.operation_id), head=(got.audit_seq, got.audit_head))
    again = store.get("op-1")
    assert untouched is not None
    assert again is not None
    assert again.to_json() == untouched.to_json()
    offered.clear()
    leave = store.reserve_due(
        owner="w2", now=NOW, limit=10, plan=lambda r: offered.append(r.operation_id)
    )
    assert leave == []
    assert offered == ["op-1", "op-3"]  # the reserved ones are leased now


def test_reserve_due_with_a_label_prefix_offers_only_those(store: Store) -> None:
    for n, label in enumerate(["mcp:a", None, "mcpx", "mcp:c"]):
        store.create(make_record(f"op-{n}", label=label, next_poll_at=NOW - timedelta(n)), [])
    seen: list[str] = []

    def plan(record: Record) -> None:
        seen.append(record.operation_id)

    assert store.reserve_due(owner="w", now=NOW, limit=10, plan=plan, label_prefix="mcp:") == []
    assert sorted(seen) == ["op-0", "op-3"]


def test_reserve_due_takes_over_a_lease_whose_holder_is_gone(store: Store) -> None:
    """A lease held by one of gone_owners counts as expired; others' leases hold."""
    store.create(
        make_record("dead", lease_owner="h:1:x", lease_expires_at=NOW + timedelta(hours=1)), []
    )
    store.create(
        make_record("live", lease_owner="h:2:y", lease_expires_at=NOW + timedelta(hours=1)), []
    )

    def plan(record: Record) -> tuple[Record, list[AuditEvent]]:
        return _leased(record, "w1", "reserved")

    assert store.reserve_due(owner="w1", now=NOW, limit=10, plan=plan) == []
    taken = store.reserve_due(owner="w1", now=NOW, limit=10, plan=plan, gone_owners={"h:1:x"})
    assert [r.operation_id for r in taken] == ["dead"]
    assert [r.lease_owner for r in taken] == ["w1"]


# ------------------------------------------------------------- leases are fences


def _reserve(store: Store, owner: str, now: datetime, lease_s: float = 2.0) -> list[Record]:
    """The worker's reservation of what is due at *now*: the controller's plan."""
    from waitbound._rules._controller import Send, plan

    def reserve(record: Record) -> tuple[Record, tuple[AuditEvent, ...]] | None:
        decision = plan(record, now, owner=owner, lease_s=lease_s)
        if not isinstance(decision, Send):
            return None
        return decision.transition.record, decision.transition.events

    return store.reserve_due(owner=owner, now=now, limit=10, plan=reserve)


def test_a_reservations_fencing_token_reads_back_exactly(store: Store) -> None:
    """The fence (owner, request kind, lease expiry to the microsecond) that a
    reservation wrote is what the store gives back, so a later step can tell its own
    reservation from any other."""
    from waitbound._engine._lease import lease_of

    store.create(make_record(), events("created"))
    [reserved] = _reserve(store, "w1", NOW)
    lease = lease_of(reserved, NOW, 0.0)
    assert lease.length_s == 2.0
    assert lease.expires_at == NOW + timedelta(seconds=2)
    assert lease.holds(store.get("op-1"))
    # a write of someone else that keeps the lease (a person's decision) keeps the fence
    got = store.get("op-1")
    assert got is not None
    store.save(got.evolve(schedule=got.schedule.evolve(attempt=got.attempt + 1)), events("decided"))
    assert lease.holds(store.get("op-1"))


def test_a_lease_still_running_is_never_reserved_again_even_by_its_own_owner(
    store: Store,
) -> None:
    """While a reservation's lease runs, no pass reserves the operation again: not
    another worker's, not its own worker's."""
    store.create(make_record(), events("created"))
    assert len(_reserve(store, "w1", NOW)) == 1
    almost = NOW + timedelta(seconds=1.999)
    assert _reserve(store, "w1", almost) == []
    assert _reserve(store, "w2", almost) == []


def test_a_save_from_a_reservation_that_was_taken_over_is_refused(store: Store) -> None:
    """A lease that ran out and was reserved again (by another worker, or by the same
    one): the old reservation's answer loses the compare-and-swap, alone and in a
    batch, and the record carries only the new reservation's fence."""
    from waitbound._engine._lease import lease_of

    store.create(make_record(), events("created"))
    for new_owner in ("w2", "w1"):
        [old] = _reserve(store, "w1", NOW)
        old_lease = lease_of(old, NOW, 0.0)
        later = NOW + timedelta(seconds=3)
        [new] = _reserve(store, new_owner, later)
        assert new.in_flight == "status"
        answered = old.evolve(lease=old.lease.released())
        with pytest.raises(ConflictError):
            store.save(answered, events("observed"))
        [refused] = store.save_many([(answered, events("observed"))])
        assert isinstance(refused, ConflictError)
        current = store.get("op-1")
        assert current is not None
        assert not old_lease.holds(current)
        assert lease_of(new, later, 0.0).holds(current)
        assert "observed" not in [e.event.kind for e in store.audit("op-1")]
        # release the new reservation for the next round
        store.save(current.evolve(lease=current.lease.released()), [])


@pytest.mark.parametrize(
    "bad",
    [
        lambda r: (r.evolve(contract=r.contract.evolve(operation_id="other")), []),
        lambda r: (r.evolve(version=r.version + 1), []),
        lambda r: (r.evolve(lease=r.lease.evolve(lease_owner="someone-else")), []),
    ],
    ids=["another-operation", "another-version", "another-owner"],
)
def test_reserve_due_refuses_a_plan_that_writes_something_else(
    store: Store, bad: Callable[[Record], tuple[Record, list[AuditEvent]]]
) -> None:
    """A write for another operation, version or owner is a UsageError; nothing is written."""
    created = store.create(make_record(), events("created"))
    with pytest.raises(UsageError, match="reserve_due"):
        store.reserve_due(owner="w1", now=NOW, limit=10, plan=bad)
    got = store.get("op-1")
    assert got is not None
    assert got.to_json() == created.to_json()


def test_reserves_from_many_threads_take_each_operation_exactly_once(backend: Backend) -> None:
    """200 due operations, 4 threads reserving 10 at a time until none are left (two or
    more stores of one database): every operation is reserved exactly once."""
    stores = [backend.open() for _ in range(2 if backend.shareable else 4)]
    ids = [f"op-{i:03}" for i in range(200)]
    for i, operation_id in enumerate(ids):
        stores[0].create(make_record(operation_id, next_poll_at=T0 + timedelta(microseconds=i)), [])
    claims: dict[str, list[str]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(4)

    def reserve_all(worker: int) -> None:
        owner = f"w{worker}"
        mine = claims.setdefault(owner, [])
        try:
            start.wait()
            while batch := stores[worker % len(stores)].reserve_due(
                owner=owner,
                now=NOW,
                limit=10,
                plan=lambda r: _leased(r, owner, "reserved"),
            ):
                mine += [r.operation_id for r in batch]
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=reserve_all, args=(w,)) for w in range(4)]
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
            assert (got.lease_owner, got.status_requests_used) == (owner, 1)
            assert [e.event.kind for e in stores[1].audit(operation_id)] == ["reserved"]


def test_next_claimable_is_the_earliest_of_poll_time_and_lease_expiry(store: Store) -> None:
    """The earliest max(next_poll_at, lease_expires_at) among drivable operations, and the
    holders of leases on due operations."""
    assert store.next_claimable(now=NOW) == (None, [])
    store.create(make_record("later", next_poll_at=NOW + timedelta(seconds=20)), [])
    store.create(
        make_record(
            "held",
            next_poll_at=NOW - timedelta(seconds=5),
            lease_owner="h:9:z",
            lease_expires_at=NOW + timedelta(seconds=13),
        ),
        [],
    )
    store.create(
        make_record(
            "held-later",
            next_poll_at=NOW + timedelta(seconds=30),
            lease_owner="h:8:y",
            lease_expires_at=NOW + timedelta(seconds=1),
        ),
        [],
    )
    store.create(make_record("sub", phase=Phase.SUBMITTING, next_poll_at=T0), [])
    assert store.next_claimable(now=NOW) == (NOW + timedelta(seconds=13), ["h:9:z"])
    store.create(make_record("due", next_poll_at=NOW - timedelta(seconds=1), label="x:1"), [])
    assert store.next_claimable(now=NOW) == (NOW - timedelta(seconds=1), ["h:9:z"])
    assert store.next_claimable(now=NOW, label_prefix="x:") == (NOW - timedelta(seconds=1), [])


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


# ---------------------------------------------------------------------------- push: inbox

PROVIDER = "reports"


def delivery(webhook_id: str, job_id: str | None = "job-42", **changes: Any) -> InboundDelivery:
    """A verified delivery about *job_id*, received at T0 unless told otherwise."""
    base = InboundDelivery(
        provider=PROVIDER,
        webhook_id=webhook_id,
        received_at=T0,
        job_id=job_id,
        payload={"type": "job.completed", "data": {"id": job_id, "n": [1, 2.5, None]}},
        event_type="job.completed",
    )
    return replace(base, **changes)


def watched(operation_id: str = "op-1", job_id: str | None = "job-42", **changes: Any) -> Record:
    """A waiting record that expects PROVIDER's webhooks about *job_id*."""
    return make_record(operation_id, job_id=job_id, push=Push(webhook=PROVIDER), **changes)


def matches(store: Store) -> dict[str, str | None]:
    """Each stored delivery's webhook id and the operation it is matched to."""
    return {d.webhook_id: d.operation_id for d in store.inbox(limit=1000)}


def test_put_delivery_stores_a_delivery_once_and_a_duplicate_writes_nothing(store: Store) -> None:
    """The first (provider, webhook id) is stored as given; a repeat is None, not stored."""
    first = delivery("wh-1", authoritative=True, received_at=T0 + timedelta(microseconds=3))
    assert store.put_delivery(first) == first
    again = delivery("wh-1", job_id="job-other", payload={"x": 1}, received_at=T0 + timedelta(1))
    assert store.put_delivery(again) is None
    assert store.inbox() == [first]
    [stored] = store.inbox()
    assert stored.received_at.utcoffset() == timedelta(0)
    other_provider = delivery("wh-1", provider="github")
    assert store.put_delivery(other_provider) == other_provider
    assert sorted(d.provider for d in store.inbox()) == ["github", PROVIDER]


def test_put_deliveries_stores_a_batch_in_order_as_put_delivery_would(store: Store) -> None:
    """One call, many deliveries: each stored and matched as put_delivery stores it, in
    order; a duplicate of an earlier call and of an earlier delivery of the same call
    are both None and write nothing."""
    store.create(watched(), events("created"))
    assert store.put_delivery(delivery("wh-0")) is not None
    batch = [
        delivery("wh-1"),
        delivery("wh-0", payload={"again": True}),  # stored by the call before
        delivery("wh-2", job_id="job-43"),
        delivery("wh-1", job_id="job-43"),  # the same id earlier in this call
        delivery("wh-1", provider="github"),
    ]
    assert store.put_deliveries(batch) == [
        delivery("wh-1", operation_id="op-1"),
        None,
        delivery("wh-2", job_id="job-43"),
        None,
        delivery("wh-1", provider="github"),
    ]
    assert store.put_deliveries([]) == []
    assert {(d.provider, d.webhook_id): d.operation_id for d in store.inbox(limit=1000)} == {
        (PROVIDER, "wh-0"): "op-1",
        (PROVIDER, "wh-1"): "op-1",
        (PROVIDER, "wh-2"): None,
        ("github", "wh-1"): None,
    }
    [kept] = [d for d in store.inbox(limit=1000) if d.webhook_id == "wh-0"]
    assert kept.payload == delivery("wh-0").payload


def test_put_delivery_keeps_odd_payload_values_exactly(store: Store) -> None:
    """A payload comes back with its exact JSON values (big floats, -0.0, NUL, non-ASCII)."""
    odd: dict[str, Any] = {"big": 1e16, "neg_zero": -0.0, "nul": "a\u0000b", "t": "é ✓ 🚀"}
    store.put_delivery(delivery("wh-odd", payload=odd, event_type=None))
    [got] = store.inbox()
    assert json.dumps(got.payload, sort_keys=True) == json.dumps(odd, sort_keys=True)
    assert got.event_type is None


def test_put_delivery_matches_the_operation_registered_for_its_job(store: Store) -> None:
    """A delivery about a recorded job is matched when it is stored; one about another
    job, from another provider, or naming no job, is not."""
    store.create(watched(), events("created"))
    assert store.put_delivery(delivery("wh-1")) == delivery("wh-1", operation_id="op-1")
    store.put_delivery(delivery("wh-2", job_id="job-43"))
    store.put_delivery(delivery("wh-3", provider="github"))
    store.put_delivery(delivery("wh-4", job_id=None))
    assert matches(store) == {"wh-1": "op-1", "wh-2": None, "wh-3": None, "wh-4": None}


def test_a_record_without_push_webhook_is_not_registered(store: Store) -> None:
    """job_id alone (no push.webhook) does not make deliveries about that job match."""
    store.create(make_record(job_id="job-42"), [])
    store.put_delivery(delivery("wh-1"))
    assert matches(store) == {"wh-1": None}


def test_deliveries_before_their_job_is_recorded_are_matched_at_create(store: Store) -> None:
    """Look-back: the create that records the job matches the inbox's unmatched
    deliveries for its (provider, job id), and only those."""
    store.put_delivery(delivery("wh-1"))
    store.put_delivery(delivery("wh-2", received_at=T0 + timedelta(seconds=1)))
    store.put_delivery(delivery("wh-3", job_id="job-43"))
    store.put_delivery(delivery("wh-4", provider="github"))
    assert set(matches(store).values()) == {None}
    store.create(watched(), events("created"))
    assert matches(store) == {"wh-1": "op-1", "wh-2": "op-1", "wh-3": None, "wh-4": None}


def test_deliveries_before_the_job_id_is_known_are_matched_at_save(store: Store) -> None:
    """A record created without its job id (submitting) registers it on the save that
    records it, matching what arrived meanwhile."""
    created = store.create(watched(job_id=None, phase=Phase.SUBMITTING), [])
    store.put_delivery(delivery("wh-1"))
    assert matches(store) == {"wh-1": None}
    store.save(
        created.evolve(
            submission=created.submission.evolve(job_id="job-42"),
            ending=created.ending.evolve(phase=Phase.WAITING),
        ),
        events("submitted"),
    )
    assert matches(store) == {"wh-1": "op-1"}
    assert store.put_delivery(delivery("wh-2")) == delivery("wh-2", operation_id="op-1")


def test_the_newest_write_of_a_job_wins_its_deliveries(store: Store) -> None:
    """Two operations on one (provider, job id): new deliveries match the one written
    last; a delivery already matched stays with its operation."""
    a = store.create(watched("op-a"), [])
    store.put_delivery(delivery("wh-1"))
    store.create(watched("op-b"), [])
    store.put_delivery(delivery("wh-2"))
    store.save(a, [])
    store.put_delivery(delivery("wh-3"))
    assert matches(store) == {"wh-1": "op-a", "wh-2": "op-b", "wh-3": "op-a"}


def test_pending_deliveries_are_matched_unapplied_oldest_first(store: Store) -> None:
    """pending_deliveries: matched and not applied, by received_at (then webhook id), up to
    *limit*; mark_applied takes one out and records when, once: a second taker is told
    it was taken already (so concurrent sweepers apply a delivery at most once)."""
    store.create(watched(), [])
    for name, offset in (("wh-c", 2), ("wh-a", 0), ("wh-b", 0), ("wh-d", 3)):
        store.put_delivery(delivery(name, received_at=T0 + timedelta(seconds=offset)))
    store.put_delivery(delivery("wh-unmatched", job_id="job-x"))
    assert [d.webhook_id for d in store.pending_deliveries(limit=10)] == [
        "wh-a",
        "wh-b",
        "wh-c",
        "wh-d",
    ]
    assert [d.webhook_id for d in store.pending_deliveries(limit=2)] == ["wh-a", "wh-b"]
    applied_at = T0 + timedelta(seconds=5, microseconds=7)
    assert store.mark_applied(PROVIDER, "wh-a", applied_at)
    assert not store.mark_applied(PROVIDER, "wh-a", applied_at + timedelta(seconds=1))
    assert not store.mark_applied(PROVIDER, "wh-unknown", applied_at)  # nothing to mark
    assert [d.webhook_id for d in store.pending_deliveries(limit=10)] == ["wh-b", "wh-c", "wh-d"]
    [applied] = [d for d in store.inbox() if d.webhook_id == "wh-a"]
    assert applied.applied_at == applied_at
    assert applied.applied_at.utcoffset() == timedelta(0)
    assert store.pending_deliveries(limit=0) == []


def test_inbox_lists_newest_first_filtered(store: Store) -> None:
    """inbox: newest received first, by provider or by matched operation, up to *limit*."""
    store.create(watched("op-1"), [])
    for n in range(4):
        at = T0 + timedelta(seconds=n)
        store.put_delivery(delivery(f"wh-{n}", job_id="job-42" if n % 2 else "x", received_at=at))
    store.put_delivery(delivery("gh-1", provider="github", received_at=T0 + timedelta(seconds=9)))
    assert [d.webhook_id for d in store.inbox()] == ["gh-1", "wh-3", "wh-2", "wh-1", "wh-0"]
    assert [d.webhook_id for d in store.inbox(limit=2)] == ["gh-1", "wh-3"]
    assert [d.webhook_id for d in store.inbox(provider=PROVIDER, limit=1)] == ["wh-3"]
    assert [d.webhook_id for d in store.inbox(provider="github")] == ["gh-1"]
    assert [d.webhook_id for d in store.inbox(operation_id="op-1")] == ["wh-3", "wh-1"]
    assert store.inbox(provider="github", operation_id="op-1") == []
    assert store.inbox(provider="nobody") == []


def test_deliveries_racing_the_creation_of_their_jobs_are_all_matched(backend: Backend) -> None:
    """A delivery stored while its job is being recorded is matched either way round: by
    put_delivery seeing the job, or by the create's look-back seeing the delivery."""
    stores = [backend.open() for _ in range(1 if backend.shareable else 2)]
    pairs = 60
    failures: list[BaseException] = []
    meet = threading.Barrier(2)

    def creating() -> None:
        try:
            for n in range(pairs):
                meet.wait()
                stores[0].create(watched(f"op-{n}", job_id=f"job-{n}"), events("created"))
        except BaseException as exc:
            failures.append(exc)
            meet.abort()

    def delivering() -> None:
        try:
            for n in range(pairs):
                meet.wait()
                stores[-1].put_delivery(delivery(f"wh-{n}", job_id=f"job-{n}"))
        except BaseException as exc:
            failures.append(exc)
            meet.abort()

    threads = [threading.Thread(target=creating), threading.Thread(target=delivering)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    assert matches(stores[0]) == {f"wh-{n}": f"op-{n}" for n in range(pairs)}


# ---------------------------------------------------------------------------- push: outbox

NOTIFY_URL = "https://downstream.example/hooks/waitbound"
FINISHED_AT = T0 + timedelta(seconds=62, microseconds=5)


def notifying(operation_id: str = "op-1", **changes: Any) -> Record:
    """A waiting record that notifies NOTIFY_URL and a callback when it finishes."""
    return make_record(
        operation_id, job_id="job-42", push=Push(notify_url=NOTIFY_URL, callback=True), **changes
    )


def finish(record: Record, **changes: Any) -> Record:
    """*record* with a final outcome."""
    done: dict[str, Any] = {
        "phase": Phase.DONE,
        "outcome": OutcomeKind.SUCCEEDED,
        "finished_at": FINISHED_AT,
    }
    return with_fields(record, **(done | changes))


def outbox_ids(store: Store) -> list[tuple[str, Channel]]:
    return sorted((e.operation_id, e.channel) for e in store.outbox(limit=1000))


def test_the_final_outcome_writes_one_outbox_entry_per_channel(store: Store) -> None:
    """The save that records the outcome writes the record's outbox_entries (at its
    finished_at) in the same write; before it, none."""
    created = store.create(notifying(), events("created"))
    assert store.outbox() == []
    saved = store.save(finish(created), events("finished", start_s=62))
    expected = outbox_entries(saved, FINISHED_AT)
    assert [e.channel for e in expected] == [Channel.WEBHOOK, Channel.CALLBACK]
    by_id = {e.delivery_id: e for e in store.outbox()}
    assert by_id == {e.delivery_id: e for e in expected}
    webhook = store.get_outbox(completion_delivery_id("op-1", Channel.WEBHOOK))
    assert webhook is not None
    assert webhook.target == NOTIFY_URL
    assert webhook.status is OutboxStatus.PENDING
    assert (webhook.created_at, webhook.next_attempt_at) == (FINISHED_AT, FINISHED_AT)
    assert webhook.payload == completion_event(saved, FINISHED_AT)
    assert webhook.payload["data"] == saved.to_outcome().as_json()
    callback = store.get_outbox(completion_delivery_id("op-1", Channel.CALLBACK))
    assert callback is not None
    assert callback.target is None


def test_a_record_created_final_writes_its_entries_at_create(store: Store) -> None:
    """create of a record that is already final writes its entries too (at its
    created_at when it has no finished_at)."""
    store.create(finish(notifying(), finished_at=None), [])
    assert {e.created_at for e in store.outbox()} == {T0}
    assert len(store.outbox()) == 2


def test_saving_the_final_record_again_writes_no_second_entry(store: Store) -> None:
    """Writes after the outcome (and a settled attempt) leave the entries as they are."""
    saved = store.save(finish(store.create(notifying(), [])), [])
    [claimed_entry] = store.claim_outbox(
        owner="w1", now=FINISHED_AT, lease_s=30, limit=10, channels=[Channel.WEBHOOK]
    )
    settled = replace(
        claimed_entry, status=OutboxStatus.DELIVERED, attempts=1, delivered_at=FINISHED_AT
    )
    assert store.settle_outbox(settled)
    before = sorted(store.outbox(), key=lambda e: e.delivery_id)
    for n in range(3):
        later = FINISHED_AT + timedelta(seconds=n + 1)
        saved = store.save(
            saved.evolve(
                ending=saved.ending.evolve(finished_at=later),
                schedule=saved.schedule.evolve(attempt=n),
            ),
            events("noted"),
        )
    assert sorted(store.outbox(), key=lambda e: e.delivery_id) == before
    delivered = store.get_outbox(completion_delivery_id("op-1", Channel.WEBHOOK))
    assert delivered is not None
    assert delivered.status is OutboxStatus.DELIVERED


def test_a_lost_write_of_the_outcome_writes_no_entry(store: Store) -> None:
    """A save that conflicts (the outcome not written) writes no outbox entry either."""
    created = store.create(notifying(), [])
    store.save(created.evolve(schedule=created.schedule.evolve(attempt=1)), [])
    with pytest.raises(ConflictError):
        store.save(finish(created), events("finished"))
    assert store.outbox() == []


def test_two_writers_racing_to_record_the_outcome_owe_one_completion(backend: Backend) -> None:
    """Two stores holding the same version both record the final outcome at once: one
    wins, the other conflicts; then a writer re-reads and records it again: still one
    entry per channel."""
    first, second = backend.open(), backend.open()
    created = first.create(notifying(), [])
    results: list[object] = []
    start = threading.Barrier(2)

    def record(store: Store) -> None:
        start.wait()
        try:
            results.append(store.save(finish(created), events("finished")))
        except ConflictError as exc:
            results.append(exc)

    threads = [threading.Thread(target=record, args=(s,)) for s in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(type(r).__name__ for r in results) == ["ConflictError", "Record"]
    fresh = second.get("op-1")
    assert fresh is not None
    second.save(finish(fresh, finished_at=FINISHED_AT + timedelta(seconds=9)), [])
    assert outbox_ids(first) == [("op-1", Channel.CALLBACK), ("op-1", Channel.WEBHOOK)]
    assert {e.created_at for e in first.outbox()} == {FINISHED_AT}


@pytest.mark.parametrize("push", [Push(), Push(webhook=PROVIDER)], ids=["no-push", "webhook-only"])
def test_a_final_record_that_notifies_nobody_writes_no_entry(store: Store, push: Push) -> None:
    created = store.create(make_record(job_id="job-42", push=push), [])
    store.save(finish(created), events("finished"))
    assert store.outbox() == []


def test_an_open_decision_request_defers_the_completion(store: Store) -> None:
    """An outcome with an open decision request is not final: only the notice that a
    decision waits, until the request is closed with the outcome standing."""
    request = DecisionRequest(opened_at=T0, due_at=T0 + timedelta(days=7), options=("extend",))
    created = store.create(notifying(), [])
    stopped = store.save(
        finish(created, outcome=OutcomeKind.TIMED_OUT, decision_request=request), []
    )
    assert [e.payload["type"] for e in store.outbox()] == ["operation.decision_requested"]
    store.save(
        stopped.evolve(oversight=stopped.oversight.evolve(decision_request=None)), events("decided")
    )
    completions = [e for e in store.outbox() if e.payload["type"] == "operation.completed"]
    assert [e.payload["data"]["outcome"] for e in completions] == ["timed_out"] * 2  # type: ignore[index,call-overload]


def entry(delivery_id: str, **changes: Any) -> OutboxEntry:
    """A pending webhook entry due at T0."""
    base = OutboxEntry(
        delivery_id=delivery_id,
        operation_id="op-1",
        channel=Channel.WEBHOOK,
        target=NOTIFY_URL,
        payload={"type": "operation.completed", "data": {"n": 1.0}},
        created_at=T0,
        next_attempt_at=T0,
    )
    return replace(base, **changes)


def _claim_outbox(
    store: Store,
    owner: str = "w1",
    now: datetime = NOW,
    limit: int = 10,
    channels: Sequence[Channel] = (Channel.WEBHOOK, Channel.CALLBACK),
    *,
    operation_id: str | None = None,
) -> list[str]:
    taken = store.claim_outbox(
        owner=owner,
        now=now,
        lease_s=30,
        limit=limit,
        channels=channels,
        operation_id=operation_id,
    )
    return [e.delivery_id for e in taken]


def test_add_outbox_stores_a_replay_and_refuses_a_duplicate_id(store: Store) -> None:
    """add_outbox stores the entry exactly; an existing id is a UsageError, unchanged."""
    original = entry("dlv_1", status=OutboxStatus.FAILED, attempts=10, last_error="HTTP 500")
    assert store.add_outbox(original) == original
    replay = entry("dlv_2", replay_of="dlv_1", created_at=NOW, next_attempt_at=NOW)
    assert store.add_outbox(replay) == replay
    assert store.get_outbox("dlv_2") == replay
    with pytest.raises(UsageError, match="dlv_1"):
        store.add_outbox(entry("dlv_1", target="https://elsewhere.example/"))
    assert store.get_outbox("dlv_1") == original
    assert store.get_outbox("dlv_unknown") is None


def test_outbox_lists_newest_first_filtered(store: Store) -> None:
    for n, (operation_id, status) in enumerate(
        [
            ("op-1", OutboxStatus.PENDING),
            ("op-2", OutboxStatus.FAILED),
            ("op-1", OutboxStatus.FAILED),
        ]
    ):
        at = T0 + timedelta(seconds=n)
        store.add_outbox(entry(f"dlv_{n}", operation_id=operation_id, status=status, created_at=at))
    assert [e.delivery_id for e in store.outbox()] == ["dlv_2", "dlv_1", "dlv_0"]
    assert [e.delivery_id for e in store.outbox(limit=1)] == ["dlv_2"]
    assert [e.delivery_id for e in store.outbox(operation_id="op-1")] == ["dlv_2", "dlv_0"]
    assert [e.delivery_id for e in store.outbox(status=OutboxStatus.FAILED)] == ["dlv_2", "dlv_1"]
    failed_1 = store.outbox(operation_id="op-1", status=OutboxStatus.FAILED)
    assert [e.delivery_id for e in failed_1] == ["dlv_2"]
    assert store.outbox(status=OutboxStatus.DELIVERED) == []


def test_claim_outbox_leases_due_pending_entries_oldest_first(store: Store) -> None:
    """Pending, on the channels asked for, next_attempt_at come, lease free or expired:
    claimed (next_attempt_at, then id, order) with owner and now + lease_s."""
    store.add_outbox(entry("dlv_b", next_attempt_at=T0 + timedelta(seconds=2)))
    store.add_outbox(entry("dlv_a", next_attempt_at=T0 + timedelta(seconds=2)))
    store.add_outbox(entry("dlv_c", next_attempt_at=T0))
    store.add_outbox(entry("dlv_callback", channel=Channel.CALLBACK, target=None))
    store.add_outbox(entry("dlv_later", next_attempt_at=NOW + timedelta(microseconds=1)))
    store.add_outbox(entry("dlv_done", status=OutboxStatus.DELIVERED, delivered_at=T0))
    store.add_outbox(entry("dlv_failed", status=OutboxStatus.FAILED))
    store.add_outbox(entry("dlv_leased", lease_owner="w0", lease_expires_at=NOW + timedelta(1)))
    store.add_outbox(entry("dlv_expired", lease_owner="w0", lease_expires_at=NOW))
    assert _claim_outbox(store, limit=0) == []
    [first] = store.claim_outbox(
        owner="w1", now=NOW, lease_s=12.5, limit=1, channels=[Channel.WEBHOOK]
    )
    assert first == entry("dlv_c", lease_owner="w1", lease_expires_at=NOW + timedelta(seconds=12.5))
    assert store.get_outbox("dlv_c") == first
    assert _claim_outbox(store, channels=[Channel.WEBHOOK]) == ["dlv_expired", "dlv_a", "dlv_b"]
    assert _claim_outbox(store, owner="w2") == ["dlv_callback"]
    assert _claim_outbox(store, owner="w2") == []
    assert _claim_outbox(store, owner="w2", channels=[]) == []
    assert _claim_outbox(store, owner="w3", now=NOW + timedelta(seconds=30)) == [
        "dlv_c",
        "dlv_callback",
        "dlv_expired",
        "dlv_a",
        "dlv_b",
        "dlv_later",
    ]


def test_claim_outbox_of_one_operation_takes_only_its_due_entries(store: Store) -> None:
    """operation_id: only that operation's due entries on the channels asked for are
    claimed, oldest first up to the limit, even behind older entries of others; the
    others' are not touched, and an unfiltered claim takes them afterwards."""
    others = [
        entry("dlv_0", operation_id="op-2", next_attempt_at=T0 - timedelta(seconds=9)),
        entry("dlv_1", operation_id="op-2", channel=Channel.CALLBACK, target=None),
        entry("dlv_2", operation_id="op-10"),
    ]
    for other in others:
        store.add_outbox(other)
    store.add_outbox(entry("dlv_b", next_attempt_at=T0 + timedelta(seconds=2)))
    store.add_outbox(entry("dlv_a", next_attempt_at=T0 + timedelta(seconds=2)))
    store.add_outbox(entry("dlv_c", channel=Channel.CALLBACK, target=None))
    store.add_outbox(entry("dlv_later", next_attempt_at=NOW + timedelta(microseconds=1)))
    store.add_outbox(entry("dlv_done", status=OutboxStatus.DELIVERED, delivered_at=T0))
    store.add_outbox(entry("dlv_leased", lease_owner="w0", lease_expires_at=NOW + timedelta(1)))
    assert _claim_outbox(store, operation_id="op-1", limit=0) == []
    assert _claim_outbox(store, operation_id="op-1", limit=1) == ["dlv_c"]
    assert _claim_outbox(store, operation_id="op-1", channels=[Channel.CALLBACK]) == []
    [first] = store.claim_outbox(
        owner="w2",
        now=NOW,
        lease_s=12.5,
        limit=1,
        channels=[Channel.WEBHOOK],
        operation_id="op-1",
    )
    assert first == entry(
        "dlv_a",
        next_attempt_at=T0 + timedelta(seconds=2),
        lease_owner="w2",
        lease_expires_at=NOW + timedelta(seconds=12.5),
    )
    assert _claim_outbox(store, operation_id="op-1") == ["dlv_b"]
    assert _claim_outbox(store, operation_id="op-1") == []
    assert _claim_outbox(store, operation_id="op-unknown") == []
    assert _claim_outbox(store, operation_id="op-1", channels=[]) == []
    assert [store.get_outbox(other.delivery_id) for other in others] == others
    assert _claim_outbox(store, operation_id="op-2", channels=[Channel.WEBHOOK]) == ["dlv_0"]
    assert _claim_outbox(store) == ["dlv_1", "dlv_2"]


def test_settle_outbox_writes_only_while_the_lease_is_ours(store: Store) -> None:
    """settle_outbox is a compare-and-swap on (pending, lease_owner): a retry is written
    and released; a lost lease, a settled entry or an unknown one change nothing."""
    store.add_outbox(entry("dlv_1"))
    [mine] = store.claim_outbox(
        owner="w1", now=NOW, lease_s=30, limit=1, channels=[Channel.WEBHOOK]
    )
    retry_at = NOW + timedelta(seconds=5)
    retry = replace(mine, attempts=1, next_attempt_at=retry_at, last_error="HTTP 503")
    assert not store.settle_outbox(replace(retry, lease_owner="w2"))
    assert store.get_outbox("dlv_1") == mine
    assert store.settle_outbox(retry)
    assert store.get_outbox("dlv_1") == replace(retry, lease_owner=None, lease_expires_at=None)
    assert _claim_outbox(store, now=NOW) == []
    [again] = store.claim_outbox(
        owner="w1", now=retry_at, lease_s=30, limit=1, channels=[Channel.WEBHOOK]
    )
    # the lease expires and another worker claims it: the first one's result is refused
    later = retry_at + timedelta(seconds=30)
    [theirs] = store.claim_outbox(
        owner="w2", now=later, lease_s=30, limit=1, channels=[Channel.WEBHOOK]
    )
    done = replace(again, status=OutboxStatus.DELIVERED, attempts=2, delivered_at=later)
    assert not store.settle_outbox(done)
    assert store.get_outbox("dlv_1") == theirs
    delivered = replace(theirs, status=OutboxStatus.DELIVERED, attempts=2, delivered_at=later)
    assert store.settle_outbox(replace(delivered, target="https://ignored.example/"))
    settled = store.get_outbox("dlv_1")
    assert settled == replace(delivered, lease_owner=None, lease_expires_at=None)
    assert not store.settle_outbox(delivered)  # not pending any more
    assert not store.settle_outbox(replace(delivered, lease_owner=None))
    assert not store.settle_outbox(entry("dlv_unknown"))
    assert store.get_outbox("dlv_1") == settled


@pytest.mark.parametrize("operation_id", [None, "op-1"], ids=["all", "one-operation"])
def test_claims_of_the_outbox_from_many_threads_take_each_entry_once(
    backend: Backend, operation_id: str | None
) -> None:
    """120 due entries, 4 threads on two or more stores of one database claiming 7 at a
    time until none are left: every entry is claimed exactly once; claiming one
    operation's, the other operation's entries (interleaved) are never taken."""
    stores = [backend.open() for _ in range(2 if backend.shareable else 4)]
    ids = [f"dlv_{i:03}" for i in range(120)]
    rng = random.Random(11)
    for n, delivery_id in enumerate(ids):
        at = T0 + timedelta(seconds=rng.randrange(30))
        owned_by = "op-1" if operation_id is None or n % 2 else "op-2"
        stores[0].add_outbox(entry(delivery_id, operation_id=owned_by, next_attempt_at=at))
    wanted = [e.delivery_id for e in stores[0].outbox(operation_id=operation_id, limit=200)]
    claims: dict[str, list[str]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(4)

    def claim_all(worker: int) -> None:
        mine = claims.setdefault(f"w{worker}", [])
        try:
            start.wait()
            while batch := stores[worker % len(stores)].claim_outbox(
                owner=f"w{worker}",
                now=NOW,
                lease_s=300,
                limit=7,
                channels=[Channel.WEBHOOK],
                operation_id=operation_id,
            ):
                mine += [e.delivery_id for e in batch]
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=claim_all, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    assert sorted(i for mine in claims.values() for i in mine) == sorted(wanted)
    assert len(wanted) == (120 if operation_id is None else 60)
    untouched = [stores[1].get_outbox(i) for i in ids if i not in wanted]
    assert {e.lease_owner if e else "missing" for e in untouched} <= {None}
    for owner, mine in claims.items():
        for delivery_id in mine:
            got = stores[1].get_outbox(delivery_id)
            assert got is not None
            assert got.lease_owner == owner


# ---------------------------------------------------------------------------- push: audit_after


def _stream(store: Store, **options: Any) -> list[tuple[datetime, str, int]]:
    return [cursor_of(e) for e in store.audit_after(None, **options)]


def test_audit_after_orders_every_operations_events_by_time_operation_and_seq(
    store: Store,
) -> None:
    """Events of all operations in (at, operation id, seq) order: ids compared byte-wise
    ('B' before 'a'), a whole second before its fractions."""
    second = T0.replace(microsecond=0) + timedelta(seconds=10)
    same = AuditEvent(at=second, kind="x", summary="s")

    def at(seconds: float) -> AuditEvent:
        return replace(same, at=second + timedelta(seconds=seconds))

    store.create(make_record("op-a"), [at(0.5), same, same])  # seq 1..3
    store.create(make_record("op-B"), [same, at(-1)])
    store.create(make_record("op-c"), [at(0.000001)])
    got = _stream(store)
    assert got == [
        (second - timedelta(seconds=1), "op-B", 2),
        (second, "op-B", 1),
        (second, "op-a", 2),
        (second, "op-a", 3),
        (second + timedelta(microseconds=1), "op-c", 1),
        (second + timedelta(seconds=0.5), "op-a", 1),
    ]
    assert all(e.event.at.utcoffset() == timedelta(0) for e in store.audit_after(None))
    assert store.audit_after(None)[2] == store.audit("op-a")[1]


def test_audit_after_resumes_strictly_after_the_cursor(store: Store) -> None:
    """Paging with the last event's cursor, *limit* at a time, yields every event once,
    in order; a cursor between events (or past them all) works too."""
    rng = random.Random(5)
    for n in range(5):
        batch = [
            AuditEvent(at=T0 + timedelta(seconds=rng.randrange(4)), kind="k", summary=f"{n}")
            for _ in range(rng.randrange(1, 6))
        ]
        store.create(make_record(f"op-{n}"), batch)
    everything = store.audit_after(None, limit=1000)
    assert len(everything) == sum(len(store.audit(f"op-{n}")) for n in range(5))
    paged: list[StoredAuditEvent] = []
    cursor: AuditCursor | None = None
    while page := store.audit_after(cursor, limit=3):
        assert len(page) <= 3
        paged += page
        cursor = cursor_of(page[-1])
    assert paged == everything
    middle = cursor_of(everything[4])
    assert store.audit_after(middle) == everything[5:]
    between = (everything[4].event.at, everything[4].operation_id + "\x01", 0)
    assert store.audit_after(between) == [e for e in everything if cursor_of(e) > between]
    assert store.audit_after((T0 + timedelta(days=1), "", 0)) == []
    assert store.audit_after((T0 - timedelta(days=1), "", 0)) == everything
    assert store.audit_after(None, limit=0) == []


def test_audit_after_with_a_label_prefix_streams_only_those_operations(store: Store) -> None:
    for n, label in enumerate(["mcp:a", None, "MCP:b", "mcp:c", "mcpx"]):
        store.create(make_record(f"op-{n}", label=label), events("created", start_s=n))
    assert [e.operation_id for e in store.audit_after(None, label_prefix="mcp:")] == [
        "op-0",
        "op-3",
    ]
    assert len(store.audit_after(None)) == 5
    after_first = cursor_of(store.audit_after(None, label_prefix="mcp:")[0])
    assert [e.operation_id for e in store.audit_after(after_first, label_prefix="mcp")] == [
        "op-3",
        "op-4",
    ]
    assert store.audit_after(None, label_prefix="%") == []


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
    saved = store.save(
        created.evolve(schedule=created.schedule.evolve(attempt=5)), events("observed", start_s=1)
    )
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
        first.save(
            created.evolve(schedule=created.schedule.evolve(attempt=1)),
            events("observed", start_s=1),
        )
        with pytest.raises(ConflictError):
            second.save(
                seen_by_second.evolve(schedule=seen_by_second.schedule.evolve(attempt=2)),
                events("lost", start_s=2),
            )
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
    finished = with_fields(store.get("op-5") or make_record(), outcome=OutcomeKind.FAILED)
    store.save(finished.evolve(ending=finished.ending.evolve(phase=Phase.DONE)), [])
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
    """A stored record with a newer "schema" (its contract part carries the number)
    raises SchemaVersionError on get."""
    path = tmp_path / "s.db"
    _stored_with_events(path)
    db = sqlite3.connect(path)
    try:
        (text,) = db.execute(
            "SELECT contract FROM operations WHERE operation_id = 'op-1'"
        ).fetchone()
    finally:
        db.close()
    data = json.loads(text)
    assert data["schema"] == 1
    data["schema"] = 99
    _raw(
        path,
        ("UPDATE operations SET contract = ? WHERE operation_id = 'op-1'", (json.dumps(data),)),
    )
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
