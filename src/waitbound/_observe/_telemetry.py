"""waitbound's OpenTelemetry traces, and the hooks the drivers call (``docs/operations.md``).

Only ``opentelemetry-api`` is used: every span is a no-op until the application
installs an SDK ``TracerProvider`` (``pip install 'waitbound[otel]'``), and then each
hook costs what its span costs. The hooks:

- :func:`traced_loop` / :func:`run`: one span ``waitbound.operation`` per run of the
  loop on one operation (a ``wait``, a resume, one worker step). A run started inside
  a span of the caller's is its child; a run without one (a resume in another process,
  a worker) is a child of the trace context recorded when the operation was created
  (:func:`with_caller_context`), so an agent's trace holds every wait of its job,
  whichever process did it; a run inside another trace links to the recorded one.
- :func:`sending`: one ``CLIENT`` span per provider request (status, submit, result,
  errors, cancel) with the semantic-convention HTTP attributes; it ends when the answer
  is persisted, with the state, delay source and requests used it led to. Where the
  profile says ``trace_context: true``, the W3C ``traceparent`` (and ``tracestate``)
  of that span goes to the provider, to trusted origins only.
- :func:`persisted`: the persisted audit events become span events (decisions asked
  for, hints, outcomes, ...); outcomes and detection lag are counted (``_metrics``).
- :func:`noted`: a short span for what happens to an operation outside a run (a
  webhook delivery applied, a person's decision), in the operation's recorded trace.

No attribute ever holds a secret, a header value or a URL's query or user info: URLs
are reduced to scheme, host, port and path (``url.full``), and audit data is copied
by an allowlist of keys.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, Protocol, TypeVar

import httpx
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from waitbound._base._urls import redact_url
from waitbound._base._version import VERSION
from waitbound._model._audit import AuditEvent, EventKind, StoredAuditEvent
from waitbound._model._observation import Observation
from waitbound._model._outcome import OutcomeKind
from waitbound._model._record import Phase, Record
from waitbound._observe._logs import EVENTS, log_event
from waitbound._observe._metrics import (
    OTHER_VALUE,
    metering,
    method_label,
    profile_label,
    record_detection_lag,
    record_outcome,
    record_request,
    server_labels,
)
from waitbound._profile._contract import Profile

__all__ = [
    "TRACE_CONTEXT_KEY",
    "Run",
    "Sending",
    "noted",
    "persisted",
    "run",
    "sending",
    "server_attributes",
    "traced_loop",
    "tracing",
    "url_full",
    "with_caller_context",
]

TRACER: Final = trace.get_tracer("waitbound", VERSION)
TRACE_CONTEXT_KEY: Final = "trace_context"
"""The ``created`` audit event's data key holding the caller's W3C ``traceparent``."""
_PROPAGATOR: Final = TraceContextTextMapPropagator()
_RECORDED_CACHE: Final = 4096
_STATE_CHARS: Final = 200
"""The most characters of a provider's state a span attribute holds."""
_PROVIDER_OUTCOMES: Final = frozenset(
    {
        OutcomeKind.SUCCEEDED,
        OutcomeKind.COMPLETED_WITH_ERRORS,
        OutcomeKind.FAILED,
        OutcomeKind.CANCELED,
        OutcomeKind.EXPIRED,
    }
)
_ERROR_OUTCOMES: Final = frozenset(
    {OutcomeKind.FAILED, OutcomeKind.TIMED_OUT, OutcomeKind.ESCALATED}
)
_Y = TypeVar("_Y")
_S = TypeVar("_S")


class _AuditReads(Protocol):
    def audit(self, operation_id: str) -> list[StoredAuditEvent]: ...


_FROM_ENVIRONMENT: Final = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
"""A tracer provider named by the environment is loaded by the API when first asked."""


def tracing() -> bool:
    """Whether an SDK tracer provider is installed (the API's own is a no-op).

    On every poll, so cheap: while the API holds no provider (its ``_TRACER_PROVIDER``,
    which ``opentelemetry-test-utils`` resets too), no span is made at all."""
    if getattr(trace, "_TRACER_PROVIDER", True) is None and not _FROM_ENVIRONMENT:
        return False
    return not type(trace.get_tracer_provider()).__module__.startswith("opentelemetry.trace")


# --- the caller's trace context, recorded with the operation ---------------------------


