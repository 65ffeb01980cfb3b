"""The fleet-waves benchmark's simulation, run tiny (benchmarks/fleet_waves.py), so it
cannot rot: a fleet told the same thing comes back in waves, and pacing spreads them
without moving a poll earlier than planned."""

from __future__ import annotations

import math
from itertools import pairwise

from benchmarks import fleet_waves


def test_a_hinted_fleet_comes_back_as_one_wave_and_pacing_spreads_it() -> None:
    """200 operations, every answer Retry-After 120, jobs outlasting the deadline: off,
    nearly the whole fleet polls in one second; on, the peak falls several-fold."""
    off = fleet_waves.simulate(operations=200, seed=1, hint_s=120.0, paced=False, endless=True)
    on = fleet_waves.simulate(operations=200, seed=1, hint_s=120.0, paced=True, endless=True)
    plain, paced = fleet_waves.figures(off, 1), fleet_waves.figures(on, 1)
    assert plain.steady > 5 * paced.steady
    assert paced.steady <= 2 * paced.steady_poisson
    assert plain.added_s == 0
    assert paced.added_s > 0
    assert len(on.requests) == len(off.requests)  # the same polls, moved later only


def test_the_default_schedule_fleet_ends_every_job_and_measures_its_lag() -> None:
    """100 log-normal jobs on the default schedule: every poll sequence is increasing,
    every job ended before the deadline is detected, the lag is positive."""
    run = fleet_waves.simulate(operations=100, seed=2, hint_s=None, paced=True)
    assert all(a < b for polls in run.polls for a, b in pairwise(polls))
    got = fleet_waves.figures(run, 2)
    assert got.mean_lag_s > 0
    assert not math.isnan(got.third_on)


def test_the_table_has_a_row_per_mix_and_pacing() -> None:
    """The table measure() prints: each mix, pacing off then on."""
    rows = fleet_waves.measure(operations=30, seeds=[1])
    assert len(rows) == 2 * len(fleet_waves.MIXES)
    assert [row[1] for row in rows[:2]] == ["off", "on"]
    assert len(rows[0]) == len(fleet_waves.HEADERS)
