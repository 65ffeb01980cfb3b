"""The learned-schedule benchmark's model math: the mixes, their true survival, the
limit line's planner and its accounting (fast, deterministic)."""

from __future__ import annotations

import math
import statistics

import pytest
from benchmarks._schedule_model import (
    MEDIAN_S,
    Mix,
    interpolate_front,
    mix_durations,
    poll_with,
    summarize,
    true_plan,
    true_survival,
)


@pytest.mark.parametrize("mix", list(Mix))
def test_each_mix_is_deterministic_and_matches_its_survival(mix: Mix) -> None:
    """The same seed gives the same jobs; their share still running at t is S(t)."""
    jobs = mix_durations(mix, 4000, 3)
    assert jobs == mix_durations(mix, 4000, 3)
    assert jobs != mix_durations(mix, 4000, 4)
    for t in (5.0, 60.0, 600.0):
        share = sum(1 for d in jobs if d > t) / len(jobs)
        assert share == pytest.approx(true_survival(mix, t), abs=0.03)


def test_the_medians_are_as_documented() -> None:
    """Log-normal and Pareto: median 60 s; bimodal: 70 % of jobs end by about 10 s."""
    assert true_survival(Mix.LOGNORMAL, MEDIAN_S) == pytest.approx(0.5)
    assert true_survival(Mix.PARETO, MEDIAN_S) == pytest.approx(0.5)
    assert true_survival(Mix.BIMODAL, 20.0) == pytest.approx(0.3, abs=0.01)
    assert statistics.median(mix_durations(Mix.LOGNORMAL, 2001, 1, slower=5.0)) == pytest.approx(
        5 * MEDIAN_S, rel=0.1
    )


def test_poll_with_counts_as_the_provider_does() -> None:
    """Every 30 s from the first delay: a 65 s job is seen at 90 s, after 3 requests."""
    run = poll_with(lambda t: 30.0, 65.0, cap_s=60.0)
    assert (run.requests, run.lag_s) == (3, 25.0)
    past = poll_with(lambda t: None, 65.0, cap_s=60.0)  # past the horizon: every cap
    assert (past.requests, past.lag_s) == (2, 55.0)


def test_interpolate_front_between_points_and_nan_outside() -> None:
    """Linear between the two points around the lag; NaN beyond the curve."""
    front = [(8.0, 10.0), (4.0, 20.0)]
    assert interpolate_front(front, 15.0) == pytest.approx(6.0)
    assert math.isnan(interpolate_front(front, 25.0))


def test_the_limit_beats_the_formula_at_its_lag_on_the_lognormal_mix() -> None:
    """The plan on the true log-normal survival, at the formula's lag (about 16 s),
    needs well under the formula's 6.95 requests per job: the gap the issue measures."""
    planned = true_plan(Mix.LOGNORMAL, floor_s=1.0, cap_s=60.0, lag_target_s=16.0)
    jobs = mix_durations(Mix.LOGNORMAL, 1000, 7)
    stats = summarize([poll_with(planned.next_delay_s, d, 60.0) for d in jobs])
    assert stats.lag_mean_s == pytest.approx(16.0, rel=0.15)
    assert stats.requests_per_job < 5.8
    assert planned.planned_requests == pytest.approx(stats.requests_per_job, rel=0.15)
