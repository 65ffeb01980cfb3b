"""Hostile provider answers, odd profiles and damaged stores: one honest outcome, no crash.

Each test is a regression test for a hardening fix. The wait loop runs on virtual
time (``FakeClock``) against scripted answers; nothing really sleeps.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.core.harness import DOUBLING, PROFILE, SEED, URL, run
from tests.fakes import FakeClock, Handler, ScriptedProvider
from waitbound import (
    MemoryStore,
    Operation,
    Outcome,
    OutcomeKind,
    Policy,
    ProfileError,
    Reason,
    SQLiteStore,
    Store,
    StoreError,
    UsageError,
    load_profile,
    parse_profile,
    verify_chain,
    wait,
)
from waitbound._profile._contract import Classification
from waitbound._rules._next_poll import THROTTLE_FACTOR

RUNNING = (200, {"status": "running", "id": "job-1"})
DONE = (200, {"status": "done", "output": {"rows": 3}})
HINTED = {**PROFILE, "poll_hint": "poll_after_seconds"}
LINKED = {**PROFILE, "result_url": "result_url"}
REQUIRED = {**PROFILE, "require_on_success": ["output.url"]}
HUGE_INT = 10**400


def wait_with(
    handler: Handler,
    *,
    profile: Mapping[str, Any] = PROFILE,
    store: Store | None = None,
    headers: Mapping[str, str] | None = None,
    clock: FakeClock | None = None,
    operation_id: str | None = None,
    **policy: Any,
) -> Outcome:
    """Run the real wait loop on virtual time with a raw ``MockTransport`` handler."""
    clock = clock or FakeClock()
    operation = Operation(
        status_url=URL, profile=parse_profile(dict(profile)), policy=Policy(**policy)
    )
    return wait(
        operation,
        operation_id=operation_id,
        store=store if store is not None else MemoryStore(),
        headers=headers,
        client=httpx.Client(transport=httpx.MockTransport(handler)),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(SEED),
    )


# --- absurd hints -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "profile", "reason"),
    [
        (
            (200, {"status": "running", "poll_after_seconds": 1e308}),
            HINTED,
            Reason.DEADLINE_EXCEEDED,
        ),
        (
            (429, None, {"Retry-After": "99999999999999999999"}),
            PROFILE,
            Reason.RATE_LIMITED,
        ),
        (
            (429, None, {"retry-after-ms": str(10**30)}),
            PROFILE,
            Reason.RATE_LIMITED,
        ),
        (
            (200, {"status": "running"}, {"retry-after-ms": str(10**30)}),
            PROFILE,
            Reason.DEADLINE_EXCEEDED,
        ),
    ],
    ids=["body-hint-1e308", "retry-after-20-digits", "retry-after-ms-1e30-on-429", "ms-on-200"],
)
def test_absurdly_large_hint_ends_the_wait_at_once(
    answer: Any, profile: Mapping[str, Any], reason: Reason
) -> None:
    """A hint beyond any deadline never overflows. A throttle's demand stops after one
    request, without sleeping; guidance on a 2xx answer is rejected (issue 33) and the
    job is looked at until the deadline."""
    result = run({"/status": [answer]}, profile=profile, deadline_s=600)
    expected = (
        OutcomeKind.TIMED_OUT if reason is Reason.DEADLINE_EXCEEDED else OutcomeKind.ESCALATED
    )
    assert result.outcome.outcome is expected
    assert result.outcome.reason is reason
    _stopped_at_once_or_looked_until_the_deadline(result, reason)


def _stopped_at_once_or_looked_until_the_deadline(result: Any, reason: Reason) -> None:
    if reason is Reason.DEADLINE_EXCEEDED:  # guidance past the deadline: rejected
        assert result.provider.count("/status") > 1
        assert sum(result.clock.sleeps) == pytest.approx(600)
        return
    assert result.clock.sleeps == []
    assert result.provider.count("/status") == 1


@pytest.mark.parametrize(
    ("answer", "profile", "reason"),
    [
        (
            (200, {"status": "running", "poll_ms": HUGE_INT}),
            {**PROFILE, "poll_hint_ms": "poll_ms"},
            Reason.DEADLINE_EXCEEDED,
        ),
        (
            (200, {"status": "running", "poll_after_seconds": HUGE_INT}),
            HINTED,
            Reason.DEADLINE_EXCEEDED,
        ),
        ((429, None, {"retry-after-ms": "9" * 400}), PROFILE, Reason.RATE_LIMITED),
    ],
    ids=["body-hint-ms-400-digits", "body-hint-400-digits", "retry-after-ms-400-digits"],
)
def test_hint_beyond_float_range_is_read_as_a_year(
    answer: Any, profile: Mapping[str, Any], reason: Reason
) -> None:
    """A hint too large for a float is longer than a year too: no crash; a demand stops
    at once, guidance is rejected."""
    result = run({"/status": [answer]}, profile=profile, deadline_s=600)
    assert result.outcome.reason is reason
    _stopped_at_once_or_looked_until_the_deadline(result, reason)


# --- huge numbers, deep nesting -----------------------------------------------------


def test_state_that_is_a_400_digit_integer_is_an_unknown_state() -> None:
    """A state beyond float range is compared exactly, found in no list: unknown_state."""
    result = run({"/status": [RUNNING, (200, {"status": HUGE_INT})]}, base_delay_s=1)
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    assert result.outcome.reason is Reason.UNKNOWN_STATE
    assert result.outcome.provider_state == HUGE_INT
    assert result.provider.count("/status") == 2


def test_profile_listing_a_400_digit_integer_loads_and_matches_it_exactly() -> None:
    """A profile may list an integer beyond float range; only that exact value matches."""
    profile = parse_profile({"state": "status", "pending": [HUGE_INT], "succeeded": ["done"]})
    assert profile.classify_value(HUGE_INT) is Classification.PENDING
    assert profile.classify_value(HUGE_INT + 1) is Classification.UNKNOWN
    assert profile.classify_value(float("inf")) is Classification.UNKNOWN


def test_body_nested_100000_levels_is_an_integration_failure() -> None:
    """A 200 whose JSON nests 100,000 levels deep escalates integration_failure, no crash."""
    deep = b"[" * 100_000 + b"]" * 100_000

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=deep)

    outcome = wait_with(handler)
    assert outcome.outcome is OutcomeKind.ESCALATED
    assert outcome.reason is Reason.INTEGRATION_FAILURE
    assert "nested" in str(outcome.error)


def test_a_nan_state_is_an_unknown_state_kept_as_text() -> None:
    """{"status": NaN} is the unknown state "NaN": no float NaN reaches the record or audit."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'{"status": NaN, "id": "job-1"}')

    store = MemoryStore()
    outcome = wait_with(handler, store=store)
    assert outcome.outcome is OutcomeKind.ESCALATED
    assert outcome.reason is Reason.UNKNOWN_STATE
    assert outcome.provider_state == "NaN"
    verify_chain(store.audit(outcome.operation_id))


