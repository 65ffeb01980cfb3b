"""Vendor rules: counts before required fields, what survives a terminal state, throttles
said with headers, Unix times, and a hint of zero. Virtual time and a seeded RNG."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from tests.core.harness import DOUBLING, PROFILE, SEED, run
from tests.fakes import START, Answer, FakeClock, ScriptedProvider
from waitbound import (
    MemoryStore,
    OutcomeKind,
    Policy,
    ProfileError,
    Reason,
    Submission,
    parse_profile,
)
from waitbound import run as run_submission
from waitbound._model._observation import kept_header_names
from waitbound._profile._schedule import parse_retry_after
from waitbound._profile._times import parse_time
from waitbound.profiles import builtin_profile

OPENAI = dict(builtin_profile("openai-batch").source)
GITHUB = dict(builtin_profile("github-actions-run").source)
OUTPUT = "/v1/files/file-out/content"
ERRORS = "/v1/files/file-err/content"


def _batch(status: str, completed: int, failed: int, **more: Any) -> dict[str, Any]:
    """An OpenAI Batch object (the fields the profile reads)."""
    return {
        "id": "batch_1",
        "status": status,
        "output_file_id": None,
        "error_file_id": None,
        "errors": None,
        "expires_at": int((START + timedelta(days=1)).timestamp()),
        "request_counts": {"total": completed + failed, "completed": completed, "failed": failed},
        **more,
    }


def _epoch(seconds_from_start: float) -> str:
    return str(int((START + timedelta(seconds=seconds_from_start)).timestamp()))


# --- 1. counts are read before required fields ---------------------------------------


def test_a_completed_batch_with_no_successes_and_no_output_file_is_failed() -> None:
    """`completed`, 0 succeeded, 3 failed, no output_file_id: the counts explain the
    missing file, so the outcome is failed at once (no confirmation, no contradiction)."""
    body = _batch("completed", 0, 3, error_file_id="file-err")
    result = run({"/status": [(200, body)]}, profile=OPENAI)
    assert result.outcome.outcome is OutcomeKind.FAILED
    assert result.outcome.counts == {"succeeded": 0, "failed": 3, "total": 3}
    assert result.outcome.status_requests_used == 1
    assert result.outcome.result_requests_used == 0


def test_a_partly_failed_batch_without_output_file_completes_with_errors_unconfirmed() -> None:
    """Some items failed: completed_with_errors, decided by the counts without the
    require_on_success confirmation."""
    script: dict[str, list[Answer]] = {
        "/status": [(200, _batch("completed", 2, 1, error_file_id="file-err"))],
        ERRORS: [(200, {"line": 3})],
    }
    result = run(script, profile=OPENAI)
    assert result.outcome.outcome is OutcomeKind.COMPLETED_WITH_ERRORS
    assert result.outcome.status_requests_used == 1


def test_a_success_the_counts_leave_standing_still_needs_its_output_file() -> None:
    """No failed items: a completed batch without output_file_id is confirmed, then
    escalates contradiction (as before)."""
    result = run(
        {"/status": [(200, _batch("completed", 3, 0))]}, profile=OPENAI, confirm_max_requests=1
    )
    assert result.outcome.reason is Reason.CONTRADICTION
    assert result.outcome.status_requests_used == 2


@pytest.mark.parametrize(
    ("failed", "outcome", "succeeded"),
    [(4, OutcomeKind.FAILED, 0), (1, OutcomeKind.COMPLETED_WITH_ERRORS, 3)],
)
def test_succeeded_not_reported_is_derived_from_the_total(
    failed: int, outcome: OutcomeKind, succeeded: int
) -> None:
    """Counts without `succeeded` but with `total`: succeeded = total - unsuccessful."""
    table = {**PROFILE, "counts": {"failed": "n_failed", "total": "n_total"}}
    body = {"status": "done", "n_failed": failed, "n_total": 4}
    result = run({"/status": [(200, body)]}, profile=table)
    assert result.outcome.outcome is outcome
    assert result.outcome.counts == {"succeeded": succeeded, "failed": failed, "total": 4}


def test_the_openai_profile_requires_only_the_output_file() -> None:
    """The counts rule made the old `request_counts.completed == 0` escape unnecessary."""
    assert OPENAI["require_on_success"] == ["output_file_id"]


# --- 2. counts, usage and the partial output survive every terminal state ------------


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ("expired", OutcomeKind.EXPIRED),
        ("cancelled", OutcomeKind.CANCELED),
        ("failed", OutcomeKind.FAILED),
    ],
)
def test_a_batch_ended_without_success_keeps_counts_usage_and_its_output_reference(
    status: str, outcome: OutcomeKind
) -> None:
    """Counts, usage and the output file of an expired / cancelled / failed batch are in
    the outcome; the file is named by `result_url`, not fetched."""
    usage = {"input_tokens": 10, "output_tokens": 4}
    body = _batch(status, 3, 1, output_file_id="file-out", usage=usage)
    result = run({"/status": [(200, body)]}, profile=OPENAI)
    assert result.outcome.outcome is outcome
    assert result.outcome.counts == {"succeeded": 3, "failed": 1, "total": 4}
    assert result.outcome.usage == usage
    assert result.outcome.result_url == f"http://provider.test{OUTPUT}"
    assert result.outcome.as_json()["result_url"] == f"http://provider.test{OUTPUT}"
    assert result.outcome.result_requests_used == 0


def test_a_fetched_result_names_no_result_url() -> None:
    """Once the result is fetched into `result`, `result_url` is None."""
    body = _batch("completed", 2, 0, output_file_id="file-out")
    result = run({"/status": [(200, body)], OUTPUT: [(200, {"ok": 1})]}, profile=OPENAI)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == {"ok": 1}
    assert result.outcome.result_url is None


def test_the_result_url_in_an_outcome_drops_its_query() -> None:
    """A result URL may carry a signature in its query: the outcome shows it without
    (``?…`` says one was dropped), as the audit log does."""
    table = {**PROFILE, "result_url": "file"}
    body = {"status": "expired", "file": "https://files.test/out?sig=s3cret"}
    result = run({"/status": [(200, body)]}, profile=table)
    assert result.outcome.result_url == "https://files.test/out?…"


# --- 3. the status body's usage survives a result fetched from a result URL ----------


@pytest.mark.parametrize(
    ("document", "usage"),
    [({"ok": 1}, {"tokens": 7}), ({"ok": 1, "usage": {"tokens": 9}}, {"tokens": 9})],
    ids=["status-usage-kept", "document-usage-wins"],
)
def test_usage_from_the_status_body_is_kept_unless_the_document_has_its_own(
    document: dict[str, Any], usage: dict[str, Any]
) -> None:
    """The result document's usage wins when present, else the status body's stands."""
    table = {**PROFILE, "usage": "usage", "result_url": "result_url"}
    del table["result"]
    status = {"status": "done", "usage": {"tokens": 7}, "result_url": "/out"}
    result = run({"/status": [(200, status)], "/out": [(200, document)]}, profile=table)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.usage == usage


# --- 4. throttling said with headers, before the 401/403 rule -------------------------

RUNNING = {"status": "in_progress", "id": 7}
DONE = {"status": "completed", "conclusion": "success", "id": 7}


def test_a_403_with_no_requests_remaining_waits_until_the_reset() -> None:
    """GitHub: 403 with x-ratelimit-remaining 0 is a throttle; wait until x-ratelimit-reset
    (epoch seconds, 120 s away), not an authorization failure."""
    limited = (
        403,
        {"message": "API rate limit exceeded"},
        {"x-ratelimit-remaining": "0", "x-ratelimit-reset": _epoch(120)},
    )
    result = run({"/status": [limited, (200, DONE)]}, profile=GITHUB, deadline_s=600)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.rate_limited_used == 1
    assert 120.0 <= result.clock.sleeps[0] <= 132.0


def test_a_403_with_retry_after_waits_that_long() -> None:
    """A secondary limit with retry-after: wait that many seconds (before the reset)."""
    limited = (
        403,
        {"message": "You have exceeded a secondary rate limit"},
        {"retry-after": "30", "x-ratelimit-remaining": "12", "x-ratelimit-reset": _epoch(900)},
    )
    result = run({"/status": [limited, (200, DONE)]}, profile=GITHUB, deadline_s=600)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert 30.0 <= result.clock.sleeps[0] <= 33.0


def test_a_secondary_limit_said_only_in_the_message_waits_the_default() -> None:
    """403, a rate-limit message, no header saying how long: at least 60 s."""
    limited = (403, {"message": "You have exceeded a secondary rate limit"})
    result = run({"/status": [limited, (200, DONE)]}, profile=GITHUB, deadline_s=600)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert 60.0 <= result.clock.sleeps[0] <= 66.0


def test_a_403_that_is_not_a_throttle_is_still_an_authorization_failure() -> None:
    """Requests remaining, no retry-after, no rate-limit message: authorization_denied."""
    denied = (403, {"message": "Resource not accessible"}, {"x-ratelimit-remaining": "4999"})
    result = run({"/status": [denied]}, profile=GITHUB)
    assert result.outcome.reason is Reason.AUTHORIZATION_DENIED


def test_a_reset_header_on_an_ordinary_answer_does_not_delay_polling() -> None:
    """x-ratelimit-reset an hour away on a 200 is no hint: local backoff applies."""
    ok = (200, RUNNING, {"x-ratelimit-remaining": "4000", "x-ratelimit-reset": _epoch(3600)})
    result = run({"/status": [ok, (200, DONE)]}, profile=GITHUB, base_delay_s=1)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert 0.5 <= result.clock.sleeps[0] <= 1.0


def test_a_throttled_result_url_is_waited_on() -> None:
    """The result endpoint answering 403 with no requests remaining is a throttle too."""
    table = {**PROFILE, "throttle": GITHUB["throttle"]}
    limited = (403, None, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": _epoch(20)})
    script: dict[str, list[Answer]] = {
        "/status": [(200, {"status": "done"})],
        "/result": [limited, (200, {"output": 1})],
    }
    result = run(script, profile=table, result_url="http://provider.test/result")
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.rate_limited_used == 1


def test_a_throttled_submission_is_rate_limited_not_denied() -> None:
    """A submission answered 403 with no requests remaining: rate_limited, sent once."""
    clock = FakeClock()
    limited = (403, {"message": "API rate limit exceeded"}, {"x-ratelimit-remaining": "0"})
    provider = ScriptedProvider(clock, {"/dispatches": [limited]})
    store = MemoryStore()
    outcome = run_submission(
        Submission(
            method="POST",
            url="http://provider.test/dispatches",
            profile=parse_profile(GITHUB),
            policy=Policy(),
            body=b"{}",
        ),
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(5),
    )
    assert outcome.reason is Reason.RATE_LIMITED
    assert provider.count("/dispatches") == 1


def test_the_throttle_headers_are_kept() -> None:
    """The headers the throttle rule reads survive the observation's allowlist."""
    kept = kept_header_names(parse_profile(GITHUB))
    assert {"x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"} <= kept


