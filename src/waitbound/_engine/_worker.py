"""The worker: many operations from one store, each owned by one worker at a time.

A pass of the worker reserves due operations in one store transaction
(``Store.reserve_due``): for each due record the shared controller plans the step
(:func:`waitbound._engine._driver.safe_plan`, with the worker's lease length), and the
reservations (the request counted, the lease taken, the audit event) are written
together, before any request is sent. Each reserved request is then sent, and its answer
persisted, by the same exchange a ``wait`` runs (:func:`waitbound._engine._driver.exchange`);
the answers of every step in flight are written together too (the group commit:
one ``Store.save_many`` per batch). Store calls run off the event loop, in a thread.

The group commit (``waitbound._engine._group_commit``) pauses: once an answer is queued, it
waits up to ``commit_pause_s`` (a few milliseconds) for the answers of the other steps
in flight, and writes at once when every step in flight has queued its own; so one
transaction carries many answers instead of about one. Only writes made after a request are
paused (answers, released reservations, notes): every reservation is written by
``reserve_due`` before its request is sent, never through the pause; the pause is
bounded below the lease's margin, so an answer is still written while its lease holds.

A lease is held only while deciding, sending one request and persisting its answer,
never while an operation sleeps; it lasts ``lease_s`` exactly, and the request's timeout
ends before it does. A worker that dies loses its leases when they expire, or at once
to a worker on the same machine that sees the holder's process is gone
(:func:`waitbound._engine._lease.holder_is_gone`); another continues with the counters as
persisted. While the due operations are leased by others, the worker sleeps until the
earliest one becomes claimable (``Store.next_claimable``), woken early by a step of its
own ending.

A lease is a fence (``waitbound._engine._lease.Lease``; ``docs/stores.md``, "Leases are
fences"): a step whose lease ran out while it stalled sends nothing, and its answer is
saved only while the record still carries its reservation. An operation whose step still
runs in this worker is never planned again by its next passes, even once its lease ran
out; a worker told to stop releases a reservation whose request has not gone out.

Politeness, per worker and per origin (scheme, host, port): at most
``per_origin_concurrency`` requests in flight, and a token bucket of
``per_origin_rate`` requests per second (bursts up to ``per_origin_burst``). Both are
decided before the reservation: an operation whose origin has no free slot or no token
right now is left unclaimed for a later pass, so a reserved request never waits while
its lease runs out. Jitter comes from the schedule itself (backoff drawn from a fraction
of each step, upward jitter on hints), so operations created together spread out
instead of polling in waves; a hint's jitter is at most ``hint_jitter_max_s`` (1 s), so
a fleet told the same hint is spread by the token bucket, not by every operation's lag.

Each pass first applies the inbox's pending webhook deliveries (``waitbound._engine._inbox``):
a delivery brings its operation's next poll forward, so this same pass claims it.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

import anyio
import httpx

from waitbound._base._clock import Clock, SystemClock
from waitbound._base._errors import ConflictError, UsageError
from waitbound._base._failpoints import hit
from waitbound._base._token_bucket import TokenBucket
from waitbound._base._urls import origin
from waitbound._engine._delivery import adopt_orphans, deliver_due_async
from waitbound._engine._driver import exchange, reservation_of, safe_plan, tools
from waitbound._engine._effects import Credentials
from waitbound._engine._group_commit import (
    DEFAULT_COMMIT_PAUSE_S,
    MAX_COMMIT_PAUSE_S,
    GroupCommit,
    Offload,
    first_of,
    in_thread,
    inline,
)
from waitbound._engine._inbox import sweep_inbox
from waitbound._engine._interpreters import run_exchange_async
from waitbound._engine._lease import Lease, holder_is_gone, lease_of, new_owner
from waitbound._engine._outbox import OnComplete
from waitbound._engine._schedule_models import models_for
from waitbound._engine._tell import emit
from waitbound._model._audit import AuditEvent
from waitbound._model._pacing import pacer_for
from waitbound._model._record import Phase, Record
from waitbound._observe import _telemetry as telemetry
from waitbound._rules._controller import Finish, Request, Send, Transition, lease_margin_s
from waitbound.stores import Store
from waitbound.stores._protocol import Write
from waitbound.transports import HttpSettings, new_async_client

__all__ = ["DEFAULT_COMMIT_PAUSE_S", "MAX_COMMIT_PAUSE_S", "WorkerSettings", "work"]

_LOG = logging.getLogger("waitbound.worker")
_BUSY_RECHECK_S = 0.01
"""The shortest pause between looks for due work when one looked due but was not
claimed (another worker took it at that moment), in seconds."""

_LOOK_AHEAD = 2
"""After a pass left due operations for their origins' limits, the next offers the
controller up to this many times as many as it has room for, so an origin at its limit
does not hold back the others."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    """How one worker paces itself. Durations in seconds.

    Attributes:
        concurrency: operations stepped at once.
        lease_s: how long a reservation holds an operation: its lease expires
            ``lease_s`` after the reservation, and its request's timeout is cut to end
            before that (by ``waitbound._rules._controller.lease_margin_s``: 1 s, or a tenth of
            a shorter lease). A worker killed mid-request leaves exactly this lease.
        per_origin_concurrency: requests in flight to one origin at once.
        per_origin_rate: requests per second to one origin (token bucket, per worker).
        per_origin_burst: the bucket's size.
        idle_s: the longest pause between looks for due work.
        until_idle: return once no operation in the store is waiting.
        label_prefix: claim only operations whose ``label`` starts with this (a worker
            that holds only some providers' credentials drives only their operations).
        commit_pause_s: once a step's answer is queued for the group commit, wait up
            to this long for the answers of the other steps in flight, so that one
            transaction writes them all (it ends at once when every step in flight has
            queued its answer). 0: write at once. At most :data:`MAX_COMMIT_PAUSE_S`;
            the worker keeps at most half the lease's margin
            (``waitbound._rules._controller.lease_margin_s``; :attr:`commit_pause_used_s`), so
            an answer is still written while its lease holds. Reservations are never
            paused.

    Raises:
        UsageError: a value out of range.
    """

    concurrency: int = 16
    lease_s: float = 30.0
    per_origin_concurrency: int = 8
    per_origin_rate: float = 20.0
    per_origin_burst: int = 20
    idle_s: float = 1.0
    until_idle: bool = False
    label_prefix: str = ""
    commit_pause_s: float = DEFAULT_COMMIT_PAUSE_S

    def __post_init__(self) -> None:
        for name in ("concurrency", "per_origin_concurrency", "per_origin_burst"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1")
        for name in ("lease_s", "per_origin_rate", "idle_s"):
            if not getattr(self, name) > 0:
                raise UsageError(f"{name} must be positive")
        if not 0 <= self.commit_pause_s <= MAX_COMMIT_PAUSE_S:
            raise UsageError(
                f"commit_pause_s (--commit-pause) must be from 0 to {MAX_COMMIT_PAUSE_S:g} seconds"
            )

    @property
    def commit_pause_used_s(self) -> float:
        """The commit pause the worker keeps: ``commit_pause_s``, cut to half the lease's
        margin when a short lease leaves less (seconds)."""
        return min(self.commit_pause_s, lease_margin_s(self.lease_s) / 2)


@dataclass(slots=True)
class _Origin:
    bucket: TokenBucket
    in_flight: int = 0


class _Origins:
    """Per-origin concurrency and rate limits for one worker; thread-safe (admission is
    decided inside ``Store.reserve_due``, in a thread, while steps end on the loop)."""

    def __init__(self, settings: WorkerSettings, clock: Clock) -> None:
        self.settings, self.clock = settings, clock
        self.limits: dict[object, _Origin] = {}
        self.lock = threading.Lock()

    def admit(self, url: str) -> float | None:
        """Take a slot and a token of *url*'s origin now: ``None`` when both were there;
        else take neither and return how long until a token is (seconds; 0 when the
        slots are what is missing: a step ending frees one)."""
        key = origin(url)
        with self.lock:
            if key not in self.limits:
                bucket = TokenBucket(
                    self.settings.per_origin_rate, self.settings.per_origin_burst, self.clock
                )
                self.limits[key] = _Origin(bucket)
            limit = self.limits[key]
            if limit.in_flight >= self.settings.per_origin_concurrency:
                return 0.0
            wait_s = limit.bucket.take()
            if wait_s:
                return wait_s
            limit.in_flight += 1
            return None

    def release(self, url: str) -> None:
        """A request admitted for *url* ended: its slot is free again."""
        with self.lock:
            self.limits[origin(url)].in_flight -= 1


@dataclass(slots=True)
class _Pass:
    """What one pass's planning (inside ``reserve_due``, in a thread) decided."""

    room: int
    started: float
    """The monotonic reading just before the pass's ``now``: its leases run from here."""
    decided: dict[str, Finish | Send] = field(default_factory=dict)
    live: int = 0
    """Due operations left alone because a step of this worker's own still runs on them."""
    refused: list[float] = field(default_factory=list)
    """For each due operation left for its origin's limits: seconds until a token (0: a slot)."""


class _Answers:
    """The worker's group commit (``waitbound._engine._group_commit``) of what its steps write
    after their requests: each write is one item of ``Store.save_many``; its events
    reach ``on_event`` once written."""

    def __init__(
        self,
        store: Store,
        on_event: Callable[[AuditEvent], None] | None,
        offload: Offload,
        *,
        pause_s: float,
        sleep: Callable[[float], Awaitable[object]],
        in_flight: Callable[[], int],
    ) -> None:
        self.on_event = on_event
        self.group: GroupCommit[Write, Record | ConflictError] = GroupCommit(
            store.save_many, offload, pause_s=pause_s, sleep=sleep, in_flight=in_flight
        )

    async def save(self, transition: Transition) -> Record | ConflictError:
        """Persist *transition* with the next batch.

        Raises:
            Exception: the store failed (that batch is not written).
        """
        result = await self.group.put((transition.record, transition.events))
        if isinstance(result, Record):
            emit(self.on_event, transition.events, result)
        return result


def _next_url(record: Record) -> str:
    if record.ending.phase is Phase.FETCHING_RESULT and record.submission.result_url:
        return record.submission.result_url
    if record.ending.phase is Phase.FETCHING_ERRORS and record.submission.errors_url:
        return record.submission.errors_url
    return record.submission.status_url or ""


async def work(
    store: Store,
    *,
    settings: WorkerSettings = WorkerSettings(),
    headers: Credentials | None = None,
    client: httpx.AsyncClient | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], Awaitable[object]] | None = None,
    rng: random.Random | None = None,
    on_event: Callable[[AuditEvent], None] | None = None,
    on_error: Callable[[str, Exception], None] | None = None,
    stop: anyio.Event | None = None,
    wake: Callable[[float], Awaitable[object]] | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
    on_complete: OnComplete | None = None,
    notify_secret: str | None = None,
    inline_store: bool = False,
) -> int:
    """Drive every due operation in *store* until *stop* is set (or, with
    ``settings.until_idle``, until no operation is waiting).

    Steps already begun finish and are persisted before this returns; an answer's
    write releases its lease.

    Args:
        store: the shared store (SQLite on one machine, PostgreSQL across machines). It
            is called from worker threads (one call at a time per pass or flush).
        settings: concurrency, lease and per-origin limits.
        headers: one mapping for all, or a function of the record giving each its own
            (sent to the origins the operation trusts, ``Record.trusts``), or
            :class:`~waitbound._rules._credentials.BoundCredentials` (sent only where bound,
            whatever the record says; a request an exclusive binding refuses is not
            sent and its operation is escalated ``integration_failure``).
        client, clock, rng, on_event, http: as in :func:`waitbound.wait`, except
            that ``client=None`` builds the worker's own, for ``settings.concurrency``
            requests at once, closed when this returns.
        sleep: the pause between looks for due work is ``sleep(pause_s)`` raced with a
            step ending, *stop* and *wake* (``None``: ``anyio.sleep``), and so is the
            group commit's pause (``settings.commit_pause_s``); a step itself never
            sleeps.
        on_error: called with an operation id and the exception when a step could not
            be taken (the store failed); the worker goes on with the other operations.
            ``None`` logs a warning on the ``waitbound.worker`` logger. A failure of the
            operation itself (an answer waitbound cannot process) is recorded on it as
            ``escalated`` / ``integration_failure`` and never reaches here. A delivery
            pass whose claim failed is reported as ``"(completions)"``; a pass whose
            reservation failed as ``"(reserve)"``.
        stop: set it to stop claiming work (a SIGTERM handler does).
        wake: while the worker pauses between looks for due work, it also awaits
            ``wake(pause_s)``: returning early makes it look at once (``waitbound
            serve`` wakes it when a webhook brought an operation's next check forward).
        on_complete: deliver the store's callback completions to this callable (see
            :func:`waitbound.wait`); ``None``: they are left to a deliverer that has one.
        notify_secret: deliver the store's completion webhooks, signed with this
            ``whsec_`` secret; ``None``: they are left to a deliverer that has it. With
            either, a delivery pass (``waitbound._engine._delivery.deliver_due_async``)
            runs at least every second and right after a step leaves an operation final; with
            ``settings.until_idle``, the due deliveries are attempted before it returns.
        inline_store: make the store's calls on the event loop instead of in a thread
            (tests with a virtual clock: nothing the worker does then runs out of the
            loop's sight, so a virtual sleep never overtakes a store call).

    Returns:
        How many steps were taken (requests answered or given up on, and outcomes
        reached without a request).
    """
    kit = tools(store, clock or SystemClock(), rng, on_event, headers)
    nap = sleep or anyio.sleep
    report = on_error or _log_error
    owner = new_owner()
    origins = _Origins(settings, kit.clock)
    stop = stop or anyio.Event()
    room = anyio.Semaphore(settings.concurrency)
    finished = anyio.Event()
    steps = 0
    gone: set[str] = set()
    idle = False
    crowded = False
    own_client = client is None
    # Its own connections, sized so every slot keeps one alive between steps.
    http_client = client or new_async_client(settings.concurrency)
    offload: Offload = inline if inline_store else in_thread
    live: set[str] = set()  # operations a step of ours runs on: never re-planned meanwhile
    commit = _Answers(
        kit.store,
        kit.on_event,
        offload,
        pause_s=settings.commit_pause_used_s,
        sleep=nap,
        in_flight=live.__len__,
    )
    outbox = _Deliveries(
        kit.store, kit.clock, kit.rng, owner, report, on_complete=on_complete, secret=notify_secret
    )

    def plan_one(
        look: _Pass, now: datetime, record: Record
    ) -> tuple[Record, tuple[AuditEvent, ...]] | None:
        """The controller's step for a due *record* (in ``reserve_due``'s transaction)."""
        if len(look.decided) >= look.room:
            return None
        if record.contract.operation_id in live:  # our own step still runs: never re-planned
            look.live += 1
            return None
        if record.lease.lease_owner in gone:  # its holder's process is gone: take it over
            record = record.evolve(lease=record.lease.lapsed(now))
        decision = safe_plan(
            record, now, owner=owner, lease_s=settings.lease_s, headers=kit.headers
        )
        match decision:
            case Finish(transition=finish):
                look.decided[record.contract.operation_id] = decision
                return finish.record, finish.events
            case Send(request=request):
                refused_s = origins.admit(request.url)
                if refused_s is not None:
                    look.refused.append(refused_s)
                    return None
                reservation = reservation_of(decision, kit.headers, per_origin=kit.per_origin)
                look.decided[record.contract.operation_id] = replace(
                    decision, transition=reservation
                )
                return reservation.record, reservation.events
            case _:  # finished, or not due after all (a lease of ours still running)
                return None

    models = models_for(kit.store)  # the learned schedules, shared by every step
    pacer = pacer_for(kit.store)  # the origin calendar (Policy.origin_pacing)

    async def reread(operation_id: str) -> Record | None:
        return await offload(kit.store.get, operation_id)

    async def step(reserved: Record, request: Request, lease: Lease) -> None:
        nonlocal steps
        try:
            with telemetry.run(reserved, kit.store):
                ended = await run_exchange_async(
                    exchange(
                        reserved, request, lease=lease, clock=kit.clock, rng=kit.rng,
                        headers=kit.headers, stopping=stop.is_set, models=models,
                        pacer=pacer,
                    ),
                    kit,
                    reserved.contract.profile,
                    client=http_client,
                    http=http,
                    persist=commit.save,
                    reread=reread,
                    sleep=nap,
                )  # fmt: skip
            steps += 1
            if ended is not None:
                outbox.note(ended)
        except Exception as exc:  # one operation never stops the worker
            # The exchange records its own failures on the operation; what reaches here
            # is the store failing (the lease then expires and the step is taken again).
            report(reserved.contract.operation_id, exc)
        finally:
            live.discard(reserved.contract.operation_id)
            commit.group.check()  # one fewer step to wait for
            origins.release(request.url)
            room.release()
            finished.set()

    async def one_pass(group: anyio.abc.TaskGroup) -> float | None:
        """Reserve what is due and start its steps; return how long to pause before the
        next pass (``None``: look again at once)."""
        nonlocal steps, crowded
        # Webhook deliveries first: a hint makes its operation due for this pass.
        try:
            await offload(functools.partial(sweep_inbox, kit.store, clock=kit.clock, rng=kit.rng))
        except Exception as exc:  # the store failed: the sweep runs again next pass
            report("(inbox)", exc)
        look = _Pass(room=room.value, started=kit.clock.monotonic())
        now = kit.clock.now()
        reserved: list[Record] = []
        if look.room:
            try:
                reserved = await offload(
                    functools.partial(
                        kit.store.reserve_due,
                        owner=owner,
                        now=now,
                        limit=look.room * (_LOOK_AHEAD if crowded else 1),
                        plan=functools.partial(plan_one, look, now),
                        label_prefix=settings.label_prefix,
                        gone_owners=frozenset(gone),
                    )
                )
            except Exception as exc:  # the store failed: nothing was reserved
                report("(reserve)", exc)
                for decision in look.decided.values():
                    if isinstance(decision, Send):
                        origins.release(decision.request.url)
                return settings.idle_s
        crowded = bool(look.refused)
        stored = {record.contract.operation_id: record for record in reserved}
        for operation_id, decision in look.decided.items():
            record = stored.get(operation_id)
            match decision:
                case Send(transition=reservation, request=request):
                    if record is None:  # pragma: no cover - a planned write is always made
                        origins.release(request.url)
                        continue
                    emit(kit.on_event, reservation.events, record)
                    await room.acquire()
                    live.add(operation_id)
                    group.start_soon(step, record, request, lease_of(record, now, look.started))
                case Finish(transition=finish) if record is not None:
                    with telemetry.run(record, kit.store):
                        emit(kit.on_event, finish.events, record)
                    if record.is_final and (pause := hit("final")):
                        await nap(pause)
                    steps += 1
                    outbox.note(record)
        outbox.poke(group)
        if reserved:
            return None
        if not look.room:  # every slot busy: a step ending wakes the worker
            return settings.idle_s
        if look.live and not look.decided:  # only our own running steps: one ends first
            return settings.idle_s
        if look.refused:  # due, but held back by its origin's limits
            waits = [s for s in look.refused if s > 0]
            return min([settings.idle_s, *waits])
        return await _until_claimable(settings.label_prefix)

    async def _until_claimable(label_prefix: str) -> float | None:
        """The pause until something becomes claimable, at most ``idle_s`` (``None``: at
        once, for a lease whose holder was just found gone). With ``until_idle`` and
        nothing waiting, sets ``idle``."""
        nonlocal idle
        now = kit.clock.now()
        earliest, holders = await offload(
            functools.partial(kit.store.next_claimable, now=now, label_prefix=label_prefix)
        )
        newly_gone = {h for h in holders if h not in gone and holder_is_gone(h)}
        if newly_gone:
            gone.update(newly_gone)
            return None
        if room.value == settings.concurrency:  # nothing in flight: are we done?
            waiting, _ = await offload(kit.store.pending_summary)
            if settings.until_idle and waiting == 0:
                idle = True
        if earliest is None:
            return settings.idle_s
        ahead = (earliest - now).total_seconds()
        return min(settings.idle_s, max(ahead, _BUSY_RECHECK_S))

    try:
        async with anyio.create_task_group() as group:
            while not stop.is_set():
                finished = anyio.Event()  # before the pass: a step ending in it counts
                pause = await one_pass(group)
                if idle:
                    # A step may have ended final while this pass looked for
                    # work (after its poke): its completion is owed before the end.
                    outbox.poke(group)
                    break
                if pause is None:
                    continue
                # The pause ends with the sleep given (never a timer of its
                # own: under a virtual clock, no real time may end it).
                waits: list[Callable[[], Awaitable[object]]] = [
                    stop.wait,
                    finished.wait,
                    functools.partial(nap, pause),
                ]
                if wake is not None:
                    waits.append(functools.partial(wake, pause))
                await first_of(*waits)
    finally:
        if own_client:
            await http_client.aclose()
    return steps


