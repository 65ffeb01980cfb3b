"""waitbound's OpenTelemetry metrics: the instruments, and the gauges read from a store.

Every instrument is made once, at import, from the API's global meter: a no-op until
the application (or ``waitbound serve --metrics``, or the CLI with
``OTEL_EXPORTER_OTLP_ENDPOINT`` set) installs an SDK ``MeterProvider``. The names follow
the OpenTelemetry semantic conventions where one exists (``http.client.request.duration``);
the others are waitbound's own, under ``waitbound.``. Attribute values are bounded
sets (profile names, phases, outcomes, reasons, request kinds, status classes, receiver
names, verdicts): never a URL, an id or a secret. A provider's host and port are a label
only for the origins this process was configured with or named itself
(:func:`label_origins`); any other origin — one a record in a shared store or a
provider's answer chose — is ``server.address="other"``. Likewise a profile's name is
a label only for the built-in profiles and those this process was configured with or
started operations with itself (:func:`label_profiles`), else ``waitbound.profile=
"other"``; an HTTP method outside the standard ones is ``_OTHER`` and a status code
outside the registered ones is left out (``error.type="_OTHER"``). Whoever writes a
record to a shared store, or answers a request, cannot add series. See
``docs/operations.md``.

The gauges (operations in flight, open decision requests and their age, the outbox
backlog) are read from a store when metrics are collected (:func:`observe_store`).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Final, Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.metrics import _internal as metrics_internal

from waitbound._base._clock import Clock, SystemClock
from waitbound._base._urls import origin
from waitbound._base._version import VERSION
from waitbound._model._push import OutboxEntry, OutboxStatus
from waitbound._model._record import Record

__all__ = [
    "GAUGE_LIMIT",
    "MAX_LABELLED_ORIGINS",
    "MAX_LABELLED_PROFILES",
    "StoreGauges",
    "StoreReads",
    "metering",
    "observe_store",
    "record_outbox_attempt",
    "record_outcome",
    "record_request",
    "record_detection_lag",
    "record_webhook_delivery",
    "label_origins",
    "label_profiles",
    "method_label",
    "profile_label",
    "server_labels",
    "status_code_label",
    "status_class",
    "store_transaction",
]

METER: Final = metrics.get_meter("waitbound", VERSION)

GAUGE_LIMIT: Final = 10_000
"""The most open operations (and pending outbox entries) one collection reads from the
store; a larger fleet's gauges count this many (``docs/operations.md``)."""

_FRACTIONS: Final = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_SECONDS: Final = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 21600, 86400)
_HTTP_SECONDS: Final = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
_STORE_SECONDS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)

OUTCOMES: Final = METER.create_counter(
    "waitbound.outcomes",
    unit="{operation}",
    description="Operations that reached an outcome, by outcome and reason.",
)
REQUESTS: Final = METER.create_counter(
    "waitbound.requests",
    unit="{request}",
    description="Requests sent to providers, by kind and HTTP status class.",
)
HTTP_DURATION: Final = METER.create_histogram(
    "http.client.request.duration",
    unit="s",
    description="Duration of HTTP client requests to providers.",
    explicit_bucket_boundaries_advisory=_HTTP_SECONDS,
)
DETECTION_LAG: Final = METER.create_histogram(
    "waitbound.detection.lag",
    unit="s",
    description="At most this long passed between a job's end and waitbound seeing it: "
    "the time from the last answer that showed it unfinished to the first that showed it "
    "finished.",
    explicit_bucket_boundaries_advisory=_SECONDS,
)
TIME_TO_OUTCOME: Final = METER.create_histogram(
    "waitbound.operation.duration",
    unit="s",
    description="Time from an operation's creation to its outcome.",
    explicit_bucket_boundaries_advisory=_SECONDS,
)
BUDGET_USED: Final = METER.create_histogram(
    "waitbound.budget.used",
    unit="1",
    description="Fraction of the request budget an operation had used at its outcome.",
    explicit_bucket_boundaries_advisory=_FRACTIONS,
)
OUTBOX_ATTEMPTS: Final = METER.create_counter(
    "waitbound.outbox.attempts",
    unit="{attempt}",
    description="Completion delivery attempts, by channel and result.",
)
WEBHOOK_DELIVERIES: Final = METER.create_counter(
    "waitbound.webhook.deliveries",
    unit="{delivery}",
    description="Webhook deliveries received by waitbound serve, by receiver and verdict.",
)
STORE_TRANSACTION: Final = METER.create_histogram(
    "waitbound.store.transaction.duration",
    unit="s",
    description="Duration of one store transaction (from its start to its commit or rollback).",
    explicit_bucket_boundaries_advisory=_STORE_SECONDS,
)


