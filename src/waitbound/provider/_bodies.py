"""The JSON bodies the provider kit answers with, and their plain messages for agents.

Every job answer (start, status, cancel, replay) has the same shape; terminal answers
add the result, the summary or the error. Messages say, in capitals where it matters,
whether the work is complete and which call to make next, and when.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

from waitbound._base._json import JSON
from waitbound.provider._job import Job

__all__ = ["AZURE_STATUS", "JobUrls", "error_body", "job_body", "operation_body", "retry_after"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobUrls:
    """The absolute URLs of one job's endpoints."""

    status_url: str
    result_url: str
    cancel_url: str
    errors_url: str
    events_url: str
    operation_url: str
    """The Azure-style status monitor (``Operation-Location``)."""


AZURE_STATUS: Final = {
    "processing": "Running",
    "succeeded": "Succeeded",
    "completed_with_errors": "Succeeded",
    "failed": "Failed",
    "canceled": "Canceled",
}
"""The kit's status → the Azure status monitor's ``status`` (the Azure REST API
guidelines' OperationStatus enum: NotStarted, Running, Succeeded, Failed, Canceled; the
last three are terminal). A partial success is ``Succeeded``: the operation completed,
and its counts and errors link travel as additional properties."""


def retry_after(poll_after_s: float) -> str:
    """The ``Retry-After`` value (RFC 9110 §10.2.3 delay-seconds, a whole number, rounded
    up) for a poll hint of *poll_after_s* seconds."""
    return str(max(0, math.ceil(poll_after_s)))


def _seconds(value: float) -> str:
    return f"{value:g} second" + ("" if value == 1 else "s")


def _message(job: Job, urls: JobUrls, poll_after_s: float, *, started: bool, inline: bool) -> str:
    wait = _seconds(poll_after_s)
    match job.status:
        case "processing":
            head = (
                f"The job {job.job_id} has STARTED and is NOT complete"
                if started
                else f"The job {job.job_id} is still processing and is NOT complete"
            )
            if job.progress_percent is not None and not started:
                head += f" ({job.progress_percent:g}% done)"
            return (
                f"{head}. This answer is not the result. Wait at least {wait}, then call "
                f"GET {urls.status_url} to check it; repeat until done is true."
            )
        case "succeeded":
            where = (
                "The result is in result (also at GET result_url)"
                if inline
                else f"The result is too large to include: fetch it once with GET {urls.result_url}"
            )
            return f"The job {job.job_id} is complete and succeeded. {where}; stop polling."
        case "completed_with_errors":
            summary = job.summary
            counts = (
                f"{summary.succeeded} of {summary.processed} items succeeded and "
                f"{summary.failed} failed"
                if summary
                else "some items failed"
            )
            return (
                f"The job {job.job_id} is complete WITH ERRORS: {counts}. Review the errors "
                f"with GET {urls.errors_url} before using the result; stop polling."
            )
        case "failed":
            return (
                f"The job {job.job_id} FAILED and will not be retried by this service: see "
                "error. There is no result; stop polling. Start a new job only if the error "
                "says that is worth doing."
            )
        case _:
            return (
                f"The job {job.job_id} was CANCELED before it completed; there is no result. "
                "Stop polling."
            )


def job_body(
    job: Job,
    urls: JobUrls,
    *,
    now: datetime,
    poll_after_s: float,
    inline_result_max_bytes: int,
    errors_limit: int,
    started: bool = False,
) -> dict[str, JSON]:
    """The JSON answer describing *job*.

    Args:
        job: the job.
        urls: its endpoints' URLs.
        now: the current time (aware UTC), for ``elapsed_seconds``.
        poll_after_s: the minimum wait before the next status call, in seconds.
        inline_result_max_bytes: a result whose JSON is larger is left to ``result_url``.
        errors_limit: the page size named in ``errors_url``'s ``limit``.
        started: the answer to the start request (its message says STARTED).
    """
    end = job.ended_at or now
    body: dict[str, JSON] = {
        "job_id": job.job_id,
        "status": job.status,
        "done": job.done,
        "cancelable": job.cancelable and not job.done,
        "progress_percent": 100.0 if job.status == "succeeded" else job.progress_percent,
        "elapsed_seconds": round(max(0.0, (end - job.created_at).total_seconds()), 3),
    }
    if not job.done:
        body["poll_after_seconds"] = poll_after_s
    if job.estimated_duration_s is not None:
        body["estimated_duration_seconds"] = job.estimated_duration_s
    body |= {
        "status_url": urls.status_url,
        "result_url": urls.result_url,
        "cancel_url": urls.cancel_url,
        "events_url": urls.events_url,
    }
    inline = True
    if job.status in ("succeeded", "completed_with_errors"):
        size = len(json.dumps(job.result, ensure_ascii=False).encode())
        inline = size <= inline_result_max_bytes
        if inline:
            body["result"] = job.result
        body["result_inline"] = inline
    if job.status == "completed_with_errors":
        body |= _partial(job, urls, errors_limit)
    if job.status == "failed":
        body["error"] = job.error
    if job.status == "canceled":
        body["cancel_reason"] = (job.error or {}).get("message")
    page = replace(urls, errors_url=f"{urls.errors_url}?limit={errors_limit}")
    body["message"] = _message(job, page, poll_after_s, started=started, inline=inline)
    return body


def operation_body(
    job: Job, urls: JobUrls, *, inline_result_max_bytes: int, errors_limit: int
) -> dict[str, JSON]:
    """The Azure-style status monitor of *job* (what ``Operation-Location`` names).

    The shape of the Azure REST API guidelines' OperationStatus: ``id``, ``status``
    (:data:`AZURE_STATUS`), ``error`` when ``Failed`` (and the cancel reason when
    ``Canceled``), ``result`` (a POST action's result) when it ``Succeeded`` and is
    small; additional properties: ``percentComplete``, ``job_status`` (the kit's own
    status, e.g. ``completed_with_errors``), ``job_url`` (the kit's status URL), and
    for a partial success ``summary`` (the counts) and ``errors_url``.
    """
    body: dict[str, JSON] = {"id": job.job_id, "status": AZURE_STATUS[job.status]}
    if job.progress_percent is not None or job.status == "succeeded":
        body["percentComplete"] = 100.0 if job.status == "succeeded" else job.progress_percent
    body |= {"job_status": job.status, "job_url": urls.status_url}
    if job.status in ("succeeded", "completed_with_errors"):
        size = len(json.dumps(job.result, ensure_ascii=False).encode())
        if size <= inline_result_max_bytes:
            body["result"] = job.result
        else:
            body["result_url"] = urls.result_url
    if job.status == "completed_with_errors":
        body |= _partial(job, urls, errors_limit)
    if job.status in ("failed", "canceled") and job.error is not None:
        body["error"] = job.error
    return body


def error_body(error: str, message: str, **extra: JSON) -> dict[str, JSON]:
    """An error answer: ``error`` (a stable code), ``message`` (what happened, what to do),
    and *extra* keys such as ``status``."""
    return {"error": error, **extra, "message": message}


def _partial(job: Job, urls: JobUrls, errors_limit: int) -> dict[str, JSON]:
    """A partial success's ``summary`` (the counts, ``None`` when not known) and
    ``errors_url`` (its first page of *errors_limit* errors)."""
    summary = job.summary
    counts: JSON = (
        None
        if summary is None
        else {
            "processed": summary.processed,
            "succeeded": summary.succeeded,
            "failed": summary.failed,
        }
    )
    return {"summary": counts, "errors_url": f"{urls.errors_url}?limit={errors_limit}"}
