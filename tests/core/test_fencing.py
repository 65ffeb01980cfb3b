"""Leases are fences: a worker that stalls past its lease (a pause failpoint) never has
a second request of an operation in flight, never fetches a result twice, never sends
after the outcome, and never records an answer against another request.

Every worker of a test runs in one event loop on virtual time that moves only when all
of them are idle (``tests.fakes.Autojump``, store calls inline), so the stall is a
failpoint, not a race with the machine: SQLite and PostgreSQL (a fresh schema per test).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio
import httpx
import pytest

from tests.core.harness import SEED
from tests.fakes import Autojump, FakeClock, autojump
from tests.stores import pg
from waitbound import (
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    Reason,
    Record,
    SQLiteStore,
    Store,
    WorkerSettings,
    parse_profile,
    start,
    work,
)
from waitbound._base._failpoints import hit, inject
from waitbound._engine._driver import exchange
from waitbound._engine._effects import Exchange, _Persist, _Send
from waitbound._engine._lease import Lease, lease_of
from waitbound._model._record import Phase
from waitbound._rules._controller import Request, Send, plan

PROFILE = parse_profile({"state": "status", "pending": ["running"], "succeeded": ["done"]})
POLICY = Policy(base_delay_s=0.5, max_delay_s=0.5, min_delay_s=0.1, deadline_s=120)
LEASE_S = 2.0
STALL_S = 5.0
LATENCY_S = 0.2


@dataclass
class Sent:
    """One request the provider saw: its path, when it arrived and was answered."""

    path: str
    at: float
    answered: float | None = None
    request_id: str = ""


@dataclass
class Provider:
    """A job answering running twice, then done; its result at ``/jobs/N/result``.

    Each request takes :data:`LATENCY_S` of virtual time and gets its own request id.
    """

    jump: Autojump
    clock: FakeClock
    sent: list[Sent] = field(default_factory=list)
    ids: Iterator[int] = field(default_factory=itertools.count)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        seen = Sent(path, self.clock.monotonic(), request_id=f"r-{next(self.ids)}")
        self.sent.append(seen)
        await self.jump.sleep(LATENCY_S)
        seen.answered = self.clock.monotonic()
        headers = {"x-request-id": seen.request_id}
        if path.endswith("/result"):
            return httpx.Response(200, json={"answer": 42}, headers=headers)
        polls = sum(1 for s in self.sent if s.path == path)
        return httpx.Response(200, json={"status": "done" if polls >= 3 else "running"},
                              headers=headers)  # fmt: skip

    def overlaps(self) -> int:
        """Requests of one job sent while another of that job was still unanswered."""
        count = 0
        for a, b in itertools.combinations(self.sent, 2):
            same = a.path.split("/")[2] == b.path.split("/")[2]
            end = a.answered if a.answered is not None else float("inf")
            count += same and a.at <= b.at < end
        return count


TRACED = (
    "connection.connect_tcp.started",
    "connection.connect_tcp.complete",
    "http11.send_request_headers.started",
    "http11.send_request_headers.complete",
    "http11.send_request_body.started",
    "http11.send_request_body.complete",
)
"""The ``trace`` events httpcore announces for a request on a new connection, up to its
answer (``send.after_connect`` pauses after the second, ``send.after_send`` after the
last)."""


@dataclass
class Traced(httpx.AsyncBaseTransport):
    """A mock transport that runs the request's ``trace`` extension as httpcore does on a
    new connection: the provider gets the request once its head and body are written,
    and answers before ``send_request_body.complete`` returns (during a pause there)."""

    provider: Provider

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        trace = request.extensions["trace"]
        for name in TRACED[:-1]:
            await trace(name, {})
        response = await self.provider(request)
        await trace(TRACED[-1], {})
        return response


@contextmanager
def _stores(kind: str, tmp_path: Path, n: int) -> Iterator[list[Store]]:
    """*n* stores on one database of *kind* (one each per worker, as separate processes
    would have)."""
    if kind == "memory":
        shared = MemoryStore()
        yield [shared] * n
        return
    if kind == "sqlite":
        stores: list[Store] = [SQLiteStore(tmp_path / "fleet.db") for _ in range(n)]
        try:
            yield stores
        finally:
            for store in stores:
                store.close()
        return
    from waitbound.stores.postgres import PostgresStore

    with pg.fresh_schema() as schema:
        stores = [PostgresStore(pg.DSN, schema=schema, max_size=2) for _ in range(n)]
        try:
            yield stores
        finally:
            for store in stores:
                store.close()


def _fleet(stores: list[Store], clock: FakeClock, jump: Autojump, provider: Provider) -> None:
    """Run one worker per store until none has work left."""

    async def main() -> None:
        async with (
            httpx.AsyncClient(transport=Traced(provider)) as client,
            autojump(jump),
        ):
            with anyio.fail_after(60):  # a safety net only
                settings = WorkerSettings(lease_s=LEASE_S, idle_s=0.5, until_idle=True)

                async def one(store: Store) -> None:
                    await work(
                        store, settings=settings, client=client, clock=clock,
                        sleep=jump.sleep, rng=random.Random(SEED), inline_store=True,
                    )  # fmt: skip

                async with anyio.create_task_group() as group:
                    for store in stores:
                        group.start_soon(one, store)

    anyio.run(main)


def _check_the_story(store: Store, record: Record, provider: Provider) -> list[str]:
    """The promises every stall keeps; returns the operation's audit kinds.

    A request whose sender stalled after sending it past its own timeout is noted late
    as timed out (its answer reached the socket while the sender was stalled): that is
    the one answer not recorded by request id."""
    stored = store.audit(record.operation_id)
    kinds = [s.event.kind for s in stored]
    assert provider.overlaps() == 0, "two requests of one operation in flight"
    assert sum(s.path.endswith("/result") for s in provider.sent) <= 1, "a result fetched twice"
    assert record.finished_at is not None
    finished_mono = (
        provider.clock.monotonic() - (provider.clock.now() - record.finished_at).total_seconds()
    )
    assert all(s.at <= finished_mono + 1e-9 for s in provider.sent), "a request after the outcome"
    # every answer the provider gave is recorded exactly once: used, or noted late
    recorded = [
        str(s.event.data.get("request_id"))
        for s in stored
        if s.event.kind in ("observed", "late_answer") and s.event.data.get("request_id")
    ]
    timed_out_late = [
        s for s in stored if s.event.kind == "late_answer" and "no answer within" in s.event.summary
    ]
    ids = [s.request_id for s in provider.sent]
    assert set(recorded) <= set(ids)
    assert len(recorded) == len(set(recorded)) == len(ids) - len(timed_out_late)
    return kinds


POINTS = ["reserved", "send.after_plan", "send.after_connect", "send.after_send", "answered",
          "saving"]  # fmt: skip
UNSENT = frozenset({"reserved", "send.after_plan", "send.after_connect"})
"""Stalls after which the lease no longer covers the request: it is never sent."""


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
@pytest.mark.parametrize("point", POINTS)
def test_a_worker_stalled_past_its_status_lease_sends_nothing_and_records_nothing_as_another(
    tmp_path: Path, kind: str, workers: int, point: str
) -> None:
    """One of 2-3 workers stalls 5 s (lease 2 s) after reserving a status request, after
    planning its send, after opening its connection, after sending it, after its answer,
    or before saving it: another takes the operation over; the stalled one then sends
    nothing (send_skipped) or its answer is noted late_answer, never used."""
    clock = FakeClock()
    jump = Autojump(clock)
    provider = Provider(jump, clock)
    with _stores(kind, tmp_path, workers) as stores:
        op = start(
            Operation(status_url="http://p.test/jobs/1", profile=PROFILE, policy=POLICY),
            store=stores[0],
            clock=clock,
        )
        with inject(f"{point}-status:1:pause={STALL_S}"):
            _fleet(stores, clock, jump, provider)
        record = stores[0].get(op.operation_id)
        assert record is not None
        assert record.outcome is OutcomeKind.SUCCEEDED
        kinds = _check_the_story(stores[0], record, provider)
    assert "answer_lost" in kinds  # the taker-over found the stalled step's lease run out
    assert ("send_skipped" if point in UNSENT else "late_answer") in kinds
    assert sum(s.path == "/jobs/1" for s in provider.sent) == 3


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
@pytest.mark.parametrize("point", POINTS)
def test_a_worker_stalled_past_its_result_lease_never_gets_the_result_fetched_twice(
    tmp_path: Path, kind: str, workers: int, point: str
) -> None:
    """The stall is on the result request: the taker-over never fetches the result
    again (result_unconfirmed, a person decides), the stalled one sends nothing late,
    and a late result answer is noted, not used."""
    clock = FakeClock()
    jump = Autojump(clock)
    provider = Provider(jump, clock)
    with _stores(kind, tmp_path, workers) as stores:
        op = start(
            Operation(
                status_url="http://p.test/jobs/1",
                result_url="http://p.test/jobs/1/result",
                profile=PROFILE,
                policy=POLICY,
            ),
            store=stores[0],
            clock=clock,
        )
        with inject(f"{point}-result:1:pause={STALL_S}"):
            _fleet(stores, clock, jump, provider)
        record = stores[0].get(op.operation_id)
        assert record is not None
        assert (record.outcome, record.reason) == (OutcomeKind.ESCALATED, Reason.RESULT_UNCONFIRMED)
        assert record.result is None
        kinds = _check_the_story(stores[0], record, provider)
    assert ("send_skipped" if point in UNSENT else "late_answer") in kinds
    assert sum(s.path.endswith("/result") for s in provider.sent) == (point not in UNSENT)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_worker_never_replans_its_own_stalled_step(tmp_path: Path, kind: str) -> None:
    """One worker whose step stalls past its lease after reserving: its own next passes
    leave the operation alone (no answer_lost for its own live step, no second request);
    the stalled step releases its unsent reservation (not counted) and the next pass
    polls as planned."""
    clock = FakeClock()
    jump = Autojump(clock)
    provider = Provider(jump, clock)
    with _stores(kind, tmp_path, 1) as stores:
        op = start(
            Operation(status_url="http://p.test/jobs/1", profile=PROFILE, policy=POLICY),
            store=stores[0],
            clock=clock,
        )
        with inject(f"reserved:1:pause={STALL_S}"):
            _fleet(stores, clock, jump, provider)
        record = stores[0].get(op.operation_id)
        assert record is not None
        assert record.outcome is OutcomeKind.SUCCEEDED
        kinds = _check_the_story(stores[0], record, provider)
    assert "answer_lost" not in kinds
    assert kinds.count("send_skipped") == 1
    assert record.status_requests_used == len(provider.sent) == 3
    assert provider.sent[0].at >= 1000.0 + STALL_S  # nothing went out during the stall


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_worker_stalled_after_its_answer_with_no_one_else_saves_it_as_its_own(
    tmp_path: Path, kind: str
) -> None:
    """A stall after the answer past the lease, with no other worker: no one took the
    operation over, so the record still carries the reservation and the answer is
    recorded as the answer to its own request (not late)."""
    clock = FakeClock()
    jump = Autojump(clock)
    provider = Provider(jump, clock)
    with _stores(kind, tmp_path, 1) as stores:
        op = start(
            Operation(status_url="http://p.test/jobs/1", profile=PROFILE, policy=POLICY),
            store=stores[0],
            clock=clock,
        )
        with inject(f"answered:1:pause={STALL_S}"):
            _fleet(stores, clock, jump, provider)
        record = stores[0].get(op.operation_id)
        assert record is not None
        kinds = _check_the_story(stores[0], record, provider)
    assert record.outcome is OutcomeKind.SUCCEEDED
    assert "late_answer" not in kinds
    assert "answer_lost" not in kinds
    assert record.status_requests_used == 3


# --- one exchange, driven by hand ---------------------------------------------------


def _drive_exchange(
    steps: Exchange, answer: Callable[[object], object]
) -> tuple[list[object], object]:
    """Run an exchange's effects through *answer*; return the effects and its result."""
    effects: list[object] = []
    try:
        effect = steps.send(None)
        while True:
            effects.append(effect)
            effect = steps.send(answer(effect))
    except StopIteration as stop:
        return effects, stop.value


