"""Webhook deliveries applied to operations: a hint brings the next poll forward.

A delivery is a *hint*, not a verdict (``docs/waiting.md``, "Webhooks as hints,
polling as backup"). Applying one to its operation (:func:`apply_delivery`, pure, in the
manner of the controller: no clock, no store, no global random generator):

- sets ``next_poll_at`` to now, never later than it was (a hint never delays), except
  that a wait the provider demanded (a 429's or 503's ``Retry-After``, see
  :func:`~waitbound._rules._controller.wait_demanded`) is never cut short;
- counts ``push.deliveries`` and sets ``push.last_delivery_at``;
- audits one ``webhook_received`` event.

No request is spent: the poll that follows is planned like any other, under the lease
and within every budget and the deadline, and it decides.

Only a receiver that declares its payloads *authoritative* lets the payload itself be
read, exactly as a status body is (the controller's :func:`~waitbound._rules._controller.observe`
of a 200 answer carrying it): a terminal payload ends the operation (or starts the
result fetch) without a request; anything else (pending, unknown, unreadable) only
brings the poll forward. A payload is never read while a request is in flight or
another process holds the lease: that holder's answer is about to be recorded, with
its reservation, and reading the payload beside it could count or decide twice. Then
only the hint applies (and the answer, if it schedules a later poll, is followed by
one at once, since it may predate the delivery; see ``observe``).

:func:`sweep_inbox` applies the store's pending deliveries; every worker loop and
``waitbound serve`` run it.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime
from typing import Final

from waitbound._base._clock import Clock
from waitbound._base._errors import ConflictError
from waitbound._base._json import JSON, show
from waitbound._model._audit import EventKind
from waitbound._model._observation import Observation
from waitbound._model._outcome import OutcomeKind
from waitbound._model._push import InboundDelivery
from waitbound._model._record import Phase, Record
from waitbound._observe._telemetry import noted
from waitbound._profile._protocol import UrlKind
from waitbound._rules._controller import Transition, audit_event, observe, wait_demanded
from waitbound.stores import Store

__all__ = ["SAVE_ATTEMPTS", "apply_delivery", "sweep_inbox"]

_LOG = logging.getLogger("waitbound.inbox")

SAVE_ATTEMPTS: Final = 5
"""How often :func:`sweep_inbox` reads a record again after a conflicting write before
it gives the delivery up (the record is being written, most likely polled, right now)."""

_PAYLOAD_ENDINGS: Final = frozenset(
    {
        OutcomeKind.SUCCEEDED,
        OutcomeKind.COMPLETED_WITH_ERRORS,
        OutcomeKind.FAILED,
        OutcomeKind.CANCELED,
        OutcomeKind.EXPIRED,
    }
)
"""The outcomes an authoritative payload may decide (a terminal state it reports); an
escalation or a timeout is never decided by a payload: the poll that follows decides."""

_FETCHING: Final = (Phase.FETCHING_RESULT, Phase.FETCHING_ERRORS)


def apply_delivery(
    record: Record, delivery: InboundDelivery, now: datetime, *, rng: random.Random
) -> Transition | None:
    """Apply one webhook delivery to its operation's record.

    Args:
        record: the stored record of ``delivery.operation_id``.
        delivery: the delivery, as the inbox keeps it.
        now: the current time, aware UTC.
        rng: draws the jitter of an authoritative payload's reading (discarded unless
            the payload ends the operation).

    Returns:
        The record change and its audit events (``webhook_received``, then the outcome
        event when an authoritative payload ended the operation), to persist together;
        ``None`` when there is nothing to do: the operation is finished, or the delivery
        is about another operation (the caller marks it applied all the same).
    """
    if record.is_finished or delivery.operation_id != record.contract.operation_id:
        return None
    counted = record.evolve(
        push=record.push.evolve(deliveries=record.push.deliveries + 1, last_delivery_at=now),
    )
    if delivery.authoritative and record.ending.phase is Phase.WAITING and not _busy(record, now):
        read = _read_payload(counted, delivery, now, rng)
        if isinstance(read, Transition):
            return read
        note = read
    elif delivery.authoritative and record.ending.phase is Phase.WAITING:
        note = "its authoritative payload was not read (a request is in flight): the answer decides"
    elif delivery.authoritative:
        note = f"its authoritative payload was not read (phase {record.ending.phase.value})"
    else:
        note = ""
    return _hint(counted, delivery, now, note)


def _busy(record: Record, now: datetime) -> bool:
    """Whether a request is in flight, or someone (a worker's claim included) holds an
    unexpired lease: its holder's answer and reservation are about to be recorded."""
    leased = record.lease.lease_expires_at is not None and now < record.lease.lease_expires_at
    return record.lease.in_flight is not None or (record.lease.lease_owner is not None and leased)


def _about(delivery: InboundDelivery) -> str:
    """The delivery in words, bounded for one line: ``a webhook from PROVIDER (event
    TYPE, delivery ID)``."""
    event = f"event {show(delivery.event_type, 60)}, " if delivery.event_type else ""
    return (
        f"a webhook from {show(delivery.provider, 40)} "
        f"({event}delivery {show(delivery.webhook_id, 60)})"
    )


def _data(delivery: InboundDelivery) -> dict[str, JSON]:
    return {
        "provider": delivery.provider,
        "webhook_id": delivery.webhook_id,
        "event_type": delivery.event_type,
        "job_id": delivery.job_id,
        "authoritative": delivery.authoritative,
    }


def _hint(record: Record, delivery: InboundDelivery, now: datetime, note: str) -> Transition:
    """The hint: the next poll brought forward to now (never later than it was)."""
    about = _about(delivery)
    if record.ending.phase is Phase.SUBMITTING:
        summary = f"{about} arrived while the job is being submitted; nothing to bring forward"
    elif record.schedule.next_poll_at > now and wait_demanded(record):
        summary = (
            f"{about} arrived; the next check stays at {record.schedule.next_poll_at.isoformat()}, "
            f"the wait the provider demanded (HTTP {record.answer.last_http_status})"
        )
    else:
        moved = record.schedule.next_poll_at > now
        record = record.evolve(
            schedule=record.schedule.evolve(
                next_poll_at=min(record.schedule.next_poll_at, now),
                delay_source=None if moved else record.schedule.delay_source,
            )
        )
        summary = f"{about} brought the next check forward to now"
    if note:
        summary += f"; {note}"
    event = audit_event(record, now, EventKind.WEBHOOK_RECEIVED, summary, **_data(delivery))
    return Transition(record=record, events=(event,))


def _read_payload(
    record: Record, delivery: InboundDelivery, now: datetime, rng: random.Random
) -> Transition | str:
    """Read an authoritative payload as a 200 status answer carrying it, by the
    controller's own rules; the transition when it ends polling, else a note for the
    hint saying what it read."""
    answer = Observation(kind="status", at=now, http_status=200, body=delivery.payload)
    try:
        decided = observe(
            record.evolve(submission=record.submission.evolve(poll_kind=UrlKind.STATUS)),
            answer,
            rng=rng,
        )
    except Exception as exc:  # an unreadable payload is only a hint
        return f"its authoritative payload could not be read ({type(exc).__name__})"
    after = decided.record
    observed, *decision = decided.events
    state = show(after.answer.provider_state)
    classification = observed.data.get("classification")
    read = f"state {state} ({classification})" if classification else "no state"
    fetching = after.ending.outcome is None and after.ending.phase in _FETCHING
    if after.ending.outcome not in _PAYLOAD_ENDINGS and not fetching:
        return f"its authoritative payload read as {read}: the next check decides"
    after = after.evolve(
        # No request answered: the last HTTP answer stays the last poll's.
        submission=after.submission.evolve(poll_kind=record.submission.poll_kind),
        answer=after.answer.evolve(
            last_http_status=record.answer.last_http_status,
            last_request_id=record.answer.last_request_id,
            last_observed_at=record.answer.last_observed_at,
        ),
    )
    summary = f"{_about(delivery)} carried an authoritative payload: {read}; no request was sent"
    event = audit_event(after, now, EventKind.WEBHOOK_RECEIVED, summary, **_data(delivery))
    return Transition(record=after, events=(event, *decision))


def sweep_inbox(store: Store, *, clock: Clock, rng: random.Random, limit: int = 100) -> int:
    """Apply up to *limit* of the store's pending deliveries (matched, not applied),
    oldest first: take each (``Store.mark_applied``; a delivery another sweeper took
    is skipped), then apply it in its own write. A delivery is so applied at most
    once, however many sweepers (workers, serve processes) share the store; a crash
    between taking and applying loses only that hint, and polling, the backup, finds
    the job's state all the same.

    A conflicting write (someone wrote the record meanwhile) is retried on the record
    read again, up to :data:`SAVE_ATTEMPTS` times. One bad delivery or record never
    stops the sweep: a delivery whose application fails (or keeps conflicting) stays
    taken, so it never blocks the inbox, and the failure is logged as a warning on the
    ``waitbound.inbox`` logger.

    An empty inbox costs one ``pending_deliveries`` query.

    Args:
        store: the store whose inbox is swept.
        clock: gives "now" for each delivery.
        rng: handed to :func:`apply_delivery`.
        limit: the most deliveries applied in one sweep.

    Returns:
        How many deliveries were applied (a delivery with nothing to do counts; one
        whose application failed does not).

    Raises:
        StoreError: the store could not list the pending deliveries.
    """
    applied = 0
    for delivery in store.pending_deliveries(limit=limit):
        try:
            if not store.mark_applied(delivery.provider, delivery.webhook_id, clock.now()):
                continue  # another sweeper took it
        except Exception as exc:  # retried by the next sweep
            _LOG.warning(
                "webhook delivery %s/%s could not be taken: %s: %s",
                delivery.provider,
                delivery.webhook_id,
                type(exc).__name__,
                exc,
            )
            continue
        try:
            _apply(store, delivery, clock=clock, rng=rng)
        except Exception as exc:  # one delivery never stops the sweep
            _LOG.warning(
                "webhook delivery %s/%s for operation %s not applied: %s: %s",
                delivery.provider,
                delivery.webhook_id,
                delivery.operation_id,
                type(exc).__name__,
                exc,
            )
        else:
            applied += 1
    return applied


def _apply(store: Store, delivery: InboundDelivery, *, clock: Clock, rng: random.Random) -> None:
    """Apply one delivery to the record as stored, reading it again after a conflict.

    Raises:
        ConflictError: the record kept changing for :data:`SAVE_ATTEMPTS` reads.
    """
    operation_id = delivery.operation_id or ""
    for attempt in range(1, SAVE_ATTEMPTS + 1):
        record = store.get(operation_id)
        if record is None:
            return
        transition = apply_delivery(record, delivery, clock.now(), rng=rng)
        if transition is None:
            return
        try:
            saved = store.save(transition.record, transition.events)
        except ConflictError:
            if attempt == SAVE_ATTEMPTS:
                raise
        else:
            noted(store, saved, "webhook", transition.events, receiver=delivery.provider)
            return