# --- unusable URLs in answers -------------------------------------------------------


@pytest.mark.parametrize(
    "result_url",
    ["http://provider.test:99999/x", "http://[::1/x"],
    ids=["port-out-of-range", "broken-ipv6"],
)
def test_unusable_result_url_in_a_success_is_an_integration_failure(result_url: str) -> None:
    """A success naming a result URL that cannot be used escalates integration_failure."""
    result = run({"/status": [(200, {"status": "done", "result_url": result_url})]}, profile=LINKED)
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert "result URL" in str(result.outcome.error)
    assert len(result.provider.requests) == 1


def test_redirect_to_an_invalid_port_is_an_integration_failure() -> None:
    """A 302 to port 99999 is the provider's mistake (integration_failure), not a transport one."""
    result = run({"/status": [(302, None, {"Location": "http://127.0.0.1:99999/x"})]})
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert result.outcome.transport_failures_used == 0
    assert "redirect" in str(result.outcome.error)
    assert result.provider.count("/status") == 1


def test_success_missing_a_field_then_pending_is_a_contradiction() -> None:
    """Success without a required field, then a pending answer: contradiction, not timed_out."""
    result = run({"/status": [(200, {"status": "done"}), RUNNING]}, profile=REQUIRED, deadline_s=60)
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    assert result.outcome.reason is Reason.CONTRADICTION
    assert result.provider.count("/status") == 2


# --- credentials --------------------------------------------------------------------