def _reserved(clock: FakeClock) -> tuple[MemoryStore, Record, Lease]:
    store = MemoryStore()
    op = start(
        Operation(status_url="http://p.test/jobs/1", profile=PROFILE, policy=POLICY),
        store=store,
        clock=clock,
    )
    record = store.get(op.operation_id)
    assert record is not None
    started, now = clock.monotonic(), clock.now()
    decision = plan(record, now, owner="me:1:x", lease_s=LEASE_S)
    assert isinstance(decision, Send)
    reserved = store.save(decision.transition.record, decision.transition.events)
    return store, reserved, lease_of(reserved, now, started)


def test_a_send_timeout_is_cut_to_the_lease_left_at_the_moment_of_sending() -> None:
    """1.2 s after reserving with a 2 s lease (margin 0.2 s), the request goes with a
    0.6 s timeout, not the 1.8 s planned: the monotonic time since the reservation counts."""
    clock = FakeClock()
    _, reserved, lease = _reserved(clock)
    request = Request(kind="status", url="http://p.test/jobs/1", timeout_s=1.8)
    clock.advance(1.2)
    steps = exchange(reserved, request, lease=lease, clock=clock, rng=random.Random(SEED),
                     headers=lambda r: {})  # fmt: skip
    first = next(steps)
    assert isinstance(first, _Send)
    assert first.request.timeout_s == pytest.approx(0.6)


