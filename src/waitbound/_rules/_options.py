"""The options of a decision request: what a person may choose when waiting stops
without an honest outcome (or an agent asks for more time), by reason and by the
operation's own limits. Computed when the request opens and checked again when a
decision is made (``_decisions.py`` applies them).
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from waitbound._base._json import show
from waitbound._base._numbers import rough_duration
from waitbound._model._outcome import Reason
from waitbound._model._record import DecisionRequest, Phase, Record

__all__ = [
    "ACTION_REQUESTS",
    "ESTIMATE_SLACK",
    "MIN_GRANT_S",
    "RESUMING",
    "SYSTEM",
    "Option",
    "cancel_allowed",
    "cancel_refusal",
    "cost",
    "counted",
    "estimate_grant",
    "grant_basis",
    "open_request",
    "option_costs",
    "options",
    "proposed_grant",
    "reason_options",
    "undone_action",
    "resume_refusal",
    "span",
    "suggested_grant",
]

ESTIMATE_SLACK: Final = 1.25
"""A grant derived from an estimate covers this much more than the time the estimate
leaves (an estimate is seldom exact; a quarter more, and at least a minute)."""


class Option(StrEnum):
    """A bounded choice on an open decision request."""

    EXTEND = "extend"
    """Wait longer: a new deadline (minutes from now) and a number of further checks."""
    AS_REQUESTED = "as_requested"
    """Wait longer by exactly what an agent proposed (``request_extension``: its minutes
    and checks), within the policy's ceilings."""
    CANCEL = "cancel"
    """Send the provider's cancel action, then poll to ``canceled``."""
    TREAT_AS_PENDING = "treat_as_pending"
    """Read the unknown state as pending for this operation only, for a bounded grant."""
    MARK_SUCCEEDED = "mark_succeeded"
    """A person asserts success; the contradicting answer is kept as the evidence."""
    MARK_FAILED = "mark_failed"
    """A person asserts failure; the contradicting answer is kept as the evidence."""
    RESUME_WITH_CREDENTIALS = "resume_with_credentials"
    """Go on with other credentials (a different credential label), never the same."""
    RESUME_WITH_PROFILE = "resume_with_profile"
    """Go on with a corrected profile (its name and version recorded)."""
    FETCH_RESULT_AGAIN = "fetch_result_again"
    """Request the result once more (its first answer was lost to our own stop)."""
    ABANDON = "abandon"
    """Close the request; the outcome stays as it is."""
    DECLINE = "decline"
    """Turn down an agent's request for more time; the operation goes on as it was."""


_BY_REASON: Final[dict[Reason | None, tuple[Option, ...]]] = {
    Reason.REQUEST_BUDGET_EXHAUSTED: (Option.EXTEND, Option.CANCEL, Option.ABANDON),
    Reason.DEADLINE_EXCEEDED: (Option.EXTEND, Option.CANCEL, Option.ABANDON),
    Reason.PROVIDER_FAILURE: (Option.EXTEND, Option.CANCEL, Option.ABANDON),
    Reason.RATE_LIMITED: (Option.EXTEND, Option.CANCEL, Option.ABANDON),
    Reason.CANCEL_NOT_ACCEPTED: (Option.EXTEND, Option.CANCEL, Option.ABANDON),
    Reason.UNKNOWN_STATE: (
        Option.TREAT_AS_PENDING,
        Option.MARK_FAILED,
        Option.CANCEL,
        Option.ABANDON,
    ),
    Reason.CONTRADICTION: (Option.MARK_SUCCEEDED, Option.MARK_FAILED, Option.ABANDON),
    Reason.AUTHORIZATION_DENIED: (Option.RESUME_WITH_CREDENTIALS, Option.ABANDON),
    Reason.INTEGRATION_FAILURE: (Option.RESUME_WITH_PROFILE, Option.ABANDON),
    Reason.RESULT_UNCONFIRMED: (Option.FETCH_RESULT_AGAIN, Option.ABANDON),
    Reason.BUSINESS_DEADLINE_EXCEEDED: (Option.ABANDON,),
}
"""The options each reason offers, before the record's own limits are applied."""

RESUMING: Final = frozenset(
    {
        Option.EXTEND,
        Option.AS_REQUESTED,
        Option.CANCEL,
        Option.TREAT_AS_PENDING,
        Option.RESUME_WITH_CREDENTIALS,
        Option.RESUME_WITH_PROFILE,
        Option.FETCH_RESULT_AGAIN,
    }
)
"""Options that continue the operation under a grant (minutes and checks)."""