class HostRouter:
    """A ``MockTransport`` handler answering by host and path, recording each request."""

    def __init__(self, answers: Mapping[tuple[str, str], httpx.Response]) -> None:
        self.answers = answers
        self.seen: list[tuple[str, Mapping[str, str]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        self.seen.append((str(url), {k.lower(): v for k, v in request.headers.items()}))
        return self.answers[(url.netloc.decode(), url.path)]


@pytest.mark.parametrize(
    ("result_url", "sent"),
    [
        ("http://files.other.test/out", False),
        ("http://provider.test:8080/out", False),
        ("https://provider.test/out", False),
        ("/out", True),
        ("http://provider.test/out", True),
    ],
    ids=["other-host", "other-port", "other-scheme", "relative", "same-origin"],
)
def test_credentials_go_only_to_the_status_urls_origin(result_url: str, sent: bool) -> None:
    """Authorization goes with every status request, and to a result URL on that origin only."""
    status = httpx.Response(200, json={"status": "done", "result_url": result_url})
    output = httpx.Response(200, json={"output": "x"})
    target = httpx.URL(URL).join(result_url)
    router = HostRouter(
        {
            ("provider.test", "/status"): status,
            (target.netloc.decode(), target.path): output,
        }
    )
    outcome = wait_with(router, profile=LINKED, headers={"Authorization": "Bearer S"})
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert [url for url, _ in router.seen] == [URL, str(target)]
    (_, status_headers), (_, result_headers) = router.seen
    assert status_headers.get("authorization") == "Bearer S"
    assert ("authorization" in result_headers) is sent
    if sent:
        assert result_headers["authorization"] == "Bearer S"


TOKEN = "tok-5f0e9a1b2c"


def test_a_credential_echoed_in_headers_never_reaches_the_record_or_the_audit() -> None:
    """An echo in X-Request-Id and in a bad Retry-After is redacted before anything is kept."""
    answers = iter(
        [
            httpx.Response(
                429,
                headers={"Retry-After": f"Bearer {TOKEN}", "X-Request-Id": f"req-{TOKEN}"},
            ),
            httpx.Response(200, json={"status": "done"}, headers={"X-Request-Id": TOKEN}),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return next(answers)

    store = MemoryStore()
    profile = {**PROFILE, "request_id_headers": ["x-request-id"]}
    outcome = wait_with(
        handler,
        profile=profile,
        store=store,
        headers={"Authorization": f"Bearer {TOKEN}"},
        base_delay_s=1,
    )
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    record = store.get(outcome.operation_id)
    assert record is not None
    kept = json.dumps(record.to_json()) + json.dumps(
        [[e.event.summary, dict(e.event.data)] for e in store.audit(outcome.operation_id)]
    )
    assert TOKEN not in kept + json.dumps(outcome.as_json())
    assert "[redacted]" in kept


# --- the audit story ----------------------------------------------------------------


class _ProcessStops(BaseException):
    """Stands for the process being killed in the middle of a request."""


def test_answer_lost_after_a_crash_names_the_request_kind() -> None:
    """A crash with a status request in flight: the resumed run's answer_lost names 'status'."""
    clock = FakeClock()
    store = MemoryStore()

    def crash(request: httpx.Request) -> httpx.Response:
        raise _ProcessStops  # not an Exception: nothing may record it, as with kill -9

    with pytest.raises(_ProcessStops):
        wait_with(crash, store=store, clock=clock, operation_id="op-crash", base_delay_s=1)
    stranded = store.get("op-crash")
    assert stranded is not None
    assert stranded.in_flight == "status"
    provider = ScriptedProvider(clock, {"/status": [DONE]})
    outcome = wait_with(provider, store=store, clock=clock, operation_id="op-crash", base_delay_s=1)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert outcome.status_requests_used == 2
    lost = [s.event for s in store.audit("op-crash") if s.event.kind == "answer_lost"]
    assert len(lost) == 1
    assert "status request" in lost[0].summary
    assert "None" not in lost[0].summary


@pytest.mark.parametrize(
    ("script", "profile", "words"),
    [
        (
            [(500, None, {"Retry-After": "90"})],
            PROFILE,
            "stopped before the deadline",
        ),
        ([RUNNING], PROFILE, "was reached"),
    ],
    ids=["hint-past-deadline", "deadline-reached"],
)
def test_timed_out_detail_says_whether_the_deadline_was_reached(
    script: list[Any], profile: Mapping[str, Any], words: str
) -> None:
    """timed_out says 'stopped before the deadline' when it stops early, else 'was reached'."""
    result = run(
        {"/status": script},
        profile=profile,
        deadline_s=10,
        base_delay_s=1,
        max_delay_s=2,
        **DOUBLING,
    )
    assert result.outcome.outcome is OutcomeKind.TIMED_OUT
    error = result.outcome.error
    assert isinstance(error, dict)
    assert words in str(error["detail"])
    other = "was reached" if words != "was reached" else "stopped before the deadline"
    assert other not in str(error["detail"])


# --- throttle and hint values -------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "profile", "factor"),
    [
        ((200, {"status": "running"}, {"retry-after-ms": "1"}), PROFILE, 1),
        ((200, {"status": "running"}, {"Retry-After": "0.5"}), PROFILE, 1),
        ((429, None, {"Retry-After": "1"}), PROFILE, THROTTLE_FACTOR),
        ((200, {"status": "running", "poll_after_seconds": 0.01}), HINTED, 1),
    ],
    ids=["retry-after-ms-1", "retry-after-0.5", "429-retry-after-1", "body-hint-10ms"],
)
def test_hint_below_the_floor_is_local_backoff(
    answer: Any, profile: Mapping[str, Any], factor: float
) -> None:
    """A positive hint shorter than min_delay is no minimum: the first jittered backoff
    applies (a throttle's for a 429), never less than the floor (a hint of zero likewise:
    tests/core/test_vendor_rules.py)."""
    result = run(
        {"/status": [answer, DONE]}, profile=profile, min_delay_s=3, base_delay_s=5, **DOUBLING
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    backoff = random.Random(SEED).uniform(2.5, 5.0) * factor
    assert result.clock.sleeps[0] == pytest.approx(max(3.0, backoff), abs=1e-5)
    scheduled = [e.event for e in result.store.audit(result.outcome.operation_id)]
    first = next(e for e in scheduled if e.kind == "scheduled")
    assert first.data["delay_source"] == "local_backoff"
    assert "below the 3s floor" in first.summary


def test_floor_above_the_cap_is_refused() -> None:
    """min_delay_s above max_delay_s is a UsageError naming both."""
    with pytest.raises(UsageError, match="min_delay_s") as caught:
        Policy(min_delay_s=5, max_delay_s=1, base_delay_s=0.5)
    assert "max_delay_s" in str(caught.value)


def test_a_zero_floor_is_refused_by_the_policy_itself() -> None:
    """min_delay_s = 0 would allow a tight loop: refused for the API as for the CLI."""
    with pytest.raises(UsageError, match="min_delay_s must be a positive"):
        Policy(min_delay_s=0)


@pytest.mark.parametrize("name", ["max_requests", "max_transport_failures", "max_rate_limited"])
def test_an_absurd_budget_is_refused_by_the_policy_itself(name: str) -> None:
    """A budget above 100,000 is a typo, not a plan: refused naming the field and limit."""
    with pytest.raises(UsageError, match=f"{name} must be at most 100000"):
        Policy(**{name: 10**12})  # type: ignore[arg-type]


def test_deadline_beyond_a_year_is_refused() -> None:
    """deadline_s = 10**9 is a UsageError that says the limit is a year."""
    with pytest.raises(UsageError, match="year"):
        Policy(deadline_s=10**9)


# --- profiles refuse ----------------------------------------------------------------

BASE_PROFILE: dict[str, Any] = {"state": "status", "pending": ["running"], "succeeded": ["done"]}


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({**BASE_PROFILE, "pending": [float("nan")]}, "plain JSON"),
        ({**BASE_PROFILE, "failed": [float("inf")]}, "plain JSON"),
        ({**BASE_PROFILE, "failed": [float("-inf")]}, "plain JSON"),
        ({**BASE_PROFILE, "pending": ["running", "queued", "running"]}, "twice in pending"),
        ({**BASE_PROFILE, "hint_headers": {"x-poll-after": ["s"]}}, "hint_headers"),
        ({**BASE_PROFILE, "http_status_states": {"²00": "succeeded"}}, "http_status_states"),
        ({**BASE_PROFILE, "http_status_states": {"\uff1200": "succeeded"}}, "http_status_states"),
        ({**BASE_PROFILE, "name": 7}, "name"),
    ],
    ids=[
        "nan",
        "infinity",
        "minus-infinity",
        "twice-in-one-list",
        "hint-unit-list",
        "status-superscript-two",
        "status-fullwidth-two",
        "name-not-string",
    ],
)
def test_bad_profile_is_refused_in_one_line(table: dict[str, Any], words: str) -> None:
    """Each unusable profile is a ProfileError with a one-line message naming the problem."""
    with pytest.raises(ProfileError) as caught:
        parse_profile(table)
    message = str(caught.value)
    assert words in message
    assert "\n" not in message


def test_toml_profile_with_a_datetime_is_refused_in_one_line(tmp_path: Path) -> None:
    """A TOML datetime is not JSON: loading the profile is a one-line ProfileError."""
    path = tmp_path / "p.toml"
    path.write_text(
        'description = 1979-05-27T07:32:00Z\nstate = "status"\npending = ["running"]\n',
        encoding="utf-8",
    )
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert "\n" not in str(caught.value)
    assert "plain JSON" in str(caught.value)


def test_a_profile_that_is_a_fifo_or_a_device_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO (it would wait for a writer) or ``/dev/zero`` (it never ends) as a profile
    file: one line, nothing read."""
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(ProfileError, match="not a regular file") as caught:
            load_profile(path)
        assert "\n" not in str(caught.value)


def test_toml_profile_without_a_datetime_loads(tmp_path: Path) -> None:
    """The same TOML profile with a string description loads (the refusal is the datetime)."""
    path = tmp_path / "p.toml"
    path.write_text(
        'description = "1979"\nstate = "status"\npending = ["running"]\n', encoding="utf-8"
    )
    assert load_profile(path).classify_value("running") is Classification.PENDING


# --- damaged stores -----------------------------------------------------------------


def finished_in(path: Path) -> str:
    """Run one wait to its outcome in a SQLite store at *path*; return its operation id."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/status": [RUNNING, DONE]})
    store = SQLiteStore(path)
    try:
        outcome = wait_with(
            provider, store=store, clock=clock, operation_id="op-db", base_delay_s=1
        )
    finally:
        store.close()
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    return outcome.operation_id


