"""The escalation message: what a person reads when an operation waits on a decision.

One rendering for every surface that shows it (the CLI, the inbox, MCP, the
``operation.decision_requested`` notice): rendered from the record and the time only,
without secrets, so a value that stores write (an outbox entry's payload) can carry it.
:mod:`waitbound._rules._decisions` applies the decision; this module only words the question.
"""

from __future__ import annotations

from datetime import datetime

from waitbound._base._json import show
from waitbound._base._urls import redact_url
from waitbound._model._record import Record
from waitbound._rules._options import SYSTEM, cost, counted, options, span

__all__ = ["escalation_message"]


def escalation_message(record: Record, now: datetime) -> str:
    """Everything a person needs to decide in one look, without secrets, e.g.::

    External job needs a decision
    Operation: report-export-2025-04-18-01
    Provider job: exp_71c
    Last state: running
    Elapsed time: 40 minutes
    Status requests: 12 of 12
    Last HTTP result: 200 at 10:58 UTC
    Stopped because: request_budget_exhausted
    Safe options: extend waiting once by 15 minutes with 4 more checks, cancel at provider: …
    """
    request = record.oversight.decision_request
    end = record.ending.finished_at or now
    elapsed = max(0.0, (end - record.contract.created_at).total_seconds())
    last = "none"
    if record.answer.last_observed_at is not None:
        code = record.answer.last_http_status
        what = f"{code}" if code is not None else "no answer"
        last = f"{what} at {record.answer.last_observed_at.strftime('%H:%M')} UTC"
    state = record.answer.provider_state
    state_text = state if isinstance(state, str) else "none" if state is None else show(state)
    lines = [
        "External job needs a decision",
        f"Operation: {record.contract.operation_id}",
        *_what_the_job_is(record),
        f"Provider job: {_short(record.submission.job_id or '(not known)')}",
        f"Last state: {_short(state_text)}",
        f"Elapsed time: {_duration(elapsed)}",
        f"Status requests: {record.counters.status_requests_used} of {record.max_requests}",
    ]
    lines.append(f"Last HTTP result: {last}")
    if record.is_finished:
        lines.append(
            f"Stopped because: {record.ending.reason.value if record.ending.reason else 'unknown'}"
        )
    if request is not None and request.requested_by != SYSTEM:
        lines.append(
            f"Requested by: {request.requested_by}, {span(request.minutes or 0, more=True)}"
            f" with {counted(request.checks or 0, 'more check')} ({request.why})"
        )
    others = [
        (n, what)
        for n, what in (
            (record.counters.submit_attempts, "submit"),
            (record.counters.result_requests_used, "result"),
            (record.counters.cancel_requests_used, "cancel"),
        )
        if n
    ]
    if others:  # the budget is shared: say what else spent it, counted apart
        spent = ", ".join(f"{n} {what}" for n, what in others)
        lines.append(
            f"All requests: {record.requests_used} of {record.max_requests} "
            f"({record.counters.status_requests_used} status, {spent})"
        )
    offered = ", ".join(cost(record, option) for option in options(record, now))
    lines.append(f"Safe options: {offered or 'none'}")
    if request is not None:
        lines.append(f"Decide by: {request.due_at.strftime('%Y-%m-%d %H:%M')} UTC")
    return "\n".join(lines)


def _what_the_job_is(record: Record) -> list[str]:
    """The escalation message's lines that say what the job is and how far it got: its
    label, its source (the profile, and where it was submitted or is polled, without
    user info or query), its progress and the provider's estimate of its end (each only
    when known)."""
    lines = []
    if record.contract.label:
        lines.append(f"Label: {_short(record.contract.label)}")
    where = (
        record.submission.submit_url or record.submission.caller_url or record.submission.status_url
    )
    source = f"{record.contract.profile.name} profile"
    if where:
        source += f", {redact_url(where)}"
    lines.append(f"Source: {_short(source)}")
    if record.submission.submit_url:
        method = record.submission.submit_method or "POST"
        submitted = f"{method} {redact_url(record.submission.submit_url)}"
        if record.submission.submit_fingerprint:
            submitted += f" (request fingerprint {record.submission.submit_fingerprint[:12]})"
        lines.append(f"Submitted: {_short(submitted)}")
    if record.answer.progress is not None:
        progress = record.answer.progress
        lines.append(
            f"Progress: {_short(progress if isinstance(progress, str) else show(progress))}"
        )
    if record.answer.estimated_end_at is not None and record.answer.estimate_from is not None:
        lines.append(
            "Provider estimate: ends by "
            f"{record.answer.estimated_end_at.strftime('%Y-%m-%d %H:%M:%S')} "
            f"UTC ({_short(record.answer.estimate_from)})"
        )
    return lines


def _short(text: str, limit: int = 120) -> str:
    """*text* cut to *limit* characters (``…`` marks the cut): a provider's value is
    shown, never a provider's essay."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return counted(round(seconds), "second")
    if seconds < 2 * 3600:
        return counted(round(seconds / 60), "minute")
    return f"{seconds / 3600:.1f} hours"
