"""The controller's rules, each driven through the real loop on virtual time."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.core.harness import DOUBLING, PROFILE, SEED, URL, Run, run
from tests.fakes import START, FakeClock, ScriptedProvider
from waitbound import (
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    Reason,
    Record,
    parse_profile,
    wait,
)
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)
from waitbound._rules._controller import Send, plan

RUNNING = (200, {"status": "running", "id": "job-1"})
DONE = (200, {"status": "done", "output": {"rows": 3}})


def backoffs(n: int, *, base: float, cap: float, seed: int = SEED) -> list[float]:
    """The jittered backoffs a seeded RNG draws: uniform in [raw/2, raw], raw doubling to cap."""
    rng = random.Random(seed)
    raws = [min(cap, base * 2**i) for i in range(n)]
    return [rng.uniform(raw / 2, raw) for raw in raws]


def test_pending_polls_follow_exact_jittered_backoff() -> None:
    """Pending answers are re-polled after uniform [raw/2, raw] delays, raw = base * 2**attempt."""
    result = run(
        {"/status": [RUNNING, RUNNING, RUNNING, DONE]}, base_delay_s=2, max_delay_s=5, **DOUBLING
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == {"rows": 3}
    assert result.outcome.job_id == "job-1"
    assert result.clock.sleeps == pytest.approx(backoffs(3, base=2, cap=5), abs=1e-5)


def test_deadline_is_checked_before_any_request_and_never_overshot() -> None:
    """Sleeps are clipped to the deadline, no request is sent at or after it: timed_out."""
    result = run({"/status": [RUNNING]}, deadline_s=10, base_delay_s=1, max_delay_s=16)
    assert result.outcome.outcome is OutcomeKind.TIMED_OUT
    assert result.outcome.reason is Reason.DEADLINE_EXCEEDED
    assert result.outcome.job_id == "job-1"
    assert sum(result.clock.sleeps) == pytest.approx(10, abs=1e-5)
    assert max(result.status_times) < 10
    assert result.outcome.elapsed_seconds == pytest.approx(10, abs=1e-5)


def test_request_budget_counts_every_request_then_escalates_at_once() -> None:
    """Exactly max_requests status requests, then request_budget_exhausted without a sleep."""
    result = run({"/status": [RUNNING]}, max_requests=4, base_delay_s=1, max_delay_s=2)
    assert result.outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert result.provider.count("/status") == 4
    assert len(result.clock.sleeps) == 3


def test_retry_after_seconds_on_429_is_a_minimum_with_small_upward_jitter() -> None:
    """429 + Retry-After: 4 waits between 4 and 4.4 seconds, counted as rate limited."""
    result = run(
        {"/status": [(429, {"error": "slow down"}, {"Retry-After": "4"}), DONE]},
        base_delay_s=0.5,
        max_delay_s=0.5,
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.rate_limited_used == 1
    assert 4.0 <= result.clock.sleeps[0] <= 4.4


def test_throttle_without_hint_backs_off_four_times_harder() -> None:
    """A 429 without a hint waits 4x the jittered backoff the attempt would otherwise get."""
    result = run(
        {"/status": [RUNNING, (429, None), DONE]}, base_delay_s=2, max_delay_s=8, **DOUBLING
    )
    first, second = backoffs(2, base=2, cap=8)
    assert result.clock.sleeps == pytest.approx([first, 4 * second], abs=1e-5)


def test_throttling_body_in_a_400_is_a_rate_limit_not_a_failure() -> None:
    """A body matching the profile's throttled expression is treated as a 429."""
    profile = {**PROFILE, "throttled": "Error.Code == 'Throttling'"}
    result = run(
        {"/status": [(400, {"Error": {"Code": "Throttling"}}), DONE]},
        profile=profile,
        base_delay_s=1,
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.rate_limited_used == 1


def test_rate_limit_budget_spent_escalates_rate_limited() -> None:
    """One throttle more than max_rate_limited escalates rate_limited."""
    result = run(
        {"/status": [(429, None, {"Retry-After": "1"})]}, max_rate_limited=2, base_delay_s=1
    )
    assert result.outcome.reason is Reason.RATE_LIMITED
    assert result.provider.count("/status") == 3


def test_retry_after_past_the_deadline_stops_at_once_as_rate_limited() -> None:
    """Told to wait beyond the deadline by a 429: stop now (rate_limited), do not sleep."""
    result = run({"/status": [(429, None, {"Retry-After": "120"})]}, deadline_s=60)
    assert result.outcome.reason is Reason.RATE_LIMITED
    assert result.clock.sleeps == []


def test_poll_hint_past_the_deadline_is_rejected_and_the_wait_goes_on() -> None:
    """A pending answer whose body hint lands after the deadline is guidance rejected
    (issue 33), not a stop: the job is looked at again until the deadline, job id kept
    (it timed out at once, 60 s early, before)."""
    profile = {**PROFILE, "poll_hint": "poll_after_seconds"}
    result = run(
        {"/status": [(200, {"status": "running", "id": "j", "poll_after_seconds": 90})]},
        profile=profile,
        deadline_s=60,
    )
    assert result.outcome.outcome is OutcomeKind.TIMED_OUT
    assert result.outcome.job_id == "j"
    assert len(result.provider.requests) > 1
    assert sum(result.clock.sleeps) == pytest.approx(60)


def test_the_policy_shapes_the_backoff() -> None:
    """backoff_growth and backoff_jitter_floor are the policy's: raw = base * growth**n,
    drawn from [floor * raw, raw], one draw per delay."""
    result = run(
        {"/status": [RUNNING] * 5 + [DONE]},
        base_delay_s=4,
        max_delay_s=10,
        backoff_growth=1.5,
        backoff_jitter_floor=0.8,
    )
    rng = random.Random(SEED)
    expected = [rng.uniform(0.8 * raw, raw) for raw in (4, 6, 9, 10, 10)]
    assert result.clock.sleeps == pytest.approx(expected, abs=1e-5)


def test_an_exact_hint_costs_at_most_the_jitter_bound() -> None:
    """Retry-After: 300 is waited 300 s plus at most hint_jitter_max_s (1 s), not 330 s."""
    hinted = (200, {"status": "running"}, {"Retry-After": "300"})
    result = run({"/status": [hinted, DONE]}, deadline_s=900)
    rng = random.Random(SEED)
    assert result.clock.sleeps == pytest.approx([300 + rng.uniform(0, 1.0)], abs=1e-5)
    assert 300 <= result.clock.sleeps[0] <= 301


def test_the_attempt_counter_goes_on_under_hints_and_resumes_backoff_when_they_run_out() -> None:
    """Hints 30, 20, 10 are waited (bounded jitter); the hint 0 that follows is no
    minimum: backoff resumes at attempt 3 (raw 40 s), not at the floor or attempt 0."""
    profile = {**PROFILE, "poll_hint": "poll_after"}
    hints = [30, 20, 10, 0, 0, 0]
    answers = [(200, {"status": "running", "poll_after": h}) for h in hints]
    result = run(
        {"/status": [*answers, DONE]},
        profile=profile,
        deadline_s=3600,
        max_delay_s=120,
        **DOUBLING,
    )
    rng = random.Random(SEED)
    expected = [h + rng.uniform(0, min(0.1 * h, 1.0)) for h in hints[:3]]
    expected += [rng.uniform(raw / 2, raw) for raw in (40, 80, 120)]
    assert result.clock.sleeps == pytest.approx(expected, abs=1e-5)


def test_an_overdue_job_told_half_a_second_costs_what_backoff_costs() -> None:
    """A provider whose estimate runs down to 'poll again in 0.5 s' (below the 1 s floor)
    once the job is overdue: the polls back off as without any hint, never the floor over
    and over; the job that ends at 300 s is seen within the request budget."""

    def job(poll_hint: bool) -> Run:
        clock = FakeClock()

        def provider(request: httpx.Request) -> httpx.Response:
            elapsed = (clock.now() - START).total_seconds()
            if elapsed >= 300:
                return httpx.Response(200, json={"status": "done", "output": {"rows": 3}})
            body: dict[str, object] = {"status": "running"}
            if poll_hint:
                body["poll_after"] = max(0.5, 100 - elapsed)
            return httpx.Response(200, json=body)

        store = MemoryStore()
        outcome = wait(
            Operation(
                status_url=URL,
                profile=parse_profile({**PROFILE, "poll_hint": "poll_after"}),
                policy=Policy(deadline_s=900, max_requests=30, max_delay_s=120, **DOUBLING),
            ),
            store=store,
            client=httpx.Client(transport=httpx.MockTransport(provider)),
            clock=clock,
            sleep=clock.sleep,
            rng=random.Random(SEED),
        )
        return Run(outcome=outcome, clock=clock, provider=ScriptedProvider(clock, {}), store=store)

    hinted, unhinted = job(poll_hint=True), job(poll_hint=False)
    assert hinted.outcome.outcome is OutcomeKind.SUCCEEDED
    assert unhinted.outcome.outcome is OutcomeKind.SUCCEEDED
    assert hinted.outcome.status_requests_used <= unhinted.outcome.status_requests_used
    # The hint 100 s, then backoff going on from it (issue 33: the last delay times the
    # growth, at most the 120 s cap; after the hinted wait, never shorter), never the floor.
    rng = random.Random(SEED)
    first = 100 + rng.uniform(0, 1.0)
    second = rng.uniform(first, 120)
    expected = [first, second] + [rng.uniform(60, 120) for _ in hinted.clock.sleeps[2:]]
    assert hinted.clock.sleeps == pytest.approx(expected, abs=1e-5)


def test_hint_below_the_floor_is_local_backoff_not_the_floor() -> None:
    """retry-after-ms: 1 is below the 1 s floor: the jittered backoff applies, not 1 s."""
    result = run(
        {"/status": [(200, {"status": "running"}, {"retry-after-ms": "1"}), DONE]}, **DOUBLING
    )
    assert result.clock.sleeps == pytest.approx(backoffs(1, base=5, cap=120), abs=1e-5)


@pytest.mark.parametrize("code", [401, 403])
def test_authorization_denied_stops_at_once(code: int) -> None:
    """401/403 escalate authorization_denied after one request, never retried."""
    result = run({"/status": [RUNNING, (code, {"error": "no"})]}, base_delay_s=1)
    assert result.outcome.reason is Reason.AUTHORIZATION_DENIED
    assert result.outcome.last_http_status == code
    assert result.provider.count("/status") == 2


def test_server_errors_spend_the_transport_budget_and_are_never_failed() -> None:
    """5xx answers past max_transport_failures escalate provider_failure with the last state."""
    result = run({"/status": [RUNNING, (500, None)]}, max_transport_failures=3, base_delay_s=1)
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    assert result.outcome.reason is Reason.PROVIDER_FAILURE
    assert result.outcome.provider_state == "running"
    assert result.outcome.transport_failures_used == 4
    assert result.provider.count("/status") == 5


def test_connection_errors_count_as_transport_failures() -> None:
    """A refused connection is a transport failure, then the job's answer is still read."""
    result = run(
        {"/status": [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), DONE]},
        base_delay_s=1,
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.transport_failures_used == 2


def test_503_retry_after_is_honoured() -> None:
    """A 503 with Retry-After waits at least that long."""
    result = run({"/status": [(503, None, {"Retry-After": "7"}), DONE]}, base_delay_s=1)
    assert 7.0 <= result.clock.sleeps[0] <= 7.7


def test_404_within_grace_is_not_visible_yet() -> None:
    """A 404 before the job was ever seen, within the grace window, means keep looking."""
    result = run({"/status": [(404, None), (404, None), DONE]}, base_delay_s=1)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED


def test_404_past_grace_is_an_integration_failure() -> None:
    """A 404 that outlasts the not-found grace escalates integration_failure."""
    result = run({"/status": [(404, None)]}, not_found_grace_s=10, base_delay_s=1, max_delay_s=8)
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert result.status_times[-1] >= 10
    assert result.status_times[-2] < 10


@pytest.mark.parametrize("code", [404, 410])
def test_not_found_after_the_job_was_seen_is_an_integration_failure(code: int) -> None:
    """404/410 once the job was seen is not explained by the contract: integration_failure."""
    result = run({"/status": [RUNNING, (code, None)]}, base_delay_s=1)
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert result.provider.count("/status") == 2


def test_body_without_state_past_grace_is_an_integration_failure() -> None:
    """A 200 whose body has no state is 'not visible yet' only within the grace window."""
    result = run({"/status": [(200, {"other": 1})]}, not_found_grace_s=0, base_delay_s=1)
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ((400, {"error": "bad"}), "HTTP 400"),
        ((302, None, {"Location": "http://elsewhere.test/x"}), "another origin"),
        ((200, None), "an empty body"),
    ],
)
def test_unexplained_answers_are_integration_failures(answer: object, words: str) -> None:
    """Other 4xx, cross-origin redirects and empty bodies escalate integration_failure."""
    result = run({"/status": [answer]})  # type: ignore[list-item]
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert words in str(result.outcome.error)


