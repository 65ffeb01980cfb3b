"""The story's sentences: how the common audit events are told, in one place.

A decision passes the event's data; these functions render the one sentence
(``AuditEvent.summary``) that ``waitbound story``, the web pages and the audit log
show. They decide nothing: every rule stays with its decision, and each function only
puts the values it is given into words (an empty or ``None`` part is left out).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from waitbound._base._json import JSON, show
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._profile._schedule import DelaySource

__all__ = [
    "answer_lost",
    "cancel_accepted",
    "cancel_not_accepted",
    "created",
    "errors_due",
    "finished",
    "observed",
    "paced",
    "receipt_due",
    "reserved",
    "result_due",
    "scheduled",
]


def created(
    what: str,
    profile: str,
    *,
    deadline_at: datetime,
    business_deadline_at: datetime | None,
    max_requests: int,
    first_after_s: float | None,
) -> str:
    """``created``: *what* is waited on (``waiting on URL``, ``submitting POST URL``),
    with *profile*, its deadlines and budget; *first_after_s*: the first request waits
    that long because the caller holds a fresh answer (``None``: it does not)."""
    return (
        f"{what} with profile {profile}: deadline {deadline_at.isoformat()}"
        + (
            f", business deadline {business_deadline_at.isoformat()}"
            if business_deadline_at
            else ""
        )
        + f", at most {max_requests} requests"
        + (
            f"; first request after {first_after_s:g}s (the caller holds a fresh answer)"
            if first_after_s is not None
            else ""
        )
    )


def answer_lost(request: str) -> str:
    """``answer_lost``: the answer to the last *request* (its kind) was never recorded."""
    return (
        f"the answer to the last {request} request was never recorded "
        "(the process stopped, or stalled past its lease); that request stays counted"
    )


def reserved(request: str, used: int, most: int, *, timeout_s: float, late_s: float) -> str:
    """``reserved``: request number *used* of *most*, with its timeout; a status request
    sent more than a second after it was planned (*late_s*) says so."""
    return f"reserved {request} request {used} of {most} (timeout {timeout_s:.3g}s)" + (
        f"; {late_s:.3g}s later than planned" if late_s > 1 and request == "status" else ""
    )


def observed(
    request: str,
    number: int,
    *,
    transport_error: str | None,
    http_status: int | None,
    state: JSON = None,
    classification: str | None = None,
    progress: JSON = None,
    request_id: str | None = None,
) -> str:
    """``observed``: the *number*-th *request* of its kind failed (*transport_error*) or
    was answered; a read answer names its *state* and *classification* (and
    *progress*), and the provider's *request_id* when there is one."""
    head = f"{request} request {number}"
    if transport_error:
        return f"{head} failed: {transport_error}"
    text = f"{head} answered HTTP {http_status}"
    if classification is not None:
        text += f": state {show(state)} ({classification})"
        if progress is not None:
            text += f", progress {json.dumps(progress)[:40]}"
    return text + (f" [request id {request_id}]" if request_id else "")


def scheduled(
    note: str, next_in_s: float, source: DelaySource, ignored: Sequence[tuple[str, object]] = ()
) -> str:
    """``scheduled``: *note* (why, in words; may be empty), the next request in
    *next_in_s* seconds by *source*, and the hints *ignored* (``(origin, value)``)."""
    skipped = (
        "; ignored " + ", ".join(f"{origin} {value!r}" for origin, value in ignored)
        if ignored
        else ""
    )
    why = f"{note}; " if note else ""
    return f"{why}next request in {next_in_s:.3g}s ({source.value}){skipped}"


def paced(origin: str, added_s: float, next_in_s: float) -> str:
    """What origin pacing adds to a ``scheduled`` sentence (``"; paced by origin ..."``)."""
    return (
        f"; paced by origin {origin}: {added_s:.3g}s later, so the polls of operations "
        f"due together spread (next request in {next_in_s:.3g}s)"
    )


def result_due(outcome: OutcomeKind, url: str) -> str:
    """``result_due``: the job ended *outcome*; its result is fetched once from *url*."""
    return f"terminal {outcome.value}; fetching the result from {url} once"


def receipt_due(outcome: OutcomeKind, reason: Reason | None, url: str) -> str:
    """``result_due`` of a run that ended without success (*outcome*, *reason*): its
    receipt is fetched once from *url*."""
    ended = outcome.value + (f" ({reason.value})" if reason else "")
    return f"terminal {ended}; fetching its receipt from {url} once"


def errors_due(url: str) -> str:
    """``errors_due``: a partial success; its first page of errors is fetched from *url*."""
    return f"completed with errors; fetching the first page of errors from {url} once"


def cancel_accepted(answer: str) -> str:
    """``cancel_answered``, accepted: *answer* is the provider's (``HTTP 202``)."""
    return f"cancel accepted ({answer}); the status endpoint will tell how the job ends"


def cancel_not_accepted(words: str) -> str:
    """``cancel_answered``, not accepted: *words* say who asked and what came back."""
    return f"{words}; one status look decides whether the job already ended"


def finished(
    outcome: OutcomeKind,
    reason: Reason | None,
    *,
    detail: str | None = None,
    late_cancel: str | None = None,
) -> str:
    """``finished``: the *outcome* and *reason*, then the *detail* (why, in words) or,
    without one, what a *late_cancel* (a refused cancel that came too late) says."""
    summary = f"outcome {outcome.value}" + (f" ({reason.value})" if reason else "")
    if detail:
        summary += f": {detail}"
    elif late_cancel is not None:
        summary += f"; {late_cancel}"
    return summary