_FROM_ENVIRONMENT: Final = "OTEL_PYTHON_METER_PROVIDER" in os.environ
"""A meter provider named by the environment is loaded by the API when first asked."""


def metering() -> bool:
    """Whether an SDK meter provider is installed (the API's own is a no-op).

    On every poll, so cheap: while the API holds no provider (its ``_METER_PROVIDER``),
    nothing is recorded at all."""
    held = getattr(metrics_internal, "_METER_PROVIDER", True)
    if held is None and not _FROM_ENVIRONMENT:
        return False
    return not type(metrics.get_meter_provider()).__module__.startswith("opentelemetry.metrics")


def status_class(http_status: int | None) -> str:
    """``"2xx"`` … ``"5xx"`` for an HTTP status code; ``"error"`` without one (a
    transport failure: no answer)."""
    if http_status is None:
        return "error"
    return f"{http_status // 100}xx"


MAX_LABELLED_ORIGINS: Final = 64
"""The most origins one process labels its request metrics with; later ones are
``other`` (a long-lived process that names ever more origins stays bounded too)."""
_LABELLED: set[tuple[str, str, int]] = set()
_LABELLED_LOCK = threading.Lock()
OTHER_ORIGIN: Final = "other"


def label_origins(origins: Iterable[tuple[str, str | None, int | None]]) -> None:
    """Let *origins* (scheme, host, port) be ``server.address``/``server.port`` labels:
    the places credentials are bound to, and the URLs a caller of this process named
    itself. At most :data:`MAX_LABELLED_ORIGINS` per process."""
    with _LABELLED_LOCK:
        for scheme, host, port in origins:
            if host is None or port is None or len(_LABELLED) >= MAX_LABELLED_ORIGINS:
                continue
            _LABELLED.add((scheme, host, port))


def server_labels(url: str) -> dict[str, str | int]:
    """The ``server.address``, ``server.port`` and ``url.scheme`` labels of a request
    to *url*: its own for a labelled origin (:func:`label_origins`), else
    ``server.address="other"`` and no port — a bounded set, whatever URLs records and
    providers name."""
    try:
        scheme, host, port = origin(url)
    except ValueError:
        return {"server.address": OTHER_ORIGIN}
    if host is not None and port is not None and (scheme, host, port) in _LABELLED:
        return {"server.address": host, "server.port": port, "url.scheme": scheme}
    labels: dict[str, str | int] = {"server.address": OTHER_ORIGIN}
    if scheme in ("http", "https"):
        labels["url.scheme"] = scheme
    return labels


MAX_LABELLED_PROFILES: Final = 64
"""The most profile names (besides the built-in ones) one process labels its metrics
with; later ones are ``other``."""
_PROFILES: set[str] = set()
_PROFILES_LOCK = threading.Lock()
OTHER_PROFILE: Final = "other"
_METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"}
)
_STATUS_CODES: Final = frozenset(int(code) for code in HTTPStatus)
OTHER_VALUE: Final = "_OTHER"
"""The OpenTelemetry semantic conventions' value for a method (or error) outside the
known set."""


@functools.cache
def _builtin_profiles() -> frozenset[str]:
    from waitbound.profiles import builtin_names

    return frozenset(builtin_names())


def label_profiles(names: Iterable[str]) -> None:
    """Let *names* be ``waitbound.profile`` labels: the profiles this process was
    configured with (the MCP server's providers) or started operations with itself.
    The built-in profiles always are. At most :data:`MAX_LABELLED_PROFILES` per process."""
    builtin = _builtin_profiles()
    with _PROFILES_LOCK:
        for name in names:
            if name in builtin or name in _PROFILES or len(_PROFILES) >= MAX_LABELLED_PROFILES:
                continue
            _PROFILES.add(name)


def profile_label(name: str) -> str:
    """The ``waitbound.profile`` label of a record's profile *name*: itself for a
    built-in profile or one :func:`label_profiles` let in, else ``other`` — a bounded
    set, whatever names the records in a shared store carry."""
    if name in _PROFILES or name in _builtin_profiles():
        return name
    return OTHER_PROFILE


def method_label(method: str) -> str:
    """The ``http.request.method`` label: a standard method, else ``_OTHER`` (a record
    names the submit and cancel methods)."""
    return method if method in _METHODS else OTHER_VALUE