SYSTEM: Final = "waitbound"
"""Who closes a decision request nobody answered."""


ACTION_REQUESTS: Final = {Option.CANCEL: 1, Option.FETCH_RESULT_AGAIN: 1}
"""The requests an option's action sends before its checks: the cancel request, the
result request. A grant for it adds them to the checks granted (``--checks K`` is then
K status or result checks after the action), so the action itself never spends the
checks meant to learn how it ended."""

MIN_GRANT_S: Final = 1.0
"""The shortest time one grant gives (seconds), unless the policy's ceiling for one
grant is shorter: a window in which one request and its answer fit. A grant below it
would use one of ``max_extensions`` and end at once (see ``docs/decisions.md``)."""


def reason_options(reason: Reason | None) -> tuple[Option, ...]:
    """The options a stop for *reason* offers before the record's own limits apply."""
    return _BY_REASON.get(reason, (Option.ABANDON,))


def resume_refusal(record: Record, now: datetime) -> str | None:
    """Why *record* cannot be resumed under a grant at *now*, in words, or ``None`` if
    it can: grants are left (``policy.max_extensions``), it did not stop before its
    submission was answered (the body is not stored), and the business deadline has
    not passed."""
    if record.oversight.grants.extensions >= record.contract.policy.max_extensions:
        return (
            f"all {record.contract.policy.max_extensions} grants (policy max_extensions) are used"
        )
    if record.ending.stopped_phase is Phase.SUBMITTING:
        return "it stopped before its submission was answered (the body is not stored)"
    business = record.contract.business_deadline_at
    if business is not None and now >= business:
        return f"the business deadline {business.isoformat()} has passed"
    return None


def cancel_refusal(record: Record, now: datetime) -> str | None:
    """Why the operation cannot be canceled at the provider at *now*, or ``None`` if it
    can. The one rule both ``waitbound cancel`` (:func:`waitbound.cancel`) and the
    ``cancel`` option of a decision request follow:

    - a running operation, or a stopped one (``timed_out`` or ``escalated``, the job
      may still run) whose open decision request's reason offers ``cancel`` and that
      can still be resumed (:func:`resume_refusal`: the cancel and the checks after it
      need a grant); any other finished operation has nothing to cancel;
    - it needs a cancel action (a receipt, a status answer, the profile or a cancel
      URL names one), and its last answer must have said it is cancelable (or its
      profile declares it always cancelable before a terminal state).
    """
    name = f"operation {record.contract.operation_id}"
    if record.is_finished:
        outcome = record.ending.outcome.value if record.ending.outcome else "finished"
        if record.oversight.decision_request is None or Option.CANCEL not in reason_options(
            record.ending.reason
        ):
            return f"{name} is finished ({outcome}); there is nothing to cancel"
        name = f"{name} is finished ({outcome}) but its job may still run;"
        if (why := resume_refusal(record, now)) is not None:
            return f"{name} it cannot be resumed to cancel it: {why}"
        name += " it"
    if record.cancel_target() is None:
        return (
            f"{name} has no cancel action: neither a receipt, a "
            "status answer, the profile nor a cancel URL given with the operation names one"
        )
    if not cancel_allowed(record):
        if record.answer.cancelable is False:
            return (
                f"{name} is not cancelable now: the last status answer said it is not "
                "cancelable (cancelable false), whatever the profile declares"
            )
        return (
            f"{name} is not cancelable now: the last status answer "
            f"did not say it is cancelable, and profile {record.contract.profile.name} does not "
            "declare "
            "it always cancelable"
        )
    return None


def cancel_allowed(record: Record) -> bool:
    """Whether the job may be sent a cancel, by what it last said: its last answer said
    ``cancelable`` true, or said nothing and the profile declares it always cancelable
    before a terminal state (``cancel.always``). An answer that says ``cancelable`` false
    (or a refused cancel) is obeyed whatever the profile declares."""
    if record.answer.cancelable is not None:
        return record.answer.cancelable
    return record.contract.profile.cancel.always


