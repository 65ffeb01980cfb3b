"""Fleet waves: 1,000 ``waitbound wait`` processes that got the same answer, paced or not.

A discrete-event simulation on a virtual clock (one ``heapq``, no sockets, fixed
seeds) of issue 25 item 5: 1,000 operations start uniformly within one second, each
driven by its own ``waitbound wait`` on one store (no worker, so no worker pacing),
each job done after a log-normal duration (median 60 s, p95 10 min). Each operation
polls at its start (``wait`` without ``--first-poll-after``), then on its own schedule,
computed by waitbound's real code with the real :class:`waitbound.Policy` defaults
(each mix also with jobs that outlast the deadline, so the whole fleet is still
polling at steady state, as in the issue's figures):

- **default**: no hint; the delay is :func:`waitbound._profile._schedule.backoff_delay_s` of
  the attempt (base 5 s, growth 1.5, cap 60 s, jitter 80-100 %), at least the floor;
- **Retry-After: 120**: every answer carries the hint; the delay is
  :func:`waitbound._profile._schedule.hinted_delay_s` (120 s plus up to 10 %, at most 1 s).

With pacing on, every planned poll time goes through the real
:meth:`waitbound.MemoryStore.pace` via the real driver's pacer
(:func:`waitbound._model._pacing.pacer_for`), with ``latest_at`` = min(planned + the
policy's ``max_delay_s``, the deadline), as ``waitbound._rules._next_poll.paced`` asks it.
The deadline (600 s) and the request budget (30) end an operation as the controller
would (a poll is never planned past the deadline).

Reported for each mix, pacing off and on: the peak-to-mean requests per second (1 s
bins) from the third poll on (the window opens when the last operation that made a
third poll made it, as in ``fleet_pressure``, and closes at 590 s, before the
deadline's tail) and at
steady state (300-590 s: every operation that still polls is at the cap, or on the
hint), each next to a Poisson fleet of the same mean over the same bins (the same
number of requests scattered uniformly at random, the same seed); and the mean
detection lag (job end → the first poll after it, over jobs that ended before the
deadline), and the seconds pacing added per poll.

Usage: ``python -m benchmarks.fleet_waves [--operations N] [--seeds N] [--spread F]
[--quick]`` (about 2 s).
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from statistics import NormalDist

from benchmarks._common import machine, print_machine, print_table
from waitbound import MemoryStore, Policy
from waitbound._model import _pacing as pacing
from waitbound._profile._schedule import backoff_delay_s, hinted_delay_s

MEDIAN_S = 60.0
P95_S = 600.0
STEADY = (300, 590)
"""The steady-state window (seconds after the first start)."""
ORIGIN = "https://api.example:443"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Run:
    """One simulated fleet: every request's time (seconds), each operation's poll times,
    and the detection lag of every job that ended before the deadline."""

    requests: list[float]
    polls: list[list[float]]
    lags: list[float]
    added_s: float
    """Seconds pacing added, summed over every poll."""


def durations(n: int, seed: int) -> list[float]:
    """Log-normal job durations (seconds), median :data:`MEDIAN_S`, p95 :data:`P95_S`."""
    rng = random.Random(seed)
    sigma = math.log(P95_S / MEDIAN_S) / NormalDist().inv_cdf(0.95)
    return [rng.lognormvariate(math.log(MEDIAN_S), sigma) for _ in range(n)]


def simulate(
    *,
    operations: int,
    seed: int,
    hint_s: float | None,
    paced: bool,
    endless: bool = False,
    policy: Policy | None = None,
) -> Run:
    """One fleet (module docstring); *hint_s*: every answer's ``Retry-After``;
    *endless*: every job outlasts the deadline (the whole fleet polls to the end)."""
    policy = policy or Policy()
    rng = random.Random(seed)
    starts = sorted(rng.uniform(0.0, 1.0) for _ in range(operations))
    lengths = [math.inf] * operations if endless else durations(operations, seed + 1)
    ends = [start + d for start, d in zip(starts, lengths, strict=True)]
    store = MemoryStore()
    pacer = pacing.pacer_for(store)
    polls: list[list[float]] = [[] for _ in range(operations)]
    lags: list[float] = []
    added_s = 0.0
    requests: list[float] = []
    attempt = [0] * operations
    queue = [(start, i) for i, start in enumerate(starts)]
    heapq.heapify(queue)
    while queue:
        now, i = heapq.heappop(queue)
        requests.append(now)
        polls[i].append(now)
        deadline = starts[i] + policy.deadline_s
        if now >= ends[i]:
            lags.append(now - ends[i])
            continue
        if len(polls[i]) >= policy.max_requests or now >= deadline:
            continue
        if hint_s is not None:
            delay = hinted_delay_s(
                hint_s, jitter=policy.hint_jitter, max_jitter_s=policy.hint_jitter_max_s, rng=rng
            )
        else:
            delay = backoff_delay_s(
                attempt[i],
                base_delay_s=policy.base_delay_s,
                max_delay_s=policy.max_delay_s,
                growth=policy.backoff_growth,
                jitter_floor=policy.backoff_jitter_floor,
                rng=rng,
            )
            delay = max(delay, policy.floor_s)
        attempt[i] += 1
        planned = min(now + delay, deadline)
        if planned >= deadline:
            continue  # the controller ends it at the deadline: no poll past it
        if paced:
            at = pacer(
                ORIGIN,
                EPOCH + timedelta(seconds=planned),
                latest_at=EPOCH + timedelta(seconds=min(planned + policy.max_delay_s, deadline)),
                now=EPOCH + timedelta(seconds=now),
                rng=rng,
            )
            added_s += (at - EPOCH).total_seconds() - planned
            planned = (at - EPOCH).total_seconds()
        heapq.heappush(queue, (planned, i))
    return Run(requests=requests, polls=polls, lags=lags, added_s=added_s)


def bins(times: Sequence[float], low: float, high: float) -> list[int]:
    """Counts per 1 s bin of the times in ``[low, high)`` (whole seconds)."""
    first, last = math.ceil(low), math.floor(high)
    counts = [0] * max(0, last - first)
    for t in times:
        k = math.floor(t) - first
        if 0 <= k < len(counts):
            counts[k] += 1
    return counts


def peak_to_mean(counts: Sequence[int]) -> float:
    """The largest bin over the mean bin (0 for an empty window)."""
    mean = sum(counts) / len(counts) if counts else 0.0
    return max(counts) / mean if mean > 0 else 0.0


def poisson_peak_to_mean(total: int, width: int, seed: int) -> float:
    """A Poisson fleet of the same mean: *total* requests at uniform random times over
    *width* 1 s bins."""
    rng = random.Random(seed)
    counts = [0] * width
    for _ in range(total):
        counts[rng.randrange(width)] += 1
    return peak_to_mean(counts)


@dataclass(frozen=True, slots=True)
class Figures:
    """One run's figures (see the module docstring)."""

    third_on: float
    third_on_poisson: float
    steady: float
    steady_poisson: float
    mean_lag_s: float
    added_s: float
    mean_rate: float
    requests_per_job: float


