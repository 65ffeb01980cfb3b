"""Save, then tell: the one step by which persisted audit events reach the
``waitbound.events`` log, the traces and the metrics (``waitbound._observe._telemetry``) and the
caller's event sink. Every front (wait, the worker, fan-in, serve, MCP, cancel and
resume) saves through it, so none can persist an event nobody hears of."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from waitbound._model._audit import AuditEvent
from waitbound._model._record import Record
from waitbound._observe._telemetry import persisted
from waitbound.stores import Store

__all__ = ["create_and_tell", "emit", "save_and_tell"]

EventSink = Callable[[AuditEvent], None]


def emit(on_event: EventSink | None, events: Sequence[AuditEvent], record: Record) -> None:
    """Tell about *events* just persisted with *record* (as stored): to the
    ``waitbound.events`` log, the traces and the metrics, then to the caller's sink, if
    any. Called by :func:`save_and_tell`, and at once after a batched write (the
    worker's group commit)."""
    persisted(record, events)
    if on_event is not None:
        for event in events:
            on_event(event)


def save_and_tell(
    store: Store,
    record: Record,
    events: Sequence[AuditEvent],
    on_event: EventSink | None = None,
) -> Record:
    """Persist *record* with *events* (a compare-and-swap on its version), then
    :func:`emit` them with the record as stored. Returns the stored record.

    Raises:
        ConflictError: the record changed meanwhile; nothing was saved, nothing is told.
    """
    saved = store.save(record, events)
    emit(on_event, events, saved)
    return saved


def create_and_tell(
    store: Store,
    record: Record,
    events: Sequence[AuditEvent],
    on_event: EventSink | None = None,
) -> Record:
    """Create *record* with *events*, then :func:`emit` them. Returns the stored record.

    Raises:
        UsageError: an operation with its id exists; nothing is told.
    """
    created = store.create(record, events)
    emit(on_event, events, created)
    return created
