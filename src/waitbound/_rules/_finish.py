"""How an operation ends: the outcome, its reason and its words, in one place.

Every stop (a terminal state, a timeout, an escalation) goes through :func:`finish`,
which records the outcome, the reason and a bounded copy of what was answered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from waitbound._base._json import JSON
from waitbound._model._audit import AuditEvent, EventKind
from waitbound._model._audit_record import audit_event
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._model._record import Phase, Record, reported_counts
from waitbound._profile._contract import Counts, is_present
from waitbound._rules import _sentences as sentences
from waitbound._rules._options import open_request

__all__ = [
    "Step",
    "accepted_cancel",
    "bounded",
    "cancel_asker",
    "cancel_note",
    "deadline_reached",
    "escalate",
    "finish",
    "seconds_between",
    "settled_without_receipt",
    "terminal",
    "timed_out",
]

_KEPT_BODY_CHARS = 2000
"""How much of a contradicting or unusable response is kept in the outcome's error."""


@dataclass(frozen=True, slots=True)
class Step:
    """What a rule decided: the record after the decision, and the audit event that
    tells it (its kind, its sentence and its extra data, beside the record's standard
    fields)."""

    record: Record
    """The record after the decision."""
    kind: EventKind
    """What happened (``scheduled``, ``result_due``, ``finished``, ...)."""
    summary: str
    """One sentence a person can read."""
    extra: dict[str, JSON]
    """The event's data beyond the record's standard story fields."""

    def event(self, at: datetime) -> AuditEvent:
        """The audit event that tells this step at *at*, with the record's standard fields."""
        return audit_event(self.record, at, self.kind, self.summary, **self.extra)

    def said(self, more: str) -> Step:
        """This step, its sentence followed by *more* (``"; ..."``, ``": ..."``)."""
        return replace(self, summary=self.summary + more)

    def adding(self, data: Mapping[str, JSON]) -> Step:
        """This step, with *data* added to its extra data (*data* wins on a clash)."""
        return replace(self, extra=self.extra | dict(data))


def seconds_between(start: datetime, end: datetime) -> float:
    """Seconds from *start* to *end*, never negative."""
    return max(0.0, (end - start).total_seconds())


def deadline_reached(record: Record, now: datetime, why: str = "") -> Step:
    """The deadline is reached (or no request fits before it).

    A job whose terminal success was seen is never reported timed out: when only its
    result could not be fetched in time, that is a contradiction between endpoints;
    when only a partial success's errors page is left, the outcome is that partial
    success, with ``errors`` saying the page was not fetched.
    """
    if record.ending.phase is Phase.FETCHING_ERRORS:
        # The outcome is known (a partial success, its result in hand): only the first
        # page of errors is missing, and ``errors`` says so.
        record = record.evolve(
            ending=record.ending.evolve(
                errors={"problem": f"the errors page was not fetched before the deadline{why}"}
            )
        )
        return finish(
            record, now, record.ending.settled_outcome or OutcomeKind.COMPLETED_WITH_ERRORS, None
        )
    if (settled := settled_without_receipt(record, now, why)) is not None:
        return settled
    if record.ending.phase is Phase.FETCHING_RESULT:
        return escalate(
            record,
            now,
            Reason.CONTRADICTION,
            "the status endpoint reported success, but the result endpoint was not ready "
            f"before the deadline{why}",
        )
    return timed_out(record, now, why)


def settled_without_receipt(record: Record, now: datetime, why: str = "") -> Step | None:
    """A run known to have ended without success (failed, canceled, expired) whose full
    receipt (``result_for_every_ending``) could not be fetched before a bound: its
    ending is the outcome, the receipt's absence stated in the audit; ``None`` for any
    other record."""
    settled = record.ending.settled_outcome
    unsuccessful = (OutcomeKind.FAILED, OutcomeKind.CANCELED, OutcomeKind.EXPIRED)
    if record.ending.phase is not Phase.FETCHING_RESULT or settled not in unsuccessful:
        return None
    assert settled is not None
    return finish(record, now, settled, record.ending.settled_reason).said(
        f"; its receipt was not fetched{why}"
    )


def timed_out(record: Record, now: datetime, why: str = "") -> Step:
    """Stop at the deadline, or at the business deadline when that comes first."""
    business = (
        record.contract.business_deadline_at is not None
        and record.stop_at < record.schedule.deadline_at
    )
    what = "business deadline" if business else "deadline"
    if now >= record.stop_at:
        detail = f"the {what} {record.stop_at.isoformat()} was reached{why}"
    else:
        detail = (
            f"stopped before the {what} {record.stop_at.isoformat()}: the next request "
            f"may not be sent before it{why}"
        )
    if (missing := record.unfetched) is not None:
        ended = record.provider_outcome
        assert ended is not None
        detail += f"; the job {ended.value} at the provider, but its {missing} was not fetched"
    else:
        detail += "; the job may still run"
    reason = Reason.BUSINESS_DEADLINE_EXCEEDED if business else Reason.DEADLINE_EXCEEDED
    return finish(record, now, OutcomeKind.TIMED_OUT, reason, detail=detail)


