"""Decisions: the bounded choices a person has when waiting stops without an honest
outcome, and exactly what each choice changes.

An operation that escalates or times out carries an open :class:`DecisionRequest`;
so does one an agent asked more time for. The options open on it are computed from
its reason, its profile and its last answer (:func:`options`), each stated with its
cost (:func:`cost`). A decision is applied by :func:`decide`, a pure function in the
manner of the controller: it takes the record and the time and returns the record
after the decision plus the audit event that explains it; the API persists both in
one compare-and-swap write, so the first decision wins.

Grants never reset a counter: an extension sets the request budget to the requests
used so far plus the checks granted, and moves the deadline to now plus the minutes
granted, both bounded by the policy (``max_extensions``, ``max_extension_s``).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from waitbound._base._errors import UsageError
from waitbound._base._json import JSON, canonical_json
from waitbound._model._audit import AuditEvent, EventKind
from waitbound._model._audit_record import audit_event
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._model._record import MAX_COUNT, Decision, Phase, Record
from waitbound._profile._contract import Profile
from waitbound._profile._schedule import DelaySource
from waitbound._rules._escalation_message import escalation_message
from waitbound._rules._options import (
    ACTION_REQUESTS,
    MIN_GRANT_S,
    RESUMING,
    SYSTEM,
    Option,
    cancel_refusal,
    open_request,
    options,
    proposed_grant,
    reason_options,
    resume_refusal,
    span,
    suggested_grant,
)
from waitbound._rules._plan import grant_paced, result_reserve

__all__ = [
    "MAX_WHY_CHARS",
    "decide_record",
    "escalation_message",
    "expire",
    "profile_version",
    "request_extension_record",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Grant:
    minutes: float
    checks: int
    action_requests: int = 0
    """Requests the option's action sends before the checks (:data:`ACTION_REQUESTS`)."""


def _grant(record: Record, minutes: float | None, checks: int | None) -> _Grant:
    """The grant asked for, checked against the policy's ceilings.

    The shortest grant is :data:`MIN_GRANT_S` (1 second; the ceiling when that is
    shorter) and one check: below it a grant would use one of ``max_extensions`` and
    give nothing.

    Raises:
        UsageError: minutes not positive, below the minimum or beyond
            ``max_extension_s``; checks not a whole number from 1 to the policy's own
            request budget.
    """
    suggested_minutes, suggested_checks = suggested_grant(record)
    minutes = suggested_minutes if minutes is None else minutes
    checks = suggested_checks if checks is None else checks
    ceiling = record.contract.policy.extension_ceiling_s / 60
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, int | float)
        or not math.isfinite(minutes)
        or minutes <= 0
    ):
        raise UsageError(f"minutes must be a positive number, got {minutes!r}")
    shortest = min(MIN_GRANT_S / 60, ceiling)
    if minutes < shortest:
        raise UsageError(
            f"minutes {minutes:.3g} is below the minimum of {span(shortest)} for one grant "
            "(a grant's window must hold at least one request and its answer)"
        )
    if minutes > ceiling:
        raise UsageError(
            f"minutes {minutes:g} is beyond the ceiling of {span(ceiling)} for one grant "
            f"(policy max_extension_s): give at most {math.floor(ceiling * 1e4) / 1e4:g} minutes"
        )
    limit = min(record.contract.policy.max_requests, MAX_COUNT)
    if isinstance(checks, bool) or not isinstance(checks, int) or not 1 <= checks <= limit:
        raise UsageError(
            f"checks must be a whole number from 1 to {limit} (the policy's request "
            f"budget), got {checks!r}"
        )
    return _Grant(minutes=float(minutes), checks=checks)


def _as_requested(record: Record) -> _Grant:
    """The grant ``as_requested`` gives: the agent's proposal on the open request,
    checked against the policy's ceilings as any grant is.

    Raises:
        UsageError: no proposal is open, or it is beyond a ceiling (named, one line).
    """
    asked = proposed_grant(record)
    if asked is None:
        raise UsageError(
            f"operation {record.contract.operation_id} holds no agent's proposal to grant as "
            "requested"
        )
    try:
        return _grant(record, *asked)
    except UsageError as exc:
        raise UsageError(f"the agent's proposal cannot be granted as requested: {exc}") from None


def _limits(record: Record) -> dict[str, JSON]:
    return {
        "deadline_at": record.schedule.deadline_at.isoformat(),
        "max_requests": record.max_requests,
        "max_transport_failures": record.max_transport_failures,
        "max_rate_limited": record.max_rate_limited,
        "requests_used": record.requests_used,
    }


