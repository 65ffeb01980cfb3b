"""Completions out: the policy (``waitbound._engine._outbox``) and the delivery pass that applies
it (``waitbound._engine._delivery``): each entry at least once under a stable id, with the retry
schedule, the channels, replays, and no secret ever in an error line or a log."""

from __future__ import annotations

import base64
import json
import logging
import random
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio
import httpx
import pytest

from tests.cli.helpers import closed_port
from tests.core.completion_receiver import SECRET, receiving, trickling
from tests.core.harness import PROFILE, URL
from tests.fakes import FakeClock
from waitbound import (
    Channel,
    Completion,
    MemoryStore,
    OutboxEntry,
    OutboxStatus,
    OutcomeKind,
    Phase,
    Policy,
    Record,
    UsageError,
    deliver_due,
    deliver_due_async,
    parse_profile,
    replay_delivery,
)
from waitbound._engine._outbox import (
    MAX_ATTEMPTS,
    NOTIFY_SECRET_ENV,
    Attempt,
    attempt_of_error,
    attempt_of_status,
    next_attempt,
    resolve_notify_secret,
    webhook_signer,
)
from waitbound._model._push import completion_delivery_id
from waitbound._model._record import (
    Answer,
    Contract,
    Ending,
    Push,
    Schedule,
    Submission,
)

RAWS = (5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0)
"""The backoff before attempts 2..10 (seconds, before jitter): base 5 s, cap 300 s."""


def real_now() -> FakeClock:
    """A fake clock starting now: receivers verify the signed timestamp against real time."""
    return FakeClock(start=datetime.now(UTC).replace(microsecond=0))


def finished(
    store: MemoryStore,
    operation_id: str,
    clock: FakeClock,
    *,
    notify_url: str | None = None,
    callback: bool = False,
) -> Record:
    """Store a succeeded operation that asks for its completion (the store writes its
    outbox entries in the same write)."""
    now = clock.now()
    record = Record(
        contract=Contract(
            operation_id=operation_id,
            profile=parse_profile(PROFILE),
            policy=Policy(),
            created_at=now,
        ),
        submission=Submission(status_url=URL),
        schedule=Schedule(deadline_at=now + timedelta(minutes=10), next_poll_at=now),
        answer=Answer(provider_state="done"),
        ending=Ending(phase=Phase.DONE, outcome=OutcomeKind.SUCCEEDED, result=5, finished_at=now),
        push=Push(notify_url=notify_url, callback=callback),
    )
    return store.create(record, [])


def entry_of(store: MemoryStore, operation_id: str, channel: Channel) -> OutboxEntry:
    entry = store.get_outbox(completion_delivery_id(operation_id, channel))
    assert entry is not None
    return entry


def until_due(clock: FakeClock, entry: OutboxEntry) -> float:
    """Advance the clock to the entry's next attempt; return the wait in seconds."""
    wait_s = (entry.next_attempt_at - clock.now()).total_seconds()
    clock.advance(wait_s)
    return wait_s


# --- the pure policy ------------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_a_2xx_delivers(status: int) -> None:
    """Any 2xx answer delivers the completion."""
    assert attempt_of_status(status).delivered


@pytest.mark.parametrize("status", [100, 199, 301, 302, 304, 307, 400, 401, 404, 410, 429, 500])
def test_anything_but_a_2xx_is_a_failed_attempt_named_by_its_code(status: int) -> None:
    """A redirect, a client or server error: a failed attempt, its line the status code."""
    assert attempt_of_status(status) == Attempt(error=f"HTTP {status}")


