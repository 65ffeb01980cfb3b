"""Fan-in: wait for many operations under one deadline and one request budget.

``wait_all``, ``wait_any`` and ``as_completed`` (each sync and async) open a durable
group (``waitbound.stores._groups``) over their members, then hand it to the one group
scheduler (``waitbound._engine._group.Scheduler``); the two short interpreters below only carry
out its turns (sleep, or send one reserved request with a blocking or an async
client). A group given again by its ``group_id`` resumes with its stored members,
deadline and spending: a crash never resets the group's bound.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

import anyio
import httpx

from waitbound._base._clock import Clock
from waitbound._base._errors import ConflictError, UsageError
from waitbound._base._json import JSON
from waitbound._engine._call_options import AsyncOptions, SyncOptions
from waitbound._engine._driver import exchange
from waitbound._engine._effects import EventSink, Tools
from waitbound._engine._group import Ended, Go, Nap, Scheduler, Stop, check_members
from waitbound._engine._handle import AsyncOperationHandle, OperationHandle
from waitbound._engine._interpreters import run_exchange_async, run_exchange_sync
from waitbound._engine._operation import Operation, open_operation
from waitbound._engine._outbox import OnComplete
from waitbound._engine._own_delivery import deliver_async, deliver_sync, notify_secret_for
from waitbound._engine._schedule_models import models_for
from waitbound._engine._tell import save_and_tell
from waitbound._engine._worker import WorkerSettings
from waitbound._model._outcome import Outcome, Reason
from waitbound._model._pacing import pacer_for
from waitbound._model._record import Record
from waitbound._rules._controller import Transition
from waitbound.stores import Store
from waitbound.stores._groups import GroupKind, GroupRow, groups_of, is_group_id, new_group_id
from waitbound.transports import HttpSettings, borrow_async_client

__all__ = [
    "GroupResult",
    "Member",
    "as_completed",
    "as_completed_async",
    "wait_all",
    "wait_all_async",
    "wait_any",
    "wait_any_async",
]

Member = OperationHandle | AsyncOperationHandle | Operation | str
"""What a group may be given: a handle, an :class:`Operation` (created in the group's
store, as :func:`waitbound.start` creates it) or a stored operation's id."""

_DEFAULT_PACING: Final = WorkerSettings()


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupResult:
    """How a group wait ended.

    Attributes:
        group_id: the group's id (``grp_…``): ``waitbound show`` lists its members;
            give it again as ``group_id=`` to resume the group with its own bounds.
        done: the outcomes of the members that ended, in the order they were seen to
            end (``wait_any``: the first is ``done[0]``).
        pending: the members still waiting (``outcome`` ``None``), in the group's
            order; each still bound by its own deadline and budgets.
        outcomes: every member's :class:`Outcome` as it stands, in the group's order.
        stopped: the group's own bound that stopped it (``deadline_exceeded``,
            ``request_budget_exhausted``), or ``None`` when what it waited for ended.
        requests_used: requests the group counted (each before it was sent).
        max_requests: the group's budget; ``None``: only each member's own.
        deadline_at: the group's deadline (aware UTC); ``None``: only each member's.
    """

    group_id: str
    done: tuple[Outcome, ...]
    pending: tuple[Outcome, ...]
    outcomes: tuple[Outcome, ...]
    stopped: Reason | None
    requests_used: int
    max_requests: int | None
    deadline_at: datetime | None

    @property
    def first(self) -> Outcome | None:
        """The first member seen to end, or ``None`` when none did."""
        return self.done[0] if self.done else None

    @property
    def all_succeeded(self) -> bool:
        """Whether every member succeeded."""
        return all(o.succeeded for o in self.outcomes)

    def exit_code(self, kind: GroupKind = "all") -> int:
        """The CLI exit code, ``wait``'s applied to the group: 3 when the group's own
        bound stopped it before what it waited for ended; else, for ``all``, the worst
        member's (3 timed_out or escalated, over 1 failed / completed_with_errors /
        canceled / expired, over 0 succeeded); for ``any``, the first member's."""
        if self.stopped is not None and (kind != "any" or not self.done):
            return 3
        if kind == "any":
            return self.done[0].exit_code if self.done else 3
        codes = {o.exit_code for o in self.outcomes}
        for code in (3, 4, 1):
            if code in codes:
                return 3 if code == 4 else code
        return 0

    def as_json(self) -> dict[str, JSON]:
        """The result as ``waitbound wait-all --json`` prints it."""
        return {
            "group_id": self.group_id,
            "stopped": self.stopped.value if self.stopped else None,
            "requests_used": self.requests_used,
            "max_requests": self.max_requests,
            "deadline_at": self.deadline_at.isoformat() if self.deadline_at else None,
            "done": [o.operation_id for o in self.done],
            "pending": [o.operation_id for o in self.pending],
            "outcomes": [o.as_json() for o in self.outcomes],
        }


