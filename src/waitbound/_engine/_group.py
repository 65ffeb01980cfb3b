"""The group scheduler: many operations driven under one deadline and one budget.

One scheduler drives every member of a group from one loop (no thread or task per
member): at each turn it plans, with the shared controller
(:func:`waitbound._engine._driver.safe_plan`), every member that still waits and is not asleep,
stores the outcomes reached without a request, and picks the member whose request is
due first. A member the controller told to sleep is neither read nor planned again
before it wakes (unless a write of the group's changed it), so a turn costs a plan for
the members due, not for the whole group; an end another process gives a member (a
worker, a person's decision) is seen when that member is next due. Before that request is
reserved, the group's budget is spent in the store (``GroupStore.spend_group``,
committed); then the member's own reservation is persisted (its own counters, as
``wait`` does) and the request is sent by the same exchange a ``wait`` runs
(:func:`waitbound._engine._driver.exchange`), its timeout cut to end at the group's deadline.
So every request counts against the member's budget and the group's, both persisted
before it is sent; a crash leaves at most an unused reservation, never an uncounted
request, and a resumed group starts from its stored spending.

Per origin (scheme, host, port) the group keeps the worker's politeness
(``waitbound._engine._worker``'s token bucket: ``per_origin_rate`` requests per second, bursts
up to ``per_origin_burst``): a member whose origin has no token now waits for one. The
scheduler sends one request at a time.

The scheduler is sans-I/O towards the network and time: :meth:`Scheduler.next` says
what to do (sleep, send one reserved request, report a member that ended, or stop), and
the blocking and async interpreters in ``waitbound._engine._fan_in`` carry it out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from waitbound._base._errors import ConflictError, UsageError
from waitbound._base._token_bucket import TokenBucket
from waitbound._base._urls import origin
from waitbound._engine._driver import reservation_of, safe_plan
from waitbound._engine._effects import Tools
from waitbound._engine._lease import Lease, holder_is_gone, lease_of, new_owner
from waitbound._engine._operation import request_cancel
from waitbound._engine._tell import save_and_tell
from waitbound._engine._worker import WorkerSettings
from waitbound._model._audit import EventKind
from waitbound._model._outcome import Reason
from waitbound._model._record import Record
from waitbound._rules._controller import Finish, Finished, Request, Send, Sleep, Transition
from waitbound.stores._group_charges import COUNTED_BY
from waitbound.stores._groups import GroupKind, GroupRow, GroupStore

__all__ = [
    "Ended",
    "Go",
    "Nap",
    "Scheduler",
    "Stop",
]

_MIN_NAP_S = 0.001
"""The shortest pause the scheduler asks for (seconds): a rounding error's wait would
otherwise not move a clock at all."""


@dataclass(frozen=True, slots=True)
class Nap:
    """Sleep this many seconds, then ask again."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Go:
    """Send the reserved request of *reserved* (counted by the member and the group)."""

    reserved: Record
    request: Request
    lease: Lease


@dataclass(frozen=True, slots=True)
class Ended:
    """A member ended (its record as stored); reported once."""

    record: Record


@dataclass(frozen=True, slots=True)
class Stop:
    """The group is over: ``done`` (what it waited for ended) or ``stopped`` by its own
    bound (*reason*)."""

    group: GroupRow


@dataclass(slots=True)
class _Member:
    operation_id: str
    record: Record
    ended: bool = False
    wake_at: datetime | None = None
    """While the controller's last plan for this record was to sleep: until when. The
    member is read and planned again only then (or once a write of ours changed it)."""
    stale: bool = False
    """The record must be read again before it is planned (it woke, or a write lost)."""


