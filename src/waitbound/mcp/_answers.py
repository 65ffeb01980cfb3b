"""Tool answers written for a model to read: unambiguous, bounded, free of secrets.

Every answer has a boolean ``done``, a ``status`` (``processing`` while the job runs,
else the outcome), a ``message`` in plain sentences, and — while the work is not
finished — the next tool to call and the least time to wait first. Provider text
(result, error, progress) is cut to a character budget; the rest is fetched by
reference with ``get_result``. Configured secrets are replaced before an answer
leaves the server.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Final

from waitbound._base._json import JSON
from waitbound._base._secrets import REDACTED
from waitbound._engine._escalations import Escalation
from waitbound._model._outcome import OutcomeKind
from waitbound._model._record import Phase, Record, reported_counts
from waitbound.mcp._labels import LABEL_PREFIX

__all__ = [
    "SMALL_CHARS",
    "Answer",
    "answer_bound",
    "bounded",
    "entry",
    "escalation_answer",
    "fit",
    "part_text",
    "provider_of",
    "scrub",
    "submitting_message",
    "view",
]

Answer = dict[str, JSON]

SMALL_CHARS: Final = 300
"""The budget of a provider value shown beside the main answer (state, progress, counts,
an unfetched result URL)."""

ID_CHARS: Final = 120
"""The most characters of a provider's job id shown."""


def answer_bound(max_chars: int) -> int:
    """The most characters an answer's JSON text can have: a result and an error of
    *max_chars* each, four small provider values, and the fixed fields and sentences."""
    return 2 * max_chars + 4 * SMALL_CHARS + 4 * ID_CHARS + 2000


def _text(value: JSON) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _encoded(value: JSON) -> int:
    """Characters of *value* as JSON text in an answer."""
    return len(json.dumps(value, ensure_ascii=False))