def _result(scheduler: Scheduler) -> GroupResult:
    group = scheduler.group
    outcomes = tuple(r.to_outcome() for r in scheduler.records())
    ended = {r.contract.operation_id for r in scheduler.ended_records()}
    stopped = Reason(group.reason) if group.state == "stopped" and group.reason else None
    return GroupResult(
        group_id=group.group_id,
        done=tuple(r.to_outcome() for r in scheduler.ended_records()),
        pending=tuple(o for o in outcomes if o.operation_id not in ended),
        outcomes=outcomes,
        stopped=stopped,
        requests_used=group.requests_used,
        max_requests=group.max_requests,
        deadline_at=group.deadline_at,
    )


def _deadline_at(deadline: float | datetime | None, now: datetime) -> datetime | None:
    if deadline is None:
        return None
    if isinstance(deadline, datetime):
        if deadline.tzinfo is None:
            raise UsageError("deadline must be an aware datetime (UTC) or seconds from now")
        return deadline
    if isinstance(deadline, bool) or not isinstance(deadline, int | float) or not deadline > 0:
        raise UsageError(f"deadline must be a positive number of seconds, got {deadline!r}")
    return now + timedelta(seconds=float(deadline))


def _open_group(
    kit: Tools,
    members: Iterable[Member],
    *,
    kind: GroupKind,
    deadline: float | datetime | None,
    max_requests: int | None,
    group_id: str | None,
) -> tuple[GroupRow, dict[str, OperationHandle | AsyncOperationHandle]]:
    """Create the group (its members first, as ``start`` does), or load it to resume.

    Raises:
        UsageError: no members, a member twice or missing, a handle of another store, a
            bad deadline or budget, or a ``group_id`` that is not one or names a group
            with other members.
    """
    groups = groups_of(kit.store)
    handles: dict[str, OperationHandle | AsyncOperationHandle] = {}
    ids: list[str] = []
    for member in members:
        match member:
            case OperationHandle() | AsyncOperationHandle():
                if member.store is not kit.store:
                    raise UsageError(
                        f"operation {member.operation_id}: its handle reads another store "
                        "than the group's; give store= the handle's store"
                    )
                handles[member.operation_id] = member
                ids.append(member.operation_id)
            case Operation():
                record = open_operation(kit.store, member, operation_id=None, clock=kit.clock)
                ids.append(record.contract.operation_id)
            case str():
                ids.append(member)
            case _:
                raise UsageError(
                    f"a group member is a handle, an Operation or an operation id, "
                    f"not {type(member).__name__}"
                )
    if max_requests is not None and (
        isinstance(max_requests, bool) or not isinstance(max_requests, int) or max_requests < 1
    ):
        raise UsageError(f"max_requests must be a whole number from 1, got {max_requests!r}")
    if group_id is not None:
        if not is_group_id(group_id):
            raise UsageError(f"group id {group_id[:40]!r} must start with 'grp_'")
        stored = groups.get_group(group_id)
        if stored is not None:
            if ids and tuple(ids) != stored.members:
                raise UsageError(
                    f"group {group_id} has other members; resume it without members, "
                    "or use a new group id"
                )
            return stored, handles
    check_members(ids, lambda i: kit.store.get(i) is not None)
    now = kit.clock.now()
    row = GroupRow(
        group_id=group_id or new_group_id(),
        kind=kind,
        members=tuple(ids),
        created_at=now,
        deadline_at=_deadline_at(deadline, now),
        max_requests=max_requests,
    )
    return groups.create_group(row), handles


