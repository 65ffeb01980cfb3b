"""The learned schedule: the next poll time from the history of jobs of the same kind.

Pure functions (no clock, no store, no global random). Two steps, both documented in
``docs/waiting.md``:

1. **The estimate** (:func:`estimate`): the survival function ``S(t) = P(job still
   running t seconds after acceptance)`` from a key's evidence (``_history.py``), on a
   time grid that handles both kinds of evidence: a job that ended somewhere in
   ``(last seen running, first seen ended]`` contributes its end spread over that
   interval (interval-censored) — evenly, then by one round of Turnbull's
   self-consistency algorithm, in proportion to where the other jobs' ends are — and a
   job that timed out or was canceled is right-censored: its mass goes to the times
   after it was last seen running, never counted as an end there. A history of only
   censored jobs therefore reads as ``S = 1`` as far as it reaches: "longer than",
   never a duration.

2. **The plan** (:func:`plan`): a dynamic programme over the conditional survival
   function. From "still running at ``t``" the next poll ``t'`` minimises
   ``1 + λ·E[lag; ended in (t, t']] / S(t) + S(t')/S(t)·V(t')``; multiplied by
   ``S(t)`` this is ``W(t) = S(t) + min over t' of [λ·∫_t^t' (S(t) - S(u)) du + W(t')]``,
   solved backwards on the grid, every step ``t' - t`` between the policy's floor and
   cap. ``λ`` (requests per second of mean lag) is chosen by bisection so the planned
   mean lag is ``Policy.lag_target_s``, or, without one, the formula's own expected
   lag on the same estimate: the learned schedule is then as quick as the formula
   would be, with fewer requests.

A :class:`LearnedSchedule` answers :meth:`~LearnedSchedule.next_delay_s` for any
elapsed time by one more step of the same programme; past the estimate's horizon (a
job slower than nearly all seen) it answers ``None`` and the formula applies.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from waitbound._model._history import Evidence
from waitbound._model._record import Record
from waitbound._profile._policy import Policy
from waitbound._profile._schedule import backoff_raw_s

__all__ = [
    "MIN_JOBS",
    "MODEL_VERSION",
    "LearnedSchedule",
    "ModelLookup",
    "Survival",
    "estimate",
    "formula_lag_s",
    "learned_jitter_s",
    "plan",
]

MODEL_VERSION: Final = 2
"""The estimator and planner's version (recorded in the audit with every learned delay)."""

MIN_JOBS: Final = 20
"""A key needs this many jobs whose end was seen before its schedule is learned; with
fewer (a cold start, or a history of one) the formula applies."""

_RELATIVE_STEP: Final = 0.05
"""The grid grows by 5 % of the time reached (a poll time is planned within 5 %)."""
_TAIL_S: Final = 0.002
"""The horizon: where the estimate says fewer than 0.2 % of jobs still run."""
_BISECTIONS: Final = 24


@dataclass(frozen=True, slots=True, kw_only=True)
class Survival:
    """``S(t)`` on a grid: ``survival[k] = P(T > times[k])``, ``times[0] = 0``,
    ``times[-1]`` the horizon (seconds); linear between grid points.

    ``jobs``: pieces of evidence read; ``ended``: those whose end was seen;
    ``censored``: those that say only "longer than".
    """

    times: tuple[float, ...]
    survival: tuple[float, ...]
    jobs: int
    ended: int
    censored: int

    @property
    def horizon_s(self) -> float:
        """The last time the estimate speaks for (seconds)."""
        return self.times[-1]

    def at(self, t: float) -> float:
        """``S(t)``, interpolated; the horizon's value beyond it."""
        times = self.times
        if t >= times[-1]:
            return self.survival[-1]
        if t <= 0:
            return 1.0
        k = bisect_right(times, t) - 1
        span = times[k + 1] - times[k]
        w = (t - times[k]) / span if span > 0 else 0.0
        return self.survival[k] + w * (self.survival[k + 1] - self.survival[k])

    def quantile_s(self, q: float) -> float | None:
        """The time by which a share *q* of jobs ended (seconds), or ``None`` when the
        estimate never gets there: the jobs are "longer than" the horizon."""
        for k in range(1, len(self.times)):
            if self.survival[k] <= 1.0 - q:
                s0, s1 = self.survival[k - 1], self.survival[k]
                t0, t1 = self.times[k - 1], self.times[k]
                w = (s0 - (1.0 - q)) / (s0 - s1) if s0 > s1 else 1.0
                return t0 + w * (t1 - t0)
        return None