def _log_error(operation_id: str, exc: Exception) -> None:
    _LOG.warning("operation %s: step not taken: %s: %s", operation_id, type(exc).__name__, exc)


# --- completions out: one delivery pass at a time, beside the steps --------------------

_DELIVER_EVERY_S = 1.0
"""A worker that delivers completions looks for due ones at least this often (seconds)."""


class _Deliveries:
    """When a worker runs a delivery pass (``_delivery.deliver_due_async``): at once,
    then at least every :data:`_DELIVER_EVERY_S` and after a step leaves an operation
    final; never two passes at once. A pass runs as a task of the worker's group, so
    steps go on meanwhile and the worker's end waits for it."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        rng: random.Random,
        owner: str,
        report: Callable[[str, Exception], None],
        *,
        on_complete: OnComplete | None,
        secret: str | None,
    ) -> None:
        self.store, self.clock, self.rng, self.owner = store, clock, rng, owner
        self.report, self.on_complete, self.secret = report, on_complete, secret
        self.enabled = on_complete is not None or secret is not None
        self.running = False
        self.adopted = False
        self.due = True
        self.last_s = float("-inf")

    def note(self, record: Record) -> None:
        """A step ended with *record*: a final one owes its completions now."""
        if self.enabled and record.is_final:
            self.due = True

    def poke(self, group: anyio.abc.TaskGroup) -> None:
        """Start a pass in the worker's task *group* when one is due and none is running."""
        if not self.enabled:
            return
        if self.clock.monotonic() - self.last_s >= _DELIVER_EVERY_S:
            self.due = True
        if self.due and not self.running:
            self.running = True
            group.start_soon(self._passes)

    async def _passes(self) -> None:
        try:
            if not self.adopted:  # a killed deliverer's entries need not wait out its lease
                self.adopted = True
                try:
                    adopt_orphans(self.store, self.clock.now())
                except Exception as exc:  # their leases then simply expire
                    self.report("(completions)", exc)
            while self.due:
                self.due = False
                self.last_s = self.clock.monotonic()
                try:
                    await deliver_due_async(
                        self.store,
                        owner=self.owner,
                        clock=self.clock,
                        rng=self.rng,
                        notify_secret=self.secret,
                        on_complete=self.on_complete,
                    )
                except Exception as exc:  # the claim failed; the next pass tries again
                    self.report("(completions)", exc)
        finally:
            self.running = False
