"""The public API's run and check, and the plain-language message of every outcome."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from tests.core.harness import PROFILE, URL
from tests.fakes import FakeClock, ScriptedProvider
from waitbound import (
    MemoryStore,
    Operation,
    Outcome,
    OutcomeKind,
    Policy,
    Reason,
    StillWaitingError,
    Submission,
    check,
    parse_profile,
    run,
    wait,
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
        (_outcome(OutcomeKind.SUCCEEDED), ["SUCCEEDED"], "NOT"),
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