class Scheduler:
    """One group's turns. Not thread-safe: one loop asks it, one step at a time.

    Args:
        kit: the store, clock, rng, event sink and headers.
        groups: the store's groups (:func:`waitbound.stores._groups.groups_of`).
        group: the group as stored.
        pacing: ``per_origin_rate`` and ``per_origin_burst`` apply.
        cancel_rest: for ``any``: once one member ended, cancel the others where they
            are cancelable (each cancel request is sent, within both budgets).
    """

    def __init__(
        self,
        kit: Tools,
        groups: GroupStore,
        group: GroupRow,
        *,
        pacing: WorkerSettings,
        cancel_rest: bool = False,
    ) -> None:
        self.kit, self.groups, self.group = kit, groups, group
        self.owner = new_owner()
        self.pacing = pacing
        self.cancel_rest = cancel_rest
        self.buckets: dict[object, TokenBucket] = {}
        self.members: dict[str, _Member] = {}
        self.order: list[str] = []
        self.ended_order: list[str] = []
        self.cancelling: set[str] | None = None
        self.reported: set[str] = set()
        for operation_id in group.members:
            record = kit.store.get(operation_id)
            if record is None:
                raise UsageError(
                    f"group {group.group_id}: member {operation_id} is not in the store"
                )
            self.members[operation_id] = _Member(operation_id, record)
            self.order.append(operation_id)

    # --- what the group waits for ------------------------------------------------------

    @property
    def kind(self) -> GroupKind:
        return self.group.kind

    def _satisfied(self) -> bool:
        ended = [m for m in self.members.values() if m.ended]
        if self.kind == "any":
            if not ended:
                return False
            return not self.cancelling  # every cancel asked for was sent (or given up)
        return len(ended) == len(self.members)

    def _start_cancels(self) -> None:
        """``wait_any(cancel_rest=True)``: ask for the cancel of every member still
        waiting, where it is allowed; the cancel requests are then sent by later turns."""
        self.cancelling = set()
        for member in self.members.values():
            if member.ended:
                continue
            try:
                record = request_cancel(
                    self.kit.store,
                    self.kit.clock,
                    member.operation_id,
                    reason=f"another member of group {self.group.group_id} ended first",
                    requested_by=f"group {self.group.group_id}",
                    by_a_person=False,
                    once=True,  # another process's group may have asked already
                )
            except UsageError:  # not cancelable now (or no cancel action): left as it is
                continue
            member.record = record
            member.wake_at = None
            if record.oversight.cancel_due:
                self.cancelling.add(member.operation_id)

    # --- one turn ------------------------------------------------------------------------

    def next(self) -> Nap | Go | Ended | Stop:
        """What to do now. ``Go``'s request is reserved (and counted twice) already;
        the caller sends it and hands the result to :meth:`answered`."""
        while True:
            now = self.kit.clock.now()
            for member in self._waiting():
                if member.wake_at is not None:
                    if member.wake_at > now:
                        continue  # asleep: nothing of ours changed it, nothing is due
                    member.wake_at, member.stale = None, True
                if member.stale:  # another process may have moved it meanwhile
                    fresh = self.kit.store.get(member.operation_id)
                    if fresh is not None:
                        member.record = fresh
                    member.stale = False
                if member.record.is_finished and not member.ended:
                    member.ended = True
                    self.ended_order.append(member.operation_id)
                if (
                    member.operation_id in (self.cancelling or ())
                    and not member.record.oversight.cancel_due
                ):
                    self.cancelling.discard(member.operation_id)  # type: ignore[union-attr]
            for operation_id in self.ended_order:
                if operation_id not in self.reported:
                    self.reported.add(operation_id)
                    return Ended(self.members[operation_id].record)
            if self.kind == "any" and self.ended_order and self.cancelling is None:
                if self.cancel_rest:
                    self._start_cancels()
                    continue
                self.cancelling = set()
            if self._satisfied():
                return Stop(self._end("done", None))
            now = self.kit.clock.now()
            deadline = self.group.deadline_at
            if deadline is not None and now >= deadline:
                return Stop(self._end("stopped", Reason.DEADLINE_EXCEEDED.value))
            turn = self._plan(now)
            if turn is None:
                continue  # an outcome was stored without a request: look again
            if isinstance(turn, Nap) and deadline is not None:
                left = (deadline - now).total_seconds()
                turn = Nap(max(_MIN_NAP_S, min(turn.seconds, left)))
            return turn

    def _waiting(self) -> list[_Member]:
        """Members still driven: not ended; for ``any`` after the first end, only those
        whose cancel is still to be sent."""
        if self.kind == "any" and self.cancelling is not None:
            return [self.members[i] for i in sorted(self.cancelling)]
        return [self.members[i] for i in self.order if not self.members[i].ended]

    def _plan(self, now: datetime) -> Nap | Go | Stop | None:
        """Plan every member still driven; return the turn (``None``: look again)."""
        started = self.kit.clock.monotonic()
        naps: list[float] = []
        # The earliest due first: the first request that may go is sent at once, and the
        # members behind it are planned in a later turn (never all of them per request).
        due = sorted(
            self._waiting(), key=lambda m: (m.record.schedule.next_poll_at, m.operation_id)
        )
        for member in due:
            if member.wake_at is not None and member.wake_at > now:
                naps.append((member.wake_at - now).total_seconds())
                continue
            record = member.record
            leased = (
                record.lease.lease_expires_at is not None and record.lease.lease_expires_at > now
            )
            if leased and holder_is_gone(record.lease.lease_owner):
                record = record.evolve(lease=record.lease.lapsed(now))
            decision = safe_plan(record, now, owner=self.owner, headers=self.kit.headers)
            match decision:
                case Finished():
                    continue
                case Finish(transition=finish):
                    try:
                        member.record = save_and_tell(
                            self.kit.store, finish.record, finish.events, self.kit.on_event
                        )
                    except ConflictError:
                        member.stale = True
                    return None
                case Sleep(seconds=seconds):
                    naps.append(seconds)
                    member.wake_at = now + timedelta(seconds=seconds)
                case Send(request=request):
                    wait_s = self._token(request.url)
                    if wait_s:
                        naps.append(wait_s)
                        continue
                    return self._reserve(member, decision, now, started)
        if not naps:  # pragma: no cover - a member that waits has a next step
            naps.append(self.pacing.idle_s)
        return Nap(max(_MIN_NAP_S, min(naps)))

    def _token(self, url: str) -> float:
        """Take a token of *url*'s origin: 0 when taken, else seconds until one is."""
        key = origin(url)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(
                self.pacing.per_origin_rate, self.pacing.per_origin_burst, self.kit.clock
            )
            self.buckets[key] = bucket
        return bucket.take()

    def _reserve(
        self, member: _Member, send: Send, now: datetime, started: float
    ) -> Go | Stop | None:
        """Spend the group's budget, then reserve the member's request (both committed
        before it is sent)."""
        spent = self.groups.spend_group(self.group.group_id)
        if spent is None:
            stored = self.groups.get_group(self.group.group_id)
            if stored is not None and stored.state != "waiting":
                self.group = stored
                return Stop(stored)
            return Stop(self._end("stopped", Reason.REQUEST_BUDGET_EXHAUSTED.value))
        self.group = spent
        reservation = _counted_by(
            reservation_of(send, self.kit.headers, per_origin=self.kit.per_origin),
            self.group.group_id,
        )
        try:
            reserved = save_and_tell(
                self.kit.store, reservation.record, reservation.events, self.kit.on_event
            )
        except ConflictError:  # someone wrote it meanwhile: nothing is sent, so the
            # group gives back the request it counted (it counts requests sent only)
            member.stale = True
            released = self.groups.release_group(self.group.group_id)
            if released is not None:
                self.group = released
            return None
        member.record = reserved
        request = send.request
        deadline = self.group.deadline_at
        if deadline is not None:
            left = (deadline - now).total_seconds()
            if left < request.timeout_s:
                request = replace(request, timeout_s=max(_MIN_NAP_S, left))
        return Go(reserved, request, lease_of(reserved, now, started))

    def answered(self, operation_id: str, record: Record | None) -> None:
        """The exchange of *operation_id*'s request ended with *record* (as stored)."""
        member = self.members[operation_id]
        member.wake_at = None
        if record is not None:
            member.record = record
        else:
            member.stale = True

    def _end(self, state: str, reason: str | None) -> GroupRow:
        ended = self.groups.end_group(
            self.group.group_id,
            state="done" if state == "done" else "stopped",
            reason=reason,
            at=self.kit.clock.now(),
        )
        if ended is not None:
            self.group = ended
        return self.group

    # --- what the caller reads -----------------------------------------------------------

    def records(self) -> list[Record]:
        """Every member's record as last seen, in the group's order."""
        return [self.members[i].record for i in self.order]

    def ended_records(self) -> list[Record]:
        """The members that ended, in the order they were seen to end."""
        return [self.members[i].record for i in self.ended_order]


def _counted_by(reservation: Transition, group_id: str) -> Transition:
    """*reservation* with its ``reserved`` event naming the group that counted the
    request already (the store charges the member's other waiting groups only)."""
    events = tuple(
        replace(event, data={**event.data, COUNTED_BY: group_id})
        if event.kind == EventKind.RESERVED
        else event
        for event in reservation.events
    )
    return replace(reservation, events=events)


def check_members(ids: Sequence[str], exists: Callable[[str], bool]) -> None:
    """Refuse an empty group, a member named twice, or one not in the store.

    Raises:
        UsageError: one line naming the member.
    """
    if not ids:
        raise UsageError("a group needs at least one operation")
    seen: set[str] = set()
    for operation_id in ids:
        if operation_id in seen:
            raise UsageError(f"operation {operation_id} is named twice in the group")
        seen.add(operation_id)
        if not exists(operation_id):
            raise UsageError(f"no operation with id {operation_id!r} in the store")
