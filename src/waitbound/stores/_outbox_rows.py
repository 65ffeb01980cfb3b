"""The completion outbox as rows of a SQL table (``outbox``).

One copy of the statements and the row codec for SQLite and PostgreSQL; the backend
supplies its :class:`~waitbound.stores._sql_dialect.Dialect`. Where a statement's
shape differs it says so: PostgreSQL claims entries in one statement, ``FOR UPDATE
SKIP LOCKED`` (entries another worker is claiming are skipped, not waited for), and
lists them with one statement text whatever the filters (so it runs prepared); SQLite,
whose writes are serialised, selects and then leases.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

from waitbound._model._push import Channel, OutboxEntry, OutboxStatus
from waitbound.stores._codec import Execute, load_json
from waitbound.stores._protocol import encode_json
from waitbound.stores._sql_dialect import Dialect

__all__ = ["OutboxRows", "outbox_entry_of"]

_FIELDS: Final = (
    "delivery_id, operation_id, channel, target, payload, created_at, next_attempt_at,"
    " status, attempts, delivered_at, last_error, replay_of, lease_owner, lease_expires_at"
)


class OutboxRows:
    """The statements of one store's ``outbox`` table."""

    def __init__(self, dialect: Dialect) -> None:
        d = self._dialect = dialect
        m = d.mark
        outbox = self._table = d.table("outbox")
        read = self._read = _FIELDS.replace("payload", f"payload{d.read_json}")
        self.insert = (
            f"INSERT INTO {outbox} ({_FIELDS})"
            f" VALUES ({d.marks(4)}, {m}{d.write_json}, {d.marks(9)})"
            " ON CONFLICT (delivery_id) DO NOTHING"
        )
        """One entry's ``INSERT``, leaving an existing ``delivery_id`` (its parameters:
        :meth:`row`)."""
        owner = "IS NOT DISTINCT FROM %s::text" if d.is_postgres else "IS ?"
        self._settle = (
            f"UPDATE {outbox} SET status = {m}, attempts = {m}, next_attempt_at = {m},"
            f" delivered_at = {m}, last_error = {m}, lease_owner = NULL,"
            f" lease_expires_at = NULL WHERE delivery_id = {m} AND status = {m}"
            f" AND lease_owner {owner}"
        )
        self._order = f" ORDER BY created_at DESC, delivery_id{d.collate} DESC LIMIT {m}"
        self._listing = (  # PostgreSQL's, whatever the filters
            f"SELECT {read} FROM {outbox}"
            f" WHERE ({m}::text IS NULL OR operation_id = {m})"
            f" AND ({m}::text IS NULL OR status = {m}){self._order}"
        )
        self._get = f"SELECT {read} FROM {outbox} WHERE delivery_id = {m}"
        self._claims = {only: self._claim_statement(only) for only in (False, True)}
        self._lease = (
            f"UPDATE {outbox} SET lease_owner = {m}, lease_expires_at = {m} WHERE delivery_id = {m}"
        )

    def _claim_statement(self, only: bool) -> str:
        """PostgreSQL's one claim statement (*only*: of one operation, a separate text,
        so it is planned on ``outbox_operation``); SQLite's selection (its channels'
        marks are added per call)."""
        d, m = self._dialect, self._dialect.mark
        of = f" AND operation_id = {m}" if only else ""
        if not d.is_postgres:
            return (
                f"SELECT {self._read} FROM {self._table}"
                " WHERE status = ? AND channel IN ({marks}) AND next_attempt_at <= ?"
                f" AND (lease_expires_at IS NULL OR lease_expires_at <= ?){of}"
                " ORDER BY next_attempt_at, delivery_id LIMIT ?"
            )
        returned = ", ".join(f"o.{column}" for column in self._read.split(", "))
        return (
            f"WITH due AS (SELECT delivery_id FROM {self._table}"
            " WHERE status = %s AND channel = ANY(%s) AND next_attempt_at <= %s"
            f" AND (lease_expires_at IS NULL OR lease_expires_at <= %s){of}"
            ' ORDER BY next_attempt_at, delivery_id COLLATE "C" LIMIT %s FOR UPDATE SKIP LOCKED)'
            f" UPDATE {self._table} AS o SET lease_owner = %s, lease_expires_at = %s FROM due"
            f" WHERE o.delivery_id = due.delivery_id RETURNING {returned}"
        )

    def row(self, e: OutboxEntry) -> tuple[object, ...]:
        """An entry as :attr:`insert`'s parameters."""
        d = self._dialect
        return (
            e.delivery_id,
            e.operation_id,
            e.channel.value,
            d.text(e.target),
            encode_json(e.payload),
            d.instant(e.created_at),
            d.instant(e.next_attempt_at),
            e.status.value,
            e.attempts,
            d.instant(e.delivered_at),
            d.text(e.last_error),
            e.replay_of,
            e.lease_owner,
            d.instant(e.lease_expires_at),
        )

    def add(self, execute: Execute, entries: Sequence[OutboxEntry]) -> int:
        """Insert *entries*, leaving any whose ``delivery_id`` exists; return how many
        were new."""
        inserted = 0
        for entry in entries:
            inserted += execute(self.insert, self.row(entry)).rowcount
        return inserted

    def claim(
        self,
        connection: Any,
        *,
        owner: str,
        now: datetime,
        until: datetime,
        limit: int,
        channels: Sequence[Channel],
        operation_id: str | None,
    ) -> list[OutboxEntry]:
        """Lease up to *limit* due entries of *channels* to *owner* until *until*, in
        the caller's transaction on *connection* (see :meth:`Store.claim_outbox`)."""
        d = self._dialect
        only = () if operation_id is None else (operation_id,)
        pending = OutboxStatus.PENDING.value
        if d.is_postgres:
            args = (pending, [c.value for c in channels], now, now, *only, limit, owner, until)
            rows = connection.execute(self._claims[operation_id is not None], args).fetchall()
            taken = self._entries(rows)
            return sorted(taken, key=lambda e: (e.next_attempt_at, e.delivery_id))
        stamp = d.instant(now)
        statement = self._claims[operation_id is not None].replace(
            "{marks}", ", ".join("?" for _ in channels)
        )
        rows = connection.execute(
            statement, (pending, *(c.value for c in channels), stamp, stamp, *only, limit)
        ).fetchall()
        taken = [replace(e, lease_owner=owner, lease_expires_at=until) for e in self._entries(rows)]
        connection.executemany(
            self._lease, [(owner, d.instant(until), e.delivery_id) for e in taken]
        )
        return taken

    def settle(self, execute: Execute, entry: OutboxEntry) -> bool:
        """See :meth:`Store.settle_outbox`."""
        d = self._dialect
        args = (
            entry.status.value,
            entry.attempts,
            d.instant(entry.next_attempt_at),
            d.instant(entry.delivered_at),
            d.text(entry.last_error),
            entry.delivery_id,
            OutboxStatus.PENDING.value,
            entry.lease_owner,
        )
        return bool(execute(self._settle, args).rowcount == 1)

    def listing(
        self, execute: Execute, *, operation_id: str | None, status: str | None, limit: int
    ) -> list[OutboxEntry]:
        """See :meth:`Store.outbox`."""
        if self._dialect.is_postgres:
            args: tuple[object, ...] = (operation_id, operation_id, status, status, limit)
            return self._entries(execute(self._listing, args).fetchall())
        given = {
            column: value
            for column, value in (("operation_id", operation_id), ("status", status))
            if value is not None
        }
        where = (" WHERE " + " AND ".join(f"{c} = ?" for c in given)) if given else ""
        statement = f"SELECT {self._read} FROM {self._table}{where}{self._order}"
        return self._entries(execute(statement, (*given.values(), limit)).fetchall())

    def get(self, execute: Execute, delivery_id: str) -> OutboxEntry | None:
        """See :meth:`Store.get_outbox`."""
        row = execute(self._get, (delivery_id,)).fetchone()
        return self._entries([row])[0] if row else None

    def _entries(self, rows: Sequence[Any]) -> list[OutboxEntry]:
        d = self._dialect
        return [outbox_entry_of(row, d.read_instant, d.read_text) for row in rows]


