"""Metric labels a record's writer or a provider's answer would choose stay a bounded set.

Anyone who can write a record to a shared store names its profile (and so its
``waitbound.profile`` label), its submit method and cancel method; a provider chooses
its status codes. None of these may add series: a profile's name is a label only for
the built-in profiles and those this process was configured with or started operations
with itself (at most ``MAX_LABELLED_PROFILES``), any other is ``other``; a method
outside the standard ones is ``_OTHER``; an unregistered status code is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.core.harness import PROFILE
from tests.fakes import FakeClock, ScriptedProvider
from tests.telemetry.conftest import Telemetry
from waitbound import (
    Operation,
    Policy,
    SQLiteStore,
    check,
    observe_store,
    parse_profile,
    start,
)
from waitbound._observe import _metrics
from waitbound._observe._telemetry import sending
from waitbound.profiles import builtin_names

URL = "https://provider.test"
RUNNING = (200, {"status": "running"})
DONE = (200, {"status": "done"})
# A deadline the 4 requests cover 2 s apart (the plan would spread them over a longer one).
POLICY = Policy(
    max_requests=4, base_delay_s=2, max_delay_s=2, backoff_jitter_floor=1, deadline_s=6.3
)
HOSTILE = 120
OPEN = 40
OWN = "jobs"


def _profile_labels(found: dict[str, list[tuple[dict[str, Any], Any]]]) -> dict[str, set[str]]:
    """Instrument name → the ``waitbound.profile`` labels of its series."""
    labels: dict[str, set[str]] = {}
    for name, points in found.items():
        for attributes, _ in points:
            if "waitbound.profile" in attributes:
                labels.setdefault(name, set()).add(attributes["waitbound.profile"])
    return labels


def test_record_written_profile_names_never_become_unbounded_metric_labels(
    otel: Telemetry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """120 finished and 40 open records in a shared store, each with a profile name of
    its own (as anyone who writes to the store may give): time to outcome, budget used,
    detection lag and operations in flight label this process's own profile and
    ``other``, never 160 series of names; the spans say ``other`` too."""
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "shared.db")
    script: dict[str, list[Any]] = {}
    finished: list[str] = []
    for i in range(HOSTILE + 1):
        name = OWN if i == HOSTILE else f"hostile-{i}-{'x' * 40}"
        script[f"/{i}/status"] = [RUNNING, DONE]
        finished.append(
            start(
                Operation(
                    status_url=f"{URL}/{i}/status",
                    profile=parse_profile(PROFILE, name=name),
                    policy=POLICY,
                ),
                store=store,
                clock=clock,
            ).operation_id
        )
    for i in range(OPEN):
        start(
            Operation(
                status_url=f"{URL}/open/{i}",
                profile=parse_profile(PROFILE, name=f"open-{i}"),
                policy=POLICY,
            ),
            store=store,
            clock=clock,
        )
    # Another writer wrote them: this process started operations of its own profile only.
    monkeypatch.setattr(_metrics, "_PROFILES", set())
    _metrics.label_profiles([OWN])
    otel.exporter.clear()  # the writer's own spans (it knew its names)
    provider = ScriptedProvider(clock, script)
    with provider.client() as client:
        for _ in range(2):  # unfinished, then finished: a detection lag each
            for operation_id in finished:
                check(operation_id, store=store, client=client, clock=clock)
            clock.advance(5)
    with observe_store(store, clock):
        found = otel.metrics()
    labels = _profile_labels(found)
    for instrument in (
        "waitbound.operation.duration",
        "waitbound.budget.used",
        "waitbound.detection.lag",
    ):
        assert labels[instrument] == {OWN, "other"}, instrument
        counts = {a["waitbound.profile"]: p.count for a, p in found[instrument]}
        assert counts == {OWN: 1, "other": HOSTILE}, instrument
    in_flight = {
        (a["waitbound.profile"], a["waitbound.phase"]): p.value
        for a, p in found["waitbound.operations.in_flight"]
    }
    assert in_flight == {("other", "waiting"): OPEN}
    spans = {
        span.attributes.get("waitbound.profile")
        for span in otel.spans()
        if span.attributes and "waitbound.profile" in span.attributes
    }
    assert spans <= {OWN, "other"}
    assert "other" in spans
    store.close()


def test_a_process_labels_at_most_its_limit_of_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """However many profiles a long-lived process starts operations with, at most
    ``MAX_LABELLED_PROFILES`` become labels (the built-in ones always are); the rest
    are ``other``."""
    monkeypatch.setattr(_metrics, "_PROFILES", set())
    names = [f"p{i}" for i in range(1000)]
    for name in names:  # one at a time, as operations are started
        _metrics.label_profiles([name])
    labelled = {_metrics.profile_label(name) for name in names}
    assert len(labelled) == _metrics.MAX_LABELLED_PROFILES + 1
    assert "other" in labelled
    builtin = builtin_names()
    assert builtin
    assert {_metrics.profile_label(name) for name in builtin} == set(builtin)


def test_starting_an_operation_or_configuring_mcp_labels_its_profile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A profile this process starts an operation with, or an MCP provider's profile,
    is its own label; a record naming one from elsewhere is ``other``."""
    from waitbound.mcp import Jobs, parse_config

    monkeypatch.setattr(_metrics, "_PROFILES", set())
    store = SQLiteStore(tmp_path / "s.db")
    try:
        assert _metrics.profile_label("mine") == "other"
        start(
            Operation(status_url=f"{URL}/1", profile=parse_profile(PROFILE, name="mine")),
            store=store,
        )
        assert _metrics.profile_label("mine") == "mine"
        data = {
            "providers": {
                "reports": {
                    "base_url": f"{URL}/api",
                    "profile": {**PROFILE, "name": "reports-contract"},
                }
            }
        }
        assert _metrics.profile_label("reports-contract") == "other"
        Jobs(parse_config(data, base_dir=tmp_path, environ={}), store)
        assert _metrics.profile_label("reports-contract") == "reports-contract"
        assert _metrics.profile_label("someone-elses") == "other"
    finally:
        store.close()


