"""The drivers: one shared loop, interpreted twice (blocking and async).

:func:`_drive` is the only copy of the loop. It is a generator that performs the
store reads and writes itself (they are quick and local) and yields the two
effects that differ between the drivers, :class:`_Sleep` and :class:`_Send`; the
sync and async interpreters below only carry those out. No policy lives here: every
decision is the controller's (:func:`waitbound._controller.plan` and ``observe``).

Credentials (the caller's headers) are sent only to the origin of the URL the caller
named (the submit URL, else the status URL): never to a result, errors or cancel URL
on another origin that a provider's answer pointed at.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Final

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
    cancel_url,
    created_event,
    observe,
    plan,
)
from waitbound._errors import ConflictError, OperationNotFoundError, UsageError
from waitbound._observation import Observation
from waitbound._outcome import Outcome
from waitbound._record import Phase, Policy, Record
from waitbound._urls import checked_url, origin, redact_url
from waitbound.stores import Store, open_store
from waitbound.transports import HttpSettings, send_async, send_sync

__all__ = [
    "Operation",
    "Submission",
    "cancel",
    "cancel_async",
    "new_operation_id",
    "submit",
    "submit_async",
    "wait",
    "wait_async",
]

_OPERATION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

EventSink = Callable[[AuditEvent], None]


@dataclass(frozen=True, slots=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Send:
    request: Request
    headers: Mapping[str, str]
    content: bytes | None


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
    """Return *url* when it is an absolute http(s) URL with a host and no credentials.

    Raises:
        UsageError: it is not.
    """
    try:
        return checked_url(url)
    except ValueError as exc:
        raise UsageError(f"{what} {redact_url(url)!r} cannot be used ({exc})") from None


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
        cancel_url: the cancel action's URL, when no receipt or profile names it.
        cancel_on_deadline: send one cancel request when the deadline passes.
        job_id: the provider's job id, when the caller knows it.
    """

    status_url: str
    profile: Profile
    policy: Policy = field(default_factory=Policy)
    result_url: str | None = None
    cancel_url: str | None = None
    cancel_on_deadline: bool = False
    job_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """A job request to send (once), then wait on.

    Attributes:
        method: the HTTP method, e.g. ``POST``.
        url: the submit endpoint (absolute http or https URL).
        profile: the provider's contract; its ``submit`` part says where the
            receipt names the job id and the status URL.
        policy: deadline (counted from the submission), budgets and pacing.
        body: the request body (never stored; only its fingerprint is).
        content_type: sent as ``Content-Type`` with a body.
        idempotency_key: sent in the profile's idempotency header (generated when
            the profile names one and this is ``None``).
        max_submit_attempts: with an idempotency key, how many times a submission
            without an answer (a timeout, a dropped connection, a 5xx) may be sent.
        result_url, cancel_url, cancel_on_deadline: as in :class:`Operation`.
    """

    method: str
    url: str
    profile: Profile
    policy: Policy = field(default_factory=Policy)
    body: bytes = b""
    content_type: str | None = "application/json"
    idempotency_key: str | None = None
    max_submit_attempts: int = 3
    result_url: str | None = None
    cancel_url: str | None = None
    cancel_on_deadline: bool = False

    def fingerprint(self) -> str:
        """``sha256`` over method, URL and body: what identifies the request in the record."""
        digest = hashlib.sha256(f"{self.method.upper()}\n{self.url}\n".encode() + self.body)
        return f"sha256:{digest.hexdigest()}"

    def key_header(self) -> str | None:
        """The header the idempotency key travels in, or ``None`` without a key."""
        named = self.profile.submit.idempotency_header
        return named or ("Idempotency-Key" if self.idempotency_key else None)


def _check_id(operation_id: str | None) -> None:
    if operation_id is not None and not _OPERATION_ID.fullmatch(operation_id):
        raise UsageError(
            f"operation id {operation_id[:40]!r} must be 1-128 letters, digits, "
            "'.', '_', ':' or '-'"
        )


def _resume(store: Store, existing: Record, clock: Clock) -> Record:
    if existing.is_finished:
        return existing
    event = audit_event(
        existing,
        clock.now(),
        "resumed",
        f"resumed: {existing.requests_used} of {existing.policy.max_requests} requests "
        f"used, deadline {existing.deadline_at.isoformat()}",
    )
    try:
        return store.save(existing, [event])
    except ConflictError:  # another process moved it on; its record is as good
        return store.get(existing.operation_id) or existing


