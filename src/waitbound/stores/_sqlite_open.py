"""Opening and upgrading the SQLite store's file: its ``file:`` URI, creating it
private, refusing a file that is not a store, applying the pending migrations of
``_sqlite_schema`` (schema 5's row rewrite included), and reading the records of an
older file opened read-only. ``stores/sqlite.py`` calls these when it opens a file."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any

from waitbound._base._errors import SchemaVersionError, StoreError
from waitbound._base._private_dirs import make_private_dirs
from waitbound._model._record import Record
from waitbound.stores._protocol import decode_record
from waitbound.stores._rows import RecordRows
from waitbound.stores._rows_v4 import ROW_COLUMNS as V4_ROW_COLUMNS
from waitbound.stores._rows_v4 import V5_DROPPED, record_of_v4_row
from waitbound.stores._sqlite_schema import ADDED_IN_5, MIGRATIONS, SCHEMA_VERSION, TABLES

__all__ = [
    "check_ours",
    "connect",
    "create_private",
    "folder_possible",
    "legacy_columns",
    "legacy_heads",
    "legacy_record",
    "migrate",
    "uri",
    "why",
]


def uri(path: Path, *, create: bool, read_only: bool) -> str:
    """The ``file:`` URI to open *path* with (RFC 8089; SQLite's URI parameters).

    Read-only: ``mode=ro``, plus ``immutable=1`` when the file or its folder is not
    writable (a WAL database cannot otherwise be read there: SQLite would need to
    create its ``-shm`` file).
    """
    found = path.absolute().as_uri()
    if read_only:
        writable = os.access(path, os.W_OK) and os.access(path.absolute().parent, os.W_OK)
        return found + ("?mode=ro" if writable else "?mode=ro&immutable=1")
    return found + ("?mode=rwc" if create else "?mode=rw")


def folder_possible(path: Path) -> bool:
    """Whether no ancestor of *path* is a file (a folder could be there)."""
    return all(parent.is_dir() or not parent.exists() for parent in path.absolute().parents)


def why(exc: BaseException) -> str:
    """What an open failed on, in a few words."""
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def create_private(path: Path) -> None:
    """Create a missing store file readable by its owner only (``0600``; a missing
    folder and each missing parent ``0700``, whatever the umask), before SQLite opens
    it: SQLite gives the ``-wal`` and ``-shm`` files it makes beside it the database
    file's mode, so they are ``0600`` too. An existing file is left as it is."""
    make_private_dirs(path.parent)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def connect(
    path: Path,
    *,
    create: bool,
    read_only: bool,
    timeout_s: float,
    missing: type[Exception],
    refused: type[Exception],
) -> sqlite3.Connection:
    """Open the store's file (created, private, when *create* and missing).

    Raises:
        missing: the file does not exist and may not be created (nothing was created).
        refused: *path* is a folder, or under a file.
        StoreError: the file cannot be opened.
    """
    if not create and not path.exists():
        raise missing(
            f"store {path} does not exist (nothing was created); check the path, "
            "or record an operation there first (waitbound wait, submit or run)"
        )
    try:
        if create:
            create_private(path)
        return sqlite3.connect(
            uri(path, create=create, read_only=read_only),
            timeout=timeout_s,
            isolation_level=None,
            check_same_thread=False,
            uri=True,
        )
    except (OSError, sqlite3.Error) as exc:
        if path.is_dir() or not folder_possible(path):
            raise refused(f"store {path}: cannot open it ({why(exc)}); name a file") from None
        raise StoreError(f"store {path}: cannot open it ({why(exc)})") from None


def legacy_columns(version: int) -> str:
    """The columns a record is read from in a file of an older schema *version*
    (opened read-only): whole-record JSON up to 2, the split row of 3 and 4."""
    return "operation_id, data" if version <= 2 else V4_ROW_COLUMNS


def legacy_record(version: int, row: Sequence[Any]) -> Record:
    """A record read from an older file's row (read as :func:`legacy_columns`)."""
    return decode_record(row[1]) if version <= 2 else record_of_v4_row(row)


def legacy_heads(db: sqlite3.Connection) -> list[tuple[str, int, str]]:
    """Every operation's audit head in a file of schema 1 or 2 (a record that cannot be
    read: no head, ``(id, 0, "")``)."""
    found = []
    for operation_id, text in db.execute(
        "SELECT operation_id, data FROM operations ORDER BY operation_id"
    ).fetchall():
        try:
            record = decode_record(text)
        except StoreError:
            found.append((operation_id, 0, ""))
            continue
        found.append((operation_id, record.audit_seq, record.audit_head))
    return found


def check_ours(
    db: sqlite3.Connection, path: Path, *, read_only: bool, refused: type[Exception]
) -> int:
    """Refuse a file that is not a waitbound store; return its schema version (0: a
    fresh, empty file); a file that is not one raises *refused*.

    Runs before anything is written, so a foreign database is left exactly as it was.
    """
    (found,) = db.execute("PRAGMA user_version").fetchone()
    if found > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"store {path} has schema {found}, newer than this waitbound "
            f"understands ({SCHEMA_VERSION}); upgrade waitbound to use it"
        )
    tables = {
        name
        for (name,) in db.execute(
            "SELECT name FROM sqlite_master"
            " WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!'"
        )
    }
    if found == 0 and not tables:
        if read_only:
            raise refused(f"store {path} is empty: it holds no waitbound store; check the path")
        return 0
    expected = TABLES[found or SCHEMA_VERSION]
    foreign = sorted(tables - expected)
    if foreign:
        raise refused(
            f"store {path} is a SQLite database but not a waitbound store (it has "
            f"table {foreign[0]!r}); name another file (nothing in it was changed)"
        )
    if found == SCHEMA_VERSION:
        tables |= ADDED_IN_5
    if found == 0 or tables != expected:
        missing = "its schema version" if found == 0 else f"table {sorted(expected - tables)[0]!r}"
        raise refused(
            f"store {path} is not a waitbound store ({missing} is missing); "
            "name another file (nothing in it was changed)"
        )
    return int(found)