def options(record: Record, now: datetime) -> tuple[Option, ...]:
    """The options open on *record*'s decision request at *now* (none without one).

    From the reason (``_BY_REASON``), then the record's limits: a resuming option only
    where :func:`resume_refusal` allows, ``cancel`` only where :func:`cancel_refusal`
    allows (the rule ``waitbound cancel`` follows). An agent's request on a running
    operation offers ``extend``, ``cancel`` (when cancelable, while a grant is left)
    and ``decline``. Wherever ``extend`` is offered and the request holds an agent's
    proposal, ``as_requested`` (that proposal's grant) is offered after it.
    """
    request = record.oversight.decision_request
    if request is None:
        return ()
    if not record.is_finished:
        offered: tuple[Option, ...] = (Option.EXTEND, Option.CANCEL, Option.DECLINE)
    else:
        offered = reason_options(record.ending.reason)
    if Option.EXTEND in offered and _proposal(record) is not None:
        at = offered.index(Option.EXTEND) + 1
        offered = (*offered[:at], Option.AS_REQUESTED, *offered[at:])
    can_resume = resume_refusal(record, now) is None
    return tuple(
        option
        for option in offered
        if (option not in RESUMING or can_resume)
        and (option is not Option.CANCEL or cancel_refusal(record, now) is None)
    )


def undone_action(record: Record) -> str | None:
    """The action a person decided (or a cancel someone requested) that has not been
    carried out on *record*, in words, or ``None``: a cancel still due ("the cancel
    decided by ann at 2026-…"), or a resuming decision after which no request was sent.
    A stop says it, with why, so no decision is dropped silently."""
    last = record.oversight.decisions[-1] if record.oversight.decisions else None
    if record.oversight.cancel_due:
        who = record.oversight.cancel_requested_by or "someone"
        at = record.oversight.cancel_requested_at
        how = (
            "decided"
            if last is not None and last.option == "cancel" and last.at == at
            else "requested"
        )
        when = f" at {at.isoformat()}" if at is not None else ""
        return f"the cancel {how} by {who}{when} was not sent"
    if last is None or last.option not in RESUMING:
        return None
    after = last.detail.get("limits_after")
    used = after.get("requests_used") if isinstance(after, dict) else None
    if not isinstance(used, int) or record.requests_used > used:
        return None
    return f"the {last.option} decided by {last.by} at {last.at.isoformat()} sent no request"


def open_request(
    record: Record,
    now: datetime,
    *,
    requested_by: str | None = None,
    minutes: float | None = None,
    checks: int | None = None,
    why: str | None = None,
) -> Record:
    """*record* with a decision request open from *now* (due after the policy's
    ``decision_timeout_s``) and its options computed now. A request already open keeps
    its times and, unless *requested_by* is given, the proposal it holds (an agent's
    request stays visible when the operation then stops)."""
    opened = record.oversight.decision_request or DecisionRequest(
        opened_at=now, due_at=now + timedelta(seconds=record.contract.policy.decision_timeout_s)
    )
    if requested_by is not None:
        opened = replace(opened, requested_by=requested_by, minutes=minutes, checks=checks, why=why)
    record = record.evolve(oversight=record.oversight.evolve(decision_request=opened))
    offered = tuple(option.value for option in options(record, now))
    return record.evolve(
        oversight=record.oversight.evolve(decision_request=replace(opened, options=offered))
    )


def estimate_grant(record: Record, ceiling_minutes: float) -> tuple[float, str] | None:
    """The minutes a decision on *record* is suggested from the provider's estimate, and
    the words that say so, or ``None`` without a usable estimate.

    The time the estimate leaves is counted from when the decision request was opened
    (else from the last answer): :data:`ESTIMATE_SLACK` times it, in whole minutes, at
    least 1, at most *ceiling_minutes*. An estimate already past at that time suggests
    nothing (the formula's grant applies).
    """
    end, source = record.answer.estimated_end_at, record.answer.estimate_from
    if end is None or source is None:
        return None
    request = record.oversight.decision_request
    since = request.opened_at if request is not None else record.answer.last_observed_at
    if since is None or end <= since:
        return None
    left_s = (end - since).total_seconds()
    minutes = min(float(max(1, math.ceil(left_s * ESTIMATE_SLACK / 60))), ceiling_minutes)
    words = (
        f"from {source}: it should end by {end.strftime('%Y-%m-%d %H:%M:%S')} UTC, "
        f"{rough_duration(left_s)} after this request opened"
    )
    return minutes, words


