"""The plan for the whole authority (issue 33): the budget's pace, hints as minimums
and news, backoff going on from the last delay, grants spread over their window, and
a first answer without a state within the not-found grace. Virtual time throughout."""

from __future__ import annotations

import random
import warnings
from datetime import timedelta
from typing import Any

import pytest

from benchmarks import budget_fit
from tests.core.harness import PROFILE, SEED, Run, run
from tests.core.test_decisions import DONE, RUNNING, stopped
from tests.fakes import FakeClock, ScriptedProvider
from waitbound import (
    BudgetWarning,
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    Reason,
    wait,
)
from waitbound.profiles import builtin_profile

PENDING = (200, {"status": "running", "id": "job-1"})
FINISHED = (200, {"status": "done", "output": {"rows": 3}})
HINTED = {**PROFILE, "poll_hint": "poll_after"}


def scheduled(result: Run) -> list[dict[str, Any]]:
    return [
        dict(s.event.data) | {"summary": s.event.summary}
        for s in result.store.audit(result.outcome.operation_id)
        if s.event.kind == "scheduled"
    ]


def test_a_constant_retry_after_costs_what_no_hint_costs() -> None:
    """With every default, a 45 s job at a provider answering ``Retry-After: 1`` ends
    succeeded after exactly the requests and sleeps of no hint at all (it was 29
    requests and request_budget_exhausted after 31 s)."""
    answers_without = [PENDING] * 8 + [FINISHED]
    with_hint = [(200, {"status": "running"}, {"Retry-After": "1"})] * 8 + [FINISHED]
    plain = run({"/status": answers_without})
    hinted = run({"/status": with_hint})
    assert hinted.outcome.outcome is OutcomeKind.SUCCEEDED
    assert hinted.clock.sleeps == pytest.approx(plain.clock.sleeps)
    events = scheduled(hinted)
    assert events[1]["hint"]["followed"] is False
    assert "not followed sooner than the plan" in str(events[1]["summary"])


def test_backoff_goes_on_from_a_hint_and_never_shrinks_after_a_pending_answer() -> None:
    """After a pending answer carrying a 2 s hint, the next waits start from the hint
    and grow about 1.5x (they were 0.42 s and 0.58 s: backoff restarted from its base)."""
    answers = [(200, {"status": "running", "poll_after": 2}), PENDING, PENDING, FINISHED]
    result = run({"/status": answers}, profile=HINTED, base_delay_s=0.2, max_delay_s=60)
    sleeps = result.clock.sleeps
    assert sleeps[0] >= 2.0
    assert sleeps[1] >= sleeps[0]
    assert sleeps[2] >= sleeps[1]
    assert sleeps[1] == pytest.approx(sleeps[0] * 1.5, rel=0.2)


