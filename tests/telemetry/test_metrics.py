"""Metrics after a scripted fleet: outcomes, requests, histograms, gauges, store time."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.core.harness import PROFILE, SEED
from tests.fakes import FakeClock, ScriptedProvider
from tests.telemetry.conftest import Telemetry
from waitbound import (
    Completion,
    Operation,
    Policy,
    SQLiteStore,
    check,
    observe_store,
    parse_profile,
    start,
    wait,
)
from waitbound._observe import _metrics
from waitbound._rules._credentials import BoundCredentials

URL = "https://provider.test"
RUNNING = (200, {"status": "running"})


def _fleet(store: SQLiteStore, clock: FakeClock) -> None:
    """Four waits, one after the other: two succeed (one throttled first), one fails,
    one spends its request budget; one more is only started (in flight)."""
    script: dict[str, list[Any]] = {
        "/a/status": [RUNNING, RUNNING, (200, {"status": "done"})],
        "/a/result": [(200, {"output": 1})],
        "/b/status": [(429, None, {"Retry-After": "2"}), (200, {"status": "done"})],
        "/c/status": [RUNNING, (200, {"status": "failed", "error": {"code": "E"}})],
        "/d/status": [RUNNING],
    }
    provider = ScriptedProvider(clock, script)
    profile = parse_profile(PROFILE, name="jobs")
    # A deadline the 4 requests cover 2 s apart (the plan would spread them over a longer one).
    policy = Policy(
        max_requests=4, base_delay_s=2, max_delay_s=2, backoff_jitter_floor=1, deadline_s=6.3
    )
    got: list[Completion] = []
    for name in "abcd":
        wait(
            Operation(
                status_url=f"{URL}/{name}/status",
                result_url=f"{URL}/a/result" if name == "a" else None,
                profile=profile,
                policy=policy,
            ),
            operation_id=f"op-{name}",
            store=store,
            client=provider.client(),
            clock=clock,
            sleep=clock.sleep,
            rng=random.Random(SEED),
            on_complete=got.append if name == "a" else None,
        )
    start(
        Operation(status_url=f"{URL}/e/status", profile=profile, policy=policy),
        operation_id="op-e",
        store=store,
        clock=clock,
    )
    assert len(got) == 1


def _points(metrics: dict[str, list[tuple[dict[str, Any], Any]]], name: str) -> dict[Any, Any]:
    return {tuple(sorted(attrs.items())): point for attrs, point in metrics.get(name, [])}


def test_metric_values_after_a_scripted_fleet(otel: Telemetry, tmp_path: Path) -> None:
    """Each instrument holds what the fleet did: outcomes by kind and reason, requests by
    kind and status class, time to outcome and budget used from the records' own
    (virtual) times and counters, the detection-lag bound, the store's transactions, the
    completion delivered; the store's gauges count what is open."""
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "fleet.db")
    _fleet(store, clock)
    with observe_store(store, clock):
        found = otel.metrics()
    outcomes = {
        (a["waitbound.outcome"], a["waitbound.reason"]): p.value
        for a, p in found["waitbound.outcomes"]
    }
    assert outcomes == {
        ("succeeded", "none"): 2,
        ("failed", "none"): 1,
        ("escalated", "request_budget_exhausted"): 1,
    }
    requests = {
        (a["waitbound.request_kind"], a["waitbound.status_class"]): p.value
        for a, p in found["waitbound.requests"]
    }
    assert requests == {("status", "2xx"): 10, ("status", "4xx"): 1, ("result", "2xx"): 1}
    durations = _points(found, "http.client.request.duration")
    throttled = durations[
        tuple(
            sorted(
                {
                    "http.request.method": "GET",
                    "http.response.status_code": 429,
                    "error.type": "429",
                    "server.address": "provider.test",
                    "server.port": 443,
                    "url.scheme": "https",
                    "waitbound.request_kind": "status",
                }.items()
            )
        )
    ]
    assert throttled.count == 1
    took = {a["waitbound.outcome"]: p for a, p in found["waitbound.operation.duration"]}
    assert took["succeeded"].count == 2
    assert took["failed"].count == 1
    assert took["escalated"].count == 1
    # c: two polls 2 s apart; d: four; on virtual time, so the sums are exact.
    assert took["failed"].sum == 2.0
    assert took["escalated"].sum == 6.0
    budget = {a["waitbound.outcome"]: p for a, p in found["waitbound.budget.used"]}
    assert budget["succeeded"].sum == (4 + 2) / 4
    assert budget["failed"].sum == 2 / 4
    assert budget["escalated"].sum == 1.0
    (lag,) = found["waitbound.detection.lag"]
    assert lag[0] == {"waitbound.profile": "jobs"}
    assert lag[1].count == 3  # a, b and c: each ended after an unfinished answer
    assert lag[1].min == 2.0
    attempts = {
        (a["waitbound.channel"], a["waitbound.result"]): p.value
        for a, p in found["waitbound.outbox.attempts"]
    }
    assert attempts == {("callback", "delivered"): 1}
    (transactions,) = found["waitbound.store.transaction.duration"]
    assert transactions[0] == {"db.system.name": "sqlite"}
    assert transactions[1].count >= 20
    in_flight = {
        (a["waitbound.profile"], a["waitbound.phase"]): p.value
        for a, p in found["waitbound.operations.in_flight"]
    }
    assert in_flight == {("jobs", "waiting"): 1}
    ((_, open_requests),) = found["waitbound.decisions.open"]
    assert open_requests.value == 1  # the escalated one asks a person
    escalated = store.get("op-d")
    assert escalated is not None
    assert escalated.decision_request is not None
    ((_, oldest),) = found["waitbound.decisions.oldest_age"]
    assert oldest.value == (clock.now() - escalated.decision_request.opened_at).total_seconds()
    assert "waitbound.outbox.backlog" not in found  # nothing pending


