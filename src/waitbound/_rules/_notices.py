"""What a write of a record owes the outbox: its completion, once its outcome is final,
and a notice when a decision request opens (:func:`outbox_entries`).

A rule over the push path's values (:mod:`waitbound._model._push`, which only holds them):
stores call it in the transaction that writes the record, so every writer owes the
same deliveries under the same ids.
"""

from __future__ import annotations

from datetime import datetime

from waitbound._base._json import JSON
from waitbound._model._push import (
    Channel,
    OutboxEntry,
    completion_delivery_id,
    decision_delivery_id,
)
from waitbound._model._record import Record
from waitbound._rules._escalation_message import escalation_message

__all__ = ["completion_event", "decision_event", "outbox_entries"]


def completion_event(record: Record, at: datetime) -> dict[str, JSON]:
    """The event a completion delivers: ``type``, ``timestamp`` (RFC 3339) and ``data``,
    the outcome as ``waitbound wait --json`` prints it (Standard Webhooks' payload shape)."""
    return {
        "type": "operation.completed",
        "timestamp": at.isoformat(),
        "data": record.to_outcome().as_json(),
    }


def decision_event(record: Record, at: datetime) -> dict[str, JSON]:
    """The event that tells the operation's notify URL a decision waits on a person:
    ``type`` ``operation.decision_requested``, ``timestamp``, and ``data``: the outcome
    as ``waitbound wait --json`` prints it, plus ``decision`` (``message``: the
    escalation message; ``options``; ``requested_by``; ``opened_at``, ``due_at``)."""
    request = record.oversight.decision_request
    assert request is not None
    return {
        "type": "operation.decision_requested",
        "timestamp": at.isoformat(),
        "data": record.to_outcome().as_json()
        | {
            "decision": {
                "message": escalation_message(record, at),
                "options": list(request.options),
                "requested_by": request.requested_by,
                "opened_at": request.opened_at.isoformat(),
                "due_at": request.due_at.isoformat(),
            }
        },
    }


def outbox_entries(record: Record, at: datetime) -> list[OutboxEntry]:
    """The deliveries a write of *record* owes: its completion, one per channel it names,
    once its outcome is final (see ``Record.is_final``); and, with a notify URL, one
    notice per decision request when it opens (``operation.decision_requested``, on
    the ``webhook`` channel); none otherwise.

    Stores insert them in the same transaction as the record, ignoring an entry whose
    ``delivery_id`` is there already, so writing the record again (or two writers
    racing) never owes a second delivery.
    """
    request = record.oversight.decision_request
    if request is not None and record.push.notify_url is not None:
        return [
            OutboxEntry(
                delivery_id=decision_delivery_id(record.contract.operation_id, request.opened_at),
                operation_id=record.contract.operation_id,
                channel=Channel.WEBHOOK,
                target=record.push.notify_url,
                payload=decision_event(record, request.opened_at),
                created_at=request.opened_at,
                next_attempt_at=request.opened_at,
            )
        ]
    if not record.is_final or not record.push.notifies:
        return []
    channels = [Channel.WEBHOOK] if record.push.notify_url else []
    if record.push.callback:
        channels.append(Channel.CALLBACK)
    payload = completion_event(record, at)
    return [
        OutboxEntry(
            delivery_id=completion_delivery_id(record.contract.operation_id, channel),
            operation_id=record.contract.operation_id,
            channel=channel,
            target=record.push.notify_url if channel is Channel.WEBHOOK else None,
            payload=payload,
            created_at=at,
            next_attempt_at=at,
        )
        for channel in channels
    ]
