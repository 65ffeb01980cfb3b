"""``waitbound audit``: verify the audit chains, take a checkpoint, tell one operation's
story, export the events for a log system. A thin adapter over ``waitbound.verify_audit``,
``audit_checkpoint``, ``verify_checkpoint`` and ``export_audit``; see ``docs/audit.md``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import click

from waitbound._base._audit_key import load_audit_key
from waitbound._base._errors import UsageError
from waitbound._base._json import JSON
from waitbound._engine._audit_check import (
    AuditCheckpoint,
    audit_checkpoint,
    export_audit,
    verify_audit,
    verify_checkpoint,
)
from waitbound._model._audit import AuditFinding
from waitbound._story import chain_status
from waitbound.cli._exits import EXIT_AUDIT_BROKEN
from waitbound.cli._flags import AUDIT_KEY_FILE_HELP, STORE_HELP
from waitbound.cli._params import STORED_TEXT
from waitbound.cli._render import printable, record_summary
from waitbound.cli._store_access import opened_store
from waitbound.cli._stored import print_story, read_operation, report_broken

__all__ = ["audit"]

_DIGEST = re.compile(r"[0-9a-f]{64}")
_MAX_CHECKPOINT_BYTES = 256 * 1024 * 1024
"""A checkpoint file larger than this is refused unread (it lists one head per operation)."""


def _one_or_all(operation_id: str | None, every: bool, command: str) -> str | None:
    """The operation to act on, or ``None`` for ``--all``; exactly one must be given."""
    if (operation_id is None) == (not every):
        raise UsageError(f"audit {command}: give an OPERATION_ID or --all (exactly one of them)")
    return operation_id


@click.group()
def audit() -> None:
    """Prove the audit logs: verify the chains, checkpoint, story, export."""


@audit.command()
@click.argument("operation_id", required=False, type=STORED_TEXT)
@click.option("--all", "every", is_flag=True, help="Verify every operation in the store.")
@click.option("--store", help=STORE_HELP)
@click.option("--audit-key-file", help=AUDIT_KEY_FILE_HELP)
@click.option(
    "--checkpoint",
    help="With --all: a digest printed by `audit checkpoint`, or the file holding its "
    "--json output; operations deleted or rolled back since are reported too.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def verify(  # noqa: PLR0917 - click passes every option
    operation_id: str | None,
    every: bool,
    store: str | None,
    audit_key_file: str | None,
    checkpoint: str | None,
    as_json: bool,
) -> int:
    """Verify audit chains: exit 0 when every chain is intact, 6 when one is broken.

    A broken chain is one line on stdout: the operation, what is wrong (edited,
    deleted, inserted, reordered, truncated, head_mismatch; with an audit key also
    unauthenticated, forged_head or forged_record) and the first bad event. The store is opened
    read-only.
    """
    chosen = _one_or_all(operation_id, every, "verify")
    if checkpoint is not None and chosen is not None:
        raise UsageError("audit verify: --checkpoint checks the whole store; use it with --all")
    key = load_audit_key(audit_key_file)
    recorded = _recorded(checkpoint) if checkpoint is not None else None
    with opened_store(store, read_only=True, then="run the command again") as opened:
        findings = verify_audit(opened, chosen, key=key)
        now = audit_checkpoint(opened, now=datetime.now(UTC))
        checked = 1 if chosen is not None else now.operations
        if isinstance(recorded, AuditCheckpoint):
            findings = _merged(findings, verify_checkpoint(opened, recorded))
    store_line = None
    if isinstance(recorded, str) and recorded != now.digest:
        store_line = (
            f"store: the store's digest {now.digest} is not the checkpoint's {recorded}: "
            "operations changed, were added or deleted since (check a running store against "
            "the checkpoint's --json file, which tells growth from a rollback)"
        )
    broken = bool(findings) or store_line is not None
    if as_json:
        document: dict[str, JSON] = {
            "intact": not broken,
            "operations": checked,
            "authenticated": key is not None,
            "findings": [f.as_json() for f in findings],
            "checkpoint": None if recorded is None else store_line is None and not findings,
        }
        click.echo(json.dumps(document, ensure_ascii=False))
    else:
        for finding in findings:
            click.echo(printable(finding.line()))
        if store_line is not None:
            click.echo(store_line)
        if not broken:
            plural = "s" if checked != 1 else ""
            how = (
                "heads authenticated"
                if key is not None
                else "no audit key: heads not authenticated"
            )
            against = ", matches the checkpoint" if recorded is not None else ""
            click.echo(f"audit intact: {checked} operation{plural} checked ({how}){against}")
    return EXIT_AUDIT_BROKEN if broken else 0


def _recorded(value: str) -> AuditCheckpoint | str:
    """A bare digest, or the checkpoint document in the file *value* names."""
    text = value.strip().lower()
    if _DIGEST.fullmatch(text):
        return text
    path = Path(value)
    if not path.is_file():
        raise UsageError(
            f"--checkpoint {value!r} is neither a 64-hex digest nor a checkpoint file; give "
            "what `waitbound audit checkpoint` printed, or the file holding its --json output"
        )
    try:
        with path.open("rb") as file:
            raw = file.read(_MAX_CHECKPOINT_BYTES + 1)
        if len(raw) > _MAX_CHECKPOINT_BYTES:
            raise UsageError(
                f"checkpoint file {path} is larger than {_MAX_CHECKPOINT_BYTES >> 20} MiB; "
                "give the file `waitbound audit checkpoint --json` wrote"
            )
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise UsageError(f"checkpoint file {path} cannot be read as JSON ({what})") from None
    return AuditCheckpoint.from_json(data)


def _merged(chains: list[AuditFinding], checkpoint: list[AuditFinding]) -> list[AuditFinding]:
    """One finding per operation (its chain's first), in id order."""
    by_operation = {f.operation_id: f for f in checkpoint}
    by_operation.update({f.operation_id: f for f in chains})
    return [by_operation[op] for op in sorted(by_operation)]


@audit.command()
@click.option("--store", help=STORE_HELP)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"schema", "digest", "operations", "at", "heads"}: keep it to verify a '
    "running store with --checkpoint FILE.",
)
def checkpoint(store: str | None, as_json: bool) -> None:
    """Print a store-wide digest of every chain head, to record somewhere else.

    Later, `audit verify --all --checkpoint DIGEST|FILE` detects an operation deleted or
    a chain rolled back since. The digest is SHA-256 over every operation's (id,
    audit_seq, audit_head), in id order.
    """
    with opened_store(store, read_only=True, then="run the command again") as opened:
        taken = audit_checkpoint(opened, now=datetime.now(UTC))
    if as_json:
        click.echo(json.dumps(taken.as_json(), ensure_ascii=False))
    else:
        plural = "s" if taken.operations != 1 else ""
        click.echo(
            f"checkpoint {taken.digest}  {taken.operations} operation{plural}  "
            f"at {taken.at.isoformat()}"
        )


