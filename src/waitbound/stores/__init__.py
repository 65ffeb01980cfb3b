"""Stores: where operations and their audit logs live.

``memory`` for tests, SQLite (the embedded default), and later PostgreSQL for many
workers, all behind one :class:`Store` protocol.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from waitbound import _errors
from waitbound.stores._protocol import Store
from waitbound.stores.memory import MemoryStore
from waitbound.stores.sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store", "default_store_path", "open_store"]

STORE_ENV = "WAITBOUND_STORE"


def default_store_path() -> Path:
    """The default SQLite file: ``$WAITBOUND_STORE``, else the user's state directory.

    The state directory is platformdirs' ``user_state_path("waitbound")``
    (``~/.local/state/waitbound`` on Linux).
    """
    configured = os.environ.get(STORE_ENV)
    if configured:
        return Path(configured)
    return platformdirs.user_state_path("waitbound") / "waitbound.db"


def open_store(spec: str | Path | None = None) -> Store:
    """Open a store from a spec: ``"memory:"``, a SQLite file path, or ``None`` (the default).

    Raises:
        StoreError: the store cannot be opened.
        SchemaVersionError: the store was written by a newer waitbound.
    """
    if spec is None:
        spec = default_store_path()
    if str(spec).strip() == "":
        raise _errors.UsageError("the store path is empty; give a file path or 'memory:'")
    if str(spec) == "memory:":
        return MemoryStore()
    return SQLiteStore(Path(spec))
