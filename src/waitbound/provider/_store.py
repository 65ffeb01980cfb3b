"""Where the provider kit keeps jobs: the :class:`JobStore` protocol and two quick-start
implementations, in memory and in one SQLite file.

The protocol is small on purpose, so the user's own database can implement it. Its
methods are synchronous and short; the app calls them on the event loop.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path
from typing import Final, Protocol, cast, runtime_checkable

from waitbound._base._json import JSON
from waitbound.provider._job import Job, JobStatus, JobSummary

__all__ = ["JobStore", "MemoryJobStore", "SQLiteJobStore", "job_from_json", "job_to_json"]

_VERSION: Final = 1


@runtime_checkable
class JobStore(Protocol):
    """Keeps jobs. Implementations must make :meth:`add` and :meth:`save` atomic."""

    def add(self, job: Job) -> Job:
        """Store a new *job* and return it; when another job already holds its
        ``idempotency_key``, store nothing and return that job instead."""
        ...

    def get(self, job_id: str) -> Job | None:
        """The job *job_id*; ``None`` when there is none."""
        ...

    def save(self, job: Job) -> bool:
        """Replace the stored job of the same id by *job*, only while the stored one is
        still processing. Return whether it was written (``False``: it had already ended,
        so the first ending wins; or no such job)."""
        ...


class MemoryJobStore:
    """A :class:`JobStore` in a dict: for tests and one-process quick starts."""

    def __init__(self) -> None:
        """Create an empty store."""
        self._jobs: dict[str, Job] = {}
        self._keys: dict[str, str] = {}
        self._lock = threading.Lock()

    def add(self, job: Job) -> Job:
        """See :meth:`JobStore.add`."""
        with self._lock:
            key = job.idempotency_key
            if key is not None and key in self._keys:
                return self._jobs[self._keys[key]]
            if job.job_id in self._jobs:
                raise ValueError(f"a job with id {job.job_id!r} already exists")
            self._jobs[job.job_id] = job
            if key is not None:
                self._keys[key] = job.job_id
            return job

    def get(self, job_id: str) -> Job | None:
        """See :meth:`JobStore.get`."""
        with self._lock:
            return self._jobs.get(job_id)

    def save(self, job: Job) -> bool:
        """See :meth:`JobStore.save`."""
        with self._lock:
            stored = self._jobs.get(job.job_id)
            if stored is None or stored.done:
                return False
            self._jobs[job.job_id] = job
            return True


class SQLiteJobStore:
    """A :class:`JobStore` in one SQLite file (versioned JSON rows), safe across threads
    and processes that share the file."""

    def __init__(self, path: str | Path) -> None:
        """Open (and create when needed) the store at *path* (``":memory:"`` works)."""
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA busy_timeout = 5000")
        self._lock = threading.Lock()
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS provider_jobs ("
            " job_id TEXT PRIMARY KEY, idempotency_key TEXT UNIQUE,"
            " status TEXT NOT NULL, data TEXT NOT NULL)"
        )

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def add(self, job: Job) -> Job:
        """See :meth:`JobStore.add`."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if job.idempotency_key is not None:
                    row = self._db.execute(
                        "SELECT data FROM provider_jobs WHERE idempotency_key = ?",
                        (job.idempotency_key,),
                    ).fetchone()
                    if row is not None:
                        return job_from_json(json.loads(row[0]))
                self._db.execute(
                    "INSERT INTO provider_jobs VALUES (?, ?, ?, ?)",
                    (job.job_id, job.idempotency_key, job.status, _dump(job)),
                )
            except sqlite3.IntegrityError as error:
                raise ValueError(f"a job with id {job.job_id!r} already exists") from error
            finally:
                self._db.execute("COMMIT")
            return job

    def get(self, job_id: str) -> Job | None:
        """See :meth:`JobStore.get`."""
        with self._lock:
            row = self._db.execute(
                "SELECT data FROM provider_jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
        return None if row is None else job_from_json(json.loads(row[0]))

    def save(self, job: Job) -> bool:
        """See :meth:`JobStore.save`."""
        with self._lock:
            cursor = self._db.execute(
                "UPDATE provider_jobs SET status = ?, data = ?"
                " WHERE job_id = ? AND status = 'processing'",
                (job.status, _dump(job), job.job_id),
            )
        return cursor.rowcount == 1


def _dump(job: Job) -> str:
    return json.dumps(job_to_json(job), separators=(",", ":"), ensure_ascii=False)


def job_to_json(job: Job) -> dict[str, JSON]:
    """*job* as versioned JSON (``"v": 1``; times in RFC 3339)."""
    data = cast("dict[str, JSON]", asdict(replace(job, summary=None)))
    for name in ("created_at", "updated_at", "ended_at"):
        value = getattr(job, name)
        data[name] = None if value is None else value.isoformat()
    data["summary"] = None if job.summary is None else cast("JSON", asdict(job.summary))
    data["errors"] = list(job.errors)
    return {"v": _VERSION, **data}


def job_from_json(data: dict[str, JSON]) -> Job:
    """The job :func:`job_to_json` wrote.

    Raises:
        ValueError: the data was written by a newer version (upgrade waitbound).
    """
    if data.get("v") != _VERSION:
        raise ValueError(
            f"job data version {data.get('v')!r} is not {_VERSION}: written by a newer "
            "waitbound? upgrade waitbound to read it"
        )

    def when(name: str) -> datetime | None:
        value = data.get(name)
        return None if value is None else datetime.fromisoformat(str(value))

    def number(name: str) -> float | None:
        value = data.get(name)
        return None if value is None else float(cast("float", value))

    summary = data.get("summary")
    created = when("created_at")
    updated = when("updated_at")
    assert created is not None
    assert updated is not None
    return Job(
        job_id=str(data["job_id"]),
        status=cast("JobStatus", data["status"]),
        created_at=created,
        updated_at=updated,
        request=data.get("request"),
        fingerprint=str(data.get("fingerprint", "")),
        idempotency_key=cast("str | None", data.get("idempotency_key")),
        progress_percent=number("progress_percent"),
        estimated_duration_s=number("estimated_duration_s"),
        cancelable=bool(data.get("cancelable", True)),
        notify_url=cast("str | None", data.get("notify_url")),
        ended_at=when("ended_at"),
        result=data.get("result"),
        summary=None if summary is None else JobSummary(**cast("dict[str, int]", summary)),
        errors=tuple(cast("list[JSON]", data.get("errors") or [])),
        error=cast("dict[str, JSON] | None", data.get("error")),
    )
