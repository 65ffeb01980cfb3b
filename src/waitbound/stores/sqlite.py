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
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

from waitbound._audit import AuditEvent, StoredAuditEvent
from waitbound._clock import utc
from waitbound._errors import ConflictError, SchemaVersionError, StoreError, UsageError
from waitbound._history import Evidence, ScheduleSummary
from waitbound._metrics import store_transaction
from waitbound._notices import outbox_entries
from waitbound._private_dirs import make_private_dirs
from waitbound._push import Channel, InboundDelivery, OutboxEntry, OutboxStatus
from waitbound._record import Phase, Record
from waitbound.stores._calendar_rows import CALENDAR_DDL, CalendarRows
from waitbound.stores._codec import brief, from_sqlite, from_text, load_object, to_sqlite
from waitbound.stores._group_charges import charge_sql, charges
from waitbound.stores._history_rows import Execute, HistoryRows
from waitbound.stores._protocol import (
    DRIVABLE_PHASES,
    AuditCursor,
    ClaimsByReservation,
    Planner,
    Write,
    advance,
    audit_rows,
    decode_record,
    delivery_of,
    encode_json,
    outbox_entry_of,
    outcomes,
    planned,
    readable,
    webhook_key,
)
from waitbound.stores._rows import (
    PART_COLUMNS,
    QUERY_COLUMNS,
    ROW_COLUMNS,
    RecordRows,
    Row,
)
from waitbound.stores._rows_v4 import ROW_COLUMNS as V4_ROW_COLUMNS
from waitbound.stores._rows_v4 import V5_DROPPED, record_of_v4_row
from waitbound.stores._sqlite_schema import ADDED_IN_5, MIGRATIONS, SCHEMA_VERSION, TABLES

__all__ = ["SCHEMA_VERSION", "NotAStoreError", "SQLiteStore", "StoreNotFoundError"]


class StoreNotFoundError(StoreError, UsageError):
    """A store opened with ``create=False`` (or read-only) does not exist.

    Nothing was created: neither the file nor its folder.
    """


class NotAStoreError(StoreError, UsageError):
    """The file is not a waitbound store: not a SQLite database, or one whose tables
    are not waitbound's (or whose waitbound schema version is missing). Nothing in it
    was changed."""


