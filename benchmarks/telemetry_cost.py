"""Telemetry cost: what the OpenTelemetry hooks add to one poll, and how to serve metrics.

Three measurements, each the median of ``--runs`` runs (CPU time of this process):

1. **The hooks of one poll, in isolation**: what ``waitbound._engine._driver`` and a SQLite
   store call for one durable poll cycle (the request's ``sending`` span and
   ``answered``, ``persisted`` for the reservation and for the answer with their audit
   events, two timed store transactions), with no SDK installed (the API's no-op),
   then with the SDK recording into an in-memory span exporter and metric reader. In
   µs per poll, to set beside ``benchmarks.poll_overhead``'s CPU per cycle.
2. **A whole in-process wait** (``waitbound.wait`` through ``httpx.MockTransport`` and
   the memory store: no sockets, so the machine's load moves it less), without and
   with the SDK: CPU per cycle.
3. **Serving Prometheus**: per request, the metric updates through the OpenTelemetry
   SDK against the same updates with ``prometheus_client``; per scrape, rendering the
   text for ``--series`` label sets through the OpenTelemetry Prometheus reader against
   ``prometheus_client`` alone.

Usage: ``python -m benchmarks.telemetry_cost [--quick] [--runs R] [--series N]``
(needs the ``otel`` extra and ``prometheus_client``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from benchmarks._common import PROFILE, machine, print_machine, print_table
from waitbound import MemoryStore, Operation, Policy, wait
from waitbound._engine._operation import open_operation
from waitbound._model._audit import EventKind
from waitbound._model._observation import Observation
from waitbound._observe._metrics import record_request, store_transaction
from waitbound._observe._telemetry import persisted, sending
from waitbound._rules._controller import Request, audit_event
from waitbound.testing import FakeClock

FULL_RUNS, QUICK_RUNS = 7, 2
HOOK_LOOPS = 20_000
WAIT_POLLS = 1_000


def _cpu(fn: Callable[[], object], loops: int) -> float:
    """CPU µs per call of *fn*, over *loops* calls."""
    started = time.process_time()
    for _ in range(loops):
        fn()
    return (time.process_time() - started) / loops * 1e6


def _poll_hooks() -> Callable[[], None]:
    """One poll's hook calls, on a real record with real audit events."""
    clock = FakeClock()
    store = MemoryStore()
    operation = Operation(status_url="https://api.example/jobs/1", profile=PROFILE)
    record = open_operation(store, operation, operation_id="op-bench", clock=clock)
    record = record.evolve(counters=record.counters.evolve(status_requests_used=1))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    reserved = (audit_event(record, now, EventKind.RESERVED, "reserved status request 1 of 30"),)
    answered = (
        audit_event(record, now, EventKind.OBSERVED, "status request 1 answered HTTP 200"),
        audit_event(record, now, EventKind.SCHEDULED, "next request in 5s (local_backoff)"),
    )
    request = Request(kind="status", url=operation.status_url, timeout_s=30.0)
    observation = Observation(kind="status", at=now, http_status=200, elapsed_s=0.01)
    headers = {"Authorization": "Bearer x"}

    def one_poll() -> None:
        with store_transaction("sqlite"):
            pass
        persisted(record, reserved)
        with sending(record, request, headers, PROFILE) as sent:
            sent.answered(observation)
        with store_transaction("sqlite"):
            pass
        persisted(record, answered)

    return one_poll


def _wait_cycle_us(polls: int) -> float:
    """CPU µs per cycle of a ``waitbound.wait`` of *polls* requests (MockTransport)."""
    body = httpx.Response(200, json={"status": "running"})

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body.content, headers=body.headers)

    policy = Policy(
        deadline_s=3600, max_requests=polls, base_delay_s=1e-6, max_delay_s=1e-6, min_delay_s=1e-6
    )
    operation = Operation(status_url="http://sim.test/status", profile=PROFILE, policy=policy)
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        started = time.process_time()
        wait(operation, store=MemoryStore(), client=client, sleep=lambda s: None)
        return (time.process_time() - started) / polls * 1e6


