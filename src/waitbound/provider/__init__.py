"""Serve async endpoints agents can follow: ``202 Accepted`` with a status URL, honest
status answers, a result endpoint that says "not yet", cancel rules, idempotent starts,
signed completion webhooks and an SSE progress stream. See ``docs/provider.md``.

Needs Starlette, sse-starlette and standardwebhooks: ``pip install 'waitbound[provider]'``.
"""

from __future__ import annotations

try:
    import sse_starlette  # noqa: F401
    import starlette  # noqa: F401
except ImportError as _error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "waitbound.provider needs Starlette and sse-starlette; "
        "install them with: pip install 'waitbound[provider]'"
    ) from _error

from waitbound.provider._app import (
    JobNotCancelableError,
    JobNotFoundError,
    Progress,
    ProviderApp,
    Runner,
)
from waitbound.provider._bodies import JobUrls, job_body
from waitbound.provider._job import (
    TERMINAL_STATUSES,
    Job,
    JobCompletedWithErrors,
    JobFailed,
    JobStatus,
    JobSucceeded,
    JobSummary,
    fingerprint,
)
from waitbound.provider._openapi import openapi_document
from waitbound.provider._settings import ProviderSettings
from waitbound.provider._store import JobStore, MemoryJobStore, SQLiteJobStore

__all__ = [
    "Job",
    "JobCompletedWithErrors",
    "JobFailed",
    "JobNotCancelableError",
    "JobNotFoundError",
    "JobStatus",
    "JobStore",
    "JobSucceeded",
    "JobSummary",
    "JobUrls",
    "MemoryJobStore",
    "Progress",
    "ProviderApp",
    "ProviderSettings",
    "Runner",
    "SQLiteJobStore",
    "TERMINAL_STATUSES",
    "fingerprint",
    "job_body",
    "openapi_document",
]