def _create(store: Store, record: Record, clock: Clock) -> Record:
    try:
        return store.create(record, [created_event(record)])
    except UsageError:  # created a moment ago by a process started with the same id
        existing = store.get(record.operation_id)
        if existing is None:
            raise
        return _resume(store, existing, clock)


def open_operation(
    store: Store,
    operation: Operation | Submission | None,
    *,
    operation_id: str | None,
    clock: Clock,
) -> Record:
    """Create the operation's record, or load it to resume.

    An existing record keeps its own profile, policy, deadline, counters and next
    poll time: a restart never resets a budget. *operation* may be ``None`` only to
    resume.

    Raises:
        UsageError: a bad id or URL, a resume whose status URL or request differs
            from the stored one, or an unknown id without an *operation* to create.
    """
    _check_id(operation_id)
    if isinstance(operation, Operation):
        check_url(operation.status_url, "status URL")
    elif isinstance(operation, Submission):
        check_url(operation.url, "submit URL")
    for extra, what in (("result_url", "result URL"), ("cancel_url", "cancel URL")):
        url = getattr(operation, extra, None)
        if url is not None:
            check_url(url, what)
    existing = store.get(operation_id) if operation_id else None
    if existing is not None:
        if isinstance(operation, Operation) and operation.status_url != existing.status_url:
            raise UsageError(
                f"operation {operation_id} waits on another status URL; "
                "resume it without a URL, or use a new --operation-id"
            )
        if isinstance(operation, Submission) and (
            operation.fingerprint() != existing.submit_fingerprint
        ):
            raise UsageError(
                f"operation {operation_id} was created by another request; use a new --operation-id"
            )
        return _resume(store, existing, clock)
    if operation is None:
        raise OperationNotFoundError(operation_id or "")
    return _create(store, _new_record(operation, operation_id, clock.now()), clock)


def _new_record(
    operation: Operation | Submission, operation_id: str | None, now: datetime
) -> Record:
    record = Record(
        operation_id=operation_id or new_operation_id(),
        profile=operation.profile,
        policy=operation.policy,
        status_url=None,
        result_url=operation.result_url,
        cancel_url=operation.cancel_url,
        cancel_on_deadline=operation.cancel_on_deadline,
        created_at=now,
        deadline_at=now + timedelta(seconds=operation.policy.deadline_s),
        next_poll_at=now,
    )
    if isinstance(operation, Operation):
        return replace(record, status_url=operation.status_url, job_id=operation.job_id)
    key = operation.idempotency_key
    if key is None and operation.profile.submit.idempotency_header:
        key = f"wb-{uuid.uuid4().hex}"
    return replace(
        record,
        phase=Phase.SUBMITTING,
        submit_method=operation.method.upper(),
        submit_url=operation.url,
        submit_fingerprint=operation.fingerprint(),
        idempotency_key=key,
        max_submit_attempts=operation.max_submit_attempts if key else 1,
    )


def _request_headers(
    request: Request,
    record: Record,
    headers: Mapping[str, str],
    submission: Submission | None,
) -> dict[str, str]:
    """The caller's headers, for the origin the caller named only; plus the submit's own."""
    trusted = origin(record.submit_url or record.status_url or "")
    sent = dict(headers) if origin(request.url) == trusted else {}
    if request.kind == "submit" and submission is not None:
        if submission.body and submission.content_type:
            sent.setdefault("Content-Type", submission.content_type)
        key_header = submission.key_header()
        if key_header and record.idempotency_key:
            sent[key_header] = record.idempotency_key
    return sent


def _drive(
    store: Store,
    operation_id: str,
    *,
    owner: str,
    clock: Clock,
    rng: random.Random,
    on_event: EventSink | None,
    headers: Mapping[str, str],
    submission: Submission | None = None,
    until: Callable[[Record], bool] | None = None,
) -> Generator[_Sleep | _Send, Observation | None, Record]:
    """The one loop: plan, persist, sleep or send, observe, persist; until an outcome
    (or until *until* holds for the record). Returns the last record."""

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
        if until is not None and until(record):
            return record
        now = clock.now()
        leased = record.lease_expires_at is not None and record.lease_expires_at > now
        if leased and _holder_is_gone(record.lease_owner):
            record = replace(record, lease_expires_at=now)
        match plan(record, now, owner=owner, can_submit=submission is not None):
            case Finished(record=done):
                return done
            case Finish(transition=finish):
                try:
                    return persist(finish.record, finish.events)
                except ConflictError:
                    continue
            case Sleep(seconds=seconds):
                yield _Sleep(seconds)
            case Send(transition=reservation, request=request):
                try:
                    reserved = persist(reservation.record, reservation.events)
                except ConflictError:
                    continue
                content = submission.body if request.kind == "submit" and submission else None
                sent = _request_headers(request, reserved, headers, submission)
                observation = yield _Send(request, sent, content)
                assert observation is not None, "the driver must answer a _Send"
                after = observe(reserved, observation, rng=rng)
                try:
                    persist(after.record, after.events)
                except ConflictError:
                    continue  # our lease expired and another worker moved on


