"""One contract for every JobStore: memory and SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from waitbound.provider import Job, JobStore, JobSummary, MemoryJobStore, SQLiteJobStore
from waitbound.provider._store import job_from_json, job_to_json

AT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    if request.param == "memory":
        yield MemoryJobStore()
    else:
        sqlite = SQLiteJobStore(tmp_path / "jobs.db")
        yield sqlite
        sqlite.close()


def _job(job_id: str = "j1", key: str | None = None) -> Job:
    return Job(job_id=job_id, created_at=AT, updated_at=AT, request={"a": 1}, idempotency_key=key)


def test_a_store_is_a_job_store(store: JobStore) -> None:
    """Both implement the protocol."""
    assert isinstance(store, JobStore)


def test_add_then_get(store: JobStore) -> None:
    """A job added is read back equal; an unknown id is None."""
    job = _job()
    assert store.add(job) == job
    assert store.get("j1") == job
    assert store.get("nope") is None


def test_add_with_a_taken_key_returns_the_first_job(store: JobStore) -> None:
    """The idempotency key is unique: the second add stores nothing and returns the first."""
    first = _job("j1", key="k")
    store.add(first)
    assert store.add(_job("j2", key="k")) == first
    assert store.get("j2") is None


def test_add_with_a_taken_id_is_refused(store: JobStore) -> None:
    """Two jobs never share an id."""
    store.add(_job())
    with pytest.raises(ValueError, match="already exists"):
        store.add(_job())


def test_save_replaces_a_processing_job(store: JobStore) -> None:
    """save writes while processing; every field round-trips."""
    store.add(_job())
    ended = replace(
        _job(),
        status="completed_with_errors",
        progress_percent=100.0,
        summary=JobSummary(processed=3, succeeded=2, failed=1),
        errors=({"row": 3},),
        result=[1, 2],
        ended_at=AT,
        cancelable=False,
        notify_url="http://n",
    )
    assert store.save(ended) is True
    assert store.get("j1") == ended


def test_save_after_the_end_is_refused(store: JobStore) -> None:
    """The first ending wins: a terminal job is never rewritten."""
    store.add(_job())
    assert store.save(replace(_job(), status="canceled"))
    assert store.save(replace(_job(), status="succeeded")) is False
    job = store.get("j1")
    assert job is not None
    assert job.status == "canceled"


def test_save_of_an_unknown_job_writes_nothing(store: JobStore) -> None:
    """save never creates a job."""
    assert store.save(_job("ghost")) is False
    assert store.get("ghost") is None


def test_sqlite_jobs_survive_a_reopen(tmp_path: Path) -> None:
    """The SQLite store is durable: a new store on the same file sees the job."""
    SQLiteJobStore(tmp_path / "j.db").add(_job(key="k"))
    again = SQLiteJobStore(tmp_path / "j.db")
    assert again.get("j1") == _job(key="k")
    assert again.add(_job("j2", key="k")).job_id == "j1"


def test_a_newer_record_version_is_refused_with_what_to_do() -> None:
    """Versioned JSON: an unknown version says to upgrade."""
    data = job_to_json(_job())
    assert job_from_json(data) == _job()
    with pytest.raises(ValueError, match="upgrade waitbound"):
        job_from_json({**data, "v": 2})
