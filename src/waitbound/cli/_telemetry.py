"""The CLI's OpenTelemetry SDK and log format: what an operator turns on from outside.

- With ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or its ``_TRACES_`` / ``_METRICS_`` variants)
  set, every command exports its traces and metrics over OTLP/HTTP (the standard
  ``OTEL_*`` variables configure the exporters; ``OTEL_SDK_DISABLED=true`` turns it
  off); spans and metrics are flushed when the command ends.
- ``serve --metrics`` adds the OpenTelemetry Prometheus reader (``/metrics``).
- ``--log-format json`` (``worker``, ``serve``, ``mcp``): see ``waitbound._observe._logs``.

All of it needs the ``otel`` extra (``pip install 'waitbound[otel]'``); without it, a
set endpoint or ``--metrics`` is one line saying so. See ``docs/operations.md``.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable
from typing import Any, Final, TypeVar

import click

from waitbound._base._errors import UsageError
from waitbound._observe._logs import LOG_FORMATS, LogFormat, configure_logs

__all__ = [
    "LOG_FORMAT_OPTION",
    "OTEL_EXTRA",
    "configure_sdk",
    "log_format_option",
    "otlp_wanted",
]

OTEL_EXTRA: Final = "install it with: pip install 'waitbound[otel]'"
_ENDPOINTS: Final = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)
_F = TypeVar("_F", bound=Callable[..., Any])
_CONFIGURED: dict[str, object] = {}


def otlp_wanted() -> bool:
    """Whether the environment asks for OTLP export (and the SDK is not disabled)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(os.environ.get(name) for name in _ENDPOINTS)


def configure_sdk(*, prometheus: bool = False) -> object | None:
    """Install the SDK's tracer and meter providers for this process: OTLP/HTTP
    exporters when :func:`otlp_wanted`, the Prometheus reader with *prometheus*.
    Idempotent (the providers are installed once); returns the Prometheus reader
    (``None`` without one).

    Raises:
        UsageError: the ``otel`` extra is not installed.
    """
    if "done" in _CONFIGURED:
        return _CONFIGURED.get("prometheus")
    otlp = otlp_wanted()
    if not otlp and not prometheus:
        return None
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        what = "--metrics" if prometheus else "OTEL_EXPORTER_OTLP_ENDPOINT"
        raise UsageError(f"{what} needs the OpenTelemetry SDK; {OTEL_EXTRA}") from None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "waitbound")})
    readers: list[MetricReader] = []
    reader: object | None = None
    tracer_provider = TracerProvider(resource=resource)
    if otlp:
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise UsageError(f"OTLP export needs the OTLP exporter; {OTEL_EXTRA}") from None
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    if prometheus:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
        except ImportError:
            raise UsageError(f"--metrics needs the Prometheus exporter; {OTEL_EXTRA}") from None
        reader = PrometheusMetricReader()
        readers.append(reader)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    _CONFIGURED.update(done=True, prometheus=reader)

    def flush() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    atexit.register(flush)
    return reader


LOG_FORMAT_OPTION: Final = click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    default="text",
    show_default=True,
    help="Log lines on stderr: text (as before) or json (one JSON object a line, with "
    "trace_id and span_id, and each persisted audit event; see docs/operations.md).",
)


def log_format_option(command: _F) -> _F:
    """Add ``--log-format`` to *command* (its function takes ``log_format``)."""
    decorated: _F = LOG_FORMAT_OPTION(command)
    return decorated


def apply_log_format(log_format: str) -> None:
    """Configure logging for ``--log-format`` (``text``: unchanged)."""
    chosen: LogFormat = "json" if log_format == "json" else "text"
    configure_logs(chosen)