def test_the_wait_is_capped_at_300s_and_an_entry_past_the_limit_is_failed() -> None:
    """After the 9th failed attempt the wait is within [150, 300] s (the cap, jittered);
    an entry with 10,000 attempts already counted is failed, never scheduled again."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-x", clock, callback=True)
    entry = entry_of(store, "op-x", Channel.CALLBACK)
    ninth = next_attempt(
        replace(entry, attempts=8), Attempt(error="x"), clock.now(), random.Random(1)
    )
    assert ninth.status is OutboxStatus.PENDING
    assert 150 <= (ninth.next_attempt_at - clock.now()).total_seconds() <= 300
    late = next_attempt(
        replace(entry, attempts=10_000), Attempt(error="x"), clock.now(), random.Random(1)
    )
    assert (late.status, late.attempts) == (OutboxStatus.FAILED, 10_001)


# --- the retry schedule ---------------------------------------------------------------


def test_the_retry_schedule_is_exact_with_a_seeded_rng_and_fails_after_10() -> None:
    """A receiver that always fails: attempts at 0, then backoff 5, 10, 20, … 300 s
    jittered 50-100 % by the seeded rng; the 10th failure marks the entry failed and
    nothing is attempted after it."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-1", clock, callback=True)
    calls: list[str] = []

    def broken(completion: Completion) -> None:
        calls.append(completion.delivery_id)
        raise RuntimeError("downstream is down")

    rng = random.Random(7)
    waits: list[float] = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        assert deliver_due(store, clock=clock, rng=rng, on_complete=broken) == 0
        entry = entry_of(store, "op-1", Channel.CALLBACK)
        assert entry.attempts == attempt
        assert entry.last_error == "RuntimeError: downstream is down"
        if attempt < MAX_ATTEMPTS:
            assert entry.status is OutboxStatus.PENDING
            assert deliver_due(store, clock=clock, rng=rng, on_complete=broken) == 0
            assert len(calls) == attempt, "attempted again before its next attempt was due"
            waits.append(until_due(clock, entry))
    reference = random.Random(7)
    assert waits == pytest.approx([reference.uniform(raw / 2, raw) for raw in RAWS], abs=1e-5)
    assert entry.status is OutboxStatus.FAILED
    assert entry.lease_owner is None
    clock.advance(86_400)
    deliver_due(store, clock=clock, rng=rng, on_complete=broken)
    assert len(calls) == MAX_ATTEMPTS
    assert set(calls) == {completion_delivery_id("op-1", Channel.CALLBACK)}


def test_a_webhook_keeps_its_delivery_id_on_every_retry() -> None:
    """500, 500, then 200: three signed POSTs with the same webhook-id (the entry's
    stable delivery id), each timestamped when it was sent; then delivered."""
    clock = real_now()
    store = MemoryStore()
    with receiving([500, 503, 200]) as receiver:
        finished(store, "op-1", clock, notify_url=receiver.url)
        sent_at: list[str] = []
        for _ in range(3):
            sent_at.append(str(int(clock.now().timestamp())))
            deliver_due(store, clock=clock, rng=random.Random(1), notify_secret=SECRET)
            entry = entry_of(store, "op-1", Channel.WEBHOOK)
            if entry.status is OutboxStatus.PENDING:
                until_due(clock, entry)
        assert receiver.rejected == []
        assert receiver.ids() == [completion_delivery_id("op-1", Channel.WEBHOOK)] * 3
        assert [r.timestamp for r in receiver.received] == sent_at
    assert entry.status is OutboxStatus.DELIVERED
    assert entry.attempts == 3
    assert entry.delivered_at == clock.now()
    assert entry.last_error == "HTTP 503"


def test_a_webhook_is_the_compact_json_payload_with_standard_headers() -> None:
    """The body is the payload as compact JSON; content-type, webhook-id,
    webhook-timestamp and a v1 webhook-signature that standardwebhooks verifies."""
    clock = real_now()
    store = MemoryStore()
    with receiving() as receiver:
        finished(store, "op-1", clock, notify_url=receiver.url + "?tenant=7")
        assert deliver_due(store, clock=clock, notify_secret=SECRET) == 1
    (got,) = receiver.received
    entry = entry_of(store, "op-1", Channel.WEBHOOK)
    assert got.path == "/hook?tenant=7"
    assert got.body == json.dumps(entry.payload, separators=(",", ":")).encode()
    assert got.payload["type"] == "operation.completed"
    assert got.payload["data"]["outcome"] == "succeeded"
    assert got.headers["content-type"] == "application/json"
    assert got.headers["webhook-id"] == entry.delivery_id
    assert got.headers["webhook-signature"].startswith("v1,")
    assert got.timestamp == str(int(clock.now().timestamp()))


