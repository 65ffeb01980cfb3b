"""Delivering completions out: each due outbox entry to its channel, at least once,
under its stable delivery id (see ``docs/completions.md``), by the policy of
``waitbound._engine._outbox``.

:func:`_claim` takes a pass's due entries (``Store.claim_outbox``, under a lease; one
operation's only when asked) and :func:`_attempt` is the only copy of an entry's
attempt: a generator that checks the lease still outlasts it, builds it, and settles its
result, yielding the two effects that differ between the blocking and the async shells
(:class:`_Post`, :class:`_Call`), in the manner of ``waitbound._engine._driver``'s one loop
interpreted twice: :func:`deliver_due` (one entry after another) and
:func:`deliver_due_async` (up to :data:`_CONCURRENCY` at once).

Every attempt has a total deadline (10 s by default), not only httpx's per-phase
timeouts: a receiver that trickles its answer a header line at a time is cut off at the
deadline (``anyio.move_on_after``), a failed attempt. The blocking shell sends its
webhooks with the same async code, on an event loop in a helper thread (anyio's
blocking portal), so the deadline cancels the request there too.

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
from collections.abc import Awaitable, Callable, Generator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import anyio
import anyio.from_thread
import httpx

from waitbound._base._clock import Clock, SystemClock
from waitbound._base._errors import UsageError
from waitbound._base._urls import checked_url, origin_only
from waitbound._engine._lease import holder_is_gone, new_owner
from waitbound._engine._outbox import (
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
from waitbound._model._push import Channel, OutboxEntry, OutboxStatus
from waitbound._observe._metrics import record_outbox_attempt
from waitbound.stores import Store

if TYPE_CHECKING:
    from standardwebhooks import Webhook

__all__ = ["deliver_due", "deliver_due_async"]

_LOG = logging.getLogger("waitbound.outbox")

_ROOM_MARGIN_S: Final = 5.0
"""An entry is attempted only while its lease has its attempt's whole timeout and this
much more left (seconds: 15 s by default), so another deliverer never takes it over
while our attempt may still be in flight or its result is being recorded."""

_CONCURRENCY: Final = 8
"""How many of a pass's entries the async deliverer attempts at once: a slow receiver
holds one of them for at most its attempt's timeout, never the whole pass."""


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


_ATTEMPT_RESULTS: Final = {OutboxStatus.DELIVERED: "delivered", OutboxStatus.FAILED: "failed"}
"""An attempt's result as ``waitbound.outbox.attempts`` counts it (else ``retry``)."""


def _settle(store: Store, after: OutboxEntry) -> bool:
    """Write an attempt's result; say in the log what a failure was (redacted)."""
    target = f" to {origin_only(after.target)}" if after.target else ""
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
    record_outbox_attempt(after.channel.value, _ATTEMPT_RESULTS.get(after.status, "retry"))
    try:
        written = store.settle_outbox(after)
    except Exception as exc:  # one entry's store failure never stops the others
        _LOG.warning("delivery %s: attempt not recorded: %s", after.delivery_id, type(exc).__name__)
        return False
    if not written:
        _LOG.warning("delivery %s: the lease was lost; attempt not recorded", after.delivery_id)
    return written


@dataclass(frozen=True, slots=True, kw_only=True)
class _Claimed:
    """One pass's claimed entries, and what attempting each of them takes."""

    store: Store
    clock: Clock
    rng: random.Random
    notify_secret: str | None
    signer: Webhook | None
    timeout_s: float
    entries: tuple[OutboxEntry, ...]

    @property
    def posts(self) -> bool:
        """Whether any entry is a webhook (the shells then need an HTTP client)."""
        return any(entry.channel is Channel.WEBHOOK for entry in self.entries)


def _claim(
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
    timeout_s: float,
) -> _Claimed:
    """Claim a pass's due entries, of the channels this deliverer can serve.

    Raises:
        UsageError: *limit*, *lease_s* or *timeout_s* out of range, or the notify secret
            unusable (see :func:`webhook_signer`).
    """
    if limit < 1:
        raise UsageError(f"limit must be at least 1, got {limit!r}")
    if not timeout_s > 0:
        raise UsageError(f"attempt_timeout_s must be more than 0 seconds, got {timeout_s!r}")
    if not lease_s > timeout_s + _ROOM_MARGIN_S:
        raise UsageError(
            f"lease_s must be more than {timeout_s + _ROOM_MARGIN_S:g} seconds (one "
            f"attempt's timeout and a margin), got {lease_s!r}"
        )
    channels = _channels(notify_secret, on_complete)
    signer = webhook_signer(notify_secret) if notify_secret is not None else None
    entries: list[OutboxEntry] = []
    if channels:
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
    return _Claimed(
        store=store, clock=clock, rng=rng, notify_secret=notify_secret, signer=signer,
        timeout_s=timeout_s, entries=tuple(entries),
    )  # fmt: skip