def status_code_label(http_status: int) -> int | None:
    """The ``http.response.status_code`` label: a registered status code, else ``None``
    (left out: a provider may answer any three digits)."""
    return http_status if http_status in _STATUS_CODES else None


def record_request(
    kind: str, method: str, http_status: int | None, elapsed_s: float, server: dict[str, object]
) -> None:
    """Count one answered request and its duration (seconds); *server* holds the
    semantic-convention attributes ``server.address``, ``server.port``, ``url.scheme``
    as :func:`server_labels` bounds them (and ``error.type`` when it failed)."""
    if not metering():
        return
    REQUESTS.add(
        1, {"waitbound.request_kind": kind, "waitbound.status_class": status_class(http_status)}
    )
    attributes: dict[str, str | int] = {
        "http.request.method": method_label(method),
        "waitbound.request_kind": kind,
    }
    attributes.update({k: v for k, v in server.items() if isinstance(v, str | int)})
    code = status_code_label(http_status) if http_status is not None else None
    if code is not None:
        attributes["http.response.status_code"] = code
    elif http_status is not None and "error.type" in attributes:
        attributes["error.type"] = OTHER_VALUE
    HTTP_DURATION.record(max(0.0, elapsed_s), attributes)


def record_outcome(record: Record) -> None:
    """Count *record*'s outcome (just recorded), its time to outcome and its budget use."""
    if not metering() or record.outcome is None:
        return
    outcome = record.outcome.value
    OUTCOMES.add(1, {"waitbound.outcome": outcome, "waitbound.reason": _reason(record)})
    shared = {"waitbound.profile": profile_label(record.profile.name), "waitbound.outcome": outcome}
    if record.finished_at is not None:
        took_s = (record.finished_at - record.created_at).total_seconds()
        TIME_TO_OUTCOME.record(max(0.0, took_s), shared)
    if record.max_requests > 0:
        BUDGET_USED.record(min(1.0, record.requests_used / record.max_requests), shared)


def record_detection_lag(profile: str, lag_s: float) -> None:
    """Record the bound on one job's detection lag (seconds), by *profile*'s label
    (:func:`profile_label`)."""
    if metering():
        DETECTION_LAG.record(max(0.0, lag_s), {"waitbound.profile": profile_label(profile)})


def record_outbox_attempt(channel: str, result: str) -> None:
    """Count one completion delivery attempt (*result*: ``delivered``, ``retry`` or
    ``failed``)."""
    if metering():
        OUTBOX_ATTEMPTS.add(1, {"waitbound.channel": channel, "waitbound.result": result})


def record_webhook_delivery(receiver: str, verdict: str) -> None:
    """Count one webhook delivery *receiver* (a configured receiver's name, or
    ``(unknown)``) answered with *verdict*."""
    if metering():
        WEBHOOK_DELIVERIES.add(1, {"waitbound.receiver": receiver, "waitbound.verdict": verdict})


class _Timed:
    """Times one store transaction into :data:`STORE_TRANSACTION`."""

    __slots__ = ("attributes", "started")

    def __init__(self, system: str) -> None:
        self.attributes: dict[str, str] = {"db.system.name": system}
        self.started = 0.0

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is not None:
            self.attributes["error.type"] = kind.__name__
        STORE_TRANSACTION.record(time.perf_counter() - self.started, self.attributes)


_UNTIMED: Final = nullcontext()


def store_transaction(system: str) -> AbstractContextManager[None]:
    """Time one store transaction of *system* (``sqlite``, ``postgresql``), committed
    or not (``error.type`` names what ended one that raised); nothing without an SDK."""
    return _Timed(system) if metering() else _UNTIMED


def _reason(record: Record) -> str:
    return record.reason.value if record.reason is not None else "none"


# --- the gauges read from a store ------------------------------------------------------


class StoreReads(Protocol):
    """What the gauges read from a store (a :class:`waitbound.Store` has both)."""

    def recent(
        self, *, label_prefix: str = "", limit: int = 50, open_only: bool = False
    ) -> list[Record]: ...

    def outbox(
        self,
        *,
        operation_id: str | None = None,
        status: OutboxStatus | None = None,
        limit: int = 100,
    ) -> Sequence[OutboxEntry]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class _Snapshot:
    phases: dict[tuple[str, str], int]
    open_decisions: int
    oldest_decision_s: float
    backlog: dict[str, int]


