"""An operation as an MCP task (the Tasks extension, ``io.modelcontextprotocol/tasks``).

Pure functions from a stored :class:`~waitbound._model._record.Record` to the extension's
wire shapes (``Task``, ``DetailedTask``, ``CreateTaskResult``, the elicitation of an
``input_required`` task) and from a client's ``inputResponses`` to one checked
answer. Nothing here reads the store, a clock or the protocol session: any server
process on the same store computes the same task from the same record.

The mapping (see ``docs/mcp.md``, "Tasks"):

- in flight (submitting or polling) with no open decision request: ``working``;
- an open decision request (escalated, timed out, an agent's ``request_extension``):
  ``input_required``, with one elicitation keyed by the request (a key is never
  reused: it names the request's opening instant);
- outcome ``canceled`` (the provider confirmed): ``cancelled``;
- any other outcome: ``completed`` with a ``CallToolResult`` whose structured content
  is the tool's answer and whose ``isError`` is true unless the job succeeded.

The ``failed`` status is never used: the specification reserves it for JSON-RPC
errors, and a provider's failure is a tool result that reports failure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from waitbound._base._json import JSON
from waitbound._model._outcome import OutcomeKind
from waitbound._model._record import Record
from waitbound._rules._options import Option, cost, options
from waitbound.mcp._answers import Answer, fit

__all__ = [
    "ANSWER_MARK",
    "EXTENSION_ID",
    "TASK_PROTOCOL_VERSIONS",
    "TASK_TOOLS",
    "Answered",
    "BadResponses",
    "ElicitedAnswer",
    "answered_key",
    "elicitation",
    "input_key",
    "last_updated",
    "offered",
    "parse_responses",
    "status_of",
    "task",
    "tool_result",
]

EXTENSION_ID: Final = "io.modelcontextprotocol/tasks"
"""The extension's identifier (client and server capabilities)."""

TASK_PROTOCOL_VERSIONS: Final = frozenset({"2026-07-28"})
"""The protocol versions the extension's specification is written for: its methods
are served at these versions only (any other answers "method not found")."""

TASK_TOOLS: Final = frozenset({"start_job", "await_job"})
"""The tools whose calls may answer with a task handle."""

MIN_POLL_MS: Final = 1000
"""The shortest ``pollIntervalMs`` suggested (a job due at once is still read once a
second at most)."""

DECISION_POLL_MS: Final = 5000
"""``pollIntervalMs`` while a task waits on a person (no check is scheduled then)."""

ANSWER_MARK: Final = "elicitation "
"""How a decision request filed from a client's answer names its key: its
``requested_by`` starts with ``elicitation KEY``."""

_KEY_PREFIX: Final = "decision-"
MAX_KEYS: Final = 16
"""The most ``inputResponses`` entries one ``tasks/update`` may carry."""
MAX_KEY_CHARS: Final = 100
WHY_CHARS: Final = 500
"""The longest reason recorded (the decision API's bound)."""

ANSWERABLE: Final = tuple(
    o for o in Option if o not in (Option.RESUME_WITH_CREDENTIALS, Option.RESUME_WITH_PROFILE)
)
"""Options an elicitation offers: those that need nothing but a reason and a grant
(new credentials or a corrected profile are given with ``waitbound decide``)."""


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def input_key(record: Record) -> str | None:
    """The ``inputRequests`` key of the record's open decision request (``None``
    without one): ``decision-`` and the microsecond it was opened, unique over the
    task's life since no two requests of one operation open at the same instant."""
    request = record.decision_request
    if request is None:
        return None
    return f"{_KEY_PREFIX}{round(request.opened_at.timestamp() * 1_000_000)}"


def answered_key(record: Record) -> bool:
    """Whether the open request's key was already answered through ``tasks/update``
    (the answer was filed as a request a person decides)."""
    request, key = record.decision_request, input_key(record)
    return (
        request is not None
        and key is not None
        and request.requested_by.startswith(f"{ANSWER_MARK}{key} ")
    )


def offered(record: Record, now: datetime) -> tuple[Option, ...]:
    """The options an elicitation offers on *record* at *now*."""
    return tuple(o for o in options(record, now) if o in ANSWERABLE)