_MAX_POINTS: Final = 4000
"""The grid never has more points than this: a tiny cap or a vast history makes its
steps coarser, never its size (or the plan's cost) unbounded."""


def _grid(end_s: float, *, resolution_s: float, max_step_s: float) -> list[float]:
    """0, then steps of *resolution_s* growing to 5 % of the time reached (at most
    *max_step_s*, at least ``end_s / 4000``), to *end_s* inclusive."""
    times = [0.0]
    t = 0.0
    least = end_s / _MAX_POINTS
    while t < end_s:
        t += max(least, min(max(resolution_s, t * _RELATIVE_STEP), max_step_s))
        times.append(t)
    return times


def estimate(
    evidence: Sequence[Evidence], *, resolution_s: float = 0.5, max_step_s: float = 15.0
) -> Survival:
    """Estimate the survival function from a key's evidence (module docstring, step 1).

    Args:
        evidence: the key's duration evidence (any order).
        resolution_s: the grid's finest step near 0 (seconds).
        max_step_s: its coarsest step (seconds; the planner asks for a quarter of the cap).

    Returns:
        The estimate; with no evidence, ``S = 1`` on ``[0, resolution_s]``.
    """
    ended = [(e.low_s, e.high_s) for e in evidence if e.high_s is not None]
    censored = [e.low_s for e in evidence if e.high_s is None]
    reach = max([h for _, h in ended] + censored + [resolution_s])
    times = _grid(reach, resolution_s=resolution_s, max_step_s=max_step_s)
    cells = len(times) - 1
    spans: list[tuple[int, list[float]]] = []  # each ended job: first cell, overlaps
    for low, high in ended:
        if high - low < 1e-9:  # seen running and ended at (almost) one instant
            k = max(0, min(cells - 1, bisect_left(times, high) - 1))
            spans.append((k, [1.0]))
            continue
        first = max(0, bisect_right(times, low) - 1)
        last = max(first, min(cells - 1, bisect_left(times, high) - 1))
        overlaps = []
        for k in range(first, last + 1):
            start, stop = times[k], times[k + 1]
            inside = max(0.0, min(stop, high) - max(start, low))
            overlaps.append(inside / (stop - start) if stop > start else 1.0)
        spans.append((first, overlaps))
    after = [min(bisect_left(times, low), cells) for low in censored]  # first cell past it
    mass = _self_consistent(cells, spans, after, len(evidence))
    survival = [1.0]
    for k in range(cells):
        survival.append(max(0.0, survival[-1] - mass[k]))
    cut = next((k for k, s in enumerate(survival) if s < _TAIL_S), len(survival) - 1)
    cut = max(cut, 1)
    return Survival(
        times=tuple(times[: cut + 1]),
        survival=tuple(survival[: cut + 1]),
        jobs=len(evidence),
        ended=len(ended),
        censored=len(censored),
    )


_ITERATIONS: Final = 1
"""Rounds of the self-consistency algorithm (each O(grid + evidence)). One round from
the even spread: it moves each end toward where the other jobs' ends are (and a
censored job's mass onto the times after it); more rounds converge to the maximum
likelihood estimate, whose mass sits in a few spikes the plan then fits too closely
(measured with ``benchmarks.learned_schedule``'s bimodal mix after 200 jobs: one round
+9 % above the limit, three rounds +11 %)."""


