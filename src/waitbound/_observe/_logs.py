"""Structured logs: one JSON object a line, with the trace and span ids (``--log-format
json`` of ``worker``, ``serve`` and ``mcp``; see ``docs/operations.md``).

The standard library's ``logging`` with a formatter of its own: waitbound logs through
named loggers (``waitbound.worker``, ``waitbound.serve``, ``waitbound.inbox``, …), and
``waitbound.events`` carries each persisted audit event (its summary, kind and
allowlisted fields) at ``INFO``, so a JSON log holds the operations' story too. The
human format (the default) is left exactly as it was: nothing here runs.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final, Literal, TextIO

from opentelemetry import trace

__all__ = ["EVENTS", "LOG_FORMATS", "JsonFormatter", "LogFormat", "configure_logs"]

LogFormat = Literal["text", "json"]
LOG_FORMATS: Final = ("text", "json")
EVENTS: Final = logging.getLogger("waitbound.events")
"""The logger of persisted audit events (``INFO``; silent unless a handler wants them)."""

FIELDS: Final = (
    "operation_id",
    "event",
    "profile",
    "phase",
    "state",
    "outcome",
    "reason",
    "requests_used",
    "max_requests",
    "delay_source",
    "next_poll_at",
    "request",
    "http_status",
)
"""The extra fields a log record may carry into its JSON object (never a URL or a body)."""


class JsonFormatter(logging.Formatter):
    """Format a log record as one JSON object on one line.

    Keys: ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message``, ``trace_id`` and
    ``span_id`` (W3C hex; the record's own, else the current span's; absent outside a
    trace), the :data:`FIELDS` the record carries, and ``exception`` (the type and
    message of an exception logged with it, without the traceback).
    """

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        trace_id = getattr(record, "trace_id", None)
        span_id = getattr(record, "span_id", None)
        if trace_id is None:
            context = trace.get_current_span().get_span_context()
            if context.is_valid:
                trace_id = format(context.trace_id, "032x")
                span_id = format(context.span_id, "016x")
        if trace_id is not None:
            doc["trace_id"] = trace_id
            doc["span_id"] = span_id
        for key in FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                doc[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            failure = record.exc_info[1]
            doc["exception"] = f"{type(failure).__name__}: {failure}"
        return json.dumps(doc, ensure_ascii=False, default=str)


def configure_logs(log_format: LogFormat, *, stream: TextIO | None = None) -> None:
    """Set the process's logging up for *log_format*: ``json`` sends every logger's
    ``INFO`` and above to *stream* (stderr) as :class:`JsonFormatter` lines, replacing
    the root logger's handlers; ``text`` changes nothing."""
    if log_format != "json":
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "httpcore"):  # one line per request: the events say it better
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log_event(
    operation_id: str,
    kind: str,
    summary: str,
    data: Mapping[str, object],
    *,
    profile: str,
    span: trace.Span | None,
) -> None:
    """Log one persisted audit event on :data:`EVENTS` (when anything listens at INFO)."""
    extra: dict[str, object] = {"operation_id": operation_id, "event": kind, "profile": profile}
    for key in FIELDS:
        value = data.get(key)
        url_like = isinstance(value, str) and "://" in value
        if isinstance(value, str | int | float | bool) and key not in extra and not url_like:
            extra[key] = value
    if span is not None:
        context = span.get_span_context()
        if context.is_valid:
            extra["trace_id"] = format(context.trace_id, "032x")
            extra["span_id"] = format(context.span_id, "016x")
    EVENTS.info("%s", summary, extra=extra)
