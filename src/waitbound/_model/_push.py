"""The push path's values: webhook deliveries in (the inbox) and completions out (the
outbox), as stores keep them.

A delivery in is a *hint*: stored once per (provider, webhook id), matched to the
operation whose ``push.webhook`` and ``job_id`` it names, and applied by bringing the
operation's next poll forward. A completion out is an outbox entry written in the
same transaction as the operation's final outcome, one per channel (``webhook``,
``callback``), delivered at least once under a stable ``delivery_id``.

Values only: which entries a write of a record owes is a rule, in
:mod:`waitbound._rules._notices`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final

from waitbound._base._json import JSON

__all__ = [
    "DELIVERY_ID_PREFIX",
    "Channel",
    "InboundDelivery",
    "OutboxEntry",
    "OutboxStatus",
    "completion_delivery_id",
    "decision_delivery_id",
]

DELIVERY_ID_PREFIX: Final = "dlv_"


class Channel(StrEnum):
    """Where a completion is delivered."""

    WEBHOOK = "webhook"
    """A signed webhook (Standard Webhooks) to the operation's ``push.notify_url``."""
    CALLBACK = "callback"
    """The ``on_complete`` callable of the process that delivers it."""


class OutboxStatus(StrEnum):
    """Where an outbox entry is in its life."""

    PENDING = "pending"
    """Not delivered yet (possibly after failed attempts); retried at ``next_attempt_at``."""
    DELIVERED = "delivered"
    """Delivered (a 2xx from the receiver, or the callable returned)."""
    FAILED = "failed"
    """Given up after the last attempt; ``waitbound deliveries replay`` sends it again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundDelivery:
    """One verified webhook delivery, as the inbox keeps it.

    Attributes:
        provider: the receiver's name (``POST /webhooks/{provider}``, a
            ``[webhooks.NAME]`` table of ``serve.toml``): the scope job ids match in.
        webhook_id: the delivery's signed id (``webhook-id``, a Stripe event's
            ``id``; for GitHub, which signs no id, ``sha256:`` and the hex digest of the
            body); unique per provider, so a retry or a replay is a duplicate.
        received_at: when it was stored.
        job_id: the job it is about, read by the receiver's ``job_id`` expression
            (``None``: the payload names none; it is kept but never matched).
        event_type: the payload's event type when it names one (``type``, ``action``).
        payload: the parsed payload (bounded, credentials redacted).
        authoritative: the receiver declares its payloads authoritative (the payload is
            read like a status body instead of only bringing the next poll forward).
        operation_id: the operation it was matched to (``None``: not yet; it is matched
            when an operation with this provider and job id is recorded).
        applied_at: when it was applied to that operation (``None``: not yet).
    """

    provider: str
    webhook_id: str
    received_at: datetime
    job_id: str | None
    payload: JSON
    event_type: str | None = None
    authoritative: bool = False
    operation_id: str | None = None
    applied_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxEntry:
    """One completion to deliver, as the outbox keeps it.

    Attributes:
        delivery_id: stable across retries (the ``webhook-id`` a receiver dedupes on);
            ``dlv_`` and hex digits.
        operation_id: the operation that finished.
        channel: where it goes.
        target: the URL of a ``webhook`` entry (``None`` for a callback).
        payload: the event sent: ``{"type": "operation.completed", "timestamp": …,
            "data": <the outcome as waitbound wait --json prints it>}``.
        created_at: when the outcome was recorded (the same transaction).
        status, attempts, next_attempt_at, delivered_at, last_error: the delivery's
            progress; ``last_error`` is one line (never a secret, never a body).
        replay_of: the delivery this one replays (``waitbound deliveries replay``).
        lease_owner, lease_expires_at: who is delivering it right now.
    """

    delivery_id: str
    operation_id: str
    channel: Channel
    target: str | None
    payload: dict[str, JSON]
    created_at: datetime
    next_attempt_at: datetime
    status: OutboxStatus = OutboxStatus.PENDING
    attempts: int = 0
    delivered_at: datetime | None = None
    last_error: str | None = None
    replay_of: str | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None


def completion_delivery_id(operation_id: str, channel: Channel) -> str:
    """The delivery id of an operation's completion on *channel*: derived from both, so
    every writer that records the outcome names the same delivery."""
    digest = hashlib.sha256(f"{operation_id}\x1f{channel.value}".encode()).hexdigest()
    return DELIVERY_ID_PREFIX + digest[:32]


def decision_delivery_id(operation_id: str, opened_at: datetime) -> str:
    """The delivery id of the notice that a decision request opened at *opened_at* waits
    on a person: one per request, whoever writes it."""
    key = f"{operation_id}\x1fdecision\x1f{opened_at.isoformat()}"
    return DELIVERY_ID_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:32]