def _self_consistent(
    cells: int, spans: Sequence[tuple[int, Sequence[float]]], after: Sequence[int], jobs: int
) -> list[float]:
    """The mass of ends per grid cell (the last entry: beyond the grid) by Turnbull's
    self-consistency algorithm (the nonparametric maximum likelihood estimate for
    interval-censored and right-censored evidence, B. W. Turnbull, JRSS B 38, 1976).

    A job that ended in ``(low, high]`` puts its unit of mass on the cells it overlaps
    in proportion to the current estimate there (and its overlap); a job seen running
    last at ``low`` and then censored, on every cell after ``low`` (the beyond-the-grid
    cell included) in proportion to the estimate. Started from each end spread evenly
    over its interval (the first round's answer without the estimate), so the ends of
    jobs polled at different times sharpen each other: with a history polled by the
    formula (wide, overlapping windows), the uniform spread alone put ends late where
    the density falls, and the plan's lag came out above what it planned."""
    if jobs == 0:
        return [0.0] * (cells + 1)
    mass = [0.0] * (cells + 1)
    for first, overlaps in spans:
        total = sum(overlaps) or 1.0
        for offset, share in enumerate(overlaps):
            mass[first + offset] += share / total / jobs
    mass[cells] += len(after) / jobs
    by_cell = [0] * (cells + 1)
    for k in after:
        by_cell[k] += 1
    for _ in range(_ITERATIONS):
        new = [0.0] * (cells + 1)
        for first, overlaps in spans:
            weights = [share * mass[first + o] for o, share in enumerate(overlaps)]
            total = sum(weights)
            if total <= 0.0:
                weights, total = list(overlaps), sum(overlaps) or 1.0
            for offset, weight in enumerate(weights):
                new[first + offset] += weight / total
        # censored jobs: each spreads over the cells from its own on, by the mass there
        tail = [0.0] * (cells + 2)
        for k in range(cells, -1, -1):
            tail[k] = tail[k + 1] + mass[k]
        factor = 0.0
        for k in range(cells + 1):
            if by_cell[k]:
                factor += by_cell[k] / tail[k] if tail[k] > 0.0 else 0.0
            new[k] += mass[k] * factor
        mass = [m / jobs for m in new]
    return mass


@dataclass(frozen=True, slots=True, kw_only=True)
class LearnedSchedule:
    """A planned schedule for one key's history and one policy's bounds.

    ``key``, ``history_version``: which history it was computed from; ``jobs`` /
    ``ended`` / ``censored``: its sample; ``lam``: the weight of a second of lag in
    requests; ``planned_requests`` and ``planned_lag_s``: what the plan expects per job
    from acceptance, on its own estimate; ``lag_target_s``: the lag it was planned for.
    """

    key: str
    history_version: int
    model_version: int
    jobs: int
    ended: int
    censored: int
    floor_s: float
    cap_s: float
    lag_target_s: float
    lam: float
    planned_requests: float
    planned_lag_s: float
    times: tuple[float, ...]
    survival: tuple[float, ...]
    area: tuple[float, ...]
    cost: tuple[float, ...]

    def next_delay_s(self, elapsed_s: float) -> float | None:
        """The planned delay (seconds, within ``[floor_s, cap_s]``) from a job still
        running *elapsed_s* seconds after acceptance; ``None`` past the horizon, where
        the estimate no longer speaks (the formula applies)."""
        times = self.times
        e = max(0.0, elapsed_s)
        lo = bisect_left(times, e + self.floor_s)
        hi = bisect_right(times, e + self.cap_s) - 1
        if lo >= len(times):
            return None
        s_e, a_e = _interpolated(times, self.survival, self.area, e)
        if s_e < 1e-9:
            return None
        if lo > hi:  # the grid is coarser than the cap here: the next point is past it
            return self.cap_s
        best, arg = math.inf, lo
        for j in range(lo, hi + 1):
            c = self.lam * (s_e * (times[j] - e) - (self.area[j] - a_e)) + self.cost[j]
            if c < best:
                best, arg = c, j
        return min(self.cap_s, max(self.floor_s, times[arg] - e))

    def describe(self) -> dict[str, float | int | str]:
        """What the audit records with a learned delay: the model and its sample."""
        return {
            "key": self.key,
            "model_version": self.model_version,
            "history_version": self.history_version,
            "jobs": self.jobs,
            "ended": self.ended,
            "censored": self.censored,
            "lag_target_s": round(self.lag_target_s, 3),
        }


