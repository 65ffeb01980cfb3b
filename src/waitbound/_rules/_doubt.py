"""Answers that are no evidence for this operation yet: re-checked, then a contradiction.

Pure functions (the rules atop ``_controller.py``). Two kinds of answer are never
taken as news about the job waited on:

- an answer that names **another job** (the profile names the job id, and the id in a
  status body, a receipt or a result document differs from the operation's): another
  job's success is not this one's (the status-polling contract warns against treating
  a job from an earlier request as the current one);
- a terminal answer whose state names **no ending** (``decided_by`` says the run is
  over, e.g. ``next_action: none``, but the status is ``running``).

Either is asked again within the confirmation window (``policy.confirm_window_s``, at
most ``policy.confirm_max_requests`` more requests of the same kind); an answer that is
evidence ends the doubt; still doubtful after that, the operation escalates
``contradiction``, the answer and (for another job) both ids kept in the audit.
"""

from __future__ import annotations

from waitbound._base._json import JSON
from waitbound._model._observation import Observation
from waitbound._model._outcome import Reason
from waitbound._model._record import Record
from waitbound._profile._contract import Reading
from waitbound._rules._final_state import staged
from waitbound._rules._finish import Step, escalate, seconds_between
from waitbound._rules._next_poll import Timing, schedule
from waitbound._rules._polling_kinds import polling_kind, reader_of

__all__ = ["cleared", "doubt", "foreign_job"]


def foreign_job(record: Record, named: str | None) -> str | None:
    """The other job an answer names, or ``None``: the operation knows its job id, the
    answer names one (the profile's ``job_id``, or ``result_job_id`` for a result
    document), and they differ. Only answers of the status monitor (and receipts and
    result documents) are compared: a ``location`` or ``resource`` URL's body is
    another resource, whose ``id`` is not the job's."""
    if record.submission.job_id is None or named is None or not polling_kind(record).names_the_job:
        return None
    if _receipt_is_the_resource(record):
        return None
    return named if named != record.submission.job_id else None


def _receipt_is_the_resource(record: Record) -> bool:
    """Whether a submission's receipt names another thing than the status monitor
    reports on: under a staged protocol (``submit.final_get``, ``final-state-via``, or a
    ``location`` / ``resource`` polling URL, as at Azure) the receipt is the resource and
    the monitor an operation on it, each with its own ``id``; those are not compared."""
    if record.submission.submit_method is None:
        return False
    readers = (reader_of(source.kind) for source in record.contract.profile.submit.polling)
    return staged(record) or any(not reader.names_the_job for reader in readers)


def cleared(record: Record) -> Record:
    """*record* after an answer that is evidence: no doubt open any more."""
    return (
        record
        if record.answer.doubted_at is None
        else record.evolve(answer=record.answer.evolve(doubted_at=None))
    )


def doubt(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    timing: Timing,
    why: str,
    *,
    extra: dict[str, JSON] | None = None,
) -> Step:
    """An answer that is no evidence yet (*why*, in words): ask again within the
    confirmation window, or escalate ``contradiction`` once it is spent.

    The first such answer opens the doubt (``doubted_at``) and resets the confirmation
    count; each later one counts one re-check. *extra* goes into the audit event (for
    another job: ``{"job_mismatch": {"expected": …, "named": …}}``).
    """
    now = observation.at
    policy = record.contract.policy
    data = extra or {}
    opened = record.answer.doubted_at
    confirms = 0 if opened is None else record.counters.confirm_requests_used + 1
    window_over = opened is not None and seconds_between(opened, now) >= policy.confirm_window_s
    if confirms >= policy.confirm_max_requests or window_over:
        return escalate(
            record,
            now,
            Reason.CONTRADICTION,
            f"{why}, still after {confirms} confirmation request(s) within "
            f"{policy.confirm_window_s:g}s; not taken as this operation's answer",
            response=observation.body,
        ).adding(data)
    record = record.evolve(
        answer=record.answer.evolve(doubted_at=opened or now),
        counters=record.counters.evolve(confirm_requests_used=confirms),
    )
    return schedule(
        record, observation, reading, timing, note=f"{why}; confirming", confirming=True
    ).adding(data)
