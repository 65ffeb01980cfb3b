"""The controller: pure decisions about one operation.

Rules of this module (in the manner of h11's ``_state.py``): it never reads a clock,
sleeps, draws from a global random generator or touches a socket or a store. Every
function takes the record, the time and (when it draws) a ``random.Random``, and
returns a new record plus the audit events that explain it. Drivers persist both in
one transaction before they act.

One step of an operation (the order matters):

1. finished → stop.
2. ``now >= stop_at`` (the deadline, or the business deadline when earlier) →
   ``timed_out`` (checked before any request), then the next request would exceed
   ``max_requests`` → escalate ``request_budget_exhausted``: both are
   ``_stop.stop_reason``'s, the one rule of whether to stop, which an answer that plans
   another look asks too (``_next_poll.schedule``).
3. a cancel due (a person's, or ``--cancel-on-deadline``'s) → reserve it.
4. ``now < next_poll_at`` → sleep until then (or the deadline), holding no lease;
   on waking late, send ONE request, never a burst.
5. take the lease, reserve the request (count it) and persist: :func:`plan` → :class:`Send`.
6. send it (the driver).
7. :func:`observe` the answer: classify and decide by the request's kind
   (``_status_answer``, ``_submit_answer``, ``_result_answer``, ``_canceling``, each
   reading a polling URL through its kind's reader, ``_polling_kinds``; a throttle's or a
   5xx's tolerance in ``_trouble``); the next poll time is ``_next_poll.next_poll_time``'s
   alone; persist; the lease is released.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from waitbound._base._urls import redact_url, resolve, shown_url
from waitbound._model._audit import AuditEvent, EventKind
from waitbound._model._audit_record import audit_event
from waitbound._model._observation import Observation, Request
from waitbound._model._outcome import Reason
from waitbound._model._pacing import Pacer
from waitbound._model._record import Phase, Record, RequestKind
from waitbound._model._record_parts import Lease
from waitbound._profile._contract import Reading
from waitbound._profile._protocol import IDEMPOTENT_METHODS
from waitbound._profile._schedule import DelaySource
from waitbound._rules import _sentences as sentences
from waitbound._rules._canceling import (
    DEADLINE_CANCEL_REQUESTS,
    after_refused_cancel,
    decide_cancel,
    refused_cancel_look,
)
from waitbound._rules._estimate import provider_estimate
from waitbound._rules._finish import Step, cancel_note, escalate, seconds_between
from waitbound._rules._learned import ModelLookup
from waitbound._rules._next_poll import Timing, wait_demanded
from waitbound._rules._polling_kinds import first_answer_reader, polling_kind
from waitbound._rules._result_answer import decide_errors, decide_result
from waitbound._rules._status_answer import decide_status
from waitbound._rules._stop import Bound, deadline_cancel_at, stop_reason
from waitbound._rules._submit_answer import decide_submit

__all__ = [
    "Decision",
    "Finish",
    "Finished",
    "Request",
    "Send",
    "Sleep",
    "Transition",
    "audit_event",
    "created_event",
    "internal_failure",
    "late_answer",
    "lease_margin_s",
    "observe",
    "plan",
    "unsent",
    "wait_demanded",
]


LEASE_RECHECK_S = 1.0
"""While another worker holds the lease, the record is read again this often (seconds)."""

LEASE_MARGIN_S = 1.0
"""With a lease length asked for (``plan(lease_s=…)``), a request's timeout ends at least
this long before the lease does, or a tenth of the lease when that is shorter (seconds):
room to persist the answer while the lease is still ours."""

WEBHOOK_RECHECK_S = 1.0
"""While webhooks are expected (``push.webhook``), a sleeping wait reads the record again
at least this often (seconds), so a delivery applied meanwhile wakes it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """A record change and the audit events that explain it; persist both together."""

    record: Record
    events: tuple[AuditEvent, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """The operation already has its outcome; nothing to write or send."""

    record: Record


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """Record an outcome without sending anything (deadline or budget reached)."""

    transition: Transition


@dataclass(frozen=True, slots=True, kw_only=True)
class Sleep:
    """Wait until ``until`` (``seconds`` from now), holding no lease, then plan again."""

    until: datetime
    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """Persist ``transition`` (the reservation and the lease), then send ``request``."""

    transition: Transition
    request: Request


Decision = Finished | Finish | Sleep | Send


def created_event(record: Record) -> AuditEvent:
    """The first audit event of a new operation."""
    policy = record.contract.policy
    if record.submission.status_url is not None:
        what = f"waiting on {redact_url(record.submission.status_url)}"
    else:
        submission = record.submission
        what = f"submitting {submission.submit_method} {redact_url(submission.submit_url or '')}"
        if record.submission.idempotency_key:
            what += f" (idempotency key {record.submission.idempotency_key})"
    return audit_event(
        record,
        record.contract.created_at,
        EventKind.CREATED,
        sentences.created(
            what,
            record.contract.profile.name,
            deadline_at=record.schedule.deadline_at,
            business_deadline_at=record.contract.business_deadline_at,
            max_requests=policy.max_requests,
            first_after_s=seconds_between(record.contract.created_at, record.schedule.next_poll_at)
            if record.schedule.delay_source is DelaySource.FIRST_POLL_AFTER
            else None,
        ),
        status_url=redact_url(record.submission.status_url)
        if record.submission.status_url
        else None,
        submit_fingerprint=record.submission.submit_fingerprint,
        deadline_at=record.schedule.deadline_at.isoformat(),
        business_deadline_at=record.contract.business_deadline_at.isoformat()
        if record.contract.business_deadline_at
        else None,
    )


def plan(
    record: Record,
    now: datetime,
    *,
    owner: str,
    can_submit: bool = False,
    lease_s: float | None = None,
) -> Decision:
    """Decide the next action for *record* at *now*, for the worker *owner*.

    Args:
        record: the stored record.
        now: the current time.
        owner: the worker's lease owner id.
        can_submit: the caller holds the submission's body and headers, so an
            operation in the ``submitting`` phase can be sent.
        lease_s: the lease a reservation takes, in seconds: it expires at
            ``now + lease_s``, and the request's timeout is cut so that it ends
            :func:`lease_margin_s` before that. ``None`` (a ``wait``): the request's
            timeout plus ``policy.lease_s``.

    Returns:
        :class:`Finished` (nothing to do), :class:`Finish` (an outcome reached
        without a request), :class:`Sleep` (not yet due, or leased by another
        worker; at most :data:`WEBHOOK_RECHECK_S` while webhooks are expected, so a
        delivery wakes the sleeper), or :class:`Send` (a reserved request, counted
        before it is sent).
    """
    if record.is_finished:
        return Finished(record=record)
    # A lease held by another, or a live request of this owner's own: never re-planned
    # (a step of ours still in flight is not an answer lost).
    held = record.lease.lease_owner is not None and (
        record.lease.lease_owner != owner or record.lease.in_flight is not None
    )
    if held and record.lease.lease_expires_at and now < record.lease.lease_expires_at:
        # Look again soon: the holder usually finishes long before its lease expires.
        until = min(record.lease.lease_expires_at, now + timedelta(seconds=LEASE_RECHECK_S))
        return Sleep(until=until, seconds=seconds_between(now, until))
    notes: list[AuditEvent] = []
    if record.lease.in_flight is not None:
        lost = record.lease.in_flight
        record = record.evolve(lease=record.lease.released())
        notes.append(
            audit_event(
                record,
                now,
                EventKind.ANSWER_LOST,
                sentences.answer_lost(lost),
            )
        )
        if lost == "result":
            detail = (
                "the job succeeded and its result was requested, but the answer was lost "
                "when waitbound stopped or stalled past its lease (not the provider's "
                "fault); a result is fetched at most once, so it is not requested again "
                "without a person's decision. "
                "Do not submit the job again"
            )
            step = escalate(record, now, Reason.RESULT_UNCONFIRMED, detail)
            return _finish_early(record, now, notes, step)
    if record.ending.phase is Phase.SUBMITTING:
        spent = stop_reason(
            record, now, bounds=(Bound.BUDGET,), why="the submission cannot be sent"
        )
        if spent is not None:
            return _finish_early(record, now, notes, spent)
        return _plan_submit(record, now, owner, notes, can_submit=can_submit, lease_s=lease_s)
    if (stop := stop_reason(record, now)) is not None:  # the deadline, then the budget
        return _finish_early(record, now, notes, stop)
    cancel_at = record.cancel_target()
    deadline_cancel = deadline_cancel_at(record)
    if record.oversight.cancel_due and cancel_at:
        return _reserve(record, now, owner, notes, "cancel", cancel_at, lease_s=lease_s)
    if deadline_cancel is not None and cancel_at and now >= deadline_cancel:
        return _reserve(record, now, owner, notes, "cancel", cancel_at, lease_s=lease_s)
    requests_left = record.max_requests - record.requests_used
    if deadline_cancel is not None and requests_left <= DEADLINE_CANCEL_REQUESTS:
        # The last requests are the deadline cancel's and its one look: no status poll
        # spends them (docs/waiting.md, "A cancel the deadline can confirm").
        return Sleep(until=deadline_cancel, seconds=seconds_between(now, deadline_cancel))
    if now < record.schedule.next_poll_at:
        until = min(record.schedule.next_poll_at, record.stop_at)
        if deadline_cancel is not None:
            until = min(until, deadline_cancel)
        if record.push.webhook is not None:  # a delivery may bring the poll forward
            until = min(until, now + timedelta(seconds=WEBHOOK_RECHECK_S))
        return Sleep(until=until, seconds=seconds_between(now, until))
    kind: RequestKind
    match record.ending.phase:
        case Phase.FETCHING_RESULT:
            url, kind = record.submission.result_url or "", "result"
        case Phase.FETCHING_ERRORS:
            url, kind = record.submission.errors_url or "", "errors"
        case _:
            url, kind = record.submission.status_url or "", "status"
    return _reserve(record, now, owner, notes, kind, url, lease_s=lease_s)


def _plan_submit(
    record: Record,
    now: datetime,
    owner: str,
    notes: list[AuditEvent],
    *,
    can_submit: bool,
    lease_s: float | None,
) -> Decision:
    """The submission: sent once; again only with its idempotency key after no answer."""
    resendable = (
        record.submission.idempotency_key or record.submission.submit_method in IDEMPOTENT_METHODS
    )
    if record.counters.submit_attempts and not resendable:
        why = "its answer was never recorded (the process stopped)"
    elif record.counters.submit_attempts >= record.contract.max_submit_attempts:
        why = f"no answer after {record.counters.submit_attempts} attempt(s)"
    elif not can_submit:
        why = "its body and headers are not at hand (they are never stored)"
    else:
        stop = stop_reason(record, now, bounds=(Bound.DEADLINE,), why=cancel_note(record))
        if stop is not None:
            return _finish_early(record, now, notes, stop)
        if now < record.schedule.next_poll_at:
            until = min(record.schedule.next_poll_at, record.stop_at)
            return Sleep(until=until, seconds=seconds_between(now, until))
        url = record.submission.submit_url or ""
        return _reserve(
            record,
            now,
            owner,
            notes,
            "submit",
            url,
            method=record.submission.submit_method,
            lease_s=lease_s,
        )
    key = (
        f" (idempotency key {record.submission.idempotency_key})"
        if record.submission.idempotency_key
        else ""
    )
    detail = (
        f"the submission cannot be sent again: {why}; it may have created a job. "
        f"Check with the provider, or submit again with the same idempotency key{key}"
    )
    return _finish_early(record, now, notes, escalate(record, now, Reason.PROVIDER_FAILURE, detail))


def _finish_early(record: Record, now: datetime, notes: list[AuditEvent], step: Step) -> Finish:
    events = (*notes, step.event(now))
    return Finish(transition=Transition(record=step.record, events=events))


def _reserve(  # noqa: PLR0917 - the same six values at every call site
    record: Record,
    now: datetime,
    owner: str,
    notes: list[AuditEvent],
    kind: RequestKind,
    url: str,
    *,
    method: str | None = None,
    lease_s: float | None = None,
) -> Send:
    policy = record.contract.policy
    left_s = seconds_between(now, record.stop_at)
    # A cancel leaves half the time left for the status look that tells how the job ended.
    timeout_s = min(policy.request_timeout_s, left_s if kind != "cancel" else left_s / 2)
    if lease_s is None:
        held_s = timeout_s + policy.lease_s
    else:  # the lease asked for; the request ends before it does
        held_s = lease_s
        timeout_s = min(timeout_s, lease_s - lease_margin_s(lease_s))
    if kind == "cancel":
        method = record.contract.profile.cancel.method
    # The reservation changes two parts: the lease (with the request in flight) and
    # the counter of its kind; the others are shared, already encoded.
    reserved = record.evolve(
        lease=Lease.reserved(kind, owner, now + timedelta(seconds=held_s)),
        counters=record.counters.with_request(kind),
    )
    summary = sentences.reserved(
        kind,
        reserved.requests_used,
        reserved.max_requests,
        timeout_s=timeout_s,
        late_s=seconds_between(record.schedule.next_poll_at, now),
    )
    event = audit_event(
        reserved, now, EventKind.RESERVED, summary, request=kind, timeout_s=round(timeout_s, 3),
        deadline_at=record.schedule.deadline_at.isoformat(),
    )  # fmt: skip
    return Send(
        transition=Transition(record=reserved, events=(*notes, event)),
        request=Request(
            kind=kind,
            url=url,
            timeout_s=timeout_s,
            method=method or "GET",
            redirect_budget=max(0, reserved.max_requests - reserved.requests_used),
        ),
    )


def unsent(record: Record, kind: RequestKind, now: datetime, why: str) -> Transition:
    """Release a reservation whose request was never sent (its lease could not cover
    it, or the worker was told to stop): the request is no longer counted, the lease
    and ``in_flight`` are cleared, and the operation stays due as it was."""
    released = record.evolve(
        lease=record.lease.released(), counters=record.counters.without_request(kind)
    )
    summary = f"the reserved {kind} request was not sent: {why}; it is released, not counted"
    event = audit_event(released, now, EventKind.SEND_SKIPPED, summary, request=kind)
    return Transition(record=released, events=(event,))


def late_answer(
    record: Record,
    kind: RequestKind,
    now: datetime,
    what: str,
    *,
    sent: bool = True,
    request_id: str | None = None,
) -> Transition:
    """A note on *record* (nothing else changes) about the request of a reservation
    that is no longer current — its lease ran out and the operation was taken over:
    *what* says what became of it. Its event is ``late_answer`` for a request that was
    sent (its answer is not used), ``send_skipped`` for one that never was."""
    if sent:
        summary = (
            f"late answer to a {kind} request whose lease had run out: {what}; the "
            "operation had been taken over meanwhile, so this answer is not used and not "
            "attributed to any other request"
        )
    else:
        summary = (
            f"a reserved {kind} request was not sent: {what}; the operation had been "
            "taken over meanwhile (an answer noted lost for it was never asked for)"
        )
    told = EventKind.LATE_ANSWER if sent else EventKind.SEND_SKIPPED
    event = audit_event(record, now, told, summary, request=kind, request_id=request_id)
    return Transition(record=record, events=(event,))


def lease_margin_s(lease_s: float) -> float:
    """How long before a lease of *lease_s* seconds expires its request must end:
    :data:`LEASE_MARGIN_S`, or a tenth of the lease when that is shorter (seconds)."""
    return min(LEASE_MARGIN_S, lease_s / 10)


def internal_failure(record: Record, now: datetime, doing: str, exc: Exception) -> Transition:
    """Stop one operation that waitbound itself could not process (a bug, or an answer
    no rule foresaw): escalate ``integration_failure`` with the error named, so the
    operation carries its own failure and every other operation goes on.

    Any request already reserved stays counted; the lease is released.
    """
    message = str(exc).splitlines()[0] if str(exc) else ""
    detail = (
        f"waitbound could not finish {doing} for this operation "
        f"({type(exc).__name__}{': ' + ascii(message)[1:-1][:200] if message else ''}); "
        "nothing was guessed, and the other operations are not affected"
    )
    cleared = record.evolve(lease=record.lease.released())
    step = escalate(cleared, now, Reason.INTEGRATION_FAILURE, detail)
    return Transition(record=step.record, events=(step.event(now),))


# --- observing an answer ---------------------------------------------------------


def observe(
    record: Record,
    observation: Observation,
    *,
    rng: random.Random,
    models: ModelLookup | None = None,
    pacer: Pacer | None = None,
) -> Transition:
    """Record one answer and decide what follows.

    Args:
        record: the record as persisted by the :class:`Send` that reserved the request.
        observation: what the request returned; ``observation.at`` is "now".
        rng: draws the jitter.
        models: the learned schedules a ``Policy.schedule = "learned"`` operation's
            next status poll is planned from (``None``: the formula); see
            ``_learned.py``.
        pacer: the store's origin calendar a ``Policy.origin_pacing`` operation's next
            status poll is paced through, after every other rule (``None``: not
            paced); see ``_pacing.py``.

    Returns:
        The new record (lease released) and two audit events: what was observed,
        and what was decided (an outcome, or the next request time and its source).
    """
    now = observation.at
    if observation.request_id is None and observation.body_problem is None:
        # A request id the body carries (the profile's ``request_id``) is kept like a
        # header's: on the record, in the outcome and in the story.
        named = record.contract.profile.body_request_id(observation.body)
        if named is not None:
            observation = replace(observation, request_id=named)
    # The reading and the URLs depend on none of the fields set below: one copy.
    reading = _read(record, observation)
    bad_url: str | None = None
    cancelable, cancel_url, errors_url = (
        record.answer.cancelable,
        record.submission.cancel_url,
        record.submission.errors_url,
    )
    if reading is not None:
        cancel_at, bad_cancel = _absolute(record, reading.cancel_url, "cancel URL")
        errors_at, bad_errors = _absolute(record, reading.errors_url, "errors URL")
        bad_url = bad_cancel or bad_errors
        cancelable = reading.cancelable
        cancel_url = cancel_url or cancel_at
        errors_url = errors_at or errors_url
    base = record.evolve(
        counters=record.counters.with_request(observation.kind, observation.redirects),
        lease=record.lease.released(),
        answer=record.answer.evolve(
            last_observed_at=now,
            last_http_status=observation.http_status,
            last_request_id=observation.request_id,
            cancelable=cancelable,
        ),
        submission=record.submission.evolve(cancel_url=cancel_url, errors_url=errors_url),
    )
    if observation.kind in ("status", "submit"):
        end, source = provider_estimate(base, observation, reading)
        if end != base.answer.estimated_end_at or source != base.answer.estimate_from:
            base = base.evolve(
                answer=base.answer.evolve(estimated_end_at=end, estimate_from=source)
            )
    timing = Timing(
        rng=rng,
        models=models,
        pacer=pacer,
        refused_cancel=after_refused_cancel
        if refused_cancel_look(record, observation.kind)
        else None,
    )
    match observation.kind:
        case _ if bad_url is not None:
            step = escalate(
                base, now, Reason.INTEGRATION_FAILURE, bad_url, response=observation.body
            )
        case "submit":
            step = decide_submit(base, observation, reading, timing)
        case "result":
            step = decide_result(base, observation, timing)
        case "errors":
            step = decide_errors(base, observation)
        case "cancel":
            step = decide_cancel(base, observation)
        case _:
            step = decide_status(base, observation, reading, timing)
    after = step.record
    observed = audit_event(
        after,
        now,
        EventKind.OBSERVED,
        _describe(observation, reading, after),
        request=observation.kind,
        http_status=observation.http_status,
        request_id=observation.request_id,
        elapsed_s=round(observation.elapsed_s, 3),
        transport_error=observation.transport_error,
        classification=reading.classification.value if reading and reading.classification else None,
        deadline_at=after.schedule.deadline_at.isoformat(),
    )
    return Transition(record=after, events=(observed, step.event(now)))


def _absolute(record: Record, url: str | None, what: str) -> tuple[str | None, str | None]:
    """A URL named by a status body, resolved against the status URL: ``(url, None)``,
    or ``(None, problem)`` when it cannot be used (a provider naming a broken URL has
    broken its contract)."""
    if not url:
        return None, None
    try:
        return resolve(
            record.submission.status_url or record.submission.submit_url or "", url
        ), None
    except ValueError as exc:
        return None, f"the status body's {what} {shown_url(url)} cannot be used ({exc})"


def _read(record: Record, observation: Observation) -> Reading | None:
    """What the profile reads from a status answer's or a first answer's JSON body (by
    the kind of URL that answered), or ``None`` without one."""
    if observation.body_problem is not None or observation.body is None:
        return None
    match observation.kind:
        case "status":
            return polling_kind(record).read(record, observation.body)
        case "submit":
            return first_answer_reader(record).read(record, observation.body)
        case _:
            return None


def _describe(observation: Observation, reading: Reading | None, after: Record) -> str:
    classification = reading.classification if reading is not None else None
    return sentences.observed(
        observation.kind,
        after.counters.used(observation.kind),
        transport_error=observation.transport_error,
        http_status=observation.http_status,
        classification=classification.value if classification is not None else None,
        state=reading.state if reading is not None else None,
        progress=reading.progress if reading is not None else None,
        request_id=observation.request_id,
    )