def elicitation(record: Record, now: datetime, message: str, *, max_chars: int) -> Answer:
    """The ``elicitation/create`` request (form mode) asking for the decision: the
    escalation *message* (cut to *max_chars*), the options with their costs, and a
    required reason; ``minutes`` and ``checks`` are the grant of a resuming option."""
    choices: list[JSON] = [
        {"const": o.value, "title": f"{o.value}: {fit(cost(record, o), 200)}"}
        for o in offered(record, now)
    ]
    schema: Answer = {
        "type": "object",
        "properties": {
            "option": {"type": "string", "title": "Decision", "oneOf": choices},
            "why": {
                "type": "string",
                "title": "Why (kept in the audit log)",
                "minLength": 1,
                "maxLength": WHY_CHARS,
            },
            "minutes": {
                "type": "number",
                "title": "Minutes granted (a resuming option; default: the suggested grant)",
                "minimum": 0,
            },
            "checks": {
                "type": "integer",
                "title": "Checks granted (a resuming option; default: the suggested grant)",
                "minimum": 1,
            },
        },
        "required": ["option", "why"],
    }
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": fit(message, max_chars),
            "requestedSchema": schema,
        },
    }


def _ms(seconds: float) -> int:
    return max(0, math.ceil(seconds * 1000))


def task(
    record: Record,
    now: datetime,
    *,
    status_message: str,
    retention_s: float,
    result: Answer | None = None,
    input_requests: Mapping[str, Answer] | None = None,
) -> Answer:
    """The ``DetailedTask`` of *record* at *now*.

    Args:
        status_message: the task's ``statusMessage``.
        retention_s: how long the task outlives the deadline (``ttlMs`` is the
            deadline, from creation, plus this, in milliseconds).
        result: the ``CallToolResult`` of a completed task (see :func:`tool_result`).
        input_requests: the outstanding requests of an ``input_required`` task (may be
            empty once its one request was answered and waits on a person).
    """
    status = status_of(record)
    answer: Answer = {
        "taskId": record.operation_id,
        "status": status,
        "statusMessage": status_message,
        "createdAt": _iso(record.created_at),
        "lastUpdatedAt": _iso(last_updated(record)),
        "ttlMs": _ms((record.deadline_at - record.created_at).total_seconds() + retention_s),
    }
    if status == "working":
        wait = (record.next_poll_at - now).total_seconds()
        answer["pollIntervalMs"] = max(MIN_POLL_MS, _ms(wait))
    elif status == "input_required":
        answer["pollIntervalMs"] = DECISION_POLL_MS
        answer["inputRequests"] = dict(input_requests or {})
    elif status == "completed":
        answer["result"] = result or {}
    return answer


def last_updated(record: Record) -> datetime:
    """The latest instant the record says something changed at: created, observed,
    a cancel asked, a request opened, a decision made, finished."""
    moments = [
        record.created_at,
        record.last_observed_at,
        record.cancel_requested_at,
        record.finished_at,
        record.decision_request.opened_at if record.decision_request else None,
        record.decisions[-1].at if record.decisions else None,
    ]
    return max(m for m in moments if m is not None)


def status_of(record: Record) -> str:
    """The task status of *record* (see the module's mapping)."""
    if record.decision_request is not None:
        return "input_required"
    if not record.is_finished:
        return "working"
    if record.outcome is OutcomeKind.CANCELED:
        return "cancelled"
    return "completed"


