"""The drivers: one shared loop, interpreted twice (blocking and async).

:func:`_drive` is the only copy of the loop. It is a generator that performs the
store reads and writes itself (they are quick and local) and yields the two
effects that differ between the drivers, :class:`_Sleep` and :class:`_Send`; the
sync and async interpreters below only carry those out. No policy lives here: every
decision is the controller's (:func:`waitbound._controller.plan` and ``observe``).
"""

from __future__ import annotations

import os
import random
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Final
from urllib.parse import urlsplit

import anyio
import httpx

from waitbound._audit import AuditEvent
from waitbound._clock import Clock, SystemClock
from waitbound._contract import Profile
from waitbound._controller import (
    Finish,
    Finished,
    Request,
    Send,
    Sleep,
    audit_event,
    created_event,
    observe,
    plan,
)
from waitbound._errors import ConflictError, OperationNotFoundError, UsageError
from waitbound._observation import Observation
from waitbound._outcome import Outcome
from waitbound._record import Policy, Record
from waitbound.stores import Store, open_store
from waitbound.transports import HttpSettings, send_async, send_sync

__all__ = ["Operation", "new_operation_id", "wait", "wait_async"]

_OPERATION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

EventSink = Callable[[AuditEvent], None]


@dataclass(frozen=True, slots=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Send:
    request: Request


def new_operation_id() -> str:
    """Return a fresh operation id: ``op_`` and 20 random hex digits."""
    return f"op_{uuid.uuid4().hex[:20]}"


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _holder_is_gone(owner: str | None) -> bool:
    """Whether a lease holder ran on this machine in a process that no longer exists.

    Such a lease (left by a killed ``waitbound wait``) need not be waited out. A holder
    on another machine, or one that cannot be checked, is presumed alive until expiry.
    """
    host, _, rest = (owner or "").partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def check_url(url: str, what: str) -> str:
    """Return *url* when it is an absolute http(s) URL with a host.

    Raises:
        UsageError: it is not.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - urllib checks the port only when it is read
    except ValueError as exc:
        raise UsageError(f"{what} {url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{what} {url!r} is not an http or https URL")
    return url


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """What to wait on: the status endpoint and the contract that reads it.

    Attributes:
        status_url: the status endpoint (absolute http or https URL).
        profile: the provider's state table.
        policy: deadline, budgets and pacing (seconds).
        result_url: fetched once after a terminal success; ``None`` means the
            result is read inline (the profile's ``result``) or from the profile's
            ``result_url`` / ``result_url_template``.
        job_id: the provider's job id, when the caller knows it.
    """

    status_url: str
    profile: Profile
    policy: Policy = field(default_factory=Policy)
    result_url: str | None = None
    job_id: str | None = None


def open_operation(
    store: Store, operation: Operation | None, *, operation_id: str | None, clock: Clock
) -> Record:
    """Create the operation's record, or load it to resume.

    An existing record keeps its own profile, policy, deadline, counters and next
    poll time: a restart never resets a budget. *operation* may be ``None`` only to
    resume.

    Raises:
        UsageError: a bad id or URL, a resume whose status URL differs from the
            stored one, or an unknown id without an *operation* to create.
    """
    if operation_id is not None and not _OPERATION_ID.fullmatch(operation_id):
        raise UsageError(
            f"operation id {operation_id!r} must be 1-128 letters, digits, '.', '_', ':' or '-'"
        )
    if operation is not None:
        check_url(operation.status_url, "status URL")
        if operation.result_url is not None:
            check_url(operation.result_url, "result URL")
    existing = store.get(operation_id) if operation_id else None
    if existing is not None:
        if operation is not None and operation.status_url != existing.status_url:
            raise UsageError(
                f"operation {operation_id} waits on another status URL; "
                "resume it without a URL, or use a new --operation-id"
            )
        if existing.is_finished:
            return existing
        event = audit_event(
            existing,
            clock.now(),
            "resumed",
            f"resumed: {existing.requests_used} of {existing.policy.max_requests} requests "
            f"used, deadline {existing.deadline_at.isoformat()}",
        )
        return store.save(existing, [event])
    if operation is None:
        raise OperationNotFoundError(operation_id or "")
    now = clock.now()
    record = Record(
        operation_id=operation_id or new_operation_id(),
        profile=operation.profile,
        policy=operation.policy,
        status_url=operation.status_url,
        result_url=operation.result_url,
        job_id=operation.job_id,
        created_at=now,
        deadline_at=now + timedelta(seconds=operation.policy.deadline_s),
        next_poll_at=now,
    )
    return store.create(record, [created_event(record)])


def _drive(
    store: Store,
    operation_id: str,
    *,
    owner: str,
    clock: Clock,
    rng: random.Random,
    on_event: EventSink | None,
) -> Generator[_Sleep | _Send, Observation | None, Outcome]:
    """The one loop: plan, persist, sleep or send, observe, persist; until an outcome."""

    def persist(record: Record, events: tuple[AuditEvent, ...]) -> Record:
        saved = store.save(record, events)
        if on_event is not None:
            for event in events:
                on_event(event)
        return saved

    while True:
        record = store.get(operation_id)
        if record is None:
            raise OperationNotFoundError(operation_id)
        now = clock.now()
        leased = record.lease_expires_at is not None and record.lease_expires_at > now
        if leased and _holder_is_gone(record.lease_owner):
            record = replace(record, lease_expires_at=now)
        match plan(record, now, owner=owner):
            case Finished(record=done):
                return done.to_outcome()
            case Finish(transition=finish):
                try:
                    return persist(finish.record, finish.events).to_outcome()
                except ConflictError:
                    continue
            case Sleep(seconds=seconds):
                yield _Sleep(seconds)
            case Send(transition=reservation, request=request):
                try:
                    reserved = persist(reservation.record, reservation.events)
                except ConflictError:
                    continue
                observation = yield _Send(request)
                assert observation is not None, "the driver must answer a _Send"
                after = observe(reserved, observation, rng=rng)
                try:
                    persist(after.record, after.events)
                except ConflictError:
                    continue  # our lease expired and another worker moved on


def _setup(
    store: Store | None, clock: Clock | None, rng: random.Random | None
) -> tuple[Store, Clock, random.Random]:
    return (
        store if store is not None else open_store(),
        clock or SystemClock(),
        rng or random.Random(),
    )


def wait(
    operation: Operation | None = None,
    *,
    operation_id: str | None = None,
    store: Store | None = None,
    headers: Mapping[str, str] | None = None,
    client: httpx.Client | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
) -> Outcome:
    """Wait, blocking, until the operation has exactly one outcome.

    Creates the operation (or resumes ``operation_id`` from *store*), then polls
    its status endpoint within the deadline and budgets of its policy, and fetches
    the result once after a terminal success.

    Args:
        operation: what to wait on; ``None`` to resume ``operation_id``.
        operation_id: our id for the operation; a stored one is resumed with its
            counters, deadline and next poll time intact.
        store: where the record and audit log live; ``None`` opens the default
            SQLite store (``$WAITBOUND_STORE`` or the user's state directory).
        headers: sent with every request (e.g. ``Authorization``); never stored.
        client: an ``httpx.Client`` to send with; ``None`` makes one.
        clock, sleep, rng: time, sleeping (seconds) and jitter, injectable for tests.
        on_event: called with each audit event once it is persisted.
        http: body cap, redirects and connect timeout.

    Returns:
        The :class:`Outcome`; call ``raise_for_outcome()`` to turn a non-success
        into an exception.

    Raises:
        UsageError: bad URLs or ids (nothing is stored).
        StoreError: the store cannot be used.
    """
    store, clock, rng = _setup(store, clock, rng)
    record = open_operation(store, operation, operation_id=operation_id, clock=clock)
    loop = _drive(
        store, record.operation_id, owner=_owner(), clock=clock, rng=rng, on_event=on_event
    )
    own_client = client is None
    http_client = client or httpx.Client(follow_redirects=False)
    try:
        effect = next(loop)
        while True:
            match effect:
                case _Sleep(seconds=seconds):
                    sleep(seconds)
                    effect = loop.send(None)
                case _Send(request=request):
                    observation = send_sync(
                        http_client,
                        request,
                        headers=headers or {},
                        profile=record.profile,
                        clock=clock,
                        settings=http,
                    )
                    effect = loop.send(observation)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome
    finally:
        if own_client:
            http_client.close()


async def wait_async(
    operation: Operation | None = None,
    *,
    operation_id: str | None = None,
    store: Store | None = None,
    headers: Mapping[str, str] | None = None,
    client: httpx.AsyncClient | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], Awaitable[object]] | None = None,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
) -> Outcome:
    """Wait without blocking the event loop (anyio: asyncio or trio); see :func:`wait`.

    *sleep* is an async callable taking seconds (default ``anyio.sleep``).
    """
    store, clock, rng = _setup(store, clock, rng)
    nap = sleep or anyio.sleep
    record = open_operation(store, operation, operation_id=operation_id, clock=clock)
    loop = _drive(
        store, record.operation_id, owner=_owner(), clock=clock, rng=rng, on_event=on_event
    )
    own_client = client is None
    http_client = client or httpx.AsyncClient(follow_redirects=False)
    try:
        effect = next(loop)
        while True:
            match effect:
                case _Sleep(seconds=seconds):
                    await nap(seconds)
                    effect = loop.send(None)
                case _Send(request=request):
                    observation = await send_async(
                        http_client,
                        request,
                        headers=headers or {},
                        profile=record.profile,
                        clock=clock,
                        settings=http,
                    )
                    effect = loop.send(observation)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome
    finally:
        if own_client:
            await http_client.aclose()