@pytest.mark.parametrize(("status", "delivered"), [(204, True), (302, False), (404, False)])
def test_only_a_2xx_from_a_real_receiver_delivers_and_redirects_are_not_followed(
    status: int, delivered: bool
) -> None:
    """204 delivers; a 302 is a failed attempt (its Location is not followed); a 404 too."""
    clock = real_now()
    store = MemoryStore()
    with receiving([status]) as receiver:
        finished(store, "op-1", clock, notify_url=receiver.url)
        deliver_due(store, clock=clock, notify_secret=SECRET)
    entry = entry_of(store, "op-1", Channel.WEBHOOK)
    assert [r.path for r in receiver.received] == ["/hook"]
    assert (entry.status is OutboxStatus.DELIVERED) is delivered
    assert entry.last_error == (None if delivered else f"HTTP {status}")


def test_a_timeout_is_a_failed_attempt_and_the_post_has_a_10s_timeout() -> None:
    """Every part of the POST's timeout is 10 s (and the whole attempt's, below); a
    timeout is a failed attempt."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-1", clock, notify_url="https://hooks.example/in")
    timeouts: list[object] = []

    def slow(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"])
        raise httpx.ReadTimeout("timed out", request=request)

    async def deliver() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(slow)) as client:
            await deliver_due_async(store, clock=clock, client=client, notify_secret=SECRET)

    anyio.run(deliver)
    entry = entry_of(store, "op-1", Channel.WEBHOOK)
    assert timeouts == [{"connect": 10.0, "read": 10.0, "write": 10.0, "pool": 10.0}]
    assert entry.status is OutboxStatus.PENDING
    assert entry.last_error == "ReadTimeout: timed out"


# --- the whole attempt's deadline -----------------------------------------------------

QUICK_S = 0.5
"""A small whole-attempt timeout, so that the tests below take its real time only."""


def deliver_blocking(store: MemoryStore, clock: FakeClock) -> int:
    """One blocking pass of webhooks with the small whole timeout."""
    return deliver_due(
        store, clock=clock, notify_secret=SECRET, attempt_timeout_s=QUICK_S, lease_s=10.0
    )


def deliver_async(store: MemoryStore, clock: FakeClock) -> int:
    """One async pass of webhooks with the small whole timeout."""
    return anyio.run(
        partial(
            deliver_due_async,
            store,
            clock=clock,
            notify_secret=SECRET,
            attempt_timeout_s=QUICK_S,
            lease_s=10.0,
        )
    )


@pytest.mark.parametrize("deliver", [deliver_blocking, deliver_async], ids=["blocking", "async"])
def test_a_receiver_that_trickles_its_headers_is_cut_off_at_the_whole_timeout(
    deliver: Callable[[MemoryStore, FakeClock], int],
) -> None:
    """A receiver that sends a header line every 0.05 s and never ends its headers (no
    per-read timeout ever fires): the attempt is cut off after its whole timeout, the
    connection closed, and it is a failed attempt (retried) with one line."""
    clock = FakeClock()
    store = MemoryStore()
    with trickling() as trickler:
        finished(store, "op-1", clock, notify_url=trickler.url + "?key=K9Z")
        started_s = time.monotonic()
        assert deliver(store, clock) == 0
        took_s = time.monotonic() - started_s
        assert trickler.cut.wait(20), "the connection was left open"
    entry = entry_of(store, "op-1", Channel.WEBHOOK)
    assert trickler.requests == 1
    assert QUICK_S <= took_s < 20.0  # the trickle never ends: only the timeout cut it
    assert (entry.status, entry.attempts, entry.lease_owner) == (OutboxStatus.PENDING, 1, None)
    assert entry.last_error == "TimeoutError: the attempt took more than 0.5 s"
    assert entry.next_attempt_at > clock.now()


def test_a_slow_receiver_holds_one_of_8_slots_while_the_others_are_delivered() -> None:
    """An async pass: 7 trickling receivers claimed first and one good one after them;
    the good one is delivered while the slow ones are still trickling (entries are
    attempted 8 at a time), and the slow ones are cut off at the whole timeout."""
    clock = real_now()
    store = MemoryStore()
    with trickling() as trickler, receiving() as receiver:
        for n in range(7):
            finished(store, f"op-slow-{n}", clock, notify_url=trickler.url)
        clock.advance(1)
        finished(store, "op-good", clock, notify_url=receiver.url)
        clock.advance(1)
        assert deliver_async(store, clock) == 1
        assert trickler.cut.wait(20)
        cut_s = min(trickler.cut_at_s)
    assert trickler.requests == 7
    (good,) = receiver.received
    assert good.at_s < cut_s
    assert entry_of(store, "op-good", Channel.WEBHOOK).status is OutboxStatus.DELIVERED
    slow = [e for e in store.outbox(limit=100) if e.operation_id.startswith("op-slow")]
    assert {(e.attempts, e.last_error) for e in slow} == {
        (1, "TimeoutError: the attempt took more than 0.5 s")
    }


def test_the_async_deliverer_attempts_at_most_8_entries_at_once() -> None:
    """20 async callbacks that each wait for the others: 8 run at once, never more; all
    20 are delivered in one pass."""
    clock = FakeClock()
    store = MemoryStore()
    for n in range(20):
        finished(store, f"op-{n:02}", clock, callback=True)
    running = peak = 0
    full = anyio.Event()

    async def crowded(completion: Completion) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 8:
            full.set()
        await full.wait()
        await anyio.lowlevel.checkpoint()
        running -= 1

    async def deliver() -> int:
        return await deliver_due_async(store, clock=clock, on_complete=crowded, limit=20)

    assert anyio.run(deliver) == 20
    assert peak == 8


@pytest.mark.parametrize("shell", ["blocking", "async"])
def test_an_async_callback_past_the_whole_timeout_is_a_failed_attempt(shell: str) -> None:
    """An awaitable on_complete that never completes is cancelled after the attempt's
    whole timeout: a failed attempt, retried, one line."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-1", clock, callback=True)

    async def stuck(completion: Completion) -> None:
        await anyio.sleep_forever()

    if shell == "blocking":
        delivered = deliver_due(
            store, clock=clock, on_complete=stuck, attempt_timeout_s=0.2, lease_s=6.0
        )
    else:
        delivered = anyio.run(
            partial(
                deliver_due_async,
                store,
                clock=clock,
                on_complete=stuck,
                attempt_timeout_s=0.2,
                lease_s=6.0,
            )
        )
    assert delivered == 0
    entry = entry_of(store, "op-1", Channel.CALLBACK)
    assert (entry.status, entry.attempts) == (OutboxStatus.PENDING, 1)
    assert entry.last_error == "TimeoutError: the attempt took more than 0.2 s"