def test_provider_chosen_origins_never_become_unbounded_metric_labels(
    otel: Telemetry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 records in a shared store, each naming its own host and port (as anyone who
    writes to the store, or a provider's answer, may): the request metrics label the
    configured provider's origin and ``other``, never 200 series of hosts and ports."""
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "shared.db")
    profile = parse_profile(PROFILE, name="jobs")
    script: dict[str, list[Any]] = {"/status": [(200, {"status": "done"})]}
    ids = [
        start(
            Operation(status_url=f"https://h{i}.attacker.test:{1000 + i}/status", profile=profile),
            store=store,
            clock=clock,
        ).operation_id
        for i in range(200)
    ]
    ids.append(
        start(
            Operation(status_url=f"{URL}/status", profile=profile), store=store, clock=clock
        ).operation_id
    )
    monkeypatch.setattr(_metrics, "_LABELLED", set())  # this process configured none of them
    provider = ScriptedProvider(clock, script)
    bound = BoundCredentials.by_origin({("https", "provider.test", 443): {"X-Key": "k" * 12}})
    with provider.client() as client:
        for operation_id in ids:
            check(operation_id, store=store, headers=bound, client=client, clock=clock)
    durations = otel.metrics()["http.client.request.duration"]
    series = {(a["server.address"], a.get("server.port")): p.count for a, p in durations}
    assert series == {("other", None): 200, ("provider.test", 443): 1}
    store.close()


def test_a_process_labels_at_most_its_limit_of_origins(monkeypatch: pytest.MonkeyPatch) -> None:
    """However many origins a long-lived process names, at most
    ``MAX_LABELLED_ORIGINS`` become labels; the rest are ``other``."""
    monkeypatch.setattr(_metrics, "_LABELLED", set())
    _metrics.label_origins(("https", f"h{i}.example", 443) for i in range(1000))
    labelled = {
        _metrics.server_labels(f"https://h{i}.example/x")["server.address"] for i in range(1000)
    }
    assert len(labelled) == _metrics.MAX_LABELLED_ORIGINS + 1
    assert "other" in labelled
