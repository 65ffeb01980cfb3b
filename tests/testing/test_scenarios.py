"""The shipped scenarios: each loads, and waitbound itself meets what each expects."""

from __future__ import annotations

import random
from typing import Any

import pytest

from waitbound import Operation, Policy, parse_profile, wait
from waitbound.stores import MemoryStore
from waitbound.testing import FakeClock, Provider, expect, named_scenario, scenario_names

CANONICAL = ("slow-job", "fails-late", "timeout-returns-job-id", "duplicate-completion")
MORE = ("throttled", "flaky-5xx", "unknown-state", "result-409-until-ready", "partial-result")


def test_the_canonical_and_the_other_scenarios_are_shipped() -> None:
    """All nine named scenarios are package data, and nothing else is."""
    assert scenario_names() == tuple(sorted(CANONICAL + MORE))


def _operation(served: Provider) -> Operation:
    settings: dict[str, Any] = dict(served.scenario.wait)
    return Operation(
        status_url=served.status_url,
        profile=parse_profile(settings["profile"]),
        policy=Policy(deadline_s=settings["deadline_s"], max_requests=settings["max_requests"]),
    )


@pytest.mark.parametrize("name", scenario_names())
def test_waitbound_meets_every_scenario_in_virtual_time(name: str) -> None:
    """waitbound.wait, on a fake clock, gives each scenario's expected outcome, honours its
    hints and fetches results as it expects, without sleeping for real."""
    clock = FakeClock(limit_s=3600)
    with Provider(name, clock=clock) as served:
        outcome = wait(
            _operation(served),
            store=MemoryStore(),
            clock=clock,
            sleep=clock.sleep,
            rng=random.Random(7),
        )
        expect(outcome, served).meets_scenario()
    assert clock.sleeps, "virtual time was used"


def test_a_retried_wait_on_a_duplicate_completion_delivers_once() -> None:
    """duplicate-completion: waiting again on the same operation (a retried call) sends
    nothing, and on_complete is called once in all."""
    clock = FakeClock(limit_s=3600)
    store = MemoryStore()
    delivered: list[str] = []
    with Provider("duplicate-completion", clock=clock) as served:
        for _ in range(2):
            outcome = wait(
                _operation(served),
                operation_id="op_dup",
                store=store,
                clock=clock,
                sleep=clock.sleep,
                rng=random.Random(7),
                on_complete=lambda c: delivered.append(c.delivery_id),
            )
        expect(outcome, served).meets_scenario()
    assert len(delivered) == 1


def test_named_scenario_refuses_an_unknown_name_listing_the_known() -> None:
    """A misspelt name is a usage error naming the shipped scenarios."""
    from waitbound import UsageError

    with pytest.raises(UsageError, match="slow-job"):
        named_scenario("slow_job")