def with_caller_context(record: Record, event: AuditEvent) -> AuditEvent:
    """*event* (the ``created`` event of the new operation *record*) with a W3C
    ``traceparent`` under :data:`TRACE_CONTEXT_KEY`: the caller's current span's; with
    an SDK but no current span, that of a span ``waitbound.create`` begun and ended now
    (the root of the operation's trace). Unchanged without an SDK and outside a span."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        if not tracing():
            return event
        created = TRACER.start_span(
            "waitbound.create",
            context=Context(),  # a root: the operation's own trace
            attributes=_operation_attributes(record),
        )
        created.end()
        context = created.get_span_context()
        if not context.is_valid:  # pragma: no cover - an SDK span is valid
            return event
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(NonRecordingSpan(context)))
    if "traceparent" not in carrier:  # pragma: no cover - a valid context always injects
        return event
    return replace(event, data={**event.data, TRACE_CONTEXT_KEY: carrier["traceparent"]})


def _derived_context(operation_id: str) -> SpanContext:
    """The trace of an operation created outside any trace and without an SDK: its
    trace id (and the parent span id its runs name, which no span has) derived from
    the operation id, so every run of it, in any process, is in one trace."""
    digest = hashlib.sha256(f"waitbound:{operation_id}".encode()).digest()
    return SpanContext(
        trace_id=int.from_bytes(digest[:16], "big") or 1,
        span_id=int.from_bytes(digest[16:24], "big") or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def _parent_of(store: _AuditReads, record: Record) -> tuple[Context | None, list[Link]]:
    """The parent context and links of a span about *record*'s operation begun now."""
    operation_id = record.operation_id
    current = trace.get_current_span().get_span_context()
    recorded = recorded_context(store, record)
    if current.is_valid:
        if recorded is not None and recorded.trace_id != current.trace_id:
            return None, [Link(recorded, {"waitbound.link": "created_in"})]
        return None, []
    origin = recorded if recorded is not None else _derived_context(operation_id)
    return trace.set_span_in_context(NonRecordingSpan(origin)), []


_RECORDED: OrderedDict[tuple[int, str, datetime], SpanContext | None] = OrderedDict()
_RECORDED_LOCK = threading.Lock()


def recorded_context(store: _AuditReads, record: Record) -> SpanContext | None:
    """The trace context recorded when *record*'s operation was created (``None``:
    none), read from its first audit event once per process (the last 4,096 kept, by
    store, operation id and creation time)."""
    operation_id = record.operation_id
    key = (id(store), operation_id, record.created_at)
    with _RECORDED_LOCK:
        if key in _RECORDED:
            _RECORDED.move_to_end(key)
            return _RECORDED[key]
    found: SpanContext | None = None
    try:
        events = store.audit(operation_id)
    except Exception:  # the trace is a convenience: a store failure is the driver's to report
        events = []
    if events and events[0].event.kind == EventKind.CREATED:
        value = events[0].event.data.get(TRACE_CONTEXT_KEY)
        if isinstance(value, str):
            extracted = trace.get_current_span(_PROPAGATOR.extract({"traceparent": value}))
            context = extracted.get_span_context()
            found = context if context.is_valid else None
    with _RECORDED_LOCK:
        _RECORDED[key] = found
        while len(_RECORDED) > _RECORDED_CACHE:
            _RECORDED.popitem(last=False)
    return found


# --- runs: one span per run of the loop on one operation -------------------------------


@dataclass(slots=True)
class _Open:
    """A request answered but not persisted yet: its span, and the record it was sent on."""

    span: Span | None
    reserved: Record
    kind: str


@dataclass(slots=True)
class Run:
    """One run's span, while it runs."""

    operation_id: str
    span: Span
    last: Record | None = None
    """The record as this run last persisted it (its span is described by it at the end)."""


_RUNS: dict[str, list[Run]] = {}
_ANSWERED: dict[str, _Open] = {}


def _operation_attributes(record: Record) -> dict[str, str | int]:
    attributes: dict[str, str | int] = {
        "waitbound.operation_id": record.operation_id,
        "waitbound.profile": profile_label(record.profile.name),
        "waitbound.phase": record.phase.value,
        "waitbound.requests_used": record.requests_used,
        "waitbound.max_requests": record.max_requests,
    }
    if record.provider_state is not None:
        attributes["waitbound.state"] = _state(record)
    # always set: a span's attribute cannot be removed, and an outcome has no next poll
    attributes["waitbound.delay_source"] = (
        record.delay_source.value if record.delay_source is not None else "none"
    )
    return attributes


