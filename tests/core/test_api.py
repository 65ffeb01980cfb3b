"""The public API's run and check, and the plain-language message of every outcome."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import anyio
import pytest

from tests.core.harness import PROFILE, URL
from tests.fakes import START, FakeClock, ScriptedProvider
from waitbound import (
    MemoryStore,
    Operation,
    Outcome,
    OutcomeKind,
    Policy,
    Reason,
    StillWaitingError,
    Store,
    Submission,
    UsageError,
    check,
    parse_profile,
    run,
    start,
    wait,
    wait_async,
)


def test_run_submits_and_returns_the_outcome() -> None:
    """run = submit + wait, returning an Outcome with the receipt's job id."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {
            "/jobs": [(202, {"id": "j-1"}, {"Location": "/status"})],
            "/status": [(200, {"status": "done", "output": 5})],
        },
    )
    outcome = run(
        Submission(method="POST", url="http://provider.test/jobs", profile=parse_profile(PROFILE)),
        store=MemoryStore(),
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(1),
    )
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert outcome.job_id == "j-1"
    assert outcome.result == 5


def test_check_sends_nothing_until_a_request_is_due_then_at_most_one() -> None:
    """check: a look at the record; one request only when due; never a wait."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/status": [(200, {"status": "running", "id": "j"})]})
    store = MemoryStore()

    class Pause(Exception):
        pass

    def pause(seconds: float) -> None:
        raise Pause

    with pytest.raises(Pause):
        wait(Operation(status_url=URL, profile=parse_profile(PROFILE), policy=Policy()),
             operation_id="op-k", store=store, client=provider.client(), clock=clock,
             sleep=pause, rng=random.Random(1))  # fmt: skip
    assert provider.count("/status") == 1
    first = check("op-k", store=store, client=provider.client(), clock=clock)
    assert provider.count("/status") == 1
    assert first.outcome is None
    assert not first.done
    assert first.next_check_at is not None
    assert "NOT complete" in first.message
    with pytest.raises(StillWaitingError):
        first.raise_for_outcome()
    clock.advance((first.next_check_at - clock.now()).total_seconds())
    second = check("op-k", store=store, client=provider.client(), clock=clock)
    assert provider.count("/status") == 2
    assert not second.done


def _outcome(kind: OutcomeKind | None, **fields: object) -> Outcome:
    return Outcome(operation_id="op-1", outcome=kind, job_id="job_7f21c", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("outcome", "words", "must_not"),
    [
        (_outcome(None, next_check_at=FakeClock().now() + timedelta(days=1)),
         ["job_7f21c", "STARTED", "NOT complete", "Do not report success", "Check again"],
         "SUCCEEDED"),
        (_outcome(OutcomeKind.SUCCEEDED, result={"url": "https://x.test/r"}),
         ["SUCCEEDED", "its result is available"], "NOT"),
        (_outcome(OutcomeKind.SUCCEEDED), ["SUCCEEDED", "it returned no result"], "available"),
        (_outcome(OutcomeKind.FAILED), ["FAILED", "Do not report success"], "SUCCEEDED"),
        (_outcome(OutcomeKind.COMPLETED_WITH_ERRORS,
                  counts={"succeeded": 3, "failed": 1, "total": 4}),
         ["FINISHED WITH ERRORS", "3 of 4"], "SUCCEEDED"),
        (_outcome(OutcomeKind.TIMED_OUT, reason=Reason.DEADLINE_EXCEEDED),
         ["may still be running", "NOT known to be complete", "op-1"], "SUCCEEDED"),
        (_outcome(OutcomeKind.ESCALATED, reason=Reason.UNKNOWN_STATE,
                  options=("mark_failed", "abandon")),
         ["unknown_state", "NOT known to be complete", "mark_failed"], "SUCCEEDED"),
        (_outcome(OutcomeKind.CANCELED, reason=Reason.SKIPPED),
         ["CANCELED", "skipped", "Do not report success"], "SUCCEEDED"),
    ],
)  # fmt: skip
def test_message_never_passes_unfinished_work_for_success(
    outcome: Outcome, words: list[str], must_not: str
) -> None:
    """Every outcome's message says plainly whether the job is done, and never overclaims."""
    for word in words:
        assert word in outcome.message
    assert must_not not in outcome.message
    assert outcome.as_json()["message"] == outcome.message
    assert outcome.as_json()["done"] is (outcome.outcome is not None)


# --- first_poll_after_s: the caller already holds a fresh answer -----------------------


def _hold(first_poll_after_s: float, **policy: Any) -> tuple[Outcome, ScriptedProvider, Store]:
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/status": [(200, {"status": "done", "output": 5})]})
    store = MemoryStore()
    outcome = wait(
        Operation(status_url=URL, profile=parse_profile(PROFILE), policy=Policy(**policy)),
        operation_id="op-fresh",
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        first_poll_after_s=first_poll_after_s,
    )
    return outcome, provider, store


