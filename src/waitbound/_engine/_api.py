"""The public waiting API: wait, start, submit, run, cancel and check, each sync and async.

Each function is a thin shell: it opens (or loads) the operation's record, then hands
the one shared loop (``_driver.loop``) to the blocking or the async interpreter. Once
the loop ends with a final outcome, ``wait``, ``submit`` and ``run`` deliver that
operation's completions in-process (``waitbound._engine._delivery``): to *on_complete*, and as a
signed webhook when the notify secret is known.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import anyio
import httpx

from waitbound._base._clock import Clock
from waitbound._base._errors import OperationNotFoundError
from waitbound._engine._call_options import (
    AsyncOptions,
    CallOptions,
    SyncOptions,
    drive_async,
    drive_sync,
)
from waitbound._engine._driver import loop, one_step, tools
from waitbound._engine._effects import Credentials, EventSink, Tools
from waitbound._engine._handle import AsyncOperationHandle, OperationHandle
from waitbound._engine._operation import (
    Operation,
    Submission,
    open_operation,
    request_cancel,
)
from waitbound._engine._outbox import OnComplete
from waitbound._engine._own_delivery import deliver_async, deliver_sync, notify_secret_for
from waitbound._model._outcome import Outcome
from waitbound._model._record import Phase, Record
from waitbound._rules._controller import Finish, Send, plan
from waitbound.stores import Store
from waitbound.transports import HttpSettings

__all__ = [
    "cancel",
    "cancel_async",
    "check",
    "check_async",
    "run",
    "run_async",
    "start",
    "start_async",
    "submit",
    "submit_async",
    "wait",
    "wait_async",
]


_O = TypeVar("_O", bound=CallOptions[Any, Any])


def _submitted(record: Record) -> bool:
    return record.ending.phase is not Phase.SUBMITTING


def _kept(
    options: _O,
    kit: Tools,
    secret: str | None,
) -> _O:
    """What ``submit``'s handle keeps: *options* with the store, clock and randomness
    the call drove with, and the completion secret it resolved."""
    return replace(options, store=kit.store, clock=kit.clock, rng=kit.rng, notify_secret=secret)


def _started(
    kit: Tools,
    operation: Operation,
    operation_id: str | None,
    callback: bool,
    first_poll_after_s: float,
) -> Record:
    """``start``'s record: created (or loaded) for a worker to drive; nothing sent."""
    return open_operation(
        kit.store,
        operation,
        operation_id=operation_id,
        clock=kit.clock,
        callback=callback,
        first_poll_after_s=first_poll_after_s,
    )


