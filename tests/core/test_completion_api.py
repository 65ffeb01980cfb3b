"""The completion opt-in on the public API: ``webhook`` and ``notify_url`` on an
operation, ``on_complete`` and ``notify_secret`` on wait / submit / run, the in-process
delivery after the outcome, and a worker delivering what a crash left pending."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import pytest

from tests.core.completion_receiver import SECRET, receiving
from tests.core.harness import PROFILE, URL
from tests.fakes import Answer, FakeClock, ScriptedProvider, work_virtually
from waitbound import (
    Channel,
    Completion,
    MemoryStore,
    Operation,
    OutboxStatus,
    OutcomeKind,
    Policy,
    Submission,
    UsageError,
    WorkerSettings,
    parse_profile,
    run,
    start,
    submit,
    wait,
    wait_async,
    work,
)
from waitbound._model._push import completion_delivery_id

SCRIPT = {
    "/status": [(200, {"status": "running", "id": "j-1"}), (200, {"status": "done", "output": 7})]
}
SUBMIT_SCRIPT: dict[str, list[Answer]] = {
    "/jobs": [(202, {"id": "j-1"}, {"Location": "/status"})],
    "/status": [(200, {"status": "done", "output": 7})],
}
ENV = "WAITBOUND_NOTIFY_SECRET"


@pytest.fixture(autouse=True)
def _no_secret_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


def real_now() -> FakeClock:
    """A fake clock starting now: the receiver checks the signed timestamp's age."""
    return FakeClock(start=datetime.now(UTC).replace(microsecond=0))


def operation(**push: Any) -> Operation:
    return Operation(status_url=URL, profile=parse_profile(PROFILE), **push)


def wait_on(
    store: MemoryStore, clock: FakeClock, op: Operation | None = None, **kwargs: Any
) -> Any:
    provider = ScriptedProvider(clock, SCRIPT)
    return wait(
        op or operation(),
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(1),
        **kwargs,
    )


# --- on_complete ----------------------------------------------------------------------


def test_wait_with_on_complete_calls_it_once_with_the_outcome() -> None:
    """wait(on_complete=f): f gets one Completion with the final outcome, after the
    outcome is stored; the callback entry is delivered."""
    clock = FakeClock()
    store = MemoryStore()
    got: list[Completion] = []
    outcome = wait_on(store, clock, on_complete=got.append)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    (completion,) = got
    assert completion.operation_id == outcome.operation_id
    assert completion.outcome == outcome
    assert completion.delivery_id == completion_delivery_id(outcome.operation_id, Channel.CALLBACK)
    record = store.get(outcome.operation_id)
    assert record is not None
    assert record.push.callback
    (entry,) = store.outbox(operation_id=outcome.operation_id)
    assert entry.status is OutboxStatus.DELIVERED


def test_wait_async_awaits_an_async_on_complete() -> None:
    """wait_async(on_complete=async f): awaited once with the outcome."""
    clock = FakeClock()
    store = MemoryStore()
    provider = ScriptedProvider(clock, SCRIPT)
    got: list[Completion] = []

    async def note(completion: Completion) -> None:
        got.append(completion)

    async def main() -> Any:
        async with provider.async_client() as client:
            return await wait_async(
                operation(), store=store, client=client, clock=clock,
                sleep=clock.async_sleep, rng=random.Random(1), on_complete=note,
            )  # fmt: skip

    outcome = anyio.run(main)
    assert [c.outcome for c in got] == [outcome]


def test_run_with_on_complete_calls_it_once() -> None:
    """run(on_complete=f): submitted, waited on, f called once with the outcome."""
    clock = FakeClock()
    store = MemoryStore()
    provider = ScriptedProvider(clock, SUBMIT_SCRIPT)
    got: list[Completion] = []
    outcome = run(
        Submission(method="POST", url="http://provider.test/jobs", profile=parse_profile(PROFILE)),
        store=store, client=provider.client(), clock=clock, sleep=clock.sleep,
        rng=random.Random(1), on_complete=got.append,
    )  # fmt: skip
    assert outcome.result == 7
    assert [c.outcome.result for c in got] == [7]


def test_without_on_complete_nothing_is_owed() -> None:
    """A plain wait writes no outbox entry."""
    store = MemoryStore()
    outcome = wait_on(store, FakeClock())
    assert store.outbox(operation_id=outcome.operation_id) == []