def test_unknown_state_escalates_at_once() -> None:
    """A state in none of the lists stops with unknown_state; nothing is guessed."""
    result = run({"/status": [RUNNING, (200, {"status": "error"})]}, base_delay_s=1)
    assert result.outcome.reason is Reason.UNKNOWN_STATE
    assert result.outcome.provider_state == "error"
    assert result.provider.count("/status") == 2


@pytest.mark.parametrize(
    ("state", "outcome"),
    [("failed", OutcomeKind.FAILED), ("canceled", OutcomeKind.CANCELED), ("expired", "expired")],
)
def test_terminal_states_end_at_the_first_answer(state: str, outcome: str) -> None:
    """Failed, canceled and expired end the wait at once, with the provider's error kept."""
    result = run({"/status": [(200, {"status": state, "error": {"code": "E1"}})]})
    assert result.outcome.outcome == outcome
    assert result.outcome.error == {"code": "E1"}


def test_success_with_an_error_object_is_a_failure() -> None:
    """A terminal success carrying an error object is failed."""
    result = run({"/status": [(200, {"status": "done", "error": {"code": "QUOTA"}})]})
    assert result.outcome.outcome is OutcomeKind.FAILED
    assert result.outcome.error == {"code": "QUOTA"}


COUNTED = {**PROFILE, "counts": {"succeeded": "n.ok", "failed": "n.bad", "total": "n.all"}}