@audit.command()
@click.argument("operation_id", type=STORED_TEXT)
@click.option("--store", help=STORE_HELP)
@click.option("--audit-key-file", help=AUDIT_KEY_FILE_HELP)
def story(operation_id: str, store: str | None, audit_key_file: str | None) -> int:
    """Print an operation's story, one line per audit event: time, what happened, state,
    next poll and its delay source, requests used of the budget, every decision.

    The chain is verified first; a broken one is printed, then said in one line on
    stderr, and exits 6.
    """
    key = load_audit_key(audit_key_file)
    record, events = read_operation(store, operation_id)
    chain, finding = chain_status(record, events, key)
    for line in record_summary(record):
        click.echo(line)
    click.echo(f"audit ({len(events)} events, chain {chain}):")
    print_story(events, every_event=True)
    return report_broken(finding) if finding is not None else 0


@audit.command()
@click.argument("operation_id", required=False, type=STORED_TEXT)
@click.option("--all", "every", is_flag=True, help="Export every operation's events.")
@click.option("--store", help=STORE_HELP)
@click.option(
    "--jsonl",
    is_flag=True,
    default=True,
    help="One JSON object per line (the only format, and the default).",
)
def export(operation_id: str | None, every: bool, store: str | None, jsonl: bool) -> None:
    """Write audit events as JSON lines for a log system (schema in docs/audit.md):
    operation_id, seq, at, kind, summary, data, prev_hash, hash."""
    chosen = _one_or_all(operation_id, every, "export")
    with opened_store(store, read_only=True, then="run the command again") as opened:
        for event in export_audit(opened, chosen):
            click.echo(json.dumps(event))
