"""Backoff with jitter, and provider hints (RFC 9110 Retry-After and body hints)."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from email.utils import format_datetime
from itertools import pairwise
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.harness import DOUBLING, SEED, URL
from tests.core.harness import PROFILE as HARNESS_PROFILE
from tests.core.test_properties import ANSWERS, POLICIES
from tests.core.test_properties import PROFILE as PROPERTY_PROFILE
from tests.core.test_properties import Provider as PropertyProvider
from tests.core.test_properties import _retry_after_s as retry_after_s
from tests.fakes import START, Answer, FakeClock, ScriptedProvider, gaps
from tests.hypothesis_profiles import examples
from waitbound import (
    DelaySource,
    MemoryStore,
    Operation,
    Outcome,
    OutcomeKind,
    Policy,
    UsageError,
    parse_profile,
    parse_retry_after,
    start,
    wait,
)
from waitbound._base._json import JSON
from waitbound._engine._inbox import sweep_inbox
from waitbound._model._audit import AuditEvent
from waitbound._model._push import InboundDelivery
from waitbound._model._record import Push, Record
from waitbound._profile._schedule import (
    backoff_bounds_s,
    backoff_delay_s,
    backoff_raw_s,
    hinted_delay_s,
    read_hints,
)
from waitbound._rules._controller import WEBHOOK_RECHECK_S, Sleep, plan

PROFILE = parse_profile(
    {
        "state": "s",
        "pending": ["p"],
        "poll_hint": "hint",
        "next_check_at": "next",
        "hint_headers": {"X-Poll-Interval": "s"},
    }
)


@pytest.mark.parametrize(
    ("attempt", "raw"), [(0, 5.0), (1, 10.0), (4, 80.0), (5, 120.0), (64, 120.0), (10_000, 120.0)]
)
def test_backoff_doubles_then_clamps_without_overflow(attempt: int, raw: float) -> None:
    """raw = min(120, 5 * 2**attempt); attempt 10,000 gives the cap, never an overflow."""
    assert backoff_raw_s(attempt, base_delay_s=5, max_delay_s=120, growth=2.0) == raw


@pytest.mark.parametrize(
    ("growth", "attempt", "raw"),
    [
        (1.5, 0, 5.0),
        (1.5, 1, 7.5),
        (1.5, 4, 25.3125),
        (1.5, 6, 56.953125),
        (1.5, 7, 60.0),
        (1.5, 10_000, 60.0),
        (1.0, 0, 5.0),
        (1.0, 10_000, 5.0),
        (10.0, 1, 50.0),
        (10.0, 2, 60.0),
        (1.000001, 10_000_000, 60.0),
    ],
)
def test_backoff_growth_is_the_ratio_of_steps_and_clamps(
    growth: float, attempt: int, raw: float
) -> None:
    """raw = min(cap, base * growth**attempt) for any growth; 1 is a fixed interval; attempt
    10,000 gives the cap (or the base at growth 1), never an overflow."""
    assert backoff_raw_s(attempt, base_delay_s=5, max_delay_s=60, growth=growth) == raw


def test_backoff_jitter_is_uniform_between_half_and_full() -> None:
    """The drawn delay lies in [0.5 * raw, raw] and uses the whole range."""
    rng = random.Random(7)
    draws = [
        backoff_delay_s(2, base_delay_s=5, max_delay_s=120, rng=rng, growth=2.0, jitter_floor=0.5)
        for _ in range(2000)
    ]
    assert min(draws) >= 10
    assert max(draws) <= 20
    assert min(draws) < 10.5
    assert max(draws) > 19.5


@pytest.mark.parametrize("floor", [0.0, 0.8, 1.0])
def test_backoff_jitter_floor_bounds_the_draw(floor: float) -> None:
    """With jitter floor f the delay is exactly f*raw + (raw - f*raw) * u, one draw u."""
    rng, same = random.Random(11), random.Random(11)
    draws = [
        backoff_delay_s(1, base_delay_s=4, max_delay_s=60, rng=rng, growth=1.5, jitter_floor=floor)
        for _ in range(500)
    ]
    assert draws == [same.uniform(floor * 6.0, 6.0) for _ in range(500)]
    assert min(draws) >= floor * 6.0
    assert max(draws) <= 6.0


def test_hint_jitter_is_upward_only_and_small() -> None:
    """A hint of 5 s (10 % is below the seconds bound) is waited 5 to 5.5 s."""
    rng = random.Random(3)
    draws = [hinted_delay_s(5, jitter=0.1, max_jitter_s=1.0, rng=rng) for _ in range(1000)]
    assert min(draws) >= 5
    assert max(draws) <= 5.5
    assert max(draws) > 5.45


@pytest.mark.parametrize(("hint", "most"), [(300.0, 301.0), (120.0, 121.0), (10.0, 11.0)])
def test_hint_jitter_is_bounded_in_seconds(hint: float, most: float) -> None:
    """An exact hint costs at most hint_jitter_max_s: 300 s is waited 300 to 301 s, never
    330 s; the whole second is used (the jitter still spreads a fleet a little)."""
    rng = random.Random(5)
    draws = [hinted_delay_s(hint, jitter=0.1, max_jitter_s=1.0, rng=rng) for _ in range(1000)]
    assert min(draws) >= hint
    assert max(draws) <= most
    assert max(draws) > most - 0.05


def test_hint_jitter_bound_of_zero_waits_the_hint_exactly() -> None:
    """hint_jitter_max_s = 0: the hint is waited exactly (the draw is still taken)."""
    rng = random.Random(5)
    assert {hinted_delay_s(42.0, jitter=0.1, max_jitter_s=0.0, rng=rng) for _ in range(50)} == {
        42.0
    }


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("backoff_growth", 0.9, "backoff_growth must be a number from 1 to 10, got 0.9"),
        ("backoff_growth", 11, "backoff_growth must be a number from 1 to 10, got 11"),
        ("backoff_growth", float("nan"), "backoff_growth must be a number from 1 to 10"),
        ("backoff_growth", True, "backoff_growth must be a number from 1 to 10, got True"),
        ("backoff_jitter_floor", -0.1, "backoff_jitter_floor must be a number from 0 to 1"),
        ("backoff_jitter_floor", 1.5, "backoff_jitter_floor must be a number from 0 to 1"),
        ("hint_jitter_max_s", -1, "hint_jitter_max_s must be a non-negative number of seconds"),
        ("hint_jitter_max_s", float("inf"), "hint_jitter_max_s must be a non-negative"),
    ],
)
def test_pacing_knobs_out_of_range_are_refused(field: str, value: object, words: str) -> None:
    """Each pacing knob names itself and the range it must be in."""
    with pytest.raises(UsageError, match="^" + re.escape(words)):
        Policy(**{field: value})  # type: ignore[arg-type]


def test_the_default_pacing() -> None:
    """Policy's pacing defaults (the _schedule.DEFAULT_* constants): base 5 s, cap 60 s,
    growth 1.5, 80-100 % jitter; hint jitter 10 % and at most 1 s."""
    policy = Policy()
    assert (
        policy.base_delay_s,
        policy.max_delay_s,
        policy.backoff_growth,
        policy.backoff_jitter_floor,
        policy.hint_jitter,
        policy.hint_jitter_max_s,
    ) == (5.0, 60.0, 1.5, 0.8, 0.1, 1.0)


def test_the_default_schedule_of_a_job_without_hints() -> None:
    """A job pending for seven answers under Policy(): the seeded draws of the default
    shape, raw = min(60, 5 * 1.5**n) drawn from [0.8 * raw, raw]."""
    answers: list[Answer] = [RUNNING] * 7
    script: dict[str, list[Answer]] = {"/status": [*answers, DONE]}
    clock = FakeClock()
    provider = ScriptedProvider(clock, script)
    wait(
        Operation(status_url=URL, profile=parse_profile(WEBHOOK_PROFILE)),
        store=MemoryStore(),
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(SEED),
    )
    rng = random.Random(SEED)
    raws = (5.0, 7.5, 11.25, 16.875, 25.3125, 37.96875, 56.953125)
    assert clock.sleeps == pytest.approx([rng.uniform(0.8 * r, r) for r in raws], abs=1e-5)


def test_a_stored_policy_without_the_pacing_knobs_decodes_with_the_defaults() -> None:
    """A record written before the pacing knobs existed reads with today's defaults."""
    record = start(
        Operation(status_url=URL, profile=PROPERTY_PROFILE), store=(store := MemoryStore())
    )
    stored = store.get(record.operation_id)
    assert stored is not None
    data = stored.to_json()
    assert isinstance(data["policy"], dict)
    data["policy"] = policy = dict(data["policy"])  # a copy: to_json's policy dict is shared
    for knob in ("backoff_growth", "backoff_jitter_floor", "hint_jitter_max_s"):
        assert knob in policy
        del policy[knob]
    assert Record.from_json(data).policy == Policy()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("4", 4.0), (" 120 ", 120.0), ("0", 0.0), ("1.5", 1.5), ("0.25", 0.25)],
)
def test_retry_after_delay_seconds(value: str, seconds: float) -> None:
    """RFC 9110 §10.2.3 delay-seconds are SECONDS (4 means 4 s); a decimal 1.5 means 1.5 s."""
    assert parse_retry_after(value, now=START) == seconds


