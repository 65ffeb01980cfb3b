"""What the inbox's pages show, as plain values: one row per operation in flight or
finished, one decision request, one operation's page. Pure functions over records,
audit events and outbox/inbox entries, with ``now`` an argument, so each is tested
as it is; the templates (``web/templates``) only lay them out.

Every URL shown is redacted (:func:`waitbound._base._urls.redact_url`: no user info, no
query); provider text is escaped of control characters (``printable``) and bounded;
the templates escape HTML. Nothing here reads a secret: records hold none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from waitbound._base._json import JSON, show
from waitbound._base._urls import origin_only, redact_url
from waitbound._engine._escalations import Escalation
from waitbound._model._audit import StoredAuditEvent
from waitbound._model._outcome import OutcomeKind
from waitbound._model._push import InboundDelivery, OutboxEntry
from waitbound._model._record import Decision, Record, reported_counts
from waitbound._rules._decisions import escalation_message
from waitbound._rules._options import RESUMING, Option, option_costs, suggested_grant
from waitbound._story import event_details, printable, timestamp

__all__ = [
    "OUTCOME_TONES",
    "Choice",
    "DecisionView",
    "DeliveryView",
    "FinishedRow",
    "InFlightRow",
    "MessageLine",
    "OperationView",
    "StoryRow",
    "When",
    "DecisionRecordView",
    "decision_view",
    "duration",
    "finished_row",
    "in_flight_row",
    "instant",
    "is_option",
    "message_lines",
    "notify_target",
    "operation_view",
    "outcome_tone",
    "provider_of",
    "state_text",
    "when",
]

OUTCOME_TONES: Final = {
    OutcomeKind.SUCCEEDED: "good",
    OutcomeKind.COMPLETED_WITH_ERRORS: "partial",
    OutcomeKind.FAILED: "bad",
    OutcomeKind.ESCALATED: "attention",
    OutcomeKind.TIMED_OUT: "neutral",
    OutcomeKind.CANCELED: "neutral",
    OutcomeKind.EXPIRED: "neutral",
}
"""The colour each outcome is shown in (always beside its word): green, orange, red,
amber, grey."""
_MAX_SHOWN_CHARS: Final = 200


def duration(seconds: float) -> str:
    """A span for a person: ``"45 s"``, ``"12 min"``, ``"3 h 5 min"``, ``"2 d 4 h"``."""
    total = max(0, round(seconds))
    if total < 120:
        return f"{total} s"
    minutes = total // 60
    if minutes < 120:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@dataclass(frozen=True, slots=True, kw_only=True)
class When:
    """An instant, for a ``<time>`` element: ``iso`` (machine), ``relative`` (``in 4
    s``, ``12 min ago``), :attr:`text` (``2026-01-01 12:00:05 UTC``)."""

    at: datetime
    iso: str
    relative: str

    @property
    def text(self) -> str:
        """The instant for a person: ``2026-01-01 12:00:05 UTC``."""
        return timestamp(self.at)[:19] + " UTC"

    @property
    def due(self) -> str:
        """:attr:`relative` for a check that is due: ``due 5 s ago`` once it is past."""
        return f"due {self.relative}" if self.relative.endswith(" ago") else self.relative


def when(at: datetime | None, now: datetime) -> When | None:
    """*at* for a person, relative to *now* (``None`` stays ``None``)."""
    return None if at is None else instant(at, now)


def instant(at: datetime, now: datetime) -> When:
    """*at* for a person, relative to *now*."""
    left_s = (at - now).total_seconds()
    if abs(left_s) < 0.5:
        relative = "now"
    elif left_s > 0:
        relative = f"in {duration(left_s)}"
    else:
        relative = f"{duration(-left_s)} ago"
    return When(at=at, iso=at.isoformat(timespec="seconds"), relative=relative)


def _bounded(text: str) -> str:
    text = printable(text)
    return text if len(text) <= _MAX_SHOWN_CHARS else text[: _MAX_SHOWN_CHARS - 1] + "…"


def state_text(value: JSON) -> str:
    """A provider state as shown: a string as it is, anything else as JSON, bounded."""
    if value is None:
        return "none yet"
    return _bounded(value if isinstance(value, str) else show(value))


def provider_of(record: Record) -> str:
    """What the inbox calls the provider: the operation's profile name."""
    return record.profile.name


