"""One bad operation stops only itself: its failure is recorded on it, the rest go on.

Also the budget and the reasons that hostile answers and our own crashes must get right.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import httpx
import pytest

import waitbound._rules._controller
from tests.fakes import FakeClock, ScriptedProvider, work_virtually
from waitbound import (
    MemoryStore,
    Operation,
    OutcomeKind,
    Phase,
    Policy,
    ProfileError,
    Reason,
    Submission,
    WorkerSettings,
    parse_profile,
    run,
    start,
    wait,
)
from waitbound._model._observation import Observation
from waitbound._rules._controller import Send, plan

PROFILE = parse_profile(
    {"state": "status", "pending": ["running"], "succeeded": ["done"], "result_url": "result_url"}
)
FAST = Policy(base_delay_s=0.02, max_delay_s=0.05, min_delay_s=0.01, deadline_s=30)


def _many(store: MemoryStore, n: int, clock: FakeClock) -> list[str]:
    return [
        start(
            Operation(status_url=f"http://p.test/jobs/{i}", profile=PROFILE, policy=FAST),
            store=store,
            operation_id=f"op-{i}",
            clock=clock,
        ).operation_id
        for i in range(n)
    ]


async def _answer(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/jobs/3":
        raise RuntimeError("a transport bug on this request only")
    return httpx.Response(200, json={"status": "done"})


def _work(store: MemoryStore, clock: FakeClock, handler: Any) -> list[tuple[str, Exception]]:
    """One worker until idle, on virtual time that moves only when it is idle."""
    errors: list[tuple[str, Exception]] = []
    work_virtually(
        store,
        clock,
        handler,
        settings=WorkerSettings(until_idle=True, idle_s=0.01),
        on_error=lambda op, exc: errors.append((op, exc)),
    )
    return errors


def test_an_exception_sending_one_operation_escalates_it_and_the_worker_goes_on() -> None:
    """A transport that raises for one of eight operations: that one escalates
    integration_failure naming the error; the seven others succeed; nothing escapes."""
    store, clock = MemoryStore(), FakeClock()
    ids = _many(store, 8, clock)
    errors = _work(store, clock, _answer)
    assert errors == []
    outcomes = {op: store.get(op).to_outcome() for op in ids}  # type: ignore[union-attr]
    bad = outcomes.pop("op-3")
    assert bad.outcome is OutcomeKind.ESCALATED
    assert bad.reason is Reason.INTEGRATION_FAILURE
    assert "RuntimeError" in str(bad.error)
    assert bad.status_requests_used == 1  # the reserved request stays counted
    assert {o.outcome for o in outcomes.values()} == {OutcomeKind.SUCCEEDED}


def test_a_controller_failure_on_one_operation_is_recorded_on_it_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug reading one operation's answer (injected into the controller) escalates
    that operation with the error named and its lease released; the others succeed."""
    real = waitbound._rules._controller.observe

    def observe(record: Any, observation: Observation, *, rng: random.Random, **kw: Any) -> Any:
        if record.operation_id == "op-5":
            raise KeyError("injected")
        return real(record, observation, rng=rng, **kw)

    monkeypatch.setattr("waitbound._engine._driver.observe", observe)
    store, clock = MemoryStore(), FakeClock()
    ids = _many(store, 8, clock)

    async def done(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": "done"})

    assert _work(store, clock, done) == []
    bad = store.get("op-5")
    assert bad is not None
    assert bad.reason is Reason.INTEGRATION_FAILURE
    assert bad.lease_owner is None
    assert bad.in_flight is None
    assert "KeyError" in str(bad.error)
    story = [s.event.kind for s in store.audit("op-5")]
    assert story[-1] == "finished"
    others = [store.get(op) for op in ids if op != "op-5"]
    assert all(r is not None and r.outcome is OutcomeKind.SUCCEEDED for r in others)


def test_a_blocking_wait_records_a_transport_exception_instead_of_raising() -> None:
    """The sync path: a transport raising a plain Exception ends the wait as
    integration_failure, one clear outcome, never a traceback."""
    clock = FakeClock()

    def broken(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("a bug in the transport")

    store = MemoryStore()
    outcome = wait(
        Operation(status_url="http://p.test/jobs/1", profile=PROFILE, policy=FAST),
        store=store,
        client=httpx.Client(transport=httpx.MockTransport(broken)),
        clock=clock,
        sleep=clock.sleep,
    )
    assert outcome.reason is Reason.INTEGRATION_FAILURE
    assert "RuntimeError" in str(outcome.error)


def test_a_result_answer_lost_to_our_own_crash_is_result_unconfirmed() -> None:
    """A result request reserved, then the process stopped: result_unconfirmed (our
    fault, not the provider's), with the option to fetch it again; no second fetch."""
    store = MemoryStore()
    clock = FakeClock()
    record = store.get(_many(store, 1, clock)[0])
    assert record is not None
    fetching = store.save(
        record.evolve(
            ending=record.ending.evolve(phase=Phase.FETCHING_RESULT),
            submission=record.submission.evolve(result_url="http://p.test/result"),
            lease=record.lease.evolve(in_flight="result"),
            counters=record.counters.evolve(result_requests_used=1, status_requests_used=3),
            answer=record.answer.evolve(provider_state="done"),
        ),
        [],
    )
    decision = plan(fetching, clock.now() + timedelta(seconds=1), owner="w2")
    assert not isinstance(decision, Send)
    outcome = decision.transition.record.to_outcome()  # type: ignore[union-attr]
    assert outcome.reason is Reason.RESULT_UNCONFIRMED
    assert outcome.options == ("fetch_result_again", "abandon")
    assert "Do not submit the job again" in str(outcome.error)
    assert outcome.result_requests_used == 1


def test_submit_and_cancel_requests_count_against_the_request_budget() -> None:
    """Every request spends the budget: a run with max_requests 3 sends one submit and
    two status requests, then escalates request_budget_exhausted."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {
            "/v1/jobs": [(202, {"id": "j1"}, {"Location": "http://p.test/v1/jobs/j1"})],
            "/v1/jobs/j1": [(200, {"status": "running"})],
        },
    )
    store = MemoryStore()
    outcome = run(
        Submission(
            method="POST",
            url="http://p.test/v1/jobs",
            profile=PROFILE,
            policy=Policy(base_delay_s=1, max_delay_s=2, max_requests=3),
            body=b"{}",
        ),
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(3),
    )
    assert outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert provider.count("/v1/jobs") == 1
    assert provider.count("/v1/jobs/j1") == 2
    reserved = [s.event.summary for s in store.audit(outcome.operation_id)]
    assert any("reserved submit request 1 of 3" in line for line in reserved)
    assert any("reserved status request 3 of 3" in line for line in reserved)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("foo(bar)", "unknown function foo()"),
        ("lenght(@)", "unknown function lenght()"),
        ("length(a, b)", "length() takes 1 argument(s), got 2"),
        ("not_null()", "not_null() takes at least 1 argument(s), got 0"),
        ("items[?contains(name)]", "contains() takes 2 argument(s), got 1"),
    ],
)
def test_profile_expressions_calling_unknown_functions_are_refused_when_loaded(
    expression: str, words: str
) -> None:
    """An unknown JMESPath function or a wrong argument count fails at load time with
    one line naming the key, instead of reading null forever."""
    for key in ("result", "error", "output_error"):
        with pytest.raises(ProfileError) as raised:
            parse_profile({"state": "status", "pending": ["running"], key: expression})
        message = str(raised.value)
        assert f"{key} = " in message
        assert words in message
        assert "\n" not in message