def _opened(
    members: Iterable[Member],
    options: SyncOptions | AsyncOptions,
    *,
    kind: GroupKind,
    deadline: float | datetime | None,
    max_requests: int | None,
    group_id: str | None,
    pacing: WorkerSettings,
    cancel_rest: bool = False,
) -> tuple[Scheduler, dict[str, OperationHandle | AsyncOperationHandle], str | None]:
    """The group opened (or resumed) over *members*: its scheduler (``.kit``: the store
    and tools it drives with), the members' handles by operation id, and the secret
    completions are signed with."""
    listed, store = _store_of(members, options.store)
    kit = replace(options, store=store).tools()
    row, handles = _open_group(
        kit, listed, kind=kind, deadline=deadline, max_requests=max_requests, group_id=group_id
    )
    scheduler = Scheduler(kit, groups_of(kit.store), row, pacing=pacing, cancel_rest=cancel_rest)
    return scheduler, handles, notify_secret_for(None, options.notify_secret)


def _drive_sync(scheduler: Scheduler, options: SyncOptions) -> Iterator[Record]:
    """Carry out the scheduler's turns, blocking; yield each member that ends."""
    if scheduler.group.state != "waiting":
        return
    kit = scheduler.kit
    client, sleep, http = options.client, options.sleep, options.http
    while True:
        match scheduler.next():
            case Nap(seconds=seconds):
                sleep(seconds)
            case Go(reserved=reserved, request=request, lease=lease):
                steps = exchange(
                    reserved, request, lease=lease, clock=kit.clock, rng=kit.rng,
                    headers=kit.headers, models=models_for(kit.store),
                    pacer=pacer_for(kit.store),
                )  # fmt: skip
                ended = run_exchange_sync(
                    steps, kit, reserved.contract.profile, client=client, http=http, sleep=sleep
                )
                scheduler.answered(reserved.contract.operation_id, ended)
            case Ended(record=record):
                yield record
            case Stop():
                return


async def _drive_async(scheduler: Scheduler, options: AsyncOptions) -> AsyncIterator[Record]:
    """Carry out the scheduler's turns without blocking the event loop; yield each
    member that ends."""
    if scheduler.group.state != "waiting":
        return
    kit = scheduler.kit
    client, sleep, http = options.client, options.sleep, options.http
    http_client, own_client = await borrow_async_client(client)

    async def persist(transition: Transition) -> Record | ConflictError:
        try:
            return save_and_tell(kit.store, transition.record, transition.events, kit.on_event)
        except ConflictError as exc:
            return exc

    async def reread(operation_id: str) -> Record | None:
        return kit.store.get(operation_id)

    try:
        while True:
            match scheduler.next():
                case Nap(seconds=seconds):
                    await sleep(seconds)
                case Go(reserved=reserved, request=request, lease=lease):
                    steps = exchange(
                        reserved, request, lease=lease, clock=kit.clock, rng=kit.rng,
                        headers=kit.headers, models=models_for(kit.store),
                        pacer=pacer_for(kit.store),
                    )  # fmt: skip
                    ended = await run_exchange_async(
                        steps,
                        kit,
                        reserved.contract.profile,
                        client=http_client,
                        http=http,
                        persist=persist,
                        reread=reread,
                        sleep=sleep,
                    )
                    scheduler.answered(reserved.contract.operation_id, ended)
                case Ended(record=record):
                    yield record
                case Stop():
                    return
    finally:
        if own_client:
            await http_client.aclose()


def _ended_sync(
    kit: Tools,
    record: Record,
    handles: Mapping[str, OperationHandle | AsyncOperationHandle],
    on_complete: OnComplete | None,
    secret: str | None,
) -> None:
    deliver_sync(kit, record, on_complete, secret)
    handle = handles.get(record.contract.operation_id)
    if handle is not None:
        handle._seen(record)


