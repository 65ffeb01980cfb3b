"""Origin pacing (``Policy.origin_pacing``): a fleet that got the same answer does not
come back as one wave, and every bound still holds.

Deterministic: time is a FakeClock, randomness a seeded Random, the calendar a
MemoryStore's (crowded beforehand through its own ``pace``)."""

from __future__ import annotations

import functools
import math
import random
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.test_properties import ANSWERS, PROFILE, URL, Provider
from tests.core.test_worker import PROFILE as DONE_PROFILE
from tests.core.test_worker import Provider as WorkerProvider
from tests.core.test_worker import _run_worker
from tests.fakes import Autojump, FakeClock
from tests.hypothesis_profiles import examples
from waitbound import MemoryStore, Operation, OutcomeKind, Policy, Record, start, wait
from waitbound._base._errors import StoreError
from waitbound._model._observation import Observation
from waitbound._model._pacing import SPREAD_FACTOR, choose, origin_key, pacer_for, span
from waitbound._model._record import (
    Contract,
    Counters,
    Schedule,
    Submission,
)
from waitbound._rules._controller import observe
from waitbound._story import story_line

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ORIGIN = "http://provider.test:80"
PACED = Policy(origin_pacing=True)


def _crowd(store: MemoryStore, start: datetime, polls: int, *, seconds: float = 120.0) -> None:
    """Count *polls* planned polls of the origin in the *seconds* after *start* (a
    crowded calendar: every bucket holds about ``polls / seconds``)."""
    for k in range(polls):
        planned = start + timedelta(seconds=seconds * k / polls)
        store.pace(ORIGIN, planned, latest_at=planned, now=start, rng_offset=0.0)


Wave = tuple[datetime, int, float]
"""``(start, polls, seconds)``: :func:`_crowd`'s arguments."""


@functools.cache
def _crowded_calendar(waves: tuple[Wave, ...]) -> tuple[dict[str, dict[int, int]], int]:
    """The calendar (counts per origin and bucket, and where pruning stands) that
    :func:`_crowd` builds for *waves* in a new store, built once per *waves*: the
    crowding is deterministic, and 40,000 calls of ``pace`` cost more than the wait."""
    scratch = MemoryStore()
    for first, polls, seconds in waves:
        _crowd(scratch, first, polls, seconds=seconds)
    return scratch._calendar, scratch._pruned_before


def _crowded(*waves: Wave) -> MemoryStore:
    """A new store whose calendar is what :func:`_crowd` builds for *waves* in order
    (a copy of :func:`_crowded_calendar`'s; ``test_a_copied_crowd_is_the_one_pace_builds``
    holds the copy to the real thing)."""
    calendar, pruned_before = _crowded_calendar(waves)
    store = MemoryStore()
    store._calendar = {origin: dict(counts) for origin, counts in calendar.items()}
    store._pruned_before = pruned_before
    return store


def test_a_copied_crowd_is_the_one_pace_builds() -> None:
    """:func:`_crowded` gives the calendar that crowding a store through ``pace`` gives:
    the same counts, and the same times for the polls that come after."""
    waves: tuple[Wave, ...] = ((T0, 2000, 120.0), (T0 + timedelta(seconds=4), 2000, 3.0))
    built = MemoryStore()
    for first, polls, seconds in waves:
        _crowd(built, first, polls, seconds=seconds)
    copied = _crowded(*waves)
    assert copied.calendar_size() == built.calendar_size() > 0
    rng = random.Random(3)
    for k in range(300):
        planned = T0 + timedelta(seconds=5 + k / 10)
        offset = rng.random()
        latest = planned + timedelta(seconds=30)
        assert copied.pace(
            ORIGIN, planned, latest_at=latest, now=T0, rng_offset=offset
        ) == built.pace(ORIGIN, planned, latest_at=latest, now=T0, rng_offset=offset)