class SQLiteStore(ClaimsByReservation):
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
        create = create and not read_only
        if not create and not self.path.exists():
            raise StoreNotFoundError(
                f"store {self.path} does not exist (nothing was created); check the path, "
                "or record an operation there first (waitbound wait, submit or run)"
            )
        try:
            if create:
                _create_private(self.path)
            self._db = sqlite3.connect(
                _uri(self.path, create=create, read_only=read_only),
                timeout=timeout_s,
                isolation_level=None,
                check_same_thread=False,
                uri=True,
            )
        except (OSError, sqlite3.Error) as exc:
            if self.path.is_dir() or not _folder_possible(self.path):
                raise NotAStoreError(
                    f"store {self.path}: cannot open it ({_why(exc)}); name a file"
                ) from None
            raise StoreError(f"store {self.path}: cannot open it ({_why(exc)})") from None
        self._applied: list[int] = []
        self._rows = RecordRows(_instant)
        self._pending_rows: list[tuple[Record, Row]] = []
        """Rows written in the open transaction (see :meth:`_transaction`)."""
        self._calendar = CalendarRows("pace_calendar", mark="?")
        try:
            found = self._check_ours()
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

    def _check_ours(self) -> int:
        """Refuse a file that is not a waitbound store; return its schema version (0: a
        fresh, empty file).

        Runs before anything is written, so a foreign database is left exactly as it was.
        """
        (found,) = self._db.execute("PRAGMA user_version").fetchone()
        if found > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"store {self.path} has schema {found}, newer than this waitbound "
                f"understands ({SCHEMA_VERSION}); upgrade waitbound to use it"
            )
        tables = {
            name
            for (name,) in self._db.execute(
                "SELECT name FROM sqlite_master"
                " WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!'"
            )
        }
        if found == 0 and not tables:
            if self.read_only:
                raise NotAStoreError(
                    f"store {self.path} is empty: it holds no waitbound store; check the path"
                )
            return 0
        expected = TABLES[found or SCHEMA_VERSION]
        foreign = sorted(tables - expected)
        if foreign:
            raise NotAStoreError(
                f"store {self.path} is a SQLite database but not a waitbound store (it has "
                f"table {foreign[0]!r}); name another file (nothing in it was changed)"
            )
        if found == SCHEMA_VERSION:
            tables |= ADDED_IN_5
        if found == 0 or tables != expected:
            missing = (
                "its schema version" if found == 0 else f"table {sorted(expected - tables)[0]!r}"
            )
            raise NotAStoreError(
                f"store {self.path} is not a waitbound store ({missing} is missing); "
                "name another file (nothing in it was changed)"
            )
        return int(found)

    def _migrate(self) -> list[int]:
        """Apply the pending migrations (one transaction, the version included); return
        their versions.

        The version is read again under the write lock: another process opening the
        same file at the same time may have applied them already.
        """
        with self._transaction() as db:
            (found,) = db.execute("PRAGMA user_version").fetchone()
            pending = list(range(int(found) + 1, SCHEMA_VERSION + 1))
            for version in pending:
                for statement in MIGRATIONS[version - 1].split(";"):
                    if statement.strip():
                        db.execute(statement)
                if version == 5:
                    self._rewrite_v5(db, was=int(found))
            if pending:
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return pending

    def _rewrite_v5(self, db: sqlite3.Connection, *, was: int) -> None:
        """Schema 5's row rewrite: read every record in the format the file had
        (schema *was*: whole-record JSON up to 2, the split row of 3 and 4), write it as
        its parts, then drop the columns schema 5 no longer has. (An upgrade from 2
        skips schema 3's own split: each row is read once and written once.)"""
        if was <= 2:
            rows = db.execute("SELECT operation_id, data FROM operations").fetchall()
        else:
            rows = db.execute(f"SELECT {V4_ROW_COLUMNS} FROM operations").fetchall()
        for found in rows:
            operation_id = found[0]
            try:
                record = decode_record(found[1]) if was <= 2 else record_of_v4_row(found)
            except StoreError as exc:
                raise StoreError(
                    f"store {self.path}: operation {operation_id!r} cannot be upgraded ({exc}); "
                    "nothing was changed"
                ) from None
            row = self._rows.row(record, replaces=0)
            db.execute(_update(row.changed), (*row.query, *row.texts, operation_id, record.version))
        for column in V5_DROPPED:
            db.execute(f"ALTER TABLE operations DROP COLUMN {column}")

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
                    _INSERT,
                    (stored.operation_id, *row.query, *row.texts, _instant(stored.created_at)),
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
                    f"SELECT {self._legacy_columns} FROM operations WHERE operation_id = ?",
                    (operation_id,),
                ).fetchone()
                return self._legacy_record(row) if row else None
            row = self._db.execute(_GET, (operation_id,)).fetchone()
            return self._rows.record(row) if row else None

    @property
    def _legacy_columns(self) -> str:
        """The columns a record is read from in an older file (read-only)."""
        return "operation_id, data" if self._legacy <= 2 else V4_ROW_COLUMNS

    def _legacy_record(self, row: Sequence[Any]) -> Record:
        """A record read from an older file's row (read as :attr:`_legacy_columns`)."""
        return decode_record(row[1]) if self._legacy <= 2 else record_of_v4_row(row)

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
            _update(row.changed), (*row.query, *row.texts, stored.operation_id, replaces)
        )
        if cursor.rowcount != 1:
            raise ConflictError(stored.operation_id, replaces)
        SQLiteStore._append(db, sealed)

    @staticmethod
    def _append(db: sqlite3.Connection, sealed: Sequence[StoredAuditEvent]) -> None:
        db.executemany(
            "INSERT INTO audit_events (operation_id, seq, at, kind, summary, data, prev_hash, hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            audit_rows(sealed, datetime.isoformat),
        )

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
        stamp = _instant(now)
        labelled, label_args = _label_filter(label_prefix)
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
        stamp = _instant(now)
        labelled, label_args = _label_filter(label_prefix)
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
        return (_moment(earliest) if earliest else None), [owner for (owner,) in holders]

    def schedule_history(self, key: str) -> list[Evidence]:
        """See :meth:`Store.schedule_history`."""
        if self._legacy:
            return []
        with self._damage():
            return _HISTORY.history(_run(self._db), key)

    def history_version(self, key: str) -> int:
        """See :meth:`Store.history_version`."""
        if self._legacy:
            return 0
        with self._damage():
            return _HISTORY.version(_run(self._db), key)

    def schedules(self) -> list[ScheduleSummary]:
        """See :meth:`Store.schedules`."""
        if self._legacy:
            return []
        with self._damage():
            return _HISTORY.summaries(_run(self._db))

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
            return self._calendar.pace(
                _run(db),
                origin,
                planned_at,
                latest_at=latest_at,
                now=now,
                rng_offset=rng_offset,
            )

    def calendar_size(self) -> int:
        """See :meth:`Store.calendar_size`."""
        if self._legacy:
            return 0
        with self._damage():
            return self._calendar.size(_run(self._db))

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

    def audit(self, operation_id: str) -> list[StoredAuditEvent]:
        """See :meth:`Store.audit`."""
        with self._damage():
            rows = self._db.execute(
                "SELECT seq, at, kind, summary, data, prev_hash, hash FROM audit_events"
                " WHERE operation_id = ? ORDER BY seq",
                (operation_id,),
            ).fetchall()
            return [_audit_event(operation_id, row) for row in rows]

    def recent(
        self, *, label_prefix: str = "", limit: int = 50, open_only: bool = False
    ) -> list[Record]:
        """See :meth:`Store.recent`."""
        columns = self._legacy_columns if self._legacy else ROW_COLUMNS
        # none: no row's JSON is read
        labelled, label_args = _label_filter(label_prefix, "data" if self._legacy else "contract")
        with self._damage():
            rows = self._db.execute(
                f"SELECT {columns} FROM operations WHERE (outcome IS NULL OR NOT ?){labelled}"
                " ORDER BY created_at DESC, operation_id DESC LIMIT ?",
                (open_only, *label_args, limit),
            ).fetchall()
            if self._legacy:
                return readable(rows, self._legacy_record, lambda row: row[0])
            return readable(rows, self._rows.record, lambda row: row[0])

    def heads(self) -> list[tuple[str, int, str]]:
        """See :meth:`Store.heads`."""
        with self._damage():
            if 0 < self._legacy <= 2:
                found = []
                for operation_id, text in self._db.execute(
                    "SELECT operation_id, data FROM operations ORDER BY operation_id"
                ).fetchall():
                    try:
                        record = decode_record(text)
                    except StoreError:
                        found.append((operation_id, 0, ""))
                        continue
                    found.append((operation_id, record.audit_seq, record.audit_head))
                return found
            rows = self._db.execute(
                "SELECT operation_id, audit_seq, audit_head FROM operations ORDER BY operation_id"
            ).fetchall()
        return sorted((str(op), int(seq), str(head)) for op, seq, head in rows)

    # -- the push path ------------------------------------------------------------------

    def put_delivery(self, delivery: InboundDelivery) -> InboundDelivery | None:
        """See :meth:`Store.put_delivery` (one ``BEGIN IMMEDIATE`` transaction)."""
        with self._transaction() as db:
            return self._put_delivery(db, delivery)

    def put_deliveries(self, deliveries: Sequence[InboundDelivery]) -> list[InboundDelivery | None]:
        """See :meth:`Store.put_deliveries` (one ``BEGIN IMMEDIATE`` transaction)."""
        if not deliveries:
            return []
        with self._transaction() as db:
            return [self._put_delivery(db, delivery) for delivery in deliveries]

    @staticmethod
    def _put_delivery(db: sqlite3.Connection, delivery: InboundDelivery) -> InboundDelivery | None:
        """Store one delivery in the caller's transaction (``None``: a duplicate)."""
        row = db.execute(
            "SELECT operation_id FROM webhook_jobs WHERE provider = ? AND job_id = ?",
            (delivery.provider, to_sqlite(delivery.job_id)),
        ).fetchone()
        matched: str | None = row[0] if row else None
        cursor = db.execute(
            "INSERT INTO inbox (provider, webhook_id, received_at, job_id, event_type,"
            " authoritative, payload, operation_id, applied_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (provider, webhook_id) DO NOTHING",
            (
                delivery.provider,
                to_sqlite(delivery.webhook_id),
                _instant(delivery.received_at),
                to_sqlite(delivery.job_id),
                to_sqlite(delivery.event_type),
                delivery.authoritative,
                encode_json(delivery.payload),
                matched,
                _instant(delivery.applied_at),
            ),
        )
        if cursor.rowcount != 1:
            return None
        return replace(delivery, operation_id=matched)

    def pending_deliveries(self, *, limit: int) -> list[InboundDelivery]:
        """See :meth:`Store.pending_deliveries`."""
        with self._damage():
            rows = self._db.execute(
                f"SELECT {_INBOX_COLUMNS} FROM inbox"
                " WHERE operation_id IS NOT NULL AND applied_at IS NULL"
                " ORDER BY received_at, webhook_id LIMIT ?",
                (limit,),
            ).fetchall()
            return [delivery_of(row, _moment, from_sqlite) for row in rows]

    def mark_applied(self, provider: str, webhook_id: str, at: datetime) -> bool:
        """See :meth:`Store.mark_applied`."""
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE inbox SET applied_at = ? WHERE provider = ? AND webhook_id = ?"
                " AND applied_at IS NULL",
                (_instant(at), provider, to_sqlite(webhook_id)),
            )
            return cursor.rowcount == 1

    def inbox(
        self, *, provider: str | None = None, operation_id: str | None = None, limit: int = 100
    ) -> list[InboundDelivery]:
        """See :meth:`Store.inbox`."""
        where, args = _filters(provider=provider, operation_id=operation_id)
        with self._damage():
            rows = self._db.execute(
                f"SELECT {_INBOX_COLUMNS} FROM inbox{where}"
                " ORDER BY received_at DESC, webhook_id DESC, provider DESC LIMIT ?",
                (*args, limit),
            ).fetchall()
            return [delivery_of(row, _moment, from_sqlite) for row in rows]

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
        stamp = _instant(now)
        until = now + timedelta(seconds=lease_s)
        marks = ", ".join("?" for _ in channels)
        only = "" if operation_id is None else " AND operation_id = ?"
        only_args = () if operation_id is None else (operation_id,)
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT {_OUTBOX_COLUMNS} FROM outbox"
                f" WHERE status = ? AND channel IN ({marks}) AND next_attempt_at <= ?"
                f" AND (lease_expires_at IS NULL OR lease_expires_at <= ?){only}"
                " ORDER BY next_attempt_at, delivery_id LIMIT ?",
                (
                    OutboxStatus.PENDING.value,
                    *(c.value for c in channels),
                    stamp,
                    stamp,
                    *only_args,
                    limit,
                ),
            ).fetchall()
            taken = [
                replace(
                    outbox_entry_of(row, _moment, from_sqlite),
                    lease_owner=owner,
                    lease_expires_at=until,
                )
                for row in rows
            ]
            db.executemany(
                "UPDATE outbox SET lease_owner = ?, lease_expires_at = ? WHERE delivery_id = ?",
                [(owner, _instant(until), e.delivery_id) for e in taken],
            )
        return taken

    def settle_outbox(self, entry: OutboxEntry) -> bool:
        """See :meth:`Store.settle_outbox`."""
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE outbox SET status = ?, attempts = ?, next_attempt_at = ?,"
                " delivered_at = ?, last_error = ?, lease_owner = NULL, lease_expires_at = NULL"
                " WHERE delivery_id = ? AND status = ? AND lease_owner IS ?",
                (
                    entry.status.value,
                    entry.attempts,
                    _instant(entry.next_attempt_at),
                    _instant(entry.delivered_at),
                    to_sqlite(entry.last_error),
                    entry.delivery_id,
                    OutboxStatus.PENDING.value,
                    entry.lease_owner,
                ),
            )
            return cursor.rowcount == 1

    def add_outbox(self, entry: OutboxEntry) -> OutboxEntry:
        """See :meth:`Store.add_outbox`."""
        with self._transaction() as db:
            if not _insert_outbox(db, [entry]):
                raise UsageError(f"delivery {entry.delivery_id!r} exists already")
        return entry

    def outbox(
        self,
        *,
        operation_id: str | None = None,
        status: OutboxStatus | None = None,
        limit: int = 100,
    ) -> list[OutboxEntry]:
        """See :meth:`Store.outbox`."""
        where, args = _filters(
            operation_id=operation_id, status=status.value if status is not None else None
        )
        with self._damage():
            rows = self._db.execute(
                f"SELECT {_OUTBOX_COLUMNS} FROM outbox{where}"
                " ORDER BY created_at DESC, delivery_id DESC LIMIT ?",
                (*args, limit),
            ).fetchall()
            return [outbox_entry_of(row, _moment, from_sqlite) for row in rows]

    def get_outbox(self, delivery_id: str) -> OutboxEntry | None:
        """See :meth:`Store.get_outbox`."""
        with self._damage():
            row = self._db.execute(
                f"SELECT {_OUTBOX_COLUMNS} FROM outbox WHERE delivery_id = ?", (delivery_id,)
            ).fetchone()
            return outbox_entry_of(row, _moment, from_sqlite) if row else None

    def audit_after(
        self, cursor: AuditCursor | None, *, label_prefix: str = "", limit: int = 500
    ) -> list[StoredAuditEvent]:
        """See :meth:`Store.audit_after`.

        ``at`` is compared as text: instants are stored as UTC ISO 8601, which sorts as
        the instants do (see the module's docstring), and the cursor is written alike.
        """
        conditions: list[str] = []
        args: list[object] = []
        joined = ""
        if label_prefix:  # the unfiltered stream reads no record's JSON
            joined = " JOIN operations AS o ON o.operation_id = e.operation_id"
            conditions.append("substr(coalesce(json_extract(o.contract, '$.label'), ''), 1, ?) = ?")
            args += [len(label_prefix), label_prefix]
        if cursor is not None:
            conditions.append("(e.at, e.operation_id, e.seq) > (?, ?, ?)")
            args += [_instant(cursor[0]), cursor[1], cursor[2]]
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        with self._damage():
            rows = self._db.execute(
                "SELECT e.operation_id, e.seq, e.at, e.kind, e.summary, e.data, e.prev_hash,"
                f" e.hash FROM audit_events AS e{joined}{where}"
                " ORDER BY e.at, e.operation_id, e.seq LIMIT ?",
                (*args, limit),
            ).fetchall()
            return [_audit_event(row[0], row[1:]) for row in rows]

    def close(self) -> None:
        """Close the database connection (an open transaction is rolled back)."""
        self._closed = True
        self._db.close()