def learned_jitter_s(planned_s: float, policy: Policy, rng: random.Random) -> float:
    """A planned delay, jittered so a fleet of jobs accepted together does not poll in
    one wave, with the draw's mean exactly the plan (seconds).

    Drawn from ``[jitter_floor * top, top]`` with ``top`` such that the mean is
    *planned_s*; where that ``top`` would pass the cap (``max_delay_s``), from the
    interval centred on the plan that ends at the cap instead: clipping at the cap
    would pull the mean below the plan, and a plan near the cap (a long job's polls)
    would then spend up to a tenth more requests than planned."""
    floor = policy.backoff_jitter_floor
    cap = policy.max_delay_s
    top = planned_s * 2.0 / (1.0 + floor)
    if top <= cap:
        return rng.uniform(floor * top, top)
    top = max(planned_s, cap)
    return rng.uniform(max(0.0, 2.0 * planned_s - top), top)


ModelLookup = Callable[[Record, datetime], LearnedSchedule | None]
"""The learned schedule for a record at a time, or ``None`` (the formula applies); the
controller is handed one (``_schedule_models.ScheduleModels``) and never reads a store."""


def _interpolated(
    times: Sequence[float], survival: Sequence[float], area: Sequence[float], t: float
) -> tuple[float, float]:
    """``S(t)`` and ``∫_0^t S`` between grid points (the last point's beyond it)."""
    if t >= times[-1]:
        return survival[-1], area[-1] + survival[-1] * (t - times[-1])
    k = bisect_right(times, t) - 1
    span = times[k + 1] - times[k]
    w = (t - times[k]) / span if span > 0 else 0.0
    s = survival[k] + w * (survival[k + 1] - survival[k])
    return s, area[k] + (t - times[k]) * (survival[k] + s) / 2.0


def _areas(times: Sequence[float], survival: Sequence[float]) -> list[float]:
    area = [0.0]
    for k in range(1, len(times)):
        area.append(area[-1] + (times[k] - times[k - 1]) * (survival[k] + survival[k - 1]) / 2.0)
    return area


def _solve(  # noqa: PLR0917 - the grid's three columns, its windows, the weight, the tail
    times: Sequence[float],
    survival: Sequence[float],
    area: Sequence[float],
    windows: Sequence[tuple[int, int]],
    lam: float,
    tail: float,
) -> tuple[list[float], list[int]]:
    """The backward pass for one ``λ``: each grid point's ``W`` and its next poll."""
    n = len(times)
    cost = [0.0] * n
    nxt = [n - 1] * n
    cost[n - 1] = survival[n - 1] * (1.0 + lam * tail)
    for i in range(n - 2, -1, -1):
        s_i, t_i, a_i = survival[i], times[i], area[i]
        lo, hi = windows[i]
        best, arg = math.inf, hi
        for j in range(lo, hi + 1):
            c = lam * (s_i * (times[j] - t_i) - (area[j] - a_i)) + cost[j]
            if c < best:
                best, arg = c, j
        cost[i] = s_i + best
        nxt[i] = arg
    return cost, nxt


def _walk(
    times: Sequence[float],
    survival: Sequence[float],
    area: Sequence[float],
    nxt: Sequence[int],
    tail: float,
) -> tuple[float, float]:
    """Expected (requests, mean lag in seconds) per job of the plan from acceptance."""
    requests = lag = 0.0
    i = 0
    while i < len(times) - 1:
        j = nxt[i]
        requests += survival[i]
        lag += survival[i] * (times[j] - times[i]) - (area[j] - area[i])
        i = j
    last = survival[-1]
    return requests + last, lag + last * tail


