"""The embedded default store: one SQLite file (stdlib ``sqlite3``, WAL mode).

Records are rows with typed columns for what is queried (phase, next poll time,
lease) and a versioned JSON document for the rest. Audit events are rows in the same
database, appended in the same ``BEGIN IMMEDIATE`` transaction as the record change.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Final

from waitbound._audit import AuditEvent, StoredAuditEvent
from waitbound._clock import utc
from waitbound._errors import ConflictError, SchemaVersionError, StoreError, UsageError
from waitbound._record import Phase, Record
from waitbound.stores._protocol import (
    DRIVABLE_PHASES,
    advance,
    audit_rows,
    claimed,
    decode_record,
    encode_record,
)

__all__ = ["SCHEMA_VERSION", "NotAStoreError", "SQLiteStore", "StoreNotFoundError"]

SCHEMA_VERSION: Final = 1
_TABLES: Final = frozenset({"operations", "audit_events"})


class StoreNotFoundError(StoreError, UsageError):
    """A store opened with ``create=False`` (or read-only) does not exist.

    Nothing was created: neither the file nor its folder.
    """


class NotAStoreError(StoreError, UsageError):
    """The file is not a waitbound store: not a SQLite database, or one whose tables
    are not waitbound's (or whose waitbound schema version is missing). Nothing in it
    was changed."""


_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS operations (
    operation_id     TEXT PRIMARY KEY,
    version          INTEGER NOT NULL,
    phase            TEXT NOT NULL,
    outcome          TEXT,
    next_poll_at     TEXT NOT NULL,
    lease_owner      TEXT,
    lease_expires_at TEXT,
    created_at       TEXT NOT NULL,
    data             TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS operations_due ON operations (phase, next_poll_at);
CREATE TABLE IF NOT EXISTS audit_events (
    operation_id TEXT NOT NULL REFERENCES operations (operation_id),
    seq          INTEGER NOT NULL,
    at           TEXT NOT NULL,
    kind         TEXT NOT NULL,
    summary      TEXT NOT NULL,
    data         TEXT NOT NULL,
    prev_hash    TEXT NOT NULL,
    hash         TEXT NOT NULL,
    PRIMARY KEY (operation_id, seq)
);
"""