def _state(record: Record) -> str:
    """*record*'s provider state as a span attribute: at most :data:`_STATE_CHARS`."""
    return str(record.provider_state)[:_STATE_CHARS]


def _start_run(record: Record, store: _AuditReads, driver: str) -> Run:
    parent, links = _parent_of(store, record)
    attributes = _operation_attributes(record) | {"waitbound.driver": driver}
    span = TRACER.start_span(
        "waitbound.operation", context=parent, links=links, attributes=attributes
    )
    started = Run(operation_id=record.operation_id, span=span)
    _RUNS.setdefault(record.operation_id, []).append(started)
    return started


def _end_run(started: Run, record: Record | None, failure: BaseException | None) -> None:
    opened = _ANSWERED.pop(started.operation_id, None)
    if opened is not None and opened.span is not None:
        opened.span.end()
    span = started.span
    record = record or started.last
    if record is not None:
        _describe(span, record)
    if failure is not None:  # a loop closed unfinished: its caller stopped driving it
        what = "interrupted" if isinstance(failure, GeneratorExit) else type(failure).__name__
        span.set_attribute("error.type", what)
        span.set_status(StatusCode.ERROR, f"the run stopped before an outcome ({what})")
    span.end()
    runs = _RUNS.get(started.operation_id)
    if runs is not None:
        runs.remove(started)
        if not runs:
            _RUNS.pop(started.operation_id, None)


def _describe(span: Span, record: Record) -> None:
    """Set *record*'s state (and outcome: an ``ERROR`` status for ``failed``,
    ``timed_out``, ``escalated``) on its run's *span*."""
    span.set_attributes(_operation_attributes(record))
    if record.outcome is not None:
        span.set_attribute("waitbound.outcome", record.outcome.value)
        if record.reason is not None:
            span.set_attribute("waitbound.reason", record.reason.value)
        if record.outcome in _ERROR_OUTCOMES:
            reason = f" ({record.reason.value})" if record.reason is not None else ""
            span.set_status(StatusCode.ERROR, f"{record.outcome.value}{reason}")


def traced_loop(
    record: Record, store: _AuditReads, steps: Generator[_Y, _S, Record]
) -> Generator[_Y, _S, Record]:
    """*steps* (the driver's loop for *record*'s operation) inside one run span, or
    *steps* itself when no SDK is installed. The span starts when the loop first runs
    (in the caller's context) and ends when it returns, raises or is closed."""
    if not tracing():
        return steps
    return _traced(record, store, steps)


def _traced(
    record: Record, store: _AuditReads, steps: Generator[_Y, _S, Record]
) -> Generator[_Y, _S, Record]:
    started = _start_run(record, store, "wait")
    ended: Record | None = None
    failure: BaseException | None = None
    try:
        ended = yield from steps
        return ended
    except BaseException as exc:
        failure = exc
        raise
    finally:
        _end_run(started, ended, failure)


@contextmanager
def run(record: Record, store: _AuditReads, driver: str = "worker") -> Iterator[None]:
    """One run span (a worker's step on *record*'s operation) around the block."""
    if not tracing():
        yield
        return
    started = _start_run(record, store, driver)
    failure: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        failure = exc
        raise
    finally:
        _end_run(started, None, failure)


# --- one provider request --------------------------------------------------------------


def url_full(url: str) -> str:
    """*url* as ``url.full`` may hold it: scheme, host, port and path; never its user
    info, query or fragment."""
    return redact_url(url).removesuffix("?…")