def test_an_entry_is_attempted_only_while_the_lease_outlasts_a_whole_attempt() -> None:
    """A 2 s whole timeout and a 10 s lease: an attempt starts only with at least 7 s
    (the timeout and 5 s) of lease left. Callables taking 2 s each: the first two are
    attempted (10 s, then 8 s left), the third (6 s left) and the rest are let go
    unattempted, every attempt recorded under the lease; the next pass takes them."""
    clock = FakeClock()
    store = MemoryStore()
    for n in range(5):
        finished(store, f"op-{n}", clock, callback=True)
        clock.advance(0.001)
    got: list[str] = []

    def two_seconds(completion: Completion) -> None:
        got.append(completion.operation_id)
        clock.advance(2)

    deliver = partial(
        deliver_due, store, clock=clock, on_complete=two_seconds, attempt_timeout_s=2.0
    )
    assert deliver(lease_s=10.0) == 2
    assert got == ["op-0", "op-1"]
    rest = store.outbox(status=OutboxStatus.PENDING, limit=100)
    assert {(e.attempts, e.lease_owner) for e in rest} == {(0, None)}
    assert len(rest) == 3
    assert deliver(lease_s=10.0) == 2
    with pytest.raises(UsageError, match="more than 7 seconds"):
        deliver(lease_s=7.0)


