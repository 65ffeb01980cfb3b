"""The plugin's fixtures as a user's test file sees them (via pytester)."""

from __future__ import annotations

import pytest

from tests.testing.conftest import PLUGIN_ARGS

pytest_plugins = ["pytester"]

USER_TESTS = """
import httpx
import pytest
from waitbound import MemoryStore, Operation, parse_profile, wait
from waitbound.testing import FakeClock, ScenarioBuilder, expect

BUILT = (
    ScenarioBuilder("built")
    .status(200, {"status": "processing"}, headers={"Retry-After": "30"})
    .status(200, {"status": "succeeded"}, after_s=30)
    .result(200, {"rows": 3})
    .profile({"state": "status", "pending": ["processing"], "succeeded": ["succeeded"]})
)


@pytest.mark.waitbound_scenario(BUILT)
def test_a_builder_in_virtual_time(provider, fake_clock):
    assert httpx.get(provider.status_url).json() == {"status": "processing"}
    fake_clock.sleep(30)
    r = httpx.get(provider.status_url, headers={"X-Api-Key": "k", "X-Trace": "t"})
    assert r.json() == {"status": "succeeded"}
    httpx.get(provider.result_url)
    log = provider.log()
    assert [e.at_s for e in log] == [0.0, 30.0, 30.0]
    assert log[1].headers["X-Api-Key"] == "[redacted]" and log[1].headers["X-Trace"] == "t"
    assert log[0].hint_s == 30 and log[1].terminal
    expect("succeeded", provider).outcome("succeeded").min_gap_s(30).result_fetched_once()


def test_a_dict_scenario_and_a_second_provider(provider_factory):
    one = provider_factory({"id": "d", "endpoints": {"status": [{"code": 200, "body": {}}]}})
    two = provider_factory("slow-job")
    assert one.base_url != two.base_url
    httpx.get(one.status_url)
    assert (one.count("status"), two.count("status")) == (1, 0)


@pytest.mark.parametrize("provider", ["slow-job"], indirect=True)
def test_waitbound_itself_with_the_store(provider, fake_clock, waitbound_store):
    op = Operation(status_url=provider.status_url,
                   profile=parse_profile(dict(provider.scenario.wait["profile"])))
    outcome = wait(op, store=waitbound_store, clock=fake_clock, sleep=fake_clock.sleep)
    expect(outcome, provider).meets_scenario()
    assert waitbound_store.path.parent.exists()


def test_a_gap_too_short_is_named(provider_factory):
    served = provider_factory(BUILT)
    httpx.get(served.status_url)
    httpx.get(served.status_url)
    expect("succeeded", served).honours_hints()


def test_the_provider_fixture_needs_a_scenario(provider):
    pass
"""


def test_the_fixtures_serve_scenarios_in_virtual_time(pytester: pytest.Pytester) -> None:
    """A builder, a dict and a shipped name are served on their own ports in virtual time;
    the log keeps times and (redacted) headers; a short gap and a missing scenario are
    reported in words."""
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest(*PLUGIN_ARGS)
    result.assert_outcomes(passed=3, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*the provider fixture needs a scenario*",
            "*status request #2 came 0.0 s after #1, whose answer asked for 30 s*",
        ]
    )


def test_the_marker_is_registered(pytester: pytest.Pytester) -> None:
    """``--strict-markers`` accepts ``waitbound_scenario`` once the plugin is loaded."""
    result = pytester.runpytest(*PLUGIN_ARGS, "--markers")
    result.stdout.fnmatch_lines(["*waitbound_scenario(scenario, real_time=False)*"])
