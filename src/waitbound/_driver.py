"""The drivers: one shared loop, interpreted twice (blocking and async).

:func:`_drive` is the only copy of the loop. It is a generator that performs the
store reads and writes itself (they are quick and local) and yields the two
effects that differ between the drivers, :class:`_Sleep` and :class:`_Send`; the
sync and async interpreters below only carry those out. No policy lives here: every
decision is the controller's (:func:`waitbound._controller.plan` and ``observe``).

Credentials (the caller's headers) are sent only to the origin of the URL the caller
named (the submit URL, else the status URL): never to a result, errors or cancel URL
on another origin that a provider's answer pointed at. Echoed back in an answer, they
are redacted before the answer is read (``waitbound._secrets``).
"""

from __future__ import annotations

import os
import random
import socket
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import httpx

from waitbound._audit import AuditEvent
from waitbound._clock import Clock, SystemClock
from waitbound._contract import Profile
from waitbound._controller import (
    Decision,
    Finish,
    Finished,
    Request,
    Send,
    Sleep,
    Transition,
    internal_failure,
    observe,
    plan,
)
from waitbound._errors import ConflictError, OperationNotFoundError
from waitbound._failpoints import hit
from waitbound._observation import Observation
from waitbound._operation import Submission
from waitbound._record import Record
from waitbound._secrets import credential_values
from waitbound.stores import Store, open_store
from waitbound.transports import (
    HttpSettings,
    borrow_async_client,
    borrow_client,
    send_async,
    send_sync,
)

__all__ = [
    "Credentials",
    "EventSink",
    "Exchange",
    "Tools",
    "emit",
    "exchange",
    "holder_is_gone",
    "loop",
    "new_owner",
    "one_step",
    "reservation_of",
    "run_async_effects",
    "run_exchange_async",
    "run_sync_effects",
    "safe_plan",
    "tools",
]

EventSink = Callable[[AuditEvent], None]
Credentials = Mapping[str, str] | Callable[[Record], Mapping[str, str]]
"""The caller's headers: one mapping for every operation, or a function giving each
operation's own (e.g. by its ``label``). Sent only to origins the record trusts."""