@pytest.mark.parametrize(
    ("throttle", "words"),
    [
        ([403], "throttle must be an object"),
        ({"statuses": [403], "after": 1}, "unknown key 'after'"),
        ({"statuses": []}, "throttle.statuses must be a non-empty list"),
        ({"statuses": [200]}, "throttle.statuses must be a non-empty list"),
        ({"statuses": [True]}, "throttle.statuses must be a non-empty list"),
        ({"statuses": [403], "when_headers": {"a": 1}}, "throttle.when_headers must be a list"),
        ({"statuses": [403], "when_headers": [{"equals": "0"}]}, "needs a header"),
        ({"statuses": [403], "when_headers": [{"header": "a", "equals": 0}]}, "must be a string"),
        ({"statuses": [403], "when_headers": [{"header": "a", "is": "0"}]}, "unknown key 'is'"),
        ({"statuses": [403], "reset_headers": {"x": "h"}}, "throttle.reset_headers['x']"),
        ({"statuses": [403], "default_delay_s": 0}, "throttle.default_delay_s must be"),
        ({"statuses": [403], "default_delay_s": "60"}, "throttle.default_delay_s must be"),
    ],
)
def test_a_bad_throttle_is_refused_in_one_line(throttle: object, words: str) -> None:
    """Every wrong throttle key is a one-line ProfileError naming it."""
    with pytest.raises(ProfileError, match="throttle") as caught:
        parse_profile({**PROFILE, "throttle": throttle})
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