def outcome_tone(outcome: OutcomeKind | None) -> str:
    """The colour class of *outcome* (``"running"`` without one)."""
    return OUTCOME_TONES.get(outcome, "neutral") if outcome is not None else "running"


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlightRow:
    """One operation in flight (no outcome yet)."""

    operation_id: str
    label: str
    provider: str
    state: str
    phase: str
    progress: str
    created: When
    elapsed: str
    next_check: When | None
    delay_source: str
    requests_used: int
    max_requests: int
    deadline: When
    needs_decision: bool


def in_flight_row(record: Record, now: datetime) -> InFlightRow:
    """The In flight row of *record* at *now*."""
    created = instant(record.created_at, now)
    deadline = instant(record.stop_at, now)
    return InFlightRow(
        operation_id=record.operation_id,
        label=_bounded(record.label or ""),
        provider=provider_of(record),
        state=state_text(record.provider_state),
        phase=record.phase.value,
        progress=_bounded(show(record.progress)) if record.progress is not None else "",
        created=created,
        elapsed=duration((now - record.created_at).total_seconds()),
        next_check=when(record.next_poll_at, now),
        delay_source=record.delay_source.value if record.delay_source else "now",
        requests_used=record.requests_used,
        max_requests=record.max_requests,
        deadline=deadline,
        needs_decision=record.decision_request is not None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedRow:
    """One operation with an outcome."""

    operation_id: str
    label: str
    provider: str
    outcome: str
    tone: str
    reason: str
    finished: When | None
    elapsed: str
    requests_used: int
    max_requests: int
    decided_by: str
    needs_decision: bool


def finished_row(record: Record, now: datetime) -> FinishedRow:
    """The Finished row of *record* (which has an outcome) at *now*."""
    end = record.finished_at or record.last_observed_at or record.created_at
    return FinishedRow(
        operation_id=record.operation_id,
        label=_bounded(record.label or ""),
        provider=provider_of(record),
        outcome=record.outcome.value if record.outcome else "none",
        tone=outcome_tone(record.outcome),
        reason=record.reason.value if record.reason else "",
        finished=when(record.finished_at, now),
        elapsed=duration((end - record.created_at).total_seconds()),
        requests_used=record.requests_used,
        max_requests=record.max_requests,
        decided_by=_bounded(record.decided_by or ""),
        needs_decision=record.decision_request is not None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageLine:
    """One ``Key: value`` line of the escalation message (``key`` empty for a line
    without one)."""

    key: str
    value: str

    @property
    def wide(self) -> bool:
        """Whether the line is long enough to take the whole width."""
        return len(self.value) > 60


def message_lines(message: str) -> tuple[str, tuple[MessageLine, ...]]:
    """The escalation message (``waitbound._rules._decisions.escalation_message``) as its
    title line and its ``Key: value`` lines."""
    first, *rest = message.splitlines() or [""]
    lines = []
    for line in rest:
        key, sep, value = line.partition(": ")
        lines.append(MessageLine(key=key, value=value) if sep else MessageLine(key="", value=line))
    return printable(first), tuple(
        MessageLine(key=printable(m.key), value=printable(m.value)) for m in lines
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """One option of a decision request: its name, what it costs (the button's text),
    and what its form asks for."""

    option: str
    cost: str
    resuming: bool
    minutes: float | None = None
    checks: int | None = None

    @property
    def label(self) -> str:
        """The button's text: the cost, from a capital letter."""
        return self.cost[:1].upper() + self.cost[1:]


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionView:
    """An open decision request, as the Needs a decision page shows it."""

    operation_id: str
    label: str
    title: str
    lines: tuple[MessageLine, ...]
    choices: tuple[Choice, ...]
    opened: When
    due: When
    requested_by: str
    outcome: str
    tone: str


def _choices(pairs: Iterable[tuple[str, str]], record: Record | None) -> tuple[Choice, ...]:
    # as_requested grants the agent's proposal: its form asks for no minutes or checks
    known = {option.value for option in RESUMING} - {Option.AS_REQUESTED.value}
    minutes, checks = suggested_grant(record) if record is not None else (None, None)
    return tuple(
        Choice(
            option=option,
            cost=printable(cost),
            resuming=option in known,
            minutes=minutes if option in known else None,
            checks=checks if option in known else None,
        )
        for option, cost in pairs
    )


def decision_view(escalation: Escalation, now: datetime) -> DecisionView:
    """The view of one of :func:`waitbound.escalations`' requests at *now*."""
    title, lines = message_lines(escalation.message)
    opened, due = instant(escalation.opened_at, now), instant(escalation.due_at, now)
    outcome = escalation.outcome.outcome
    return DecisionView(
        operation_id=escalation.operation_id,
        label=_bounded(escalation.label or ""),
        title=title,
        lines=lines,
        choices=_choices(escalation.options, None),
        opened=opened,
        due=due,
        requested_by=printable(escalation.requested_by),
        outcome=outcome.value if outcome else "running",
        tone=outcome_tone(outcome),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoryRow:
    """One audit event of the story."""

    seq: int
    at: When
    kind: str
    summary: str
    details: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryView:
    """One delivery: a completion out (outbox) or a webhook in (inbox)."""

    direction: str
    ident: str
    channel: str
    target: str
    status: str
    attempts: int | None
    at: When | None
    note: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRecordView:
    """One decision made on the operation."""

    option: str
    by: str
    why: str
    at: When


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationView:
    """Everything the One operation page shows."""

    operation_id: str
    label: str
    provider: str
    status_url: str
    job_id: str
    outcome: str
    tone: str
    reason: str
    phase: str
    state: str
    progress: str
    last_http: str
    last_observed: When | None
    last_request_id: str
    created: When
    deadline: When
    next_check: When | None
    delay_source: str
    requests_used: int
    max_requests: int
    elapsed: str
    answer: tuple[tuple[str, str], ...]
    chain: str
    chain_intact: bool
    story: tuple[StoryRow, ...]
    last_seq: int
    decisions: tuple[DecisionRecordView, ...]
    open_request: DecisionView | None
    deliveries: tuple[DeliveryView, ...]
    finished: bool
    final: bool


def _story(events: Sequence[StoredAuditEvent], now: datetime) -> tuple[StoryRow, ...]:
    rows = []
    for stored in events:
        at = instant(stored.event.at, now)
        rows.append(
            StoryRow(
                seq=stored.seq,
                at=at,
                kind=printable(stored.event.kind),
                summary=printable(stored.event.summary),
                details=tuple(event_details(stored.event.kind, stored.event.data)),
            )
        )
    return tuple(rows)


def _answer(record: Record) -> tuple[tuple[str, str], ...]:
    """The last provider answer as kept on the record (allowlisted and redacted when
    it was read): its non-empty fields, each shown bounded."""
    fields: list[tuple[str, JSON]] = [
        ("state", record.provider_state),
        ("progress", record.progress),
        ("result", record.result),
        ("error", record.error),
        ("counts", reported_counts(record.counts)),
        ("usage", record.usage),
        ("errors", record.errors),
    ]
    shown = [(name, show(value, limit=600)) for name, value in fields if value is not None]
    if record.result_url is not None:
        shown.append(("result URL", redact_url(record.result_url)))
    return tuple((name, printable(text)) for name, text in shown)


def notify_target(url: str) -> str:
    """Where a completion goes, as shown: its scheme and authority only
    (``https://hooks.example/…``, :func:`waitbound._base._urls.origin_only`). A chat tool's
    incoming-webhook URL carries its secret in the path, so neither path nor query is
    shown."""
    return origin_only(url)


def _deliveries(
    outbox: Sequence[OutboxEntry], inbox: Sequence[InboundDelivery], now: datetime
) -> tuple[DeliveryView, ...]:
    out = [
        DeliveryView(
            direction="out",
            ident=entry.delivery_id,
            channel=entry.channel.value,
            target=notify_target(entry.target) if entry.target else "(the on_complete callable)",
            status=entry.status.value,
            attempts=entry.attempts,
            at=when(entry.delivered_at or entry.next_attempt_at, now),
            note=_bounded(entry.last_error or "")
            + (f" (replays {entry.replay_of})" if entry.replay_of else ""),
        )
        for entry in outbox
    ]
    received = [
        DeliveryView(
            direction="in",
            ident=_bounded(delivery.webhook_id),
            channel=f"webhook {printable(delivery.provider)}",
            target=_bounded(delivery.event_type or ""),
            status="applied" if delivery.applied_at is not None else "received",
            attempts=None,
            at=when(delivery.applied_at or delivery.received_at, now),
            note="authoritative" if delivery.authoritative else "",
        )
        for delivery in inbox
    ]
    return (*out, *received)


def _decision_record(decision: Decision, now: datetime) -> DecisionRecordView:
    at = instant(decision.at, now)
    return DecisionRecordView(
        option=printable(decision.option),
        by=_bounded(decision.by),
        why=_bounded(decision.why),
        at=at,
    )


def _open_request(record: Record, now: datetime) -> DecisionView | None:
    request = record.decision_request
    if request is None:
        return None
    title, lines = message_lines(escalation_message(record, now))
    opened, due = instant(request.opened_at, now), instant(request.due_at, now)
    return DecisionView(
        operation_id=record.operation_id,
        label=_bounded(record.label or ""),
        title=title,
        lines=lines,
        choices=_choices(option_costs(record), record),
        opened=opened,
        due=due,
        requested_by=printable(request.requested_by),
        outcome=record.outcome.value if record.outcome else "running",
        tone=outcome_tone(record.outcome),
    )


def operation_view(  # noqa: PLR0917 - the page's parts, each read separately
    record: Record,
    events: Sequence[StoredAuditEvent],
    chain: str,
    outbox: Sequence[OutboxEntry],
    inbox: Sequence[InboundDelivery],
    now: datetime,
) -> OperationView:
    """The One operation page of *record* at *now*; *chain* is its audit chain's
    status (``waitbound._story.chain_status``)."""
    created, deadline = instant(record.created_at, now), instant(record.stop_at, now)
    end = record.finished_at or now
    http = "none" if record.last_http_status is None else str(record.last_http_status)
    return OperationView(
        operation_id=record.operation_id,
        label=_bounded(record.label or ""),
        provider=provider_of(record),
        status_url=redact_url(record.status_url or "") or "(not known yet)",
        job_id=_bounded(record.job_id or ""),
        outcome=record.outcome.value if record.outcome else "in flight",
        tone=outcome_tone(record.outcome),
        reason=record.reason.value if record.reason else "",
        phase=record.phase.value,
        state=state_text(record.provider_state),
        progress=_bounded(show(record.progress)) if record.progress is not None else "",
        last_http=http,
        last_observed=when(record.last_observed_at, now),
        last_request_id=_bounded(record.last_request_id or ""),
        created=created,
        deadline=deadline,
        next_check=None if record.is_finished else when(record.next_poll_at, now),
        delay_source=record.delay_source.value if record.delay_source else "now",
        requests_used=record.requests_used,
        max_requests=record.max_requests,
        elapsed=duration((end - record.created_at).total_seconds()),
        answer=_answer(record),
        chain=chain,
        chain_intact=not chain.startswith("broken"),
        story=_story(events, now),
        last_seq=events[-1].seq if events else 0,
        decisions=tuple(_decision_record(d, now) for d in record.decisions),
        open_request=_open_request(record, now),
        deliveries=_deliveries(outbox, inbox, now),
        finished=record.is_finished,
        final=record.is_final,
    )


def is_option(name: str) -> bool:
    """Whether *name* is an option's name at all (open or not)."""
    return name in {option.value for option in Option}