def formula_lag_s(
    survival: Survival,
    *,
    base_delay_s: float,
    max_delay_s: float,
    growth: float,
    jitter_floor: float,
    floor_s: float,
) -> float:
    """The formula's expected mean lag (seconds) on *survival*: its mean poll times
    (each backoff step times the jitter's mean) until the horizon, then the same tail
    as the plan's (half the cap per job still running).

    A step shorter than the horizon's 1/4,000th (the grid's own finest guaranteed
    step) counts as that long: the walk takes at most about 4,000 steps whatever the
    policy's delays (1 µs delays would otherwise take billions), and the lag it adds
    is at most half that step per job."""
    times, s = survival.times, survival.survival
    area = _areas(times, s)
    mean = (1.0 + jitter_floor) / 2.0
    t, attempt, lag = 0.0, 0, 0.0
    horizon = times[-1]
    least = horizon / _MAX_POINTS
    while t < horizon:
        raw = backoff_raw_s(
            attempt, base_delay_s=base_delay_s, max_delay_s=max_delay_s, growth=growth
        )
        step = max(floor_s, raw * mean, least)
        nxt = min(horizon, t + step)
        s_t, a_t = _interpolated(times, s, area, t)
        _, a_n = _interpolated(times, s, area, nxt)
        lag += s_t * (nxt - t) - (a_n - a_t)
        t, attempt = nxt, attempt + 1
    return lag + s[-1] * max_delay_s / 2.0


def plan(
    survival: Survival,
    *,
    key: str,
    history_version: int,
    floor_s: float,
    cap_s: float,
    lag_target_s: float,
) -> LearnedSchedule:
    """Plan the schedule on *survival* (module docstring, step 2).

    Args:
        survival: the estimate (its grid's coarsest step should be at most a quarter
            of *cap_s*).
        key, history_version: recorded with the plan.
        floor_s, cap_s: every planned delay is within them (seconds).
        lag_target_s: the planned mean lag (seconds); when it cannot be reached within
            the bounds, the nearest reachable one is planned.

    Returns:
        The plan, ``λ`` chosen by bisection on a log scale.
    """
    times, s = survival.times, survival.survival
    area = _areas(times, s)
    n = len(times)
    windows = []
    for i in range(n):
        lo = max(i + 1, bisect_left(times, times[i] + floor_s))
        hi = max(lo, bisect_right(times, times[i] + cap_s) - 1)
        windows.append((min(lo, n - 1), min(hi, n - 1)))
    tail = cap_s / 2.0
    low, high = math.log(1e-5), math.log(1e4)
    chosen: tuple[float, list[float], list[int], float, float] | None = None
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2.0
        lam = math.exp(mid)
        cost, nxt = _solve(times, s, area, windows, lam, tail)
        requests, lag = _walk(times, s, area, nxt, tail)
        if chosen is None or abs(lag - lag_target_s) < abs(chosen[4] - lag_target_s):
            chosen = (lam, cost, nxt, requests, lag)
        if lag > lag_target_s:
            low = mid  # too slow: a second of lag must weigh more
        else:
            high = mid
    assert chosen is not None
    lam, cost, _, requests, lag = chosen
    return LearnedSchedule(
        key=key,
        history_version=history_version,
        model_version=MODEL_VERSION,
        jobs=survival.jobs,
        ended=survival.ended,
        censored=survival.censored,
        floor_s=floor_s,
        cap_s=cap_s,
        lag_target_s=lag_target_s,
        lam=lam,
        planned_requests=requests,
        planned_lag_s=lag,
        times=tuple(times),
        survival=tuple(s),
        area=tuple(area),
        cost=tuple(cost),
    )