def _wait(
    policy: Policy, store: MemoryStore, answers: list[dict[str, object]], seed: int
) -> tuple[Provider, Record]:
    clock = FakeClock()
    provider = Provider(clock, answers)
    outcome = wait(
        Operation(status_url=URL, profile=PROFILE, policy=policy),
        store=store,
        client=httpx.Client(transport=httpx.MockTransport(provider)),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(seed),
    )
    record = store.get(outcome.operation_id)
    assert record is not None
    return provider, record


RUNNING: dict[str, object] = {
    "code": 200,
    "body": {"status": "running"},
    "retry_after": None,
    "latency_s": 0.0,
}


def test_the_origin_is_scheme_host_and_port() -> None:
    """The calendar's key: ``scheme://host:port``, the port defaulted; no URL, none."""
    assert origin_key("https://API.example/v1/jobs/1?x=2") == "https://api.example:443"
    assert origin_key("http://provider.test:8080/status") == "http://provider.test:8080"
    assert origin_key(None) is None
    assert origin_key("not a url") is None


def test_a_thousand_polls_for_one_instant_are_spread_within_allowed() -> None:
    """1,000 polls planned for the same instant: no bucket holds more than allowed,
    every poll in [planned, latest], and the wave covers many buckets."""
    store = MemoryStore()
    rng = random.Random(5)
    planned = T0 + timedelta(seconds=5.5)
    latest = planned + timedelta(seconds=60)
    got = [
        store.pace(ORIGIN, planned, latest_at=latest, now=T0, rng_offset=rng.random())
        for _ in range(1000)
    ]
    assert all(planned <= at <= latest for at in got)
    counts: dict[int, int] = {}
    for at in got:
        b = math.floor(at.timestamp())
        counts[b] = counts.get(b, 0) + 1
    where = span(planned, latest_at=latest, now=T0)
    allowed = math.ceil(SPREAD_FACTOR * 1000 / (where.mean_last - where.first + 1))
    assert max(counts.values()) <= allowed
    assert len(counts) >= 1000 // allowed


def test_choose_never_moves_a_poll_earlier_or_past_latest() -> None:
    """The pure choice on a full calendar: no room up to latest keeps the planned time."""
    planned = T0 + timedelta(seconds=10.7)
    full = {math.floor(planned.timestamp()) + k: 10**6 for k in range(-20, 200)}
    bucket, at = choose(
        full, planned, latest_at=planned + timedelta(seconds=30), now=T0, rng_offset=0.3
    )
    assert at == planned
    assert bucket == math.floor(planned.timestamp())


def test_a_lone_operation_is_never_delayed() -> None:
    """One operation on a fresh store: every poll goes out when every other rule planned
    it (no scheduled event is paced), and the requests are as many as without pacing."""
    answers = [RUNNING] * 12 + [{**RUNNING, "body": {"status": "done", "output": {"a": 1}}}]
    store = MemoryStore()
    paced, record = _wait(PACED, store, answers, seed=3)
    plain, _ = _wait(Policy(), MemoryStore(), answers, seed=3)
    scheduled = [s.event for s in store.audit(record.operation_id) if s.event.kind == "scheduled"]
    assert len(scheduled) == 12
    assert not [e for e in scheduled if "paced_by_origin" in e.data]
    assert len(paced.log) == len(plain.log)
    assert store.calendar_size() > 0  # it was asked