def test_the_blocking_deliverer_posts_from_inside_a_running_event_loop() -> None:
    """deliver_due called from code on an event loop (a notebook's, say): its webhook is
    sent on the helper thread's own loop and delivered."""
    clock = real_now()
    store = MemoryStore()

    async def inside() -> int:
        return deliver_due(store, clock=clock, notify_secret=SECRET)

    with receiving() as receiver:
        finished(store, "op-1", clock, notify_url=receiver.url)
        assert anyio.run(inside) == 1
    assert receiver.ids() == [completion_delivery_id("op-1", Channel.WEBHOOK)]


# --- secrets never in errors or logs --------------------------------------------------


def test_neither_the_secret_nor_the_query_is_in_last_error_or_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An exception naming the URL (with its query) and the secret: last_error and the
    log line keep its class and say [redacted]; neither value appears."""
    clock = FakeClock()
    store = MemoryStore()
    target = "https://hooks.example/in?token=Q-SECRET-42"
    finished(store, "op-1", clock, notify_url=target)

    def leaky(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url} signing with {SECRET}")

    async def deliver() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(leaky)) as client:
            await deliver_due_async(store, clock=clock, client=client, notify_secret=SECRET)

    with caplog.at_level(logging.DEBUG, logger="waitbound"):
        anyio.run(deliver)
    error = entry_of(store, "op-1", Channel.WEBHOOK).last_error
    assert error is not None
    assert error.startswith("ConnectError: cannot reach [redacted]")
    for text in (error, caplog.text):
        assert "Q-SECRET-42" not in text
        assert SECRET.removeprefix("whsec_") not in text
    assert "https://hooks.example/…" in caplog.text  # the origin only


def test_a_connection_error_to_a_real_port_keeps_one_line_without_the_query() -> None:
    """Nothing listens: a ConnectError, one line, the URL's query nowhere in it."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-1", clock, notify_url=f"http://127.0.0.1:{closed_port()}/h?key=K9Z")
    deliver_due(store, clock=clock, notify_secret=SECRET)
    error = entry_of(store, "op-1", Channel.WEBHOOK).last_error
    assert error is not None
    assert error.startswith("ConnectError")
    assert "\n" not in error
    assert "K9Z" not in error


def test_attempt_of_error_redacts_every_hidden_value_and_cuts_to_200_chars() -> None:
    """Hidden values become [redacted]; control characters and newlines are flattened."""
    line = attempt_of_error(ValueError("a\nsecret-1 " + "x" * 500), ["secret-1"]).error
    assert line is not None
    assert line.startswith("ValueError: a [redacted] x")
    assert len(line) == 200


def test_a_callback_exception_naming_the_secret_is_redacted() -> None:
    """A callable that raises with the notify secret in its message: redacted."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-1", clock, callback=True)

    def careless(completion: Completion) -> None:
        raise KeyError(f"bad {SECRET}")

    deliver_due(store, clock=clock, notify_secret=SECRET, on_complete=careless)
    error = entry_of(store, "op-1", Channel.CALLBACK).last_error
    assert error is not None
    assert SECRET.removeprefix("whsec_") not in error
    assert "[redacted]" in error


# --- callbacks ------------------------------------------------------------------------


def test_a_sync_callback_gets_the_completion_once() -> None:
    """on_complete(Completion): the stable id, the operation id and its final outcome."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-1", clock, callback=True)
    got: list[Completion] = []
    assert deliver_due(store, clock=clock, on_complete=got.append) == 1
    assert deliver_due(store, clock=clock, on_complete=got.append) == 0
    (completion,) = got
    assert completion.delivery_id == completion_delivery_id("op-1", Channel.CALLBACK)
    assert completion.operation_id == "op-1"
    assert completion.outcome.outcome is OutcomeKind.SUCCEEDED
    assert completion.outcome.result == 5
    assert completion.replay_of is None
    assert entry_of(store, "op-1", Channel.CALLBACK).status is OutboxStatus.DELIVERED