def server_attributes(url: str) -> dict[str, str | int]:
    """``server.address``, ``server.port`` and ``url.scheme`` of *url* (none it lacks)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        return {}
    attributes: dict[str, str | int] = {}
    if parsed.host:
        attributes["server.address"] = parsed.host
    port = parsed.port or {"https": 443, "http": 80}.get(parsed.scheme)
    if port is not None:
        attributes["server.port"] = port
    if parsed.scheme:
        attributes["url.scheme"] = parsed.scheme
    return attributes


class _Request(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def method(self) -> str: ...


class Sending:
    """One request being sent, a context manager: inside, the request's span (if any)
    is current; :attr:`headers` are the headers to send (``traceparent`` added where the
    profile allows); call :meth:`answered` with the observation."""

    __slots__ = ("_server", "_token", "done", "headers", "record", "request", "span")

    def __init__(
        self,
        record: Record,
        request: _Request,
        headers: Mapping[str, str],
        span: Span | None,
    ) -> None:
        self.record, self.request, self.headers, self.span = record, request, headers, span
        self._server: dict[str, str | int] | None = None
        self._token: object = None
        self.done = False

    def __enter__(self) -> Sending:
        if self.span is not None:
            self._token = context_api.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        span = self.span
        if span is None:
            return
        context_api.detach(self._token)  # type: ignore[arg-type]
        if kind is not None:
            span.set_attribute("error.type", kind.__name__)
            span.set_status(StatusCode.ERROR)
            _ANSWERED.pop(self.record.operation_id, None)
            span.end()
        elif not self.done:  # never answered: no answer to wait for
            span.end()

    def server(self) -> dict[str, str | int]:
        if self._server is None:
            self._server = server_attributes(self.request.url)
        return self._server

    def answered(self, observation: Observation) -> None:
        """Record *observation*: the request's metrics now; its span's HTTP attributes
        (the span ends once the answer is persisted, see :func:`persisted`)."""
        self.done = True
        span = self.span
        if span is None and not metering():
            return
        status = observation.http_status
        error_type: str | None = None
        if status is None:
            error_type = _transport_error_type(observation.transport_error)
        elif status >= 400:
            error_type = str(status)
        if metering():
            server: dict[str, object] = dict(server_labels(self.request.url))
            if error_type is not None:
                server["error.type"] = error_type
            record_request(
                self.request.kind, self.request.method, status, observation.elapsed_s, server
            )
        if span is not None:
            if status is not None:
                span.set_attribute("http.response.status_code", status)
            if observation.redirects:
                span.set_attribute("http.request.resend_count", observation.redirects)
            if observation.request_id:
                span.set_attribute("waitbound.provider_request_id", observation.request_id)
            if error_type is not None:
                span.set_attribute("error.type", error_type)
                span.set_status(StatusCode.ERROR)
        stale = _ANSWERED.get(self.record.operation_id)
        if stale is not None and stale.span is not None:  # its answer was never persisted
            stale.span.end()
        _ANSWERED[self.record.operation_id] = _Open(
            span=span, reserved=self.record, kind=self.request.kind
        )


def _transport_error_type(what: str | None) -> str:
    text = what or ""
    if "timeout" in text:
        return "timeout"
    if "connect" in text:
        return "connect_error"
    if "URL" in text:
        return "invalid_url"
    return "transport_error"


def sending(
    record: Record, request: _Request, headers: Mapping[str, str], profile: Profile
) -> Sending:
    """The span of one provider request (a child of its operation's run), current while
    inside the returned context manager; with the profile's ``trace_context``, its
    ``traceparent`` is added to the headers sent to an origin *record* trusts. Without
    an SDK: no span, the headers as given."""
    if not tracing():
        return Sending(record, request, headers, None)
    runs = _RUNS.get(record.operation_id)
    parent = trace.set_span_in_context(runs[-1].span) if runs else None
    method = method_label(request.method)
    attributes: dict[str, str | int] = {
        "http.request.method": method,
        "url.full": url_full(request.url),
        "waitbound.request_kind": request.kind,
        "waitbound.operation_id": record.operation_id,
        "waitbound.profile": profile_label(record.profile.name),
        "waitbound.phase": record.phase.value,
        "waitbound.requests_used": record.requests_used,
    }
    attributes.update(server_attributes(request.url))
    name = "HTTP" if method == OTHER_VALUE else method  # the semantic conventions' name
    span = TRACER.start_span(name, context=parent, kind=SpanKind.CLIENT, attributes=attributes)
    sent = headers
    if profile.trace_context and record.trusts(request.url):
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        sent = {**headers, **carrier}
    return Sending(record, request, sent, span)


# --- what was persisted ----------------------------------------------------------------

_EVENT_KEYS: Final = {
    "phase": "waitbound.phase",
    "state": "waitbound.state",
    "requests_used": "waitbound.requests_used",
    "max_requests": "waitbound.max_requests",
    "next_poll_at": "waitbound.next_poll_at",
    "delay_source": "waitbound.delay_source",
    "request": "waitbound.request_kind",
    "http_status": "http.response.status_code",
    "outcome": "waitbound.outcome",
    "reason": "waitbound.reason",
    "option": "waitbound.option",
    "timeout_s": "waitbound.timeout_s",
}
"""Audit data copied into span events, by an allowlist (never a URL, a body, a name)."""


def _event_attributes(event: AuditEvent) -> dict[str, str | int | float | bool]:
    attributes: dict[str, str | int | float | bool] = {}
    for key, name in _EVENT_KEYS.items():
        value = event.data.get(key)
        if isinstance(value, bool | int | float):
            attributes[name] = value
        elif isinstance(value, str) and "://" not in value:
            attributes[name] = value[:200]
    hint = event.data.get("hint")
    if isinstance(hint, Mapping):
        origin, delay = hint.get("origin"), hint.get("delay_s")
        if isinstance(origin, str):
            attributes["waitbound.hint.origin"] = origin[:100]
        if isinstance(delay, int | float) and not isinstance(delay, bool):
            attributes["waitbound.hint.delay_s"] = delay
    return attributes


def persisted(record: Record, events: Sequence[AuditEvent]) -> None:
    """Hook: *events* were persisted with *record* (as stored). They become events of
    the run's span (of the answered request's, for its answer), which ends; an outcome
    among them is counted; with a JSON log, each is logged (``waitbound._observe._logs``)."""
    if not events:
        return
    logged = EVENTS.isEnabledFor(logging.INFO)
    if not (logged or tracing() or metering()):
        return  # nothing was registered either
    opened = _ANSWERED.pop(record.operation_id, None)
    if any(event.kind == EventKind.FINISHED for event in events):
        record_outcome(record)
    if opened is not None:
        _detection_lag(opened, record)
    runs = _RUNS.get(record.operation_id)
    target = opened.span if opened is not None else None
    if target is None and runs:
        target = runs[-1].span
    if logged:
        for event in events:
            log_event(
                record.operation_id,
                event.kind,
                event.summary,
                event.data,
                profile=record.profile.name,
                span=target,
            )
    if runs:
        runs[-1].last = record
    if target is None:
        return
    for event in events:
        target.add_event(f"waitbound.{event.kind}", _event_attributes(event))
    if opened is not None and opened.span is not None:
        opened.span.set_attributes(
            {
                "waitbound.requests_used": record.requests_used,
                "waitbound.phase": record.phase.value,
                **(
                    {"waitbound.state": _state(record)} if record.provider_state is not None else {}
                ),
                "waitbound.delay_source": (
                    record.delay_source.value if record.delay_source is not None else "none"
                ),
            }
        )
        opened.span.end()


def _detection_lag(opened: _Open, record: Record) -> None:
    """The bound on the job's detection lag, when this answer is the first that showed
    the job finished: since the answer before it (which showed it unfinished)."""
    before = opened.reserved
    if opened.kind != "status" or before.phase is not Phase.WAITING:
        return
    seen_end = record.phase in (Phase.FETCHING_RESULT, Phase.FETCHING_ERRORS) or (
        record.outcome in _PROVIDER_OUTCOMES
    )
    if not seen_end or before.last_observed_at is None or record.last_observed_at is None:
        return
    lag_s = (record.last_observed_at - before.last_observed_at).total_seconds()
    record_detection_lag(record.profile.name, lag_s)


def noted(
    store: _AuditReads,
    record: Record,
    what: str,
    events: Sequence[AuditEvent],
    **attributes: str | int,
) -> None:
    """Hook: *events* about *record* were persisted outside any run (a webhook delivery
    applied, a person's decision): a short span ``waitbound.{what}`` in the operation's
    recorded trace (or the current one) holds them; an outcome among them is counted;
    with a JSON log, each is logged (as :func:`persisted` does)."""
    if any(event.kind == EventKind.FINISHED for event in events):
        record_outcome(record)
    span = None
    if tracing():
        parent, links = _parent_of(store, record)
        span = TRACER.start_span(
            f"waitbound.{what}",
            context=parent,
            links=links,
            attributes=_operation_attributes(record)
            | {f"waitbound.{k}": v for k, v in attributes.items()},
        )
    if EVENTS.isEnabledFor(logging.INFO):
        for event in events:
            log_event(
                record.operation_id,
                event.kind,
                event.summary,
                event.data,
                profile=record.profile.name,
                span=span,
            )
    if span is None:
        return
    for event in events:
        span.add_event(f"waitbound.{event.kind}", _event_attributes(event))
    span.end()