def test_first_poll_after_sends_the_first_request_that_long_after_the_start() -> None:
    """first_poll_after_s=30: no request at t = 0; the first is sent at exactly 30 s, and
    the record was created with that next poll time (delay source first_poll_after)."""
    outcome, provider, store = _hold(30.0)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert [(path, when - START) for path, when in provider.requests] == [
        ("/status", timedelta(seconds=30))
    ]
    created = store.audit("op-fresh")[0].event
    assert created.kind == "created"
    assert created.data["next_poll_at"] == (START + timedelta(seconds=30)).isoformat()
    assert created.data["delay_source"] == "first_poll_after"
    assert "first request after 30s (the caller holds a fresh answer)" in created.summary


def test_first_poll_after_zero_polls_at_once_as_before() -> None:
    """first_poll_after_s=0 (the default) sends the first request at t = 0."""
    outcome, provider, store = _hold(0.0)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert [when for _, when in provider.requests] == [START]
    assert store.audit("op-fresh")[0].event.data["delay_source"] is None


def test_first_poll_after_in_the_async_api() -> None:
    """wait_async takes first_poll_after_s too: its first request is sent at 12 s."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/status": [(200, {"status": "done", "output": 5})]})

    async def main() -> Outcome:
        return await wait_async(
            Operation(status_url=URL, profile=parse_profile(PROFILE)),
            store=MemoryStore(),
            client=provider.async_client(),
            clock=clock,
            sleep=clock.async_sleep,
            first_poll_after_s=12,
        )

    assert anyio.run(main).outcome is OutcomeKind.SUCCEEDED
    assert [when - START for _, when in provider.requests] == [timedelta(seconds=12)]


def test_start_records_the_first_poll_time_for_a_worker() -> None:
    """start(first_poll_after_s=45) (wait --detach) stores next_poll_at 45 s ahead."""
    store = MemoryStore()
    handle = start(
        Operation(status_url=URL, profile=parse_profile(PROFILE)),
        operation_id="op-later",
        store=store,
        clock=FakeClock(),
        first_poll_after_s=45,
    )
    record = store.get(handle.operation_id)
    assert record is not None
    assert record.next_poll_at == START + timedelta(seconds=45)


@pytest.mark.parametrize(
    ("first", "policy", "words"),
    [
        (-1.0, {}, "first_poll_after_s must be a non-negative number of seconds, got -1.0"),
        (float("nan"), {}, "first_poll_after_s must be a non-negative number of seconds"),
        (
            600.0,
            {"deadline_s": 600},
            "first_poll_after_s (600s) is not before deadline_s (600s): no request would ever "
            "be sent; lower first_poll_after_s or raise deadline_s",
        ),
        (
            90.0,
            {"deadline_s": 600, "business_deadline_s": 60},
            "first_poll_after_s (90s) is not before business_deadline_s (60s)",
        ),
    ],
    ids=["negative", "nan", "at-the-deadline", "past-the-business-deadline"],
)
def test_a_bad_first_poll_after_is_refused_before_anything_is_stored(
    first: float, policy: dict[str, Any], words: str
) -> None:
    """A negative or non-finite value, or one not before the deadline: UsageError, one
    line naming the value and the bound; no operation stored, no request sent."""
    store = MemoryStore()
    provider = ScriptedProvider(FakeClock(), {"/status": [(200, {"status": "done"})]})
    with pytest.raises(UsageError) as caught:
        wait(
            Operation(status_url=URL, profile=parse_profile(PROFILE), policy=Policy(**policy)),
            store=store,
            client=provider.client(),
            first_poll_after_s=first,
        )
    assert str(caught.value).startswith(words)
    assert "\n" not in str(caught.value)
    assert store.recent() == []
    assert provider.requests == []


def test_first_poll_after_needs_an_operation_to_create() -> None:
    """Resuming by id alone with first_poll_after_s: UsageError (it applies at creation)."""
    with pytest.raises(UsageError, match="first_poll_after_s is set when an operation is created"):
        wait(operation_id="op-x", store=MemoryStore(), first_poll_after_s=5)


def test_a_resumed_operation_keeps_its_stored_next_poll_time() -> None:
    """Resuming an operation created with first_poll_after_s=300 by the same Operation
    and a new first_poll_after_s keeps the stored next poll time (never reset)."""
    store = MemoryStore()
    clock = FakeClock()
    operation = Operation(status_url=URL, profile=parse_profile(PROFILE))
    start(operation, operation_id="op-r", store=store, clock=clock, first_poll_after_s=300)
    clock.advance(10)
    start(operation, operation_id="op-r", store=store, clock=clock, first_poll_after_s=5)
    record = store.get("op-r")
    assert record is not None
    assert record.next_poll_at == START + timedelta(seconds=300)
