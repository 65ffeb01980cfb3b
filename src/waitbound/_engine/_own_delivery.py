"""Completions delivered by the call that waited: ``wait``, ``submit``, ``run``, a
handle's ``result`` and the group waits deliver a finished operation's completions
in-process (``waitbound._engine._delivery``), to *on_complete*, and as a signed webhook when the
notify secret is known; what fails stays pending for a worker.
"""

from __future__ import annotations

import logging

from waitbound._base._errors import WaitboundError
from waitbound._engine._delivery import deliver_due, deliver_due_async
from waitbound._engine._effects import Tools
from waitbound._engine._operation import Operation, Submission, check_push
from waitbound._engine._outbox import OnComplete, resolve_notify_secret
from waitbound._model._record import Record

__all__ = ["deliver_async", "deliver_sync", "notify_secret_for"]

_LOG = logging.getLogger("waitbound.outbox")


def notify_secret_for(operation: Operation | Submission | None, given: str | None) -> str | None:
    """The secret that signs completion webhooks, after checking *operation*'s opt-in.

    Raises:
        UsageError: its ``webhook`` or ``notify_url`` cannot be used, or it names a
            ``notify_url`` and no usable secret is known (before anything is stored).
    """
    if operation is None:
        return resolve_notify_secret(None, given)
    check_push(operation)  # a bad URL is named before a missing secret
    return resolve_notify_secret(operation.notify_url, given)


def _own_deliveries(
    done: Record, on_complete: OnComplete | None, secret: str | None
) -> tuple[OnComplete | None, str | None] | None:
    """What this call delivers of *done*'s completions itself (``None``: nothing)."""
    if not done.is_final or not done.push.notifies:
        return None
    callback = on_complete if done.push.callback else None
    signing = secret if done.push.notify_url is not None else None
    if callback is None and signing is None:
        return None
    return callback, signing


def _not_delivered(done: Record, exc: WaitboundError) -> None:
    _LOG.warning(
        "operation %s: its completion is not delivered now (%s: %s); it stays pending "
        "for a worker (waitbound.work with on_complete / notify_secret)",
        done.contract.operation_id, type(exc).__name__, exc,
    )  # fmt: skip


def deliver_sync(
    kit: Tools, done: Record, on_complete: OnComplete | None, secret: str | None
) -> None:
    """Deliver *done*'s due completions, blocking (the entries stay pending on failure)."""
    own = _own_deliveries(done, on_complete, secret)
    if own is None:
        return
    try:
        deliver_due(
            kit.store,
            clock=kit.clock,
            rng=kit.rng,
            notify_secret=own[1],
            on_complete=own[0],
            operation_id=done.contract.operation_id,
        )
    except WaitboundError as exc:  # the outcome is stored: never lose it for this
        _not_delivered(done, exc)


async def deliver_async(
    kit: Tools, done: Record, on_complete: OnComplete | None, secret: str | None
) -> None:
    """Deliver *done*'s due completions without blocking the event loop."""
    own = _own_deliveries(done, on_complete, secret)
    if own is None:
        return
    try:
        await deliver_due_async(
            kit.store,
            clock=kit.clock,
            rng=kit.rng,
            notify_secret=own[1],
            on_complete=own[0],
            operation_id=done.contract.operation_id,
        )
    except WaitboundError as exc:  # the outcome is stored: never lose it for this
        _not_delivered(done, exc)