class StoreGauges:
    """The gauges of one store, read at most once per collection (a collection reads
    every gauge within a moment: the snapshot is kept for one second)."""

    def __init__(self, store: StoreReads, clock: Clock) -> None:
        self.store, self.clock = store, clock
        self._lock = threading.Lock()
        self._snapshot: _Snapshot | None = None
        self._taken_s = float("-inf")

    def snapshot(self) -> _Snapshot:
        """The store's numbers now (or a second ago)."""
        with self._lock:
            if self._snapshot is None or self.clock.monotonic() - self._taken_s >= 1.0:
                self._snapshot = self._read()
                self._taken_s = self.clock.monotonic()
            return self._snapshot

    def _read(self) -> _Snapshot:
        now = self.clock.now()
        records = self.store.recent(limit=GAUGE_LIMIT, open_only=True)
        phases = Tally((profile_label(r.profile.name), r.phase.value) for r in records)
        opened = [r.decision_request.opened_at for r in records if r.decision_request]
        # An escalated or timed-out operation has an outcome and may hold an open request.
        finished = self.store.recent(limit=GAUGE_LIMIT)
        opened += [
            r.decision_request.opened_at
            for r in finished
            if r.is_finished and r.decision_request is not None
        ]
        entries = self.store.outbox(status=OutboxStatus.PENDING, limit=GAUGE_LIMIT)
        backlog = Tally(entry.channel.value for entry in entries)
        return _Snapshot(
            phases=dict(phases),
            open_decisions=len(opened),
            oldest_decision_s=max((_age(now, at) for at in opened), default=0.0),
            backlog=dict(backlog),
        )


def _age(now: datetime, at: datetime) -> float:
    return max(0.0, (now - at).total_seconds())


_GAUGES: list[StoreGauges] = []
_GAUGES_LOCK = threading.Lock()


def _each(
    read: Callable[[_Snapshot], Iterable[Observation]],
) -> Callable[..., Iterable[Observation]]:
    def callback(options: CallbackOptions) -> Iterable[Observation]:
        with _GAUGES_LOCK:
            gauges = list(_GAUGES)
        observed: list[Observation] = []
        for gauge in gauges:
            observed.extend(read(gauge.snapshot()))
        return observed

    return callback


METER.create_observable_up_down_counter(
    "waitbound.operations.in_flight",
    callbacks=[
        _each(
            lambda s: [
                Observation(n, {"waitbound.profile": p, "waitbound.phase": ph})
                for (p, ph), n in sorted(s.phases.items())
            ]
        )
    ],
    unit="{operation}",
    description="Operations without an outcome, by profile (provider) and phase.",
)
METER.create_observable_up_down_counter(
    "waitbound.decisions.open",
    callbacks=[_each(lambda s: [Observation(s.open_decisions)])],
    unit="{request}",
    description="Open decision requests (waiting for a person).",
)
METER.create_observable_gauge(
    "waitbound.decisions.oldest_age",
    callbacks=[_each(lambda s: [Observation(s.oldest_decision_s)])],
    unit="s",
    description="Age of the oldest open decision request (0: none open).",
)
METER.create_observable_up_down_counter(
    "waitbound.outbox.backlog",
    callbacks=[
        _each(
            lambda s: [
                Observation(n, {"waitbound.channel": c}) for c, n in sorted(s.backlog.items())
            ]
        )
    ],
    unit="{delivery}",
    description="Completion deliveries pending in the outbox, by channel.",
)


@contextmanager
def observe_store(store: StoreReads, clock: Clock | None = None) -> Iterator[StoreGauges]:
    """Report *store*'s gauges at every metrics collection while inside the block:
    ``waitbound.operations.in_flight`` (by profile and phase),
    ``waitbound.decisions.open``, ``waitbound.decisions.oldest_age`` (seconds) and
    ``waitbound.outbox.backlog`` (by channel); see ``docs/operations.md``. A no-op
    without an OpenTelemetry SDK meter provider.

    Args:
        store: a :class:`waitbound.Store` (read from the collecting thread: the stores
            are thread-safe).
        clock: gives "now" for the decision requests' age, and paces the snapshot
            (``None``: the system clock).

    Each collection reads at most :data:`GAUGE_LIMIT` open operations and pending
    outbox entries (one snapshot per second, however many gauges read it).
    """
    gauges = StoreGauges(store, clock or SystemClock())
    with _GAUGES_LOCK:
        _GAUGES.append(gauges)
    try:
        yield gauges
    finally:
        with _GAUGES_LOCK:
            _GAUGES.remove(gauges)
