"""The schedule benchmark's model and accounting (benchmarks/_schedule_model.py).

None of this imports a peer library: the bench extra is not needed to run it.
"""

from __future__ import annotations

import math
import random

import pytest
from benchmarks._schedule_model import (
    MEDIAN_S,
    P95_S,
    HintMode,
    JobRun,
    Provider,
    fixed_interval,
    job_durations,
    markdown_table,
    pareto_front,
    percentile,
    run_jobs,
    summarize,
)

from benchmarks import schedule_efficiency


def provider(duration_s: float, mode: HintMode = HintMode.NONE, seed: int = 1) -> Provider:
    return Provider(duration_s=duration_s, mode=mode, rng=random.Random(seed))


def test_durations_are_log_normal_with_the_median_and_p95_asked_for():
    """20,000 durations: median within 5 % of 60 s, p95 within 10 % of 600 s."""
    durations = job_durations(20_000, seed=7)
    assert percentile(durations, 50) == pytest.approx(MEDIAN_S, rel=0.05)
    assert percentile(durations, 95) == pytest.approx(P95_S, rel=0.10)
    assert min(durations) > 0


def test_durations_are_fixed_by_the_seed():
    """The same seed gives the same jobs; another seed other jobs."""
    assert job_durations(50, seed=3) == job_durations(50, seed=3)
    assert job_durations(50, seed=3) != job_durations(50, seed=4)


def test_fixed_interval_requests_and_lag_are_counted_by_the_provider():
    """A 65 s job polled every 30 s from t = 0: requests at 0, 30, 60, 90; lag 25 s."""
    job = provider(65.0)
    fixed_interval(30.0)(job, random.Random(0))
    assert job.times == [0.0, 30.0, 60.0, 90.0]
    assert job.requests == 4
    assert job.detected_at == 90.0


def test_summary_of_known_runs():
    """Three jobs of 10, 65 and 100 s polled every 30 s: (1+4+5)/3 requests, lags 20, 25, 20."""
    runs = run_jobs([10.0, 65.0, 100.0], HintMode.NONE, 1, fixed_interval(30.0))
    assert [run.requests for run in runs] == [2, 4, 5]
    assert [run.lag_s for run in runs] == [20.0, 25.0, 20.0]
    stats = summarize(runs)
    assert stats.requests_per_job == pytest.approx(11 / 3)
    assert stats.lag_mean_s == pytest.approx(65 / 3)
    assert stats.lag_p50_s == 20.0
    assert stats.lag_p95_s == pytest.approx(24.5)
    assert stats.abandoned == 0.0


class GaveUp(Exception):
    pass


def test_a_strategy_that_gives_up_abandons_the_job_and_keeps_its_requests():
    """Two requests, then the strategy's own limit: abandoned, requests still counted,
    lag figures over the detected jobs only."""

    def two_tries(job: Provider, rng: random.Random) -> None:
        for t in (0.0, 10.0):
            if job.status(t).done:
                return
        raise GaveUp

    runs = run_jobs([5.0, 50.0], HintMode.NONE, 1, two_tries, gives_up=(GaveUp,))
    assert runs == [
        JobRun(duration_s=5.0, requests=2, detected_at=10.0),
        JobRun(duration_s=50.0, requests=2, detected_at=None),
    ]
    stats = summarize(runs)
    assert stats.requests_per_job == 2.0
    assert stats.abandoned == 0.5
    assert stats.lag_mean_s == 5.0


def test_an_unexpected_exception_is_not_taken_for_giving_up():
    """A broken adapter stops the benchmark instead of passing for a peer that gave up."""

    def broken(job: Provider, rng: random.Random) -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_jobs([5.0], HintMode.NONE, 1, broken, gives_up=(GaveUp,))


@pytest.mark.parametrize(
    ("mode", "t", "expected"),
    [
        (HintMode.NONE, 10.0, None),
        (HintMode.EXACT, 10.0, 91),  # ceil(100.5 - 10)
        (HintMode.EXACT, 100.0, 1),  # 0.5 s left: at least 1
        (HintMode.STALE, 0.0, 60),
        (HintMode.STALE, 45.5, 15),
        (HintMode.STALE, 60.0, 0),
        (HintMode.STALE, 90.0, 0),  # overdue: stays 0
    ],
)
def test_hints(mode, t, expected):
    """Exact: ceil(remaining), at least 1; stale: 60 s counted down to 0, then 0; none: none."""
    assert provider(100.5, mode).status(t).hint_s == expected


