"""Delivering completions out: each due outbox entry to its channel, at least once,
under its stable delivery id (see ``docs/completions.md``), by the policy of
``waitbound._outbox``.

:func:`_pass` is the only copy of a delivery pass: a generator that claims due entries
(``Store.claim_outbox``, under a lease; one operation's only when asked), builds each
attempt, and settles its result, yielding the two effects that differ between the
blocking and the async shells (:class:`_Post`, :class:`_Call`), in the manner of
``waitbound._driver``'s one loop interpreted twice: :func:`deliver_due` and
:func:`deliver_due_async`.

Webhooks follow Standard Webhooks (https://www.standardwebhooks.com/): the payload as
compact JSON, ``webhook-id`` (the delivery id, the same on every retry),
``webhook-timestamp`` (Unix seconds) and ``webhook-signature`` (``v1,`` and the base64
HMAC-SHA256 of ``id.timestamp.body``, made by the ``standardwebhooks`` library). A 2xx
delivers; any other status, a redirect (never followed), a timeout or a connection error
is a failed attempt, retried with backoff. Neither the notify secret nor a target's
query string ever appears in ``last_error`` or a log line, and a response body is never
read.
"""

from __future__ import annotations

import inspect
import json
import logging
import random
from collections.abc import Awaitable, Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import anyio
import httpx

from waitbound._clock import Clock, SystemClock
from waitbound._driver import holder_is_gone, new_owner
from waitbound._errors import UsageError
from waitbound._outbox import (
    WEBHOOK_TIMEOUT_S,
    Attempt,
    Completion,
    OnComplete,
    Unsendable,
    attempt_of_error,
    attempt_of_status,
    next_attempt,
    webhook_signer,
)
from waitbound._push import Channel, OutboxEntry, OutboxStatus
from waitbound._urls import checked_url, redact_url
from waitbound.stores import Store

if TYPE_CHECKING:
    from standardwebhooks import Webhook

__all__ = ["deliver_due", "deliver_due_async"]

_LOG = logging.getLogger("waitbound.outbox")

_ATTEMPT_ROOM_S: Final = WEBHOOK_TIMEOUT_S + 5.0
"""An entry is attempted only while its lease has this long left (seconds), so another
deliverer never takes it over while our attempt may still be in flight."""


@dataclass(frozen=True, slots=True)
class _Post:
    """Effect: POST *body* to *url* with *headers*; answer an :class:`Attempt`."""

    url: str
    headers: dict[str, str]
    body: bytes
    hidden: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Call:
    """Effect: call ``on_complete`` with *completion*; answer an :class:`Attempt`."""

    completion: Completion
    hidden: tuple[str, ...]


def _channels(notify_secret: str | None, on_complete: OnComplete | None) -> list[Channel]:
    """The channels this deliverer can serve: webhooks with a secret, callbacks with a
    callable."""
    channels = [Channel.WEBHOOK] if notify_secret is not None else []
    if on_complete is not None:
        channels.append(Channel.CALLBACK)
    return channels


def _release(store: Store, entry: OutboxEntry) -> None:
    """Let a claimed entry go unchanged (no attempt counted)."""
    try:
        store.settle_outbox(entry)
    except Exception as exc:  # its lease then simply expires
        _LOG.warning("delivery %s: lease not released: %s", entry.delivery_id, type(exc).__name__)


_ORPHAN_SCAN = 200
"""How many pending entries :func:`adopt_orphans` looks at, newest first."""


def adopt_orphans(store: Store, now: datetime, operation_id: str | None = None) -> int:
    """Let go of pending entries leased by a deliverer that ran on this machine in a
    process that no longer exists (a killed worker), so they need not wait out the
    lease; with *operation_id*, that operation's only. A holder on another machine is
    presumed alive until its lease expires. Returns how many were let go."""
    adopted = 0
    pending = store.outbox(
        operation_id=operation_id, status=OutboxStatus.PENDING, limit=_ORPHAN_SCAN
    )
    for entry in pending:
        leased = entry.lease_expires_at is not None and entry.lease_expires_at > now
        if leased and holder_is_gone(entry.lease_owner):
            _release(store, entry)
            adopted += 1
    return adopted


