"""``deliveries``: the completions owed downstream (the outbox), and replaying one.

Thin adapters over ``Store.outbox`` and :func:`waitbound.replay_delivery`; see
``docs/completions.md``. A target is shown without its query string; a payload and the
notify secret are never shown.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

import click

from waitbound._base._json import JSON
from waitbound._base._urls import origin_only
from waitbound._engine._outbox import replay_delivery
from waitbound._model._push import OutboxEntry, OutboxStatus
from waitbound.cli._flags import STORE_HELP
from waitbound.cli._params import STORED_TEXT, WholeRange
from waitbound.cli._render import printable
from waitbound.cli._store_access import opened_store

__all__ = ["deliveries"]

_COLUMNS = (
    "id",
    "operation",
    "channel",
    "target",
    "status",
    "attempts",
    "next attempt",
    "last error",
    "replay of",
)
_TARGET_CHARS = 80
_ERROR_CHARS = 120


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def entry_json(entry: OutboxEntry) -> dict[str, JSON]:
    """One entry as ``deliveries --json`` prints it (the target as its origin only, no payload)."""
    return {
        "delivery_id": entry.delivery_id,
        "operation_id": entry.operation_id,
        "channel": entry.channel.value,
        "target": origin_only(entry.target) if entry.target is not None else None,
        "status": entry.status.value,
        "attempts": entry.attempts,
        "created_at": entry.created_at.isoformat(),
        "next_attempt_at": _when(entry.next_attempt_at)
        if entry.status is OutboxStatus.PENDING
        else None,
        "delivered_at": _when(entry.delivered_at),
        "last_error": entry.last_error,
        "replay_of": entry.replay_of,
    }


def _row(entry: OutboxEntry) -> list[str]:
    pending = entry.status is OutboxStatus.PENDING
    return [
        entry.delivery_id,
        printable(entry.operation_id),
        entry.channel.value,
        _cut(printable(origin_only(entry.target)), _TARGET_CHARS) if entry.target else "-",
        entry.status.value,
        str(entry.attempts),
        entry.next_attempt_at.isoformat(timespec="seconds") if pending else "-",
        _cut(printable(entry.last_error), _ERROR_CHARS) if entry.last_error else "-",
        entry.replay_of or "-",
    ]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns aligned by their widest cell; the last column is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1]
        for row in rows
    ]


@click.group(
    name="deliveries",
    invoke_without_command=True,
    help="List the completions owed downstream (the outbox), newest first: one per "
    "channel of each finished operation that asked for one (--notify URL: a signed "
    "webhook; on_complete in Python: a callback), and replays.\n\n"
    "Statuses: pending (not delivered yet; retried at its next attempt), delivered, "
    "failed (given up after 10 attempts: replay it). Targets are shown without their "
    "query string. Exit 0, also when there are none.",
)
@click.option("--operation-id", type=STORED_TEXT, help="Only this operation's deliveries.")
@click.option(
    "--status",
    type=click.Choice([s.value for s in OutboxStatus]),
    help="Only deliveries with this status.",
)
@click.option(
    "--limit", type=WholeRange(1, 10_000), default=50, show_default=True, help="At most N."
)
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.pass_context
def deliveries(  # noqa: PLR0917 - click passes every option
    ctx: click.Context,
    operation_id: str | None,
    status: str | None,
    limit: int,
    store: str | None,
    as_json: bool,
) -> int | None:
    if ctx.invoked_subcommand is not None:
        ctx.obj = store  # `deliveries --store S replay ID` names the store before the verb
        return None
    with opened_store(store, read_only=True, then="run the command again") as opened:
        entries = opened.outbox(
            operation_id=operation_id,
            status=OutboxStatus(status) if status is not None else None,
            limit=limit,
        )
    if as_json:
        document: dict[str, JSON] = {
            "deliveries": [entry_json(entry) for entry in entries],
            "count": len(entries),
        }
        click.echo(json.dumps(document, ensure_ascii=False))
        return 0
    if not entries:
        click.echo("no deliveries")
        return 0
    for line in _table([list(_COLUMNS), *(_row(entry) for entry in entries)]):
        click.echo(line.rstrip())
    return 0


@deliveries.command(
    help="Send delivery DELIVERY_ID again, as a new delivery: a new id (receivers that "
    "dedupe on webhook-id take it as new), replay_of = DELIVERY_ID, the same target "
    "and payload, pending now. A worker delivers it (`waitbound worker` with "
    "$WAITBOUND_NOTIFY_SECRET for a webhook). Prints the new id."
)
@click.argument("delivery_id", type=STORED_TEXT)
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the new delivery as one JSON object.")
@click.pass_context
def replay(ctx: click.Context, delivery_id: str, store: str | None, as_json: bool) -> int:
    chosen = store if store is not None else ctx.obj
    with opened_store(chosen, then="run the command again") as opened:
        entry = replay_delivery(opened, delivery_id, now=datetime.now(UTC))
    if as_json:
        click.echo(json.dumps(entry_json(entry), ensure_ascii=False))
    else:
        click.echo(entry.delivery_id)
    return 0
