"""The schedule benchmark's model: jobs, the provider's hints, and the accounting.

Pure and peer-free (the unit tests import it without the ``bench`` extra). Time is
virtual: a job is submitted at t = 0 (a 202 naming its status URL) and finishes at
``t = duration_s``; a :class:`Provider` answers each status request from the job's state
at the virtual time the request is made, and counts it. A strategy (waitbound, or a
peer's real polling code) only decides *when* to ask; the provider's tally says how many
requests it made and when it first heard "done", so no strategy reports its own figures.

- requests per job: the status requests after the submit (the submit itself is the
  same for everyone and not counted);
- detection lag: the time of the first answer that reports done minus the job's end
  (seconds, ``>= 0``); a job whose strategy gave up first is *abandoned*.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise
from statistics import NormalDist
from typing import Final

from waitbound._rules._learned import LearnedSchedule, Survival, plan

__all__ = [
    "MEDIAN_S",
    "P95_S",
    "SIGMA",
    "STALE_ESTIMATE_S",
    "Answer",
    "HintMode",
    "Mix",
    "JobRun",
    "Provider",
    "Stats",
    "Strategy",
    "fixed_interval",
    "job_durations",
    "interpolate_front",
    "markdown_table",
    "mix_durations",
    "pareto_front",
    "percentile",
    "poll_with",
    "run_jobs",
    "summarize",
    "true_plan",
    "true_survival",
]

MEDIAN_S: Final = 60.0
"""The median job duration (seconds)."""
P95_S: Final = 600.0
"""The 95th percentile of the job durations (seconds)."""
SIGMA: Final = math.log(P95_S / MEDIAN_S) / NormalDist().inv_cdf(0.95)
"""The log-normal's shape: ``ln(p95 / median) / z(0.95)`` (about 1.40)."""
STALE_ESTIMATE_S: Final = 60.0
"""The stale provider's one estimate for every job (seconds), counted down from t = 0."""


def job_durations(count: int, seed: int) -> list[float]:
    """Return *count* job durations in seconds: log-normal, median 60 s, p95 600 s.

    Deterministic for a given *seed* (a private ``random.Random``).
    """
    rng = random.Random(f"durations:{seed}")
    mu = math.log(MEDIAN_S)
    return [math.exp(rng.gauss(mu, SIGMA)) for _ in range(count)]


class HintMode(StrEnum):
    """What the provider says about when to look again, on every pending answer.

    ``none``: nothing. ``exact``: ``ceil(remaining)`` seconds. ``noisy``: ``ceil(remaining
    * U(0.7, 1.3))`` seconds (seeded per job). ``stale``: one estimate for every job,
    60 s counted down from the submit: ``ceil(max(0, 60 - elapsed))``, so it runs down to
    0 and stays 0 once a longer job is overdue.
    """

    NONE = "none"
    EXACT = "exact"
    NOISY = "noisy"
    STALE = "stale"

    @property
    def shown(self) -> str:
        """The mode as the table and the plot name it."""
        return "±30 %" if self is HintMode.NOISY else self.value


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """One answer of the provider: done or not, and its hint in whole seconds (or None)."""

    done: bool
    hint_s: int | None


@dataclass(slots=True, kw_only=True)
class Provider:
    """One job at the fake provider, answering from its state at virtual time *t*.

    Args:
        duration_s: when the job finishes (seconds after the submit).
        mode: the hint mode.
        rng: draws the ``noisy`` hints' noise (one draw per pending answer).

    Attributes:
        requests: status requests answered so far.
        detected_at: the time (seconds) of the first answer that reported done, or None.
    """

    duration_s: float
    mode: HintMode
    rng: random.Random
    requests: int = 0
    detected_at: float | None = None
    times: list[float] = field(default_factory=list)

    def hint_s(self, t: float) -> int | None:
        """The hint a pending answer at *t* carries (whole seconds), or None."""
        remaining = self.duration_s - t
        match self.mode:
            case HintMode.NONE:
                return None
            case HintMode.EXACT:
                return max(1, math.ceil(remaining))
            case HintMode.NOISY:
                return max(1, math.ceil(remaining * self.rng.uniform(0.7, 1.3)))
            case HintMode.STALE:
                return math.ceil(max(0.0, STALE_ESTIMATE_S - t))

    def submit(self) -> Answer:
        """The answer to the submit at t = 0 (not counted): pending, with its hint."""
        return Answer(done=False, hint_s=self.hint_s(0.0))

    def status(self, t: float) -> Answer:
        """Answer one status request at virtual time *t* (seconds) and count it."""
        self.requests += 1
        self.times.append(t)
        if t >= self.duration_s:
            if self.detected_at is None:
                self.detected_at = t
            return Answer(done=True, hint_s=None)
        return Answer(done=False, hint_s=self.hint_s(t))


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRun:
    """What one job cost one strategy: its status requests, and when done was seen."""

    duration_s: float
    requests: int
    detected_at: float | None

    @property
    def lag_s(self) -> float | None:
        """Detection lag in seconds, or None when the strategy gave up first."""
        return None if self.detected_at is None else self.detected_at - self.duration_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Stats:
    """One strategy in one hint mode over all jobs.

    ``requests_per_job`` counts every job (abandoned ones spent requests too); the lag
    figures (seconds) are over the jobs detected; ``abandoned`` is a share (0-1).
    """

    jobs: int
    requests_per_job: float
    lag_mean_s: float
    lag_p50_s: float
    lag_p95_s: float
    abandoned: float


