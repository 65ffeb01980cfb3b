"""Run the real wait loop on virtual time against a scripted provider."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.fakes import Answer, FakeClock, ScriptedProvider, gaps
from waitbound import MemoryStore, Operation, Outcome, Policy, parse_profile, wait

URL = "http://provider.test/status"
PROFILE = {
    "state": "status",
    "pending": ["queued", "running"],
    "succeeded": ["done"],
    "partial": ["partial"],
    "failed": ["failed"],
    "canceled": ["canceled"],
    "expired": ["expired"],
    "error": "error",
    "result": "output",
    "result_document": "output",
    "job_id": "id",
}
SEED = 1234
DOUBLING: dict[str, Any] = {"backoff_growth": 2.0, "backoff_jitter_floor": 0.5}
"""A backoff pinned to doubling with 50-100 % jitter: for tests whose rule is not the
default shape (their expected delays then do not move when the defaults do)."""


@dataclass
class Run:
    outcome: Outcome
    clock: FakeClock
    provider: ScriptedProvider
    store: MemoryStore

    @property
    def status_times(self) -> list[float]:
        start = self.provider.requests[0][1] if self.provider.requests else None
        return [(t - start).total_seconds() for p, t in self.provider.requests if p == "/status"]  # type: ignore[operator]

    @property
    def gaps(self) -> list[float]:
        return gaps([t for p, t in self.provider.requests if p == "/status"])

    def kinds(self) -> list[str]:
        return [e.event.kind for e in self.store.audit(self.outcome.operation_id)]


def run(
    script: Mapping[str, Sequence[Answer]],
    *,
    profile: Mapping[str, Any] | None = None,
    latency_s: float = 0.0,
    result_url: str | None = None,
    seed: int = SEED,
    **policy: Any,
) -> Run:
    """Wait on a scripted provider with a fake clock and a seeded RNG.

    Without ``max_requests``, the budget is one that covers the deadline at any cap
    (1,000 requests): the rules these tests check are the backoff's and the hints',
    not the budget's pace (``tests/core/test_plan.py`` checks that)."""
    policy.setdefault("max_requests", 1000)
    clock = FakeClock()
    provider = ScriptedProvider(clock, script, latency_s=latency_s)
    store = MemoryStore()
    operation = Operation(
        status_url=URL,
        profile=parse_profile(dict(profile or PROFILE)),
        policy=Policy(**policy),
        result_url=result_url,
    )
    outcome = wait(
        operation,
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(seed),
    )
    return Run(outcome=outcome, clock=clock, provider=provider, store=store)
