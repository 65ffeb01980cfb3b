"""Pruning the webhook inbox (``waitbound serve``'s ``[inbox] retention_days``): the
deliveries received before a cutoff that are done with — applied to their operation,
or never matched to one — are deleted; one that is matched and still waiting to be
applied is kept whatever its age. One small implementation per store, through the
store's own transactions (the records' ``Store`` protocol is unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from waitbound._clock import utc
from waitbound._errors import UsageError
from waitbound.stores._protocol import Store

__all__ = ["InboxCount", "prune_inbox"]


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxCount:
    """What a prune did: ``pruned`` deliveries deleted, ``kept`` left in the inbox."""

    pruned: int
    kept: int


def prune_inbox(store: Store, *, before: datetime) -> InboxCount:
    """Delete the inbox's deliveries received before *before* that were applied or never
    matched; count what is left.

    Raises:
        StoreError: the store failed (nothing is deleted).
        UsageError: a store kind that keeps no inbox this knows.
    """
    from waitbound.stores.memory import MemoryStore
    from waitbound.stores.sqlite import SQLiteStore

    cutoff = utc(before)
    if isinstance(store, MemoryStore):
        with store._lock:
            inbox = store._inbox
            gone = [
                key
                for key, d in inbox.items()
                if d.received_at < cutoff and (d.applied_at is not None or d.operation_id is None)
            ]
            for key in gone:
                del inbox[key]
            return InboxCount(pruned=len(gone), kept=len(inbox))
    done = "received_at < ? AND (applied_at IS NOT NULL OR operation_id IS NULL)"
    if isinstance(store, SQLiteStore):
        with store._transaction() as db:
            pruned = db.execute(f"DELETE FROM inbox WHERE {done}", (cutoff.isoformat(),))
            (kept,) = db.execute("SELECT count(*) FROM inbox").fetchone()
            return InboxCount(pruned=int(pruned.rowcount or 0), kept=int(kept))
    try:
        from waitbound.stores.postgres import PostgresStore
    except ImportError:  # psycopg is not installed: no such store either
        PostgresStore = None  # type: ignore[assignment,misc]
    if PostgresStore is not None and isinstance(store, PostgresStore):
        table = f'"{store.schema}".inbox'  # the schema name is checked (a-z0-9_)
        with store._transaction() as conn:
            cursor = conn.execute(
                f"DELETE FROM {table} WHERE {done.replace('?', '%s')}",
                (cutoff,),
            )
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            return InboxCount(pruned=int(cursor.rowcount or 0), kept=int(row[0]) if row else 0)
    raise UsageError(f"a {type(store).__name__} keeps no inbox this can prune")
