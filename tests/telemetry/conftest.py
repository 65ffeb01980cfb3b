"""The OpenTelemetry SDK, installed once per test process with in-memory exporters.

A span processor forwards finished spans to the exporter only while a test captures
(the ``otel`` fixture), so the other tests of the process record nothing. Metrics are
read with delta temporality: each :meth:`Telemetry.metrics` call returns what was
recorded since the last one (gauges: their current values).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
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


class _Gate(SpanProcessor):
    """Hands ended spans to *exporter* while ``open``."""

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
        provider = TracerProvider()
        provider.add_span_processor(gate)
        trace.set_tracer_provider(provider)
        reader = InMemoryMetricReader(preferred_temporality=_DELTA)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _STATE.update(gate=gate, telemetry=Telemetry(exporter, reader))
    return _STATE["gate"], _STATE["telemetry"]


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    """The SDK's in-memory span exporter and metric reader, emptied for this test."""
    gate, telemetry = _installed()
    telemetry.exporter.clear()
    telemetry.metrics()  # what earlier tests recorded
    gate.open = True
    try:
        yield telemetry
    finally:
        gate.open = False
        telemetry.exporter.clear()