def test_retry_after_http_date_uses_the_given_now() -> None:
    """An IMF-fixdate Retry-After is measured from the observation time handed in."""
    when = format_datetime(START + timedelta(seconds=90), usegmt=True)
    assert parse_retry_after(when, now=START) == 90.0
    assert parse_retry_after(when, now=START + timedelta(seconds=200)) == 0.0


@pytest.mark.parametrize(
    "value",
    [
        "Thu, 01 Jan 2026 12:01:30 GMT",
        "Thursday, 01-Jan-26 12:01:30 GMT",
        "Thu Jan  1 12:01:30 2026",
    ],
    ids=["imf-fixdate", "rfc-850", "asctime"],
)
def test_retry_after_accepts_all_three_http_date_forms(value: str) -> None:
    """RFC 9110 §5.6.7: IMF-fixdate, the obsolete RFC 850 form and asctime all parse."""
    assert parse_retry_after(value, now=START) == 90.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2, 30", 30.0),
        ("30, 2", 30.0),
        ("1.5, 1", 1.5),
        ("5, Thu, 01 Jan 2026 12:01:30 GMT", 90.0),
        ("Thu, 01 Jan 2026 12:01:30 GMT, Thu, 01 Jan 2026 12:00:10 GMT", 90.0),
        ("Thu Jan  1 12:01:30 2026, 3", 90.0),
        ("soon, 7", 7.0),
    ],
)
def test_repeated_retry_after_headers_give_the_largest_valid_value(
    value: str, seconds: float
) -> None:
    """Two Retry-After headers arrive joined ("2, 30"): the client waits the longest asked."""
    assert parse_retry_after(value, now=START) == seconds


