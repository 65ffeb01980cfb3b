"""A record as a database row (schema 5): its parts as JSON columns, written only when
they change, and the few typed columns the store queries.

A record is ten parts (:mod:`waitbound._model._record_parts`); a step changes a few of them
(a reservation: ``counters`` and ``lease``; an observation: ``answer``, ``schedule``,
``counters``, ``lease``; every write: ``audit``) and leaves the rest (``contract``,
``submission``, ``oversight``, ``push``, usually ``ending``) as they were. So a row holds:

- :data:`PART_COLUMNS`: one JSON text column per part, named after it;
- :data:`QUERY_COLUMNS`: typed copies of what SQL selects and orders by (the version
  the compare-and-swap checks, the phase, outcome, next poll time, lease, audit head),
  written by every save (they are bound values, not encodings).

:class:`RecordRows` keeps, per store, a bounded cache of the parts (and their texts) it
last read or wrote for each operation. A save writes a part only when it is not the
very object the cache holds for the version the save replaces (records change by
sharing the parts they do not touch) and its text differs; each part's text is the
encoding the part keeps (:meth:`~waitbound._model._record_parts.Part.text`), so a part is
encoded once in its life whatever the number of saves. A read decodes a part only when
its text is not the cached one. Correctness never depends on the cache: an entry is
used for a save only when it describes the very version the save replaces (which the
compare-and-swap on ``version`` then proves is the stored row), and a miss writes every
part.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from waitbound._base._clock import utc
from waitbound._base._errors import SchemaVersionError, StoreError
from waitbound._base._json import JSON
from waitbound._model._record import Record, assemble
from waitbound._model._record_parts import PARTS, RECORD_SCHEMA, Part, decode_part
from waitbound.stores._codec import brief, dump_json, load_json

__all__ = [
    "ALL_PARTS",
    "PART_COLUMNS",
    "QUERY_COLUMNS",
    "ROW_COLUMNS",
    "RecordRows",
    "Row",
]

PART_COLUMNS: Final[tuple[str, ...]] = tuple(attr for attr, _ in PARTS)
"""One JSON column per part, named as the part (``contract``, ``submission``, ...)."""

QUERY_COLUMNS: Final[tuple[str, ...]] = (
    "version",
    "phase",
    "outcome",
    "next_poll_at",
    "lease_owner",
    "lease_expires_at",
    "audit_seq",
    "audit_head",
)
"""Typed columns of the same names, copies of part fields that SQL reads (written by
every save; the parts are the record)."""

ROW_COLUMNS: Final = ", ".join(("operation_id", "version", *PART_COLUMNS))
"""The columns :meth:`RecordRows.record` reads, in its order."""

ALL_PARTS: Final[tuple[int, ...]] = tuple(range(len(PARTS)))
"""Every part's index: what a create (or a save the cache knows nothing of) writes."""

_KINDS: Final = tuple(kind for _, kind in PARTS)


@dataclass(frozen=True, slots=True)
class _Known:
    """What the cache knows of one operation's stored parts."""

    version: int
    """The record version they were read or written at (a save replacing exactly this
    version may leave the unchanged ones out)."""
    parts: tuple[Part, ...]
    texts: tuple[str, ...]
    """Each part's stored text, in :data:`PART_COLUMNS` order."""


@dataclass(frozen=True, slots=True)
class Row:
    """A record as a row, ready for ``INSERT`` or ``UPDATE``.

    Attributes:
        query: the :data:`QUERY_COLUMNS` values, in order (instants as the store keeps
            them).
        changed: the indices (in :data:`PART_COLUMNS`) of the parts to write.
        texts: their JSON texts, in the order of ``changed``.
    """

    query: tuple[object, ...]
    changed: tuple[int, ...]
    texts: tuple[str, ...]
    known: _Known