def _uri(path: Path, *, create: bool, read_only: bool) -> str:
    """The ``file:`` URI to open *path* with (RFC 8089; SQLite's URI parameters).

    Read-only: ``mode=ro``, plus ``immutable=1`` when the file or its folder is not
    writable (a WAL database cannot otherwise be read there: SQLite would need to
    create its ``-shm`` file).
    """
    uri = path.absolute().as_uri()
    if read_only:
        writable = os.access(path, os.W_OK) and os.access(path.absolute().parent, os.W_OK)
        return uri + ("?mode=ro" if writable else "?mode=ro&immutable=1")
    return uri + ("?mode=rwc" if create else "?mode=rw")


def _folder_possible(path: Path) -> bool:
    """Whether no ancestor of *path* is a file (a folder could be there)."""
    return all(parent.is_dir() or not parent.exists() for parent in path.absolute().parents)


def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def _instant(value: datetime | None) -> str | None:
    """An instant as UTC ISO 8601 text: such texts sort as their instants do."""
    return utc(value).isoformat() if value is not None else None


def _read_instant(value: object) -> datetime | None:
    return utc(datetime.fromisoformat(str(value))) if value is not None else None


_CHARGE: Final = charge_sql("", "?")
"""A reserved request charged to the member's other waiting groups (``_groups``)."""

