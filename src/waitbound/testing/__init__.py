"""waitbound.testing: test the slow path of code that waits on long-running jobs.

A scripted provider on loopback (:class:`Provider`, the ``provider`` fixture) serving
shipped scenarios (:func:`named_scenario`: ``slow-job``, ``fails-late``, …) in virtual
time (:class:`FakeClock`, the ``fake_clock`` fixture), and :func:`expect`, which checks an
outcome against the provider's log request by request. The pytest plugin
(``waitbound.testing._plugin``) loads itself once ``waitbound[testing]`` is installed.
See ``docs/testing.md``.
"""

from waitbound.testing._clock import START, FakeClock, VirtualTimeExceeded
from waitbound.testing._expect import Expectation, ExpectationFailed, expect
from waitbound.testing._provider import (
    LoggedRequest,
    Provider,
    ScenarioBuilder,
    named_scenario,
    scenario_names,
    to_scenario,
)

__all__ = [
    "Expectation",
    "ExpectationFailed",
    "FakeClock",
    "LoggedRequest",
    "Provider",
    "START",
    "ScenarioBuilder",
    "VirtualTimeExceeded",
    "expect",
    "named_scenario",
    "scenario_names",
    "to_scenario",
]
