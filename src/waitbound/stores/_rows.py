"""A record as a database row (schema 3): hot typed columns, a small ``poll`` JSON, and
the cold rest as JSON written only when it changes.

Every step of an operation changes a few fields (the counters, the lease, the next
poll time, what the last answer said) and leaves the rest (profile, policy, URLs,
submission, grants, push, decisions, result, ...) as it was. So a row holds:

- :data:`HOT_COLUMNS`: typed columns, written by every save;
- ``poll``: the JSON object of :data:`POLL_FIELDS`, what an answer changes, written by
  every save (a few dozen bytes);
- ``data``: the JSON object of :data:`COLD_FIELDS` (``{"schema": RECORD_SCHEMA, ...}``)
  and ``data_version``: the record version at which ``data`` was last written.

:class:`RecordRows` keeps, per store, a bounded cache of the cold part it last read or
wrote for each operation. A save writes ``data`` only when the cold part differs from
the cached one (checked by identity first, as records change by
``dataclasses.replace``, then by the encoded text); a get decodes ``data`` only when its
``data_version`` is not the cached one. Correctness never depends on the cache: an
entry is used for a save only when it describes the very version the save replaces
(which the compare-and-swap on ``version`` then proves is the stored row), and a cache
miss simply encodes and writes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from datetime import datetime
from typing import Any, Final

from waitbound._clock import utc
from waitbound._errors import SchemaVersionError, StoreError
from waitbound._json import JSON
from waitbound._outcome import OutcomeKind
from waitbound._record import FIELD_NAMES, RECORD_SCHEMA, Phase, Record, decode_fields, field_json
from waitbound.stores._codec import brief, dump_json, load_json

__all__ = [
    "COLD_FIELDS",
    "HOT_COLUMNS",
    "POLL_FIELDS",
    "ROW_COLUMNS",
    "RecordRows",
    "Row",
]

HOT_COLUMNS: Final[tuple[str, ...]] = (
    "version",
    "phase",
    "outcome",
    "next_poll_at",
    "lease_owner",
    "lease_expires_at",
    "in_flight",
    "submit_attempts",
    "status_requests_used",
    "result_requests_used",
    "cancel_requests_used",
    "confirm_requests_used",
    "transport_failures_used",
    "rate_limited_used",
    "attempt",
    "audit_seq",
    "audit_head",
    "audit_mac",
)
"""The record fields kept as typed columns of the same names (written by every save)."""

POLL_FIELDS: Final[tuple[str, ...]] = (
    "provider_state",
    "progress",
    "last_http_status",
    "last_request_id",
    "last_observed_at",
    "job_seen_at",
    "pending_seen_at",
    "ended_seen_at",
    "success_seen_at",
    "delay_source",
    "cancelable",
)
"""The fields an answer changes besides the hot ones: the ``poll`` JSON column."""

COLD_FIELDS: Final[tuple[str, ...]] = tuple(
    name
    for name in FIELD_NAMES
    if name not in HOT_COLUMNS and name not in POLL_FIELDS and name != "operation_id"
)
"""The rest: the ``data`` JSON column, written only when one of them changed."""

ROW_COLUMNS: Final = ", ".join(("operation_id", *HOT_COLUMNS, "poll", "data_version", "data"))
"""The columns :meth:`RecordRows.record` reads, in its order."""

_INSTANTS: Final = frozenset({"next_poll_at", "lease_expires_at"})
_POLL_INSTANTS: Final = frozenset(name for name in POLL_FIELDS if name.endswith("_at"))


@dataclass(frozen=True, slots=True)
class _Cold:
    """What the cache knows of one operation's cold part."""

    version: int
    """The record version it was read or written at (a save replacing exactly this
    version may reuse it)."""
    data_version: int
    values: tuple[object, ...]
    """The cold fields' values, in :data:`COLD_FIELDS` order."""
    text: str
    """The stored ``data`` text."""


@dataclass(frozen=True, slots=True)
class Row:
    """A record as a row, ready for ``INSERT`` or ``UPDATE``.

    Attributes:
        hot: the :data:`HOT_COLUMNS` values, in order (instants as the store keeps them).
        poll: the ``poll`` JSON text.
        data_version: the ``data_version`` the row has after the write.
        data: the ``data`` JSON text to write, or ``None`` when the stored one is current.
    """

    hot: tuple[object, ...]
    poll: str
    data_version: int
    data: str | None
    cold: _Cold