def percentile(values: Sequence[float], q: float) -> float:
    """The *q*-th percentile (0-100) of *values*, linearly interpolated (NaN when empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(runs: Sequence[JobRun]) -> Stats:
    """Requests per job, lag mean / p50 / p95 (detected jobs), abandoned share."""
    lags = [run.lag_s for run in runs if run.lag_s is not None]
    return Stats(
        jobs=len(runs),
        requests_per_job=statistics.fmean(run.requests for run in runs) if runs else math.nan,
        lag_mean_s=statistics.fmean(lags) if lags else math.nan,
        lag_p50_s=percentile(lags, 50),
        lag_p95_s=percentile(lags, 95),
        abandoned=(len(runs) - len(lags)) / len(runs) if runs else math.nan,
    )


Strategy = Callable[[Provider, random.Random], None]
"""Polls one job until it is done or gives up; its sleeps advance the provider's time."""


def run_jobs(
    durations: Sequence[float],
    mode: HintMode,
    seed: int,
    strategy: Callable[[Provider, random.Random], object],
    *,
    gives_up: tuple[type[Exception], ...] = (),
) -> list[JobRun]:
    """Run *strategy* on every job; the provider counts.

    Each job gets its own provider (its ``noisy`` hints drawn from a stream seeded by
    *seed* and the job's index, the same for every strategy) and its own strategy RNG.
    A strategy that raises one of *gives_up* (a peer giving up: a timeout, an attempt
    limit) has abandoned the job unless the provider already answered done; any other
    exception propagates (a broken adapter must not pass for a peer that gave up).
    """
    runs = []
    for index, duration in enumerate(durations):
        provider = Provider(
            duration_s=duration, mode=mode, rng=random.Random(f"hints:{seed}:{mode}:{index}")
        )
        with suppress(*gives_up):  # the provider's tally says whether done was answered
            strategy(provider, random.Random(f"strategy:{seed}:{index}"))
        runs.append(
            JobRun(
                duration_s=duration, requests=provider.requests, detected_at=provider.detected_at
            )
        )
    return runs


def fixed_interval(interval_s: float, *, first_s: float = 0.0) -> Strategy:
    """A trivial strategy: first status request at *first_s*, then every *interval_s*.

    The reference the accounting is tested against (a job of 65 s polled every 30 s
    from t = 0: requests at 0, 30, 60 and 90, so 4 requests and a lag of 25 s).
    """

    def poll(provider: Provider, rng: random.Random) -> None:
        t = first_s
        while not provider.status(t).done:
            t += interval_s

    return poll