def _granted(record: Record, grant: _Grant, now: datetime) -> Record:
    """*record* under *grant*: the deadline moves to now + minutes (never earlier than
    it was), the request budget becomes the requests used + the action's own requests
    (the cancel, the result: :data:`ACTION_REQUESTS`) + checks (so "4 more checks" is at
    most 4 more after the action), and a stop for transport failures or throttling gets a fresh
    allowance of the policy's size for that counter; no counter resets.

    A running operation (an agent asked for more time) is never cut down by a grant:
    its request budget only moves out, never in.
    """
    grants = record.oversight.grants
    policy = record.contract.policy
    requests = record.requests_used + grant.action_requests + grant.checks - policy.max_requests
    deadline_at = max(now + timedelta(minutes=grant.minutes), record.schedule.deadline_at)
    if not record.is_finished:
        requests = max(requests, grants.requests)
    failures = grants.transport_failures
    if record.ending.reason is Reason.PROVIDER_FAILURE:
        failures = record.counters.transport_failures_used
    throttles = grants.rate_limited
    if record.ending.reason is Reason.RATE_LIMITED:
        throttles = record.counters.rate_limited_used
    return record.evolve(
        schedule=record.schedule.evolve(deadline_at=deadline_at),
        oversight=record.oversight.evolve(
            grants=(
                replace(
                    grants,
                    requests=requests,
                    transport_failures=failures,
                    rate_limited=throttles,
                    extensions=grants.extensions + 1,
                )
            )
        ),
    )


def _reopened(record: Record, now: datetime) -> Record:
    """A stopped operation, due again in the phase it stopped in, and free to claim.

    The stop's words go; the provider's error they wrapped (a partial success's, kept
    while its result is fetched) is the record's error again. A lease left by the step
    that stopped it (a worker's claim is kept on a finished record) is dropped: nothing
    holds a finished operation, and a reopened one is due now, not when that lease ends.
    """
    if not record.is_finished:
        return record
    error = (
        record.ending.error.get("provider_error") if isinstance(record.ending.error, dict) else None
    )
    return record.evolve(
        ending=record.ending.evolve(
            phase=record.ending.stopped_phase or Phase.WAITING,
            outcome=None,
            reason=None,
            finished_at=None,
            error=error,
        ),
        schedule=record.schedule.evolve(
            next_poll_at=now, delay_source=DelaySource.MANUAL_EXTENSION, attempt=0
        ),
        lease=record.lease.held(None, None),
    )


def profile_version(profile: Profile) -> str:
    """A short, stable version of a profile: the first 16 hex digits of the SHA-256 of
    its canonical JSON."""
    return hashlib.sha256(canonical_json(dict(profile.source)).encode()).hexdigest()[:16]


