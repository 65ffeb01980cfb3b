"""The OpenTelemetry SDK with in-memory exporters, installed for the tests that ask
(the ``otel`` fixture) and removed after each: the API's globals are reset the way
``opentelemetry-test-utils`` resets them, so every other test of the process runs with
the API's no-op, as a user without an SDK does (no span, no ``trace_context``).

The same two providers are installed each time (waitbound's instruments, made once at
import, stay bound to that meter provider). Metrics are read with delta temporality:
each :meth:`Telemetry.metrics` call returns what was recorded since the last one
(gauges: their current values).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_api
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


class _Gate(SpanProcessor):
    """Hands ended spans to *exporter* while ``open`` (a span begun in a test and ended
    after it is not kept)."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter
        self.open = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.open:
            self.exporter.export([span])

    def on_start(self, span: Span, parent_context: object = None) -> None:
        pass


@dataclass
class Telemetry:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Metric name → [(attributes, point)] recorded since the last call."""
        found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                if scope.scope.name != "waitbound":
                    continue
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        attributes = dict(point.attributes or {})
                        found.setdefault(metric.name, []).append((attributes, point))
        return found


_DELTA: dict[type, AggregationTemporality] = {
    Counter: AggregationTemporality.DELTA,
    UpDownCounter: AggregationTemporality.CUMULATIVE,
    Histogram: AggregationTemporality.DELTA,
    ObservableCounter: AggregationTemporality.DELTA,
    ObservableUpDownCounter: AggregationTemporality.CUMULATIVE,
    ObservableGauge: AggregationTemporality.CUMULATIVE,
}
_STATE: dict[str, Any] = {}


def _installed() -> tuple[_Gate, Telemetry]:
    if not _STATE:
        exporter = InMemorySpanExporter()
        gate = _Gate(exporter)
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(gate)
        reader = InMemoryMetricReader(preferred_temporality=_DELTA)
        meter_provider = MeterProvider(metric_readers=[reader])
        _STATE.update(
            gate=gate,
            telemetry=Telemetry(exporter, reader),
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        )
    _reset_globals()
    trace.set_tracer_provider(_STATE["tracer_provider"])
    metrics.set_meter_provider(_STATE["meter_provider"])
    return _STATE["gate"], _STATE["telemetry"]


def _reset_globals() -> None:
    """No global providers: the API's proxies again (``opentelemetry-test-utils``'
    ``reset_trace_globals`` / ``reset_metrics_globals`` do the same)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_api._METER_PROVIDER_SET_ONCE = Once()
    metrics_api._METER_PROVIDER = None


@contextmanager
def without_sdk() -> Iterator[None]:
    """Inside: no SDK installed (as in a process without one); after: installed again."""
    _reset_globals()
    try:
        yield
    finally:
        _installed()


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    """The SDK's in-memory span exporter and metric reader, emptied for this test; the
    origins and profiles this process labels start empty (earlier tests of the same
    process may have reached their per-process limits)."""
    from waitbound._observe import _metrics

    monkeypatch.setattr(_metrics, "_LABELLED", set())
    monkeypatch.setattr(_metrics, "_PROFILES", set())
    gate, telemetry = _installed()
    telemetry.exporter.clear()
    telemetry.metrics()  # what earlier tests recorded
    gate.open = True
    try:
        yield telemetry
    finally:
        gate.open = False
        telemetry.exporter.clear()
        _reset_globals()