@pytest.mark.parametrize(
    "value",
    [
        "1000abc",
        "soon",
        "-5",
        "",
        "Mon, 99 Foo 2026",
        ".5",
        "1.",
        "\uff11\uff12",
        "-5, soon",
        "Thu, 01 Jan 2026 12:01:30 EST",
        "Thu, 01 Jan 2026 12:01:30 GMT junk",
    ],
)
def test_malformed_retry_after_is_rejected(value: str) -> None:
    """Values that are neither delay-seconds nor an HTTP-date are refused, not guessed."""
    with pytest.raises(ValueError, match="neither delay-seconds nor an HTTP-date"):
        parse_retry_after(value, now=START)


@pytest.mark.parametrize(
    ("value", "origin"),
    [
        ("30", "Retry-After header"),
        ("2, 30", "Retry-After header '2, 30' (largest of 2 values)"),
        ("2, soon", "Retry-After header '2, soon' (largest of 1 value; ignored 'soon')"),
    ],
)
def test_the_hint_says_which_retry_after_value_was_read(value: str, origin: str) -> None:
    """A joined Retry-After is recorded with how many values it held and which were ignored."""
    hint, invalid = read_hints({"retry-after": value}, None, PROFILE, now=START)
    assert invalid == ()
    assert hint is not None
    assert hint.origin == origin


def _hint(headers: dict[str, str], body: object = None) -> tuple[object, list[str]]:
    reading = PROFILE.read(body) if body is not None else None  # type: ignore[arg-type]
    hint, invalid = read_hints(headers, reading, PROFILE, now=START)
    return hint, [bad.origin for bad in invalid]