class RecordRows:
    """Turns records into rows and back for one store, with the cold-part cache.

    Args:
        instant: how the store keeps an instant (SQLite: ISO 8601 text; PostgreSQL: the
            aware ``datetime`` itself).
        size: how many operations' cold parts are kept (least recently used go first).
    """

    def __init__(self, instant: Callable[[datetime], object], *, size: int = 4096) -> None:
        self._instant = instant
        self._size = size
        self._cache: OrderedDict[str, _Cold] = OrderedDict()
        self._lock = threading.Lock()

    # -- the cache ---------------------------------------------------------------------

    def _get(self, operation_id: str) -> _Cold | None:
        with self._lock:
            entry = self._cache.get(operation_id)
            if entry is not None:
                self._cache.move_to_end(operation_id)
            return entry

    def _put(self, operation_id: str, entry: _Cold) -> None:
        with self._lock:
            self._cache[operation_id] = entry
            self._cache.move_to_end(operation_id)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)

    def cached_data_version(self, operation_id: str) -> int:
        """The ``data_version`` cached for the operation (``-1``: none), so a read may
        skip sending a ``data`` the cache holds."""
        entry = self._get(operation_id)
        return -1 if entry is None else entry.data_version

    def forget(self, operation_id: str) -> None:
        """Drop the operation's entry (a write of it failed: nothing is assumed)."""
        with self._lock:
            self._cache.pop(operation_id, None)

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._cache.clear()

    # -- writing -----------------------------------------------------------------------

    def row(self, stored: Record, *, replaces: int) -> Row:
        """*stored* (the record as it will be after the write) as a row.

        Args:
            replaces: the version the write replaces (0 for a create): the cold part is
                left out when the cache holds that version's and it is unchanged.
        """
        values = tuple([getattr(stored, name) for name in COLD_FIELDS])
        entry = self._get(stored.operation_id)
        data: str | None
        if entry is not None and entry.version == replaces and replaces > 0:
            if all(a is b for a, b in zip(values, entry.values, strict=True)):
                text, data, data_version = entry.text, None, entry.data_version
            else:
                text = _cold_text(stored)
                if text == entry.text:
                    data, data_version = None, entry.data_version
                else:
                    data, data_version = text, stored.version
        else:
            text = _cold_text(stored)
            data, data_version = text, stored.version
        return Row(
            hot=self.hot(stored),
            poll=_poll_text(stored),
            data_version=data_version,
            data=data,
            cold=_Cold(stored.version, data_version, values, text),
        )

    def hot(self, record: Record) -> tuple[object, ...]:
        """The :data:`HOT_COLUMNS` values of *record*, in order."""
        instant = self._instant
        lease = record.lease_expires_at
        return (
            record.version,
            record.phase.value,
            record.outcome.value if record.outcome is not None else None,
            instant(record.next_poll_at),
            record.lease_owner,
            None if lease is None else instant(lease),
            record.in_flight,
            record.submit_attempts,
            record.status_requests_used,
            record.result_requests_used,
            record.cancel_requests_used,
            record.confirm_requests_used,
            record.transport_failures_used,
            record.rate_limited_used,
            record.attempt,
            record.audit_seq,
            record.audit_head,
            record.audit_mac,
        )

    def written(self, stored: Record, row: Row) -> None:
        """Note that *row* (of *stored*) was committed."""
        self._put(stored.operation_id, row.cold)

    # -- reading -----------------------------------------------------------------------

    def record(self, row: Sequence[Any]) -> Record:
        """The record of a row read as :data:`ROW_COLUMNS` (``data`` may be ``None``
        when it was left out because its ``data_version`` is the cached one).

        Raises:
            SchemaVersionError: the cold part was written by a newer waitbound.
            StoreError: the row is damaged, or ``data`` was left out but is not cached.
        """
        operation_id = row[0]
        data_version = int(row[-2])
        text = row[-1]
        version = int(row[1])
        entry = self._get(operation_id)
        try:
            if entry is not None and entry.data_version == data_version:
                values = entry.values
                stored_text = entry.text
            elif text is None:
                raise StoreError(
                    f"operation {operation_id!r}: its stored data was not read (a cache miss)"
                )
            else:
                stored_text = str(text)
                values = _cold_values(operation_id, stored_text)
            poll = load_json(row[-3])
            record = Record(
                operation_id=operation_id,
                **dict(zip(COLD_FIELDS, values, strict=True)),  # type: ignore[arg-type]
                **decode_fields(poll, POLL_FIELDS),  # type: ignore[arg-type]
                **self._hot_values(row),
            )
        except (TypeError, KeyError, ValueError, AssertionError) as exc:
            if isinstance(exc, StoreError):
                raise
            raise StoreError(
                f"operation {operation_id!r}: its stored record is damaged ({brief(exc)})"
            ) from None
        self._put(operation_id, _Cold(version, data_version, values, stored_text))
        return record

    @staticmethod
    def _hot_values(row: Sequence[Any]) -> dict[str, Any]:
        (
            version,
            phase,
            outcome,
            next_poll_at,
            lease_owner,
            lease_expires_at,
            in_flight,
            submit_attempts,
            status_requests_used,
            result_requests_used,
            cancel_requests_used,
            confirm_requests_used,
            transport_failures_used,
            rate_limited_used,
            attempt,
            audit_seq,
            audit_head,
            audit_mac,
        ) = row[1 : 1 + len(HOT_COLUMNS)]
        return {
            "version": int(version),
            "phase": Phase(phase),
            "outcome": OutcomeKind(outcome) if outcome else None,
            "next_poll_at": _moment(next_poll_at),
            "lease_owner": lease_owner,
            "lease_expires_at": None if lease_expires_at is None else _moment(lease_expires_at),
            "in_flight": in_flight,
            "submit_attempts": int(submit_attempts),
            "status_requests_used": int(status_requests_used),
            "result_requests_used": int(result_requests_used),
            "cancel_requests_used": int(cancel_requests_used),
            "confirm_requests_used": int(confirm_requests_used),
            "transport_failures_used": int(transport_failures_used),
            "rate_limited_used": int(rate_limited_used),
            "attempt": int(attempt),
            "audit_seq": int(audit_seq),
            "audit_head": audit_head,
            "audit_mac": audit_mac,
        }