@pytest.mark.parametrize(
    ("body", "outcome"),
    [
        ({"status": "done", "n": {"ok": 3, "bad": 1, "all": 4}}, "completed_with_errors"),
        ({"status": "done", "n": {"ok": 0, "bad": 4, "all": 4}}, "failed"),
        ({"status": "partial", "n": {"ok": 0, "bad": 2, "all": 2}}, "failed"),
        ({"status": "partial", "n": {"ok": 2, "bad": 0, "all": 2}}, "completed_with_errors"),
        ({"status": "done", "n": {"ok": 4, "bad": 0, "all": 4}}, "succeeded"),
    ],
)
def test_counts_decide_partial_outcomes(body: dict[str, object], outcome: str) -> None:
    """Failures among successes: completed_with_errors; none succeeded: failed; counts kept."""
    result = run({"/status": [(200, body)]}, profile=COUNTED)
    assert result.outcome.outcome == outcome
    assert result.outcome.counts == {
        "succeeded": body["n"]["ok"],  # type: ignore[index]
        "failed": body["n"]["bad"],  # type: ignore[index]
        "total": body["n"]["all"],  # type: ignore[index]
    }


REQUIRED = {**PROFILE, "require_on_success": ["output.url"]}


def test_success_without_required_field_is_confirmed_then_believed() -> None:
    """A success missing a required field is re-checked; once the field shows, it succeeds."""
    done_empty = (200, {"status": "done"})
    done_full = (200, {"status": "done", "output": {"url": "u"}})
    result = run({"/status": [done_empty, done_full]}, profile=REQUIRED)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == {"url": "u"}
    assert result.clock.sleeps[0] == pytest.approx(5 / 3, abs=1e-5)