def raw_sql(path: Path, statement: str) -> None:
    """Change the store file behind waitbound's back."""
    db = sqlite3.connect(path)
    try:
        with db:
            db.execute(statement)
    finally:
        db.close()


def verify_stored_chain(path: Path, operation_id: str) -> None:
    """Verify the stored audit chain against the head its record names."""
    store = SQLiteStore(path)
    try:
        record = store.get(operation_id)
        assert record is not None
        verify_chain(store.audit(operation_id), head=(record.audit_seq, record.audit_head))
    finally:
        store.close()


def test_deleting_the_last_audit_row_breaks_the_chain(tmp_path: Path) -> None:
    """The chain verifies against the record's head; dropping the last row is detected."""
    path = tmp_path / "store.db"
    operation_id = finished_in(path)
    verify_stored_chain(path, operation_id)
    raw_sql(
        path,
        "DELETE FROM audit_events WHERE seq = (SELECT max(seq) FROM audit_events)",
    )
    with pytest.raises(StoreError, match="removed"):
        verify_stored_chain(path, operation_id)


def assert_one_line_store_error(error: StoreError) -> None:
    """A StoreError of one line that does not chain a sqlite3 exception."""
    assert "\n" not in str(error)
    assert not isinstance(error, sqlite3.Error)
    assert error.__cause__ is None
    assert error.__suppress_context__ or not isinstance(error.__context__, sqlite3.Error)


def test_file_with_schema_version_but_no_tables_is_a_store_error(tmp_path: Path) -> None:
    """user_version = 1 without tables: opening it raises a one-line StoreError, not
    sqlite3's, and adds no table."""
    path = tmp_path / "empty.db"
    raw_sql(path, "PRAGMA user_version = 1")
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path)
    assert_one_line_store_error(caught.value)


def test_record_row_with_an_empty_contract_part_is_a_store_error(tmp_path: Path) -> None:
    """A record whose contract part is {} (no id, profile, policy or creation time)
    raises a one-line StoreError on get."""
    path = tmp_path / "store.db"
    operation_id = finished_in(path)
    raw_sql(path, """UPDATE operations SET contract = '{}'""")
    store = SQLiteStore(path)
    try:
        with pytest.raises(StoreError) as caught:
            store.get(operation_id)
    finally:
        store.close()
    assert_one_line_store_error(caught.value)
