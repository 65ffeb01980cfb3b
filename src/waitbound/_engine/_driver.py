"""The drivers: one shared loop, interpreted twice (blocking and async).

:func:`_drive` is the only copy of the loop. It is a generator that performs the
store reads and writes itself (they are quick and local) and yields the two
effects that differ between the drivers, :class:`_Sleep` and :class:`_Send`
(``waitbound._engine._effects``); the sync and async interpreters
(``waitbound._engine._interpreters``) only carry those out. One request's
:func:`exchange`, the part of the step the worker and the group waits run too, lives
here as well; a reservation's lease is ``waitbound._engine._lease``'s. No policy lives
here: every decision is the controller's (:func:`waitbound._rules._controller.plan` and
``observe``).

Credentials (the caller's headers) are sent only where the one rule of
``waitbound._rules._credentials`` lets them go: bound credentials (a worker's, the MCP
server's) to their configured places whatever the record says; a caller's own to the
origin of the URL it named (the submit URL, else the status URL), never to a result,
errors or cancel URL on another origin that a provider's answer pointed at. Echoed
back in an answer, they are redacted before the answer is read (``waitbound._base._secrets``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Mapping
from dataclasses import replace
from datetime import datetime

from waitbound._base._clock import Clock, SystemClock
from waitbound._base._errors import ConflictError, OperationNotFoundError
from waitbound._base._failpoints import hit
from waitbound._base._secrets import credential_values
from waitbound._engine._effects import (
    Credentials,
    EventSink,
    Exchange,
    Tools,
    _Pause,
    _Persist,
    _Reread,
    _Send,
    _Sleep,
)
from waitbound._engine._lease import Lease, holder_is_gone, lease_of, new_owner
from waitbound._engine._operation import Submission
from waitbound._engine._schedule_models import models_for
from waitbound._engine._tell import save_and_tell
from waitbound._model._audit import AuditEvent
from waitbound._model._observation import Observation
from waitbound._model._pacing import Pacer, pacer_for
from waitbound._model._record import Record, RequestKind
from waitbound._observe._metrics import label_origins
from waitbound._observe._telemetry import traced_loop
from waitbound._rules._controller import (
    Decision,
    Finish,
    Finished,
    Request,
    Send,
    Sleep,
    Transition,
    internal_failure,
    late_answer,
    lease_margin_s,
    observe,
    plan,
    unsent,
)
from waitbound._rules._credentials import (
    BoundCredentials,
    credentials_note,
    headers_for,
    refuse_outside,
)
from waitbound._rules._learned import ModelLookup
from waitbound.stores import Store, open_store
from waitbound.transports import Fence, Fenced

__all__ = [
    "exchange",
    "loop",
    "one_step",
    "reservation_of",
    "safe_plan",
    "tools",
]

MIN_SEND_S = 0.5
"""A reserved request is sent only when its lease leaves it at least this long (or its
whole planned timeout, when that is shorter) before the lease's margin (seconds)."""


def _request_headers(
    request: Request,
    record: Record,
    headers: Callable[[Record], Mapping[str, str]],
    submission: Submission | None,
) -> dict[str, str]:
    """The caller's headers where they may go (:func:`headers_for`); plus the submit's own."""
    sent = dict(headers_for(headers, record, request.url))
    if request.kind == "submit" and submission is not None:
        if submission.body and submission.content_type:
            sent.setdefault("Content-Type", submission.content_type)
        sent |= submission.idempotency_headers(
            record.submission.idempotency_key, record.contract.created_at
        )
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
        return save_and_tell(store, record, events, on_event)

    known: Record | None = None
    while True:
        record = known if known is not None else store.get(operation_id)
        known = None
        if record is None:
            raise OperationNotFoundError(operation_id)
        if until is not None and until(record):
            return record
        started = clock.monotonic()  # before now: the lease is measured from here
        now = clock.now()
        leased = record.lease.lease_expires_at is not None and record.lease.lease_expires_at > now
        if leased and holder_is_gone(record.lease.lease_owner):
            record = record.evolve(lease=record.lease.lapsed(now))
        decision = safe_plan(
            record, now, owner=owner, can_submit=submission is not None, headers=headers
        )
        match decision:
            case Finished(record=done):
                return done
            case Finish(transition=finish):
                try:
                    finished = persist(finish.record, finish.events)
                except ConflictError:
                    continue
                if finished.is_final and (pause := hit("final")):
                    yield _Sleep(pause)
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
                    lease=lease_of(reserved, now, started),
                    clock=clock,
                    rng=rng,
                    headers=headers,
                    submission=submission,
                    models=models_for(store),
                    pacer=pacer_for(store),
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
                            case _Pause(seconds=seconds):
                                yield _Sleep(seconds)
                                effect = steps.send(None)
                except StopIteration as ended:
                    known = ended.value