def test_a_body_hint_past_the_deadline_is_rejected_as_guidance_not_a_stop() -> None:
    """``poll_after: 99999`` under an 8 s deadline is rejected (audited) and the job is
    looked at again: it ends succeeded, not timed_out 0.06 s in."""
    result = run(
        {"/status": [(200, {"status": "running", "poll_after": 99999}), FINISHED]},
        profile=HINTED,
        deadline_s=8,
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    first = scheduled(result)[0]
    assert first["hint"]["rejected"] == "past the deadline"
    assert "rejected as guidance" in str(first["summary"])


def test_a_429_retry_after_past_the_deadline_is_a_demand_and_stays_rate_limited() -> None:
    result = run({"/status": [(429, {"error": "slow"}, {"Retry-After": "99999"})]}, deadline_s=8)
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    assert result.outcome.reason is Reason.RATE_LIMITED


def test_hints_that_come_true_are_followed_sooner_than_the_plan_and_constant_ones_are_not() -> None:
    """A hint that moves (an estimate counting down) earns trust: once it has brought
    news it is followed below the backoff (delay source provider_poll_hint); a hint that
    says the same every time is a minimum only (local_backoff)."""
    moving = [(200, {"status": "running", "poll_after": h}) for h in (6, 4, 2, 1)] + [FINISHED]
    same = [(200, {"status": "running", "poll_after": 6})] * 4 + [FINISHED]
    trusted = run({"/status": moving}, profile=HINTED)
    constant = run({"/status": same}, profile=HINTED)
    sources_trusted = [e["delay_source"] for e in scheduled(trusted)]
    sources_constant = [e["delay_source"] for e in scheduled(constant)]
    assert sources_trusted[:3] == ["provider_poll_hint"] * 3
    assert trusted.clock.sleeps[1] < 5.0  # the 4 s hint, below the 7.5 s step
    assert sources_constant[0] == "provider_poll_hint"
    assert set(sources_constant[1:]) == {"local_backoff"}
    assert constant.clock.sleeps[1] >= 6.0


def test_a_budget_that_cannot_cover_the_deadline_is_spread_over_it() -> None:
    """12 requests over 40 minutes: the status requests are spread (delay source
    budget_spread, beyond max_delay_s, audited with what is left), and the last look is
    still before the deadline, so a 30-minute job is seen, not lost to the budget."""
    with pytest.warns(BudgetWarning, match="disagree"):
        Policy(max_requests=12, deadline_s=2400.0)
    answers = [PENDING] * 10 + [FINISHED]
    result = run({"/status": answers}, max_requests=12, deadline_s=2400.0)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    events = scheduled(result)
    assert {e["delay_source"] for e in events[1:]} == {"budget_spread"}
    assert all(s > 60 for s in result.clock.sleeps[1:])
    assert events[1]["budget"]["status_requests_left"] >= 1
    assert sum(result.clock.sleeps) < 2400


def test_only_a_policy_whose_budget_and_deadline_disagree_warns() -> None:
    """The warning says exactly when the plan spreads the requests from the first answer
    on: 12 requests at the 60 s cap cover 600 s (10.2 spacings after the first), not 700."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", BudgetWarning)
        Policy()
        Policy(max_requests=12, deadline_s=600)
        Policy(max_requests=1, deadline_s=3600)
    with pytest.warns(BudgetWarning, match=r"cover 612s of the 700s deadline"):
        Policy(max_requests=12, deadline_s=700)
    with_warning = run({"/status": [PENDING, PENDING, FINISHED]}, max_requests=12, deadline_s=700)
    without = run({"/status": [PENDING, PENDING, FINISHED]}, max_requests=12, deadline_s=600)
    assert scheduled(with_warning)[0]["delay_source"] == "budget_spread"
    assert scheduled(without)[0]["delay_source"] == "local_backoff"


def test_a_grant_of_one_check_over_three_minutes_looks_late_in_its_window() -> None:
    """``extend --minutes 3 --checks 1``: the check is sent no earlier than 2.4 minutes
    after the decision (it was sent at once and re-escalated 1.5 s later)."""
    op = stopped(RUNNING, max_requests=3)
    assert op.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    decided_at = op.clock.now()
    op.decide("extend", minutes=3, checks=1)
    sent = len(op.provider.requests)
    op.resume(RUNNING)
    (checked_at,) = op.sent_at()[sent:]
    assert checked_at - decided_at >= timedelta(minutes=2.4)
    assert checked_at - decided_at < timedelta(minutes=3)


def test_a_grant_of_two_checks_over_half_a_minute_spreads_them() -> None:
    op = stopped(RUNNING, max_requests=3)
    decided_at = op.clock.now()
    op.decide("extend", minutes=0.5, checks=2)
    sent = len(op.provider.requests)
    op.resume(RUNNING)
    checks = op.sent_at()[sent:]
    assert len(checks) == 2
    assert all(at - decided_at > timedelta(seconds=10) for at in checks)
    assert all(at - decided_at < timedelta(seconds=30) for at in checks)


def test_a_grant_ends_at_once_when_the_job_ends() -> None:
    """The spread only sets the first check's time: a done job still ends succeeded."""
    op = stopped(RUNNING, max_requests=3)
    op.decide("extend", minutes=3, checks=2)
    assert op.resume(DONE).outcome is OutcomeKind.SUCCEEDED


def test_an_empty_check_runs_list_before_the_job_is_seen_gets_the_not_found_grace() -> None:
    """github-actions-run: an empty check-runs listing for 4 answers (eventual
    consistency right after the push), then completed/success: succeeded (it was
    integration_failure on the first answer)."""
    clock = FakeClock()
    empty = (200, {"total_count": 0, "check_runs": []})
    done = (200, {"id": 7, "status": "completed", "conclusion": "success", "html_url": "h"})
    provider = ScriptedProvider(clock, {"/runs/7": [empty] * 4 + [done]})
    outcome = wait(
        Operation(
            status_url="http://provider.test/runs/7",
            profile=builtin_profile("github-actions-run"),
            policy=Policy(),
        ),
        store=MemoryStore(),
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(SEED),
    )
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert len(provider.requests) == 5


def test_a_body_without_a_state_once_the_job_was_seen_still_stops_at_once() -> None:
    result = run({"/status": [PENDING, (200, {"nothing": 1}), FINISHED]})
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert len(result.provider.requests) == 2


@pytest.mark.parametrize("setting", budget_fit.SETTINGS, ids=lambda s: s.label)
def test_no_job_is_lost_to_the_budget_whatever_the_provider_says(
    setting: budget_fit.Setting,
) -> None:
    """The budget-fit benchmark, small: every job ends before the deadline and every
    one ends succeeded, under every provider behaviour; a constant hint costs what no
    hint costs; exact hints cost at most 2 requests at under 1 s of lag."""
    rows = {
        behaviour: budget_fit.measure(setting, behaviour, jobs=12, seed=3)
        for behaviour in budget_fit.BEHAVIOURS
    }
    assert {b: row.lost for b, row in rows.items()} == dict.fromkeys(budget_fit.BEHAVIOURS, 0)
    plain = rows["none"]
    for constant in ("body 1s", "RA 1", "body 5s"):
        assert rows[constant].requests_per_job <= plain.requests_per_job * 1.1
        assert rows[constant].lag_mean_s <= plain.lag_mean_s * 1.1
    if setting.label == "defaults":
        assert rows["exact"].requests_per_job <= 2.0
        assert rows["exact"].lag_mean_s <= 1.0


@pytest.mark.parametrize("code", [429, 503])
def test_a_look_throttled_near_the_deadline_is_retried_before_it(code: int) -> None:
    """Regression (issue 33, budget_fit's 429 row): the look that would have seen the
    job is answered 429 (or 503) ``Retry-After: 2`` and the backoff's next step reaches
    past the deadline; the retry is kept inside it (at least the 2 s the provider
    demands), so a job that ended in time ends succeeded, not timed_out with its end
    unseen."""
    refused = (code, {"error": "slow"}, {"Retry-After": "2"})
    result = run(
        {"/status": [PENDING, refused, FINISHED]}, deadline_s=10, base_delay_s=8, max_delay_s=60
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED, result.outcome.error
    assert len(result.status_times) == 3
    assert result.status_times[2] - result.status_times[1] >= 2.0 - 1e-6
    assert result.status_times[2] < 10
    retry = scheduled(result)[1]
    assert "retried before the deadline" in str(retry["summary"])


def test_throttles_in_a_row_do_not_compound_the_throttle_factor() -> None:
    """Regression (issue 33; the handed case throttling-is-not-job-failure): backoff
    goes on from the backoff's step, not from a throttle's four-fold wait, so a second
    throttle waits about 4x the next step (not 4x4x: 61.5 s, past a 60 s deadline, which
    ended the wait rate_limited) and the job is seen done."""
    slow = (429, {"error": "slow"})
    result = run(
        {"/status": [PENDING, slow, slow, FINISHED]}, deadline_s=60, base_delay_s=2, max_delay_s=16
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED, result.outcome.error
    assert len(result.status_times) == 4
    assert result.gaps[2] <= 4 * 16


@pytest.mark.parametrize("deadline_s", [16.0, 300.0])
def test_a_budget_spent_before_the_deadline_ends_request_budget_exhausted(
    deadline_s: float,
) -> None:
    """Regression (issue 33; the handed case budget-only-checked-on-errors): the plan
    sends the last status request just before the deadline; its answer still pending,
    the stop is the budget's (all 8 used, before the deadline), not "the next request
    may not be sent before the deadline" (timed_out)."""
    result = run(
        {"/status": [PENDING] * 8},
        max_requests=8,
        deadline_s=deadline_s,
        base_delay_s=0.5,
        max_delay_s=2,
    )
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    assert result.outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED, result.outcome.error
    assert len(result.status_times) == 8
    assert result.status_times[-1] < deadline_s


def test_a_grant_of_one_check_that_sees_success_also_fetches_the_result() -> None:
    """``extend --checks 1`` of an operation with a result URL: the check sees the job
    succeed and the result is fetched, the grant carrying that request on top of its
    check (it ended request_budget_exhausted with the result unfetched)."""
    op = stopped(RUNNING, max_requests=3, result_url="http://provider.test/result")
    assert op.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    op.decide("extend", minutes=1, checks=1)
    grant = op.events("decided")[-1].data["grant"]
    assert isinstance(grant, dict)
    assert grant["action_requests"] == 1
    outcome = op.resume((200, {"status": "done"}))
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert op.provider.count("/result") == 1
