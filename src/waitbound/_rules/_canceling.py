"""Deciding what the provider's answer to a cancel means.

A pure function in the manner of ``_status_answer.py`` (see the rules atop ``_controller.py``):
the record with the answer's bookkeeping applied and the observation in, a
:class:`~waitbound._rules._finish.Step` out. The rules are stated in ``docs/waiting.md``
("Canceling") and ``docs/decisions.md``.
"""

from __future__ import annotations

from typing import Final

from waitbound._base._json import show
from waitbound._model._audit import EventKind
from waitbound._model._observation import Observation
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._model._record import Phase, Record
from waitbound._rules import _sentences as sentences
from waitbound._rules._finish import Step, cancel_asker, escalate, timed_out

__all__ = [
    "DEADLINE_CANCEL_REQUESTS",
    "after_refused_cancel",
    "decide_cancel",
    "is_deadline_cancel",
    "refused_cancel_look",
]

DEADLINE_CANCEL_REQUESTS: Final = 2
"""The requests ``--cancel-on-deadline`` keeps for itself: the cancel and one status
look after it (a status poll never spends them)."""


def decide_cancel(record: Record, observation: Observation) -> Step:
    """Record the provider's answer to a cancel.

    Accepted (2xx): the status endpoint, asked at once, decides the outcome. Not
    accepted (any other answer: a refusal such as 409, a throttle, a 5xx, no answer):
    one status look, at once, with the cancel's reserved check, decides
    (:func:`after_refused_cancel`): a job that already ended gets its own outcome, a job
    still running stops ``escalated`` / ``cancel_not_accepted``; with no request left
    for the look, it stops so at once. A refusal (a 4xx but 429) also records that the
    job is not cancelable now, so ``cancel`` is offered again only once a status answer
    says it is. The cancel of ``--cancel-on-deadline``, sent at the deadline, ends
    ``timed_out`` either way, its answer stated.
    """
    now = observation.at
    code = observation.http_status
    answer = observation.transport_error or f"HTTP {code}"
    accepted = code is not None and 200 <= code < 300
    asker = cancel_asker(record)
    by_deadline = is_deadline_cancel(record)
    record = record.evolve(oversight=record.oversight.evolve(cancel_due=False))
    if now >= record.stop_at:
        verdict = "accepted" if accepted else "not accepted"
        return timed_out(
            record, now, f"; cancel requested before the deadline ({answer}): {verdict}"
        )
    if accepted:
        record = record.evolve(
            schedule=record.schedule.evolve(next_poll_at=now, delay_source=None, attempt=0),
            oversight=record.oversight.evolve(
                cancel_accepted_at=now, cancel_refused_at=None, cancel_refused=None
            ),
        )
        summary = sentences.cancel_accepted(answer)
        return Step(
            record, EventKind.CANCEL_ANSWERED, summary, {"http_status": code, "accepted": True}
        )
    refused = code is not None and 400 <= code < 500 and code != 429
    if refused:
        record = record.evolve(answer=record.answer.evolve(cancelable=False))
        what = f"was refused by the provider (HTTP {code})"
    elif code is None:
        what = f"got no answer ({answer}): whether the provider received it is not known"
    else:
        what = f"was not accepted (HTTP {code})"
    words = f"{asker} {what}"
    if by_deadline:
        words = f"cancel requested before the deadline ({answer}): not accepted"
    if by_deadline and record.requests_used >= record.max_requests:
        return timed_out(record, now, f"; {words}; no request was left for a status look")
    if record.requests_used >= record.max_requests:
        detail = (
            f"{words}; no request was left for a status look, so how the job is now is not "
            f"known. {_last_seen(record)}; it may still run"
        )
        return escalate(record, now, Reason.CANCEL_NOT_ACCEPTED, detail, response=observation.body)
    # One status look with the cancel's reserved check decides: a job that already ended
    # gets its own outcome (a refusal often means "too late"); a job still running
    # stops cancel_not_accepted (:func:`after_refused_cancel`).
    record = record.evolve(
        schedule=record.schedule.evolve(next_poll_at=now, delay_source=None),
        oversight=record.oversight.evolve(cancel_refused_at=now, cancel_refused=words[:300]),
    )
    summary = sentences.cancel_not_accepted(words)
    return Step(
        record, EventKind.CANCEL_ANSWERED, summary, {"http_status": code, "accepted": False}
    )


def refused_cancel_look(before: Record, kind: str) -> bool:
    """Whether an answer of *kind* to *before* (the record as reserved) is the status
    look that follows a cancel the provider did not accept: the last answer recorded is
    that cancel's."""
    at = before.oversight.cancel_refused_at
    return kind == "status" and at is not None and before.answer.last_observed_at == at


def after_refused_cancel(step: Step, observation: Observation) -> Step:
    """The outcome of the status look after a cancel the provider did not accept.

    A job the look shows ended (a terminal answer, its result still to fetch, a success
    being confirmed) keeps that end: the cancel came too late, and the outcome's
    :attr:`~waitbound.Outcome.note` says so (``Record.late_cancel``). A job still
    running (or a look that got no usable answer) stops ``escalated`` /
    ``cancel_not_accepted``: the job may still run.
    """
    record = step.record
    now = observation.at
    ended = record.is_finished or record.ending.phase is not Phase.WAITING
    if ended or record.answer.success_seen_at is not None:
        if (
            record.ending.outcome is OutcomeKind.ESCALATED
            or record.ending.outcome is OutcomeKind.TIMED_OUT
        ):
            return step  # a stop of its own (unknown state, denied…): its words stand
        late = record.late_cancel or f"{record.oversight.cancel_refused}: the job had already ended"
        return step.said(f"; {late}")
    words = record.oversight.cancel_refused or "the cancel was not accepted"
    record = record.evolve(
        oversight=record.oversight.evolve(cancel_refused_at=None, cancel_refused=None)
    )
    code = observation.http_status
    if code is None or not 200 <= code < 300:  # a 2xx that did not end: still running
        looked = f"the status look after it got no usable answer ({_answer(observation)})"
    else:
        looked = (
            f"the status look after it showed the job still {show(record.answer.provider_state)}"
        )
    if is_deadline_cancel(record):  # --cancel-on-deadline's: the deadline's outcome
        return timed_out(record, now, f"; {words}; {looked}")
    detail = f"{words}; {looked}: waiting stopped. The job may still run"
    return escalate(record, now, Reason.CANCEL_NOT_ACCEPTED, detail, response=observation.body)


def _answer(observation: Observation) -> str:
    if observation.transport_error:
        return observation.transport_error
    return f"HTTP {observation.http_status}"


def _last_seen(record: Record) -> str:
    """How the job was last seen, in words: "The job was last seen running at 10:58
    UTC", or "Its state was never seen" (never "last seen null")."""
    if record.answer.provider_state is None or record.answer.last_observed_at is None:
        return "Its state was never seen"
    return f"The job was last seen {show(record.answer.provider_state)}"


def is_deadline_cancel(record: Record) -> bool:
    """Whether the one cancel *record* sent is ``--cancel-on-deadline``'s: it asked for
    one, and no person asked for a cancel (a person's cancel records who and when)."""
    return (
        record.contract.cancel_on_deadline
        and record.counters.cancel_requests_used == 1
        and record.oversight.cancel_requested_at is None
    )