# --- notify_url -----------------------------------------------------------------------


def test_wait_with_notify_url_sends_exactly_one_signed_delivery() -> None:
    """wait on an operation with notify_url and a secret: the receiver verifies one
    delivery carrying the outcome, under the webhook entry's stable id."""
    clock = real_now()
    store = MemoryStore()
    with receiving() as receiver:
        outcome = wait_on(store, clock, operation(notify_url=receiver.url), notify_secret=SECRET)
    assert receiver.rejected == []
    assert receiver.ids() == [completion_delivery_id(outcome.operation_id, Channel.WEBHOOK)]
    data = receiver.received[0].payload["data"]
    assert (data["operation_id"], data["outcome"], data["result"]) == (
        outcome.operation_id, "succeeded", 7,
    )  # fmt: skip


def test_the_notify_secret_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No notify_secret argument: $WAITBOUND_NOTIFY_SECRET signs the delivery."""
    monkeypatch.setenv(ENV, SECRET)
    clock = real_now()
    with receiving() as receiver:
        wait_on(MemoryStore(), clock, operation(notify_url=receiver.url))
    assert len(receiver.ids()) == 1
    assert receiver.rejected == []


def _calls(store: MemoryStore, push: dict[str, Any]) -> list[Callable[[], object]]:
    clock = FakeClock()
    submission = Submission(
        method="POST", url="http://provider.test/jobs", profile=parse_profile(PROFILE), **push
    )
    provider = ScriptedProvider(clock, SUBMIT_SCRIPT)
    common: dict[str, Any] = {"store": store, "client": provider.client(), "clock": clock}
    return [
        lambda: wait(operation(**push), sleep=clock.sleep, **common),
        lambda: submit(submission, sleep=clock.sleep, **common),
        lambda: run(submission, sleep=clock.sleep, **common),
    ]


@pytest.mark.parametrize("call", [0, 1, 2], ids=["wait", "submit", "run"])
def test_notify_url_without_a_secret_is_refused_before_anything_is_stored(call: int) -> None:
    """notify_url, no notify_secret and no $WAITBOUND_NOTIFY_SECRET: UsageError naming
    the variable; no operation, no outbox entry."""
    store = MemoryStore()
    with pytest.raises(UsageError, match=r"\$WAITBOUND_NOTIFY_SECRET"):
        _calls(store, {"notify_url": "https://hooks.example/in"})[call]()
    assert store.recent() == []
    assert store.outbox() == []


@pytest.mark.parametrize(
    ("push", "message"),
    [
        ({"webhook": "Reports"}, "webhook receiver 'Reports' must be"),
        ({"webhook": "-x"}, "webhook receiver '-x' must be"),
        ({"webhook": "r" * 65}, "webhook receiver"),
        ({"notify_url": "ftp://hooks.example/in"}, "notify URL"),
        ({"notify_url": "https://user:pw@hooks.example/in"}, "credentials in a URL"),
        ({"notify_url": "/relative"}, "notify URL"),
    ],
)
def test_a_bad_webhook_name_or_notify_url_is_refused_and_nothing_stored(
    push: dict[str, Any], message: str
) -> None:
    """A receiver name outside [a-z0-9][a-z0-9_-]{0,63}, a notify URL that is not an
    absolute http(s) URL without credentials: UsageError, nothing stored."""
    for index in range(3):
        store = MemoryStore()
        with pytest.raises(UsageError, match=message) as caught:
            _calls(store, push)[index]()
        assert "pw@" not in str(caught.value)
        assert store.recent() == []


def test_webhook_and_notify_url_are_copied_into_the_record() -> None:
    """The opt-in is kept on the record's push part when it is created."""
    store = MemoryStore()
    handle = start(operation(webhook="reports", notify_url="https://hooks.example/in"), store=store)
    record = store.get(handle.operation_id)
    assert record is not None
    assert (record.push.webhook, record.push.notify_url, record.push.callback) == (
        "reports", "https://hooks.example/in", False,
    )  # fmt: skip


# --- a crash between the outcome and the delivery -------------------------------------


class Crash(BaseException):
    """The process dies here (not an Exception: nothing catches it)."""


