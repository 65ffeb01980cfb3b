"""The drivers: durability across restarts, leases, late wake-ups, sync/async parity."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from itertools import pairwise
from typing import Any

import anyio
import httpx
import pytest

from tests.core.harness import PROFILE, SEED, URL, run
from tests.fakes import FakeClock, ScriptedProvider
from tests.records import with_fields
from waitbound import (
    HttpSettings,
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    Reason,
    Record,
    parse_profile,
    verify_chain,
    wait,
    wait_async,
)
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)

RUNNING = (200, {"status": "running", "id": "job-1"})
DONE = (200, {"status": "done", "output": 1})


def _operation(**policy: Any) -> Operation:
    return Operation(status_url=URL, profile=parse_profile(PROFILE), policy=Policy(**policy))


def _wait(store: MemoryStore, provider: ScriptedProvider, clock: FakeClock, **kw: object) -> object:
    return wait(
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(SEED),
        **kw,  # type: ignore[arg-type]
    )


class Crash(Exception):
    """Stands for the process being killed during a sleep."""


def test_restart_keeps_counters_deadline_and_next_poll_time() -> None:
    """A wait killed mid-sleep and resumed continues its budget and never polls early."""
    clock = FakeClock()
    store = MemoryStore()
    provider = ScriptedProvider(clock, {"/status": [RUNNING]})
    naps = 0

    def dying_sleep(seconds: float) -> None:
        nonlocal naps
        naps += 1
        if naps == 3:
            raise Crash
        clock.sleep(seconds)

    with pytest.raises(Crash):
        wait(
            _operation(max_requests=6, base_delay_s=1, max_delay_s=4),
            operation_id="op-1",
            store=store,
            client=provider.client(),
            clock=clock,
            sleep=dying_sleep,
            rng=random.Random(SEED),
        )
    before = store.get("op-1")
    assert before is not None
    assert before.status_requests_used == 3
    outcome = _wait(store, provider, clock, operation_id="op-1")
    assert outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED  # type: ignore[attr-defined]
    assert provider.count("/status") == 6
    assert provider.requests[3][1] >= before.next_poll_at
    after = store.get("op-1")
    assert after is not None
    assert after.deadline_at == before.deadline_at
    assert "resumed" in [e.event.kind for e in store.audit("op-1")]


def test_resume_with_new_flags_keeps_the_stored_budget() -> None:
    """Resuming with a bigger budget does not buy requests: the stored policy applies."""
    clock = FakeClock()
    store = MemoryStore()
    provider = ScriptedProvider(clock, {"/status": [RUNNING]})
    _wait(store, provider, clock, operation=_operation(max_requests=2), operation_id="op-2")
    outcome = _wait(
        store, provider, clock, operation=_operation(max_requests=50), operation_id="op-2"
    )
    assert outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED  # type: ignore[attr-defined]
    assert provider.count("/status") == 2


def test_a_finished_operation_sends_nothing_again() -> None:
    """Waiting again on a finished operation returns its outcome without any request."""
    clock = FakeClock()
    store = MemoryStore()
    provider = ScriptedProvider(clock, {"/status": [DONE]})
    first = _wait(store, provider, clock, operation=_operation(), operation_id="op-3")
    again = _wait(store, provider, clock, operation_id="op-3")
    assert again == first
    assert provider.count("/status") == 1


def test_a_lost_answer_stays_counted() -> None:
    """A crash after the reservation leaves the request counted; the resume says so."""
    clock = FakeClock()
    store = MemoryStore()
    provider = ScriptedProvider(clock, {"/status": [DONE]})
    record = store.create(
        with_fields(
            _record_for(clock),
            status_requests_used=1,
            in_flight="status",
            lease_owner="dead-worker",
            lease_expires_at=clock.now() + timedelta(seconds=5),
        ),
        [],
    )
    outcome = _wait(store, provider, clock, operation_id=record.operation_id)
    assert outcome.status_requests_used == 2  # type: ignore[attr-defined]
    assert sum(clock.sleeps) == pytest.approx(5.0)  # waited out the other worker's lease
    assert max(clock.sleeps) <= 1.0  # ...looking again every second
    assert "answer_lost" in [e.event.kind for e in store.audit(record.operation_id)]


def _record_for(clock: FakeClock) -> Record:
    return Record(
        contract=Contract(
            operation_id="op-lost",
            profile=parse_profile(PROFILE),
            policy=Policy(),
            created_at=clock.now(),
        ),
        submission=Submission(status_url=URL),
        schedule=Schedule(
            deadline_at=clock.now() + timedelta(seconds=600), next_poll_at=clock.now()
        ),
    )


def test_late_wake_up_sends_one_request_not_a_burst() -> None:
    """After oversleeping by minutes, exactly one request is sent, then pacing resumes."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/status": [RUNNING, RUNNING, DONE]})

    def oversleep(seconds: float) -> None:
        clock.sleep(seconds + 120)

    wait(
        _operation(base_delay_s=1),
        store=MemoryStore(),
        client=provider.client(),
        clock=clock,
        sleep=oversleep,
        rng=random.Random(SEED),
    )
    times = [t for _, t in provider.requests]
    assert all((b - a).total_seconds() >= 120 for a, b in pairwise(times))


