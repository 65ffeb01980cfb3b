"""Groups of operations waited on together, kept in the store (schema 5, tables
``op_groups`` and ``op_group_members``).

A group row holds what bounds the group as a whole (its deadline and request budget),
what it spent (``requests_used``: every request to its members while it waits,
whoever sends it, each counted and committed before it is sent), and how it ended:
``waiting``, ``done`` (the members it waited for ended) or ``stopped`` (its own bound
stopped it; ``reason`` is ``deadline_exceeded`` or ``request_budget_exhausted``). Its
members are listed in order. Nothing in a group is a secret. One small implementation
per store, reached with :func:`groups_of` (the records' ``Store`` protocol is
unchanged), as the sign-in sessions are. What a record write charges to the groups of
its operation (another process's requests) is ``waitbound.stores._group_charges``.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, Literal, Protocol

from waitbound._base._clock import utc
from waitbound._base._errors import StoreError, UsageError
from waitbound.stores._group_charges import MEMORY_GROUPS
from waitbound.stores._protocol import SQLTables, Store
from waitbound.stores._sql_dialect import SQLAccess

__all__ = [
    "GROUP_KINDS",
    "GROUP_STATES",
    "GroupKind",
    "GroupRow",
    "GroupState",
    "GroupStore",
    "groups_of",
    "is_group_id",
    "new_group_id",
]

GroupKind = Literal["all", "any", "as_completed"]
GroupState = Literal["waiting", "done", "stopped"]
GROUP_KINDS: Final = ("all", "any", "as_completed")
GROUP_STATES: Final = ("waiting", "done", "stopped")
_PREFIX: Final = "grp_"
_COLUMNS: Final = (
    "group_id, kind, created_at, deadline_at, max_requests, requests_used, state, reason,"
    " ended_at, version"
)


def new_group_id() -> str:
    """A fresh group id: ``grp_`` and 20 random hex digits."""
    return f"{_PREFIX}{uuid.uuid4().hex[:20]}"


def is_group_id(text: str) -> bool:
    """Whether *text* names a group (``grp_…``) rather than an operation."""
    return text.startswith(_PREFIX)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRow:
    """One group of operations waited on together.

    Attributes:
        group_id: ``grp_`` and 20 hex digits.
        kind: ``all`` (``wait_all``), ``any`` (``wait_any``) or ``as_completed``.
        members: the operation ids, in the order given.
        created_at: aware UTC.
        deadline_at: the group's own deadline (aware UTC); ``None``: only each
            member's own.
        max_requests: the group's own request budget (every request of every member
            counts); ``None``: only each member's own.
        requests_used: requests the group counted, each before it was sent.
        state: ``waiting``, ``done`` or ``stopped``.
        reason: for ``stopped``: ``deadline_exceeded`` or ``request_budget_exhausted``
            (the public vocabulary); ``None`` otherwise.
        ended_at: when it became ``done`` or ``stopped``; ``None`` while waiting.
        version: compare-and-swap on every write.
    """

    group_id: str
    kind: GroupKind
    members: tuple[str, ...]
    created_at: datetime
    deadline_at: datetime | None = None
    max_requests: int | None = None
    requests_used: int = 0
    state: GroupState = "waiting"
    reason: str | None = None
    ended_at: datetime | None = None
    version: int = 1

    @property
    def requests_left(self) -> int | None:
        """Requests the group may still send (``None``: no group budget)."""
        if self.max_requests is None:
            return None
        return max(0, self.max_requests - self.requests_used)


class GroupStore(Protocol):
    """Where groups are kept (thread-safe; every method one transaction)."""

    def create_group(self, row: GroupRow) -> GroupRow:
        """Keep a new group with its members.

        Raises:
            UsageError: a group with this id exists.
        """

    def get_group(self, group_id: str) -> GroupRow | None:
        """The group with this id, or ``None``."""

    def spend_group(self, group_id: str) -> GroupRow | None:
        """Count one request against a waiting group's budget and commit it; return the
        group as stored, or ``None`` when the group is not waiting or its budget is
        spent (nothing counted). Atomic: two processes driving one group never both
        take its last request."""

    def release_group(self, group_id: str) -> GroupRow | None:
        """Give back one request :meth:`spend_group` counted and that was not sent (the
        member's reservation lost a race with another process), whatever the group's
        state, never below zero; commit it and return the group as stored (``None``:
        no such group)."""

    def end_group(
        self, group_id: str, *, state: GroupState, reason: str | None, at: datetime
    ) -> GroupRow | None:
        """Mark a waiting group ``done`` or ``stopped`` (with *reason*); a group that
        already ended is left as it is. Return the group as stored."""

    def groups_of_operation(self, operation_id: str) -> list[GroupRow]:
        """The groups *operation_id* is a member of, newest first."""

    def list_groups(self, *, state: GroupState | None = None, limit: int = 50) -> list[GroupRow]:
        """Groups, newest first; only those in *state* when given."""


def _newest(rows: Sequence[GroupRow]) -> list[GroupRow]:
    return sorted(rows, key=lambda r: (r.created_at, r.group_id), reverse=True)


class _MemoryGroups:
    """A dict under a lock (a MemoryStore's groups)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, GroupRow] = {}

    def create_group(self, row: GroupRow) -> GroupRow:
        with self._lock:
            if row.group_id in self._rows:
                raise UsageError(f"group {row.group_id} exists already")
            self._rows[row.group_id] = row
            return row

    def get_group(self, group_id: str) -> GroupRow | None:
        with self._lock:
            return self._rows.get(group_id)

    def spend_group(self, group_id: str) -> GroupRow | None:
        with self._lock:
            row = self._rows.get(group_id)
            if row is None or row.state != "waiting" or row.requests_left == 0:
                return None
            row = replace(row, requests_used=row.requests_used + 1, version=row.version + 1)
            self._rows[group_id] = row
            return row

    def charge(self, operation_id: str, counted_by: str) -> None:
        """Count one request of *operation_id* on each waiting group it is a member of,
        but *counted_by* (see :func:`charge_sql`)."""
        with self._lock:
            for group_id, row in list(self._rows.items()):
                if (
                    group_id != counted_by
                    and row.state == "waiting"
                    and operation_id in row.members
                ):
                    self._rows[group_id] = replace(
                        row, requests_used=row.requests_used + 1, version=row.version + 1
                    )

    def release_group(self, group_id: str) -> GroupRow | None:
        with self._lock:
            row = self._rows.get(group_id)
            if row is None or row.requests_used == 0:
                return row
            row = replace(row, requests_used=row.requests_used - 1, version=row.version + 1)
            self._rows[group_id] = row
            return row

    def end_group(
        self, group_id: str, *, state: GroupState, reason: str | None, at: datetime
    ) -> GroupRow | None:
        with self._lock:
            row = self._rows.get(group_id)
            if row is None or row.state != "waiting":
                return row
            row = replace(row, state=state, reason=reason, ended_at=at, version=row.version + 1)
            self._rows[group_id] = row
            return row

    def groups_of_operation(self, operation_id: str) -> list[GroupRow]:
        with self._lock:
            found = [r for r in self._rows.values() if operation_id in r.members]
        return _newest(found)

    def list_groups(self, *, state: GroupState | None = None, limit: int = 50) -> list[GroupRow]:
        with self._lock:
            found = [r for r in self._rows.values() if state is None or r.state == state]
        return _newest(found)[:limit]


def _at(value: object) -> datetime:
    return utc(value if isinstance(value, datetime) else datetime.fromisoformat(str(value)))


def _kind(value: object) -> GroupKind:
    text = str(value)
    for kind in GROUP_KINDS:
        if text == kind:
            return kind
    raise StoreError(f"a stored group has an unknown kind {text[:20]!r}")


def _state(value: object) -> GroupState:
    text = str(value)
    for state in GROUP_STATES:
        if text == state:
            return state
    raise StoreError(f"a stored group has an unknown state {text[:20]!r}")


def _row(values: Sequence[object], members: Sequence[str]) -> GroupRow:
    gid, kind, created, deadline, max_req, used, state, reason, ended, version = values
    return GroupRow(
        group_id=str(gid),
        kind=_kind(kind),
        members=tuple(members),
        created_at=_at(created),
        deadline_at=_at(deadline) if deadline is not None else None,
        max_requests=int(str(max_req)) if max_req is not None else None,
        requests_used=int(str(used)),
        state=_state(state),
        reason=str(reason) if reason is not None else None,
        ended_at=_at(ended) if ended is not None else None,
        version=int(str(version)),
    )


class _SQLGroups:
    """The group tables of a SQLite or PostgreSQL store, through the store's own
    transactions (``%s`` or ``?`` placeholders, times as ISO text or timestamptz)."""

    def __init__(self, tables: SQLAccess) -> None:
        self._transaction = tables.transaction
        self._schema = tables.dialect.prefix
        self._mark = tables.dialect.mark
        self._text_times = tables.dialect.text_times

    def _sql(self, text: str) -> str:
        return (
            text.replace("{g}", f"{self._schema}op_groups")
            .replace("{m}", f"{self._schema}op_group_members")
            .replace("?", self._mark)
        )

    def _time(self, value: datetime | None) -> object:
        if value is None:
            return None
        return utc(value).isoformat() if self._text_times else utc(value)

    def _exec(self, db: object, text: str, args: Sequence[object] = ()) -> list[tuple[object, ...]]:
        try:
            cursor = db.execute(self._sql(text), tuple(args))  # type: ignore[attr-defined]
        except sqlite3.OperationalError as exc:
            raise StoreError(
                f"the store's groups cannot be used ({exc}); run `waitbound db upgrade`"
            ) from None
        return list(cursor.fetchall()) if cursor.description is not None else []

    def _update(self, db: object, text: str, args: Sequence[object]) -> int:
        """Run one UPDATE; return how many rows it changed."""
        try:
            cursor = db.execute(self._sql(text), tuple(args))  # type: ignore[attr-defined]
        except sqlite3.OperationalError as exc:
            raise StoreError(
                f"the store's groups cannot be used ({exc}); run `waitbound db upgrade`"
            ) from None
        return int(cursor.rowcount or 0)

    def _load(self, db: object, rows: Sequence[tuple[object, ...]]) -> list[GroupRow]:
        found = []
        for values in rows:
            members = self._exec(
                db,
                "SELECT operation_id FROM {m} WHERE group_id = ? ORDER BY position",
                (values[0],),
            )
            found.append(_row(values, [str(m[0]) for m in members]))
        return found

    def _one(self, db: object, group_id: str) -> GroupRow | None:
        rows = self._exec(db, f"SELECT {_COLUMNS} FROM {{g}} WHERE group_id = ?", (group_id,))
        loaded = self._load(db, rows)
        return loaded[0] if loaded else None

    def create_group(self, row: GroupRow) -> GroupRow:
        with self._transaction() as db:
            if self._one(db, row.group_id) is not None:
                raise UsageError(f"group {row.group_id} exists already")
            self._exec(
                db,
                f"INSERT INTO {{g}} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.group_id,
                    row.kind,
                    self._time(row.created_at),
                    self._time(row.deadline_at),
                    row.max_requests,
                    row.requests_used,
                    row.state,
                    row.reason,
                    self._time(row.ended_at),
                    row.version,
                ),
            )
            for position, member in enumerate(row.members):
                self._exec(
                    db,
                    "INSERT INTO {m} (group_id, position, operation_id) VALUES (?, ?, ?)",
                    (row.group_id, position, member),
                )
        return row

    def get_group(self, group_id: str) -> GroupRow | None:
        with self._transaction() as db:
            return self._one(db, group_id)

    def spend_group(self, group_id: str) -> GroupRow | None:
        with self._transaction() as db:
            counted = self._update(
                db,
                "UPDATE {g} SET requests_used = requests_used + 1, version = version + 1"
                " WHERE group_id = ? AND state = 'waiting'"
                " AND (max_requests IS NULL OR requests_used < max_requests)",
                (group_id,),
            )
            return self._one(db, group_id) if counted else None

    def release_group(self, group_id: str) -> GroupRow | None:
        with self._transaction() as db:
            self._update(
                db,
                "UPDATE {g} SET requests_used = requests_used - 1, version = version + 1"
                " WHERE group_id = ? AND requests_used > 0",
                (group_id,),
            )
            return self._one(db, group_id)

    def end_group(
        self, group_id: str, *, state: GroupState, reason: str | None, at: datetime
    ) -> GroupRow | None:
        with self._transaction() as db:
            self._exec(
                db,
                "UPDATE {g} SET state = ?, reason = ?, ended_at = ?, version = version + 1"
                " WHERE group_id = ? AND state = 'waiting'",
                (state, reason, self._time(at), group_id),
            )
            return self._one(db, group_id)

    def groups_of_operation(self, operation_id: str) -> list[GroupRow]:
        with self._transaction() as db:
            rows = self._exec(
                db,
                f"SELECT {_COLUMNS} FROM {{g}} WHERE group_id IN"
                " (SELECT group_id FROM {m} WHERE operation_id = ?)"
                " ORDER BY created_at DESC, group_id DESC",
                (operation_id,),
            )
            return self._load(db, rows)

    def list_groups(self, *, state: GroupState | None = None, limit: int = 50) -> list[GroupRow]:
        where = " WHERE state = ?" if state is not None else ""
        args: tuple[object, ...] = (state, limit) if state is not None else (limit,)
        with self._transaction() as db:
            rows = self._exec(
                db,
                f"SELECT {_COLUMNS} FROM {{g}}{where} ORDER BY created_at DESC, group_id DESC"
                " LIMIT ?",
                args,
            )
            return self._load(db, rows)


def groups_of(store: Store) -> GroupStore:
    """The groups kept in *store* (a MemoryStore's live as long as it does).

    Raises:
        UsageError: a store kind without groups (another implementation of ``Store``).
    """
    from waitbound.stores.memory import MemoryStore

    if isinstance(store, MemoryStore):
        with MEMORY_GROUPS.lock:
            found = MEMORY_GROUPS.kept.get(store)
            if found is None:
                found = _MemoryGroups()
                MEMORY_GROUPS.kept[store] = found
            return found
    if isinstance(store, SQLTables):
        return _SQLGroups(store.sql_tables())
    raise UsageError(f"a {type(store).__name__} keeps no groups")