def test_a_crowded_origin_moves_the_poll_later_and_the_story_says_so() -> None:
    """On a crowded calendar the next poll moves later, never earlier than the hint; its
    scheduled event records ``paced_by_origin`` with the seconds added, and the story
    line shows it next to the delay source."""
    store = MemoryStore()
    start = FakeClock().now()
    _crowd(store, start + timedelta(seconds=19), 2000, seconds=4)  # a wave at 19-23 s
    hinted = {**RUNNING, "retry_after": "20"}
    provider, record = _wait(
        PACED, store, [hinted, hinted, {**hinted, "body": {"status": "done", "output": 1}}], seed=1
    )
    scheduled = [s.event for s in store.audit(record.operation_id) if s.event.kind == "scheduled"]
    paced = [e for e in scheduled if "paced_by_origin" in e.data]
    assert paced
    note = paced[0].data["paced_by_origin"]
    assert isinstance(note, dict)
    assert note["origin"] == ORIGIN
    assert isinstance(note["added_s"], float)
    assert 0 < note["added_s"] <= PACED.max_delay_s
    assert "paced by origin http://provider.test:80" in paced[0].summary
    assert "paced_by_origin +" in story_line(paced[0])
    assert "(provider_poll_hint" in story_line(paced[0]) or "(provider_retry_after" in story_line(
        paced[0]
    )
    for (_, answered, _, _), (next_sent, _, _, _) in pairwise(provider.log):
        assert (next_sent - answered).total_seconds() >= 20.0 - 1e-6


def test_pacing_off_asks_no_calendar() -> None:
    """The default policy never writes the calendar."""
    store = MemoryStore()
    _wait(Policy(), store, [RUNNING] * 3 + [{**RUNNING, "body": {"status": "done"}}], seed=2)
    assert store.calendar_size() == 0


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    answers=st.lists(ANSWERS, min_size=1, max_size=15),
    crowd=st.sampled_from([0, 50, 2000, 20000]),
    deadline_s=st.sampled_from([30.0, 120.0, 600.0]),
    max_requests=st.sampled_from([3, 30]),
    seed=st.integers(),
)
def test_pacing_never_breaks_a_bound(
    answers: list[dict[str, object]], crowd: int, deadline_s: float, max_requests: int, seed: int
) -> None:
    """Any answers, any crowding: within the request budget, nothing sent at or after
    the deadline, the outcome by it, never earlier than a Retry-After, consecutive
    requests at least the floor apart."""
    policy = Policy(origin_pacing=True, deadline_s=deadline_s, max_requests=max_requests)
    start = FakeClock().now()
    store = _crowded(
        (start, crowd, 120.0), (start + timedelta(seconds=4), crowd, 3.0)
    )  # and a wave
    provider, record = _wait(policy, store, answers, seed)
    assert len(provider.log) <= policy.max_requests
    assert all(sent < record.deadline_at for sent, _, _, _ in provider.log)
    assert record.finished_at is not None
    assert record.finished_at <= record.deadline_at
    for (_, answered, delivered, answer), (next_sent, _, _, _) in pairwise(provider.log):
        waited = (next_sent - answered).total_seconds()
        assert waited >= policy.floor_s - 1e-5
        hint = answer["retry_after"]
        if delivered and isinstance(hint, str) and hint.isdigit():
            reach = answered + timedelta(seconds=float(hint))
            if answer["code"] in (200, 202) and reach >= record.deadline_at:
                continue  # guidance past the deadline is rejected (issue 33)
            assert waited >= float(hint) - 1e-6