def decide_record(
    record: Record,
    option: Option | str,
    *,
    by: str,
    why: str,
    now: datetime,
    minutes: float | None = None,
    checks: int | None = None,
    profile: Profile | None = None,
    credential_label: str | None = None,
) -> tuple[Record, AuditEvent]:
    """Apply one decision to *record*'s open decision request.

    Args:
        record: the stored record.
        option: one of :func:`options` (``extend``, ``cancel``, …).
        by: who decides; ``why``: their reason (required, one line).
        now: the time of the decision.
        minutes, checks: the grant of a resuming option (default
            :func:`suggested_grant`), bounded by the policy.
        profile: the corrected profile, for ``resume_with_profile`` (required there).
        credential_label: a non-secret name for the new credentials, for
            ``resume_with_credentials`` (required there; must differ from the
            operation's current label).

    Returns:
        The record after the decision and its ``decided`` audit event.

    Raises:
        UsageError: no open decision request, an option not offered, a missing or
            blank ``why``, a grant beyond the ceilings, or a missing / identical
            profile or credential label. Nothing is changed.
    """
    who, reason_text = _person(by, why)
    offered = options(record, now)
    if record.oversight.decision_request is None:
        state = record.ending.outcome.value if record.ending.outcome else "still waiting"
        raise UsageError(
            f"operation {record.contract.operation_id} has no open decision request ({state}); "
            "there is nothing to decide"
        )
    try:  # ``as-requested`` is how a command line spells ``as_requested``
        chosen = Option(str(option).replace("-", "_"))
    except ValueError:
        chosen = None
    if chosen is None or chosen not in offered:
        why_not = _closed_because(record, chosen, now) if chosen is not None else None
        raise UsageError(
            f"option {str(option)[:40]!r} is not open on operation {record.contract.operation_id} "
            f"({record.ending.reason.value if record.ending.reason else 'an agent request'}"
            f"{'; ' + why_not if why_not else ''}); open: "
            f"{', '.join(o.value for o in offered) or 'none'}"
        )
    _only_where_they_apply(chosen, minutes, checks, profile, credential_label)
    before = _limits(record)
    detail: dict[str, JSON] = {"limits_before": before}
    if record.ending.reason is not None:
        detail["stopped_because"] = record.ending.reason.value
    if record.ending.error is not None:
        detail["stopped_with"] = record.ending.error
    if chosen in RESUMING:
        grant = replace(
            _as_requested(record)
            if chosen is Option.AS_REQUESTED
            else _grant(record, minutes, checks),
            action_requests=ACTION_REQUESTS.get(chosen, 0)
            + (
                result_reserve(_reopened(record, now))
                if chosen is not Option.FETCH_RESULT_AGAIN
                else 0
            ),
        )
        granted: dict[str, JSON] = {"minutes": grant.minutes, "checks": grant.checks}
        if chosen is Option.AS_REQUESTED and record.oversight.decision_request is not None:
            granted["requested_by"] = record.oversight.decision_request.requested_by
        if grant.action_requests:
            granted["action_requests"] = grant.action_requests
        detail["grant"] = granted
    after = record
    match chosen:
        case Option.EXTEND | Option.AS_REQUESTED:
            after = grant_paced(
                _reopened(_granted(record, grant, now), now), now, minutes=grant.minutes
            )
        case Option.CANCEL:
            after = _reopened(_granted(record, grant, now), now)
            after = after.evolve(oversight=after.oversight.cancel_requested(now, who, reason_text))
        case Option.TREAT_AS_PENDING:
            pending = (*record.oversight.grants.pending_states, record.answer.provider_state)
            after = _reopened(_granted(record, grant, now), now)
            after = after.evolve(
                oversight=after.oversight.evolve(
                    grants=replace(after.oversight.grants, pending_states=pending)
                )
            )
            after = grant_paced(after, now, minutes=grant.minutes)
            detail["pending_state"] = record.answer.provider_state
        case Option.RESUME_WITH_CREDENTIALS:
            label = (credential_label or "").strip()
            if not label:
                raise UsageError(
                    "resume_with_credentials needs a credential label: a name for the new "
                    "credentials (never the secret itself)"
                )
            if label == record.oversight.credential_label:
                raise UsageError(
                    f"credential label {label[:40]!r} is the one that was denied; resume only "
                    "with other credentials"
                )
            after = _reopened(_granted(record, grant, now), now)
            after = after.evolve(oversight=after.oversight.evolve(credential_label=label[:128]))
            detail["credential_label"] = {
                "from": record.oversight.credential_label,
                "to": label[:128],
            }
        case Option.RESUME_WITH_PROFILE:
            if profile is None:
                raise UsageError("resume_with_profile needs the corrected profile")
            old, new = profile_version(record.contract.profile), profile_version(profile)
            if old == new:
                raise UsageError(
                    f"profile {profile.name} (version {new}) is the one that stopped; give the "
                    "corrected profile"
                )
            after = _reopened(_granted(record, grant, now), now)
            after = after.evolve(contract=after.contract.evolve(profile=profile))
            detail["profile"] = {
                "from": {"name": record.contract.profile.name, "version": old},
                "to": {"name": profile.name, "version": new},
            }
        case Option.FETCH_RESULT_AGAIN:
            after = _reopened(_granted(record, grant, now), now)
        case Option.MARK_SUCCEEDED | Option.MARK_FAILED:
            evidence = (
                record.ending.error.get("response")
                if isinstance(record.ending.error, dict)
                else None
            )
            detail["evidence"] = evidence
            succeeded = chosen is Option.MARK_SUCCEEDED
            after = record.evolve(
                ending=record.ending.evolve(
                    outcome=OutcomeKind.SUCCEEDED if succeeded else OutcomeKind.FAILED,
                    reason=None,
                    error=None if succeeded else record.ending.error,
                ),
                oversight=record.oversight.evolve(decided_by=who),
            )
        case _:  # abandon, decline: the outcome (or the running operation) stays
            pass
    decision = Decision(option=chosen.value, by=who, why=reason_text, at=now, detail=detail)
    after = after.evolve(
        oversight=after.oversight.evolve(
            decision_request=None, decisions=(*record.oversight.decisions, decision)
        )
    )
    detail["limits_after"] = _limits(after)
    summary = f"decided by {who}: {chosen.value} ({reason_text})"
    if chosen in RESUMING:
        summary += (
            f"; deadline {after.schedule.deadline_at.isoformat()}, requests "
            f"{after.requests_used} of "
            f"{after.max_requests}"
        )
    event = audit_event(
        after,
        now,
        EventKind.DECIDED,
        summary,
        option=chosen.value,
        by=who,
        why=reason_text,
        **detail,
    )
    return after, event


