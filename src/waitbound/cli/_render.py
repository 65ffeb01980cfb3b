"""How the CLI shows operations to a person: story lines, grouped requests, a status line.

Pure functions over audit events and records: no terminal, no clock (``now`` is an
argument), so each is tested as it is. What the web inbox shows too (the time, the
escaping, one event's details) is in ``waitbound._story``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from waitbound._base._json import JSON, show
from waitbound._base._urls import redact_url
from waitbound._model._audit import AuditEvent, EventKind
from waitbound._model._record import Record
from waitbound._rules._options import option_costs as costs_of
from waitbound._story import event_details as _details
from waitbound._story import printable, story_line
from waitbound._story import timestamp as _time

__all__ = [
    "LiveStatus",
    "StoryGrouper",
    "group_line",
    "grouped",
    "option_costs",
    "option_lines",
    "printable",
    "record_summary",
    "status_line",
    "story_line",
    "worker_summary_lines",
]


def _reservation_notes(summary: str) -> str:
    """What a ``reserved`` summary adds to "reserved status request N of M (timeout T)":
    its notes after the first ``;`` (late, sent with or without the caller's credentials)."""
    _, _, notes = summary.partition(";")
    return notes.strip()


def group_line(events: Sequence[AuditEvent]) -> str:
    """One request as one line: its ``reserved``, ``observed`` and ``scheduled`` events.

    The time is when the request was reserved (sent); the details (state, next poll,
    requests used) are the last event's.
    """
    if len(events) == 1:
        return story_line(events[0])
    first, last = events[0], events[-1]
    sentences = [printable(e.summary) for e in events[1:]]
    notes = _reservation_notes(first.summary)
    if notes:
        sentences.insert(1, printable(notes))
    head = f"{_time(first.at)}  {'request':<12} {'; '.join(sentences)}"
    return " | ".join([head, *_details(last.kind, last.data)])


def _extends(kinds: Sequence[str], kind: str) -> bool:
    """Whether an event of *kind* belongs to the request group of *kinds* so far."""
    reserved, observed, scheduled = EventKind.RESERVED, EventKind.OBSERVED, EventKind.SCHEDULED
    return (kinds, kind) in (([reserved], observed), ([reserved, observed], scheduled))


def _open(kinds: Sequence[str]) -> bool:
    """Whether a group of *kinds* may still grow (a request not yet observed or scheduled)."""
    return kinds in ([EventKind.RESERVED], [EventKind.RESERVED, EventKind.OBSERVED])


def grouped(events: Sequence[AuditEvent]) -> list[tuple[int, int]]:
    """How the story groups *events*, as (first, last) indexes: each request's
    ``reserved`` / ``observed`` / ``scheduled`` events together, every other event alone."""
    spans: list[tuple[int, int]] = []
    held: list[int] = []
    for index, event in enumerate(events):
        if held and _extends([events[i].kind for i in held], event.kind):
            held.append(index)
        else:
            if held:
                spans.append((held[0], held[-1]))
            held = [index]
        if not _open([events[i].kind for i in held]):
            spans.append((held[0], held[-1]))
            held = []
    if held:
        spans.append((held[0], held[-1]))
    return spans


class StoryGrouper:
    """Turn audit events, as they arrive, into story lines (the grouping of :func:`grouped`).

    A request's line is returned once its group is complete; with ``every_event`` each
    event is its own line (:func:`story_line`), as in ``--events``.
    """

    def __init__(self, *, every_event: bool = False) -> None:
        self.every_event = every_event
        self._held: list[AuditEvent] = []

    def push(self, event: AuditEvent) -> list[str]:
        """Take one event; return the lines now complete (possibly none)."""
        if self.every_event:
            return [story_line(event)]
        lines: list[str] = []
        if self._held and _extends([e.kind for e in self._held], event.kind):
            self._held.append(event)
        else:
            lines = self.flush()
            self._held = [event]
        if not _open([e.kind for e in self._held]):
            lines += self.flush()
        return lines

    def flush(self) -> list[str]:
        """Return the line of the events held back (an unfinished group), if any."""
        held, self._held = self._held, []
        return [group_line(held)] if held else []


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveStatus:
    """What the live status line shows, updated from each audit event (:meth:`after`)."""

    operation_id: str
    state: JSON = None
    phase: str | None = None
    requests_used: int = 0
    max_requests: int | None = None
    next_poll_at: datetime | None = None
    delay_source: str | None = None
    sending: str | None = None
    outcome: str | None = None

    def after(self, event: AuditEvent) -> LiveStatus:
        """The status once *event* happened."""
        data = event.data
        next_poll = data.get("next_poll_at")
        used, most = data.get("requests_used"), data.get("max_requests")
        return replace(
            self,
            state=data.get("state", self.state),
            phase=str(data["phase"]) if isinstance(data.get("phase"), str) else self.phase,
            requests_used=used if isinstance(used, int) else self.requests_used,
            max_requests=most if isinstance(most, int) else self.max_requests,
            next_poll_at=datetime.fromisoformat(next_poll) if isinstance(next_poll, str) else None,
            delay_source=str(data.get("delay_source") or "") or None,
            sending=str(data.get("request") or "status")
            if event.kind == EventKind.RESERVED
            else None,
            outcome=str(data["outcome"]) if isinstance(data.get("outcome"), str) else self.outcome,
        )


def status_line(status: LiveStatus, now: datetime) -> str:
    """The live line: operation, state, requests used of the budget, and what comes next
    (a countdown to the next poll, in seconds)."""
    budget = f"/{status.max_requests}" if status.max_requests is not None else ""
    parts = [
        f"operation {status.operation_id}",
        f"state {printable(show(status.state))}",
        f"requests {status.requests_used}{budget}",
    ]
    if status.outcome is not None:
        parts.append(f"outcome {status.outcome}")
    elif status.sending is not None:
        parts.append(f"sending {status.sending} request…")
    elif status.next_poll_at is not None:
        left_s = max(0.0, (status.next_poll_at - now).total_seconds())
        source = f" ({status.delay_source})" if status.delay_source else ""
        parts.append(f"next poll in {left_s:.1f}s{source}")
    return " | ".join(parts)


def worker_summary_lines(summary: Mapping[str, JSON]) -> list[str]:
    """The worker's exit summary (see ``waitbound worker --json``) as text lines."""
    finished = summary.get("finished")
    counts = finished if isinstance(finished, dict) else {}
    total = sum(v for v in counts.values() if isinstance(v, int))
    by_outcome = ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))
    errors = summary.get("errors")
    problems = errors if isinstance(errors, list) else []
    lines = [
        f"worker stopped ({summary.get('stopped')}) after {summary.get('steps')} steps: "
        f"{total} operation{'s' if total != 1 else ''} finished"
        + (f" ({by_outcome})" if by_outcome else "")
        + f"; {summary.get('still_waiting')} still waiting",
    ]
    lines += [f"error: {printable(str(problem))}" for problem in problems]
    return lines


