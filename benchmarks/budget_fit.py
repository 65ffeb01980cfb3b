"""Budget fit: does the plan spend the budget over the deadline, whatever the provider says?

Jobs are submitted (a 202 naming the status URL, as ``waitbound run`` does) and waited
on by waitbound's real driver (``waitbound.submit`` then ``waitbound.wait``, a
``MemoryStore``, an ``httpx.MockTransport`` client) on a virtual clock. Every job ends
before the deadline, so a job that does not end ``succeeded`` is *lost*: the schedule
spent its budget (or let the provider's pace spend it) before it looked late enough.

Two policies:

- ``Policy()`` defaults (30 requests, 10 minutes), jobs log-uniform between 5 s and
  540 s;
- a slow export's (``max_requests=12, deadline_s=2400``), jobs log-uniform between
  30 s and 38 minutes.

Provider behaviours (what every pending answer, the 202 included, says):

==============  ====================================================================
``none``        no hint
``body 1s``     ``poll_after: 1`` in the body
``RA 1``        ``Retry-After: 1``
``body 5s``     ``poll_after: 5``
``exact``       ``poll_after`` = the time left (to the millisecond)
``stale ±30%``  the time left by one estimate made at the submit (the duration times
                ``U(0.7, 1.3)``), 0 once overdue
``429 every 3`` every third status answer is a 429 with ``Retry-After: 2``
==============  ====================================================================

Requests per job count the status requests (the submit is the same for everyone);
the lag is the time of the answer that said done minus the job's end (seconds).

Usage: ``python -m benchmarks.budget_fit [--jobs N] [--seed N]``.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import httpx

from waitbound import MemoryStore, Policy, Submission, parse_profile, submit, wait
from waitbound.testing import FakeClock

BASE: Final = "http://provider.test"
PROFILE: Final = parse_profile(
    {
        "state": "status",
        "pending": ["running"],
        "succeeded": ["succeeded"],
        "poll_hint": "poll_after",
        "submit": {"poll_hint": "poll_after"},
    },
    name="budget-fit",
)

BEHAVIOURS: Final = ("none", "body 1s", "RA 1", "body 5s", "exact", "stale ±30%", "429 every 3")
"""The provider behaviours, in the table's order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One policy and the job durations it is measured on (seconds)."""

    label: str
    policy: Callable[[], Policy]
    shortest_s: float
    longest_s: float


