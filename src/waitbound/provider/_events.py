"""The SSE progress stream of one job (``GET /jobs/{job_id}/events``, sse-starlette).

Each change of the job is one ``event: status`` whose ``data:`` is the job's status
body (one line of JSON); the first event is sent at once. The stream ends with
``event: end`` (the final status body) once the job is terminal. The store is read
every ``events_interval_s`` seconds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent

from waitbound._base._json import JSON
from waitbound.provider._bodies import JobUrls
from waitbound.provider._job import Job
from waitbound.provider._store import JobStore

__all__ = ["job_events"]


def job_events(
    store: JobStore,
    body_of: Callable[[Job, JobUrls], JSON],
    job_id: str,
    urls: JobUrls,
    *,
    interval_s: float,
) -> EventSourceResponse:
    """The event stream of *job_id* (which exists in *store*): each change's status body
    (``body_of``), the store read every *interval_s* seconds."""

    async def stream() -> AsyncIterator[ServerSentEvent]:
        last: tuple[object, ...] | None = None
        while True:
            job = store.get(job_id)
            if job is None:
                return
            seen = (job.status, job.progress_percent, job.cancelable, job.updated_at)
            if job.done:
                data = json.dumps(body_of(job, urls), separators=(",", ":"))
                yield ServerSentEvent(data=data, event="end")
                return
            if seen != last:
                last = seen
                data = json.dumps(body_of(job, urls), separators=(",", ":"))
                yield ServerSentEvent(data=data, event="status")
            await anyio.sleep(interval_s)

    return EventSourceResponse(stream(), headers={"Cache-Control": "no-store"})
