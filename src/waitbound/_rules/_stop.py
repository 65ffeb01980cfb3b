"""Whether an operation must stop instead of sending its next request: one rule for
every path.

Pure functions (see the rules atop ``_controller.py``). :func:`stop_reason` is asked
before a request is planned (``_controller.plan``: the deadline, or the business
deadline when earlier, is reached; the request budget is spent) and after an answer
that plans another look (``_next_poll.schedule``: the soonest that look may be sent is
at or past the stop). It returns the stop as a :class:`~waitbound._rules._finish.Step`
(which kind of stop a deadline is: ``_finish.deadline_reached``), or ``None`` to go on.
The rules are stated in ``docs/waiting.md`` (deadlines, budgets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from waitbound._base._json import show
from waitbound._model._outcome import Reason
from waitbound._model._record import Phase, Record
from waitbound._rules._finish import (
    Step,
    accepted_cancel,
    cancel_note,
    deadline_reached,
    escalate,
    seconds_between,
    settled_without_receipt,
)
from waitbound._rules._options import cancel_allowed, undone_action

__all__ = [
    "Bound",
    "Look",
    "deadline_cancel_at",
    "deadline_cancel_reserve_s",
    "stop_reason",
]


class Bound(StrEnum):
    """A bound that stops an operation."""

    DEADLINE = "deadline"
    """The deadline, or the business deadline when earlier (``Record.stop_at``)."""
    BUDGET = "budget"
    """The request budget (``Record.max_requests``: the policy's plus what decisions
    granted), every kind of request counted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Look:
    """The next look an answer planned, as the stop rule needs it."""

    at: datetime
    """The soonest it may be sent (now plus the provider's minimum or the backoff's)."""
    demanded: bool
    """The provider demanded the wait (a throttle, a 503, a ``Retry-After`` on an answer
    that is not a 2xx): past the deadline it stops ``rate_limited``."""
    wait: str
    """The wait in words (``"told to wait 30s (Retry-After header)"``)."""
    note: str
    """Why the look is planned, in words (the ``scheduled`` sentence's note)."""


def stop_reason(
    record: Record,
    now: datetime,
    *,
    look: Look | None = None,
    bounds: Sequence[Bound] = (Bound.DEADLINE, Bound.BUDGET),
    why: str | None = None,
) -> Step | None:
    """Whether *record* must stop at *now* rather than send a request, and how.

    Args:
        record: the record as it stands (an answer's decision applied, when *look*).
        now: the current time.
        look: the next look an answer planned: it stops the operation when it cannot be
            sent before the stop, unless the deadline's own cancel
            (``--cancel-on-deadline``) still goes out before it or every request is
            used (the budget's stop comes at the next plan); a demanded wait stops
            ``rate_limited``, any other ``timed_out`` (``_finish.deadline_reached``).
            Without it: a request about to be planned, *bounds* checked in order.
        bounds: which bounds to check, in order (without *look*).
        why: the words after the stop's detail (``"; ..."`` for the deadline, a
            clause before it for the budget); ``None``: what a plan says (an action
            a person decided that was not carried out, a cancel accepted).

    Returns:
        The stop step, or ``None`` when nothing stops the operation.
    """
    if look is not None:
        return _past_stop(record, now, look)
    for bound in bounds:
        step = _deadline(record, now, why) if bound is Bound.DEADLINE else _budget(record, now, why)
        if step is not None:
            return step
    return None


def _past_stop(record: Record, now: datetime, look: Look) -> Step | None:
    """The stop when *look* cannot be sent before the stop (see :func:`stop_reason`)."""
    if look.at < record.stop_at:
        return None
    if not look.demanded and (
        deadline_cancel_at(record) is not None  # its one cancel still goes out before it
        or record.requests_used >= record.max_requests  # the budget, spent first, stops
    ):
        return None
    if look.demanded:
        return escalate(
            record,
            now,
            Reason.RATE_LIMITED,
            f"{look.note or 'throttled'}: {look.wait}, past the deadline",
        )
    return deadline_reached(record, now, f"; {look.wait}, past the deadline{cancel_note(record)}")


