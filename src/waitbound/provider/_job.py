"""One job as the provider kit keeps it, and the endings a job's work may return.

A job is ``processing`` until it ends in exactly one terminal status: ``succeeded``,
``completed_with_errors``, ``failed`` or ``canceled``. Jobs are frozen values: a change
is ``dataclasses.replace`` and a ``JobStore.save``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

from waitbound._base._json import JSON

__all__ = [
    "PROCESSING",
    "TERMINAL_STATUSES",
    "Job",
    "JobCompletedWithErrors",
    "JobFailed",
    "JobStatus",
    "JobSucceeded",
    "JobSummary",
    "fingerprint",
]

JobStatus = Literal["processing", "succeeded", "completed_with_errors", "failed", "canceled"]
"""A job's status: ``processing`` while it runs, then one of the four terminal ones."""

PROCESSING: Final = "processing"
TERMINAL_STATUSES: Final[frozenset[str]] = frozenset(
    ("succeeded", "completed_with_errors", "failed", "canceled")
)
"""The statuses after which a job never changes again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSummary:
    """Item counts of a job that processed many items.

    Attributes:
        processed: items the job looked at.
        succeeded: items that succeeded.
        failed: items that failed (their errors are at ``errors_url``).
    """

    processed: int
    succeeded: int
    failed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSucceeded:
    """The work ended well: *result* is the job's output (any JSON value)."""

    result: JSON = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCompletedWithErrors:
    """The work ended with some items failed.

    Attributes:
        summary: the item counts.
        errors: one JSON object per failed item, served a page at a time at ``errors_url``.
        result: the output of the items that succeeded.
    """

    summary: JobSummary
    errors: tuple[JSON, ...] = ()
    result: JSON = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFailed:
    """The work failed: *error* is told to the caller as is (``code`` and ``message`` are
    conventional keys). Never put secrets or stack traces in it."""

    error: dict[str, JSON]


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One job.

    Attributes:
        job_id: the job's id (URL-safe).
        status: see :data:`JobStatus`.
        created_at: when the job was started (aware UTC).
        updated_at: when the job last changed (aware UTC).
        request: the start request's JSON body.
        fingerprint: sha256 of the canonical request body (see :func:`fingerprint`).
        idempotency_key: the start request's ``Idempotency-Key``; ``None`` without one.
        progress_percent: 0 to 100; ``None`` while unknown.
        estimated_duration_s: how long the job should take, in seconds; ``None`` unknown.
        cancelable: whether a cancel is accepted now (only while processing).
        notify_url: where the signed completion webhook goes; ``None`` for none.
        ended_at: when it reached a terminal status (aware UTC); ``None`` while processing.
        result: the output (``succeeded``, ``completed_with_errors``).
        summary: the item counts (``completed_with_errors``).
        errors: per-item errors (``completed_with_errors``).
        error: the failure (``failed``); for ``canceled``, who canceled and why.
    """

    job_id: str
    status: JobStatus = "processing"
    created_at: datetime
    updated_at: datetime
    request: JSON = None
    fingerprint: str = ""
    idempotency_key: str | None = None
    progress_percent: float | None = None
    estimated_duration_s: float | None = None
    cancelable: bool = True
    notify_url: str | None = None
    ended_at: datetime | None = None
    result: JSON = None
    summary: JobSummary | None = None
    errors: tuple[JSON, ...] = field(default=())
    error: dict[str, JSON] | None = None

    @property
    def done(self) -> bool:
        """Whether the job reached a terminal status."""
        return self.status in TERMINAL_STATUSES


def fingerprint(body: JSON) -> str:
    """The sha256 (hex) of *body* as canonical JSON (sorted keys, no spaces): two bodies
    that differ only in key order or whitespace have the same fingerprint."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