def test_noisy_hint_is_within_30_percent_and_seeded():
    """±30 %: ceil(remaining * U(0.7, 1.3)); the same seed gives the same hints."""
    a, b = provider(1000.0, HintMode.NOISY, 5), provider(1000.0, HintMode.NOISY, 5)
    hints = [a.status(0.0).hint_s for _ in range(200)]
    assert hints == [b.status(0.0).hint_s for _ in range(200)]
    assert all(h is not None and 700 <= h <= 1300 for h in hints)
    assert len(set(hints)) > 50


def test_no_hint_on_done_and_the_submit_answer_is_not_counted():
    """The submit's 202 carries the hint at t = 0 and is not a status request."""
    job = provider(30.0, HintMode.EXACT)
    assert job.submit().hint_s == 30
    assert job.requests == 0
    answer = job.status(30.0)
    assert answer.done
    assert answer.hint_s is None


def test_pareto_front():
    """A point is on the front unless another is no worse in both and better in one."""
    points = {"a": (1.0, 10.0), "b": (2.0, 5.0), "c": (2.0, 6.0), "d": (3.0, 5.0), "e": (4.0, 1.0)}
    assert pareto_front(points) == ["a", "b", "e"]


def test_hint_optimal_line_costs_one_request_with_exact_hints():
    """Polling exactly when the exact hint says finds every job with its first request."""
    runs = run_jobs(job_durations(100, seed=2), HintMode.EXACT, 2, schedule_efficiency.hint_optimal)
    stats = summarize(runs)
    assert stats.requests_per_job == 1.0
    assert 0 <= stats.lag_p95_s < 1.0


def test_table_marks_abandoning_strategies_and_the_front():
    """Lag over detected jobs only is starred; front members get the diamond."""
    stats = summarize([JobRun(duration_s=5.0, requests=3, detected_at=None)])
    assert math.isnan(stats.lag_mean_s)
    kept = summarize([JobRun(duration_s=5.0, requests=2, detected_at=7.0)])
    table = markdown_table(
        {("peer", HintMode.NONE): stats, ("ours", HintMode.NOISY): kept},
        {HintMode.NOISY: ["ours"]},
    )
    assert "| peer | none | 3.00 | -* | -* | -* | 100.0 % |  |" in table
    assert "| ours | ±30 % | 2.00 | 2.0 | 2.0 | 2.0 | 0.0 % | ◆ |" in table


def test_policy_option_passes_keywords_and_refuses_unknown_ones_in_one_line():
    """--policy takes any Policy keyword; an unknown one or a bad value is one clear line."""
    label, keywords = schedule_efficiency.parse_policy('cand={"max_delay_s": 60}')
    assert (label, keywords) == ("cand", {"max_delay_s": 60})
    assert schedule_efficiency.waitbound_policy(keywords).max_delay_s == 60
    assert schedule_efficiency.parse_policy('{"base_delay_s": 2}')[0] == (
        'waitbound {"base_delay_s": 2}'
    )
    with pytest.raises(ValueError, match="no keyword 'growth'") as unknown:
        schedule_efficiency.waitbound_policy({"growth": 2})
    with pytest.raises(ValueError, match="max_delay_s") as bad:
        schedule_efficiency.waitbound_policy({"max_delay_s": -1})
    with pytest.raises(ValueError, match="not JSON") as not_json:
        schedule_efficiency.parse_policy("{max_delay_s: 60}")
    for error in (unknown, bad, not_json):
        assert "\n" not in str(error.value)


def test_two_runs_with_one_seed_write_the_same_table(tmp_path, capsys):
    """waitbound's real driver (both entries) on 8 jobs in every hint mode, twice: the
    same table; without the peers no front is claimed."""
    tables = []
    for run in ("a", "b"):
        out = tmp_path / run
        argv = ["--no-peers", "--no-plot", "--entry", "both", "--jobs", "8", "--seed", "3"]
        assert schedule_efficiency.main([*argv, "--out-dir", str(out)]) == 0
        tables.append((out / "schedule_efficiency.md").read_text())
    assert tables[0] == tables[1]
    assert tables[0].count("| waitbound (default) |") == 4
    assert tables[0].count("| waitbound (default) [wait at t=0] |") == 4
    assert "| hint-optimal (poll when the hint says) | exact | 1.00 |" in tables[0]
    assert "◆" not in tables[0]
    capsys.readouterr()


def test_bad_policy_on_the_command_line_is_one_line(capsys):
    """A bad --policy exits 2 with one line naming the problem, no traceback."""
    code = schedule_efficiency.main(["--no-peers", "--no-plot", "--policy", '{"nope": 1}'])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("error: --policy: Policy has no keyword 'nope'")