def _opened(
    options: SyncOptions | AsyncOptions,
    operation: Operation | Submission | None,
    operation_id: str | None,
    first_poll_after_s: float = 0.0,
) -> tuple[Tools, Record, str | None]:
    """The tools *options* give, the operation's record (created, or loaded to resume)
    and the secret its completion webhook is signed with; the secret is checked first,
    so a bad one stores nothing."""
    secret = notify_secret_for(operation, options.notify_secret)
    kit = options.tools()
    record = open_operation(
        kit.store,
        operation,
        operation_id=operation_id,
        clock=kit.clock,
        callback=options.on_complete is not None,
        first_poll_after_s=first_poll_after_s,
    )
    return kit, record, secret


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
    on_complete: OnComplete | None = None,
    notify_secret: str | None = None,
    first_poll_after_s: float = 0.0,
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
        headers: sent with every request to the origin of the status URL (e.g.
            ``Authorization``); never stored.
        client: an ``httpx.Client`` to send with, used as given and never closed here;
            ``None`` borrows the process's shared client (``wait_async``: the running
            event loop's), built once and kept (see ``docs/waiting.md``).
        clock, sleep, rng: time, sleeping (seconds) and jitter, injectable for tests.
        on_event: called with each audit event once it is persisted.
        http: body cap, redirects and connect timeout.
        on_complete: called with a :class:`~waitbound.Completion` once the outcome is
            final (sets ``Record.push.callback``; plain or async). It is called by this
            call after the loop; after a crash, by a ``waitbound.work`` given a callable.
            At least once: dedupe on ``delivery_id``. See ``docs/completions.md``.
        notify_secret: the ``whsec_`` secret that signs the completion webhook of an
            operation with ``notify_url``; ``None`` means ``$WAITBOUND_NOTIFY_SECRET``.
            The webhook is sent by this call once the outcome is final (retried by
            workers that know the secret when it fails).
        first_poll_after_s: for a caller that already holds a fresh answer: the new
            operation's first status request is sent this many seconds after it is
            created (persisted as its first ``next_poll_at``, delay source
            ``first_poll_after``); 0 (the default) sends it at once. Must be less than
            the time to the deadline. A resumed operation keeps its stored next poll
            time.

    Returns:
        The :class:`Outcome`; call ``raise_for_outcome()`` to turn a non-success
        into an exception.

    Raises:
        UsageError: bad URLs or ids, a ``notify_url`` without a usable notify secret,
            or a *first_poll_after_s* that is negative, not before the deadline or given
            without an *operation* (nothing is stored).
        StoreError: the store cannot be used.
    """
    options = SyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep, rng=rng,
        on_event=on_event, http=http, on_complete=on_complete, notify_secret=notify_secret,
    )  # fmt: skip
    kit, record, secret = _opened(options, operation, operation_id, first_poll_after_s)
    done = drive_sync(options, loop(kit, record), kit, record.contract.profile)
    deliver_sync(kit, done, on_complete, secret)
    return done.to_outcome()


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
    on_complete: OnComplete | None = None,
    notify_secret: str | None = None,
    first_poll_after_s: float = 0.0,
) -> Outcome:
    """Wait without blocking the event loop (anyio); see :func:`wait`.

    *sleep* is an async callable taking seconds (default ``anyio.sleep``).
    """
    options = AsyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep or anyio.sleep,
        rng=rng, on_event=on_event, http=http, on_complete=on_complete,
        notify_secret=notify_secret,
    )  # fmt: skip
    kit, record, secret = _opened(options, operation, operation_id, first_poll_after_s)
    done = await drive_async(options, loop(kit, record), kit, record.contract.profile)
    await deliver_async(kit, done, on_complete, secret)
    return done.to_outcome()


def start(
    operation: Operation,
    *,
    operation_id: str | None = None,
    store: Store | None = None,
    clock: Clock | None = None,
    callback: bool = False,
    first_poll_after_s: float = 0.0,
    headers: Mapping[str, str] | None = None,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
) -> OperationHandle:
    """Record an operation for a worker to drive, and return its handle at once
    (``wait --detach``).

    Nothing is sent: ``waitbound worker`` (or :func:`waitbound.work`) polls it, and the
    handle (``done``, ``status``, ``result``), :func:`check` or :func:`wait` read how it
    stands. *callback*: the completion is owed on the ``callback`` channel too,
    delivered by a worker started with ``on_complete`` (``waitbound.work(store,
    on_complete=…)``, ``serve``'s). *first_poll_after_s*: as in :func:`wait`, seconds
    before the first request. *headers*, *client*, *sleep*, *rng*, *on_event*, *http*:
    kept by the handle for its ``result`` and ``cancel`` (which send requests as
    :func:`wait` does); never stored.

    Returns:
        The :class:`OperationHandle` of the new (or resumed) operation;
        ``handle.status().outcome`` is the :class:`Outcome` this returned before 0.2
        (``done`` false).

    Raises:
        UsageError: bad URLs or ids, or a bad *first_poll_after_s* (nothing is stored).
    """
    kit = tools(store, clock, None, None, None)
    record = _started(kit, operation, operation_id, callback, first_poll_after_s)
    return OperationHandle._of(
        record.contract.operation_id,
        SyncOptions(
            store=kit.store, headers=headers, client=client, clock=kit.clock, sleep=sleep,
            rng=rng, on_event=on_event, http=http,
        ),
    )  # fmt: skip


async def start_async(
    operation: Operation,
    *,
    operation_id: str | None = None,
    store: Store | None = None,
    clock: Clock | None = None,
    callback: bool = False,
    first_poll_after_s: float = 0.0,
    headers: Mapping[str, str] | None = None,
    client: httpx.AsyncClient | None = None,
    sleep: Callable[[float], Awaitable[object]] | None = None,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
) -> AsyncOperationHandle:
    """Record an operation for a worker to drive; see :func:`start`.

    Returns:
        Its :class:`AsyncOperationHandle` (``result`` and ``cancel`` are coroutines).
    """
    kit = tools(store, clock, None, None, None)
    record = _started(kit, operation, operation_id, callback, first_poll_after_s)
    return AsyncOperationHandle._of(
        record.contract.operation_id,
        AsyncOptions(
            store=kit.store, headers=headers, client=client, clock=kit.clock,
            sleep=sleep or anyio.sleep, rng=rng, on_event=on_event, http=http,
        ),
    )  # fmt: skip


def submit(
    submission: Submission,
    *,
    operation_id: str | None = None,
    store: Store | None = None,
    headers: Credentials | None = None,
    client: httpx.Client | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
    on_complete: OnComplete | None = None,
    notify_secret: str | None = None,
) -> OperationHandle:
    """Record, then send a job request and read its receipt; do not wait on the job.

    The operation is stored (with the request's fingerprint and idempotency key)
    before the request is sent. It is sent again only with its idempotency key,
    after an attempt that got no answer, at most ``max_submit_attempts`` times.

    Args:
        submission: the request and the contract that reads its receipt.
        operation_id, store, headers, client, clock, sleep, rng, on_event, http,
            on_complete, notify_secret: as in :func:`wait`; *headers* go only to the
            submit URL's origin. The completion is delivered here only when the
            submission itself ended the operation; otherwise by whoever waits on it
            (a :func:`wait` given *on_complete*, or a worker).

    Returns:
        The :class:`OperationHandle`, built with this call's settings (its ``result``
        waits on the job). ``handle.status().outcome`` is the :class:`Outcome` this
        returned before 0.2: still waiting (``done`` false, ``job_id`` from the
        receipt, ``message`` saying the job is NOT complete), or finished when the
        submission was refused (then ``handle.outcome()`` is it too).

    Raises:
        UsageError: bad URLs or ids, or a ``notify_url`` without a usable notify
            secret (nothing is stored).
        StoreError: the store cannot be used.
    """
    options = SyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep, rng=rng,
        on_event=on_event, http=http, on_complete=on_complete, notify_secret=notify_secret,
    )  # fmt: skip
    kit, record, secret = _opened(options, submission, operation_id)
    done = drive_sync(
        options, loop(kit, record, submission, _submitted), kit, record.contract.profile
    )
    deliver_sync(kit, done, on_complete, secret)
    return OperationHandle._of(done.contract.operation_id, _kept(options, kit, secret))


async def submit_async(
    submission: Submission,
    *,
    operation_id: str | None = None,
    store: Store | None = None,
    headers: Credentials | None = None,
    client: httpx.AsyncClient | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], Awaitable[object]] | None = None,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
    on_complete: OnComplete | None = None,
    notify_secret: str | None = None,
) -> AsyncOperationHandle:
    """Submit without blocking the event loop; see :func:`submit`.

    Returns:
        The :class:`AsyncOperationHandle` (see :func:`submit`).
    """
    options = AsyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep or anyio.sleep,
        rng=rng, on_event=on_event, http=http, on_complete=on_complete,
        notify_secret=notify_secret,
    )  # fmt: skip
    kit, record, secret = _opened(options, submission, operation_id)
    steps = loop(kit, record, submission, _submitted)
    done = await drive_async(options, steps, kit, record.contract.profile)
    await deliver_async(kit, done, on_complete, secret)
    return AsyncOperationHandle._of(done.contract.operation_id, _kept(options, kit, secret))


def cancel(
    operation_id: str,
    *,
    reason: str | None = None,
    requested_by: str | None = None,
    store: Store | None = None,
    headers: Mapping[str, str] | None = None,
    client: httpx.Client | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
) -> Outcome:
    """Cancel a job through its documented cancel action, then wait for how it ends.

    Allowed only when the last status answer said the job is cancelable, or the
    profile declares it always cancelable. The request (who asked and why) is
    audited; then the status endpoint is polled within the operation's budgets until
    the job is canceled (or ends otherwise).

    Raises:
        OperationNotFoundError: no such operation.
        UsageError: finished already, no cancel action, or not cancelable now.
    """
    options = SyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep, rng=rng,
        on_event=on_event, http=http,
    )  # fmt: skip
    kit = options.tools()
    record = request_cancel(
        kit.store, kit.clock, operation_id, reason=reason, requested_by=requested_by
    )
    return drive_sync(options, loop(kit, record), kit, record.contract.profile).to_outcome()


async def cancel_async(
    operation_id: str,
    *,
    reason: str | None = None,
    requested_by: str | None = None,
    store: Store | None = None,
    headers: Mapping[str, str] | None = None,
    client: httpx.AsyncClient | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], Awaitable[object]] | None = None,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
) -> Outcome:
    """Cancel without blocking the event loop; see :func:`cancel`."""
    options = AsyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep or anyio.sleep,
        rng=rng, on_event=on_event, http=http,
    )  # fmt: skip
    kit = options.tools()
    record = request_cancel(
        kit.store, kit.clock, operation_id, reason=reason, requested_by=requested_by
    )
    return (
        await drive_async(options, loop(kit, record), kit, record.contract.profile)
    ).to_outcome()


def run(
    submission: Submission,
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
    on_complete: OnComplete | None = None,
    notify_secret: str | None = None,
) -> Outcome:
    """Submit a job and wait until it has exactly one outcome (``waitbound run``).

    See :func:`submit` (the submission rules) and :func:`wait` (the waiting rules,
    *on_complete* and *notify_secret*).

    Raises:
        UsageError: bad URLs or ids, or a ``notify_url`` without a usable notify
            secret (nothing is stored).
        StoreError: the store cannot be used.
    """
    options = SyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep, rng=rng,
        on_event=on_event, http=http, on_complete=on_complete, notify_secret=notify_secret,
    )  # fmt: skip
    kit, record, secret = _opened(options, submission, operation_id)
    done = drive_sync(options, loop(kit, record, submission), kit, record.contract.profile)
    deliver_sync(kit, done, on_complete, secret)
    return done.to_outcome()


async def run_async(
    submission: Submission,
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
    on_complete: OnComplete | None = None,
    notify_secret: str | None = None,
) -> Outcome:
    """Submit and wait without blocking the event loop; see :func:`run`."""
    options = AsyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep or anyio.sleep,
        rng=rng, on_event=on_event, http=http, on_complete=on_complete,
        notify_secret=notify_secret,
    )  # fmt: skip
    kit, record, secret = _opened(options, submission, operation_id)
    done = await drive_async(options, loop(kit, record, submission), kit, record.contract.profile)
    await deliver_async(kit, done, on_complete, secret)
    return done.to_outcome()


def _no_sleep(seconds: float) -> None:
    """A check sends at most one request, due now: it never sleeps."""


async def _no_nap(seconds: float) -> None:
    """:func:`_no_sleep` for the async check."""


def _look(kit: Tools, operation_id: str) -> Record | None:
    """The record when a check must not act on it (finished, submitting, not due), else None."""
    record = kit.store.get(operation_id)
    if record is None:
        raise OperationNotFoundError(operation_id)
    if record.is_finished or record.ending.phase is Phase.SUBMITTING:
        return record
    due = plan(record, kit.clock.now(), owner="check")
    return None if isinstance(due, Send | Finish) else record


def check(
    operation_id: str,
    *,
    store: Store | None = None,
    headers: Credentials | None = None,
    client: httpx.Client | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
) -> Outcome:
    """Take one bounded look at an operation: no request unless one is due, then at most one.

    Returns:
        The :class:`Outcome`; while the job runs, ``outcome`` is ``None``, ``done`` is
        false and ``message`` says it is NOT complete and when to check again.

    Raises:
        OperationNotFoundError: no such operation.
    """
    options = SyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=_no_sleep, rng=rng,
        on_event=on_event, http=http,
    )  # fmt: skip
    kit = options.tools()
    record = _look(kit, operation_id)
    if record is None:
        stored = kit.store.get(operation_id)
        assert stored is not None
        record = drive_sync(
            options, loop(kit, stored, until=one_step()), kit, stored.contract.profile
        )
    return record.to_outcome()


async def check_async(
    operation_id: str,
    *,
    store: Store | None = None,
    headers: Credentials | None = None,
    client: httpx.AsyncClient | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
) -> Outcome:
    """One bounded look without blocking the event loop; see :func:`check`."""
    options = AsyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=_no_nap, rng=rng,
        on_event=on_event, http=http,
    )  # fmt: skip
    kit = options.tools()
    record = _look(kit, operation_id)
    if record is None:
        stored = kit.store.get(operation_id)
        assert stored is not None
        steps = loop(kit, stored, until=one_step())
        record = await drive_async(options, steps, kit, stored.contract.profile)
    return record.to_outcome()