def _moment(value: object) -> datetime:
    """A stored instant (ISO 8601 text or a ``datetime``) as aware UTC."""
    if isinstance(value, datetime):
        return utc(value)
    return utc(datetime.fromisoformat(str(value)))


def _cold_text(record: Record) -> str:
    data: dict[str, JSON] = {"schema": RECORD_SCHEMA}
    for name in COLD_FIELDS:
        data[name] = field_json(record, name)
    return dump_json(data)


def _poll_text(record: Record) -> str:
    return dump_json({name: field_json(record, name) for name in POLL_FIELDS})


def _cold_values(operation_id: str, text: str) -> tuple[object, ...]:
    try:
        data = load_json(text)
    except ValueError as exc:
        raise StoreError(
            f"operation {operation_id!r}: its stored record is not valid JSON ({brief(exc)})"
        ) from None
    if not isinstance(data, dict):
        raise StoreError(f"operation {operation_id!r}: its stored record is not a JSON object")
    schema = data.get("schema")
    if not isinstance(schema, int):
        raise StoreError(
            f"operation {operation_id!r}: its stored record has no valid schema number ({schema!r})"
        )
    if schema > RECORD_SCHEMA:
        raise SchemaVersionError(
            f"operation record schema {schema!r} is newer than this waitbound "
            f"understands ({RECORD_SCHEMA}); upgrade waitbound to read it"
        )
    decoded = decode_fields(data, COLD_FIELDS)
    values = []
    for name in COLD_FIELDS:
        if name in decoded:
            values.append(decoded[name])
        elif _DEFAULTS[name] is MISSING:
            raise KeyError(name)
        else:
            values.append(_DEFAULTS[name])
    return tuple(values)


def _defaults() -> dict[str, object]:
    found: dict[str, object] = {}
    for item in fields(Record):
        if item.default is not MISSING:
            found[item.name] = item.default
        elif item.default_factory is not MISSING:
            found[item.name] = item.default_factory()
        else:
            found[item.name] = MISSING
    return found


_DEFAULTS: Final = _defaults()
"""Each field's default (``MISSING`` for a required one: a row without it is damaged)."""
