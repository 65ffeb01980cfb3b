"""The embedded default store: one SQLite file (stdlib ``sqlite3``, WAL mode).

Records are rows: one JSON column per part of the record (``waitbound.stores._rows``),
written only when the part changed, and typed columns for what is queried (phase, next
poll time, lease). Audit events are rows in the same
database, appended in the same ``BEGIN IMMEDIATE`` transaction as the record change, as
are the push path's writes (``webhook_jobs``, the inbox's look-back match, the outbox).

The schema is versioned (``PRAGMA user_version``): ``_sqlite_schema.MIGRATIONS`` holds one script
per version, and opening a file for writing applies the pending ones in one transaction.
Instants are UTC ISO 8601 texts (``datetime.isoformat``): such texts sort as their
instants do (a whole second, ``…:00+00:00``, sorts before its fractions, ``…:00.5…``,
since ``+`` sorts before ``.``), so SQL compares and orders them as text.

Around this module: opening, migrating and reading older files in ``_sqlite_open``, its
own statements in ``_sqlite_rows``; the statements it shares with PostgreSQL in
``_audit_rows``, ``_inbox_rows``, ``_outbox_rows``, ``_history_rows`` and
``_calendar_rows`` (see ``_sql_dialect``), and the methods over them in ``_sql_store``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

from waitbound._base._clock import utc
from waitbound._base._errors import ConflictError, StoreError, UsageError
from waitbound._model._audit import AuditEvent, StoredAuditEvent
from waitbound._model._push import Channel, InboundDelivery, OutboxEntry
from waitbound._model._record import Phase, Record
from waitbound._observe._metrics import store_transaction
from waitbound._rules._notices import outbox_entries
from waitbound.stores._audit_rows import AuditRows
from waitbound.stores._calendar_rows import CALENDAR_DDL, CalendarRows
from waitbound.stores._codec import Execute, brief
from waitbound.stores._group_charges import charge_sql, charges
from waitbound.stores._history_rows import HistoryRows
from waitbound.stores._inbox_rows import InboxRows
from waitbound.stores._outbox_rows import OutboxRows
from waitbound.stores._protocol import (
    DRIVABLE_PHASES,
    ClaimsByReservation,
    Planner,
    Write,
    advance,
    outcomes,
    planned,
    readable,
    webhook_key,
)
from waitbound.stores._rows import (
    ROW_COLUMNS,
    RecordRows,
    Row,
)
from waitbound.stores._sql_dialect import SQLITE, SQLAccess
from waitbound.stores._sql_store import SharedSQL
from waitbound.stores._sqlite_open import (
    check_ours,
    connect,
    legacy_columns,
    legacy_heads,
    legacy_record,
    migrate,
)
from waitbound.stores._sqlite_rows import (
    GET,
    INSERT,
    instant,
    label_filter,
    moment,
    read_instant,
    update,
)
from waitbound.stores._sqlite_schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "NotAStoreError", "SQLiteStore", "StoreNotFoundError"]


class StoreNotFoundError(StoreError, UsageError):
    """A store opened with ``create=False`` (or read-only) does not exist.

    Nothing was created: neither the file nor its folder.
    """


class NotAStoreError(StoreError, UsageError):
    """The file is not a waitbound store: not a SQLite database, or one whose tables
    are not waitbound's (or whose waitbound schema version is missing). Nothing in it
    was changed."""


class SQLiteStore(SharedSQL, ClaimsByReservation):
    """A :class:`~waitbound.stores.Store` in one SQLite file.

    Args:
        path: the database file.
        timeout_s: how long a write waits for another process's lock, in seconds.
        create: create the file (and its folder) when missing, at the current schema.
            ``False``: a missing file is refused (:class:`StoreNotFoundError`) and
            nothing is created. Either way, a file of an older schema opened for writing
            is brought up to date (see :meth:`upgrade`).
        read_only: open it for reading only (a ``mode=ro`` URI; ``immutable=1`` when
            the file or its folder is not writable, so a read-only copy kept for audit
            can be read). Implies ``create=False``; every write raises
            :class:`~waitbound.StoreError`. Changes committed by a writer still
            holding the file open may not be seen in immutable mode.
        audit_key: the audit key; every write then signs the chain head it leaves
            (``Record.audit_mac``, see ``docs/audit.md``). ``None``: heads are not signed.
            It is kept in memory only: never stored, logged or shown.

    Raises:
        StoreNotFoundError: the file is missing and may not be created.
        NotAStoreError: the file is not a waitbound store (another program's SQLite
            database, or not a database at all); nothing in it is changed.
        StoreError: the file cannot be opened.
        SchemaVersionError: the file was written by a newer waitbound.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        timeout_s: float = 30.0,
        create: bool = True,
        read_only: bool = False,
        audit_key: bytes | None = None,
    ) -> None:
        self._audit_key = audit_key
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._closed = False
        self._db = connect(
            self.path,
            create=create and not read_only,
            read_only=read_only,
            timeout_s=timeout_s,
            missing=StoreNotFoundError,
            refused=NotAStoreError,
        )
        self._applied: list[int] = []
        self._rows = RecordRows(instant)
        self._pending_rows: list[tuple[Record, Row]] = []
        """Rows written in the open transaction (see :meth:`_transaction`)."""
        self._calendar_rows = CalendarRows("pace_calendar", mark="?")
        self._audit_rows, self._inbox_rows, self._outbox_rows = _AUDIT, _INBOX, _OUTBOX
        self._history_rows = _HISTORY
        try:
            found = check_ours(self._db, self.path, read_only=read_only, refused=NotAStoreError)
            if not read_only:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            if found < SCHEMA_VERSION and not read_only:
                applied = self._migrate()
                if found > 0:  # a fresh file is created at the current schema
                    self._applied = applied
                found = SCHEMA_VERSION
            if found == SCHEMA_VERSION and not read_only:
                # a schema-5 file older than the calendar
                self._db.execute(CALENDAR_DDL.format(table="pace_calendar"))
            self._legacy = found if found < SCHEMA_VERSION else 0
            """Read-only on an older file: its schema version (records are read in its
            format: whole-record JSON up to 2, split rows in 3 and 4); else 0."""
        except BaseException as exc:
            self._db.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise NotAStoreError(
                    f"store {self.path}: cannot use it as a SQLite store ({exc})"
                ) from None
            raise

    def _migrate(self) -> list[int]:
        """Apply the pending migrations; return their versions (see
        :func:`~waitbound.stores._sqlite_open.migrate`)."""
        return migrate(self._transaction, rows=self._rows, update=update, path=self.path)

    def upgrade(self) -> list[int]:
        """Apply pending schema migrations; return their versions.

        A SQLite file is brought to the current schema when it is opened for writing,
        so this returns the versions that opening applied to an older file (``[2]`` for
        a version-1 file), once; ``[]`` for a file that was current (or created fresh,
        at the current schema) and on every later call. It exists so ``waitbound db
        upgrade`` treats both durable stores alike.
        """
        applied, self._applied = self._applied, []
        return applied

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction under the store's lock. The rows written
        in it (``_pending_rows``) enter the cold-part cache once it commits; if it does
        not, their operations leave the cache (nothing is assumed of them)."""
        with self._lock, self._damage(), store_transaction("sqlite"):
            self._pending_rows.clear()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                for stored, _ in self._pending_rows:
                    self._rows.forget(stored.operation_id)
                self._pending_rows.clear()
                # SQLite may have rolled back itself (a full disk): then there is
                # nothing to roll back, and saying so would hide the real error. A
                # transaction cut off by Ctrl-C may be finalised only after the store is
                # closed (closing the connection already rolled it back).
                if not self._closed and self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            for stored, row in self._pending_rows:
                self._rows.written(stored, row)
            self._pending_rows.clear()

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The connection, for reads (see :meth:`_damage`)."""
        with self._damage():
            yield self._db

    @contextmanager
    def _damage(self) -> Iterator[None]:
        """Turn a database failure (a damaged or foreign file, a full disk) into one line.

        Also serialises this store's use of its one connection across threads.
        """
        try:
            with self._lock:
                yield
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: {exc}") from None
        except (ValueError, TypeError, KeyError) as exc:
            if isinstance(exc, StoreError | UsageError):
                raise
            raise StoreError(
                f"store {self.path}: a stored value is damaged ({brief(exc)})"
            ) from None

    def create(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.create`."""
        stored, sealed = advance(record, events, self._audit_key)
        row = self._rows.row(stored, replaces=0)
        try:
            with self._transaction() as db:
                db.execute(
                    INSERT,
                    (stored.operation_id, *row.query, *row.texts, instant(stored.created_at)),
                )
                self._append(db, sealed)
                _push_writes(db, stored)
                _HISTORY.record(_run(db), stored)
        except sqlite3.IntegrityError:
            raise UsageError(f"operation {record.operation_id!r} exists already") from None
        self._rows.written(stored, row)
        return stored

    def get(self, operation_id: str) -> Record | None:
        """See :meth:`Store.get`."""
        with self._damage():
            if self._legacy:
                row = self._db.execute(
                    f"SELECT {legacy_columns(self._legacy)} FROM operations WHERE operation_id = ?",
                    (operation_id,),
                ).fetchone()
                return legacy_record(self._legacy, row) if row else None
            row = self._db.execute(GET, (operation_id,)).fetchone()
            return self._rows.record(row) if row else None

    def save(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.save`."""
        with self._transaction() as db:
            [written] = self._write_all(db, [(record, events)])
        if written is None:
            raise ConflictError(record.operation_id, record.version)
        return written

    def save_many(self, items: Sequence[Write]) -> list[Record | ConflictError]:
        """See :meth:`Store.save_many` (one ``BEGIN IMMEDIATE`` transaction)."""
        if not items:
            return []
        with self._transaction() as db:
            return outcomes(self._write_all(db, items), items)

    def _write_all(self, db: sqlite3.Connection, items: Sequence[Write]) -> list[Record | None]:
        """Write each item by compare-and-swap in the open transaction: the stored record,
        or ``None`` for a conflict (nothing of it written). The one write path of records
        (``save``, ``save_many``, ``reserve_due``). The cold-part cache learns of the
        writes once the transaction commits (see :meth:`_transaction`)."""
        written: list[Record | None] = []
        for record, events in items:
            stored, sealed = advance(record, events, self._audit_key)
            row = self._rows.row(stored, replaces=record.version)
            try:
                self._write(db, stored, row, sealed, replaces=record.version)
            except ConflictError:
                written.append(None)
                continue
            _push_writes(db, stored)
            for counted_by in charges(events):  # the member's groups count it too
                db.execute(_CHARGE, (counted_by, stored.operation_id))
            _HISTORY.record(_run(db), stored)
            self._pending_rows.append((stored, row))
            written.append(stored)
        return written

    @staticmethod
    def _write(
        db: sqlite3.Connection,
        stored: Record,
        row: Row,
        sealed: Sequence[StoredAuditEvent],
        *,
        replaces: int,
    ) -> None:
        """Write one record in the caller's transaction: its row by compare-and-swap on
        *replaces* (its stored version) — the query columns always, the parts that
        changed (``row.changed``) — then its *sealed* audit events.

        Raises:
            ConflictError: the stored version is not *replaces* (nothing was written).
        """
        cursor = db.execute(
            update(row.changed), (*row.query, *row.texts, stored.operation_id, replaces)
        )
        if cursor.rowcount != 1:
            raise ConflictError(stored.operation_id, replaces)
        SQLiteStore._append(db, sealed)

    @staticmethod
    def _append(db: sqlite3.Connection, sealed: Sequence[StoredAuditEvent]) -> None:
        db.executemany(_AUDIT.append, _AUDIT.rows(sealed))

    def reserve_due(
        self,
        *,
        owner: str,
        now: datetime,
        limit: int,
        plan: Planner,
        label_prefix: str = "",
        gone_owners: Collection[str] = (),
    ) -> list[Record]:
        """See :meth:`Store.reserve_due` (one ``BEGIN IMMEDIATE`` transaction: the file's
        write lock is held from the selection to the commit)."""
        stamp = instant(now)
        labelled, label_args = label_filter(label_prefix)
        gone = sorted(gone_owners)
        held = f" OR lease_owner IN ({', '.join('?' for _ in gone)})" if gone else ""
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT {ROW_COLUMNS} FROM operations WHERE phase IN (?, ?, ?)"
                " AND next_poll_at <= ?"
                f" AND (lease_expires_at IS NULL OR lease_expires_at <= ?{held}){labelled}"
                " ORDER BY next_poll_at LIMIT ?",
                (*DRIVABLE_PHASES, stamp, stamp, *gone, *label_args, limit),
            ).fetchall()
            due = (self._rows.record(found) for found in rows)
            writes = [w for w in (planned(r, owner, plan) for r in due) if w is not None]
            return [stored for stored in self._write_all(db, writes) if stored is not None]

    def next_claimable(
        self, *, now: datetime, label_prefix: str = ""
    ) -> tuple[datetime | None, list[str]]:
        """See :meth:`Store.next_claimable`."""
        stamp = instant(now)
        labelled, label_args = label_filter(label_prefix)
        with self._damage():
            (earliest,) = self._db.execute(
                "SELECT min(CASE WHEN lease_expires_at > next_poll_at THEN lease_expires_at"
                " ELSE next_poll_at END) FROM operations WHERE phase IN (?, ?, ?)"
                f"{labelled}",
                (*DRIVABLE_PHASES, *label_args),
            ).fetchone()
            holders = self._db.execute(
                "SELECT DISTINCT lease_owner FROM operations WHERE phase IN (?, ?, ?)"
                " AND next_poll_at <= ? AND lease_expires_at > ? AND lease_owner IS NOT NULL"
                f"{labelled} ORDER BY lease_owner LIMIT 100",
                (*DRIVABLE_PHASES, stamp, stamp, *label_args),
            ).fetchall()
        return (moment(earliest) if earliest else None), [owner for (owner,) in holders]

    def forget_schedule(self, key: str) -> int:
        """See :meth:`Store.forget_schedule`."""
        with self._transaction() as db:
            return _HISTORY.forget(_run(db), key)

    def pace(
        self,
        origin: str,
        planned_at: datetime,
        *,
        latest_at: datetime,
        now: datetime,
        rng_offset: float,
    ) -> datetime:
        """See :meth:`Store.pace` (one write transaction)."""
        with self._transaction() as db:
            return self._calendar_rows.pace(
                _run(db),
                origin,
                planned_at,
                latest_at=latest_at,
                now=now,
                rng_offset=rng_offset,
            )

    def pending_summary(self) -> tuple[int, datetime | None]:
        """See :meth:`Store.pending_summary`."""
        with self._damage():
            # An outcome is recorded exactly when the phase becomes done; counting by
            # phase reads the (phase, next_poll_at) index instead of every record.
            (count,) = self._db.execute(
                "SELECT count(*) FROM operations WHERE phase <> ?", (Phase.DONE.value,)
            ).fetchone()
            (earliest,) = self._db.execute(
                "SELECT min(next_poll_at) FROM operations WHERE phase IN (?, ?, ?)",
                DRIVABLE_PHASES,
            ).fetchone()
        return int(count), utc(datetime.fromisoformat(earliest)) if earliest else None

    def recent(
        self, *, label_prefix: str = "", limit: int = 50, open_only: bool = False
    ) -> list[Record]:
        """See :meth:`Store.recent`."""
        columns = legacy_columns(self._legacy) if self._legacy else ROW_COLUMNS
        # none: no row's JSON is read
        labelled, label_args = label_filter(label_prefix, "data" if self._legacy else "contract")
        with self._damage():
            rows = self._db.execute(
                f"SELECT {columns} FROM operations WHERE (outcome IS NULL OR NOT ?){labelled}"
                " ORDER BY created_at DESC, operation_id DESC LIMIT ?",
                (open_only, *label_args, limit),
            ).fetchall()
            if self._legacy:
                return readable(
                    rows, lambda row: legacy_record(self._legacy, row), lambda row: row[0]
                )
            return readable(rows, self._rows.record, lambda row: row[0])

    def heads(self) -> list[tuple[str, int, str]]:
        """See :meth:`Store.heads`."""
        with self._damage():
            if 0 < self._legacy <= 2:
                return legacy_heads(self._db)
            rows = self._db.execute(
                "SELECT operation_id, audit_seq, audit_head FROM operations ORDER BY operation_id"
            ).fetchall()
        return sorted((str(op), int(seq), str(head)) for op, seq, head in rows)

    # -- the push path ------------------------------------------------------------------

    def put_deliveries(self, deliveries: Sequence[InboundDelivery]) -> list[InboundDelivery | None]:
        """See :meth:`Store.put_deliveries` (one ``BEGIN IMMEDIATE`` transaction)."""
        if not deliveries:
            return []
        with self._transaction() as db:
            return [self._put_delivery(db, delivery) for delivery in deliveries]

    @staticmethod
    def _put_delivery(db: sqlite3.Connection, delivery: InboundDelivery) -> InboundDelivery | None:
        """Store one delivery in the caller's transaction (``None``: a duplicate)."""
        return _INBOX.put(_run(db), delivery)

    def claim_outbox(
        self,
        *,
        owner: str,
        now: datetime,
        lease_s: float,
        limit: int,
        channels: Sequence[Channel],
        operation_id: str | None = None,
    ) -> list[OutboxEntry]:
        """See :meth:`Store.claim_outbox` (one ``BEGIN IMMEDIATE`` transaction)."""
        if not channels:
            return []
        until = now + timedelta(seconds=lease_s)
        with self._transaction() as db:
            return _OUTBOX.claim(
                db,
                owner=owner,
                now=now,
                until=until,
                limit=limit,
                channels=channels,
                operation_id=operation_id,
            )

    def sql_tables(self) -> SQLAccess:
        """See :class:`~waitbound.stores._protocol.SQLTables` (a transaction is
        :meth:`_transaction`: ``BEGIN IMMEDIATE`` under the store's lock)."""
        return SQLAccess(SQLITE, self._transaction)

    def close(self) -> None:
        """Close the database connection (an open transaction is rolled back)."""
        self._closed = True
        self._db.close()


_CHARGE: Final = charge_sql("", "?")
"""A reserved request charged to the member's other waiting groups (``_groups``)."""

_AUDIT: Final = AuditRows(SQLITE)
_INBOX: Final = InboxRows(SQLITE)
_OUTBOX: Final = OutboxRows(SQLITE)

_HISTORY: Final = HistoryRows(
    "schedule_history", mark="?", instant=instant, read_instant=read_instant
)


def _run(db: sqlite3.Connection) -> Execute:
    """*db*'s ``execute`` as the history's statements run them."""
    return db.execute


def _push_writes(db: sqlite3.Connection, stored: Record) -> None:
    """The push path's part of a record write (see ``Store``), in its transaction.

    A record that neither expects webhooks nor owes a completion (most records) costs
    no statement at all.
    """
    found = webhook_key(stored)
    if found is not None:
        _INBOX.register(_run(db), found, stored.operation_id)
    entries = outbox_entries(stored, stored.finished_at or stored.created_at)
    if entries:
        _OUTBOX.add(_run(db), entries)