def _deadline(record: Record, now: datetime, why: str | None) -> Step | None:
    """The deadline's stop before a request, or ``None`` before the stop time."""
    if now < record.stop_at:
        return None
    if why is not None:
        return deadline_reached(record, now, why)
    undone = undone_action(record)
    if deadline_cancel_at(record) is not None and undone is None:
        undone = "the cancel asked for at the deadline (cancel_on_deadline) was not sent"
    late = "the deadline passed before any wait or worker sent a request for it"
    again = record.oversight.decisions[-1].option if record.oversight.decisions else None
    if undone and again == "fetch_result_again" and record.ending.phase is Phase.FETCHING_RESULT:
        detail = (
            f"{undone}: {late}. The job succeeded at the provider; its result was not "
            "fetched. Do not submit the job again"
        )
        return escalate(record, now, Reason.RESULT_UNCONFIRMED, detail)
    return deadline_reached(record, now, f"; {undone}: {late}" if undone else cancel_note(record))


def _budget(record: Record, now: datetime, why: str | None) -> Step | None:
    """Every request of the budget is used (submit, status, result and cancel alike);
    ``None`` while one is left.

    After a terminal success, with only its result left to fetch, the detail says so:
    the job is known to be complete at the provider; its result is what is missing.
    """
    if record.requests_used < record.max_requests:
        return None
    if why is None:
        undone = undone_action(record)
        why = f"{undone}: no request was left" if undone else ""
    if (missing := record.unfetched) is not None:
        ended = record.provider_outcome
        assert ended is not None
        detail = (
            f"the job {ended.value} at the provider (last state "
            f"{show(record.answer.provider_state)}), but all {record.max_requests} requests of the "
            f"budget are used: its {missing} was not fetched"
        )
    else:
        detail = (
            f"all {record.max_requests} requests of the budget are used "
            f"without a terminal answer (last state {show(record.answer.provider_state)})"
        )
    if why:
        detail = f"{why}: {detail}"
    if (settled := settled_without_receipt(record, now, ": no request was left")) is not None:
        return settled
    if (cancel := accepted_cancel(record)) is not None:
        detail = f"{detail}; {cancel}"
    return escalate(record, now, Reason.REQUEST_BUDGET_EXHAUSTED, detail)


def deadline_cancel_reserve_s(record: Record) -> float:
    """How long before the stop time ``--cancel-on-deadline`` sends its cancel (seconds):
    room for the cancel and one status look after it, each within one request slot
    (``min(request_timeout_s, lease_s)``), so ``2 * slot``, but never more than a quarter
    of the whole wait (a short deadline is not spent mostly waiting for the cancel)."""
    policy = record.contract.policy
    slot_s = min(policy.request_timeout_s, policy.lease_s)
    return min(2 * slot_s, seconds_between(record.contract.created_at, record.stop_at) / 4)


def deadline_cancel_at(record: Record) -> datetime | None:
    """When ``--cancel-on-deadline``'s one cancel is due, or ``None`` when none is: the
    operation asked for it, has not sent it, is still waiting on the job, has a cancel
    action and may be canceled by what it last said (:func:`cancel_allowed`).

    It is due :func:`deadline_cancel_reserve_s` before the stop time, so that the cancel
    and one status look both fit before the deadline (no request is sent at or after
    it), and a provider that confirms the cancel is reported ``canceled``.
    """
    if not (
        record.contract.cancel_on_deadline
        and not record.counters.cancel_requests_used
        and record.ending.phase is Phase.WAITING
        and record.cancel_target() is not None
        and cancel_allowed(record)
    ):
        return None
    return record.stop_at - timedelta(seconds=deadline_cancel_reserve_s(record))
