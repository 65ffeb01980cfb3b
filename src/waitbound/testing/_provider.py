"""A scripted provider for tests: the simulator on loopback, its scenario and its log."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Self

from waitbound._base._errors import ProfileError, ScenarioError, UsageError
from waitbound._base._json import JSON
from waitbound._profile._contract import Classification, Profile
from waitbound._profile._contract_parse import parse_profile
from waitbound.sim import Scenario, Simulator, load_scenario, parse_scenario
from waitbound.testing._clock import FakeClock

__all__ = [
    "LoggedRequest",
    "Provider",
    "ScenarioBuilder",
    "named_scenario",
    "scenario_names",
    "to_scenario",
]

#: Classifications after which a job is over.
_TERMINAL = frozenset(Classification) - {Classification.PENDING, Classification.UNKNOWN}


def scenario_names() -> tuple[str, ...]:
    """Return the names of the scenarios shipped with waitbound.testing, sorted."""
    folder = resources.files("waitbound.testing") / "scenarios"
    names = (item.name for item in folder.iterdir() if item.name.endswith(".json"))
    return tuple(sorted(name.removesuffix(".json") for name in names))


def named_scenario(name: str) -> Scenario:
    """Load one of the shipped scenarios (see ``docs/testing.md``, "Scenarios").

    Args:
        name: e.g. ``slow-job``; :func:`scenario_names` lists them all.

    Raises:
        UsageError: no shipped scenario has that name (the message lists them).
    """
    if name not in scenario_names():
        known = ", ".join(scenario_names())
        raise UsageError(f"no scenario named {name!r} (shipped: {known})")
    text = (resources.files("waitbound.testing") / "scenarios" / f"{name}.json").read_text()
    return parse_scenario(json.loads(text), source=f"waitbound.testing:{name}")


@dataclass(slots=True)
class ScenarioBuilder:
    """Build a small scenario in code: each call appends one answer to an endpoint.

    ``ScenarioBuilder("mine").status(200, {"status": "running"}, repeat=2)
    .status(200, {"status": "done"}).result(200, {"rows": 3})`` is the scenario whose
    status endpoint answers running twice, then done forever, and whose result endpoint
    answers ``{"rows": 3}``. Entries follow the scenario format (``docs/cli.md``).

    Args:
        id: the scenario's name.
        description: what it models, in plain words.
    """

    id: str
    description: str = ""
    _endpoints: dict[str, list[dict[str, JSON]]] = field(default_factory=dict)
    _wait: dict[str, JSON] = field(default_factory=dict)

    def answer(
        self,
        endpoint: str,
        code: int,
        body: JSON = None,
        *,
        headers: Mapping[str, str] | None = None,
        repeat: int = 1,
        after_s: float = 0.0,
        after: str | None = None,
        delay_s: float = 0.0,
    ) -> Self:
        """Append one answer to *endpoint* (``status``, ``result``, ``cancel``, ``submit``).

        Args:
            endpoint: which endpoint answers it.
            code: the HTTP status code.
            body: the JSON body; ``None`` sends none.
            headers: extra response headers (templates such as ``{base_url}`` allowed).
            repeat: how many times it is served before the next answer.
            after_s: seconds after the first request before it may be served.
            after: another endpoint's name: it may be served only once that endpoint
                has been requested (``"cancel"``: pending until a cancel arrives).
            delay_s: seconds the simulator waits before answering (virtual with a fake
                clock).
        """
        entry: dict[str, JSON] = {"code": code}
        if body is not None:
            entry["body"] = body
        if headers:
            entry["headers"] = dict(headers)
        if repeat != 1:
            entry["repeat"] = repeat
        if after_s:
            entry["after_s"] = after_s
        if after is not None:
            entry["after"] = after
        if delay_s:
            entry["delay_s"] = delay_s
        self._endpoints.setdefault(endpoint, []).append(entry)
        return self

    def status(self, code: int, body: JSON = None, **options: object) -> Self:
        """Append an answer to the status endpoint (``/status``); options as :meth:`answer`."""
        return self.answer("status", code, body, **options)  # type: ignore[arg-type]

    def result(self, code: int, body: JSON = None, **options: object) -> Self:
        """Append an answer to the result endpoint (``/result``); options as :meth:`answer`."""
        return self.answer("result", code, body, **options)  # type: ignore[arg-type]

    def profile(self, profile: Mapping[str, JSON]) -> Self:
        """Set the state table that reads the status answers (``wait.profile``).

        With it, :func:`~waitbound.testing.expect` knows which answers were terminal.
        """
        self._wait["profile"] = dict(profile)
        return self

    def to_dict(self) -> dict[str, JSON]:
        """Return the scenario as the JSON object a scenario file holds."""
        data: dict[str, JSON] = {"id": self.id, "description": self.description}
        data["endpoints"] = {name: list(entries) for name, entries in self._endpoints.items()}
        if self._wait:
            data["wait"] = dict(self._wait)
        return data

    def build(self) -> Scenario:
        """Return the validated scenario.

        Raises:
            ScenarioError: an answer is not valid (the message names it).
        """
        return parse_scenario(self.to_dict(), source=f"builder {self.id!r}")


def to_scenario(
    scenario: Scenario | ScenarioBuilder | Mapping[str, object] | str | os.PathLike[str],
) -> Scenario:
    """Turn what a test names into a validated scenario.

    Args:
        scenario: a :class:`~waitbound.sim.Scenario`; a :class:`ScenarioBuilder`; a dict
            in the scenario format; a shipped scenario's name (``"slow-job"``); or the
            path of a scenario file (a ``str`` ending in ``.json``, or a path object).

    Raises:
        ScenarioError: the scenario is not valid, or its file cannot be read.
        UsageError: a name that no shipped scenario has.
    """
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, ScenarioBuilder):
        return scenario.build()
    if isinstance(scenario, Mapping):
        return parse_scenario(dict(scenario), source="<dict>")
    if isinstance(scenario, str) and not scenario.endswith(".json"):
        return named_scenario(scenario)
    return load_scenario(Path(scenario))


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggedRequest:
    """One request the provider answered, with what it answered.

    Attributes:
        number: 1 for the first request the provider received, and so on.
        method: the HTTP method.
        path: the request target as sent (query included).
        endpoint: ``status``, ``result``, ``cancel``, ``submit`` (or an extra endpoint's
            name); ``None`` for an unknown path.
        code: the HTTP status code sent; ``None`` when the connection was dropped.
        at_s: seconds from the provider's first request to this one (virtual time with
            a fake clock).
        at: arrival time, aware UTC.
        headers: the request's headers, credentials' values ``[redacted]``.
        body: the scripted JSON body that was served (templates unexpanded); ``None``
            for none.
        state: the class of that body by the scenario's profile (``pending``,
            ``succeeded``, …) for a status answer; ``None`` when it has no profile, or
            for other endpoints.
        hint_s: the wait that answer asked for before the next look, in seconds: its
            ``Retry-After`` (delay-seconds) or, failing that, its body's
            ``poll_after_seconds``; ``None`` when it asked for none.
    """

    number: int
    method: str
    path: str
    endpoint: str | None
    code: int | None
    at_s: float
    at: datetime
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    body: JSON = None
    state: Classification | None = None
    hint_s: float | None = None

    @property
    def terminal(self) -> bool:
        """Whether this status answer said the job is over (by the scenario's profile)."""
        return self.state in _TERMINAL

    def describe(self) -> str:
        """One line for failure messages: ``#2 t=30.0s GET /status -> 200 {"status": …}``."""
        answer = "dropped" if self.code is None else str(self.code)
        body = "" if self.body is None else " " + json.dumps(self.body, sort_keys=True)
        if len(body) > 120:
            body = body[:117] + "..."
        return f"#{self.number} t={self.at_s:.1f}s {self.method} {self.path} -> {answer}{body}"


class Provider:
    """A scripted provider served on loopback: the simulator and its scenario, in-process.

    Build it with the ``provider`` fixture (which stops it after the test), or use it as
    a context manager. Each one binds its own free port, so tests run in parallel
    (pytest-xdist) never share one.

    Args:
        scenario: what it serves (see :func:`to_scenario` for what is accepted).
        clock: the clock the simulator reads; a :class:`FakeClock` makes the scenario's
            ``after_s`` and ``delay_s`` virtual. ``None``: real time.

    Attributes:
        scenario: the validated scenario.
        clock: the clock given, or ``None`` for real time.

    Raises:
        ScenarioError: the scenario is not valid.
    """

    def __init__(
        self,
        scenario: Scenario | ScenarioBuilder | Mapping[str, object] | str | os.PathLike[str],
        *,
        clock: FakeClock | None = None,
    ) -> None:
        self.scenario = to_scenario(scenario)
        self.clock = clock
        self._profile = _profile_of(self.scenario)
        self._sim = Simulator(
            self.scenario, clock=clock, sleep=None if clock is None else clock.sleep
        )

    def start(self) -> Self:
        """Start serving in a background thread; return self."""
        self._sim.start()
        return self

    def stop(self) -> None:
        """Stop serving; calling it again does nothing."""
        self._sim.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return self._sim.base_url

    @property
    def submit_url(self) -> str:
        """The submit endpoint's URL (``/jobs``)."""
        return f"{self.base_url}/jobs"

    @property
    def status_url(self) -> str:
        """The status endpoint's URL (``/status``)."""
        return f"{self.base_url}/status"

    @property
    def result_url(self) -> str:
        """The result endpoint's URL (``/result``)."""
        return f"{self.base_url}/result"

    @property
    def cancel_url(self) -> str:
        """The cancel endpoint's URL (``/cancel``)."""
        return f"{self.base_url}/cancel"

    @property
    def profile(self) -> Profile | None:
        """The scenario's state table (its ``wait.profile``), or ``None`` when it has none."""
        return self._profile

    def log(self) -> tuple[LoggedRequest, ...]:
        """Return every request answered so far, in order, with what was answered."""
        logged = []
        for number, entry in enumerate(self._sim.log(), start=1):
            body: JSON = None
            state: Classification | None = None
            hint_s: float | None = None
            if entry.endpoint is not None and entry.index is not None:
                served = self.scenario.endpoints[entry.endpoint][entry.index]
                body, hint_s = served.body, _hint_s(served.headers, served.body)
                if entry.endpoint == "status" and self._profile is not None:
                    state = self._profile.read(body).classification
            logged.append(
                LoggedRequest(
                    number=number,
                    method=entry.method,
                    path=entry.path,
                    endpoint=entry.endpoint,
                    code=entry.code,
                    at_s=entry.at_s,
                    at=entry.at,
                    headers=MappingProxyType(dict(entry.headers)),
                    body=body,
                    state=state,
                    hint_s=hint_s,
                )
            )
        return tuple(logged)

    def count(self, endpoint: str) -> int:
        """Return how many requests were answered on *endpoint* (``status``, ``result``, …).

        Raises:
            UsageError: the scenario has no such endpoint.
        """
        return self._sim.count(endpoint)


def _hint_s(headers: Mapping[str, str], body: JSON) -> float | None:
    """The delay an answer asked for: ``Retry-After`` seconds, else ``poll_after_seconds``."""
    for name, value in headers.items():
        if name.lower() == "retry-after" and value.strip().isdigit():
            return float(value)
    hint = body.get("poll_after_seconds") if isinstance(body, dict) else None
    if isinstance(hint, int | float) and not isinstance(hint, bool) and hint >= 0:
        return float(hint)
    return None


def _profile_of(scenario: Scenario) -> Profile | None:
    data = scenario.wait.get("profile")
    if not isinstance(data, Mapping):
        return None  # absent, or a built-in profile's name: not read here
    try:
        return parse_profile(dict(data), name=f"{scenario.id}.wait.profile")
    except ProfileError as err:
        raise ScenarioError(f"scenario {scenario.id}: wait.profile: {err}") from None