def test_request_timeout_never_exceeds_the_time_left() -> None:
    """Each request's timeout is min(request_timeout, time left before the deadline)."""
    result = run(
        {"/status": [RUNNING]},
        deadline_s=10,
        request_timeout_s=30,
        base_delay_s=1,
        max_delay_s=3,
    )
    left = [10 - t for t in result.status_times]
    assert result.provider.timeouts == pytest.approx(left, abs=1e-5)


def test_time_spent_inside_requests_counts_against_the_deadline() -> None:
    """Slow answers use the deadline too: with 4 s latency, few requests fit in 10 s."""
    result = run({"/status": [RUNNING]}, deadline_s=10, latency_s=4, base_delay_s=1)
    assert result.outcome.outcome is OutcomeKind.TIMED_OUT
    assert result.provider.count("/status") <= 3


def test_headers_are_sent_but_never_stored() -> None:
    """A credential header reaches the provider and appears nowhere in the store."""
    clock = FakeClock()
    store = MemoryStore()
    provider = ScriptedProvider(clock, {"/status": [RUNNING, DONE]})
    outcome = _wait(
        store,
        provider,
        clock,
        operation=_operation(base_delay_s=1),
        headers={"Authorization": "Bearer s3cr3t-token"},
    )
    assert provider.seen_headers[0]["authorization"] == "Bearer s3cr3t-token"
    record = store.get(outcome.operation_id)  # type: ignore[attr-defined]
    stored = json.dumps(record.to_json()) + json.dumps(  # type: ignore[union-attr]
        [[e.event.summary, dict(e.event.data)] for e in store.audit(outcome.operation_id)]  # type: ignore[attr-defined]
    )
    assert "s3cr3t" not in stored


def test_oversized_body_is_an_integration_failure() -> None:
    """A status body over the cap is not read further: integration_failure."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock, {"/status": [(200, {"status": "running", "pad": "x" * 500})]}
    )
    outcome = wait(
        _operation(),
        store=MemoryStore(),
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(SEED),
        http=HttpSettings(max_body_bytes=100),
    )
    assert outcome.reason is Reason.INTEGRATION_FAILURE
    assert "larger than 100 bytes" in str(outcome.error)


def test_same_origin_redirect_is_followed() -> None:
    """A redirect to the same origin is followed to the status resource."""
    result = run(
        {
            "/status": [(303, None, {"Location": "/v2/status"})],
            "/v2/status": [DONE],
        }
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED


def test_audit_chain_is_intact_after_a_wait() -> None:
    """Every event of a wait is chained; the chain verifies."""
    result = run({"/status": [RUNNING, (503, None), DONE]}, base_delay_s=1)
    verify_chain(result.store.audit(result.outcome.operation_id))


@pytest.mark.parametrize(
    "script",
    [
        {"/status": [RUNNING, (429, None, {"Retry-After": "3"}), RUNNING, DONE]},
        {"/status": [RUNNING, (500, None), (404, None)]},
        {"/status": [RUNNING]},
    ],
)
def test_async_driver_takes_the_same_decisions_as_the_sync_one(
    script: dict[str, list[object]],
) -> None:
    """Same script, same seed: the async driver sleeps and ends exactly like the sync one."""
    sync_run = run(script, base_delay_s=1, deadline_s=30)  # type: ignore[arg-type]
    clock = FakeClock()
    provider = ScriptedProvider(clock, script)  # type: ignore[arg-type]

    async def main() -> object:
        return await wait_async(
            _operation(base_delay_s=1, deadline_s=30),
            store=MemoryStore(),
            client=provider.async_client(),
            clock=clock,
            sleep=clock.async_sleep,
            rng=random.Random(SEED),
        )

    outcome = anyio.run(main)
    assert clock.sleeps == sync_run.clock.sleeps
    assert outcome.outcome == sync_run.outcome.outcome  # type: ignore[attr-defined]
    assert outcome.reason == sync_run.outcome.reason  # type: ignore[attr-defined]


def test_a_transport_error_message_never_carries_the_url() -> None:
    """Transport failures are described without URLs (which may hold tokens)."""
    result = run(
        {"/status": [httpx.ConnectError("failed for http://provider.test/status?token=abc")]},
        max_transport_failures=0,
    )
    assert "token" not in json.dumps(result.outcome.error)
