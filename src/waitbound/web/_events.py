"""Audit events as Server-Sent Events (the WHATWG HTML "server-sent events" format):
one operation's (``GET /operations/{id}/events``) or many operations' (``GET /events``).

Each event is ``id:`` (where to resume), ``event:`` (the audit kind) and ``data:`` (one
line of JSON: ``operation_id``, ``seq``, ``at``, ``kind``, ``summary``, ``data``). A
client that reconnects sends the last id it saw as ``Last-Event-ID`` and gets only
what came after it. The store is read off the event loop, every ``poll_s`` seconds.

One operation's stream ends with ``event: end`` (``data:`` the outcome as
``waitbound wait --json`` prints it) once its outcome is final and every event before
it was sent. The many-operation stream never ends by itself.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Final

import anyio.to_thread
from sse_starlette import ServerSentEvent

from waitbound._base._errors import UsageError
from waitbound._base._json import JSON
from waitbound._model._audit import StoredAuditEvent
from waitbound._model._record import Record
from waitbound.stores import Store
from waitbound.stores._protocol import AuditCursor, cursor_of

Allowed = Callable[[], Awaitable[bool]]
"""Whether a stream's reader may still read it (asked at every look; ``False`` ends it)."""

__all__ = [
    "Allowed",
    "END_EVENT",
    "LOOK_BACK_S",
    "event_data",
    "many_events",
    "many_id",
    "operation_events",
    "parse_many_id",
    "parse_seq",
    "parse_time",
]

_LOG = logging.getLogger("waitbound.serve")

END_EVENT: Final = "end"
"""The ``event:`` of the last message of one operation's stream."""
LOOK_BACK_S: Final = 2.0
"""How far back (seconds of ``at``) ``GET /events`` looks again at each poll, so an
event stamped before another but committed after it is still sent (once)."""
_PAGE: Final = 500
_MAX_ID_CHARS: Final = 512
_SEQ: Final = re.compile(r"[0-9]{1,18}")
_EARLIEST: Final = datetime.min.replace(tzinfo=UTC)


def parse_seq(value: str | None) -> int:
    """The ``Last-Event-ID`` of one operation's stream: a seq (``0`` when absent).

    Raises:
        UsageError: not a non-negative integer (the endpoint answers 400).
    """
    if value is None or not value.strip():
        return 0
    text = value.strip()
    if not _SEQ.fullmatch(text):
        raise UsageError(
            f"Last-Event-ID {text[:40]!r} is not an event id of this stream "
            "(a non-negative integer: the seq of the last event received)"
        )
    return int(text)


def parse_time(text: str) -> datetime | None:
    """*text* as an aware UTC time when it is an RFC 3339 time with a UTC offset that
    lies, once in UTC, within years 1 to 9999 (what a ``datetime`` holds); else
    ``None`` (never an exception: ``9999-12-31T23:59:59-23:59`` is ``None``)."""
    try:
        at = datetime.fromisoformat(text)
        return at.astimezone(UTC) if at.tzinfo is not None else None
    except (ValueError, OverflowError):
        return None


def _before(at: datetime, window: timedelta) -> datetime:
    """*window* before *at*, or the earliest time a ``datetime`` holds when that is
    before it (a cursor in year 1 never overflows)."""
    return at - window if at - _EARLIEST > window else _EARLIEST


def many_id(stored: StoredAuditEvent) -> str:
    """The id of *stored* on ``GET /events``: ``{at}|{operation_id}|{seq}`` (``at`` in
    RFC 3339, aware UTC)."""
    return f"{stored.event.at.isoformat()}|{stored.operation_id}|{stored.seq}"