def _attempt(claimed: _Claimed, entry: OutboxEntry) -> Generator[_Post | _Call, Attempt, bool]:
    """One claimed entry's attempt: build it (yielding its effect), settle its result.
    Returns whether it was delivered.

    An entry whose lease no longer outlasts a whole attempt (its timeout and a margin)
    is let go unattempted, for the next pass (ours or another deliverer's), instead of
    racing its next owner."""
    store = claimed.store
    now = claimed.clock.now()
    left_s = (entry.lease_expires_at - now).total_seconds() if entry.lease_expires_at else 0.0
    if left_s < claimed.timeout_s + _ROOM_MARGIN_S:
        _release(store, entry)
        return False
    hidden = _hidden(claimed.notify_secret, entry.target)
    try:
        effect = _effect(store, entry, now, claimed.signer, hidden)
    except Exception as exc:  # one bad entry never stops the others
        result = attempt_of_error(exc, hidden)
    else:
        result = yield effect
    after = next_attempt(entry, result, claimed.clock.now(), claimed.rng)
    return _settle(store, after) and after.status is OutboxStatus.DELIVERED


def _timed_out(timeout_s: float) -> Attempt:
    """The failed attempt of one that outlasted its whole timeout."""
    return Attempt(error=f"TimeoutError: the attempt took more than {timeout_s:g} s")


async def _post_async(client: httpx.AsyncClient, post: _Post, timeout_s: float) -> Attempt:
    """POST *post*; the whole attempt (connecting, sending, the answer's status line and
    headers) is cut off after *timeout_s* seconds, each phase too (httpx's timeouts)."""
    try:
        with anyio.move_on_after(timeout_s):
            async with client.stream(
                "POST",
                post.url,
                content=post.body,
                headers=post.headers,
                timeout=timeout_s,
                follow_redirects=False,
            ) as response:
                return attempt_of_status(response.status_code)  # the body is never read
    except Exception as exc:
        return attempt_of_error(exc, post.hidden)
    return _timed_out(timeout_s)


async def _awaited(value: Awaitable[object], timeout_s: float) -> bool:
    """Await *value* for at most *timeout_s* seconds; say whether it completed."""
    with anyio.move_on_after(timeout_s):
        await value
        return True
    return False


def _poster(stack: ExitStack, timeout_s: float) -> Callable[[_Post], Attempt]:
    """A blocking POST with a whole timeout: :func:`_post_async` on an event loop in a
    helper thread, with one ``httpx.AsyncClient`` on it; both closed with *stack*."""
    portal = stack.enter_context(anyio.from_thread.start_blocking_portal())
    client = stack.enter_context(
        portal.wrap_async_context_manager(httpx.AsyncClient(follow_redirects=False))
    )
    return lambda post: portal.call(_post_async, client, post, timeout_s)


def _call_sync(on_complete: OnComplete, call: _Call, timeout_s: float) -> Attempt:
    returned: object = None
    try:
        returned = on_complete(call.completion)
        # anyio.run: a RuntimeError inside a running event loop
        if inspect.isawaitable(returned) and not anyio.run(_awaited, returned, timeout_s):
            return _timed_out(timeout_s)
    except Exception as exc:
        if inspect.iscoroutine(returned):
            returned.close()  # never awaited: say nothing more about it
        return attempt_of_error(exc, call.hidden)
    return Attempt()


async def _call_async(on_complete: OnComplete, call: _Call, timeout_s: float) -> Attempt:
    try:
        returned = on_complete(call.completion)
        if inspect.isawaitable(returned) and not await _awaited(returned, timeout_s):
            return _timed_out(timeout_s)
    except Exception as exc:
        return attempt_of_error(exc, call.hidden)
    return Attempt()