def exchange(
    reserved: Record,
    request: Request,
    *,
    lease: Lease,
    clock: Clock,
    rng: random.Random,
    headers: Callable[[Record], Mapping[str, str]],
    submission: Submission | None = None,
    stopping: Callable[[], bool] | None = None,
    models: ModelLookup | None = None,
    pacer: Pacer | None = None,
) -> Exchange:
    """Send a reserved request, observe its answer and persist it: the one copy of that
    part of the step, run by the loop above and by the worker (each carries out the
    effects its own way: ``_Send``, ``_Persist``, ``_Reread``, ``_Pause``).

    Starts right after the reservation was persisted (failpoint ``reserved``). The
    reservation is a fence (*lease*): the request is sent only while its lease leaves
    it at least :data:`MIN_SEND_S` (or its whole timeout, when shorter) before the
    lease's margin, with its timeout cut to end that margin before the lease does, by
    the monotonic clock; otherwise — or when *stopping* says the worker was told to
    stop — it is not sent, and its reservation is released (``send_skipped``). The
    same check is made again by the transport at the last moment, right before a
    connection is opened for the request and right before its bytes are written
    (``_Send.fence``, ``transports._fence``): a process frozen after planning the send
    (failpoint ``send.after_plan``) or after opening its connection
    (``send.after_connect``) sends nothing on waking once the lease no longer covers
    it, and the reservation is released the same way. A
    persisted answer that conflicts (someone wrote the record meanwhile: a person's
    decision, an agent's request) is applied to the fresh record while that record
    still carries this reservation (``Lease.holds``); otherwise the lease ran out and
    the operation was taken over: the answer is not used, only noted on the fresh
    record (``late_answer``), never attributed to another request.

    Returns:
        The record as this exchange stored it; after an answer that is not used, the
        fresh record (``None`` when it is gone).
    """
    kind = request.kind
    if pause := hit("reserved", f"reserved-{kind}"):
        yield _Pause(pause)
    margin_s = lease_margin_s(lease.length_s)
    left_s = lease.left_s(clock)
    covered_s = min(request.timeout_s, left_s - margin_s)
    why = ""
    if stopping is not None and stopping():
        why = "the worker was told to stop before sending it"
    elif covered_s < min(request.timeout_s, MIN_SEND_S):
        why = (
            f"its lease had {max(0.0, left_s):.3g}s of {lease.length_s:.3g}s left when it "
            "was due to go (the process stalled after reserving it)"
        )
    if why:
        return (yield from _release(reserved, request, lease, why, clock))
    fence = Fence(
        ends_at=lease.started + lease.length_s - margin_s,
        min_s=min(request.timeout_s, MIN_SEND_S),
    )
    if covered_s < request.timeout_s:
        request = replace(request, timeout_s=covered_s)
    content = submission.body if kind == "submit" and submission else None
    sent = _request_headers(request, reserved, headers, submission)
    secrets = credential_values(headers(reserved))
    if pause := hit("send.after_plan", f"send.after_plan-{kind}"):
        yield _Pause(pause)
    failure: Exception | None = None
    observation: Observation | None = None
    try:
        answer = yield _Send(request, sent, content, secrets, reserved, fence)
    except Fenced as fenced:  # checked again at the last moment: nothing was sent
        why = (
            f"its lease had {max(0.0, fenced.left_s + margin_s):.3g}s of {lease.length_s:.3g}s "
            "left when its bytes were due to leave (the process stalled after planning it)"
        )
        return (yield from _release(reserved, request, lease, why, clock))
    except Exception as exc:  # the transport broke on this request only
        failure = exc
    else:
        assert isinstance(answer, Observation), "the driver must answer a _Send"
        observation = answer
        if pause := hit("answered", f"answered-{kind}"):
            yield _Pause(pause)
    current: Record | None = reserved
    while current is not None:
        after = _answered(
            current,
            request,
            observation,
            failure,
            clock=clock,
            rng=rng,
            models=models,
            pacer=pacer,
        )
        if pause := hit("saving", f"saving-{kind}"):
            yield _Pause(pause)
        written = yield _Persist(after)
        if isinstance(written, Record):
            if written.is_final and (pause := hit("final")):
                yield _Pause(pause)
            return written
        fresh = yield _Reread(current.contract.operation_id)
        assert fresh is None or isinstance(fresh, Record)
        if not lease.holds(fresh):
            what = _late_what(observation, failure)
            request_id = observation.request_id if observation is not None else None
            return (yield from _note(fresh, kind, clock, what, sent=True, request_id=request_id))
        current = fresh
    return None  # pragma: no cover - the loop returns


def _late_what(observation: Observation | None, failure: Exception | None) -> str:
    if observation is None:
        return f"it failed ({type(failure).__name__})"
    if observation.transport_error:
        return f"it failed ({observation.transport_error})"
    said = f"it answered HTTP {observation.http_status}"
    return said + (f" [request id {observation.request_id}]" if observation.request_id else "")