def pareto_front(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """The labels of the points no other point dominates, by x (requests per job).

    A point ``(x, y)`` is dominated when another has ``x' <= x`` and ``y' <= y`` with one
    of them strictly smaller (fewer requests and less lag are both better).
    """
    front = [
        label
        for label, (x, y) in points.items()
        if not any(
            (ox <= x and oy <= y) and (ox < x or oy < y)
            for other, (ox, oy) in points.items()
            if other != label
        )
    ]
    return sorted(front, key=lambda label: points[label])


def _fmt(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def markdown_table(
    results: Mapping[tuple[str, HintMode], Stats], fronts: Mapping[HintMode, Sequence[str]]
) -> str:
    """The results as one markdown table: strategy by hint mode.

    Lag figures of strategies that abandoned jobs are over the detected jobs only and
    marked with ``*``; a strategy on its mode's Pareto front is marked ``◆``.
    """
    lines = [
        "| strategy | hints | requests/job | lag mean (s) | lag p50 (s) | lag p95 (s) "
        "| abandoned | front |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for (label, mode), stats in results.items():
        mark = "*" if stats.abandoned > 0 else ""
        lines.append(
            f"| {label} | {mode.shown} | {_fmt(stats.requests_per_job, 2)} "
            f"| {_fmt(stats.lag_mean_s)}{mark} | {_fmt(stats.lag_p50_s)}{mark} "
            f"| {_fmt(stats.lag_p95_s)}{mark} | {stats.abandoned * 100:.1f} % "
            f"| {'◆' if label in fronts.get(mode, ()) else ''} |"
        )
    return "\n".join(lines) + "\n"


# --- job mixes and the limit line (the learned-schedule benchmark) -----------------


class Mix(StrEnum):
    """A job mix: how long jobs of one key take (the learned-schedule benchmark).

    ``lognormal``: median 60 s, p95 600 s (the mix above). ``bimodal``: 70 % of jobs
    about 10 s, 30 % about 20 min (each log-normal with a spread of ±20 %). ``pareto``:
    a heavy tail, Pareto with alpha = 1.2 and a median of 60 s.
    """

    LOGNORMAL = "lognormal"
    BIMODAL = "bimodal"
    PARETO = "pareto"


BIMODAL_SHORT: Final = (0.7, 10.0)
"""The bimodal mix's short jobs: their share and median (seconds)."""
BIMODAL_LONG_S: Final = 1200.0
"""The bimodal mix's long jobs' median (seconds)."""
BIMODAL_SIGMA: Final = 0.2
PARETO_ALPHA: Final = 1.2
PARETO_SCALE_S: Final = MEDIAN_S / 2 ** (1 / PARETO_ALPHA)
"""The Pareto mix's minimum (seconds), so that its median is :data:`MEDIAN_S`."""


def mix_durations(mix: Mix, count: int, seed: int, *, slower: float = 1.0) -> list[float]:
    """Return *count* durations (seconds) of *mix*, each times *slower*.

    Deterministic for a given *mix* and *seed* (a private ``random.Random``); the
    log-normal mix with seed *s* is :func:`job_durations` ``(count, s)``.
    """
    if mix is Mix.LOGNORMAL:
        return [d * slower for d in job_durations(count, seed)]
    rng = random.Random(f"durations:{mix}:{seed}")
    out = []
    for _ in range(count):
        if mix is Mix.BIMODAL:
            median = BIMODAL_SHORT[1] if rng.random() < BIMODAL_SHORT[0] else BIMODAL_LONG_S
            out.append(math.exp(rng.gauss(math.log(median), BIMODAL_SIGMA)) * slower)
        else:
            out.append(PARETO_SCALE_S * (1.0 - rng.random()) ** (-1.0 / PARETO_ALPHA) * slower)
    return out


def true_survival(mix: Mix, t: float) -> float:
    """``P(duration > t)`` of *mix* (t in seconds)."""
    if t <= 0:
        return 1.0
    normal = NormalDist()
    if mix is Mix.LOGNORMAL:
        return 1.0 - normal.cdf((math.log(t) - math.log(MEDIAN_S)) / SIGMA)
    if mix is Mix.BIMODAL:
        share, short = BIMODAL_SHORT
        return share * (1.0 - normal.cdf(math.log(t / short) / BIMODAL_SIGMA)) + (1.0 - share) * (
            1.0 - normal.cdf(math.log(t / BIMODAL_LONG_S) / BIMODAL_SIGMA)
        )
    return 1.0 if t < PARETO_SCALE_S else (PARETO_SCALE_S / t) ** PARETO_ALPHA


def poll_with(
    next_delay_s: Callable[[float], float | None], duration_s: float, cap_s: float
) -> JobRun:
    """Poll one job of *duration_s* at exactly the times a plan gives (from t = 0, its
    first poll after the first planned delay; past the plan's horizon, every *cap_s*);
    the reference the limit line is measured by (no jitter, no store)."""
    t, requests = 0.0, 0
    while True:
        delay = next_delay_s(t)
        t += cap_s if delay is None else delay
        requests += 1
        if t >= duration_s:
            return JobRun(duration_s=duration_s, requests=requests, detected_at=t)


def interpolate_front(front: Sequence[tuple[float, float]], lag_s: float) -> float:
    """Requests per job of a requests/lag curve (points ``(requests, lag)``) at *lag_s*,
    linearly interpolated between the two points around it (NaN outside the curve)."""
    points = sorted(front, key=lambda p: p[1])
    for (r0, l0), (r1, l1) in pairwise(points):
        if l0 <= lag_s <= l1:
            w = (lag_s - l0) / (l1 - l0) if l1 > l0 else 0.0
            return r0 + w * (r1 - r0)
    return math.nan


def true_plan(
    mix: Mix, *, floor_s: float, cap_s: float, lag_target_s: float, resolution_s: float = 0.5
) -> LearnedSchedule:
    """The dynamic programme's schedule on *mix*'s true survival function (waitbound's
    own planner, ``waitbound._rules._learned.plan``, handed the exact ``S(t)`` instead of an
    estimate): the limit no schedule within the same floor and cap beats on average."""
    times, survival = [0.0], [1.0]
    t = 0.0
    while survival[-1] >= 0.002 and t < 1e7:
        t += min(max(resolution_s, t * 0.05), cap_s / 4.0)
        times.append(t)
        survival.append(true_survival(mix, t))
    estimate = Survival(times=tuple(times), survival=tuple(survival), jobs=0, ended=0, censored=0)
    return plan(
        estimate,
        key=f"true {mix}",
        history_version=0,
        floor_s=floor_s,
        cap_s=cap_s,
        lag_target_s=lag_target_s,
    )