SETTINGS: Final = (
    Setting(label="defaults", policy=Policy, shortest_s=5.0, longest_s=540.0),
    Setting(
        label="slow export",
        policy=lambda: Policy(max_requests=12, deadline_s=2400.0),
        shortest_s=30.0,
        longest_s=38 * 60.0,
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One behaviour under one setting: jobs lost, requests per job, mean lag (s)."""

    setting: str
    behaviour: str
    jobs: int
    lost: int
    lost_reasons: tuple[str, ...]
    requests_per_job: float
    lag_mean_s: float


def durations(count: int, *, shortest_s: float, longest_s: float, seed: int) -> list[float]:
    """*count* durations (seconds), log-uniform between the bounds, from *seed*."""
    rng = random.Random(f"budget-fit:{seed}")
    low, high = math.log(shortest_s), math.log(longest_s)
    return [math.exp(rng.uniform(low, high)) for _ in range(count)]


class _Job:
    """One job at the fake provider, answering from its state at virtual time."""

    def __init__(self, clock: FakeClock, duration_s: float, behaviour: str, rng: random.Random):
        self.clock = clock
        self.duration_s = duration_s
        self.behaviour = behaviour
        self.estimate_s = duration_s * rng.uniform(0.7, 1.3)
        self.start = clock.now()
        self.status_requests = 0
        self.done_at: float | None = None

    def elapsed_s(self) -> float:
        return (self.clock.now() - self.start).total_seconds()

    def _pending(self, t: float) -> httpx.Response:
        body: dict[str, object] = {"status": "running"}
        headers: dict[str, str] = {}
        match self.behaviour:
            case "body 1s":
                body["poll_after"] = 1
            case "RA 1":
                headers["Retry-After"] = "1"
            case "body 5s":
                body["poll_after"] = 5
            case "exact":
                body["poll_after"] = round(self.duration_s - t, 3)
            case "stale ±30%":
                body["poll_after"] = max(0, math.ceil(self.estimate_s - t))
        return httpx.Response(202 if t == 0 else 200, headers=headers, json=body)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            response = self._pending(0.0)
            response.headers["Location"] = f"{BASE}/status"
            return response
        self.status_requests += 1
        t = self.elapsed_s()
        if self.behaviour == "429 every 3" and self.status_requests % 3 == 0:
            return httpx.Response(429, headers={"Retry-After": "2"}, json={"error": "slow"})
        if t >= self.duration_s:
            if self.done_at is None:
                self.done_at = t
            return httpx.Response(200, json={"status": "succeeded"})
        return self._pending(t)


def run_job(policy: Policy, duration_s: float, behaviour: str, seed: int) -> tuple[str, _Job]:
    """Submit and wait on one job; return its outcome (``succeeded`` or
    ``outcome/reason``) and the provider's tally."""
    clock = FakeClock()
    job = _Job(clock, duration_s, behaviour, random.Random(f"estimate:{seed}"))
    client = httpx.Client(transport=httpx.MockTransport(job.handle), trust_env=False)
    store = MemoryStore()
    rng = random.Random(seed)
    submission = Submission(method="POST", url=f"{BASE}/jobs", profile=PROFILE, policy=policy)
    outcome = (
        submit(submission, store=store, client=client, clock=clock, sleep=clock.sleep, rng=rng)
        .status()
        .outcome
    )
    if not outcome.done:
        outcome = wait(
            operation_id=outcome.operation_id,
            store=store,
            client=client,
            clock=clock,
            sleep=clock.sleep,
            rng=rng,
        )
    said = str(outcome.outcome)
    return (said if said == "succeeded" else f"{said}/{outcome.reason}"), job


def measure(setting: Setting, behaviour: str, *, jobs: int, seed: int) -> Row:
    """Run *jobs* jobs of *setting* at a provider that behaves as *behaviour*."""
    policy = setting.policy()
    lost: list[str] = []
    requests: list[int] = []
    lags: list[float] = []
    spans = durations(jobs, shortest_s=setting.shortest_s, longest_s=setting.longest_s, seed=seed)
    for index, duration_s in enumerate(spans):
        said, job = run_job(policy, duration_s, behaviour, seed * 100_003 + index)
        requests.append(job.status_requests)
        if said != "succeeded":
            lost.append(said)
        elif job.done_at is not None:
            lags.append(job.done_at - duration_s)
    return Row(
        setting=setting.label,
        behaviour=behaviour,
        jobs=jobs,
        lost=len(lost),
        lost_reasons=tuple(sorted(set(lost))),
        requests_per_job=statistics.fmean(requests),
        lag_mean_s=statistics.fmean(lags) if lags else math.nan,
    )


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| policy | provider | jobs | lost | requests / job | mean lag (s) |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        why = f" ({', '.join(row.lost_reasons)})" if row.lost_reasons else ""
        lines.append(
            f"| {row.setting} | {row.behaviour} | {row.jobs} | {row.lost}{why} | "
            f"{row.requests_per_job:.2f} | {row.lag_mean_s:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = [
        measure(setting, behaviour, jobs=args.jobs, seed=args.seed)
        for setting in SETTINGS
        for behaviour in BEHAVIOURS
    ]
    print(table(rows))
    print(f"\n{args.jobs} jobs per row, seed {args.seed}, {time.perf_counter() - started:.0f} s")
    return 1 if any(row.lost for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