def _closed_because(record: Record, option: Option, now: datetime) -> str | None:
    """Why a resuming option or ``cancel`` is closed on *record*, in words (``None`` when
    its reason never offers it)."""
    if record.is_finished and option not in reason_options(record.ending.reason):
        return None
    if option is Option.CANCEL and (refusal := cancel_refusal(record, now)) is not None:
        return refusal.split(": ", 1)[-1]
    if option not in RESUMING:
        return None
    return resume_refusal(record, now)


def _only_where_they_apply(
    option: Option,
    minutes: float | None,
    checks: int | None,
    profile: Profile | None,
    credential_label: str | None,
) -> None:
    """Refuse what the chosen option would ignore: a grant for an option that resumes
    nothing, a profile or credential label for any option but the one that takes it."""
    if (minutes is not None or checks is not None) and option not in RESUMING:
        raise UsageError(f"{option.value} resumes nothing: minutes and checks do not apply")
    if (minutes is not None or checks is not None) and option is Option.AS_REQUESTED:
        raise UsageError(
            "as_requested grants the agent's proposal: minutes and checks do not apply "
            "(choose extend to give other ones)"
        )
    if profile is not None and option is not Option.RESUME_WITH_PROFILE:
        raise UsageError(f"a profile applies only to resume_with_profile, not {option.value}")
    if credential_label is not None and option is not Option.RESUME_WITH_CREDENTIALS:
        raise UsageError(
            f"a credential label applies only to resume_with_credentials, not {option.value}"
        )


MAX_WHY_CHARS: Final = 500
"""The longest reason (``why``) a decision or a request may give, in characters."""


def _person(by: str, why: str) -> tuple[str, str]:
    """The decider and their reason, checked: both non-blank, one line, bounded."""
    who = (by or "").strip()
    reason = (why or "").strip()
    if not who or not who.isprintable():
        raise UsageError("'by' must name who decides (printable, one line)")
    if not reason:
        raise UsageError("a reason ('why') is required: one line, kept in the audit log")
    if not reason.isprintable():
        raise UsageError("the reason ('why') must be one line of printable text")
    if len(reason) > MAX_WHY_CHARS:  # refused, never cut: the audit keeps what was said
        raise UsageError(f"the reason ('why') is {len(reason)} characters; at most {MAX_WHY_CHARS}")
    return who[:128], reason


def request_extension_record(
    record: Record,
    *,
    now: datetime,
    minutes: float,
    checks: int,
    why: str,
    by: str,
) -> tuple[Record, AuditEvent]:
    """File an agent's request for more time: a person sees it and decides; nothing is
    extended by the request itself.

    On a running operation it opens a decision request (options ``extend``,
    ``decline``); on one that already waits for a decision it adds the proposal to it.

    Raises:
        UsageError: a finished operation with no open request, a blank ``why``, or a
            proposal beyond the ceilings (see :func:`decide`).
    """
    if record.is_finished and record.oversight.decision_request is None:
        raise UsageError(
            f"operation {record.contract.operation_id} is finished ({record.ending.outcome}); "
            "there is nothing to extend"
        )
    who, reason_text = _person(by, why)
    proposal = _grant(record, minutes, checks)
    after = open_request(
        record,
        now,
        requested_by=who,
        minutes=proposal.minutes,
        checks=proposal.checks,
        why=reason_text,
    )
    event = audit_event(
        after,
        now,
        EventKind.EXTENSION_REQUESTED,
        f"{who} asks for {proposal.minutes:g} more minutes with {proposal.checks} more checks "
        f"({reason_text}); a person decides",
        requested_by=who,
        minutes=proposal.minutes,
        checks=proposal.checks,
        why=reason_text,
    )
    return after, event


def expire(record: Record, now: datetime) -> tuple[Record, AuditEvent] | None:
    """Close a decision request nobody answered before its due time, or ``None``.

    A stopped operation is closed with reason ``decision_timeout`` (its outcome stays;
    the reason it stopped for stays in ``error``); a running one goes on as it was.
    """
    request = record.oversight.decision_request
    if request is None or now < request.due_at:
        return None
    detail: dict[str, JSON] = {"due_at": request.due_at.isoformat()}
    if record.ending.reason is not None:
        detail["stopped_because"] = record.ending.reason.value
    why = f"no decision before {request.due_at.isoformat()}"
    decision = Decision(option="decision_timeout", by=SYSTEM, why=why, at=now, detail=detail)
    after = record.evolve(
        oversight=record.oversight.evolve(
            decision_request=None, decisions=(*record.oversight.decisions, decision)
        )
    )
    if record.is_finished:
        after = after.evolve(ending=after.ending.evolve(reason=Reason.DECISION_TIMEOUT))
    event = audit_event(
        after, now, EventKind.DECIDED, f"decision request closed: {why}", option="decision_timeout",
        by=SYSTEM, why=why, **detail,
    )  # fmt: skip
    return after, event