def _install_sdk() -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def _prometheus(runs: int, series: int) -> list[list[str]]:
    """Per-request update cost and per-scrape render cost: OTel SDK + its Prometheus
    reader against prometheus_client alone (each in a registry of its own)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    otel_registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=otel_registry)
    meter = MeterProvider(metric_readers=[reader]).get_meter("bench")
    otel_counter = meter.create_counter("waitbound.requests")
    otel_histogram = meter.create_histogram("http.client.request.duration", unit="s")
    prom_registry = CollectorRegistry()
    labels = ["kind", "status_class", "server"]
    prom_counter = Counter("waitbound_requests", "", labels, registry=prom_registry)
    prom_histogram = Histogram(
        "http_client_request_duration_seconds", "", labels, registry=prom_registry
    )
    label_sets = [("status", "2xx", f"host-{i}") for i in range(series)]
    rng = random.Random(1)

    def otel_update() -> None:
        kind, klass, server = label_sets[rng.randrange(series)]
        attributes = {"kind": kind, "status_class": klass, "server": server}
        otel_counter.add(1, attributes)
        otel_histogram.record(0.01, attributes)

    def prom_update() -> None:
        values = label_sets[rng.randrange(series)]
        prom_counter.labels(*values).inc()
        prom_histogram.labels(*values).observe(0.01)

    for values in label_sets:  # every series exists before the scrapes
        otel_update()
        prom_update()
        prom_counter.labels(*values).inc()
    updates = {"otel": [], "prom": []}  # type: dict[str, list[float]]
    scrapes = {"otel": [], "prom": []}  # type: dict[str, list[float]]
    for _ in range(runs):
        updates["otel"].append(_cpu(otel_update, HOOK_LOOPS))
        updates["prom"].append(_cpu(prom_update, HOOK_LOOPS))
        scrapes["otel"].append(_cpu(lambda: generate_latest(otel_registry), 20) / 1000)
        scrapes["prom"].append(_cpu(lambda: generate_latest(prom_registry), 20) / 1000)
    return [
        [
            "OpenTelemetry SDK + Prometheus reader",
            f"{statistics.median(updates['otel']):.1f}",
            f"{statistics.median(scrapes['otel']):.2f}",
        ],
        [
            "prometheus_client alone",
            f"{statistics.median(updates['prom']):.1f}",
            f"{statistics.median(scrapes['prom']):.2f}",
        ],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke check")
    parser.add_argument("--runs", type=int, help="runs of each measurement")
    parser.add_argument("--series", type=int, default=200, help="label sets per metric")
    args = parser.parse_args()
    runs = args.runs or (QUICK_RUNS if args.quick else FULL_RUNS)
    loops = 2_000 if args.quick else HOOK_LOOPS
    polls = 100 if args.quick else WAIT_POLLS
    print_machine(machine(pg_dsn=None))
    hooks = _poll_hooks()
    before = [_cpu(hooks, loops) for _ in range(runs)]
    waits_before = [_wait_cycle_us(polls) for _ in range(runs)]
    _install_sdk()
    hooks = _poll_hooks()
    after = [_cpu(hooks, loops) for _ in range(runs)]
    waits_after = [_wait_cycle_us(polls) for _ in range(runs)]
    record_request("status", "GET", 200, 0.01, {})  # the SDK's instruments are live

    def row(what: str, values: list[float]) -> list[str]:
        shown = " / ".join(f"{v:,.1f}" for v in values)
        return [what, f"{statistics.median(values):,.1f}", shown]

    print_table(
        "CPU µs per poll (medians)",
        ["what", "µs", "runs"],
        [
            row("the hooks of one poll, no SDK", before),
            row("the hooks of one poll, SDK + in-memory exporters", after),
            row("a wait's cycle (MockTransport, memory store), no SDK", waits_before),
            row("a wait's cycle (MockTransport, memory store), SDK", waits_after),
        ],
    )
    print_table(
        f"Serving Prometheus ({args.series} label sets per metric; CPU, medians)",
        ["route", "µs per request's updates", "ms per scrape"],
        _prometheus(runs, args.series),
    )


if __name__ == "__main__":
    main()