@pytest.mark.parametrize(
    ("headers", "body", "delay", "source"),
    [
        ({"retry-after-ms": "1500", "retry-after": "9"}, None, 1.5, "provider_retry_after"),
        ({"x-ms-retry-after-ms": "250", "retry-after": "9"}, None, 0.25, "provider_retry_after"),
        ({"retry-after": "9", "x-poll-interval": "3"}, {"hint": 2}, 9.0, "provider_retry_after"),
        ({"x-poll-interval": "3"}, {"hint": 2}, 3.0, "provider_poll_hint"),
        ({}, {"hint": 2, "next": "2026-01-01T12:01:00Z"}, 2.0, "provider_poll_hint"),
        ({}, {"next": "2026-01-01T12:01:00Z"}, 60.0, "provider_poll_hint"),
    ],
)
def test_hint_precedence(headers: dict[str, str], body: object, delay: float, source: str) -> None:
    """ms headers, then Retry-After, then profile headers, then poll_hint, then next_check_at."""
    hint, invalid = _hint(headers, body)
    assert invalid == []
    assert hint is not None
    assert (hint.delay_s, hint.source) == (delay, DelaySource(source))  # type: ignore[attr-defined]


def test_invalid_hint_is_recorded_and_the_next_one_applies() -> None:
    """An unparsable hint is reported and skipped; the next valid one in precedence wins."""
    hint, invalid = _hint({"retry-after": "soon"}, {"hint": -3, "next": "2026-01-01T12:00:10Z"})
    assert invalid == ["Retry-After header", "body poll_hint"]
    assert hint is not None
    assert hint.delay_s == 10.0  # type: ignore[attr-defined]


def test_no_valid_hint_gives_none() -> None:
    """With only invalid hints, there is no hint: local backoff applies."""
    hint, invalid = _hint({"retry-after-ms": "abc"}, {"hint": "later"})
    assert hint is None
    assert invalid == ["retry-after-ms header", "body poll_hint"]


# --- the backup schedule (webhooks expected) and the 1 s recheck -------------------

WEBHOOK_PROFILE = {**HARNESS_PROFILE, "poll_hint": "poll_after"}


@dataclass
class WebhookRun:
    outcome: Outcome
    clock: FakeClock
    provider: ScriptedProvider
    store: MemoryStore

    @property
    def gaps(self) -> list[float]:
        return gaps([t for p, t in self.provider.requests if p == "/status"])

    def scheduled(self) -> list[AuditEvent]:
        events = self.store.audit(self.outcome.operation_id)
        return [e.event for e in events if e.event.kind == "scheduled"]


def run_expecting_webhooks(
    script: Mapping[str, Sequence[Answer]], *, webhook: str | None = "reports", **policy: Any
) -> WebhookRun:
    """Wait (the real loop, virtual time, seeded RNG) on an operation expecting webhooks
    (without ``max_requests``, a budget that covers the deadline: see ``harness.run``)."""
    policy.setdefault("max_requests", 1000)
    clock = FakeClock()
    provider = ScriptedProvider(clock, script)
    store = MemoryStore()
    operation = Operation(
        status_url=URL, profile=parse_profile(WEBHOOK_PROFILE), policy=Policy(**policy)
    )
    first = start(operation, store=store, clock=clock)
    record = store.get(first.operation_id)
    assert record is not None
    store.save(record.evolve(push=Push(webhook=webhook)), [])
    outcome = wait(
        operation_id=first.operation_id,
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(SEED),
    )
    return WebhookRun(outcome=outcome, clock=clock, provider=provider, store=store)


RUNNING = (200, {"status": "running"})
DONE = (200, {"status": "done", "output": {"rows": 3}})


def test_backoff_bounds_on_the_backup_schedule() -> None:
    """The backup schedule multiplies base and cap by backup_factor; off it, both stand."""
    assert backoff_bounds_s(5.0, 120.0, backup_factor=4.0) == (20.0, 480.0)
    assert backoff_bounds_s(5.0, 120.0, backup_factor=None) == (5.0, 120.0)