class RecordRows:
    """Turns records into rows and back for one store, with the parts cache.

    Args:
        instant: how the store keeps an instant (SQLite: ISO 8601 text; PostgreSQL: the
            aware ``datetime`` itself).
        size: how many operations' parts are kept (least recently used go first).
    """

    def __init__(self, instant: Callable[[datetime], object], *, size: int = 4096) -> None:
        self._instant = instant
        self._size = size
        self._cache: OrderedDict[str, _Known] = OrderedDict()
        self._lock = threading.Lock()

    # -- the cache ---------------------------------------------------------------------

    def _get(self, operation_id: str) -> _Known | None:
        with self._lock:
            entry = self._cache.get(operation_id)
            if entry is not None:
                self._cache.move_to_end(operation_id)
            return entry

    def _put(self, operation_id: str, entry: _Known) -> None:
        with self._lock:
            self._cache[operation_id] = entry
            self._cache.move_to_end(operation_id)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)

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
            replaces: the version the write replaces (0 for a create): the parts the
                cache holds for that version, unchanged, are left out.
        """
        parts = stored.parts()
        entry = self._get(stored.operation_id)
        if entry is not None and entry.version == replaces and replaces > 0:
            texts = list(entry.texts)
            changed: list[int] = []
            for index, (part, old) in enumerate(zip(parts, entry.parts, strict=True)):
                if part is old:
                    continue
                text = part.text(dump_json)
                if text != texts[index]:
                    changed.append(index)
                    texts[index] = text
            written = tuple(changed)
            known = _Known(stored.version, parts, tuple(texts))
            return Row(self.query(stored), written, tuple(texts[i] for i in written), known)
        every = tuple(part.text(dump_json) for part in parts)
        return Row(self.query(stored), ALL_PARTS, every, _Known(stored.version, parts, every))

    def query(self, record: Record) -> tuple[object, ...]:
        """The :data:`QUERY_COLUMNS` values of *record*, in order."""
        instant = self._instant
        lease = record.lease
        ending = record.ending
        audit = record.audit
        return (
            record.version,
            ending.phase.value,
            ending.outcome.value if ending.outcome is not None else None,
            instant(record.schedule.next_poll_at),
            lease.lease_owner,
            None if lease.lease_expires_at is None else instant(lease.lease_expires_at),
            audit.audit_seq,
            audit.audit_head,
        )

    def written(self, stored: Record, row: Row) -> None:
        """Note that *row* (of *stored*) was committed."""
        self._put(stored.operation_id, row.known)

    # -- reading -----------------------------------------------------------------------

    def record(self, row: Sequence[Any]) -> Record:
        """The record of a row read as :data:`ROW_COLUMNS`.

        Raises:
            StoreError: the row is damaged.
        """
        operation_id = row[0]
        entry = self._get(operation_id)
        texts = tuple(str(text) for text in row[2:])
        parts: list[Part] = []
        try:
            version = int(row[1])
            for index, text in enumerate(texts):
                if entry is not None and entry.texts[index] == text:
                    parts.append(entry.parts[index])
                    continue
                data = load_json(text)
                if not isinstance(data, dict):
                    raise TypeError(f"its {PART_COLUMNS[index]} is not a JSON object")
                if index == 0:
                    _check_schema(operation_id, data)
                part = decode_part(_KINDS[index], data)
                part.keep_text(text)
                parts.append(part)
            record = assemble(parts, version)
            if record.operation_id != operation_id:
                raise ValueError(f"its contract names {record.operation_id!r}")
        except (TypeError, KeyError, ValueError, AssertionError) as exc:
            if isinstance(exc, StoreError):
                raise
            raise StoreError(
                f"operation {operation_id!r}: its stored record is damaged ({brief(exc)})"
            ) from None
        self._put(operation_id, _Known(version, tuple(parts), texts))
        return record


def _check_schema(operation_id: str, contract: dict[str, JSON]) -> None:
    """Refuse a record whose contract part names a record format newer than this
    waitbound's (:data:`~waitbound._model._record_parts.RECORD_SCHEMA`)."""
    schema = contract.get("schema")
    if not isinstance(schema, int):
        raise StoreError(
            f"operation {operation_id!r}: its stored record has no valid schema number ({schema!r})"
        )
    if schema > RECORD_SCHEMA:
        raise SchemaVersionError(
            f"operation record schema {schema!r} is newer than this waitbound "
            f"understands ({RECORD_SCHEMA}); upgrade waitbound to read it"
        )


def moment(value: object) -> datetime:
    """A stored instant (ISO 8601 text or a ``datetime``) as aware UTC."""
    if isinstance(value, datetime):
        return utc(value)
    return utc(datetime.fromisoformat(str(value)))
