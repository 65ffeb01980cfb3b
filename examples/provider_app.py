"""A transcode-style service built with waitbound.provider, in under 80 lines.

Run it: ``uvicorn --app-dir examples provider_app:app`` (port 8000), then wait on a job:
``echo '{}' > body.json && waitbound run POST http://127.0.0.1:8000/jobs
--profile provider-kit --body body.json``.

The body (all keys optional; ``{}`` transcodes for 4 seconds and succeeds):
``source`` (a name), ``duration_s`` (seconds of work), ``outcome`` (``succeeded``,
``failed``, ``completed_with_errors`` or ``canceled``: how the job ends), ``segments``
(how many parts), ``uncancelable`` (true: cancels are refused).
"""

from __future__ import annotations

import os

import anyio

from waitbound.provider import (
    Job,
    JobCompletedWithErrors,
    JobFailed,
    JobSucceeded,
    JobSummary,
    Progress,
    ProviderApp,
    ProviderSettings,
    SQLiteJobStore,
)

DEFAULT_DURATION_S = 4.0


def _options(job: Job) -> dict[str, object]:
    return job.request if isinstance(job.request, dict) else {}


def estimate_s(body: object) -> float:
    """The expected duration of a transcode, in seconds."""
    value = body.get("duration_s", DEFAULT_DURATION_S) if isinstance(body, dict) else None
    return float(value) if isinstance(value, int | float) else DEFAULT_DURATION_S


async def transcode(job: Job, progress: Progress) -> object:
    """Pretend to transcode *job*'s source: report progress per segment, then end."""
    options = _options(job)
    segments = int(options.get("segments", 4))  # type: ignore[call-overload]
    source = str(options.get("source", "input.mov"))
    await progress(0)
    for done in range(1, segments + 1):
        await anyio.sleep(estimate_s(options) / segments)
        await progress(100 * done / segments)
    match options.get("outcome", "succeeded"):
        case "failed":
            return JobFailed(error={"code": "unsupported_codec", "message": "codec not supported"})
        case "completed_with_errors":
            errors = tuple({"segment": n, "error": "corrupt frame"} for n in range(2))
            summary = JobSummary(processed=segments, succeeded=segments - 2, failed=2)
            return JobCompletedWithErrors(summary=summary, errors=errors, result=source)
        case "canceled":
            await app.cancel(job.job_id, reason="the source was withdrawn by its owner")
            return None
    return JobSucceeded(result={"output_url": f"https://cdn.example/{source}.mp4"})


def cancelable(body: object) -> bool:
    """Whether a transcode accepts a cancel: not when ``uncancelable`` is true."""
    return not (isinstance(body, dict) and body.get("uncancelable", False))


store = SQLiteJobStore(os.environ["PROVIDER_DB"]) if "PROVIDER_DB" in os.environ else None
app = ProviderApp(
    transcode,
    store=store,
    settings=ProviderSettings(
        poll_after_s=float(os.environ.get("PROVIDER_POLL_AFTER_S", "1")),
        estimate_s=estimate_s,
        cancelable=cancelable,
    ),
)