def _hidden(notify_secret: str | None, target: str | None) -> tuple[str, ...]:
    """What must never appear in an error line: the secret and the target with its query."""
    hidden: list[str] = []
    if notify_secret:
        hidden += [notify_secret, notify_secret.removeprefix("whsec_")]
    if target:
        hidden.append(target)
        try:
            query = httpx.URL(target).query.decode("ascii", "replace")
        except (httpx.InvalidURL, ValueError, TypeError):
            query = target.partition("?")[2]
        if query:
            hidden.append(query)
    return tuple(hidden)


def _effect(
    store: Store,
    entry: OutboxEntry,
    now: datetime,
    signer: Webhook | None,
    hidden: tuple[str, ...],
) -> _Post | _Call:
    """What attempting *entry* takes: a signed POST, or a call.

    Raises:
        Unsendable: a webhook entry without a usable target; a callback entry whose
            operation is not in the store.
    """
    if entry.channel is Channel.WEBHOOK:
        assert signer is not None, "webhook entries are claimed only with a secret"
        if entry.target is None:
            raise Unsendable("the entry names no target URL")
        try:
            checked_url(entry.target)
        except ValueError as exc:
            raise Unsendable(f"its target URL cannot be used ({exc})") from None
        body = json.dumps(entry.payload, separators=(",", ":"))
        at = now.astimezone(UTC)
        headers = {
            "content-type": "application/json",
            "webhook-id": entry.delivery_id,
            "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signer.sign(entry.delivery_id, at, body),
        }
        return _Post(url=entry.target, headers=headers, body=body.encode(), hidden=hidden)
    record = store.get(entry.operation_id)
    if record is None:
        raise Unsendable(f"operation {entry.operation_id} is not in the store")
    completion = Completion(
        delivery_id=entry.delivery_id,
        operation_id=entry.operation_id,
        outcome=record.to_outcome(),
        replay_of=entry.replay_of,
    )
    return _Call(completion=completion, hidden=hidden)


def _settle(store: Store, after: OutboxEntry) -> bool:
    """Write an attempt's result; say in the log what a failure was (redacted)."""
    target = f" to {redact_url(after.target)}" if after.target else ""
    if after.status is OutboxStatus.FAILED:
        _LOG.warning(
            "delivery %s (%s%s): attempt %d failed: %s; given up (replay it with "
            "waitbound deliveries replay %s)",
            after.delivery_id, after.channel.value, target, after.attempts, after.last_error,
            after.delivery_id,
        )  # fmt: skip
    elif after.status is OutboxStatus.PENDING:
        _LOG.warning(
            "delivery %s (%s%s): attempt %d failed: %s; next attempt at %s",
            after.delivery_id, after.channel.value, target, after.attempts, after.last_error,
            after.next_attempt_at.isoformat(),
        )  # fmt: skip
    try:
        written = store.settle_outbox(after)
    except Exception as exc:  # one entry's store failure never stops the others
        _LOG.warning("delivery %s: attempt not recorded: %s", after.delivery_id, type(exc).__name__)
        return False
    if not written:
        _LOG.warning("delivery %s: the lease was lost; attempt not recorded", after.delivery_id)
    return written