async def _ended_async(
    kit: Tools,
    record: Record,
    handles: Mapping[str, OperationHandle | AsyncOperationHandle],
    on_complete: OnComplete | None,
    secret: str | None,
) -> None:
    await deliver_async(kit, record, on_complete, secret)
    handle = handles.get(record.contract.operation_id)
    if handle is not None:
        handle._seen(record)
        if isinstance(handle, AsyncOperationHandle):
            await handle._run_pending()


_COMMON_DOC: Final = """
    Args:
        members: handles, :class:`Operation` objects (created in *store* first) or
            stored operation ids; empty only to resume *group_id*.
        deadline: the group's own deadline: seconds from now, or an aware instant;
            ``None``: only each member's own. No request is sent at or after it, and a
            request's timeout ends by it.
        max_requests: the group's own request budget, over every request of every
            member (status, result, errors page, cancel); ``None``: only each
            member's own. Each request is counted here and on its member, both
            persisted, before it is sent.
        group_id: a group to resume (its stored members, deadline and spending), or
            the id to give a new one (``grp_…``); ``None``: a fresh id.
        store, headers, client, clock, sleep, rng, on_event, http, on_complete,
            notify_secret: as in :func:`waitbound.wait` (``store=None``: the store of
            the first handle given, else the default store).
        pacing: ``per_origin_rate`` (requests per second) and ``per_origin_burst`` of
            the group's one scheduler, per origin, as a worker's.
"""


def _store_of(members: Iterable[Member], store: Store | None) -> tuple[list[Member], Store | None]:
    listed = list(members)
    if store is None:
        for member in listed:
            if isinstance(member, OperationHandle | AsyncOperationHandle):
                return listed, member.store
    return listed, store


def wait_all(
    members: Iterable[Member] = (),
    *,
    deadline: float | datetime | None = None,
    max_requests: int | None = None,
    group_id: str | None = None,
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
    pacing: WorkerSettings = _DEFAULT_PACING,
) -> GroupResult:
    """Wait, blocking, until every member has an outcome, or the group's own deadline
    or budget stops it (``stopped``; the rest stay ``pending``, untouched).

    Every member keeps its own deadline and budgets; the group adds one deadline and
    one request budget over all of them, recorded durably (resume with ``group_id``).
    One scheduler drives every member, one request at a time, with per-origin pacing.
    """
    options = SyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep, rng=rng,
        on_event=on_event, http=http, on_complete=on_complete, notify_secret=notify_secret,
    )  # fmt: skip
    scheduler, handles, secret = _opened(
        members, options, kind="all", deadline=deadline,
        max_requests=max_requests, group_id=group_id, pacing=pacing,
    )  # fmt: skip
    kit = scheduler.kit
    for record in _drive_sync(scheduler, options):
        _ended_sync(kit, record, handles, on_complete, secret)
    return _result(scheduler)


def wait_any(
    members: Iterable[Member] = (),
    *,
    cancel_rest: bool = False,
    deadline: float | datetime | None = None,
    max_requests: int | None = None,
    group_id: str | None = None,
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
    pacing: WorkerSettings = _DEFAULT_PACING,
) -> GroupResult:
    """Wait, blocking, until the first member has an outcome (``result.first``), or the
    group's own deadline or budget stops it.

    The other members are left untouched (still waiting within their own bounds);
    with *cancel_rest*, each that is cancelable now has its cancel asked for (audited,
    by ``group grp_…``) and its cancel request sent, within both budgets; the job's end
    is then learned by whoever waits on it next.
    """
    options = SyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep, rng=rng,
        on_event=on_event, http=http, on_complete=on_complete, notify_secret=notify_secret,
    )  # fmt: skip
    scheduler, handles, secret = _opened(
        members, options, kind="any", deadline=deadline,
        max_requests=max_requests, group_id=group_id, pacing=pacing, cancel_rest=cancel_rest,
    )  # fmt: skip
    kit = scheduler.kit
    for record in _drive_sync(scheduler, options):
        _ended_sync(kit, record, handles, on_complete, secret)
    return _result(scheduler)