@dataclass(frozen=True, slots=True)
class _Tools:
    """What both interpreters are handed: the store, time, randomness, the event sink."""

    store: Store
    clock: Clock
    rng: random.Random
    on_event: EventSink | None
    headers: Mapping[str, str]


def _tools(
    store: Store | None,
    clock: Clock | None,
    rng: random.Random | None,
    on_event: EventSink | None,
    headers: Mapping[str, str] | None,
) -> _Tools:
    return _Tools(
        store=store if store is not None else open_store(),
        clock=clock or SystemClock(),
        rng=rng or random.Random(),
        on_event=on_event,
        headers=dict(headers or {}),
    )


def _loop(
    tools: _Tools,
    record: Record,
    submission: Submission | None = None,
    until: Callable[[Record], bool] | None = None,
) -> Generator[_Sleep | _Send, Observation | None, Record]:
    return _drive(
        tools.store,
        record.operation_id,
        owner=_owner(),
        clock=tools.clock,
        rng=tools.rng,
        on_event=tools.on_event,
        headers=tools.headers,
        submission=submission,
        until=until,
    )


def _run_sync(
    loop: Generator[_Sleep | _Send, Observation | None, Record],
    tools: _Tools,
    profile: Profile,
    *,
    client: httpx.Client | None,
    sleep: Callable[[float], None],
    http: HttpSettings,
) -> Record:
    """Carry out the loop's effects with a blocking client and ``sleep``."""
    http_client = client or httpx.Client(follow_redirects=False)
    try:
        effect = next(loop)
        while True:
            match effect:
                case _Sleep(seconds=seconds):
                    sleep(seconds)
                    effect = loop.send(None)
                case _Send(request=request, headers=headers, content=content):
                    observation = send_sync(
                        http_client,
                        request,
                        headers=headers,
                        content=content,
                        profile=profile,
                        clock=tools.clock,
                        settings=http,
                    )
                    effect = loop.send(observation)
    except StopIteration as stop:
        record: Record = stop.value
        return record
    finally:
        if client is None:
            http_client.close()


async def _run_async(
    loop: Generator[_Sleep | _Send, Observation | None, Record],
    tools: _Tools,
    profile: Profile,
    *,
    client: httpx.AsyncClient | None,
    sleep: Callable[[float], Awaitable[object]],
    http: HttpSettings,
) -> Record:
    """Carry out the loop's effects with an async client and an async ``sleep``."""
    http_client = client or httpx.AsyncClient(follow_redirects=False)
    try:
        effect = next(loop)
        while True:
            match effect:
                case _Sleep(seconds=seconds):
                    await sleep(seconds)
                    effect = loop.send(None)
                case _Send(request=request, headers=headers, content=content):
                    observation = await send_async(
                        http_client,
                        request,
                        headers=headers,
                        content=content,
                        profile=profile,
                        clock=tools.clock,
                        settings=http,
                    )
                    effect = loop.send(observation)
    except StopIteration as stop:
        record: Record = stop.value
        return record
    finally:
        if client is None:
            await http_client.aclose()


def _submitted(record: Record) -> bool:
    return record.phase is not Phase.SUBMITTING