@settings(max_examples=examples(200), deadline=None)
@given(
    crowd=st.sampled_from([0, 100, 5000]),
    retry_after=st.one_of(st.none(), st.integers(0, 400)),
    left_s=st.floats(1.0, 900.0),
    seed=st.integers(0, 2**32),
)
def test_a_paced_poll_is_between_its_planned_time_and_its_latest(
    crowd: int, retry_after: int | None, left_s: float, seed: int
) -> None:
    """The same answer decided with and without the pacer (the same seed: pacing draws
    after every other rule): the paced time is never earlier than the planned one,
    never later than planned + max_delay_s nor the deadline; every other field the
    same."""
    now = T0 + timedelta(seconds=100)
    record = Record(
        contract=Contract(operation_id="op-p", profile=PROFILE, policy=PACED, created_at=T0),
        submission=Submission(status_url=URL),
        counters=Counters(status_requests_used=1),
        schedule=Schedule(deadline_at=now + timedelta(seconds=left_s), next_poll_at=now),
    )
    headers = {} if retry_after is None else {"retry-after": str(retry_after)}
    observation = Observation(
        kind="status", at=now, http_status=200, headers=headers, body={"status": "running"}
    )
    store = _crowded((now, crowd, 120.0), (now + timedelta(seconds=4), crowd, 20.0))  # and a wave
    paced = observe(record, observation, rng=random.Random(seed), pacer=pacer_for(store))
    plain = observe(record, observation, rng=random.Random(seed))
    planned, got = plain.record.next_poll_at, paced.record.next_poll_at
    assert got >= planned
    latest = min(planned + timedelta(seconds=PACED.max_delay_s), record.stop_at)
    assert got <= max(planned, latest)
    assert (
        paced.record.evolve(schedule=paced.record.schedule.evolve(next_poll_at=planned))
        == plain.record
    )
    if got > planned:
        assert "paced_by_origin" in paced.events[-1].data


class _NoCalendar:
    """A third-party store without ``pace``."""


class _Down(MemoryStore):
    def pace(self, *args: object, **kwargs: object) -> datetime:
        raise StoreError("the calendar is down")


def test_a_store_without_a_calendar_or_down_paces_nothing() -> None:
    """A store without ``pace``, or one that fails, keeps the planned time."""
    planned = T0 + timedelta(seconds=7)
    later = planned + timedelta(seconds=60)
    for store in (_NoCalendar(), _Down()):
        pacer = pacer_for(store)
        assert pacer(ORIGIN, planned, latest_at=later, now=T0, rng=random.Random(1)) == planned


def test_a_worker_paces_a_wave_through_the_calendar() -> None:
    """60 operations started together on one origin, driven by one worker: every one
    ends succeeded after its three polls, and the worker's second wave was spread
    (its scheduled events say paced_by_origin), never sooner than planned."""
    store = MemoryStore()
    clock = FakeClock()
    policy = Policy(origin_pacing=True, base_delay_s=5.0, max_delay_s=10.0, deadline_s=120)
    ids = [
        start(
            Operation(
                status_url=f"http://provider.test/jobs/{i}", profile=DONE_PROFILE, policy=policy
            ),
            store=store,
            clock=clock,
        ).operation_id
        for i in range(60)
    ]
    jump = Autojump(clock)
    provider = WorkerProvider(jump)
    _run_worker(store, provider, clock, jump, concurrency=60, idle_s=0.05)
    assert [store.get(i).outcome for i in ids] == [OutcomeKind.SUCCEEDED] * 60  # type: ignore[union-attr]
    added = [
        note["added_s"]
        for i in ids
        for s in store.audit(i)
        if s.event.kind == "scheduled"
        and isinstance(note := s.event.data.get("paced_by_origin"), dict)
    ]
    assert added
    assert all(isinstance(a, float) and 0 < a <= policy.max_delay_s for a in added)


def test_a_confirmation_recheck_is_not_paced() -> None:
    """A success without its required output is confirmed inside its window: those
    re-checks keep their time however crowded the origin is."""
    store = MemoryStore()
    start_at = FakeClock().now()
    _crowd(store, start_at + timedelta(seconds=1), 3000, seconds=3)  # a wave at 1-4 s
    done_bare = {**RUNNING, "body": {"status": "done"}}
    _, record = _wait(PACED, store, [done_bare] * 4, seed=4)
    scheduled = [s.event for s in store.audit(record.operation_id) if s.event.kind == "scheduled"]
    assert scheduled
    assert all("confirming" in e.summary for e in scheduled)
    assert not [e for e in scheduled if "paced_by_origin" in e.data]