def test_a_send_the_lease_cannot_cover_is_skipped_and_released() -> None:
    """1.7 s into a 2 s lease only 0.1 s is left before the margin: the request is not
    sent; its reservation is released (not counted, no lease) and send_skipped says why."""
    clock = FakeClock()
    store, reserved, lease = _reserved(clock)
    request = Request(kind="status", url="http://p.test/jobs/1", timeout_s=1.8)
    clock.advance(1.7)
    steps = exchange(reserved, request, lease=lease, clock=clock, rng=random.Random(SEED),
                     headers=lambda r: {})  # fmt: skip

    def answer(effect: object) -> object:
        assert isinstance(effect, _Persist), f"only a write is expected, got {effect!r}"
        return store.save(effect.transition.record, effect.transition.events)

    effects, done = _drive_exchange(steps, answer)
    assert len(effects) == 1
    assert isinstance(done, Record)
    assert (done.in_flight, done.lease_owner, done.status_requests_used) == (None, None, 0)
    assert done.phase is Phase.WAITING
    last = store.audit(done.operation_id)[-1].event
    assert last.kind == "send_skipped"
    assert "lease had 0.3s of 2s left" in last.summary


def test_a_stopping_worker_does_not_send_a_reserved_request() -> None:
    """Told to stop (SIGTERM) before a reserved request went out, the step releases the
    reservation instead of sending it: the exit does not wait for a request."""
    clock = FakeClock()
    store, reserved, lease = _reserved(clock)
    request = Request(kind="status", url="http://p.test/jobs/1", timeout_s=1.8)
    steps = exchange(reserved, request, lease=lease, clock=clock, rng=random.Random(SEED),
                     headers=lambda r: {}, stopping=lambda: True)  # fmt: skip

    def answer(effect: object) -> object:
        assert isinstance(effect, _Persist)
        return store.save(effect.transition.record, effect.transition.events)

    _, done = _drive_exchange(steps, answer)
    assert isinstance(done, Record)
    assert done.in_flight is None
    assert "told to stop" in store.audit(done.operation_id)[-1].event.summary


