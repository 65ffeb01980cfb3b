"""``show``: an operation's record and its audit story, read from a read-only store."""

from __future__ import annotations

import json

import click

import waitbound
from waitbound._json import JSON
from waitbound.cli._common import STORE_HELP, opened_store
from waitbound.cli._render import group_line, grouped, option_costs, record_summary

__all__ = ["show"]


@click.command()
@click.argument("operation_id")
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--events", "every_event", is_flag=True, help="One story line per audit event.")
def show(operation_id: str, store: str | None, as_json: bool, every_event: bool) -> int:
    """Show an operation's record and its audit story: one line per request by default.

    The store is opened read-only (a read-only file, or a copy kept for audit, can be
    shown) and never created: a path that names no store exits 2.
    """
    with opened_store(store, read_only=True, then="run the command again") as opened:
        record = opened.get(operation_id)
        if record is None:
            raise waitbound.OperationNotFoundError(operation_id)
        events = opened.audit(operation_id)
    try:
        waitbound.verify_chain(events, head=(record.audit_seq, record.audit_head))
        chain = "intact"
    except waitbound.StoreError as exc:
        chain = f"broken: {exc}"
    if as_json:
        document: dict[str, JSON] = {
            "record": record.to_json(),
            "outcome": record.to_outcome().as_json() if record.is_finished else None,
            "option_costs": [{"option": o, "cost": c} for o, c in option_costs(record)],
            "audit_chain": chain,
            "audit": [
                {
                    "seq": s.seq,
                    "at": s.event.at.isoformat(),
                    "kind": s.event.kind,
                    "summary": s.event.summary,
                    "data": dict(s.event.data),
                    "hash": s.hash,
                }
                for s in events
            ],
        }
        click.echo(json.dumps(document, ensure_ascii=False))
        return 0
    for line in record_summary(record):
        click.echo(line)
    click.echo(f"audit ({len(events)} events, chain {chain}):")
    plain = [stored.event for stored in events]
    spans = [(i, i) for i in range(len(plain))] if every_event else grouped(plain)
    for first, last in spans:
        seqs = (
            f"{events[first].seq}" if first == last else f"{events[first].seq}-{events[last].seq}"
        )
        click.echo(f"  {seqs:>7} {group_line(plain[first : last + 1])}")
    return 0