def figures(run: Run, seed: int) -> Figures:
    """Peak-to-mean from the third poll on and at steady state, each with its Poisson
    reference, and the mean detection lag."""
    low = max(p[2] for p in run.polls if len(p) >= 3)
    third_bins = bins(run.requests, low, STEADY[1])
    steady_bins = bins(run.requests, *STEADY)
    return Figures(
        third_on=peak_to_mean(third_bins),
        third_on_poisson=poisson_peak_to_mean(sum(third_bins), len(third_bins), seed),
        steady=peak_to_mean(steady_bins),
        steady_poisson=poisson_peak_to_mean(sum(steady_bins), len(steady_bins), seed),
        mean_lag_s=statistics.fmean(run.lags) if run.lags else math.nan,
        added_s=run.added_s / len(run.requests),
        mean_rate=sum(steady_bins) / len(steady_bins),
        requests_per_job=len(run.requests) / len(run.polls),
    )


MIXES = (
    ("default schedule", None, False),
    ("default schedule, jobs outlast the deadline", None, True),
    ("Retry-After: 120", 120.0, False),
    ("Retry-After: 120, jobs outlast the deadline", 120.0, True),
)


def measure(*, operations: int, seeds: Sequence[int]) -> list[list[object]]:
    """The table's rows: each mix, pacing off then on, medians over *seeds*."""
    rows: list[list[object]] = []
    for label, hint, endless in MIXES:
        for paced in (False, True):
            got = [
                figures(
                    simulate(
                        operations=operations, seed=seed, hint_s=hint, paced=paced, endless=endless
                    ),
                    seed,
                )
                for seed in seeds
            ]

            def med(name: str, got: list[Figures] = got) -> float:
                return float(statistics.median(float(getattr(f, name)) for f in got))

            rows.append(
                [
                    label,
                    "on" if paced else "off",
                    f"{med('third_on'):.2f}",
                    f"{med('third_on_poisson'):.2f}",
                    f"{med('steady'):.2f}",
                    f"{med('steady_poisson'):.2f}",
                    f"{med('steady') / med('steady_poisson'):.2f}",
                    f"{med('mean_rate'):.1f}",
                    "-" if endless else f"{med('mean_lag_s'):.2f}",
                    f"{med('added_s'):.2f}",
                    f"{med('requests_per_job'):.2f}",
                ]
            )
    return rows


HEADERS = [
    "mix",
    "pacing",
    "peak/mean, 3rd poll on",
    "Poisson",
    "peak/mean, steady (300-590 s)",
    "Poisson",
    "steady ÷ Poisson",
    "steady mean req/s",
    "mean lag (s)",
    "pacing added (s/poll)",
    "requests/job",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..N; medians shown")
    parser.add_argument(
        "--spread",
        type=float,
        default=None,
        help=f"try another spread factor (default {pacing.SPREAD_FACTOR}; tuning only)",
    )
    parser.add_argument("--quick", action="store_true", help="100 operations, one seed")
    args = parser.parse_args()
    if args.quick:
        args.operations, args.seeds = 100, 1
    if args.spread is not None:  # tuning: the stores call choose() with its default
        assert pacing.choose.__kwdefaults__ is not None
        pacing.choose.__kwdefaults__["spread"] = args.spread
    print_machine(machine(pg_dsn=None))
    spread = pacing.choose.__kwdefaults__["spread"] if pacing.choose.__kwdefaults__ else None
    print_table(
        f"Fleet waves: {args.operations:,} operations started within 1 s, "
        f"seeds 1-{args.seeds} (medians), spread factor {spread}",
        HEADERS,
        measure(operations=args.operations, seeds=range(1, args.seeds + 1)),
    )


if __name__ == "__main__":
    main()
