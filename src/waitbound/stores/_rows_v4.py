"""Reading a record from a schema-3 or schema-4 row (the release before the record's
parts): hot typed columns, a small ``poll`` JSON and the cold rest as ``data`` JSON.

Used only to upgrade such a store to schema 5 (``waitbound db upgrade``) and to read an
older SQLite file opened read-only (which is never upgraded). Written by no code.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from waitbound._base._clock import utc
from waitbound._base._errors import SchemaVersionError, StoreError
from waitbound._model._outcome import OutcomeKind
from waitbound._model._record import (
    FIELD_NAMES,
    RECORD_SCHEMA,
    Phase,
    Record,
    decode_fields,
    record_of_fields,
)
from waitbound.stores._codec import brief, load_json
from waitbound.stores._rows import QUERY_COLUMNS

__all__ = [
    "COLD_FIELDS",
    "HOT_COLUMNS",
    "POLL_FIELDS",
    "ROW_COLUMNS",
    "V5_DROPPED",
    "record_of_v4_row",
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
"""The record fields schema 4 kept as typed columns of the same names."""

V5_DROPPED: Final[tuple[str, ...]] = (
    *(column for column in HOT_COLUMNS if column not in QUERY_COLUMNS),
    "poll",
    "data_version",
    "data",
)
"""The ``operations`` columns of schemas 1-4 that schema 5 drops (the parts hold their
values): the hot columns it does not keep as query columns, ``poll`` and ``data``;
SQLite and PostgreSQL drop the same."""

POLL_FIELDS: Final[tuple[str, ...]] = (
    "provider_state",
    "progress",
    "last_http_status",
    "last_request_id",
    "last_observed_at",
    "job_seen_at",
    "success_seen_at",
    "delay_source",
    "cancelable",
)
"""The fields schema 4 kept in the ``poll`` JSON column."""

COLD_FIELDS: Final[tuple[str, ...]] = tuple(
    name
    for name in FIELD_NAMES
    if name not in HOT_COLUMNS and name not in POLL_FIELDS and name != "operation_id"
)
"""The rest: schema 4's ``data`` JSON column."""

ROW_COLUMNS: Final = ", ".join(("operation_id", *HOT_COLUMNS, "poll", "data_version", "data"))
"""The columns :func:`record_of_v4_row` reads, in its order."""


def record_of_v4_row(row: Sequence[Any]) -> Record:
    """The record of a schema-3/4 row read as :data:`ROW_COLUMNS`.

    Raises:
        SchemaVersionError: the cold part was written by a newer waitbound.
        StoreError: the row is damaged.
    """
    operation_id = row[0]
    try:
        values = _cold_values(operation_id, str(row[-1]))
        poll = load_json(row[-3])
        if not isinstance(poll, dict):
            raise TypeError("its poll JSON is not an object")
        return record_of_fields(
            {
                "operation_id": operation_id,
                **values,
                **decode_fields(poll, POLL_FIELDS),
                **_hot_values(row),
            }
        )
    except (TypeError, KeyError, ValueError, AssertionError) as exc:
        if isinstance(exc, StoreError):
            raise
        raise StoreError(
            f"operation {operation_id!r}: its stored record is damaged ({brief(exc)})"
        ) from None


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


def _cold_values(operation_id: str, text: str) -> dict[str, object]:
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
    return decode_fields(data, COLD_FIELDS)