# --- 5. Unix times --------------------------------------------------------------------


@pytest.mark.parametrize(("at_s", "low", "high"), [(45, 45.0, 49.5), (-30, 0.5, 1.0)])
def test_an_epoch_hint_header_waits_until_that_time(at_s: float, low: float, high: float) -> None:
    """hint_headers unit epoch_s: delay = value - now; a time past is 0 (no minimum)."""
    table = {**PROFILE, "hint_headers": {"X-Next-Poll-At": "epoch_s"}}
    hinted = (200, {"status": "running"}, {"X-Next-Poll-At": _epoch(at_s)})
    result = run({"/status": [hinted, (200, {"status": "done"})]}, profile=table, base_delay_s=1)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert low <= result.clock.sleeps[0] <= high


def test_an_epoch_next_check_at_in_the_body_is_a_hint() -> None:
    """time_format epoch_s: next_check_at is a Unix time."""
    table = {**PROFILE, "time_format": "epoch_s", "next_check_at": "next"}
    body = {"status": "running", "next": int((START + timedelta(seconds=20)).timestamp())}
    result = run({"/status": [(200, body), (200, {"status": "done"})]}, profile=table)
    assert 20.0 <= result.clock.sleeps[0] <= 22.0


def test_a_batch_pending_past_its_epoch_expiry_is_a_contradiction() -> None:
    """OpenAI's expires_at is epoch seconds: pending after it escalates contradiction."""
    body = _batch("in_progress", 0, 0, expires_at=int((START - timedelta(hours=1)).timestamp()))
    result = run({"/status": [(200, body)]}, profile=OPENAI)
    assert result.outcome.reason is Reason.CONTRADICTION
    assert "expiry" in json.dumps(result.outcome.error)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, datetime(1970, 1, 1, tzinfo=UTC)),
        (1767225600, datetime(2026, 1, 1, tzinfo=UTC)),
        (1767225600.5, datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)),
        ("1767225600", None),
        (True, None),
        (-1, None),
        (10**30, None),
    ],
)
def test_epoch_body_times_are_json_numbers(value: object, expected: datetime | None) -> None:
    """epoch_s reads a non-negative JSON number of seconds; anything else is no time."""
    assert parse_time(value, "epoch_s") == expected