def option_costs(record: Record | None) -> list[tuple[str, str]]:
    """The options open on *record*'s decision request with their costs (none without
    one; see :func:`waitbound.option_costs`)."""
    return [] if record is None else list(costs_of(record))


def option_lines(
    operation_id: str, costs: Sequence[tuple[str, str]], indent: str = "  "
) -> list[str]:
    """The options of an open decision request as lines, with the command that decides."""
    if not costs:
        return []
    lines = [f"{indent}a person decides: waitbound decide {operation_id} OPTION --why '…'"]
    lines += [
        f"{indent}  {name}" if text == name else f"{indent}  {name:<24} {printable(text)}"
        for name, text in costs
    ]
    return lines


def record_summary(record: Record) -> list[str]:
    """A few lines that describe a record: what it waits on and where it stands."""
    lines = [
        f"operation {record.operation_id}  profile {record.profile.name}",
        f"  status URL   {redact_url(record.status_url or '') or '(not known yet)'}",
        f"  created      {_time(record.created_at)}   deadline {_time(record.deadline_at)}",
        f"  requests     {record.requests_used}/{record.max_requests}   transport failures "
        f"{record.transport_failures_used}/{record.max_transport_failures}   rate limited "
        f"{record.rate_limited_used}/{record.max_rate_limited}",
        f"  state        {printable(show(record.provider_state))}   "
        f"last HTTP {record.last_http_status or '(no answer)'}",
    ]
    if record.job_id:
        job = record.job_id if len(record.job_id) <= 200 else record.job_id[:199] + "…"
        lines.append(f"  job id       {printable(job)}")
    if record.credential_label:
        lines.append(f"  credentials  {printable(record.credential_label)} (label)")
    if (errors_url := record.shown_errors_url) is not None:
        lines.append(f"  errors URL   {printable(errors_url)}")
    if record.business_deadline_at is not None:
        lines.append(f"  business deadline {_time(record.business_deadline_at)}")
    if record.outcome is not None:
        reason = f" ({record.reason.value})" if record.reason else ""
        lines.append(f"  outcome      {record.outcome.value}{reason}")
        if record.decided_by:
            lines.append(f"  decided by   {printable(record.decided_by)}")
    else:
        source = record.delay_source.value if record.delay_source else "now"
        lines.append(
            f"  phase        {record.phase.value}; next {_time(record.next_poll_at)} ({source})"
        )
    for decision in record.decisions:
        lines.append(
            f"  decision     {decision.option} by {printable(decision.by)} at "
            f"{_time(decision.at)} ({printable(decision.why)})"
        )
    request = record.decision_request
    if request is not None:
        lines.append(
            f"  decision request open since {_time(request.opened_at)}, due "
            f"{_time(request.due_at)} (requested by {printable(request.requested_by)})"
        )
        lines += option_lines(record.operation_id, option_costs(record), indent="    ")
    return lines