def parse_many_id(value: str | None) -> AuditCursor | None:
    """The ``Last-Event-ID`` of ``GET /events`` as a cursor (``None`` when absent).

    Raises:
        UsageError: not an id :func:`many_id` makes (the endpoint answers 400).
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    problem = "it is too long" if len(text) > _MAX_ID_CHARS else None
    at_text, _, rest = text.partition("|")
    operation_id, _, seq_text = rest.rpartition("|")
    at = parse_time(at_text) if problem is None else None
    if problem is None and at is None:
        problem = f"{at_text[:40]!r} is not an RFC 3339 time with a UTC offset within years 1-9999"
    if problem is None and not (operation_id and operation_id.isprintable()):
        problem = "it names no operation"
    if problem is None and not _SEQ.fullmatch(seq_text):
        problem = f"{seq_text[:40]!r} is not a seq"
    if problem is not None or at is None:
        raise UsageError(
            f"Last-Event-ID is not an event id of this stream ({problem}); expected "
            "'{at}|{operation_id}|{seq}' as the stream sent it"
        )
    return (at, operation_id, int(seq_text))


def event_data(stored: StoredAuditEvent) -> str:
    """The ``data:`` line of *stored*: ``operation_id``, ``seq``, ``at``, ``kind``,
    ``summary``, ``data`` as one line of JSON."""
    return _line(stored.event.payload(stored.operation_id, stored.seq))


def _line(value: JSON) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _message(stored: StoredAuditEvent, event_id: str) -> ServerSentEvent:
    return ServerSentEvent(data=event_data(stored), event=stored.event.kind, id=event_id)


def _read_operation(
    store: Store, operation_id: str, after_seq: int
) -> tuple[Record | None, list[StoredAuditEvent]]:
    """The record, then its events after *after_seq* (read only when the record's head
    moved past it: a quiet operation costs one read a poll)."""
    record = store.get(operation_id)
    if record is None or record.audit_seq <= after_seq:
        return record, []
    return record, [e for e in store.audit(operation_id) if e.seq > after_seq]


async def operation_events(
    store: Store,
    operation_id: str,
    *,
    after_seq: int = 0,
    poll_s: float = 0.25,
    stopping: threading.Event | None = None,
    allowed: Allowed | None = None,
) -> AsyncIterator[ServerSentEvent]:
    """Stream one operation's audit events after *after_seq*, in seq order, then ``end``.

    The record is read before its events, so once a final record's head was sent,
    every event up to the outcome was: ``end`` follows them. The stream also ends
    (without ``end``) when the service stops, the operation is gone, the store
    fails, or *allowed* says the reader may no longer read it (a session revoked or
    expired); the client resumes with ``Last-Event-ID``.

    Args:
        store: where the operation lives.
        operation_id: which operation.
        after_seq: the last seq the client has (``Last-Event-ID``; 0: none).
        poll_s: seconds between looks at the store.
        stopping: set when the service shuts down.
        allowed: asked before each look; ``False`` ends the stream (``None``: always).
    """
    sent = after_seq
    while stopping is None or not stopping.is_set():
        if allowed is not None and not await allowed():
            return
        try:
            record, events = await anyio.to_thread.run_sync(
                _read_operation, store, operation_id, sent
            )
        except Exception as exc:  # the stream is open: end it, the client resumes
            _LOG.warning("events of %r: the store failed: %s", operation_id, type(exc).__name__)
            return
        if record is None:
            return
        for stored in events:
            yield _message(stored, str(stored.seq))
            sent = stored.seq
        if record.is_final and sent >= record.audit_seq:
            yield ServerSentEvent(data=_line(record.to_outcome().as_json()), event=END_EVENT)
            return
        await anyio.sleep(poll_s)


def _read_many(
    store: Store, start: AuditCursor | None, label_prefix: str
) -> list[StoredAuditEvent]:
    """Every event after *start*, page by page."""
    found: list[StoredAuditEvent] = []
    while True:
        page = store.audit_after(start, label_prefix=label_prefix, limit=_PAGE)
        found += page
        if len(page) < _PAGE:
            return found
        start = cursor_of(page[-1])


async def many_events(
    store: Store,
    *,
    label_prefix: str = "",
    after: AuditCursor | None = None,
    poll_s: float = 0.25,
    look_back_s: float = LOOK_BACK_S,
    stopping: threading.Event | None = None,
    allowed: Allowed | None = None,
) -> AsyncIterator[ServerSentEvent]:
    """Stream the audit events of every operation whose label starts with
    *label_prefix*, in (``at``, operation id, seq) order, after *after*.

    Writers stamp an event's ``at`` before they commit it, so one poll may see an
    event that a slower writer's earlier-stamped event follows. Each poll therefore
    reads again from *look_back_s* before the newest event sent (never before
    *after*) and sends only what it has not sent: an event committed within
    *look_back_s* of its stamp is never missed, and none is sent twice. A resumed
    stream starts strictly after *after*: an event stamped before it but committed
    after the client's last read is not sent (the one-operation stream has no such
    gap).

    Args:
        store: the store.
        label_prefix: only operations whose ``label`` starts with it ("": all).
        after: the client's ``Last-Event-ID`` as a cursor (``None``: from the first).
        poll_s: seconds between looks at the store.
        look_back_s: seconds of ``at`` read again at each look.
        stopping: set when the service shuts down.
        allowed: asked before each look; ``False`` ends the stream (``None``: always).
    """
    floor = after
    newest = after
    recent: set[AuditCursor] = set()
    window = timedelta(seconds=look_back_s)
    while stopping is None or not stopping.is_set():
        if allowed is not None and not await allowed():
            return
        start = floor
        if newest is not None and recent:
            back: AuditCursor = (_before(newest[0], window), "", 0)
            start = back if floor is None or back > floor else floor
        try:
            events = await anyio.to_thread.run_sync(_read_many, store, start, label_prefix)
        except Exception as exc:  # the stream is open: end it, the client resumes
            _LOG.warning("events: the store failed: %s", type(exc).__name__)
            return
        for stored in events:
            cursor = cursor_of(stored)
            if cursor in recent:
                continue
            recent.add(cursor)
            if newest is None or cursor > newest:
                newest = cursor
            yield _message(stored, many_id(stored))
        if newest is not None:
            horizon = _before(newest[0], window)
            recent = {c for c in recent if c[0] >= horizon}
        await anyio.sleep(poll_s)