def test_a_pause_failpoint_stalls_and_a_kill_failpoint_is_parsed_the_same() -> None:
    """``NAME:N:pause=S`` makes the N-th pass return S seconds to stall (once);
    a malformed spec is refused."""
    with inject("answered:2:pause=1.5"):
        assert hit("answered") == 0.0
        assert hit("reserved") == 0.0
        assert hit("answered-status", "answered") == 1.5
        assert hit("answered") == 0.0
    with pytest.raises(ValueError, match="not a failpoint"), inject("answered:x"):
        pass  # pragma: no cover
    assert hit("answered") == 0.0


def test_the_wait_driver_pauses_at_a_failpoint_with_its_own_sleep() -> None:
    """``wait`` under a pause failpoint at ``reserved`` sleeps the pause with its sleep
    (virtual here), then finds its lease (request timeout + the policy's lease) still
    covers the request and sends it."""
    import waitbound

    clock = FakeClock()
    store = MemoryStore()
    answers = iter([{"status": "done"}])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=next(answers))

    op = Operation(status_url="http://p.test/jobs/1", profile=PROFILE,
                   policy=replace(POLICY, request_timeout_s=10, lease_s=30))  # fmt: skip
    with inject("reserved:1:pause=3"), httpx.Client(transport=httpx.MockTransport(handler)) as c:
        outcome = waitbound.wait(op, store=store, clock=clock, sleep=clock.sleep, client=c)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert 3 in clock.sleeps


