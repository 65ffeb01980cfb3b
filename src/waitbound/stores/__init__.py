"""Stores: where operations and their audit logs live.

``memory`` for tests, SQLite (the embedded default), and PostgreSQL for many workers
on many machines (``waitbound.stores.postgres``, the ``postgres`` extra), all behind one
:class:`Store` protocol. See ``docs/stores.md``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import platformdirs

from waitbound._base import _audit_key, _errors
from waitbound.stores._protocol import Store
from waitbound.stores.memory import MemoryStore
from waitbound.stores.sqlite import SCHEMA_VERSION as SQLITE_SCHEMA_VERSION
from waitbound.stores.sqlite import NotAStoreError, SQLiteStore, StoreNotFoundError

__all__ = [
    "MemoryStore",
    "NotAStoreError",
    "SQLiteStore",
    "SchemaUpgrade",
    "Store",
    "StoreNotFoundError",
    "default_store_path",
    "is_postgres_dsn",
    "open_store",
    "upgrade_store",
]

STORE_ENV = "WAITBOUND_STORE"

_POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")
_POSTGRES_EXTRA: Final = (
    "a PostgreSQL store needs psycopg 3 and psycopg-pool; "
    "install them with: pip install 'waitbound[postgres]'"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaUpgrade:
    """What :func:`upgrade_store` did.

    Attributes:
        store: the store, as a message names it (a DSN's password is ``***``).
        applied: the schema versions applied now, oldest first (empty: nothing to do).
        version: the store's schema version afterwards.
    """

    store: str
    applied: tuple[int, ...]
    version: int


def default_store_path() -> Path:
    """The default SQLite file: ``$WAITBOUND_STORE``, else the user's state directory.

    The state directory is platformdirs' ``user_state_path("waitbound")``
    (``~/.local/state/waitbound`` on Linux).
    """
    configured = os.environ.get(STORE_ENV)
    if configured:
        return Path(configured)
    return platformdirs.user_state_path("waitbound") / "waitbound.db"


def is_postgres_dsn(spec: str | Path | None) -> bool:
    """Whether *spec* names a PostgreSQL store (``postgresql://…`` or ``postgres://…``)."""
    return isinstance(spec, str) and spec.strip().startswith(_POSTGRES_SCHEMES)


@contextmanager
def _postgres_extra() -> Iterator[None]:
    """Turn a missing psycopg into a UsageError naming the extra to install."""
    try:
        yield
    except ImportError as exc:
        if (exc.name or "").startswith("waitbound"):
            raise
        raise _errors.UsageError(_POSTGRES_EXTRA) from None


def open_store(
    spec: str | Path | None = None,
    *,
    create: bool = True,
    read_only: bool = False,
    audit_key: bytes | None = None,
) -> Store:
    """Open a store from a spec: ``"memory:"``, a PostgreSQL DSN, a SQLite file path, or
    ``None`` (the default SQLite file, see :func:`default_store_path`).

    A spec starting with ``postgresql://`` or ``postgres://`` opens a
    ``PostgresStore`` (schema ``waitbound``); it must have been prepared with
    ``waitbound db upgrade``. A SQLite file is created and brought up to date on open
    unless ``create`` is false.

    Args:
        spec: which store.
        create: whether a missing SQLite file (and its folder) may be created. Only a
            caller that records operations should create a store; ``False`` refuses a
            missing file with :class:`StoreNotFoundError` and creates nothing.
        read_only: open a SQLite file for reading only (see :class:`SQLiteStore`);
            implies ``create=False``. A read-only store, or a read-only copy kept for
            audit, can then be read. PostgreSQL and memory stores ignore it.
        audit_key: the key that signs every chain head this store writes (see
            ``docs/audit.md``); ``None`` means the environment's key, if any
            (``$WAITBOUND_AUDIT_KEY_FILE`` or ``$WAITBOUND_AUDIT_KEY``, see
            :func:`waitbound.load_audit_key`): every writer that opens its store here
            signs with the same key.

    Raises:
        UsageError: an empty spec, a DSN while psycopg is not installed, or an audit
            key in the environment that cannot be used (unreadable, too short).
        StoreNotFoundError: ``create`` is false (or ``read_only`` true) and the SQLite
            file does not exist.
        NotAStoreError: the file is not a waitbound store (e.g. another program's
            SQLite database); nothing in it is changed.
        StoreError: the store cannot be opened (for PostgreSQL also: its schema is
            missing or older than this waitbound's).
        SchemaVersionError: the store was written by a newer waitbound.
    """
    if spec is None:
        spec = default_store_path()
    if str(spec).strip() == "":
        raise _errors.UsageError("the store path is empty; give a file path or 'memory:'")
    key = audit_key if audit_key is not None else _audit_key.load_audit_key()
    if str(spec) == "memory:":
        return MemoryStore(audit_key=key)
    if is_postgres_dsn(spec):
        with _postgres_extra():
            from waitbound.stores.postgres import PostgresStore
        return PostgresStore(str(spec).strip(), audit_key=key)
    return SQLiteStore(Path(spec), create=create, read_only=read_only, audit_key=key)


def upgrade_store(
    spec: str | Path | None = None, *, schema: str | None = None, create: bool = True
) -> SchemaUpgrade:
    """Bring a durable store's schema up to this waitbound's version.

    For PostgreSQL, every pending migration is applied in one transaction under an
    advisory lock (a concurrent upgrade waits, then has nothing to do); the schema
    (default ``waitbound``) is created when missing. A SQLite file is already brought
    up to date whenever it is opened.

    Args:
        spec: as for :func:`open_store` (``"memory:"`` has no schema and is refused).
        schema: the PostgreSQL schema; ``None`` means ``waitbound``.
        create: whether a missing SQLite file may be created (``False``: refused with
            :class:`StoreNotFoundError`, nothing created).

    Raises:
        UsageError: the memory store, ``schema`` for a SQLite file, or a DSN while
            psycopg is not installed.
        StoreNotFoundError: ``create`` is false and the SQLite file does not exist.
        NotAStoreError: the SQLite file is not a waitbound store.
        StoreError: the store cannot be reached or refused the change (nothing changed).
        SchemaVersionError: the store was written by a newer waitbound.
    """
    if spec is not None and str(spec) == "memory:":
        raise _errors.UsageError(
            "the memory store keeps nothing between runs; there is no schema to upgrade"
        )
    if is_postgres_dsn(spec):
        with _postgres_extra():
            from waitbound.stores import postgres
        dsn = str(spec).strip()
        chosen = schema if schema is not None else postgres.DEFAULT_SCHEMA
        applied = postgres.upgrade(dsn, schema=chosen)
        label = postgres.redact_dsn(dsn)
        if chosen != postgres.DEFAULT_SCHEMA:
            label += f" (schema {chosen})"
        return SchemaUpgrade(store=label, applied=tuple(applied), version=postgres.SCHEMA_VERSION)
    if schema is not None:
        raise _errors.UsageError("--schema applies to PostgreSQL stores only (postgresql://…)")
    if spec is None:
        spec = default_store_path()
    if str(spec).strip() == "":
        raise _errors.UsageError("the store path is empty; give a file path or a DSN")
    sqlite = SQLiteStore(Path(spec), create=create)
    try:
        applied = sqlite.upgrade()
    finally:
        sqlite.close()
    return SchemaUpgrade(
        store=str(sqlite.path), applied=tuple(applied), version=SQLITE_SCHEMA_VERSION
    )