def migrate(
    transaction: Callable[[], AbstractContextManager[sqlite3.Connection]],
    *,
    rows: RecordRows,
    update: Callable[[tuple[int, ...]], str],
    path: Path,
) -> list[int]:
    """Apply the pending migrations (one transaction, the version included); return
    their versions.

    The version is read again under the write lock: another process opening the
    same file at the same time may have applied them already. *update* is the
    record's compare-and-swap ``UPDATE`` for the parts changed (schema 5's rewrite).
    """
    with transaction() as db:
        (found,) = db.execute("PRAGMA user_version").fetchone()
        pending = list(range(int(found) + 1, SCHEMA_VERSION + 1))
        for version in pending:
            for statement in MIGRATIONS[version - 1].split(";"):
                if statement.strip():
                    db.execute(statement)
            if version == 5:
                _rewrite_v5(db, was=int(found), rows=rows, update=update, path=path)
        if pending:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return pending


def _rewrite_v5(
    db: sqlite3.Connection,
    *,
    was: int,
    rows: RecordRows,
    update: Callable[[tuple[int, ...]], str],
    path: Path,
) -> None:
    """Schema 5's row rewrite: read every record in the format the file had
    (schema *was*: whole-record JSON up to 2, the split row of 3 and 4), write it as
    its parts, then drop the columns schema 5 no longer has. (An upgrade from 2
    skips schema 3's own split: each row is read once and written once.)"""
    if was <= 2:
        found_rows = db.execute("SELECT operation_id, data FROM operations").fetchall()
    else:
        found_rows = db.execute(f"SELECT {V4_ROW_COLUMNS} FROM operations").fetchall()
    for found in found_rows:
        operation_id = found[0]
        try:
            record = decode_record(found[1]) if was <= 2 else record_of_v4_row(found)
        except StoreError as exc:
            raise StoreError(
                f"store {path}: operation {operation_id!r} cannot be upgraded ({exc}); "
                "nothing was changed"
            ) from None
        row = rows.row(record, replaces=0)
        db.execute(update(row.changed), (*row.query, *row.texts, operation_id, record.version))
    for column in V5_DROPPED:
        db.execute(f"ALTER TABLE operations DROP COLUMN {column}")