def escalate(
    record: Record, now: datetime, reason: Reason, detail: str, *, response: JSON = None
) -> Step:
    """Stop with ``escalated``: *reason*, *detail* in words, and the response kept (bounded)."""
    return finish(record, now, OutcomeKind.ESCALATED, reason, detail=detail, response=response)


def terminal(
    record: Record,
    now: datetime,
    outcome: OutcomeKind,
    *,
    result: JSON = None,
    error: JSON = None,
    counts: Counts | None = None,
    usage: JSON = None,
    reason: Reason | None = None,
) -> Step:
    if counts is not None:
        record = record.evolve(
            ending=record.ending.evolve(counts=reported_counts(counts.as_json()))
        )
    record = record.evolve(
        ending=record.ending.evolve(
            result=result, error=error if is_present(error) else None, usage=usage
        )
    )
    return finish(record, now, outcome, reason)


def finish(
    record: Record,
    now: datetime,
    outcome: OutcomeKind,
    reason: Reason | None,
    *,
    detail: str | None = None,
    response: JSON = None,
) -> Step:
    if detail is not None and outcome in (OutcomeKind.ESCALATED, OutcomeKind.TIMED_OUT):
        # A stop speaks of a cancel it did not carry out, whichever rule stopped it.
        cancel = accepted_cancel(record)
        if cancel is not None and cancel not in detail:
            detail = f"{detail}; {cancel}"
    if detail is not None:
        error: dict[str, JSON] = {"reason": reason.value if reason else None, "detail": detail}
        if response is not None:
            error["response"] = bounded(response)
        if record.ending.error is not None:
            error["provider_error"] = record.ending.error
        record = record.evolve(ending=record.ending.evolve(error=error))
    record = record.evolve(
        ending=record.ending.evolve(
            phase=Phase.DONE,
            stopped_phase=record.ending.phase,
            outcome=outcome,
            reason=reason,
            finished_at=now,
        ),
        schedule=record.schedule.evolve(delay_source=None),
    )
    if outcome in (OutcomeKind.ESCALATED, OutcomeKind.TIMED_OUT):
        record = open_request(record, now)
    else:
        record = record.evolve(oversight=record.oversight.evolve(decision_request=None))
    # a refused cancel that came too late says so when there is no detail
    summary = sentences.finished(outcome, reason, detail=detail, late_cancel=record.late_cancel)
    return Step(
        record,
        EventKind.FINISHED,
        summary,
        {"outcome": outcome.value, "reason": reason.value if reason else None},
    )


def cancel_note(record: Record) -> str:
    """``"; the cancel … was accepted …"`` for a stop's detail (see
    :func:`accepted_cancel`), or ``""``."""
    cancel = accepted_cancel(record)
    return f"; {cancel}" if cancel is not None else ""


# --- the cancel a stop speaks of, and the deadline's own cancel ---------------------


def accepted_cancel(record: Record) -> str | None:
    """What a stop must also say of a cancel: the provider accepted it
    (``cancel_accepted_at``) and no answer since said how the job ended ("the cancel
    requested by ana at … was accepted by the provider at …, but how the job ended is
    not known"); it refused it and no look since told how the job is ("… was refused by
    the provider (HTTP 409), and no status look since told how the job is"); it refused
    it and a terminal answer was seen (:attr:`Record.late_cancel`: it came too late);
    ``None`` when there is no cancel to speak of."""
    if record.answer.ended_seen_at is not None:  # a terminal answer was seen
        return record.late_cancel  # a refused cancel that came too late, or nothing
    at = record.oversight.cancel_accepted_at
    if at is None:
        if (
            record.oversight.cancel_refused is not None
            and record.oversight.cancel_refused_at is not None
        ):
            return (
                f"{record.oversight.cancel_refused}, and no status look since told how the job is"
            )
        return None
    return (
        f"{cancel_asker(record)} was accepted by the provider at {at.isoformat()}, but "
        "how the job ended is not known"
    )


def cancel_asker(record: Record) -> str:
    """Whose cancel this was, in words: "the cancel decided by ann at …" (a person's
    decision), "… requested by …" (``waitbound cancel`` of a running operation)."""
    last = record.oversight.decisions[-1] if record.oversight.decisions else None
    at = record.oversight.cancel_requested_at
    if record.oversight.cancel_requested_by is None or at is None:
        return "the cancel"
    how = (
        "decided" if last is not None and last.option == "cancel" and last.at == at else "requested"
    )
    return f"the cancel {how} by {record.oversight.cancel_requested_by} at {at.isoformat()}"


def bounded(value: JSON) -> JSON:
    """Keep a response whole when small, else its first characters as text."""
    text = json.dumps(value, ensure_ascii=False)
    return value if len(text) <= _KEPT_BODY_CHARS else text[:_KEPT_BODY_CHARS] + "…"