_HISTORY: Final = HistoryRows(
    "schedule_history", mark="?", instant=_instant, read_instant=_read_instant
)


def _run(db: sqlite3.Connection) -> Execute:
    """*db*'s ``execute`` as the history's statements run them."""
    return db.execute


def _create_private(path: Path) -> None:
    """Create a missing store file readable by its owner only (``0600``; a missing
    folder and each missing parent ``0700``, whatever the umask), before SQLite opens
    it: SQLite gives the ``-wal`` and ``-shm`` files it makes beside it the database
    file's mode, so they are ``0600`` too. An existing file is left as it is."""
    make_private_dirs(path.parent)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _label_filter(label_prefix: str, column: str = "contract") -> tuple[str, tuple[object, ...]]:
    """The ``AND …`` clause (and its arguments) keeping operations whose label starts with
    *label_prefix* (read from the JSON *column*: the ``contract`` part; ``data`` in a
    file older than schema 5); nothing for the common, unfiltered look (it reads no
    record's JSON)."""
    if not label_prefix:
        return "", ()
    return (
        f" AND substr(coalesce(json_extract({column}, '$.label'), ''), 1, ?) = ?",
        (len(label_prefix), label_prefix),
    )


def _moment(text: str) -> datetime:
    """A stored instant (see :func:`_instant`) as aware UTC."""
    return utc(datetime.fromisoformat(text))