class SQLiteStore:
    """A :class:`~waitbound.stores.Store` in one SQLite file.

    Args:
        path: the database file.
        timeout_s: how long a write waits for another process's lock, in seconds.
        create: create the file (and its folder) when missing, and bring a fresh file
            up to the current schema. ``False``: a missing file is refused
            (:class:`StoreNotFoundError`) and nothing is created.
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
                self.path.parent.mkdir(parents=True, exist_ok=True)
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
        try:
            fresh = self._check_ours()
            if not read_only:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            if fresh:
                self._migrate()
        except BaseException as exc:
            self._db.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise NotAStoreError(
                    f"store {self.path}: cannot use it as a SQLite store ({exc})"
                ) from None
            raise

    def _check_ours(self) -> bool:
        """Refuse a file that is not a waitbound store; return whether it is fresh (empty).

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
            return True
        foreign = sorted(tables - _TABLES)
        if foreign:
            raise NotAStoreError(
                f"store {self.path} is a SQLite database but not a waitbound store (it has "
                f"table {foreign[0]!r}); name another file (nothing in it was changed)"
            )
        if found == 0 or tables != _TABLES:
            missing = (
                "its schema version" if found == 0 else f"table {sorted(_TABLES - tables)[0]!r}"
            )
            raise NotAStoreError(
                f"store {self.path} is not a waitbound store ({missing} is missing); "
                "name another file (nothing in it was changed)"
            )
        return False

    def _migrate(self) -> None:
        """Create the schema in a fresh file (one transaction, the version included)."""
        with self._transaction() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def upgrade(self) -> list[int]:
        """Apply pending schema migrations; return their versions.

        A SQLite file is brought to the current schema when it is opened, so there is
        never anything left to apply: this returns ``[]``. It exists so ``waitbound db
        upgrade`` treats both durable stores alike.
        """
        return []

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._damage():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                # SQLite may have rolled back itself (a full disk): then there is
                # nothing to roll back, and saying so would hide the real error. A
                # transaction cut off by Ctrl-C may be finalised only after the store is
                # closed (closing the connection already rolled it back).
                if not self._closed and self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

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
            raise StoreError(f"store {self.path}: a stored value is damaged ({exc})") from None

    def create(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.create`."""
        stored, sealed = advance(record, events, self._audit_key)
        try:
            with self._transaction() as db:
                db.execute(
                    "INSERT INTO operations (operation_id, version, phase, outcome, next_poll_at,"
                    " lease_owner, lease_expires_at, created_at, data)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*_columns(stored), stored.created_at.isoformat(), encode_record(stored)),
                )
                self._append(db, sealed)
        except sqlite3.IntegrityError:
            raise UsageError(f"operation {record.operation_id!r} exists already") from None
        return stored

    def get(self, operation_id: str) -> Record | None:
        """See :meth:`Store.get`."""
        with self._damage():
            row = self._db.execute(
                "SELECT data FROM operations WHERE operation_id = ?", (operation_id,)
            ).fetchone()
            return decode_record(row[0]) if row else None

    def save(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.save`."""
        stored, sealed = advance(record, events, self._audit_key)
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE operations SET version = ?, phase = ?, outcome = ?, next_poll_at = ?,"
                " lease_owner = ?, lease_expires_at = ?, data = ?"
                " WHERE operation_id = ? AND version = ?",
                (
                    *_columns(stored)[1:],
                    encode_record(stored),
                    record.operation_id,
                    record.version,
                ),
            )
            if cursor.rowcount != 1:
                raise ConflictError(record.operation_id, record.version)
            self._append(db, sealed)
        return stored

    @staticmethod
    def _append(db: sqlite3.Connection, sealed: Sequence[StoredAuditEvent]) -> None:
        db.executemany(
            "INSERT INTO audit_events (operation_id, seq, at, kind, summary, data, prev_hash, hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            audit_rows(sealed, datetime.isoformat),
        )

    def claim_due(
        self, *, owner: str, now: datetime, lease_s: float, limit: int, label_prefix: str = ""
    ) -> list[Record]:
        """See :meth:`Store.claim_due` (one ``BEGIN IMMEDIATE`` transaction)."""
        stamp = _instant(now)
        labelled = ""
        label_args: tuple[object, ...] = ()
        if label_prefix:  # the common, unfiltered claim reads no record's JSON
            labelled = " AND substr(coalesce(json_extract(data, '$.label'), ''), 1, ?) = ?"
            label_args = (len(label_prefix), label_prefix)
        taken = []
        with self._transaction() as db:
            rows = db.execute(
                "SELECT data FROM operations WHERE phase IN (?, ?, ?) AND next_poll_at <= ?"
                f" AND (lease_expires_at IS NULL OR lease_expires_at <= ?){labelled}"
                " ORDER BY next_poll_at LIMIT ?",
                (*DRIVABLE_PHASES, stamp, stamp, *label_args, limit),
            ).fetchall()
            for (text,) in rows:
                record = decode_record(text)
                stored, _ = advance(
                    claimed(record, owner=owner, now=now, lease_s=lease_s), [], self._audit_key
                )
                db.execute(
                    "UPDATE operations SET version = ?, lease_owner = ?, lease_expires_at = ?,"
                    " data = ? WHERE operation_id = ? AND version = ?",
                    (
                        stored.version,
                        stored.lease_owner,
                        _instant(stored.lease_expires_at),
                        encode_record(stored),
                        record.operation_id,
                        record.version,
                    ),
                )
                taken.append(stored)
        return taken

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
            return [
                StoredAuditEvent(
                    operation_id=operation_id,
                    seq=seq,
                    event=AuditEvent(
                        at=utc(datetime.fromisoformat(at)),
                        kind=kind,
                        summary=summary,
                        data=json.loads(data),
                    ),
                    prev_hash=prev_hash,
                    hash=digest,
                )
                for seq, at, kind, summary, data, prev_hash, digest in rows
            ]

    def recent(
        self, *, label_prefix: str = "", limit: int = 50, open_only: bool = False
    ) -> list[Record]:
        """See :meth:`Store.recent`."""
        with self._damage():
            rows = self._db.execute(
                "SELECT data FROM operations"
                " WHERE substr(coalesce(json_extract(data, '$.label'), ''), 1, ?) = ?"
                " AND (outcome IS NULL OR NOT ?)"
                " ORDER BY created_at DESC, operation_id DESC LIMIT ?",
                (len(label_prefix), label_prefix, open_only, limit),
            ).fetchall()
        return [decode_record(text) for (text,) in rows]

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


def _columns(record: Record) -> tuple[object, ...]:
    return (
        record.operation_id,
        record.version,
        record.phase.value,
        record.outcome.value if record.outcome else None,
        _instant(record.next_poll_at),
        record.lease_owner,
        _instant(record.lease_expires_at),
    )
