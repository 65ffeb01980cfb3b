"""The pytest plugin: ``provider``, ``provider_factory``, ``fake_clock``, ``waitbound_store``.

Installed with ``pip install 'waitbound[testing]'`` it loads itself (entry point
``pytest11``: ``waitbound``); without installing, load it with
``-p waitbound.testing._plugin`` or ``pytest_plugins = ["waitbound.testing._plugin"]`` in
a top-level ``conftest.py``. See ``docs/testing.md``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from waitbound.sim import Scenario
from waitbound.stores import SQLiteStore
from waitbound.testing._clock import FakeClock
from waitbound.testing._provider import Provider, ScenarioBuilder

__all__ = ["fake_clock", "provider", "provider_factory", "waitbound_store"]

#: What a test may name a scenario by (see ``waitbound.testing.to_scenario``).
ScenarioLike = Scenario | ScenarioBuilder | Mapping[str, object] | str | os.PathLike[str]
ProviderFactory = Callable[..., Provider]

#: Virtual seconds a test's fake clock may run before it calls the wait endless.
DEFAULT_LIMIT_S = 3600.0


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``waitbound_scenario`` marker."""
    config.addinivalue_line(
        "markers",
        "waitbound_scenario(scenario, real_time=False): the scenario the provider fixture "
        "serves (a shipped name, a file, a dict or a ScenarioBuilder)",
    )


@pytest.fixture
def fake_clock() -> FakeClock:
    """Virtual time: pass ``fake_clock`` as ``clock=`` and ``fake_clock.sleep`` as ``sleep=``.

    Its limit is one virtual hour: a wait still sleeping after that raises
    ``VirtualTimeExceeded`` (a missing deadline fails fast instead of looping).
    """
    return FakeClock(limit_s=DEFAULT_LIMIT_S)


@pytest.fixture
def provider_factory(fake_clock: FakeClock) -> Iterator[ProviderFactory]:
    """Start providers: ``provider_factory(scenario, real_time=False)`` -> a started Provider.

    Each serves on its own free loopback port, reads the test's ``fake_clock`` (unless
    ``real_time=True``), and is stopped after the test.
    """
    started: list[Provider] = []

    def start(scenario: ScenarioLike, *, real_time: bool = False) -> Provider:
        served = Provider(scenario, clock=None if real_time else fake_clock).start()
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


@pytest.fixture
def provider(request: pytest.FixtureRequest, provider_factory: ProviderFactory) -> Provider:
    """The provider serving this test's scenario, started, on a free loopback port.

    Name the scenario by indirect parametrization
    (``@pytest.mark.parametrize("provider", ["slow-job"], indirect=True)``) or with
    ``@pytest.mark.waitbound_scenario("slow-job")``.
    """
    marker = request.node.get_closest_marker("waitbound_scenario")
    if hasattr(request, "param"):
        return provider_factory(request.param)
    if marker is not None and marker.args:
        return provider_factory(marker.args[0], real_time=bool(marker.kwargs.get("real_time")))
    raise pytest.UsageError(
        "the provider fixture needs a scenario: parametrize it indirectly "
        '(@pytest.mark.parametrize("provider", ["slow-job"], indirect=True)), mark the test '
        '(@pytest.mark.waitbound_scenario("slow-job")), or use provider_factory(scenario)'
    )


@pytest.fixture
def waitbound_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A SQLite store in the test's own ``tmp_path`` (never shared), closed after the test."""
    store = SQLiteStore(tmp_path / "waitbound.db")
    yield store
    store.close()