@dataclass(frozen=True, slots=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Send:
    request: Request
    headers: Mapping[str, str]
    content: bytes | None
    secrets: tuple[str, ...]


def new_owner() -> str:
    """A lease owner id for this process: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def holder_is_gone(owner: str | None) -> bool:
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


def _request_headers(
    request: Request,
    record: Record,
    headers: Callable[[Record], Mapping[str, str]],
    submission: Submission | None,
) -> dict[str, str]:
    """The caller's headers, for the origins the record trusts only; plus the submit's own."""
    sent = dict(headers(record)) if record.trusts(request.url) else {}
    if request.kind == "submit" and submission is not None:
        if submission.body and submission.content_type:
            sent.setdefault("Content-Type", submission.content_type)
        sent |= submission.idempotency_headers(record.idempotency_key, record.created_at)
    return sent


def _drive(
    store: Store,
    operation_id: str,
    *,
    owner: str,
    clock: Clock,
    rng: random.Random,
    on_event: EventSink | None,
    headers: Callable[[Record], Mapping[str, str]],
    submission: Submission | None = None,
    until: Callable[[Record], bool] | None = None,
    per_origin: bool = False,
) -> Generator[_Sleep | _Send, Observation | None, Record]:
    """The one loop: plan, persist, sleep or send, observe, persist; until an outcome
    (or until *until* holds for the record). Returns the last record.

    *per_origin*: the caller's credentials are given per operation (a function), so an
    operation they hold none for is audited as polled without them.

    The record a successful write of ours returned is planned on directly, without
    reading it again: the next write is a compare-and-swap on it, so a change made
    meanwhile makes that write lose (and the loop read the record then)."""

    def persist(record: Record, events: tuple[AuditEvent, ...]) -> Record:
        saved = store.save(record, events)
        emit(on_event, events)
        return saved

    known: Record | None = None
    while True:
        record = known if known is not None else store.get(operation_id)
        known = None
        if record is None:
            raise OperationNotFoundError(operation_id)
        if until is not None and until(record):
            return record
        now = clock.now()
        leased = record.lease_expires_at is not None and record.lease_expires_at > now
        if leased and holder_is_gone(record.lease_owner):
            record = record.evolve(lease_expires_at=now)
        decision = safe_plan(record, now, owner=owner, can_submit=submission is not None)
        match decision:
            case Finished(record=done):
                return done
            case Finish(transition=finish):
                try:
                    finished = persist(finish.record, finish.events)
                except ConflictError:
                    continue
                if finished.is_final:
                    hit("final")
                return finished
            case Sleep(seconds=seconds):
                yield _Sleep(seconds)
            case Send(request=request):
                reservation = reservation_of(decision, headers, per_origin=per_origin)
                try:
                    reserved = persist(reservation.record, reservation.events)
                except ConflictError:
                    continue
                steps = exchange(
                    reserved,
                    request,
                    owner=owner,
                    clock=clock,
                    rng=rng,
                    headers=headers,
                    submission=submission,
                )
                effect = next(steps)
                try:
                    while True:
                        match effect:
                            case _Send():
                                try:
                                    observation = yield effect
                                except Exception as exc:  # the transport broke on this one
                                    effect = steps.throw(exc)
                                else:
                                    effect = steps.send(observation)
                            case _Persist(transition=after):
                                written: Record | ConflictError
                                try:
                                    written = persist(after.record, after.events)
                                except ConflictError as exc:
                                    written = exc
                                effect = steps.send(written)
                            case _Reread(operation_id=again):
                                effect = steps.send(store.get(again))
                except StopIteration as ended:
                    known = ended.value


@dataclass(frozen=True, slots=True)
class _Persist:
    """Write the answer's transition; answer with the stored record or the ConflictError."""

    transition: Transition


@dataclass(frozen=True, slots=True)
class _Reread:
    """Read the record again (after a conflict); answer with it, or ``None``."""

    operation_id: str


Exchange = Generator["_Send | _Persist | _Reread", object, Record | None]
"""One reserved request's exchange (see :func:`exchange`)."""


def exchange(
    reserved: Record,
    request: Request,
    *,
    owner: str,
    clock: Clock,
    rng: random.Random,
    headers: Callable[[Record], Mapping[str, str]],
    submission: Submission | None = None,
) -> Exchange:
    """Send a reserved request, observe its answer and persist it: the one copy of that
    part of the step, run by the loop above and by the worker (each carries out the
    effects its own way: ``_Send``, ``_Persist``, ``_Reread``).

    Starts right after the reservation was persisted (failpoint ``reserved``). A
    persisted answer that conflicts (someone wrote the record meanwhile: a person's
    decision, an agent's request) is applied to the fresh record while the lease and the
    reservation are still ours; otherwise our lease expired and another worker moved
    on, and the answer is dropped.

    Returns:
        The record as this exchange stored it; after a dropped answer, the fresh record
        read (``None`` when it is gone).
    """
    hit("reserved", f"reserved-{request.kind}")
    content = submission.body if request.kind == "submit" and submission else None
    sent = _request_headers(request, reserved, headers, submission)
    secrets = credential_values(headers(reserved))
    failure: Exception | None = None
    observation: Observation | None = None
    try:
        answer = yield _Send(request, sent, content, secrets)
    except Exception as exc:  # the transport broke on this request only
        failure = exc
    else:
        assert isinstance(answer, Observation), "the driver must answer a _Send"
        observation = answer
        hit("answered", f"answered-{request.kind}")
    current: Record | None = reserved
    while current is not None:
        after = _answered(current, request, observation, failure, clock=clock, rng=rng)
        written = yield _Persist(after)
        if isinstance(written, Record):
            if written.is_final:
                hit("final")
            return written
        fresh = yield _Reread(current.operation_id)
        assert fresh is None or isinstance(fresh, Record)
        ours = fresh is not None and fresh.lease_owner == owner and fresh.in_flight == request.kind
        if not ours:
            return fresh
        current = fresh
    return None  # pragma: no cover - the loop returns


def emit(on_event: EventSink | None, events: Sequence[AuditEvent]) -> None:
    """Hand persisted *events* to the caller's sink, if any."""
    if on_event is not None:
        for event in events:
            on_event(event)


def safe_plan(
    record: Record,
    now: datetime,
    *,
    owner: str,
    can_submit: bool = False,
    lease_s: float | None = None,
) -> Decision:
    """:func:`waitbound._controller.plan`; a fault in it stops this operation only
    (``integration_failure``)."""
    try:
        return plan(record, now, owner=owner, can_submit=can_submit, lease_s=lease_s)
    except Exception as exc:  # one operation's fault never escapes its loop
        return Finish(transition=internal_failure(record, now, "its next step", exc))


def reservation_of(
    send: Send, headers: Callable[[Record], Mapping[str, str]], *, per_origin: bool
) -> Transition:
    """The reservation to persist for *send*: with per-operation credentials, one sent
    without any (none held for this operation) says so in its audit event."""
    if per_origin and send.request.kind != "submit":
        return _note_missing_credentials(send.transition, send.request, headers)
    return send.transition


def _answered(
    record: Record,
    request: Request,
    observation: Observation | None,
    failure: Exception | None,
    *,
    clock: Clock,
    rng: random.Random,
) -> Transition:
    """The transition of one request's answer on *record*: the observation decided, or
    the transport's failure recorded on this operation."""
    if observation is None:
        assert failure is not None
        return internal_failure(record, clock.now(), f"the {request.kind} request", failure)
    return _observed(record, observation, rng)


def _note_missing_credentials(
    reservation: Transition, request: Request, headers: Callable[[Record], Mapping[str, str]]
) -> Transition:
    """Say in the reservation's audit event that a request to a trusted origin goes
    without credentials because the caller holds none for this operation."""
    record = reservation.record
    if not record.trusts(request.url) or headers(record):
        return reservation  # another origin is audited by the controller; or sent with them
    *notes, event = reservation.events
    summary = f"{event.summary}; without the caller's credentials (none held for this origin)"
    return replace(reservation, events=(*notes, replace(event, summary=summary)))


def _observed(reserved: Record, observation: Observation, rng: random.Random) -> Transition:
    """The controller's reading of an answer; one it cannot read stops this operation only."""
    try:
        return observe(reserved, observation, rng=rng)
    except Exception as exc:
        what = f"reading the answer to the {observation.kind} request"
        return internal_failure(reserved, observation.at, what, exc)


@dataclass(frozen=True, slots=True)
class Tools:
    """What both interpreters are handed: the store, time, randomness, the event sink."""

    store: Store
    clock: Clock
    rng: random.Random
    on_event: EventSink | None
    headers: Callable[[Record], Mapping[str, str]]
    per_origin: bool = False
    """The headers are a function giving each operation its own (see :data:`Credentials`)."""


def tools(
    store: Store | None,
    clock: Clock | None,
    rng: random.Random | None,
    on_event: EventSink | None,
    headers: Credentials | None,
) -> Tools:
    if callable(headers):
        per_record = headers
    else:
        fixed = dict(headers or {})

        def per_record(record: Record) -> Mapping[str, str]:
            return fixed

    return Tools(
        store=store if store is not None else open_store(),
        clock=clock or SystemClock(),
        rng=rng or random.Random(),
        on_event=on_event,
        headers=per_record,
        per_origin=callable(headers),
    )


def loop(
    tools: Tools,
    record: Record,
    submission: Submission | None = None,
    until: Callable[[Record], bool] | None = None,
    owner: str | None = None,
) -> Generator[_Sleep | _Send, Observation | None, Record]:
    """The loop for *record*'s operation, as lease owner *owner* (a fresh id by default)."""
    return _drive(
        tools.store,
        record.operation_id,
        owner=owner or new_owner(),
        clock=tools.clock,
        rng=tools.rng,
        on_event=tools.on_event,
        headers=tools.headers,
        submission=submission,
        until=until,
        per_origin=tools.per_origin,
    )


def run_sync_effects(
    loop: Generator[_Sleep | _Send, Observation | None, Record],
    tools: Tools,
    profile: Profile,
    *,
    client: httpx.Client | None,
    sleep: Callable[[float], None],
    http: HttpSettings,
) -> Record:
    """Carry out the loop's effects with a blocking client and ``sleep``.

    *client* ``None``: the process's shared client (``transports.shared_client``).
    Neither is closed here.
    """
    http_client = borrow_client(client)
    try:
        effect = next(loop)
        while True:
            match effect:
                case _Sleep(seconds=seconds):
                    sleep(seconds)
                    effect = loop.send(None)
                case _Send(request=request, headers=headers, content=content, secrets=secrets):
                    try:
                        observation = send_sync(
                            http_client,
                            request,
                            headers=headers,
                            content=content,
                            secrets=secrets,
                            profile=profile,
                            clock=tools.clock,
                            settings=http,
                        )
                    except Exception as exc:  # the loop records it on this operation
                        effect = loop.throw(exc)
                    else:
                        effect = loop.send(observation)
    except StopIteration as stop:
        record: Record = stop.value
        return record


async def run_async_effects(
    loop: Generator[_Sleep | _Send, Observation | None, Record],
    tools: Tools,
    profile: Profile,
    *,
    client: httpx.AsyncClient | None,
    sleep: Callable[[float], Awaitable[object]],
    http: HttpSettings,
) -> Record:
    """Carry out the loop's effects with an async client and an async ``sleep``.

    *client* ``None``: the running event loop's shared client (a client of this call's
    own, closed after, where the loop cannot be identified). *client* is never closed.
    """
    http_client, own_client = await borrow_async_client(client)
    try:
        effect = next(loop)
        while True:
            match effect:
                case _Sleep(seconds=seconds):
                    await sleep(seconds)
                    effect = loop.send(None)
                case _Send():
                    try:
                        observation = await _send_async(http_client, effect, tools, profile, http)
                    except Exception as exc:  # the loop records it on this operation
                        effect = loop.throw(exc)
                    else:
                        effect = loop.send(observation)
    except StopIteration as stop:
        record: Record = stop.value
        return record
    finally:
        if own_client:
            await http_client.aclose()


async def run_exchange_async(
    steps: Exchange,
    tools: Tools,
    profile: Profile,
    *,
    client: httpx.AsyncClient,
    http: HttpSettings,
    persist: Callable[[Transition], Awaitable[Record | ConflictError]],
    reread: Callable[[str], Awaitable[Record | None]],
) -> Record | None:
    """Carry out one :func:`exchange`'s effects: the request with an async client, the
    writes and reads with the caller's *persist* and *reread* (the worker's group commit
    and a read off the event loop). Returns what the exchange returns."""
    try:
        effect = next(steps)
        while True:
            match effect:
                case _Send():
                    try:
                        observation = await _send_async(client, effect, tools, profile, http)
                    except Exception as exc:  # the exchange records it on this operation
                        effect = steps.throw(exc)
                    else:
                        effect = steps.send(observation)
                case _Persist(transition=after):
                    effect = steps.send(await persist(after))
                case _Reread(operation_id=operation_id):
                    effect = steps.send(await reread(operation_id))
    except StopIteration as stop:
        ended: Record | None = stop.value
        return ended


async def _send_async(
    client: httpx.AsyncClient, effect: _Send, tools: Tools, profile: Profile, http: HttpSettings
) -> Observation:
    return await send_async(
        client,
        effect.request,
        headers=effect.headers,
        content=effect.content,
        secrets=effect.secrets,
        profile=profile,
        clock=tools.clock,
        settings=http,
    )


def one_step() -> Callable[[Record], bool]:
    """An ``until`` that lets the loop take exactly one step, then stops it."""
    steps = 0

    def enough(record: Record) -> bool:
        nonlocal steps
        steps += 1
        return steps > 1

    return enough