def deliver_due(
    store: Store,
    *,
    owner: str | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    notify_secret: str | None = None,
    on_complete: OnComplete | None = None,
    limit: int = 16,
    lease_s: float = 30.0,
    operation_id: str | None = None,
    attempt_timeout_s: float = WEBHOOK_TIMEOUT_S,
) -> int:
    """Deliver the due outbox entries: claim up to *limit* (a lease of *lease_s*
    seconds), attempt each once, one after another, record each attempt.

    Blocking: webhooks are sent by ``httpx.AsyncClient`` on an event loop in a helper
    thread (``anyio.from_thread.start_blocking_portal``), so that the attempt's whole
    timeout can cancel them; an async *on_complete* is run with ``anyio.run`` (so not
    from inside a running event loop: use :func:`deliver_due_async` there).

    Only the channels this caller can serve are claimed: ``webhook`` entries when
    *notify_secret* is given, ``callback`` entries when *on_complete* is. A webhook is a
    POST of the payload as compact JSON, signed with Standard Webhooks, with no
    redirects followed; a 2xx delivers it. A callback is ``on_complete(Completion(...))``;
    returning (or its awaitable completing) delivers it. Anything else is a failed
    attempt, retried at ``next_attempt_at`` (backoff base 5 s, cap 300 s, 50-100 %
    jitter, see :func:`next_attempt`) up to 10 attempts; then the entry is ``failed``.
    An attempt that takes more than *attempt_timeout_s* — a POST however slowly its
    receiver answers, an awaitable *on_complete* — is cut off, a failed attempt (a plain
    callable cannot be interrupted: keep it short). One bad entry never stops the
    others.

    Args:
        store: where the outbox is.
        owner: the lease owner (default: a fresh ``host:pid:random``).
        clock, rng: time and jitter, injectable for tests.
        notify_secret: the ``whsec_`` secret that signs webhooks; ``None``: webhook
            entries are left for a deliverer that has it.
        on_complete: the callable for callback entries; ``None``: they are left for a
            deliverer that has one.
        limit: entries claimed in this pass.
        lease_s: how long the claim holds them; more than *attempt_timeout_s* + 5 s (an
            attempt is made only while that much of the lease is left, so it never
            overlaps another deliverer's).
        operation_id: deliver only this operation's entries (what ``wait`` does for
            its own operation).
        attempt_timeout_s: the whole timeout of one attempt (seconds; more than 0).

    Returns:
        How many entries were delivered.

    Raises:
        UsageError: *limit*, *lease_s* or *attempt_timeout_s* out of range, the notify
            secret unusable, or the ``standardwebhooks`` library missing
            (``pip install 'waitbound[serve]'``).
        StoreError: the claim failed (a failure recording one entry only skips it).
    """
    claimed = _claim(
        store,
        owner=owner or new_owner(),
        clock=clock or SystemClock(),
        rng=rng or random.Random(),
        notify_secret=notify_secret,
        on_complete=on_complete,
        limit=limit,
        lease_s=lease_s,
        operation_id=operation_id,
        timeout_s=attempt_timeout_s,
    )
    delivered = 0
    with ExitStack() as stack:
        post = _poster(stack, attempt_timeout_s) if claimed.posts else None
        for entry in claimed.entries:
            attempt = _attempt(claimed, entry)
            try:
                match next(attempt):
                    case _Post() as effect:
                        assert post is not None, "a client is made when webhooks are claimed"
                        result = post(effect)
                    case _Call() as call:
                        assert on_complete is not None, "callbacks are claimed only with a callable"
                        result = _call_sync(on_complete, call, attempt_timeout_s)
                attempt.send(result)
            except StopIteration as stop:
                delivered += stop.value
    return delivered


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
    attempt_timeout_s: float = WEBHOOK_TIMEOUT_S,
) -> int:
    """Deliver the due outbox entries without blocking the event loop; see
    :func:`deliver_due`.

    Up to 8 of the pass's entries are attempted at once (each while its lease still
    outlasts a whole attempt), so a slow receiver delays the others by at most one
    attempt's timeout. *client* is an ``httpx.AsyncClient`` (default: a fresh one,
    closed afterwards; give one without default headers: every webhook goes to a URL the
    operation's creator named); an async *on_complete* is awaited.
    """
    claimed = _claim(
        store,
        owner=owner or new_owner(),
        clock=clock or SystemClock(),
        rng=rng or random.Random(),
        notify_secret=notify_secret,
        on_complete=on_complete,
        limit=limit,
        lease_s=lease_s,
        operation_id=operation_id,
        timeout_s=attempt_timeout_s,
    )
    if not claimed.entries:
        return 0
    delivered = 0
    slots = anyio.Semaphore(_CONCURRENCY)

    async def attempt_one(entry: OutboxEntry, http_client: httpx.AsyncClient | None) -> None:
        nonlocal delivered
        async with slots:
            attempt = _attempt(claimed, entry)
            try:
                match next(attempt):
                    case _Post() as post:
                        assert http_client is not None, "a client is made when webhooks are claimed"
                        result = await _post_async(http_client, post, attempt_timeout_s)
                    case _Call() as call:
                        assert on_complete is not None, "callbacks are claimed only with a callable"
                        result = await _call_async(on_complete, call, attempt_timeout_s)
                attempt.send(result)
            except StopIteration as stop:
                delivered += stop.value

    http_client = client
    if http_client is None and claimed.posts:
        http_client = httpx.AsyncClient(follow_redirects=False)
    try:
        async with anyio.create_task_group() as group:
            for entry in claimed.entries:
                group.start_soon(attempt_one, entry, http_client)
    finally:
        if client is None and http_client is not None:
            await http_client.aclose()
    return delivered
