"""Telemetry end to end: the real CLI against the real simulator, exporting over
OTLP/HTTP to a receiver on loopback (decoded with ``opentelemetry-proto``), a scrape of
``serve --metrics`` read by ``prometheus_client``'s own parser, and JSON logs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.runner import cli
from tests.e2e.test_serve import serving
from tests.telemetry.otlp_receiver import attributes_of, otlp_receiver
from waitbound.sim import Simulator, parse_scenario

STATE = ["--state-path", "status", "--pending", "running", "--succeeded", "done"]
PACE = ["--base-delay", "0.1s", "--max-delay", "0.2s", "--deadline", "60s"]
TOKEN = "SECRET-TOKEN-4711"
QUERY = "sig=SECRET-QUERY-0815"
SCENARIO = {
    "id": "telemetry",
    "endpoints": {
        "status": [
            {"code": 429, "headers": {"Retry-After": "0"}, "body": {"error": "slow down"}},
            {"code": 200, "body": {"status": "running"}, "repeat": 2},
            {"code": 200, "body": {"status": "done"}},
        ]
    },
}


def _otel_env(url: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": url,
        "OTEL_SERVICE_NAME": "waitbound-e2e",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


@pytest.mark.e2e
def test_a_wait_exports_its_trace_and_metrics_over_otlp_http(tmp_path: Path) -> None:
    """`waitbound wait` with OTEL_EXPORTER_OTLP_ENDPOINT: the receiver gets protobuf
    spans (the run, a CLIENT span per request with the HTTP attributes) and metrics
    (the outcome, the requests); no exported attribute holds the token or the query."""
    store = tmp_path / "s.db"
    with otlp_receiver() as received, Simulator(parse_scenario(SCENARIO)) as sim:
        done = cli(
            "wait", f"{sim.base_url}/status?{QUERY}", *STATE, *PACE, "--json",
            "--store", str(store), "--operation-id", "op-otlp",
            "--header", f"Authorization: Bearer {TOKEN}",
            env=_otel_env(received.url),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        spans = received.spans()
        metrics = received.metrics()
    assert set(received.content_types) == {"application/x-protobuf"}
    runs = [s for s in spans if s.name == "waitbound.operation"]
    assert len(runs) == 1
    requests = [s for s in spans if s.parent_span_id == runs[0].span_id]
    assert [attributes_of(s)["http.response.status_code"] for s in requests] == [429, 200, 200, 200]
    first = attributes_of(requests[0])
    assert first["url.full"] == f"{sim.base_url}/status"
    assert first["server.address"] == "127.0.0.1"
    assert first["waitbound.operation_id"] == "op-otlp"
    assert attributes_of(runs[0])["waitbound.outcome"] == "succeeded"
    names = {
        metric.name
        for request in metrics
        for resource in request.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert {"waitbound.outcomes", "waitbound.requests", "http.client.request.duration"} <= names
    exported = b"".join(r.SerializeToString() for r in received.traces())
    exported += b"".join(r.SerializeToString() for r in metrics)
    for secret in (TOKEN, "SECRET-QUERY", "sig="):
        assert secret.encode() not in exported


@pytest.mark.e2e
def test_serve_metrics_scrape_parsed_by_prometheus_client(tmp_path: Path) -> None:
    """`serve --metrics` drives a detached wait; GET /metrics with the token is
    Prometheus text that prometheus_client's parser reads: the outcome, the requests by
    status class, the gauges. Without the token: 401."""
    store, token_file = tmp_path / "s.db", tmp_path / "token"
    with Simulator(parse_scenario(SCENARIO)) as sim:
        detached = cli("wait", f"{sim.base_url}/status", *STATE, *PACE, "--detach", "--json",
                       "--store", str(store), "--operation-id", "op-m")  # fmt: skip
        assert detached.returncode == 4, detached.stderr
        with serving(store, token_file, "--metrics") as served, httpx.Client(timeout=30) as http:
            families = _scrape_until_done(http, served.url, served.auth())
            refused = http.get(f"{served.url}/metrics")
    assert refused.status_code == 401
    samples = {  # the exporter's otel_scope_* labels left out
        (
            s.name,
            tuple(sorted((k, v) for k, v in s.labels.items() if "otel_scope" not in k)),
        ): s.value
        for family in families.values()
        for s in family.samples
    }
    outcome = ("waitbound_outcome", "succeeded"), ("waitbound_reason", "none")
    assert samples[("waitbound_outcomes_total", tuple(sorted(outcome)))] == 1
    by_class = {
        dict(labels)["waitbound_status_class"]: value
        for (name, labels), value in samples.items()
        if name == "waitbound_requests_total"
    }
    assert by_class == {"4xx": 1, "2xx": 3}
    assert samples[("waitbound_decisions_open", ())] == 0
    assert "http_client_request_duration_seconds" in families
    assert "waitbound_store_transaction_duration_seconds" in families


def _scrape_until_done(http: httpx.Client, url: str, auth: dict[str, str]) -> dict[str, Metric]:
    """Scrape until the worker's outcome shows (each scrape parsed whole)."""

    deadline = time.monotonic() + 60
    while True:
        answer = http.get(f"{url}/metrics", headers=auth)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("text/plain")
        families = {f.name: f for f in text_string_to_metric_families(answer.text)}
        if "waitbound_outcomes" in families:
            return families
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.2)


