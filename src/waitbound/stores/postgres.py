"""The PostgreSQL store, for many workers on many machines (psycopg 3, a connection pool).

Records are rows: one JSON column per part of the record (``waitbound.stores._rows``),
written only when the part changed, and typed columns for what is queried (phase, next
poll time, lease). Audit events are rows appended in
the same transaction as the record change. Workers claim due operations with
``SELECT … FOR UPDATE SKIP LOCKED``, so two workers never claim the same operation and
never wait on each other's claims.

The schema is versioned: :data:`MIGRATIONS` is applied by :func:`upgrade` (the
``waitbound db upgrade`` command), never by opening a store.

The JSON columns are ``json``, not ``jsonb``: ``json`` keeps the text exactly as
written, while ``jsonb`` turns ``1e+16`` into an integer and ``-0.0`` into ``0.0`` (which
breaks the audit chain's hashes) and refuses ``\\u0000`` in a string outright.

Around this module: its own statements in ``_postgres_sql``, its push path (advisory
locks, outbox claims) in ``_postgres_push``, its wake-ups in ``_postgres_wakeup``, its
schema and migrations in ``_postgres_schema``; the statements it shares with SQLite in
``_audit_rows``, ``_inbox_rows``, ``_outbox_rows``, ``_history_rows`` and
``_calendar_rows`` (see ``_sql_dialect``), and the methods over them in ``_sql_store``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Final

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from waitbound._base._clock import utc
from waitbound._base._errors import ConflictError, StoreError, UsageError
from waitbound._model._audit import AuditEvent, StoredAuditEvent
from waitbound._model._record import Record
from waitbound._observe._metrics import store_transaction
from waitbound.stores._audit_rows import AuditRows
from waitbound.stores._calendar_rows import CalendarRows
from waitbound.stores._group_charges import charges
from waitbound.stores._history_rows import HistoryRows
from waitbound.stores._inbox_rows import InboxRows
from waitbound.stores._outbox_rows import OutboxRows
from waitbound.stores._postgres_conn import (
    connection_info,
    dsn_secrets,
    failures,
    redact_dsn,
)
from waitbound.stores._postgres_push import PostgresPushPath
from waitbound.stores._postgres_schema import (
    DEFAULT_SCHEMA,
    MIGRATIONS,
    SCHEMA_VERSION,
    apply_migrations,
    checked_schema,
    ensure_calendar,
    newer_schema,
    schema_version,
    upgrade,
    where,
)
from waitbound.stores._postgres_sql import (
    QUERIES,
    pace_lock_key,
    q,
    run,
    write_query,
)
from waitbound.stores._postgres_wakeup import NOTIFY_CHANNEL, Wakeups
from waitbound.stores._protocol import (
    DRIVABLE_PHASES,
    ClaimsByReservation,
    Planner,
    Write,
    advance,
    outcomes,
    planned,
    readable,
)
from waitbound.stores._rows import RecordRows, Row
from waitbound.stores._sql_dialect import SQLAccess, postgres_dialect
from waitbound.stores._sql_store import SharedSQL

__all__ = [
    "DEFAULT_SCHEMA",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgresStore",
    "redact_dsn",
    "upgrade",
]


class PostgresStore(PostgresPushPath, SharedSQL, ClaimsByReservation):
    """A :class:`~waitbound.stores.Store` in a PostgreSQL schema, shared by many workers.

    Thread-safe: every call borrows a connection from a pool and is one transaction.
    Opening never changes the database: a schema that is missing or older than this
    waitbound's must first be brought up to date with :func:`upgrade`
    (``waitbound db upgrade --store DSN``).

    Args:
        dsn: a libpq connection string, ``postgresql://user@host:5432/dbname`` or
            ``host=… dbname=…`` (see the PostgreSQL manual, "Connection Strings").
            A password in it never appears in a message.
        schema: the PostgreSQL schema holding waitbound's tables.
        min_size: connections the pool keeps open.
        max_size: connections the pool opens at most; a call waits up to 30 s for one.
        connect_timeout_s: how long opening a connection may take, in seconds (unless
            the DSN sets ``connect_timeout`` itself).
        audit_key: the audit key; every write then signs the chain head it leaves
            (``Record.audit_mac``, see ``docs/audit.md``). ``None``: heads are not signed.
            It is kept in memory only: never stored, logged or shown.

    Raises:
        StoreError: the server cannot be reached, or the schema is missing or older
            than this waitbound's (the message says to run ``waitbound db upgrade``).
        SchemaVersionError: the schema was written by a newer waitbound.
        UsageError: an invalid schema name or pool size.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        min_size: int = 1,
        max_size: int = 8,
        connect_timeout_s: float = 10.0,
        audit_key: bytes | None = None,
    ) -> None:
        self._audit_key = audit_key
        if not 0 <= min_size <= max_size or max_size < 1:
            raise UsageError(
                f"pool sizes must satisfy 0 <= min_size <= max_size and max_size >= 1; "
                f"got min_size={min_size}, max_size={max_size}"
            )
        self.schema = checked_schema(schema)
        self.label = redact_dsn(dsn)
        """The DSN with its password replaced by ``***``, for messages."""
        self._secrets = dsn_secrets(dsn)
        conninfo = connection_info(dsn, connect_timeout_s, self.label, self._secrets)
        with failures(self.label, self._secrets), psycopg.connect(conninfo) as conn:
            found = schema_version(conn, self.schema)
        if found > SCHEMA_VERSION:
            raise newer_schema(self.label, self.schema, found)
        if found < SCHEMA_VERSION:
            hint = f"waitbound db upgrade --store {self.label}"
            if self.schema != DEFAULT_SCHEMA:
                hint += f" --schema {self.schema}"
            raise StoreError(
                f"store {where(self.label, self.schema)}: schema version {found} is older than "
                f"this waitbound's {SCHEMA_VERSION}; run `{hint}`"
            )
        ident = sql.Identifier(self.schema)
        self._sql = {name: sql.SQL(text).format(schema=ident) for name, text in QUERIES.items()}
        self._writes: dict[tuple[int, ...], sql.Composed] = {}
        """One write statement per set of parts written (``_postgres_sql.write_query``)."""
        self._dialect = postgres_dialect(self.schema)
        self._audit_rows = AuditRows(self._dialect)
        self._inbox_rows = InboxRows(self._dialect)
        self._outbox_rows = OutboxRows(self._dialect)
        self._history_rows = HistoryRows(
            f'"{self.schema}".schedule_history',  # a checked lowercase identifier
            mark="%s",
            instant=lambda at: at,
            read_instant=lambda at: utc(at) if isinstance(at, datetime) else None,
        )
        self._calendar_rows = CalendarRows(
            f'"{self.schema}".pace_calendar', mark="%s", keep_s=_CALENDAR_KEEP_S
        )
        self._calendar_ready = False
        """Whether the calendar table is known to exist (a schema-5 store made before
        it gets it at the first :meth:`pace`)."""
        self._pool: ConnectionPool[psycopg.Connection[TupleRow]] = ConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            open=False,
            # No check per borrow (a round trip each): a connection found broken fails
            # its one call with a StoreError and the pool replaces it for the next.
            # the hot statements run prepared; writes open their own transaction
            kwargs={"prepare_threshold": 0, "autocommit": True},
            name=f"waitbound:{self.schema}",
        )
        self._rows = RecordRows(lambda at: at)
        self._wakeups = Wakeups(conninfo, self.schema)
        try:
            with failures(self.label, self._secrets):
                self._pool.open(wait=True, timeout=max(connect_timeout_s, 1.0))
        except BaseException:
            self._pool.close()
            raise

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[TupleRow]]:
        """One pooled connection, one transaction: committed on success, else rolled back."""
        with (
            failures(self.label, self._secrets),
            store_transaction("postgresql"),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            yield conn

    @contextmanager
    def _read(self) -> Iterator[psycopg.Connection[TupleRow]]:
        """One pooled connection for ONE statement, in autocommit (no ``BEGIN`` and
        ``COMMIT`` round trips): a single statement is atomic and sees one snapshot."""
        with failures(self.label, self._secrets), self._pool.connection() as conn:
            yield conn

    _reading = _read

    def sql_tables(self) -> SQLAccess:
        """See :class:`~waitbound.stores._protocol.SQLTables` (a transaction is
        :meth:`_transaction`: one pooled connection, one transaction)."""
        return SQLAccess(self._dialect, self._transaction)

    def upgrade(self) -> list[int]:
        """Apply pending migrations; return their versions (see :func:`upgrade`).

        A store that opened is already current, so this returns ``[]`` unless another
        process changed the schema since; it exists so both durable stores answer it.
        """
        with self._transaction() as conn:
            return apply_migrations(conn, self.schema, self.label)

    def create(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.create`."""
        stored, sealed = advance(record, events, self._audit_key)
        row = self._rows.row(stored, replaces=0)
        with self._transaction() as conn:
            cursor = conn.execute(
                self._sql["insert"],
                (stored.operation_id, *row.query, *row.texts, stored.created_at),
            )
            if cursor.fetchone() is None:
                raise UsageError(f"operation {record.operation_id!r} exists already")
            self._append(conn, sealed)
            self._push_writes(conn, stored)
            if stored.phase.value in DRIVABLE_PHASES:
                conn.execute(self._sql["notify"], (NOTIFY_CHANNEL, self.schema))
        self._rows.written(stored, row)
        return stored

    def get(self, operation_id: str) -> Record | None:
        """See :meth:`Store.get`."""
        with self._read() as conn:
            row = conn.execute(self._sql["get"], (operation_id,)).fetchone()
            return self._rows.record(row) if row else None

    def save(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """See :meth:`Store.save` (``UPDATE … WHERE version = %s``, one transaction)."""
        stored, sealed = advance(record, events, self._audit_key)
        row = self._rows.row(stored, replaces=record.version)
        try:
            if self._has_push_writes(stored):
                with self._transaction() as conn:
                    self._write(conn, stored, row, sealed, replaces=record.version)
                    self._push_writes(conn, stored)
            else:  # one statement: its own transaction
                with self._read() as conn:
                    self._write(conn, stored, row, sealed, replaces=record.version)
        except BaseException:
            self._rows.forget(record.operation_id)
            raise
        self._rows.written(stored, row)
        return stored

    def save_many(self, items: Sequence[Write]) -> list[Record | ConflictError]:
        """See :meth:`Store.save_many` (one transaction; each item one statement,
        :meth:`_write`)."""
        if not items:
            return []
        with self._writing() as (conn, pending):
            return outcomes(self._write_all(conn, items, pending), items)

    @contextmanager
    def _writing(
        self,
    ) -> Iterator[tuple[psycopg.Connection[TupleRow], list[tuple[Record, Row]]]]:
        """A transaction whose written rows (the list it yields) enter the cold-part cache
        once it commits; if it does not, their operations leave the cache."""
        pending: list[tuple[Record, Row]] = []
        try:
            with self._transaction() as conn:
                yield conn, pending
        except BaseException:
            for stored, _ in pending:
                self._rows.forget(stored.operation_id)
            raise
        for stored, row in pending:
            self._rows.written(stored, row)

    def _write_all(
        self,
        conn: psycopg.Connection[TupleRow],
        items: Sequence[Write],
        pending: list[tuple[Record, Row]],
    ) -> list[Record | None]:
        """Write each item by compare-and-swap in the open transaction: the stored record,
        or ``None`` for a conflict (nothing of it written). Each item is :meth:`_write`'s
        one statement, plus the push path's for the (rare) records that expect webhooks
        or owe completions; the rows written are added to *pending*."""
        written: list[Record | None] = []
        for record, events in items:
            stored, sealed = advance(record, events, self._audit_key)
            row = self._rows.row(stored, replaces=record.version)
            try:
                self._write(conn, stored, row, sealed, replaces=record.version)
            except ConflictError:
                written.append(None)
                continue
            self._push_writes(conn, stored)
            pending.append((stored, row))
            written.append(stored)
        return written

    def _append(
        self, conn: psycopg.Connection[TupleRow], sealed: Sequence[StoredAuditEvent]
    ) -> None:
        if not sealed:
            return
        with conn.cursor() as cursor:
            cursor.executemany(q(self._audit_rows.append), self._audit_rows.rows(sealed))

    def _write(
        self,
        conn: psycopg.Connection[TupleRow],
        stored: Record,
        row: Row,
        sealed: Sequence[StoredAuditEvent],
        *,
        replaces: int,
    ) -> None:
        """Write one record by compare-and-swap on *replaces* (its stored version), in
        one statement (``_postgres_sql.write_query``): the query columns always, the parts
        that changed (``row.changed``), its *sealed* audit events, and
        ``NOTIFY`` (delivered at commit) when the write makes the operation due sooner
        than before (a decision resuming it, a webhook hint).

        Raises:
            ConflictError: the stored version is not *replaces* (nothing was written).
        """
        op = stored.operation_id
        rows = self._audit_rows.rows(sealed)
        columns = [[event[i] for event in rows] for i in range(8)]  # one array per column
        drivable = stored.phase.value in DRIVABLE_PHASES
        charged = charges([event.event for event in sealed])
        args = (
            op,
            *row.query,
            *row.texts,
            op,
            replaces,
            len(charged),
            len(charged),
            charged[0] if charged else "",
            op,
            *columns,
            drivable,
            list(DRIVABLE_PHASES),
            stored.next_poll_at,
            NOTIFY_CHANNEL,
            self.schema,
        )
        if conn.execute(self._write_sql(row.changed), args).fetchone() is None:
            raise ConflictError(op, replaces)

    def _write_sql(self, changed: tuple[int, ...]) -> sql.Composed:
        """The write statement for the parts *changed*, made once per set."""
        found = self._writes.get(changed)
        if found is None:
            found = sql.SQL(write_query(changed)).format(schema=sql.Identifier(self.schema))
            self._writes[changed] = found
        return found

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
        """See :meth:`Store.reserve_due` (``SELECT … FOR UPDATE SKIP LOCKED``, then the
        writes, one transaction): rows another worker is reserving are skipped, not
        waited for."""
        if limit < 0:
            raise UsageError(f"claim limit must be 0 or more; got {limit}")
        phases, gone = list(DRIVABLE_PHASES), sorted(gone_owners)
        with self._writing() as (conn, pending):
            if label_prefix:
                query = "reserve_due_labelled"
                args: tuple[object, ...] = (phases, now, now, gone, len(label_prefix), label_prefix)
            else:
                query, args = "reserve_due", (phases, now, now, gone)
            rows = conn.execute(self._sql[query], (*args, limit)).fetchall()
            due = (self._rows.record(found) for found in rows)
            writes = [w for w in (planned(r, owner, plan) for r in due) if w is not None]
            written = self._write_all(conn, writes, pending)
        return [stored for stored in written if stored is not None]

    def next_claimable(
        self, *, now: datetime, label_prefix: str = ""
    ) -> tuple[datetime | None, list[str]]:
        """See :meth:`Store.next_claimable`."""
        phases = list(DRIVABLE_PHASES)
        label: tuple[object, ...] = (len(label_prefix), label_prefix) if label_prefix else ()
        suffix = "_labelled" if label_prefix else ""
        with self._transaction() as conn:
            row = conn.execute(self._sql["next_claimable" + suffix], (phases, *label)).fetchone()
            holders = conn.execute(
                self._sql["holders" + suffix], (phases, now, now, *label)
            ).fetchall()
        earliest = row[0] if row is not None else None
        return (
            utc(earliest) if isinstance(earliest, datetime) else None,
            [str(owner) for (owner,) in holders],
        )

    def pending_summary(self) -> tuple[int, datetime | None]:
        """See :meth:`Store.pending_summary`."""
        with self._read() as conn:
            row = conn.execute(self._sql["summary"], (list(DRIVABLE_PHASES),)).fetchone()
        assert row is not None  # an aggregate always returns one row
        count, earliest = row
        assert isinstance(count, int)
        return count, utc(earliest) if isinstance(earliest, datetime) else None

    def recent(
        self, *, label_prefix: str = "", limit: int = 50, open_only: bool = False
    ) -> list[Record]:
        """See :meth:`Store.recent`."""
        args: tuple[object, ...]
        if label_prefix:
            query, args = "recent", (len(label_prefix), label_prefix, open_only, limit)
        else:
            query, args = "recent_all", (open_only, limit)
        with self._read() as conn:
            rows = conn.execute(self._sql[query], args).fetchall()
        return readable(rows, self._rows.record, lambda row: row[0])

    def heads(self) -> list[tuple[str, int, str]]:
        """See :meth:`Store.heads`."""
        with self._read() as conn:
            rows = conn.execute(self._sql["heads"]).fetchall()
        return sorted((str(op), int(seq), str(head)) for op, seq, head in rows)

    # -- the schedule history -----------------------------------------------------------

    def forget_schedule(self, key: str) -> int:
        """See :meth:`Store.forget_schedule`."""
        with self._read() as conn:
            return self._history_rows.forget(run(conn), key)

    # -- origin pacing ------------------------------------------------------------------

    def pace(
        self,
        origin: str,
        planned_at: datetime,
        *,
        latest_at: datetime,
        now: datetime,
        rng_offset: float,
    ) -> datetime:
        """See :meth:`Store.pace` (one transaction under the origin's advisory lock, so
        two workers pacing one origin take turns and never count a bucket twice over)."""
        if not self._calendar_ready:
            with self._transaction() as conn:
                ensure_calendar(conn, self.schema)
            self._calendar_ready = True
        with self._transaction() as conn:
            # The calendar only spreads polls (it bounds nothing), so its commit need
            # not wait for the disk: a crash may lose the last few counts (a slightly
            # emptier second), and the origin's lock is not held through an fsync.
            conn.execute(self._sql["pace_lock"], (pace_lock_key(self.schema, origin),))
            return self._calendar_rows.pace(
                run(conn),
                origin,
                planned_at,
                latest_at=latest_at,
                now=now,
                rng_offset=rng_offset,
            )

    async def wait_for_wakeup(self, timeout_s: float) -> bool:
        """Wait up to *timeout_s* seconds for a wake-up: a ``NOTIFY`` that this schema got
        an operation due sooner (one created, a decision resuming one, a webhook hint).

        The first call opens one more connection and ``LISTEN``s on
        :data:`NOTIFY_CHANNEL`; later notifications are kept by that connection until the
        next call reads them. Pass it as ``waitbound.work(wake=...)``: polling stays the
        fallback, so a lost notification costs at most the worker's ``idle_s``. One
        caller at a time per store (the listening connection runs one wait at once).

        Returns:
            ``True`` on a notification for this schema, ``False`` when the time ran out
            (also when listening failed: then it waits the whole *timeout_s* and tries
            to listen again on the next call).
        """
        return await self._wakeups.wait(timeout_s)

    def close(self) -> None:
        """Close the pool and its connections (the listening one included)."""
        self._wakeups.close()
        self._pool.close()


_CALENDAR_KEEP_S: Final = 300
"""Other origins' buckets are pruned once this many seconds old (a margin for the
workers' clock skew: the prune never touches a bucket a live transaction counts in)."""