def test_an_async_callback_is_awaited_by_both_deliverers() -> None:
    """An async on_complete: awaited by deliver_due_async, run by deliver_due."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-a", clock, callback=True)
    finished(store, "op-b", clock, callback=True)
    got: list[str] = []

    async def note(completion: Completion) -> None:
        await anyio.sleep(0)
        got.append(completion.operation_id)

    first = anyio.run(partial(deliver_due_async, store, clock=clock, on_complete=note, limit=1))
    second = deliver_due(store, clock=clock, on_complete=note)
    assert (first, second) == (1, 1)
    assert sorted(got) == ["op-a", "op-b"]


def test_a_raising_callback_is_retried_then_delivered() -> None:
    """The first call raises (a failed attempt, retried at its next attempt); the second
    returns: delivered after 2 attempts, with the same delivery id."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-1", clock, callback=True)
    ids: list[str] = []

    def flaky(completion: Completion) -> None:
        ids.append(completion.delivery_id)
        if len(ids) == 1:
            raise ConnectionError("queue unavailable")

    deliver_due(store, clock=clock, on_complete=flaky, rng=random.Random(3))
    entry = entry_of(store, "op-1", Channel.CALLBACK)
    assert (entry.status, entry.attempts) == (OutboxStatus.PENDING, 1)
    assert entry.last_error == "ConnectionError: queue unavailable"
    until_due(clock, entry)
    assert deliver_due(store, clock=clock, on_complete=flaky) == 1
    entry = entry_of(store, "op-1", Channel.CALLBACK)
    assert (entry.status, entry.attempts) == (OutboxStatus.DELIVERED, 2)
    assert len(set(ids)) == 1
    assert len(ids) == 2


# --- which entries a deliverer takes --------------------------------------------------


def test_only_the_channels_a_deliverer_can_serve_are_claimed() -> None:
    """Without a secret, webhook entries are left alone (no attempt, no lease); without
    a callable, callback entries are; with neither, nothing is claimed."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-1", clock, notify_url="https://hooks.example/in", callback=True)
    assert deliver_due(store, clock=clock) == 0
    assert deliver_due(store, clock=clock, on_complete=lambda c: None) == 1
    webhook = entry_of(store, "op-1", Channel.WEBHOOK)
    assert (webhook.status, webhook.attempts, webhook.lease_owner) == (
        OutboxStatus.PENDING, 0, None,
    )  # fmt: skip


def test_one_bad_entry_never_stops_the_others() -> None:
    """A callback entry whose operation is gone and a webhook entry without a target
    each count a failed attempt; the good entry beside them is delivered."""
    clock = FakeClock()
    store = MemoryStore()
    now = clock.now()
    for delivery_id, channel in (("dlv_gone", Channel.CALLBACK), ("dlv_notarget", Channel.WEBHOOK)):
        store.add_outbox(
            OutboxEntry(
                delivery_id=delivery_id, operation_id="op-gone", channel=channel, target=None,
                payload={}, created_at=now - timedelta(seconds=1),
                next_attempt_at=now - timedelta(seconds=1),
            )
        )  # fmt: skip
    finished(store, "op-1", clock, callback=True)
    got: list[Completion] = []
    assert deliver_due(store, clock=clock, notify_secret=SECRET, on_complete=got.append) == 1
    assert [c.delivery_id for c in got] == [completion_delivery_id("op-1", Channel.CALLBACK)]
    gone = store.get_outbox("dlv_gone")
    notarget = store.get_outbox("dlv_notarget")
    assert gone is not None
    assert notarget is not None
    assert (gone.attempts, gone.last_error) == (1, "operation op-gone is not in the store")
    assert (notarget.attempts, notarget.last_error) == (1, "the entry names no target URL")


def test_a_slow_attempt_leaves_the_rest_to_the_next_pass_instead_of_outliving_its_lease() -> None:
    """A callable that takes 10 s of a 20 s lease: the next entry has less than 15 s of
    lease left, so it is let go unattempted (no other deliverer can take it over
    mid-attempt) and the next pass delivers it."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-1", clock, callback=True)
    clock.advance(1)
    finished(store, "op-2", clock, callback=True)
    got: list[str] = []

    def slow(completion: Completion) -> None:
        got.append(completion.operation_id)
        clock.advance(10)

    assert deliver_due(store, clock=clock, on_complete=slow, lease_s=20) == 1
    left = entry_of(store, "op-2", Channel.CALLBACK)
    assert (left.attempts, left.lease_owner) == (0, None)
    assert deliver_due(store, clock=clock, on_complete=slow, lease_s=20) == 1
    assert got == ["op-1", "op-2"]