@pytest.mark.e2e
def test_metrics_public_only_on_loopback_and_without_the_token(tmp_path: Path) -> None:
    """--metrics-public serves /metrics without the token (loopback); on another host it
    is refused in one line before anything starts."""
    store, token_file = tmp_path / "s.db", tmp_path / "token"
    with serving(store, token_file, "--metrics", "--metrics-public", "--no-worker") as served:
        answer = httpx.get(f"{served.url}/metrics", timeout=30)
        assert answer.status_code == 200
        assert httpx.get(f"{served.url}/operations/x", timeout=30).status_code == 401
    refused = cli("serve", "--metrics", "--metrics-public", "--host", "0.0.0.0", "--allow-remote",
                  "--store", str(store), "--token-file", str(token_file))  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert "--metrics-public" in refused.stderr


@pytest.mark.e2e
def test_worker_json_logs_carry_trace_and_span_ids(tmp_path: Path) -> None:
    """`worker --log-format json` with OTLP export: every stderr line is one JSON
    object; the operation's events carry its id and the trace and span ids of the
    exported spans."""
    store = tmp_path / "s.db"
    with otlp_receiver() as received, Simulator(parse_scenario(SCENARIO)) as sim:
        detached = cli("wait", f"{sim.base_url}/status", *STATE, *PACE, "--detach", "--json",
                       "--store", str(store), "--operation-id", "op-j")  # fmt: skip
        assert detached.returncode == 4, detached.stderr
        worked = cli("worker", "--store", str(store), "--until-idle", "--log-format", "json",
                     env=_otel_env(received.url))  # fmt: skip
        assert worked.returncode == 0, worked.stderr
        spans = received.spans()
    lines = [json.loads(line) for line in worked.stderr.splitlines()]
    events = [line for line in lines if line["logger"] == "waitbound.events"]
    assert {e["operation_id"] for e in events} == {"op-j"}
    assert "finished" in {e["event"] for e in events}
    span_ids = {s.span_id.hex() for s in spans}
    trace_ids = {s.trace_id.hex() for s in spans}
    traced = [e for e in events if "trace_id" in e]
    assert traced
    assert {e["trace_id"] for e in traced} <= trace_ids
    assert {e["span_id"] for e in traced} <= span_ids
    assert all(set(line) >= {"time", "level", "logger", "message"} for line in lines)
    assert os.linesep not in "".join(e["message"] for e in events)