def tool_result(answer: Answer) -> Answer:
    """The ``CallToolResult`` of a finished tool *answer*: the answer as structured
    content and as its JSON text, ``isError`` unless it reports success."""
    return {
        "resultType": "complete",
        "content": [{"type": "text", "text": json.dumps(answer, ensure_ascii=False)}],
        "structuredContent": answer,
        "isError": answer.get("status") != OutcomeKind.SUCCEEDED.value,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class ElicitedAnswer:
    """A client's accepted answer to a task's elicitation, checked.

    Attributes:
        option: the chosen option (one the elicitation offered).
        why: the reason, one line.
        minutes, checks: the grant asked for (``None``: the suggested grant).
    """

    option: str
    why: str
    minutes: float | None = None
    checks: int | None = None


@dataclass(frozen=True, slots=True)
class Answered:
    """The ``inputResponses`` of one ``tasks/update``: the answer to the outstanding
    key (``None`` when none of the keys is outstanding: nothing is done)."""

    answer: ElicitedAnswer | None


class BadResponses(ValueError):
    """``inputResponses`` that are not of the elicitation's shape (one line)."""


_CONTENT_KEYS: Final = frozenset({"option", "why", "minutes", "checks"})


def parse_responses(
    raw: object, outstanding: str | None, allowed: Sequence[str], minutes_cap: float
) -> Answered:
    """Check *raw* ``inputResponses`` against the one *outstanding* key.

    Keys that are not outstanding (never issued, already answered, superseded) are
    ignored, as the specification asks; their values must still be objects of at most
    a few kilobytes. The outstanding key's answer must be an accepted form: ``option``
    among *allowed*, a one-line ``why``, and an optional grant (``minutes`` in
    ``(0, minutes_cap]``, ``checks`` a whole number >= 1).

    Raises:
        BadResponses: a wrong shape, an unknown field, a declined answer, a value out
            of bounds; the message names it.
    """
    if not isinstance(raw, dict):
        raise BadResponses("inputResponses must be an object of key: response")
    if len(raw) > MAX_KEYS:
        raise BadResponses(f"inputResponses holds {len(raw)} keys; at most {MAX_KEYS}")
    found: ElicitedAnswer | None = None
    for key, value in raw.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
            raise BadResponses(f"an inputResponses key must be 1-{MAX_KEY_CHARS} characters")
        if not isinstance(value, dict):
            raise BadResponses(f"inputResponses[{key[:40]!r}] must be an object")
        if len(json.dumps(value, default=str)) > 4 * WHY_CHARS + 1000:
            raise BadResponses(f"inputResponses[{key[:40]!r}] is too large")
        if key == outstanding:
            found = _answer(key, value, allowed, minutes_cap)
    return Answered(found)


def _answer(
    key: str, value: Mapping[str, Any], allowed: Sequence[str], minutes_cap: float
) -> ElicitedAnswer:
    where = f"inputResponses[{key!r}]"
    unknown = sorted(set(value) - {"action", "content", "_meta"})
    if unknown:
        raise BadResponses(f"{where}: unknown field {str(unknown[0])[:40]!r}")
    action = value.get("action")
    if action != "accept":
        raise BadResponses(
            f"{where}: only an accepted answer is recorded (action {str(action)[:20]!r}); "
            "the request stays open for a person"
        )
    content = value.get("content")
    if not isinstance(content, dict):
        raise BadResponses(f"{where}.content must be an object with option and why")
    extra = sorted(set(content) - _CONTENT_KEYS)
    if extra:
        raise BadResponses(
            f"{where}.content: unknown field {str(extra[0])[:40]!r} "
            f"(known: {', '.join(sorted(_CONTENT_KEYS))})"
        )
    option = content.get("option")
    if not isinstance(option, str) or option not in allowed:
        raise BadResponses(
            f"{where}.content.option must be one of {', '.join(allowed) or '(none open)'}"
        )
    why = content.get("why")
    if not isinstance(why, str) or not why.strip() or len(why) > WHY_CHARS:
        raise BadResponses(f"{where}.content.why must be 1-{WHY_CHARS} characters")
    if not why.isprintable():
        raise BadResponses(f"{where}.content.why must be one line of printable text")
    minutes = content.get("minutes")
    if minutes is not None:
        numeric = isinstance(minutes, int | float) and not isinstance(minutes, bool)
        if not numeric or not math.isfinite(minutes) or not 0 < minutes <= minutes_cap:
            raise BadResponses(
                f"{where}.content.minutes must be a number of minutes in (0, {minutes_cap:g}]"
            )
    checks = content.get("checks")
    if checks is not None and (
        not isinstance(checks, int) or isinstance(checks, bool) or not 1 <= checks <= 1_000_000
    ):
        raise BadResponses(f"{where}.content.checks must be a whole number >= 1")
    return ElicitedAnswer(
        option=option,
        why=why.strip(),
        minutes=None if minutes is None else float(minutes),
        checks=checks,
    )