def _push_writes(db: sqlite3.Connection, stored: Record) -> None:
    """The push path's part of a record write (see ``Store``), in its transaction.

    A record that neither expects webhooks nor owes a completion (most records) costs
    no statement at all.
    """
    found = webhook_key(stored)
    if found is not None:
        key = (found[0], to_sqlite(found[1]))
        db.execute(
            "INSERT INTO webhook_jobs (provider, job_id, operation_id) VALUES (?, ?, ?)"
            " ON CONFLICT (provider, job_id) DO UPDATE SET operation_id = excluded.operation_id"
            " WHERE operation_id IS NOT excluded.operation_id",
            (*key, stored.operation_id),
        )
        db.execute(
            "UPDATE inbox SET operation_id = ?"
            " WHERE provider = ? AND job_id = ? AND operation_id IS NULL",
            (stored.operation_id, *key),
        )
    entries = outbox_entries(stored, stored.finished_at or stored.created_at)
    if entries:
        _insert_outbox(db, entries)


def _insert_outbox(db: sqlite3.Connection, entries: Sequence[OutboxEntry]) -> int:
    """Insert *entries*, leaving any whose ``delivery_id`` exists; return how many were new."""
    inserted = 0
    for e in entries:
        cursor = db.execute(
            f"INSERT INTO outbox ({_OUTBOX_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (delivery_id) DO NOTHING",
            (
                e.delivery_id,
                e.operation_id,
                e.channel.value,
                to_sqlite(e.target),
                encode_json(e.payload),
                _instant(e.created_at),
                _instant(e.next_attempt_at),
                e.status.value,
                e.attempts,
                _instant(e.delivered_at),
                to_sqlite(e.last_error),
                e.replay_of,
                e.lease_owner,
                _instant(e.lease_expires_at),
            ),
        )
        inserted += cursor.rowcount
    return inserted


