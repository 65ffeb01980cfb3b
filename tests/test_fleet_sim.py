"""The fleet simulation's accounting (benchmarks/_fleet_model.py) on tiny fleets with
known answers: constant latencies and costs, every figure worked out by hand."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from benchmarks._fleet_model import DbCosts, Fleet, Line, simulate

from waitbound import Policy
from waitbound._profile._schedule import backoff_delay_s

MS = 0.001
ZERO = Line(fixed_s=0.0, per_row_s=0.0)
COSTS = DbCosts(
    claim=Line(fixed_s=1 * MS, per_row_s=0.0),
    observe=Line(fixed_s=1 * MS, per_row_s=0.0),
    insert=ZERO,
    flush_s=0.0,
    client_claim=ZERO,
    client_observe=ZERO,
)
"""A claim and a group commit take 1 ms of the one core each; nothing else costs."""

SERIAL = Fleet(
    operations=100,
    rate_per_s=1e6,  # all 100 arrive within 0.1 ms
    workers=1,
    concurrency=1,
    batch=1,
    db_cores=1,
    costs=COSTS,
    poll_cpu_s=0.5 * MS,
    job_median_s=1 * MS,  # every job is done by its first poll
    job_p95_s=1 * MS,
    latency_median_s=10 * MS,
    latency_p95_s=10 * MS,
    window_s=(0.0, 1.251),
)
"""One worker, one slot: claim 1 ms + CPU 0.5 ms + answer 10 ms + commit 1 ms per job."""


def test_one_worker_one_slot_runs_one_job_per_cycle():
    """The first claim (at 0, before any insert committed) is empty; the worker wakes at
    1 ms and then runs one job per 12.5 ms cycle: the last ends at 1 ms + 100 cycles."""
    result = simulate(SERIAL)
    assert result.end_s == pytest.approx(0.001 + 100 * 0.0125)
    assert result.outcomes == {"succeeded": 100, "timed_out": 0, "request_budget_exhausted": 0}
    assert result.requests_per_job == 1.0
    window = 1.251
    assert result.polls_per_s == pytest.approx(100 / window)
    assert result.claims_per_s == pytest.approx(100 / window)
    assert result.claim_txns_per_s == pytest.approx(101 / window)
    assert result.empty_claims_per_s == pytest.approx(1 / window)
    # 100 inserts + 101 claims + 100 group commits; rows: 100 + 100 + 100
    assert result.txns_per_s == pytest.approx(301 / window)
    assert result.rows_per_s == pytest.approx(300 / window)
    assert result.db_utilisation == pytest.approx(0.201 / window)
    assert result.worker_utilisation == pytest.approx((100 * 0.0005 / window,))
    # a slot is held from the claim to the commit: 12.5 ms per job
    assert result.slot_utilisation == pytest.approx(100 * 0.0125 / window)
    # job k arrives at k us and is sent at 1 ms + k * 12.5 ms + 1.5 ms
    lag = [0.0025 + k * (0.0125 - 1e-6) for k in range(100)]
    assert result.lag_p50_s == pytest.approx(lag[49])
    assert result.lag_p99_s == pytest.approx(lag[98])
    # inserts 1..99 (at k us) wait for the first claim's core until 1 ms; of the 301
    # waits the nearest-rank p99 is the 4th longest (k = 4), the median 0
    assert result.db_wait_p99_s == pytest.approx(0.001 - 4e-6)
    assert result.db_wait_p50_s == 0.0
    # the answer that shows the job done comes 10 ms after the send; the job ended 1 ms
    # after its arrival
    assert result.detection_lag_mean_s == pytest.approx(
        sum(0.0025 + k * 0.0125 + 0.010 - (k * 1e-6 + 0.001) for k in range(100)) / 100
    )


def test_slots_and_batches_share_the_cycle():
    """With 4 slots and batches of 4 on one core: one claim takes 4 jobs; their answers
    arrive at once, the first is committed alone and the other 3 together (group
    commit); claims for the free slots wait for the core behind those commits."""
    fleet = replace(
        SERIAL, operations=8, concurrency=4, batch=4, poll_cpu_s=0.0, window_s=(0.0, 1.0)
    )
    result = simulate(fleet)
    # 0 ms: empty claim (the inserts queue behind it, commit at 1 ms); 1 ms: claim of
    # 4 (done 2 ms, answers at 12 ms); 12 ms: commit of 1 (done 13 ms), 3 queue;
    # 13 ms: commit of 3 (core 13-14 ms) and a claim of 1 (core 14-15 ms); 15 ms: claim
    # of the last 3 (done 16 ms); answers at 25 ms (1) and 26 ms (3): commit of 1
    # (done 26 ms), then of 3 (done 27 ms), with an empty claim between.
    assert result.end_s == pytest.approx(0.027)
    assert result.claims_per_s == pytest.approx(8.0)
    assert result.claim_txns_per_s == pytest.approx(5.0)  # 4, 1, 3 and two empty
    assert result.empty_claims_per_s == pytest.approx(2.0)
    assert result.txns_per_s == pytest.approx(8 + 5 + 4)  # inserts, claims, commits
    assert result.rows_per_s == pytest.approx(8 + 8 + 8)


def test_polls_follow_the_real_schedule_until_the_job_ends():
    """One job of 20 s is polled at t=0 and then after each delay the real backoff
    draws (attempt 0, 1, ...) until a poll lands after its end."""
    fleet = replace(
        SERIAL,
        operations=1,
        job_median_s=20.0,
        job_p95_s=20.0,
        poll_cpu_s=0.0,
        idle_s=1e4,  # an idle worker sleeps until the next poll is due
        seed=7,
    )
    result = simulate(fleet)
    jitter = random.Random("7/jitter")
    policy = Policy(deadline_s=3600.0)
    sent, attempt, expected = 0.002, 0, 1  # claim done at 2 ms (after the empty one)
    while sent < 20.0:
        answered = sent + 0.010
        delay = backoff_delay_s(
            attempt,
            base_delay_s=policy.base_delay_s,
            max_delay_s=policy.max_delay_s,
            rng=jitter,
            growth=policy.backoff_growth,
            jitter_floor=policy.backoff_jitter_floor,
        )
        attempt += 1
        expected += 1
        sent = answered + delay + 0.001  # the claim at next_poll_at takes 1 ms
    assert result.requests_per_job == expected
    assert result.outcomes["succeeded"] == 1
    assert result.detection_lag_mean_s == pytest.approx(sent + 0.010 - 20.0)


def test_the_request_budget_and_the_deadline_end_polling():
    """A job that outlives the budget stops at the budget (3 requests, the 4th claim
    escalates); one that outlives the deadline stops there."""
    budget = replace(
        SERIAL,
        operations=1,
        job_median_s=1e6,
        job_p95_s=1e6,
        policy=Policy(deadline_s=3600.0, max_requests=3),
    )
    result = simulate(budget)
    assert result.requests_per_job == 3
    assert result.outcomes == {"succeeded": 0, "timed_out": 0, "request_budget_exhausted": 1}
    deadline = replace(budget, policy=Policy(deadline_s=30.0, max_requests=30))
    result = simulate(deadline)
    assert result.outcomes == {"succeeded": 0, "timed_out": 1, "request_budget_exhausted": 0}
    assert result.end_s <= 30.0 + 0.01


def test_one_core_makes_concurrent_transactions_wait():
    """Two workers claiming at t=0 on one core: the second claim waits 1 ms for it (the
    insert before them waits for nothing)."""
    fleet = replace(SERIAL, operations=1, workers=2, window_s=(0.0, 0.0001))
    result = simulate(fleet)
    assert result.db_wait_p99_s == pytest.approx(0.001)
    assert result.db_wait_p50_s == 0.0


def test_the_same_seed_gives_the_same_run_and_bad_sizes_are_refused():
    """A run is a function of its fleet; sizes below 1 and a rate of 0 are refused."""
    fleet = replace(SERIAL, operations=300, job_median_s=60.0, job_p95_s=600.0, concurrency=8)
    assert simulate(fleet) == simulate(fleet)
    with pytest.raises(ValueError, match="must be >= 1"):
        simulate(replace(fleet, workers=0))
    with pytest.raises(ValueError, match="rate_per_s"):
        simulate(replace(fleet, rate_per_s=0.0))


def test_the_claim_pause_trades_lag_for_fewer_claims():
    """Jobs due at 0 and 50 ms: paced by 100 ms, the worker claims at 0 (nothing
    committed yet) and then both at 100 ms (2 claims; lags 101 and 51 ms); eager, it
    claims at every chance (at 0, 1, 2, 13, 50 and 51 ms: 6 claims, 4 of them empty;
    lags 2 and 1 ms)."""
    fleet = replace(
        SERIAL,
        operations=2,
        rate_per_s=20.0,
        concurrency=8,
        batch=8,
        poll_cpu_s=0.0,
        window_s=(0.0, 0.2),
    )
    paced = simulate(replace(fleet, claim_pause_s=0.1))
    assert paced.claim_txns_per_s == pytest.approx(2 / 0.2)
    assert paced.empty_claims_per_s == pytest.approx(1 / 0.2)
    assert (paced.lag_p50_s, paced.lag_p99_s) == pytest.approx((0.051, 0.101))
    eager = simulate(replace(fleet, claim_pause_s=0.0))
    assert eager.claim_txns_per_s == pytest.approx(6 / 0.2)
    assert eager.empty_claims_per_s == pytest.approx(4 / 0.2)
    assert (eager.lag_p50_s, eager.lag_p99_s) == pytest.approx((0.001, 0.002))