def test_webhooks_expected_poll_on_the_backup_schedule_exactly() -> None:
    """Base and cap x backup_factor: gaps are the seeded draws of [raw/2, raw], raw = 4 * 2 *
    2**attempt capped at 4 * 5; each scheduled event says backup_polling."""
    result = run_expecting_webhooks(
        {"/status": [RUNNING, RUNNING, RUNNING, RUNNING, DONE]},
        base_delay_s=2,
        max_delay_s=5,
        deadline_s=600,
        **DOUBLING,
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    rng = random.Random(SEED)
    expected = [rng.uniform(raw / 2, raw) for raw in (8.0, 16.0, 20.0, 20.0)]
    assert result.gaps == pytest.approx(expected, abs=1e-5)
    assert {e.data["delay_source"] for e in result.scheduled()} == {"backup_polling"}


def test_without_webhooks_the_same_script_polls_on_the_ordinary_schedule() -> None:
    """Regression guard: no push.webhook, no backup factor, local_backoff."""
    result = run_expecting_webhooks(
        {"/status": [RUNNING, RUNNING, DONE]},
        webhook=None,
        base_delay_s=2,
        max_delay_s=5,
        **DOUBLING,
    )
    rng = random.Random(SEED)
    assert result.gaps == pytest.approx([rng.uniform(1, 2), rng.uniform(2, 4)], abs=1e-5)
    assert {e.data["delay_source"] for e in result.scheduled()} == {"local_backoff"}


def test_a_sleeping_wait_rechecks_the_record_every_second_when_webhooks_are_expected() -> None:
    """Every sleep is at most WEBHOOK_RECHECK_S (the driver re-reads and re-plans)."""
    result = run_expecting_webhooks(
        {"/status": [RUNNING, DONE]}, base_delay_s=2, max_delay_s=5, deadline_s=600
    )
    assert result.clock.sleeps
    assert max(result.clock.sleeps) <= WEBHOOK_RECHECK_S
    assert sum(result.clock.sleeps) == pytest.approx(result.gaps[0], abs=1e-5)


def test_the_recheck_cap_applies_only_with_webhooks_and_never_passes_the_deadline() -> None:
    """plan's Sleep: 1 s with push.webhook, the whole wait without; the deadline still first."""
    store = MemoryStore()
    outcome = start(
        Operation(status_url=URL, profile=parse_profile(WEBHOOK_PROFILE), policy=Policy()),
        store=store,
        clock=FakeClock(),
    )
    record = store.get(outcome.operation_id)
    assert record is not None
    due = record.evolve(schedule=record.schedule.evolve(next_poll_at=START + timedelta(seconds=30)))
    plain = plan(due, START, owner="w")
    assert isinstance(plain, Sleep)
    assert plain.seconds == 30
    hooked = plan(due.evolve(push=Push(webhook="reports")), START, owner="w")
    assert isinstance(hooked, Sleep)
    assert hooked.seconds == WEBHOOK_RECHECK_S
    near = due.evolve(
        schedule=due.schedule.evolve(deadline_at=START + timedelta(seconds=0.4)),
        push=Push(webhook="reports"),
    )
    last = plan(near, START, owner="w")
    assert isinstance(last, Sleep)
    assert last.seconds == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("poll_after", "wins"),
    [(3, "backup_polling"), (100, "provider_poll_hint")],
    ids=["hint-shorter-than-backup", "hint-longer-than-backup"],
)
def test_a_provider_hint_is_a_minimum_of_the_backup_schedule(poll_after: int, wins: str) -> None:
    """Hinted delay and backup draw, both seeded: the later applies, with its source."""
    result = run_expecting_webhooks(
        {"/status": [(200, {"status": "running", "poll_after": poll_after}), DONE]},
        base_delay_s=5,
        max_delay_s=120,
        deadline_s=600,
        **DOUBLING,
    )
    rng = random.Random(SEED)
    hinted = poll_after + rng.uniform(0, min(0.1 * poll_after, 1.0))
    backup = rng.uniform(10, 20)
    assert result.gaps == pytest.approx([max(hinted, backup)], abs=1e-5)
    assert result.scheduled()[0].data["delay_source"] == wins


def test_a_throttle_keeps_its_own_rule_when_webhooks_are_expected() -> None:
    """A 429 without a hint backs off THROTTLE_FACTOR x the ordinary backoff (not backup)."""
    result = run_expecting_webhooks(
        {"/status": [(429, {"error": "slow"}), DONE]}, base_delay_s=2, max_delay_s=5, **DOUBLING
    )
    rng = random.Random(SEED)
    assert result.gaps == pytest.approx([4 * rng.uniform(1, 2)], abs=1e-5)
    assert result.scheduled()[0].data["delay_source"] == "local_backoff"


