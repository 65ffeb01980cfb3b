"""What the commands that read the store print of it: an operation and its audit
story (``show``, ``audit``), a group (``show GROUP_ID``, ``escalations``). Shared by
those commands, so none of them imports another.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from waitbound._base._errors import OperationNotFoundError
from waitbound._base._json import JSON
from waitbound._model._audit import AuditFinding, StoredAuditEvent
from waitbound._model._record import Record
from waitbound.cli._exits import EXIT_AUDIT_BROKEN
from waitbound.cli._render import group_line, grouped, printable
from waitbound.cli._store_access import opened_store
from waitbound.stores import Store
from waitbound.stores._groups import GroupRow, groups_of

__all__ = [
    "group_document",
    "group_lines",
    "print_story",
    "read_operation",
    "report_broken",
    "stopped_group_lines",
    "stopped_groups",
]


def read_operation(store: str | None, operation_id: str) -> tuple[Record, list[StoredAuditEvent]]:
    """The operation's record and its audit events, from the store opened read-only.

    Raises:
        OperationNotFoundError: no operation with this id (exit 2).
    """
    with opened_store(store, read_only=True, then="run the command again") as opened:
        record = opened.get(operation_id)
        if record is None:
            raise OperationNotFoundError(operation_id)
        return record, opened.audit(operation_id)


def report_broken(finding: AuditFinding) -> int:
    """Say on stderr, in one line, what is wrong with the chain; return exit code 6."""
    click.echo(
        f"waitbound: error: audit chain broken: {printable(finding.line())}; "
        "do not trust this story (see docs/audit.md)",
        err=True,
    )
    return EXIT_AUDIT_BROKEN


def print_story(events: Sequence[StoredAuditEvent], *, every_event: bool) -> None:
    """The audit story: one line per request (grouped), or per event, numbered by seq."""
    plain = [stored.event for stored in events]
    spans = [(i, i) for i in range(len(plain))] if every_event else grouped(plain)
    for first, last in spans:
        seqs = (
            f"{events[first].seq}" if first == last else f"{events[first].seq}-{events[last].seq}"
        )
        click.echo(f"  {seqs:>7} {group_line(plain[first : last + 1])}")


def group_document(store: Store, row: GroupRow) -> dict[str, JSON]:
    """A group and its members' states, as ``show GROUP_ID --json`` prints it."""
    members: list[JSON] = []
    for operation_id in row.members:
        record = store.get(operation_id)
        members.append(
            {
                "operation_id": operation_id,
                "state": None
                if record is None
                else (record.outcome.value if record.outcome else record.phase.value),
                "reason": record.reason.value if record is not None and record.reason else None,
            }
        )
    return {
        "group_id": row.group_id,
        "kind": row.kind,
        "state": row.state,
        "reason": row.reason,
        "created_at": row.created_at.isoformat(),
        "deadline_at": row.deadline_at.isoformat() if row.deadline_at else None,
        "ended_at": row.ended_at.isoformat() if row.ended_at else None,
        "requests_used": row.requests_used,
        "max_requests": row.max_requests,
        "members": members,
    }


def group_lines(store: Store, row: GroupRow) -> list[str]:
    """A group and its members, one line each (``show GROUP_ID``)."""
    document = group_document(store, row)
    why = f" ({row.reason})" if row.reason else ""
    budget = f" of {row.max_requests}" if row.max_requests is not None else ""
    deadline = row.deadline_at.isoformat() if row.deadline_at else "none (members' own)"
    lines = [
        f"group {row.group_id} ({row.kind}): {row.state}{why}",
        f"  requests used: {row.requests_used}{budget}; deadline: {deadline}",
        f"  members ({len(row.members)}):",
    ]
    members = document["members"]
    assert isinstance(members, list)
    for member in members:
        assert isinstance(member, dict)
        state = member["state"] or "not in the store"
        reason = f" ({member['reason']})" if member["reason"] else ""
        lines.append(f"    {member['operation_id']}: {state}{reason}")
    return lines


def stopped_groups(store: Store) -> list[GroupRow]:
    """The groups their own bound stopped, newest first (``escalations`` lists them)."""
    return groups_of(store).list_groups(state="stopped")


def stopped_group_lines(store: Store, row: GroupRow) -> list[str]:
    """What ``escalations`` says of a group its own bound stopped."""
    waiting = [i for i in row.members if (r := store.get(i)) is not None and not r.is_finished]
    return [
        f"Group {row.group_id} ({row.kind}) stopped at its own bound ({row.reason}): "
        f"{len(waiting)} of {len(row.members)} members still wait within their own bounds"
        + (f": {', '.join(waiting)}" if waiting else "")
        + ".",
        f"Resume: waitbound wait-{'any' if row.kind == 'any' else 'all'} --group {row.group_id}",
    ]