def test_two_racing_deliverers_deliver_each_completion_once() -> None:
    """Two threads draining one store at once, four entries a claim: each of 40
    callbacks is called exactly once, and every entry ends delivered."""
    clock = FakeClock()
    store = MemoryStore()
    for n in range(40):
        finished(store, f"op-{n}", clock, callback=True)
    seen: Counter[str] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(2)

    def note(completion: Completion) -> None:
        with lock:
            seen[completion.delivery_id] += 1

    def drain(n: int) -> None:
        start.wait()
        while deliver_due(
            store, owner=f"w{n}", clock=clock, rng=random.Random(n), on_complete=note, limit=4
        ):
            pass

    threads = [threading.Thread(target=drain, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(seen) == 40
    assert set(seen.values()) == {1}
    assert {e.status for e in store.outbox(limit=100)} == {OutboxStatus.DELIVERED}


def test_two_racing_webhook_deliverers_post_each_completion_once() -> None:
    """Two threads, one real receiver: every operation's webhook-id arrives once."""
    clock = real_now()
    store = MemoryStore()
    with receiving() as receiver:
        for n in range(20):
            finished(store, f"op-{n}", clock, notify_url=receiver.url)
        start = threading.Barrier(2)

        def drain(n: int) -> None:
            start.wait()
            while deliver_due(store, owner=f"w{n}", clock=clock, notify_secret=SECRET, limit=3):
                pass

        threads = [threading.Thread(target=drain, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        ids = receiver.ids()
    assert receiver.rejected == []
    assert len(ids) == 20
    assert len(set(ids)) == 20


def test_one_operations_delivery_takes_only_its_own_entries() -> None:
    """operation_id: only this operation's entry is claimed, even behind 29 older due
    ones and with a claim of one; the others are left untouched, and only this
    operation's callback is called."""
    clock = FakeClock()
    store = MemoryStore()
    for n in range(30):
        finished(store, f"op-{n:02}", clock, callback=True)
        clock.advance(1)
    got: list[Completion] = []
    assert (
        deliver_due(store, clock=clock, on_complete=got.append, limit=1, operation_id="op-29") == 1
    )
    assert [c.operation_id for c in got] == ["op-29"]
    rest = store.outbox(status=OutboxStatus.PENDING, limit=100)
    assert len(rest) == 29
    assert {(e.attempts, e.lease_owner) for e in rest} == {(0, None)}


# --- replay ---------------------------------------------------------------------------


def test_replay_is_a_new_delivery_with_replay_of_pending_now() -> None:
    """A replay: a new random dlv_ id, replay_of the original, same channel, target and
    payload, pending now with no attempts; the original is unchanged; delivered again
    under its new id."""
    clock = FakeClock()
    store = MemoryStore()
    finished(store, "op-1", clock, callback=True)
    got: list[Completion] = []
    deliver_due(store, clock=clock, on_complete=got.append)
    original = entry_of(store, "op-1", Channel.CALLBACK)
    clock.advance(60)
    replay = replay_delivery(store, original.delivery_id, now=clock.now())
    assert re.fullmatch(r"dlv_[0-9a-f]{32}", replay.delivery_id)
    assert replay.delivery_id != original.delivery_id
    assert replay.replay_of == original.delivery_id
    assert (replay.channel, replay.target, replay.payload) == (
        original.channel, original.target, original.payload,
    )  # fmt: skip
    assert (replay.status, replay.attempts) == (OutboxStatus.PENDING, 0)
    assert replay.next_attempt_at == clock.now()
    assert store.get_outbox(original.delivery_id) == original
    assert replay_delivery(store, original.delivery_id, now=clock.now()).delivery_id not in {
        replay.delivery_id,
        original.delivery_id,
    }
    deliver_due(store, clock=clock, on_complete=got.append)
    assert [c.replay_of for c in got[1:]] == [original.delivery_id] * 2
    assert got[1].delivery_id != got[2].delivery_id


def test_replay_of_an_unknown_id_is_refused() -> None:
    """An id the outbox does not hold: UsageError, nothing added."""
    store = MemoryStore()
    with pytest.raises(UsageError, match="no delivery 'dlv_nope'"):
        replay_delivery(store, "dlv_nope", now=FakeClock().now())
    assert store.outbox() == []


# --- refusals -------------------------------------------------------------------------


def test_a_missing_standardwebhooks_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Webhooks without the library: one UsageError naming pip install 'waitbound[serve]'."""
    monkeypatch.setitem(sys.modules, "standardwebhooks", None)
    with pytest.raises(UsageError, match=re.escape("pip install 'waitbound[serve]'")):
        deliver_due(MemoryStore(), notify_secret=SECRET)


def test_a_secret_that_cannot_sign_is_refused_without_showing_it() -> None:
    """An empty whsec_ secret: UsageError; the message does not quote it."""
    with pytest.raises(UsageError, match="not a Standard Webhooks secret") as caught:
        deliver_due(MemoryStore(), notify_secret="whsec_!!")
    assert "!!" not in str(caught.value)


WEAK_NOTIFY = ["whsec_AAAA", "whsec_" + base64.b64encode(b"fifteen-bytes!!").decode()]


@pytest.mark.parametrize("weak", WEAK_NOTIFY)
def test_a_notify_secret_of_a_short_key_is_refused_from_the_environment_too(
    monkeypatch: pytest.MonkeyPatch, weak: str
) -> None:
    """A notify secret whose key is under 16 bytes (3, 15) cannot sign: given, or from
    ``$WAITBOUND_NOTIFY_SECRET``, one line naming the variable and never the value."""
    for attempt in (
        lambda: webhook_signer(weak),
        lambda: resolve_notify_secret("https://hooks.example/done", weak),
    ):
        with pytest.raises(UsageError, match="at least 16 bytes") as caught:
            attempt()
        assert weak not in str(caught.value)
        assert weak[6:] not in str(caught.value)
    monkeypatch.setenv(NOTIFY_SECRET_ENV, weak)
    with pytest.raises(UsageError, match=r"\$WAITBOUND_NOTIFY_SECRET.*at least 16 bytes"):
        resolve_notify_secret("https://hooks.example/done", None)
    webhook_signer(SECRET)  # a 24-byte key signs


@pytest.mark.parametrize(
    ("limit", "lease_s", "timeout_s"), [(0, 30.0, 10.0), (16, 15.0, 10.0), (16, 30.0, 0.0)]
)
def test_a_limit_lease_or_timeout_out_of_range_is_refused(
    limit: int, lease_s: float, timeout_s: float
) -> None:
    """limit >= 1; a lease must outlast one attempt's whole timeout and its margin
    (> 15 s by default); the timeout is more than 0."""
    with pytest.raises(UsageError):
        deliver_due(
            MemoryStore(),
            on_complete=print,
            limit=limit,
            lease_s=lease_s,
            attempt_timeout_s=timeout_s,
        )


def test_a_killed_local_deliverers_lease_is_let_go_at_once() -> None:
    """An entry leased by a process on this machine that no longer exists is let go (no
    attempt counted); one leased by another machine's deliverer waits out its lease."""
    import socket

    from waitbound._engine._delivery import adopt_orphans
    from waitbound._model._push import Channel, OutboxEntry

    store = MemoryStore()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    later = now + timedelta(seconds=30)
    gone = f"{socket.gethostname()}:{2**22 + 12345}:dead"  # above Linux's pid_max default
    for delivery_id, owner in (("dlv_local", gone), ("dlv_remote", "elsewhere:1:x")):
        store.add_outbox(
            OutboxEntry(
                delivery_id=delivery_id, operation_id="op-1", channel=Channel.WEBHOOK,
                target="https://me.example/hook", payload={"type": "operation.completed"},
                created_at=now, next_attempt_at=now, lease_owner=owner, lease_expires_at=later,
            )
        )  # fmt: skip
    assert adopt_orphans(store, now) == 1
    local, remote = store.get_outbox("dlv_local"), store.get_outbox("dlv_remote")
    assert local is not None
    assert remote is not None
    assert (local.lease_owner, local.attempts, local.status) == (None, 0, OutboxStatus.PENDING)
    assert remote.lease_owner == "elsewhere:1:x"
