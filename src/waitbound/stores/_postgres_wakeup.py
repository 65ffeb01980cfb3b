"""The PostgreSQL store's wake-ups: one ``LISTEN`` connection on :data:`NOTIFY_CHANNEL`,
opened at the first wait (see ``PostgresStore.wait_for_wakeup``)."""

from __future__ import annotations

from typing import Final

import anyio
import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

__all__ = ["NOTIFY_CHANNEL", "Wakeups"]

NOTIFY_CHANNEL: Final = "waitbound_wakeup"
"""The ``LISTEN``/``NOTIFY`` channel; a notification's payload is the schema's name."""


class Wakeups:
    """The wake-ups of one schema, through one listening connection (one wait at once).

    Args:
        conninfo: how to connect (the store's connection string).
        schema: the schema whose notifications wake a waiter.
    """

    def __init__(self, conninfo: str, schema: str) -> None:
        self._conninfo = conninfo
        self._schema = schema
        self._listener: psycopg.AsyncConnection[TupleRow] | None = None

    async def wait(self, timeout_s: float) -> bool:
        """See ``PostgresStore.wait_for_wakeup``."""
        clock = anyio.current_time
        end = clock() + max(0.0, timeout_s)
        try:
            listener = await self._listening()
            async for note in listener.notifies(timeout=max(0.0, timeout_s)):
                if note.payload == self._schema:
                    return True
                if clock() >= end:
                    break
            return False
        except (psycopg.Error, OSError):
            self.close()
            await anyio.sleep(max(0.0, end - clock()))
            return False

    async def _listening(self) -> psycopg.AsyncConnection[TupleRow]:
        if self._listener is None or self._listener.closed:
            self._listener = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
            await self._listener.execute(
                sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL))
            )
        return self._listener

    def close(self) -> None:
        """Drop the listening connection (the next wait opens another)."""
        if self._listener is not None:
            self._listener.pgconn.finish()
            self._listener = None