def test_provider_chosen_status_codes_never_become_unbounded_metric_labels(
    otel: Telemetry, tmp_path: Path
) -> None:
    """60 operations whose provider answers each with a status code of its own outside
    the registered ones: the request metrics hold no such code (``error.type`` is
    ``_OTHER``), so one series stands for all of them."""
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "s.db")
    profile = parse_profile(PROFILE, name=OWN)
    script: dict[str, list[Any]] = {f"/{i}/status": [(600 + i, None)] for i in range(60)}
    ids = [
        start(
            Operation(status_url=f"{URL}/{i}/status", profile=profile, policy=POLICY),
            store=store,
            clock=clock,
        ).operation_id
        for i in range(60)
    ]
    provider = ScriptedProvider(clock, script)
    with provider.client() as client:
        for operation_id in ids:
            check(operation_id, store=store, client=client, clock=clock)
    durations = otel.metrics()["http.client.request.duration"]
    assert len(durations) == 1
    ((attributes, point),) = durations
    assert "http.response.status_code" not in attributes
    assert attributes["error.type"] == "_OTHER"
    assert point.count == 60
    store.close()


@dataclass(frozen=True)
class _Request:
    kind: str
    url: str
    method: str


def test_record_chosen_methods_never_become_unbounded_labels_or_span_names(
    otel: Telemetry, tmp_path: Path
) -> None:
    """A record names its submit and cancel methods: 50 made-up methods are one
    ``_OTHER`` series, and their spans are called ``HTTP`` (the semantic conventions'
    name for a method outside the known set); a standard method keeps its name."""
    store = SQLiteStore(tmp_path / "s.db")
    operation_id = start(
        Operation(status_url=f"{URL}/1", profile=parse_profile(PROFILE, name=OWN)),
        store=store,
    ).operation_id
    record = store.get(operation_id)
    assert record is not None
    profile = parse_profile(PROFILE, name=OWN)
    methods = [f"FROB{i}" for i in range(50)] + ["DELETE"]
    for method in methods:
        with sending(record, _Request("cancel", f"{URL}/1/cancel", method), {}, profile):
            pass
        _metrics.record_request("cancel", method, 204, 0.01, {"server.address": "other"})
    found = otel.metrics()["http.client.request.duration"]
    by_method = {a["http.request.method"]: p.count for a, p in found}
    assert by_method == {"_OTHER": 50, "DELETE": 1}
    names = [span.name for span in otel.spans() if span.kind.name == "CLIENT"]
    assert sorted(set(names)) == ["DELETE", "HTTP"]
    store.close()
