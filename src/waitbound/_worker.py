"""The worker: many operations from one store, each owned by one worker at a time.

A worker claims due operations with a lease (``Store.claim_due``), takes exactly one
step of the shared loop for each (the same controller a ``wait`` uses: reserve and
persist, send, observe and persist), and lets go. It holds a lease only while deciding
and sending one request, never while an operation sleeps; between steps, any worker
may take the operation. A worker that dies loses its leases when they expire, and
another continues with the counters as persisted.

Politeness, per worker and per origin (scheme, host, port): at most
``per_origin_concurrency`` requests in flight, and a token bucket of
``per_origin_rate`` requests per second (bursts up to ``per_origin_burst``). Jitter
comes from the schedule itself (backoff drawn from a fraction of each step, upward
jitter on hints), so operations created together spread out instead of polling in
waves; a hint's jitter is at most ``hint_jitter_max_s`` (1 s), so a fleet told the same
hint is spread by the token bucket, not by every operation's lag.

Each pass first applies the inbox's pending webhook deliveries (``waitbound._inbox``):
a delivery brings its operation's next poll forward, so this same pass claims it.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, replace

import anyio
import httpx

from waitbound._audit import AuditEvent
from waitbound._clock import Clock, SystemClock
from waitbound._delivery import adopt_orphans, deliver_due_async
from waitbound._driver import Credentials, loop, new_owner, one_step, run_async_effects, tools
from waitbound._errors import ConflictError, UsageError
from waitbound._inbox import sweep_inbox
from waitbound._outbox import OnComplete
from waitbound._record import Phase, Record
from waitbound._urls import origin
from waitbound.stores import Store
from waitbound.transports import HttpSettings

__all__ = ["WorkerSettings", "work"]

_LOG = logging.getLogger("waitbound.worker")
_BUSY_RECHECK_S = 0.01
"""While steps are in flight (or work is overdue), look for due work this often (seconds)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    """How one worker paces itself. Durations in seconds.

    Attributes:
        concurrency: operations stepped at once.
        lease_s: how long a claim holds an operation before another worker may take it.
        per_origin_concurrency: requests in flight to one origin at once.
        per_origin_rate: requests per second to one origin (token bucket, per worker).
        per_origin_burst: the bucket's size.
        idle_s: the longest pause between looks for due work.
        until_idle: return once no operation in the store is waiting.
        label_prefix: claim only operations whose ``label`` starts with this (a worker
            that holds only some providers' credentials drives only their operations).

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

    def __post_init__(self) -> None:
        for name in ("concurrency", "per_origin_concurrency", "per_origin_burst"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1")
        for name in ("lease_s", "per_origin_rate", "idle_s"):
            if not getattr(self, name) > 0:
                raise UsageError(f"{name} must be positive")


class _Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int, clock: Clock) -> None:
        self.rate, self.burst, self.clock = rate, float(burst), clock
        self.tokens = float(burst)
        self.at = clock.monotonic()

    def wait_s(self) -> float:
        """Take a token; return how long to wait first (0 when one was there)."""
        now = self.clock.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        self.tokens -= 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


class _Origins:
    """Per-origin concurrency and rate limits for one worker."""

    def __init__(self, settings: WorkerSettings, clock: Clock) -> None:
        self.settings, self.clock = settings, clock
        self.limits: dict[object, tuple[anyio.Semaphore, _Bucket]] = {}

    def limit(self, url: str) -> tuple[anyio.Semaphore, _Bucket]:
        key = origin(url)
        if key not in self.limits:
            self.limits[key] = (
                anyio.Semaphore(self.settings.per_origin_concurrency),
                _Bucket(self.settings.per_origin_rate, self.settings.per_origin_burst, self.clock),
            )
        return self.limits[key]


def _next_url(record: Record) -> str:
    if record.phase is Phase.FETCHING_RESULT and record.result_url:
        return record.result_url
    if record.phase is Phase.FETCHING_ERRORS and record.errors_url:
        return record.errors_url
    return record.status_url or ""


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
) -> int:
    """Drive every due operation in *store* until *stop* is set (or, with
    ``settings.until_idle``, until no operation is waiting).

    Steps already begun finish and are persisted before this returns; their leases
    are released.

    Args:
        store: the shared store (SQLite on one machine, PostgreSQL across machines).
        settings: concurrency, lease and per-origin limits.
        headers: sent to each operation's own origin only (see ``Record.trusts``): one
            mapping for all, or a function of the record giving each its own.
        client, clock, sleep, rng, on_event, http: as in :func:`waitbound.wait`.
        on_error: called with an operation id and the exception when a step could not
            be taken (the store failed); the worker goes on with the other operations.
            ``None`` logs a warning on the ``waitbound.worker`` logger. A failure of the
            operation itself (an answer waitbound cannot process) is recorded on it as
            ``escalated`` / ``integration_failure`` and never reaches here. A delivery
            pass whose claim failed is reported as ``"(completions)"``.
        stop: set it to stop claiming work (a SIGTERM handler does).
        wake: while the worker pauses between looks for due work, it also awaits
            ``wake(pause_s)``: returning early makes it look at once (``waitbound
            serve`` wakes it when a webhook brought an operation's next check forward).
        on_complete: deliver the store's callback completions to this callable (see
            :func:`waitbound.wait`); ``None``: they are left to a deliverer that has one.
        notify_secret: deliver the store's completion webhooks, signed with this
            ``whsec_`` secret; ``None``: they are left to a deliverer that has it. With
            either, a delivery pass (``waitbound._delivery.deliver_due_async``) runs at least
            every second and right after a step leaves an operation final; with
            ``settings.until_idle``, the due deliveries are attempted before it returns.

    Returns:
        How many steps were taken.
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
    own_client = client is None
    http_client = client or httpx.AsyncClient(follow_redirects=False)
    outbox = _Deliveries(
        kit.store, kit.clock, kit.rng, owner, report, on_complete=on_complete, secret=notify_secret
    )

    async def step(record: Record) -> None:
        nonlocal steps
        try:
            semaphore, bucket = origins.limit(_next_url(record))
            async with semaphore:
                delay = bucket.wait_s()
                if delay:
                    await nap(delay)
                after = await run_async_effects(
                    loop(kit, record, until=one_step(), owner=owner),
                    kit,
                    record.profile,
                    client=http_client,
                    sleep=_no_sleep,
                    http=http,
                )
            steps += 1
            outbox.note(after)
            _release(kit.store, after, owner)
        except Exception as exc:  # one operation never stops the worker
            # The loop records its own failures on the operation; what reaches here is
            # the store failing (the lease then expires and the step is taken again).
            report(record.operation_id, exc)
        finally:
            room.release()
            finished.set()

    try:
        async with anyio.create_task_group() as group:
            while not stop.is_set():
                # Webhook deliveries first: a hint makes its operation due for this claim.
                try:
                    sweep_inbox(kit.store, clock=kit.clock, rng=kit.rng)
                except Exception as exc:  # the store failed: the sweep runs again next pass
                    report("(inbox)", exc)
                free = room.value
                claimed = (
                    kit.store.claim_due(
                        owner=owner,
                        now=kit.clock.now(),
                        lease_s=settings.lease_s,
                        limit=free,
                        label_prefix=settings.label_prefix,
                    )
                    if free
                    else []
                )
                for record in claimed:
                    await room.acquire()
                    group.start_soon(step, record)
                outbox.poke(group)
                if claimed:
                    continue
                if room.value < settings.concurrency:
                    # Steps in flight: look again when one ends, or soon. The summary
                    # (it counts every open operation) is only needed when idle.
                    pause = min(settings.idle_s, _BUSY_RECHECK_S)
                else:
                    waiting, earliest = kit.store.pending_summary()
                    if settings.until_idle and waiting == 0:
                        break
                    pause = settings.idle_s
                    if earliest is not None:
                        ahead = (earliest - kit.clock.now()).total_seconds()
                        pause = min(pause, max(ahead, _BUSY_RECHECK_S))
                finished = anyio.Event()
                with anyio.move_on_after(pause):
                    waits: list[Callable[[], Awaitable[object]]] = [stop.wait, finished.wait]
                    if wake is not None:
                        waits.append(functools.partial(wake, pause))
                    await _first_of(*waits)
    finally:
        if own_client:
            await http_client.aclose()
    return steps