def test_the_backup_schedule_is_clamped_to_the_deadline() -> None:
    """A backup delay past the deadline is clipped: timed_out at the deadline, no request."""
    result = run_expecting_webhooks({"/status": [RUNNING]}, base_delay_s=5, deadline_s=15)
    assert result.outcome.outcome is OutcomeKind.TIMED_OUT
    assert result.provider.count("/status") == 1
    assert sum(result.clock.sleeps) == pytest.approx(15, abs=1e-5)


_HINT_PAYLOADS: tuple[JSON, ...] = (
    {"status": "done", "output": {"ok": 1}},
    {"status": "done"},
    {"status": "running"},
)
"""Deliveries in turn: an authoritative success, a plain hint, an authoritative pending."""


class HintingProvider(PropertyProvider):
    """The drawn answers, plus webhook deliveries landing at drawn virtual times (applied
    by a sweep when they are due, while a request is in flight too)."""

    def __init__(
        self,
        clock: FakeClock,
        answers: list[dict[str, object]],
        store: MemoryStore,
        at: list[float],
    ) -> None:
        super().__init__(clock, answers)
        self.store = store
        self.due = sorted(at)
        self.sent_hints = 0

    def hint(self) -> None:
        elapsed = (self.clock.now() - START).total_seconds()
        while self.due and self.due[0] <= elapsed:
            self.due.pop(0)
            self.sent_hints += 1
            self.store.put_delivery(
                InboundDelivery(
                    provider="reports",
                    webhook_id=f"msg_{self.sent_hints}",
                    received_at=self.clock.now(),
                    job_id="job-1",
                    payload=_HINT_PAYLOADS[self.sent_hints % 3],
                    authoritative=self.sent_hints % 3 != 1,
                )
            )
            sweep_inbox(self.store, clock=self.clock, rng=random.Random(0))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.hint()  # sent after a delivery
        try:
            return super().__call__(request)
        finally:
            self.hint()  # a delivery while the answer is on its way

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)
        self.hint()


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    answers=st.lists(ANSWERS, min_size=1, max_size=12),
    policy=POLICIES,
    factor=st.sampled_from([1.0, 4.0, 10.0]),
    hints=st.lists(st.floats(0, 700, allow_nan=False), max_size=20),
    seed=st.integers(),
)
def test_webhooks_expected_never_send_more_than_the_policy_allows(
    answers: list[dict[str, object]], policy: Policy, factor: float, hints: list[float], seed: int
) -> None:
    """Backup schedule and hints at any time (in flight too): within the request budget,
    nothing sent at or after the deadline, never earlier than a Retry-After on an answer
    that is not a 2xx (a demanded wait; on a 2xx it only paces, and a webhook is newer)."""
    policy = replace(policy, backup_factor=factor)
    clock = FakeClock()
    store = MemoryStore()
    operation = Operation(status_url=URL, profile=PROPERTY_PROFILE, policy=policy, job_id="job-1")
    first = start(operation, store=store, clock=clock)
    record = store.get(first.operation_id)
    assert record is not None
    store.save(record.evolve(push=Push(webhook="reports")), [])
    provider = HintingProvider(clock, answers, store, hints)
    outcome = wait(
        operation_id=first.operation_id,
        store=store,
        client=httpx.Client(transport=httpx.MockTransport(provider)),
        clock=clock,
        sleep=provider.sleep,
        rng=random.Random(seed),
    )
    done = store.get(outcome.operation_id)
    assert done is not None
    assert len(provider.log) <= policy.max_requests
    assert done.requests_used == len(provider.log)
    assert all(sent < done.deadline_at for sent, _, _, _ in provider.log)
    assert done.finished_at is not None
    assert done.finished_at <= done.deadline_at
    for (_, answered, delivered, answer), (next_sent, _, _, _) in pairwise(provider.log):
        minimum = retry_after_s(answer)
        demanded = answer["code"] not in (200, 202)
        if minimum is not None and delivered and demanded:
            assert (next_sent - answered).total_seconds() >= minimum - 1e-6
    assert provider.sent_hints <= len(hints)
    if outcome.outcome is OutcomeKind.SUCCEEDED:
        assert outcome.result == {"ok": 1}