def _choose_by_walking(
    counts: dict[int, int], planned_at: datetime, *, latest_at: datetime, now: datetime
) -> tuple[int, datetime]:
    """The documented rule, second by second (the reference the bounded search must
    agree with; only for short spans)."""
    where = span(planned_at, latest_at=latest_at, now=now)
    if latest_at <= planned_at:
        return where.planned, planned_at
    buckets = where.mean_last - where.first + 1
    total = sum(counts.get(b, 0) for b in range(where.first, where.mean_last + 1)) + 1
    allowed = max(1, math.ceil(SPREAD_FACTOR * total / buckets))
    for b in range(where.planned, where.latest + 1):
        if counts.get(b, 0) < allowed:
            if b == where.planned:
                return b, planned_at
            at = datetime.fromtimestamp(b + 0.5, UTC)
            return b, min(latest_at, max(planned_at, at))
    return where.planned, planned_at


def test_the_bounded_search_agrees_with_the_second_by_second_rule() -> None:
    """On 2,000 seeded random calendars, ``choose`` picks what a walk over every second
    picks: the same room, the first bucket with room, never earlier, never past latest."""
    rng = random.Random(32)
    now = T0 + timedelta(seconds=0.3)
    for _ in range(2000):
        counts = {
            math.floor(now.timestamp()) + rng.randrange(-3, 200): rng.randrange(1, 12)
            for _ in range(rng.randrange(0, 120))
        }
        planned = now + timedelta(seconds=rng.uniform(0, 150))
        latest = planned + timedelta(seconds=rng.choice([0, 0.4, 5, 30, 90]))
        got = choose(counts, planned, latest_at=latest, now=now, rng_offset=0.5)
        assert got == _choose_by_walking(counts, planned, latest_at=latest, now=now)


class _CountingCounts(dict[int, int]):
    """A calendar that counts every bucket read through it."""

    reads = 0

    def get(self, key: int, default: int | None = None) -> int | None:  # type: ignore[override]
        self.reads += 1
        return super().get(key, default)

    def __getitem__(self, key: int) -> int:
        self.reads += 1
        return super().__getitem__(key)

    def items(self):
        for item in super().items():
            self.reads += 1
            yield item


def test_a_poll_a_year_ahead_reads_only_the_buckets_that_hold_polls() -> None:
    """The work of ``choose`` is bounded by the calendar's occupied buckets, whatever the
    distance: a poll planned a day or a year ahead reads the same buckets as one planned
    a minute ahead (it walked every second: 2 s of CPU for 180 days, under the store's
    write lock)."""
    first = math.floor(T0.timestamp())
    reads = {}
    for ahead_s in (60.0, 86_400.0, 365 * 86_400.0):
        counts = _CountingCounts({first + k: 3 for k in range(0, 200, 2)})
        planned = T0 + timedelta(seconds=ahead_s)
        latest = planned + timedelta(seconds=600)
        _, at = choose(counts, planned, latest_at=latest, now=T0, rng_offset=0.5)
        assert planned <= at <= latest
        reads[ahead_s] = counts.reads
        assert counts.reads <= 2 * len(counts) + 2, (ahead_s, counts.reads)
    assert reads[365 * 86_400.0] == reads[60.0]


def test_a_full_stretch_far_ahead_is_crossed_in_steps_of_its_full_buckets() -> None:
    """A wave planned a year ahead is spread past its full buckets: each poll's search
    costs a step per full bucket before the first gap, never a step per second."""
    planned = T0 + timedelta(days=365)
    latest = planned + timedelta(seconds=600)
    counts: dict[int, int] = {}
    for k in range(300):
        bucket, at = choose(counts, planned, latest_at=latest, now=T0, rng_offset=0.5)
        assert planned <= at <= latest
        counts[bucket] = counts.get(bucket, 0) + 1
        assert len(counts) <= k + 1
    assert max(counts.values()) == 1  # a year's mean is tiny: room for one per second
    assert len(counts) == 300  # 300 seconds of the 600 allowed, in order
