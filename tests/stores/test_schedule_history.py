"""The schedule history, against every store: one piece of evidence per finished
operation, written with its outcome, bounded per key, listed and forgotten."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest import mock

import pytest

from tests.records import with_fields
from tests.stores.test_store_contract import T0, Backend, backend, make_record, store
from waitbound import OutcomeKind, Phase, Policy, Record, Store
from waitbound._model._history import Evidence, evidence_of, path_template, schedule_key

__all__ = ["backend", "store"]  # the fixtures, imported for pytest


def _finished(
    operation_id: str, *, ended_s: float | None, pending_s: float = 10.0, **changes: Any
) -> Record:
    """A record written as waiting, then saved with its outcome."""
    outcome = OutcomeKind.SUCCEEDED if ended_s is not None else OutcomeKind.TIMED_OUT
    end = T0 + timedelta(seconds=ended_s if ended_s is not None else 600)
    return make_record(
        operation_id,
        phase=Phase.DONE,
        outcome=outcome,
        pending_seen_at=T0 + timedelta(seconds=pending_s),
        ended_seen_at=T0 + timedelta(seconds=ended_s) if ended_s is not None else None,
        finished_at=end,
        **changes,
    )


def _finish(store: Store, record: Record) -> None:
    created = store.create(
        record.evolve(
            ending=record.ending.evolve(phase=Phase.WAITING, outcome=None, finished_at=None)
        ),
        [],
    )
    store.save(record.evolve(version=created.version), [])


KEY = "demo https://provider.example/v1/jobs/{id}"


def test_the_final_write_adds_one_piece_of_evidence(store: Store) -> None:
    """The write that records the outcome adds the evidence; writing again adds none."""
    record = _finished("op-1", ended_s=42.5)
    _finish(store, record)
    assert store.history_version(KEY) > 0
    [got] = store.schedule_history(KEY)
    assert got.operation_id == "op-1"
    assert got.low_s == 10.0
    assert got.high_s == 42.5
    assert got.outcome is OutcomeKind.SUCCEEDED
    assert not got.censored
    again = store.get("op-1")
    assert again is not None
    store.save(again.evolve(contract=again.contract.evolve(label="relabelled")), [])
    assert len(store.schedule_history(KEY)) == 1


def test_a_waiting_write_adds_nothing(store: Store) -> None:
    """A record without an outcome owes no evidence."""
    created = store.create(make_record("op-w"), [])
    store.save(
        created.evolve(answer=created.answer.evolve(pending_seen_at=T0 + timedelta(seconds=3))), []
    )
    assert store.schedule_history(KEY) == []
    assert store.history_version(KEY) == 0
    assert store.schedules() == []


def test_a_timed_out_operation_is_censored_evidence(store: Store) -> None:
    """A timeout says "longer than": no end, the last time it was seen running."""
    _finish(store, _finished("op-t", ended_s=None, pending_s=590.0))
    [got] = store.schedule_history(KEY)
    assert got.censored
    assert got.high_s is None
    assert got.low_s == 590.0
    [summary] = store.schedules()
    assert (summary.key, summary.jobs, summary.censored) == (KEY, 1, 1)


def test_history_is_listed_newest_first_and_versions_change(store: Store) -> None:
    """Newest first; the version moves with every piece added and with forgetting."""
    versions = []
    for i in range(3):
        _finish(store, _finished(f"op-{i}", ended_s=20.0 + i))
        versions.append(store.history_version(KEY))
    assert versions == sorted(set(versions))
    assert [e.operation_id for e in store.schedule_history(KEY)] == ["op-2", "op-1", "op-0"]
    assert store.forget_schedule(KEY) == 3
    assert store.schedule_history(KEY) == []
    assert store.history_version(KEY) == 0
    assert store.forget_schedule(KEY) == 0


def test_keys_are_kept_apart(store: Store) -> None:
    """A caller-named key has its own history; forgetting one leaves the other."""
    _finish(store, _finished("op-a", ended_s=5.0))
    _finish(store, _finished("op-b", ended_s=7.0, policy=Policy(schedule_key="exports")))
    assert [s.key for s in store.schedules()] == sorted([KEY, "exports"])
    assert store.forget_schedule("exports") == 1
    assert [s.key for s in store.schedules()] == [KEY]


def test_history_keeps_the_newest_per_key(backend: Backend) -> None:
    """Past the limit, the oldest pieces of the key go (the limit patched small)."""
    store = backend.open()
    with (
        mock.patch("waitbound.stores._history_rows.HISTORY_LIMIT", 3),
        mock.patch("waitbound.stores.memory.HISTORY_LIMIT", 3),
    ):
        for i in range(5):
            _finish(store, _finished(f"op-{i}", ended_s=10.0 + i))
        got = [e.operation_id for e in store.schedule_history(KEY)]
    assert got == ["op-4", "op-3", "op-2"]
    [summary] = store.schedules()
    assert summary.jobs == 3


def test_a_second_store_on_the_same_database_reads_the_history(backend: Backend) -> None:
    """Workers sharing a store learn from each other's history."""
    _finish(backend.open(), _finished("op-1", ended_s=12.0))
    other = backend.open()
    assert [e.operation_id for e in other.schedule_history(KEY)] == ["op-1"]


# ------------------------------------------------------------------ the evidence itself


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/batches/batch_6f2a91c0", "/v1/batches/{id}"),
        ("/v1/jobs/42", "/v1/jobs/{id}"),
        ("/operations/3f2504e0-4f89-11d3-9a0c-0305e82c3301", "/operations/{id}"),
        ("/v2beta/exports/status", "/v2beta/exports/status"),
        ("/", "/"),
    ],
)
def test_path_template_replaces_ids(path: str, expected: str) -> None:
    """Id-like segments become {id}; words and API versions stay."""
    assert path_template(path) == expected


def test_schedule_key_never_holds_the_query() -> None:
    """The key is profile, origin and path template: a token in the query stays out."""
    record = make_record(status_url="https://provider.example:8443/v1/jobs/42?sig=SECRET")
    assert schedule_key(record) == "demo https://provider.example:8443/v1/jobs/{id}"


def test_a_job_we_canceled_is_censored() -> None:
    """Canceled (by us or at the provider): "longer than", never a duration."""
    ours = _finished("op-c", ended_s=30.0, cancel_requested_at=T0 + timedelta(seconds=20))
    theirs = with_fields(_finished("op-d", ended_s=30.0), outcome=OutcomeKind.CANCELED)
    for record in (ours, theirs):
        evidence = evidence_of(record)
        assert isinstance(evidence, Evidence)
        assert evidence.censored
        assert evidence.high_s is None


def test_nothing_learned_is_no_evidence() -> None:
    """A failure before any answer said running or ended leaves no evidence."""
    record = with_fields(_finished("op-x", ended_s=None), pending_seen_at=None)
    assert evidence_of(record) is None