def suggested_grant(record: Record) -> tuple[float, int]:
    """The grant a decision gives when it names none: ``(minutes, checks)``.

    When the provider stated when the job should end (an estimated duration, its
    expiry time, a hint: ``_estimate.py``), the minutes cover that estimate with some
    slack (:func:`estimate_grant`; :func:`grant_basis` says so); else a third of the
    policy's deadline in whole minutes (at least 1). Checks: a third of its request
    budget (at least 1). Never beyond the ceiling (a fraction of a minute when that is
    short)."""
    policy = record.contract.policy
    ceiling = policy.extension_ceiling_s / 60
    checks = max(1, policy.max_requests // 3)
    if (derived := estimate_grant(record, ceiling)) is not None:
        return derived[0], checks
    minutes = max(1, round(policy.deadline_s / 60 / 3))
    return min(float(minutes), ceiling), checks


def grant_basis(record: Record) -> str | None:
    """Where the suggested grant's minutes come from, in words, when the provider's
    estimate gave them ("from the provider's estimated duration of 9 minutes: it should
    end by …"); ``None`` when they are the policy's default."""
    derived = estimate_grant(record, record.contract.policy.extension_ceiling_s / 60)
    return None if derived is None else derived[1]


def _proposal(record: Record) -> tuple[float, int] | None:
    """The agent's proposal the open decision request holds: ``(minutes, checks)``, or
    ``None`` without one."""
    request = record.oversight.decision_request
    if request is None or request.requested_by == SYSTEM:
        return None
    if request.minutes is None or request.checks is None:
        return None
    return request.minutes, request.checks


def proposed_grant(record: Record) -> tuple[float, int] | None:
    """What ``as_requested`` grants: the agent's proposal on the open decision request
    (``(minutes, checks)``), or ``None`` when it holds none."""
    return _proposal(record)


def span(minutes: float, *, more: bool = False) -> str:
    """A grant's minutes in words: ``"15 minutes"``, ``"1 minute"``, ``"20 seconds"``
    (``"15 more minutes"`` with *more*)."""
    word = "more " if more else ""
    if minutes >= 1:
        return counted(round(minutes, 2), f"{word}minute")
    return counted(max(1, round(minutes * 60)), f"{word}second")


def cost(record: Record, option: Option) -> str:
    """What choosing *option* costs, in words, e.g. "extend waiting once by 15 minutes
    with 4 more checks"; a resuming option states the suggested grant, and one whose
    action sends a request first (:data:`ACTION_REQUESTS`) states that request too."""
    minutes, checks = suggested_grant(record)
    basis = grant_basis(record)
    grant = f"by at least {span(minutes)} with {counted(checks, 'more check')}"
    after = f"plus {counted(checks, 'more check')} within at least {span(minutes)}"
    if basis is not None:
        grant += f" ({basis})"
        after += f" ({basis})"
    match option:
        case Option.EXTEND:
            return f"extend waiting once {grant}"
        case Option.AS_REQUESTED:
            asked = proposed_grant(record)
            if asked is None:
                return "extend waiting as the agent requested (no proposal is open)"
            request = record.oversight.decision_request
            who = request.requested_by if request is not None else "the agent"
            return (
                f"extend waiting once as {who} requested: by at least {span(asked[0])} with "
                f"{counted(asked[1], 'more check')}"
            )
        case Option.CANCEL:
            return f"cancel at provider: 1 cancel request {after}"
        case Option.TREAT_AS_PENDING:
            return f"treat state {show(record.answer.provider_state)} as pending, waiting {grant}"
        case Option.MARK_SUCCEEDED:
            return "mark it succeeded (your assertion; the answer is kept as evidence)"
        case Option.MARK_FAILED:
            return "mark it failed (your assertion; the answer is kept as evidence)"
        case Option.RESUME_WITH_CREDENTIALS:
            return f"resume with other credentials (a new credential label), waiting {grant}"
        case Option.RESUME_WITH_PROFILE:
            return f"resume with a corrected profile, waiting {grant}"
        case Option.FETCH_RESULT_AGAIN:
            return f"fetch the result once more: 1 result request {after}"
        case Option.DECLINE:
            return "decline the request for more time (nothing changes)"
        case _:
            return "abandon it (the outcome stays as it is)"


def option_costs(record: Record) -> tuple[tuple[str, str], ...]:
    """The options open on *record*'s decision request, each with what it costs in
    words: ``(("extend", "extend waiting once by 15 minutes with 4 more checks"), …)``;
    empty without an open request."""
    request = record.oversight.decision_request
    if request is None:
        return ()
    known = {option.value: option for option in Option}
    return tuple(
        (name, cost(record, known[name]) if name in known else name) for name in request.options
    )


def counted(n: float, what: str) -> str:
    """*n* and *what*, plural unless *n* is 1: ``counted(4, "more check")`` is
    ``"4 more checks"``."""
    return f"{n:g} {what}" + ("" if n == 1 else "s")