def _request_cancel(
    tools: _Tools, operation_id: str, *, reason: str | None, requested_by: str | None
) -> Record:
    """Mark the operation's cancel as due (audited), after checking it is allowed.

    Raises:
        OperationNotFoundError: no such operation.
        UsageError: finished already, no cancel action, or not cancelable now.
    """
    record = tools.store.get(operation_id)
    if record is None:
        raise OperationNotFoundError(operation_id)
    if record.is_finished:
        raise UsageError(
            f"operation {operation_id} is finished ({record.outcome}); there is nothing to cancel"
        )
    url = cancel_url(record)
    if url is None:
        raise UsageError(
            f"operation {operation_id} has no cancel action: neither a receipt, a status "
            "answer, the profile nor --cancel-url names one"
        )
    if not (record.profile.cancel.always or record.cancelable is True):
        said = {None: "did not say it is", False: "said it is not"}[record.cancelable]
        raise UsageError(
            f"operation {operation_id} is not cancelable now: the last status answer {said} "
            f"cancelable, and profile {record.profile.name} does not declare it always cancelable"
        )
    who = requested_by or f"{os.environ.get('USER', 'someone')}@{socket.gethostname()}"
    event = audit_event(
        record,
        tools.clock.now(),
        "cancel_requested",
        f"cancel requested by {who}" + (f": {reason}" if reason else ""),
        requested_by=who,
        cancel_reason=reason,
    )
    due = replace(
        record,
        cancel_due=True,
        cancel_requested_at=tools.clock.now(),
        cancel_requested_by=who,
        cancel_reason=reason,
    )
    return tools.store.save(due, [event])


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
        headers: sent with every request to the origin of the status URL (e.g.
            ``Authorization``); never stored.
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
    tools = _tools(store, clock, rng, on_event, headers)
    record = open_operation(tools.store, operation, operation_id=operation_id, clock=tools.clock)
    done = _run_sync(
        _loop(tools, record), tools, record.profile, client=client, sleep=sleep, http=http
    )
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
) -> Outcome:
    """Wait without blocking the event loop (anyio); see :func:`wait`.

    *sleep* is an async callable taking seconds (default ``anyio.sleep``).
    """
    tools = _tools(store, clock, rng, on_event, headers)
    record = open_operation(tools.store, operation, operation_id=operation_id, clock=tools.clock)
    done = await _run_async(
        _loop(tools, record),
        tools,
        record.profile,
        client=client,
        sleep=sleep or anyio.sleep,
        http=http,
    )
    return done.to_outcome()


def submit(
    submission: Submission,
    *,
    wait_for_outcome: bool = False,
    operation_id: str | None = None,
    store: Store | None = None,
    headers: Mapping[str, str] | None = None,
    client: httpx.Client | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
) -> Record:
    """Record, then send a job request; read its receipt; optionally wait on the job.

    The operation is stored (with the request's fingerprint and idempotency key)
    before the request is sent. It is sent again only with its idempotency key,
    after an attempt that got no answer, at most ``max_submit_attempts`` times.

    Args:
        submission: the request and the contract that reads its receipt.
        wait_for_outcome: keep going until the operation has an outcome (``run``).
        operation_id, store, headers, client, clock, sleep, rng, on_event, http:
            as in :func:`wait`; *headers* go only to the submit URL's origin.

    Returns:
        The record: waiting (with ``status_url`` and ``job_id`` from the receipt),
        or finished when the submission was refused, or with ``wait_for_outcome``.

    Raises:
        UsageError: bad URLs or ids (nothing is stored).
        StoreError: the store cannot be used.
    """
    tools = _tools(store, clock, rng, on_event, headers)
    record = open_operation(tools.store, submission, operation_id=operation_id, clock=tools.clock)
    until = None if wait_for_outcome else _submitted
    return _run_sync(
        _loop(tools, record, submission, until),
        tools,
        record.profile,
        client=client,
        sleep=sleep,
        http=http,
    )


async def submit_async(
    submission: Submission,
    *,
    wait_for_outcome: bool = False,
    operation_id: str | None = None,
    store: Store | None = None,
    headers: Mapping[str, str] | None = None,
    client: httpx.AsyncClient | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], Awaitable[object]] | None = None,
    rng: random.Random | None = None,
    on_event: EventSink | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
) -> Record:
    """Submit without blocking the event loop; see :func:`submit`."""
    tools = _tools(store, clock, rng, on_event, headers)
    record = open_operation(tools.store, submission, operation_id=operation_id, clock=tools.clock)
    until = None if wait_for_outcome else _submitted
    return await _run_async(
        _loop(tools, record, submission, until),
        tools,
        record.profile,
        client=client,
        sleep=sleep or anyio.sleep,
        http=http,
    )


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
    tools = _tools(store, clock, rng, on_event, headers)
    record = _request_cancel(tools, operation_id, reason=reason, requested_by=requested_by)
    done = _run_sync(
        _loop(tools, record), tools, record.profile, client=client, sleep=sleep, http=http
    )
    return done.to_outcome()


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
    tools = _tools(store, clock, rng, on_event, headers)
    record = _request_cancel(tools, operation_id, reason=reason, requested_by=requested_by)
    done = await _run_async(
        _loop(tools, record),
        tools,
        record.profile,
        client=client,
        sleep=sleep or anyio.sleep,
        http=http,
    )
    return done.to_outcome()