def _filters(**equal: object) -> tuple[str, tuple[object, ...]]:
    """A ``WHERE`` clause for the columns given a value (``None``: not filtered on)."""
    given = {column: value for column, value in equal.items() if value is not None}
    if not given:
        return "", ()
    return " WHERE " + " AND ".join(f"{column} = ?" for column in given), tuple(given.values())


_INSERT: Final = (
    f"INSERT INTO operations (operation_id, {', '.join(QUERY_COLUMNS)},"
    f" {', '.join(PART_COLUMNS)}, created_at)"
    " VALUES (" + ", ".join("?" for _ in range(len(QUERY_COLUMNS) + len(PART_COLUMNS) + 2)) + ")"
)
_GET: Final = f"SELECT {ROW_COLUMNS} FROM operations WHERE operation_id = ?"


@functools.cache
def _update(changed: tuple[int, ...]) -> str:
    """The compare-and-swap ``UPDATE`` of one row: the query columns and the parts at
    the indices *changed* (one statement text per set of parts; SQLite keeps each
    prepared)."""
    sets = [f"{column} = ?" for column in QUERY_COLUMNS]
    sets += [f"{PART_COLUMNS[index]} = ?" for index in changed]
    return f"UPDATE operations SET {', '.join(sets)} WHERE operation_id = ? AND version = ?"


_INBOX_COLUMNS: Final = (
    "provider, webhook_id, received_at, job_id, event_type, authoritative, payload,"
    " operation_id, applied_at"
)

_OUTBOX_COLUMNS: Final = (
    "delivery_id, operation_id, channel, target, payload, created_at, next_attempt_at,"
    " status, attempts, delivered_at, last_error, replay_of, lease_owner, lease_expires_at"
)


def _audit_event(operation_id: str, row: Any) -> StoredAuditEvent:
    """An ``audit_events`` row (seq, at, kind, summary, data, prev_hash, hash) as a
    stored event of *operation_id*."""
    seq, at, kind, summary, data, prev_hash, digest = row
    return StoredAuditEvent(
        operation_id=operation_id,
        seq=seq,
        event=AuditEvent(
            at=_moment(at), kind=kind, summary=from_text(summary), data=load_object(data)
        ),
        prev_hash=prev_hash,
        hash=digest,
    )
