"""What a record write charges to the fan-in groups of its operation.

A group's budget counts every request to its members while it waits, whoever sends
it. The group's own scheduler counts its requests itself (``GroupStore.spend_group``,
its budget checked atomically) and names the group in the reservation's ``reserved``
event (:data:`COUNTED_BY`); every other request — a worker's, a ``wait``'s, another
group's — is reserved by a record write, and the store charges it, in that write's
transaction, to each other waiting group the operation is a member of: SQLite and
PostgreSQL with :func:`charge_sql` (PostgreSQL inside its one write statement), a
MemoryStore with :func:`charge_memory`. Such a request is not refused (the member's
own budgets bound it): the group's scheduler sees the count and stops
``request_budget_exhausted`` when its budget is spent.

No import of the stores here (they import this module).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from waitbound._model._audit import AuditEvent, EventKind

__all__ = ["COUNTED_BY", "MEMORY_GROUPS", "charge_memory", "charge_sql", "charges"]

COUNTED_BY: Final = "counted_by_group"
"""The ``reserved`` event's data key naming the group whose scheduler counted the
request already."""


def charges(events: Sequence[AuditEvent]) -> list[str]:
    """The requests a record write reserves (its ``reserved`` events), each as the id of
    the group that counted it already, or ``""`` (none did)."""
    found = []
    for event in events:
        if event.kind == EventKind.RESERVED:
            counted = event.data.get(COUNTED_BY)
            found.append(counted if isinstance(counted, str) else "")
    return found


def charge_sql(schema: str, mark: str) -> str:
    """The statement that charges one reserved request of an operation (parameters: the
    group that counted it already or ``""``, the operation id) to each other waiting
    group it is a member of (*schema*: ``""``, or a quoted name and a dot)."""
    return (
        f"UPDATE {schema}op_groups SET requests_used = requests_used + 1,"
        f" version = version + 1 WHERE state = 'waiting' AND group_id <> {mark}"
        f" AND group_id IN (SELECT group_id FROM {schema}op_group_members"
        f" WHERE operation_id = {mark})"
    )


@dataclass
class _MemoryGroupsOfStores:
    """Each MemoryStore's groups (made by ``_groups.groups_of``), under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    kept: weakref.WeakKeyDictionary[object, Any] = field(default_factory=weakref.WeakKeyDictionary)


MEMORY_GROUPS: Final = _MemoryGroupsOfStores()


def charge_memory(store: object, operation_id: str, counted_by: str) -> None:
    """:func:`charge_sql` for a MemoryStore's groups (none kept yet: nothing to do)."""
    with MEMORY_GROUPS.lock:
        found = MEMORY_GROUPS.kept.get(store)
    if found is not None:
        found.charge(operation_id, counted_by)