def _same(text: Any) -> str:
    return str(text)


def outbox_entry_of(
    row: Sequence[Any], instant: Callable[[Any], datetime], text: Callable[[Any], str] = _same
) -> OutboxEntry:
    """An ``outbox`` row (delivery_id, operation_id, channel, target, payload, created_at,
    next_attempt_at, status, attempts, delivered_at, last_error, replay_of, lease_owner,
    lease_expires_at) as an entry; *instant* reads the store's stored instants, *text*
    its foreign texts (the target and the last error; PostgreSQL: :func:`from_text`).

    Raises:
        ValueError: the stored payload is not a JSON object.
    """
    delivery_id, operation_id, channel, target, payload, created_at, next_attempt_at = row[:7]
    status, attempts, delivered_at, last_error, replay_of, lease_owner, lease_expires_at = row[7:]
    decoded = load_json(payload)
    if not isinstance(decoded, dict):
        raise ValueError(f"outbox entry {delivery_id!r}: its payload is not a JSON object")

    def maybe(value: Any) -> datetime | None:
        return None if value is None else instant(value)

    return OutboxEntry(
        delivery_id=delivery_id,
        operation_id=operation_id,
        channel=Channel(channel),
        target=None if target is None else text(target),
        payload=decoded,
        created_at=instant(created_at),
        next_attempt_at=instant(next_attempt_at),
        status=OutboxStatus(status),
        attempts=int(attempts),
        delivered_at=maybe(delivered_at),
        last_error=None if last_error is None else text(last_error),
        replay_of=replay_of,
        lease_owner=lease_owner,
        lease_expires_at=maybe(lease_expires_at),
    )
