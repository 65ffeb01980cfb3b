"""``show``: an operation's record and its audit story, read from a read-only store."""

from __future__ import annotations

import json

import click

from waitbound._base._audit_key import load_audit_key
from waitbound._base._errors import UsageError
from waitbound._story import chain_status, operation_document
from waitbound.cli._flags import AUDIT_KEY_FILE_HELP, STORE_HELP
from waitbound.cli._params import STORED_TEXT
from waitbound.cli._render import printable, record_summary
from waitbound.cli._store_access import opened_store
from waitbound.cli._stored import (
    group_document,
    group_lines,
    print_story,
    read_operation,
    report_broken,
)
from waitbound.stores._groups import GroupRow, groups_of, is_group_id

__all__ = ["show"]


def _show_group(store: str | None, group_id: str, as_json: bool) -> int:
    """``show GROUP_ID``: the group, its bounds and spending, and its members' states."""
    with opened_store(store, read_only=True, then="run the command again") as opened:
        row = groups_of(opened).get_group(group_id)
        if row is None:
            raise UsageError(f"no group with id {group_id[:40]!r} in the store")
        if as_json:
            click.echo(json.dumps({"group": group_document(opened, row)}, ensure_ascii=False))
        else:
            for line in group_lines(opened, row):
                click.echo(printable(line))
    return 0


def _groups_of(store: str | None, operation_id: str) -> list[GroupRow]:
    with opened_store(store, read_only=True, then="run the command again") as opened:
        return groups_of(opened).groups_of_operation(operation_id)


@click.command()
@click.argument("operation_id", type=STORED_TEXT)
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--events", "every_event", is_flag=True, help="One story line per audit event.")
@click.option("--audit-key-file", help=AUDIT_KEY_FILE_HELP)
def show(
    operation_id: str,
    store: str | None,
    as_json: bool,
    every_event: bool,
    audit_key_file: str | None,
) -> int:
    """Show an operation's record and its audit story: one line per request by default.

    A group id (``grp_…``, from ``wait-all`` / ``wait-any``) shows the group instead:
    its bounds, what it spent, how it ended and each member's state.

    The store is opened read-only (a read-only file, or a copy kept for audit, can be
    shown) and never created: a path that names no store exits 2. A broken audit
    chain is shown, then said in one line on stderr, and exits 6.
    """
    if is_group_id(operation_id):
        return _show_group(store, operation_id, as_json)
    key = load_audit_key(audit_key_file)
    record, events = read_operation(store, operation_id)
    chain, finding = chain_status(record, events, key)
    groups = _groups_of(store, operation_id)
    if as_json:
        groups_of_it = [row.group_id for row in groups]
        document = operation_document(record, events, (chain, finding), groups_of_it)
        click.echo(json.dumps(document, ensure_ascii=False))
    else:
        for line in record_summary(record):
            click.echo(line)
        for row in groups:
            why = f" ({row.reason})" if row.reason else ""
            click.echo(f"group: {row.group_id} ({row.kind}, {row.state}{why})")
        click.echo(f"audit ({len(events)} events, chain {chain}):")
        print_story(events, every_event=every_event)
    return report_broken(finding) if finding is not None else 0