def test_the_controller_never_notes_a_live_lease_of_its_own_as_an_answer_lost() -> None:
    """A record whose request is in flight under this very owner's unexpired lease: the
    plan is to look again when the lease ends, never answer_lost and a new reservation."""
    from waitbound._rules._controller import Sleep

    clock = FakeClock()
    _, reserved, _ = _reserved(clock)
    decision = plan(reserved, clock.now(), owner="me:1:x", lease_s=LEASE_S)
    assert isinstance(decision, Sleep)


def test_a_wait_whose_reservation_was_taken_over_notes_its_answer_late() -> None:
    """``wait`` stalls after its answer (a pause failpoint) past its lease (5 + 5 s) and
    another worker reserves the operation meanwhile: the wait's answer is noted
    late_answer (never recorded as the other's request's); the wait then waits out the
    other's lease and finishes on its own."""
    import waitbound

    clock = FakeClock()
    store = MemoryStore()
    policy = replace(POLICY, request_timeout_s=5, lease_s=5)
    operation = Operation(status_url="http://p.test/jobs/1", profile=PROFILE, policy=policy)
    op = start(operation, store=store, clock=clock)
    served: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        served.append(f"r-{len(served)}")
        body = {"status": "running" if len(served) == 1 else "done"}
        return httpx.Response(200, json=body, headers={"x-request-id": served[-1]})

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if seconds == 11:  # the stall: meanwhile another worker takes the lease over
            record = store.get(op.operation_id)
            assert record is not None
            other = plan(record, clock.now(), owner="other:1:x", lease_s=3)
            assert isinstance(other, Send)
            store.save(other.transition.record, other.transition.events)

    with inject("answered:1:pause=11"), httpx.Client(transport=httpx.MockTransport(handler)) as c:
        outcome = waitbound.wait(operation_id=op.operation_id, store=store, clock=clock,
                                 sleep=sleep, client=c)  # fmt: skip
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    events = [s.event for s in store.audit(op.operation_id)]
    late = [e for e in events if e.kind == "late_answer"]
    assert [e.data["request_id"] for e in late] == ["r-0"]
    observed = [e.data["request_id"] for e in events if e.kind == "observed"]
    assert observed == ["r-1"]
    # the taker-over noted the wait's answer lost; the wait, the other's once it ran out
    assert [e.kind for e in events].count("answer_lost") == 2