def test_success_still_missing_required_field_is_a_contradiction() -> None:
    """After two confirmation requests the success is still incomplete: contradiction, kept."""
    result = run({"/status": [(200, {"status": "done", "output": {}})]}, profile=REQUIRED)
    assert result.outcome.reason is Reason.CONTRADICTION
    assert result.provider.count("/status") == 3
    error = result.outcome.error
    assert isinstance(error, dict)
    assert error["response"] == {"status": "done", "output": {}}


def test_pending_after_its_own_expiry_is_a_contradiction() -> None:
    """A job still running after the expires_at its body states escalates contradiction."""
    profile = {**PROFILE, "expires_at": "expires_at"}
    body = {"status": "running", "expires_at": "2025-12-31T00:00:00Z"}
    result = run({"/status": [(200, body)]}, profile=profile)
    assert result.outcome.reason is Reason.CONTRADICTION


def test_result_is_fetched_once_after_success_and_409_means_not_ready() -> None:
    """The result URL answers 409 twice, then 200: one successful fetch, job not failed."""
    result = run(
        {
            "/status": [RUNNING, (200, {"status": "done"})],
            "/result": [
                (409, {"error": "not ready"}),
                (425, None),
                (200, {"output": {"rows": [1, 2]}, "usage": None}),
            ],
        },
        result_url="http://provider.test/result",
        base_delay_s=1,
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == {"rows": [1, 2]}
    assert result.outcome.result_requests_used == 3
    assert result.provider.count("/status") == 2


def test_result_url_from_body_resolves_against_the_status_url() -> None:
    """A relative result_url read from the body is resolved against the status URL."""
    profile = {**PROFILE, "result_url": "links.result"}
    result = run(
        {
            "/status": [(200, {"status": "done", "links": {"result": "/result"}})],
            "/result": [(200, "plain text output")],
        },
        profile=profile,
    )
    assert result.outcome.result == "plain text output"


def test_result_url_template_builds_the_url_from_an_id() -> None:
    """result_id + result_url_template name the result endpoint; without a result_document
    expression the whole result body is the result."""
    profile = {
        **{key: value for key, value in PROFILE.items() if key != "result_document"},
        "result_id": "output_file_id",
        "result_url_template": "/files/{result_id}/content",
    }
    result = run(
        {
            "/status": [(200, {"status": "done", "output_file_id": "file-9"})],
            "/files/file-9/content": [(200, {"ok": True})],
        },
        profile=profile,
    )
    assert result.outcome.result == {"ok": True}


def test_result_requests_spend_the_same_request_budget() -> None:
    """A result URL answering 409 forever cannot buy extra requests."""
    result = run(
        {"/status": [(200, {"status": "done"})], "/result": [(409, None)]},
        result_url="http://provider.test/result",
        max_requests=5,
        base_delay_s=1,
    )
    assert result.outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert result.outcome.result_requests_used == 4


def test_result_not_ready_by_the_deadline_is_a_contradiction_not_a_timeout() -> None:
    """A finished job is never reported timed out: status success + result never ready."""
    result = run(
        {"/status": [(200, {"status": "done"})], "/result": [(409, None)]},
        result_url="http://provider.test/result",
        deadline_s=5,
        base_delay_s=1,
    )
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    assert result.outcome.reason is Reason.CONTRADICTION


def test_audit_story_reads_in_order() -> None:
    """The audit log tells the story: created, then reserve/observe/decide per request."""
    result = run({"/status": [RUNNING, DONE]}, base_delay_s=1)
    assert result.kinds() == [
        "created",
        "reserved",
        "observed",
        "scheduled",
        "reserved",
        "observed",
        "finished",
    ]


@pytest.mark.parametrize(
    ("lease_s", "timeout_s", "held_s"),
    [
        (None, 20.0, 20.0 + 3.0),  # a wait: the request's timeout plus the policy's lease_s
        (30.0, 20.0, 30.0),  # a long lease: the timeout as configured
        (5.0, 4.5, 5.0),  # a short one: the request ends a tenth of the lease before it
        (15.0, 14.0, 15.0),  # the margin is 1 s at most
    ],
)
def test_a_reservation_leases_what_was_asked_and_its_request_ends_first(
    lease_s: float | None, timeout_s: float, held_s: float
) -> None:
    """plan(lease_s=…) leases the operation for exactly lease_s and cuts the request's
    timeout to end before the lease (lease_margin_s); without it, today's rule."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    record = Record(
        contract=Contract(
            operation_id="op",
            profile=parse_profile(PROFILE),
            policy=Policy(request_timeout_s=20, lease_s=3),
            created_at=now,
        ),
        submission=Submission(status_url="https://p.example/jobs/1"),
        schedule=Schedule(deadline_at=now + timedelta(hours=1), next_poll_at=now),
    )
    decision = plan(record, now, owner="w", lease_s=lease_s)
    assert isinstance(decision, Send)
    assert decision.request.timeout_s == pytest.approx(timeout_s)
    reserved = decision.transition.record
    assert reserved.lease_expires_at == now + timedelta(seconds=held_s)
    assert reserved.lease_owner == "w"