def _release(
    reserved: Record, request: Request, lease: Lease, why: str, clock: Clock
) -> Generator[_Persist | _Reread, object, Record | None]:
    """Release a reservation whose request is not sent; when it is no longer current,
    only note on the fresh record that it never was."""
    current: Record | None = reserved
    while lease.holds(current):
        assert current is not None
        written = yield _Persist(unsent(current, request.kind, clock.now(), why))
        if isinstance(written, Record):
            return written
        fresh = yield _Reread(current.contract.operation_id)
        assert fresh is None or isinstance(fresh, Record)
        current = fresh
    return (yield from _note(current, request.kind, clock, why, sent=False))


_NOTE_TRIES = 5
"""How often a note about a request that is no longer current is written again after
a conflict before it is given up (it changes nothing but the story)."""


def _note(
    fresh: Record | None,
    kind: RequestKind,
    clock: Clock,
    what: str,
    *,
    sent: bool,
    request_id: str | None = None,
) -> Generator[_Persist | _Reread, object, Record | None]:
    """Note on *fresh* what became of a request whose reservation is no longer current
    (changing nothing else); return the record as stored, or as last read."""
    for _ in range(_NOTE_TRIES):
        if fresh is None:
            return None
        note = late_answer(fresh, kind, clock.now(), what, sent=sent, request_id=request_id)
        written = yield _Persist(note)
        if isinstance(written, Record):
            return written
        again = yield _Reread(fresh.contract.operation_id)
        assert again is None or isinstance(again, Record)
        fresh = again
    return fresh


def safe_plan(
    record: Record,
    now: datetime,
    *,
    owner: str,
    can_submit: bool = False,
    lease_s: float | None = None,
    headers: Callable[[Record], Mapping[str, str]] | None = None,
) -> Decision:
    """:func:`waitbound._rules._controller.plan`; a fault in it stops this operation only
    (``integration_failure``). With bound *headers*, a request they refuse is not
    planned: the operation is escalated instead (:func:`refuse_outside`)."""
    try:
        decision = plan(record, now, owner=owner, can_submit=can_submit, lease_s=lease_s)
    except Exception as exc:  # one operation's fault never escapes its loop
        return Finish(transition=internal_failure(record, now, "its next step", exc))
    return refuse_outside(decision, headers, record, now)


def reservation_of(
    send: Send, headers: Callable[[Record], Mapping[str, str]], *, per_origin: bool
) -> Transition:
    """The reservation to persist for *send*: its audit event says whether the request
    goes with the caller's credentials where that is news (:func:`credentials_note`,
    from the decision :func:`headers_for` makes)."""
    request, record = send.request, send.transition.record
    note = credentials_note(headers, record, request.url, kind=request.kind, per_origin=per_origin)
    if note is None:
        return send.transition
    *notes, event = send.transition.events
    return replace(
        send.transition, events=(*notes, replace(event, summary=f"{event.summary}; {note}"))
    )


def _answered(
    record: Record,
    request: Request,
    observation: Observation | None,
    failure: Exception | None,
    *,
    clock: Clock,
    rng: random.Random,
    models: ModelLookup | None = None,
    pacer: Pacer | None = None,
) -> Transition:
    """The transition of one request's answer on *record*: the observation decided, or
    the transport's failure recorded on this operation."""
    if observation is None:
        assert failure is not None
        return internal_failure(record, clock.now(), f"the {request.kind} request", failure)
    return _observed(record, observation, rng, models, pacer)


def _observed(
    reserved: Record,
    observation: Observation,
    rng: random.Random,
    models: ModelLookup | None = None,
    pacer: Pacer | None = None,
) -> Transition:
    """The controller's reading of an answer; one it cannot read stops this operation only."""
    try:
        return observe(reserved, observation, rng=rng, models=models, pacer=pacer)
    except Exception as exc:
        what = f"reading the answer to the {observation.kind} request"
        return internal_failure(reserved, observation.at, what, exc)


def tools(
    store: Store | None,
    clock: Clock | None,
    rng: random.Random | None,
    on_event: EventSink | None,
    headers: Credentials | None,
) -> Tools:
    if isinstance(headers, BoundCredentials):  # the configured origins: metric labels
        label_origins(place.origin for b in headers.bindings for place in b.places)
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
    """The loop for *record*'s operation, as lease owner *owner* (a fresh id by default),
    in one run span (``waitbound._observe._telemetry``)."""
    steps = _drive(
        tools.store,
        record.contract.operation_id,
        owner=owner or new_owner(),
        clock=tools.clock,
        rng=tools.rng,
        on_event=tools.on_event,
        headers=tools.headers,
        submission=submission,
        until=until,
        per_origin=tools.per_origin,
    )
    return traced_loop(record, tools.store, steps)


def one_step() -> Callable[[Record], bool]:
    """An ``until`` that lets the loop take exactly one step, then stops it."""
    steps = 0

    def enough(record: Record) -> bool:
        nonlocal steps
        steps += 1
        return steps > 1

    return enough