def _pass(
    store: Store,
    *,
    owner: str,
    clock: Clock,
    rng: random.Random,
    notify_secret: str | None,
    on_complete: OnComplete | None,
    limit: int,
    lease_s: float,
    operation_id: str | None,
) -> Generator[_Post | _Call, Attempt, int]:
    """The one delivery pass: claim, attempt each entry (yielding its effect), settle.
    Returns how many entries it delivered."""
    if limit < 1:
        raise UsageError(f"limit must be at least 1, got {limit!r}")
    if not lease_s > _ATTEMPT_ROOM_S:
        raise UsageError(
            f"lease_s must be more than {_ATTEMPT_ROOM_S:g} seconds (one attempt's "
            f"timeout and a margin), got {lease_s!r}"
        )
    channels = _channels(notify_secret, on_complete)
    if not channels:
        return 0
    signer = webhook_signer(notify_secret) if notify_secret is not None else None
    if operation_id is not None:  # one operation's: cheap to look for a killed holder
        adopt_orphans(store, clock.now(), operation_id)
    entries = store.claim_outbox(
        owner=owner,
        now=clock.now(),
        lease_s=lease_s,
        limit=limit,
        channels=channels,
        operation_id=operation_id,
    )
    delivered = 0
    for index, entry in enumerate(entries):
        now = clock.now()
        left_s = (entry.lease_expires_at - now).total_seconds() if entry.lease_expires_at else 0.0
        if left_s < _ATTEMPT_ROOM_S:
            # Too late to attempt it under this lease: let it and the rest go for the
            # next pass (ours or another deliverer's) instead of racing its next owner.
            for rest in entries[index:]:
                _release(store, rest)
            break
        hidden = _hidden(notify_secret, entry.target)
        try:
            effect = _effect(store, entry, now, signer, hidden)
        except Exception as exc:  # one bad entry never stops the others
            result = attempt_of_error(exc, hidden)
        else:
            result = yield effect
        after = next_attempt(entry, result, clock.now(), rng)
        if _settle(store, after) and after.status is OutboxStatus.DELIVERED:
            delivered += 1
    return delivered


def _post_sync(client: httpx.Client, post: _Post) -> Attempt:
    try:
        with client.stream(
            "POST",
            post.url,
            content=post.body,
            headers=post.headers,
            timeout=WEBHOOK_TIMEOUT_S,
            follow_redirects=False,
        ) as response:
            return attempt_of_status(response.status_code)  # the body is never read
    except Exception as exc:
        return attempt_of_error(exc, post.hidden)


async def _post_async(client: httpx.AsyncClient, post: _Post) -> Attempt:
    try:
        async with client.stream(
            "POST",
            post.url,
            content=post.body,
            headers=post.headers,
            timeout=WEBHOOK_TIMEOUT_S,
            follow_redirects=False,
        ) as response:
            return attempt_of_status(response.status_code)  # the body is never read
    except Exception as exc:
        return attempt_of_error(exc, post.hidden)


async def _awaited(value: Awaitable[object]) -> None:
    await value


def _call_sync(on_complete: OnComplete, call: _Call) -> Attempt:
    returned: object = None
    try:
        returned = on_complete(call.completion)
        if inspect.isawaitable(returned):
            anyio.run(_awaited, returned)  # RuntimeError inside a running event loop
    except Exception as exc:
        if inspect.iscoroutine(returned):
            returned.close()  # never awaited: say nothing more about it
        return attempt_of_error(exc, call.hidden)
    return Attempt()


async def _call_async(on_complete: OnComplete, call: _Call) -> Attempt:
    try:
        returned = on_complete(call.completion)
        if inspect.isawaitable(returned):
            await returned
    except Exception as exc:
        return attempt_of_error(exc, call.hidden)
    return Attempt()