def fit(text: str, limit: int) -> str:
    """The longest start of *text* whose JSON string (quotes and escapes included) has
    at most *limit* characters."""
    cut = text[:limit]
    while cut and (over := _encoded(cut) - limit) > 0:
        # One character is at most 6 in JSON (\uXXXX): dropping over // 6 never drops
        # more than needed, so the loop ends at the longest start that fits.
        cut = cut[: len(cut) - max(1, over // 6)]
    return cut


def bounded(value: JSON, limit: int) -> tuple[JSON, bool]:
    """*value* itself when its JSON text fits in *limit* characters, else the start of
    that text (a string whose JSON form fits); and whether it was cut."""
    if _encoded(value) <= limit:
        return value, False
    return fit(_text(value), limit), True


def scrub(answer: JSON, secrets: Sequence[str]) -> JSON:
    """*answer* with every occurrence of a secret replaced by ``[redacted]``."""
    if not secrets:
        return answer
    if isinstance(answer, str):
        for secret in secrets:
            answer = answer.replace(secret, REDACTED)
        return answer
    if isinstance(answer, list):
        return [scrub(item, secrets) for item in answer]
    if isinstance(answer, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in answer.items()}  # type: ignore[misc]
    return answer


def _clip(job_id: str | None) -> str | None:
    return None if job_id is None else job_id[:ID_CHARS]


def _seconds_until(when: datetime, now: datetime) -> int:
    return max(1, math.ceil((when - now).total_seconds()))


def provider_of(record: Record) -> str | None:
    """The provider name in an ``mcp:NAME`` label, or in an ``mcp:OWNER/NAME`` one
    (an operation a named principal started; see ``waitbound.mcp._principal``)."""
    label = record.label or ""
    if not label.startswith(LABEL_PREFIX):
        return None
    return label.removeprefix(LABEL_PREFIX).rpartition("/")[2]


def _head(record: Record) -> Answer:
    """What every answer about one operation starts with: which it is, and how it stands."""
    status = record.outcome.value if record.outcome else "processing"
    return {
        "operation_id": record.operation_id,
        "job_id": _clip(record.job_id),
        "provider": provider_of(record),
        "done": record.is_finished,
        "status": "submitting" if record.phase is Phase.SUBMITTING else status,
        "reason": record.reason.value if record.reason else None,
    }


def entry(record: Record, now: datetime) -> Answer:
    """A short line of ``list_jobs``: what the operation is and how it stands."""
    line = _head(record) | {"created_at": record.created_at.isoformat()}
    if not record.is_finished:
        line["next_check_after_seconds"] = _seconds_until(record.next_poll_at, now)
    return line


def submitting_message(record: Record) -> str:
    """What an operation still being submitted says: NOT known to have started (never
    "has STARTED": no answer confirmed a job), and how it ends."""
    ends = f"{record.stop_at:%Y-%m-%d %H:%M:%S} UTC"
    return (
        f"Operation {record.operation_id} is being submitted and is NOT known to have "
        "started. Do not report success. If your start_job call never returned, call "
        "start_job again with the same idempotency_key and body; otherwise call "
        f"check_job in a few seconds. Unless it is sent again, it is stopped at {ends} "
        "(its deadline) and a person decides."
    )


def view(record: Record, now: datetime, *, max_chars: int) -> Answer:
    """The full answer about one operation (``check_job``, ``await_job``, ``start_job``).

    A result whose JSON text fits in *max_chars* characters is inline (``result``);
    a larger one is named by ``result_ref`` for ``get_result``. The error is cut to
    *max_chars* the same way. Other provider values are cut to :data:`SMALL_CHARS`.
    """
    record = record.evolve(submission=record.submission.evolve(job_id=_clip(record.job_id)))
    outcome = record.to_outcome()
    done = record.is_finished
    started = record.created_at
    end = record.finished_at or now
    answer: Answer = _head(record) | {
        "provider_state": bounded(record.provider_state, SMALL_CHARS)[0],
        "progress": bounded(record.progress, SMALL_CHARS)[0],
        "elapsed_seconds": round(max(0.0, (end - started).total_seconds()), 1),
        "requests_used": record.requests_used,
        "max_requests": record.max_requests,
        "deadline_at": record.deadline_at.isoformat(),
    }
    if not done:
        wait = _seconds_until(record.next_poll_at, now)
        answer["next_check_after_seconds"] = wait
        answer["next_tool"] = "await_job"
        standing = (
            f"{_job(record)} has STARTED and is NOT complete. Do not report success."
            if outcome.unfetched is None
            else replace(outcome, next_check_at=None).message
        )
        answer["message"] = (
            f"{standing} "
            f"It keeps running in the background; call await_job with operation_id "
            f"{record.operation_id!r} (it waits for you), or check_job after {wait} s."
        )
        if record.phase is Phase.SUBMITTING:
            answer["message"] = submitting_message(record)
            answer["next_tool"] = "start_job"
        return answer
    answer["counts"] = bounded(reported_counts(record.counts), SMALL_CHARS)[0]
    if outcome.result_url is not None:
        answer["result_url"] = bounded(outcome.result_url, SMALL_CHARS)[0]
    message = outcome.message
    if record.result is not None:
        result, cut = bounded(record.result, max_chars)
        if cut:
            answer["result_ref"] = _ref(record, "result", max_chars)
            message += " The result is large: call get_result to read it in parts."
            answer["next_tool"] = "get_result"
        else:
            answer["result"] = result
    if (whole_error := _error_value(record)) is not None:
        error, cut = bounded(whole_error, max_chars)
        answer["error"] = error
        if cut:
            answer["error_ref"] = _ref(record, "error", max_chars)
    if record.outcome is OutcomeKind.ESCALATED:
        answer["escalation"] = {
            "reason": record.reason.value if record.reason else None,
            "options": list(outcome.options),
            "decided_by": "a person (not an agent tool)",
        }
    answer["message"] = message
    return answer


COST_CHARS: Final = 200
"""The most characters of one option's cost shown (a cost may quote the provider's
state)."""


def escalation_answer(record: Record, filed: Escalation, *, max_chars: int) -> Answer:
    """The answer of ``request_extension``: the request as a person sees it, and a
    message that a PERSON decides and nothing was extended yet.

    The escalation message is cut to *max_chars*, each option's cost to
    :data:`COST_CHARS`; the proposal's reason is at most 500 characters (the API's
    bound), so the answer stays within :func:`answer_bound`.
    """
    request = record.decision_request
    message, _ = bounded(filed.message, max_chars)
    escalation: Answer = {
        "reason": filed.reason.value if filed.reason else None,
        "requested_by": filed.requested_by[: ID_CHARS + 10],
        "opened_at": filed.opened_at.isoformat(),
        "due_at": filed.due_at.isoformat(),
        "proposed_minutes": request.minutes if request else None,
        "proposed_checks": request.checks if request else None,
        "options": [{"option": o, "cost": fit(c, COST_CHARS)} for o, c in filed.options],
        "message": message,
        "decided_by": "a person (not an agent tool)",
    }
    if record.unfetched is not None:
        state = f"complete at the provider, its {record.unfetched} not fetched"
    elif not record.is_finished:
        state = "NOT complete"
    else:
        state = "stopped without an honest outcome"
    return _head(record) | {
        "requests_used": record.requests_used,
        "max_requests": record.max_requests,
        "deadline_at": record.deadline_at.isoformat(),
        "extended": False,
        "escalation": escalation,
        "next_tool": "await_job",
        "message": (
            f"Your request for more time is filed; a PERSON decides it (waitbound "
            f"escalations / waitbound decide). Nothing was extended yet: the deadline and "
            f"the request budget are unchanged, and {_job(record)} is {state}. Do not "
            f"report success. Call await_job or check_job with operation_id "
            f"{record.operation_id!r} to see how it goes on."
        ),
    }


def _job(record: Record) -> str:
    return f"Job {record.job_id}" if record.job_id else f"Operation {record.operation_id}"


def _ref(record: Record, part: str, max_chars: int) -> Answer:
    return {
        "tool": "get_result",
        "operation_id": record.operation_id,
        "part": part,
        "offset": 0,
        "chars_per_call": max_chars,
    }


def part_text(record: Record, part: str) -> tuple[JSON, str | None]:
    """A finished operation's ``result`` or ``error`` part, and its whole text (a
    string as it is, anything else as JSON text; ``None`` when there is no such part)."""
    value = record.result if part == "result" else _error_value(record)
    return value, None if value is None else _text(value)


def _error_value(record: Record) -> JSON:
    """The provider's error, with the first page of per-item errors when there is one."""
    if record.errors is None:
        return record.error
    return {"error": record.error, "errors": record.errors}