def test_a_crash_mid_delivery_is_delivered_once_by_a_worker_after_the_lease() -> None:
    """The waiting process dies inside on_complete, after the final record was stored:
    the entry stays pending under its dead lease; once the lease expires, a worker with
    a callable delivers it, exactly once."""
    clock = FakeClock()
    store = MemoryStore()

    def dies(completion: Completion) -> None:
        raise Crash

    with pytest.raises(Crash):
        wait_on(store, clock, operation(), on_complete=dies)
    (record,) = store.recent()
    assert record.outcome is OutcomeKind.SUCCEEDED
    (entry,) = store.outbox()
    assert (entry.status, entry.attempts) == (OutboxStatus.PENDING, 0)
    got: list[Completion] = []
    settings = WorkerSettings(until_idle=True)
    work_virtually(store, clock, settings=settings, on_complete=got.append)
    assert got == [], "delivered while the dead process's lease still held it"
    clock.advance(31)
    for _ in range(2):
        work_virtually(store, clock, settings=settings, on_complete=got.append)
    assert [c.delivery_id for c in got] == [entry.delivery_id]
    assert got[0].outcome == record.to_outcome()
    assert store.outbox()[0].status is OutboxStatus.DELIVERED


def test_a_callback_that_fails_once_in_wait_is_delivered_later_by_work() -> None:
    """on_complete raises in wait: the outcome is still returned and the entry stays
    pending; at its next attempt, work(on_complete=…) delivers it once."""
    clock = FakeClock()
    store = MemoryStore()

    def refuses(completion: Completion) -> None:
        raise RuntimeError("downstream busy")

    outcome = wait_on(store, clock, operation(), on_complete=refuses)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    (entry,) = store.outbox()
    assert (entry.status, entry.attempts) == (OutboxStatus.PENDING, 1)
    clock.advance((entry.next_attempt_at - clock.now()).total_seconds())
    got: list[Completion] = []
    settings = WorkerSettings(until_idle=True)
    for _ in range(2):
        work_virtually(store, clock, settings=settings, on_complete=got.append)
    assert [c.operation_id for c in got] == [outcome.operation_id]


def test_a_webhook_refused_in_wait_is_delivered_by_a_worker_under_the_same_id() -> None:
    """The receiver answers 500 to the waiting process; a worker with the secret sends
    it again at its next attempt, with the same webhook-id, and the 200 delivers it."""
    clock = real_now()
    store = MemoryStore()
    with receiving([500, 200]) as receiver:
        outcome = wait_on(store, clock, operation(notify_url=receiver.url), notify_secret=SECRET)
        (entry,) = store.outbox()
        assert (entry.status, entry.last_error) == (OutboxStatus.PENDING, "HTTP 500")
        clock.advance((entry.next_attempt_at - clock.now()).total_seconds())
        settings = WorkerSettings(until_idle=True)
        for _ in range(2):
            anyio.run(lambda: work(store, settings=settings, clock=clock, notify_secret=SECRET))
    wanted = completion_delivery_id(outcome.operation_id, Channel.WEBHOOK)
    assert receiver.ids() == [wanted, wanted]
    assert store.outbox()[0].status is OutboxStatus.DELIVERED


def test_a_worker_delivers_the_webhook_of_an_operation_it_drives_to_the_end() -> None:
    """A detached operation with notify_url: the worker polls it to success and then
    sends its one signed completion."""
    store = MemoryStore()
    fast = Policy(base_delay_s=0.02, max_delay_s=0.05, min_delay_s=0.01, deadline_s=30)
    with receiving() as receiver:
        op = Operation(
            status_url=URL, profile=parse_profile(PROFILE), policy=fast, notify_url=receiver.url
        )
        started = start(op, store=store)
        answers = iter([{"status": "running"}, {"status": "done", "output": 1}])

        def provider(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, json=next(answers, {"status": "done", "output": 1}))

        async def main() -> int:
            async with httpx.AsyncClient(transport=httpx.MockTransport(provider)) as client:
                return await work(
                    store,
                    settings=WorkerSettings(until_idle=True, idle_s=0.05),
                    client=client,
                    notify_secret=SECRET,
                )

        anyio.run(main)
    assert receiver.rejected == []
    assert receiver.ids() == [completion_delivery_id(started.operation_id, Channel.WEBHOOK)]
