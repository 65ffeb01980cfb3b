"""How an operation's story is shown to a person, on every surface (the CLI's
``show``/``watch`` and the web inbox): the time, the escaping of provider text, the
details of one audit event, and the audit chain's status.

Pure functions over audit events and records: no terminal, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from waitbound._base._json import JSON, show
from waitbound._engine._audit_check import diagnose_record
from waitbound._model._audit import AuditEvent, AuditFinding, EventKind, StoredAuditEvent
from waitbound._model._record import Record
from waitbound._rules._options import option_costs

__all__ = [
    "NEXT_KINDS",
    "chain_status",
    "event_details",
    "operation_document",
    "printable",
    "short_time",
    "story_line",
    "timestamp",
]

NEXT_KINDS = (EventKind.SCHEDULED, EventKind.CREATED, EventKind.RESULT_DUE, EventKind.DECIDED)
"""The audit kinds whose ``next_poll_at`` is shown as "next …" (when the next check is)."""


def timestamp(value: datetime) -> str:
    """*value* as ``2026-01-01 12:00:05.120Z`` (UTC, milliseconds)."""
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def short_time(text: str) -> str:
    """An RFC 3339 instant as ``12:00:05.120Z`` (the time of day of :func:`timestamp`)."""
    return timestamp(datetime.fromisoformat(text))[11:]


def printable(text: str) -> str:
    """*text* with control characters escaped: a provider's value cannot forge a line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def event_details(kind: str, data: Mapping[str, JSON]) -> list[str]:
    """The state, next poll and requests-used parts of a story line, e.g.
    ``["state running", "next 12:00:10.000Z (local_backoff)", "requests 3/30"]``; a
    poll origin pacing moved says so: ``(local_backoff, paced_by_origin +2.5s)``."""
    parts = []
    if data.get("state") is not None:
        parts.append(f"state {printable(show(data['state']))}")
    next_poll_at = data.get("next_poll_at")
    if isinstance(next_poll_at, str) and kind in NEXT_KINDS:
        source = str(data.get("delay_source") or "now")
        paced = data.get("paced_by_origin")  # origin pacing moved it (``_pacing.py``)
        if isinstance(paced, dict) and isinstance(paced.get("added_s"), int | float):
            source += f", paced_by_origin +{paced['added_s']:g}s"
        parts.append(f"next {short_time(next_poll_at)} ({source})")
    if "requests_used" in data:
        parts.append(f"requests {data['requests_used']}/{data['max_requests']}")
    return parts


def story_line(event: AuditEvent) -> str:
    """One audit event as a line: time, what happened, state, next poll, requests used."""
    head = f"{timestamp(event.at)}  {event.kind:<12} {printable(event.summary)}"
    return " | ".join([head, *event_details(event.kind, event.data)])


def chain_status(
    record: Record,
    events: Sequence[StoredAuditEvent],
    key: bytes | None,
    *,
    escaped: bool = True,
) -> tuple[str, AuditFinding | None]:
    """``intact`` (or ``intact, head authenticated`` with the audit *key*) or
    ``broken: …``, and the finding (``None`` when intact). See ``docs/audit.md``.

    *escaped*: the finding's line with control characters escaped (:func:`printable`),
    as every surface a person reads shows it (the CLI, ``show --json`` on a terminal,
    the inbox pages); ``False`` leaves it as it is, as ``GET /operations/{id}`` has
    always served it (its JSON goes to a program, not a terminal)."""
    finding = diagnose_record(record, list(events), key=key)
    if finding is not None:
        line = finding.line()
        return f"broken: {printable(line) if escaped else line}", finding
    return ("intact, head authenticated" if key is not None else "intact"), None


def operation_document(
    record: Record,
    events: Sequence[StoredAuditEvent],
    chain: tuple[str, AuditFinding | None],
    groups: Sequence[str] = (),
) -> dict[str, JSON]:
    """The operation as ``waitbound show --json`` prints it and ``GET
    /operations/{operation_id}`` serves it: ``record``, ``outcome`` (``None`` while
    waiting), ``option_costs``, ``audit_chain``, ``audit_finding``, ``groups`` (the ids
    of the groups it is a member of), ``audit``.

    *chain* is :func:`chain_status`'s answer for *record* and *events* (the two fronts
    differ only in its *escaped*)."""
    status, finding = chain
    return {
        "record": record.shown_json(),
        "outcome": record.to_outcome().as_json() if record.is_finished else None,
        "option_costs": [{"option": o, "cost": c} for o, c in option_costs(record)],
        "audit_chain": status,
        "audit_finding": finding.as_json() if finding is not None else None,
        "groups": list(groups),
        "audit": [
            {
                "seq": s.seq,
                "at": s.event.at.isoformat(),
                "kind": s.event.kind,
                "summary": s.event.summary,
                "data": dict(s.event.data),
                "hash": s.hash,
            }
            for s in events
        ],
    }