def deliver_due(
    store: Store,
    *,
    owner: str | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    client: httpx.Client | None = None,
    notify_secret: str | None = None,
    on_complete: OnComplete | None = None,
    limit: int = 16,
    lease_s: float = 30.0,
    operation_id: str | None = None,
) -> int:
    """Deliver the due outbox entries: claim up to *limit* (a lease of *lease_s*
    seconds), attempt each once, record each attempt.

    Blocking: an async *on_complete* is run with ``anyio.run`` (so not from inside a
    running event loop: use :func:`deliver_due_async` there).

    Only the channels this caller can serve are claimed: ``webhook`` entries when
    *notify_secret* is given, ``callback`` entries when *on_complete* is. A webhook is a
    POST of the payload as compact JSON, signed with Standard Webhooks, with a 10 s
    timeout and no redirects followed; a 2xx delivers it. A callback is
    ``on_complete(Completion(...))``; returning (or its awaitable completing) delivers
    it. Anything else is a failed attempt, retried at ``next_attempt_at`` (backoff base
    5 s, cap 300 s, 50-100 % jitter, see :func:`next_attempt`) up to 10 attempts; then
    the entry is ``failed``. One bad entry never stops the others.

    Args:
        store: where the outbox is.
        owner: the lease owner (default: a fresh ``host:pid:random``).
        clock, rng: time and jitter, injectable for tests.
        client: sends the webhooks (default: a fresh ``httpx.Client``, closed
            afterwards). It should carry no credentials of its own: every webhook goes
            to a URL the operation's creator named.
        notify_secret: the ``whsec_`` secret that signs webhooks; ``None``: webhook
            entries are left for a deliverer that has it.
        on_complete: the callable for callback entries; ``None``: they are left for a
            deliverer that has one.
        limit: entries claimed in this pass.
        lease_s: how long the claim holds them; more than 15 s (an attempt is made only
            while at least 15 s of the lease are left, so it never overlaps another
            deliverer's).
        operation_id: deliver only this operation's entries (what ``wait`` does for
            its own operation).

    Returns:
        How many entries were delivered.

    Raises:
        UsageError: *limit* or *lease_s* out of range, the notify secret unusable, or
            the ``standardwebhooks`` library missing (``pip install 'waitbound[serve]'``).
        StoreError: the claim failed (a failure recording one entry only skips it).
    """
    gen = _pass(
        store,
        owner=owner or new_owner(),
        clock=clock or SystemClock(),
        rng=rng or random.Random(),
        notify_secret=notify_secret,
        on_complete=on_complete,
        limit=limit,
        lease_s=lease_s,
        operation_id=operation_id,
    )
    http_client = client
    try:
        effect = next(gen)
        while True:
            match effect:
                case _Post():
                    if http_client is None:
                        http_client = httpx.Client(follow_redirects=False)
                    result = _post_sync(http_client, effect)
                case _Call():
                    assert on_complete is not None, "callbacks are claimed only with a callable"
                    result = _call_sync(on_complete, effect)
            effect = gen.send(result)
    except StopIteration as stop:
        delivered: int = stop.value
        return delivered
    finally:
        if client is None and http_client is not None:
            http_client.close()


async def deliver_due_async(
    store: Store,
    *,
    owner: str | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    client: httpx.AsyncClient | None = None,
    notify_secret: str | None = None,
    on_complete: OnComplete | None = None,
    limit: int = 16,
    lease_s: float = 30.0,
    operation_id: str | None = None,
) -> int:
    """Deliver the due outbox entries without blocking the event loop; see
    :func:`deliver_due`.

    *client* is an ``httpx.AsyncClient`` (default: a fresh one, closed afterwards); an
    async *on_complete* is awaited.
    """
    gen = _pass(
        store,
        owner=owner or new_owner(),
        clock=clock or SystemClock(),
        rng=rng or random.Random(),
        notify_secret=notify_secret,
        on_complete=on_complete,
        limit=limit,
        lease_s=lease_s,
        operation_id=operation_id,
    )
    http_client = client
    try:
        effect = next(gen)
        while True:
            match effect:
                case _Post():
                    if http_client is None:
                        http_client = httpx.AsyncClient(follow_redirects=False)
                    result = await _post_async(http_client, effect)
                case _Call():
                    assert on_complete is not None, "callbacks are claimed only with a callable"
                    result = await _call_async(on_complete, effect)
            effect = gen.send(result)
    except StopIteration as stop:
        delivered: int = stop.value
        return delivered
    finally:
        if client is None and http_client is not None:
            await http_client.aclose()