def test_an_unknown_time_format_is_refused() -> None:
    """time_format is rfc3339 or epoch_s."""
    with pytest.raises(ProfileError, match="time_format = 'unix'; expected 'rfc3339' or"):
        parse_profile({**PROFILE, "time_format": "unix"})


# --- 6. a hint of zero imposes no minimum ---------------------------------------------


def test_retry_after_zero_lets_local_backoff_grow() -> None:
    """Retry-After: 0 on every answer: the delays back off (with jitter) instead of
    every poll waiting exactly the floor; each is audited as hint 0, no minimum."""
    zero: Answer = (200, {"status": "running"}, {"Retry-After": "0"})
    done: Answer = (200, {"status": "done"})
    script: dict[str, list[Answer]] = {"/status": [zero, zero, zero, zero, done]}
    result = run(
        script, profile=PROFILE, base_delay_s=1, max_delay_s=60, min_delay_s=0.25, **DOUBLING
    )
    sleeps = result.clock.sleeps
    assert [low <= s <= 2 * low for s, low in zip(sleeps, [0.5, 1, 2, 4], strict=True)] == [
        True
    ] * 4
    scheduled = [
        e.event
        for e in result.store.audit(result.outcome.operation_id)
        if e.event.kind == "scheduled"
    ]
    assert scheduled[0].data["hint"] == {
        "origin": "Retry-After header",
        "delay_s": 0.0,
        "minimum": False,
    }
    assert "hint 0 (Retry-After header): no minimum" in scheduled[0].summary
    assert scheduled[0].data["delay_source"] == "local_backoff"


def test_a_positive_hint_below_the_floor_lets_local_backoff_grow() -> None:
    """Retry-After: 0.1 on every answer with a 3 s floor: like a hint of zero, no
    minimum; the jittered backoff grows (never below the floor) instead of every poll
    waiting the floor, and each is audited as below the floor."""
    tiny: Answer = (200, {"status": "running"}, {"Retry-After": "0.1"})
    done: Answer = (200, {"status": "done"})
    result = run({"/status": [tiny, tiny, tiny, done]}, min_delay_s=3, base_delay_s=5, **DOUBLING)
    rng = random.Random(SEED)
    expected = [max(3.0, rng.uniform(raw / 2, raw)) for raw in (5, 10, 20)]
    assert result.clock.sleeps == pytest.approx(expected, abs=1e-5)
    scheduled = [
        e.event
        for e in result.store.audit(result.outcome.operation_id)
        if e.event.kind == "scheduled"
    ]
    assert scheduled[0].data["hint"] == {
        "origin": "Retry-After header",
        "delay_s": 0.1,
        "minimum": False,
    }
    assert "hint 0.1s, below the 3s floor (Retry-After header): no minimum" in (
        scheduled[0].summary
    )
    assert {e.data["delay_source"] for e in scheduled} == {"local_backoff"}


def test_a_throttle_with_retry_after_zero_backs_off_as_a_throttle() -> None:
    """429 with Retry-After: 0: no minimum from the hint, the throttle backoff applies."""
    throttled = (429, None, {"Retry-After": "0"})
    result = run({"/status": [throttled, (200, {"status": "done"})]}, base_delay_s=1)
    assert 4 * 0.5 <= result.clock.sleeps[0] <= 4 * 1.0


# --- 7. every HTTP-date form --------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"],
    ids=["imf-fixdate", "rfc-850", "asctime"],
)
def test_the_three_rfc_9110_date_forms_name_the_same_instant(value: str) -> None:
    """RFC 9110 §5.6.7's own example in its three forms: 90 s after a `now` before it,
    0 after it (a date past is no wait)."""
    when = datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)
    assert parse_retry_after(value, now=when - timedelta(seconds=90)) == 90.0
    assert parse_retry_after(value, now=START) == 0.0
    assert format_datetime(when, usegmt=True) == "Sun, 06 Nov 1994 08:49:37 GMT"