def as_completed(
    members: Iterable[Member] = (),
    *,
    deadline: float | datetime | None = None,
    max_requests: int | None = None,
    group_id: str | None = None,
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
    pacing: WorkerSettings = _DEFAULT_PACING,
) -> Iterator[Outcome]:
    """Yield each member's :class:`Outcome` once, as it ends, blocking in between.

    The iteration ends when every member ended or the group's own deadline or budget
    stopped it (the members not yielded then still wait). The group is created when
    iteration starts; stopping the iteration early leaves it ``waiting`` (resume with
    its ``group_id``, see ``waitbound show``).
    """
    options = SyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep, rng=rng,
        on_event=on_event, http=http, on_complete=on_complete, notify_secret=notify_secret,
    )  # fmt: skip
    scheduler, handles, secret = _opened(
        members, options, kind="as_completed", deadline=deadline,
        max_requests=max_requests, group_id=group_id, pacing=pacing,
    )  # fmt: skip
    kit = scheduler.kit
    for record in _drive_sync(scheduler, options):
        _ended_sync(kit, record, handles, on_complete, secret)
        yield record.to_outcome()


async def wait_all_async(
    members: Iterable[Member] = (),
    *,
    deadline: float | datetime | None = None,
    max_requests: int | None = None,
    group_id: str | None = None,
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
    pacing: WorkerSettings = _DEFAULT_PACING,
) -> GroupResult:
    """:func:`wait_all` without blocking the event loop (anyio; *sleep* async)."""
    options = AsyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep or anyio.sleep,
        rng=rng, on_event=on_event, http=http, on_complete=on_complete,
        notify_secret=notify_secret,
    )  # fmt: skip
    scheduler, handles, secret = _opened(
        members, options, kind="all", deadline=deadline,
        max_requests=max_requests, group_id=group_id, pacing=pacing,
    )  # fmt: skip
    kit = scheduler.kit
    async for record in _drive_async(scheduler, options):
        await _ended_async(kit, record, handles, on_complete, secret)
    return _result(scheduler)


async def wait_any_async(
    members: Iterable[Member] = (),
    *,
    cancel_rest: bool = False,
    deadline: float | datetime | None = None,
    max_requests: int | None = None,
    group_id: str | None = None,
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
    pacing: WorkerSettings = _DEFAULT_PACING,
) -> GroupResult:
    """:func:`wait_any` without blocking the event loop (anyio; *sleep* async)."""
    options = AsyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep or anyio.sleep,
        rng=rng, on_event=on_event, http=http, on_complete=on_complete,
        notify_secret=notify_secret,
    )  # fmt: skip
    scheduler, handles, secret = _opened(
        members, options, kind="any", deadline=deadline,
        max_requests=max_requests, group_id=group_id, pacing=pacing, cancel_rest=cancel_rest,
    )  # fmt: skip
    kit = scheduler.kit
    async for record in _drive_async(scheduler, options):
        await _ended_async(kit, record, handles, on_complete, secret)
    return _result(scheduler)


async def as_completed_async(
    members: Iterable[Member] = (),
    *,
    deadline: float | datetime | None = None,
    max_requests: int | None = None,
    group_id: str | None = None,
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
    pacing: WorkerSettings = _DEFAULT_PACING,
) -> AsyncIterator[Outcome]:
    """:func:`as_completed` as an async iterator (``async for outcome in …``)."""
    options = AsyncOptions(
        store=store, headers=headers, client=client, clock=clock, sleep=sleep or anyio.sleep,
        rng=rng, on_event=on_event, http=http, on_complete=on_complete,
        notify_secret=notify_secret,
    )  # fmt: skip
    scheduler, handles, secret = _opened(
        members, options, kind="as_completed", deadline=deadline,
        max_requests=max_requests, group_id=group_id, pacing=pacing,
    )  # fmt: skip
    kit = scheduler.kit
    async for record in _drive_async(scheduler, options):
        await _ended_async(kit, record, handles, on_complete, secret)
        yield record.to_outcome()


for _fn in (wait_all, wait_any, as_completed):
    _fn.__doc__ = (_fn.__doc__ or "") + _COMMON_DOC