async def _first_of(*waits: Callable[[], Awaitable[object]]) -> None:
    """Return as soon as the first of *waits* returns."""
    async with anyio.create_task_group() as group:

        async def one(wait: Callable[[], Awaitable[object]]) -> None:
            await wait()
            group.cancel_scope.cancel()

        for wait in waits:
            group.start_soon(one, wait)


def _log_error(operation_id: str, exc: Exception) -> None:
    _LOG.warning("operation %s: step not taken: %s: %s", operation_id, type(exc).__name__, exc)


async def _no_sleep(seconds: float) -> None:
    """A step never sleeps: an operation not due is simply let go."""


def _release(store: Store, record: Record, owner: str) -> None:
    """Let go of a claim that no request used (the operation was not due after all).

    *record* is the step's last read or write of the operation; the release is a
    compare-and-swap on it, so a record changed since is left alone.
    """
    if record.lease_owner != owner or record.in_flight is not None or record.is_finished:
        return
    with suppress(ConflictError):  # someone else wrote it: the claim is moot
        store.save(replace(record, lease_owner=None, lease_expires_at=None), [])


# --- completions out: one delivery pass at a time, beside the steps --------------------

_DELIVER_EVERY_S = 1.0
"""A worker that delivers completions looks for due ones at least this often (seconds)."""


class _Deliveries:
    """When a worker runs a delivery pass (``waitbound._delivery.deliver_due_async``): at once,
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
