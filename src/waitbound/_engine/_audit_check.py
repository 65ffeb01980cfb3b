"""Checking a whole store's audit: verify every chain, take and check a checkpoint,
export the events for a log system. See ``docs/audit.md``.

Everything here reads the store through the :class:`~waitbound.stores.Store`
protocol only, so it works alike on memory, SQLite and PostgreSQL stores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from waitbound._base._clock import utc
from waitbound._base._errors import (
    OperationNotFoundError,
    SchemaVersionError,
    StoreError,
    UsageError,
)
from waitbound._base._json import JSON, canonical_json
from waitbound._model._audit import HASHED, AuditFinding, AuditProblem, StoredAuditEvent
from waitbound._model._audit_record import diagnose_record
from waitbound._model._record import Record
from waitbound.stores import Store

__all__ = [
    "AuditCheckpoint",
    "audit_checkpoint",
    "diagnose_record",
    "export_audit",
    "verify_audit",
    "verify_checkpoint",
]

CHECKPOINT_SCHEMA: Final = 1


def _ids(store: Store, operation_id: str | None) -> list[str]:
    """The operation named (``OperationNotFoundError`` when absent), or every one by id
    (:meth:`Store.heads`: a record that cannot be read back is named too)."""
    if operation_id is not None:
        if store.get(operation_id) is None:
            raise OperationNotFoundError(operation_id)
        return [operation_id]
    return [op for op, _, _ in store.heads()]


def _record(store: Store, operation_id: str) -> Record | AuditFinding:
    """The operation's record, or an ``unreadable`` finding when it cannot be read back."""
    try:
        record = store.get(operation_id)
    except StoreError as exc:
        if isinstance(exc, UsageError | SchemaVersionError):
            raise
        return _unreadable(operation_id, f"its record cannot be read back ({exc})")
    if record is None:  # deleted since it was listed
        return _unreadable(operation_id, "its record is no longer in the store")
    return record


def _unreadable(operation_id: str, detail: str) -> AuditFinding:
    return AuditFinding(
        operation_id=operation_id, problem=AuditProblem.UNREADABLE, seq=None, detail=detail
    )


def _events(store: Store, operation_id: str) -> list[StoredAuditEvent] | AuditFinding:
    """The operation's events, or an ``unreadable`` finding when the store cannot read them."""
    try:
        return store.audit(operation_id)
    except StoreError as exc:
        if isinstance(exc, UsageError | SchemaVersionError):
            raise
        return AuditFinding(
            operation_id=operation_id,
            problem=AuditProblem.UNREADABLE,
            seq=None,
            detail=f"its events cannot be read back ({exc})",
        )


def verify_audit(
    store: Store, operation_id: str | None = None, *, key: bytes | None = None
) -> list[AuditFinding]:
    """Check the audit chain of one operation, or of every operation in *store*.

    Each chain must be unbroken and end at the head its record names
    (:func:`waitbound.diagnose_chain`); with *key*, the head's MAC must verify too, so
    events and head rewritten together are detected.

    Args:
        store: the store to check (opened read-only is enough).
        operation_id: the operation; ``None`` checks every operation, in id order.
        key: the audit key; ``None`` checks the chains only (no MAC). The key is not
            read from the environment here (see :func:`waitbound.load_audit_key`).

    Returns:
        One finding per broken operation, in id order: empty when every chain is intact.

    Raises:
        OperationNotFoundError: no operation with *operation_id* (also a UsageError).
        StoreError: the store cannot be read.
    """
    findings = []
    for found in _ids(store, operation_id):
        record = _record(store, found)
        if isinstance(record, AuditFinding):
            findings.append(record)
            continue
        events = _events(store, record.contract.operation_id)
        if isinstance(events, AuditFinding):
            findings.append(events)
            continue
        finding = diagnose_record(record, events, key=key)
        if finding is not None:
            findings.append(finding)
    return findings


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditCheckpoint:
    """A store-wide digest of every chain head, to record somewhere the store's writers
    cannot change (a ticket, a log system, another machine).

    Attributes:
        digest: SHA-256 (hex) of the canonical JSON of ``heads``.
        at: when it was taken, aware UTC.
        heads: ``(operation_id, audit_seq, audit_head)`` of every operation, by id.
    """

    digest: str
    at: datetime
    heads: tuple[tuple[str, int, str], ...]

    @property
    def operations(self) -> int:
        """How many operations the checkpoint covers."""
        return len(self.heads)

    def as_json(self) -> dict[str, JSON]:
        """The checkpoint as a JSON document (``schema`` 1); :meth:`from_json` reads it."""
        return {
            "schema": CHECKPOINT_SCHEMA,
            "digest": self.digest,
            "operations": self.operations,
            "at": self.at.isoformat(),
            "heads": [[op, seq, head] for op, seq, head in self.heads],
        }

    @classmethod
    def from_json(cls, data: JSON) -> AuditCheckpoint:
        """Read a checkpoint written by :meth:`as_json`.

        Raises:
            UsageError: it is not a checkpoint, or its heads do not match its digest
                (the checkpoint itself was changed).
        """
        try:
            assert isinstance(data, dict)
            assert data.get("schema") == CHECKPOINT_SCHEMA
            rows = data["heads"]
            assert isinstance(rows, list)
            heads = tuple(_head(row) for row in rows)
            digest, at = str(data["digest"]), utc(datetime.fromisoformat(str(data["at"])))
        except (AssertionError, KeyError, TypeError, ValueError):
            raise UsageError(
                "the checkpoint is not a waitbound checkpoint (schema 1); give the JSON "
                "that `waitbound audit checkpoint --json` printed, or its digest"
            ) from None
        if _digest(heads) != digest:
            raise UsageError(
                "the checkpoint's heads do not match its digest: the checkpoint itself was "
                "changed; compare against the digest you recorded"
            )
        return cls(digest=digest, at=at, heads=heads)


def _head(row: JSON) -> tuple[str, int, str]:
    """One ``[operation_id, audit_seq, audit_head]`` row of a checkpoint document."""
    assert isinstance(row, list)
    operation_id, seq, head = row
    assert isinstance(operation_id, str)
    assert isinstance(seq, int)
    assert isinstance(head, str)
    return operation_id, seq, head


def _digest(heads: tuple[tuple[str, int, str], ...]) -> str:
    return hashlib.sha256(canonical_json([list(h) for h in heads]).encode(*HASHED)).hexdigest()


def audit_checkpoint(store: Store, *, now: datetime) -> AuditCheckpoint:
    """Take a store-wide checkpoint: the digest of every operation's chain head.

    Recording the digest elsewhere lets :func:`verify_checkpoint` later detect what a
    chain cannot show by itself: a whole operation deleted, or a chain (with its
    record) rolled back to an earlier head.

    Args:
        store: the store.
        now: the time to record, aware UTC.

    Raises:
        StoreError: the store cannot be read.
    """
    heads = tuple(store.heads())
    return AuditCheckpoint(digest=_digest(heads), at=utc(now), heads=heads)


def verify_checkpoint(store: Store, checkpoint: AuditCheckpoint) -> list[AuditFinding]:
    """Check that *store* still holds everything *checkpoint* recorded.

    Every operation it names must still exist (else ``missing``) and its chain must
    still contain the recorded head as that event (else ``rolled_back``); a chain may
    have grown since. Chains are not verified here (see :func:`verify_audit`).

    Returns:
        One finding per operation that is missing or rolled back, in id order.

    Raises:
        StoreError: the store cannot be read.
    """
    findings = []
    for operation_id, seq, head in checkpoint.heads:
        if store.get(operation_id) is None:
            findings.append(
                AuditFinding(
                    operation_id=operation_id,
                    problem=AuditProblem.MISSING,
                    seq=None,
                    detail=f"the operation is no longer in the store (the checkpoint of "
                    f"{checkpoint.at.isoformat()} recorded it at event {seq})",
                )
            )
            continue
        events = _events(store, operation_id)
        if isinstance(events, AuditFinding):
            findings.append(events)
            continue
        if seq == 0:
            continue
        event = next((e for e in events if e.seq == seq), None)
        if event is None or event.hash != head:
            now = f"ends at event {events[-1].seq}" if events else "has no events"
            if event is not None:
                now = f"has another event {seq}"
            findings.append(
                AuditFinding(
                    operation_id=operation_id,
                    problem=AuditProblem.ROLLED_BACK,
                    seq=seq,
                    detail=f"the checkpoint of {checkpoint.at.isoformat()} recorded the chain "
                    f"at event {seq}; it now {now}",
                )
            )
    return findings


def export_audit(store: Store, operation_id: str | None = None) -> Iterator[dict[str, JSON]]:
    """Yield the audit events of one operation, or of every operation (by id, then seq),
    as JSON objects for a log system (the schema is in ``docs/audit.md``).

    Each object has ``operation_id``, ``seq``, ``at`` (ISO 8601, UTC), ``kind``,
    ``summary``, ``data``, ``prev_hash`` and ``hash``: enough to re-verify the chain
    outside waitbound.

    Raises:
        OperationNotFoundError: no operation with *operation_id*.
        StoreError: the store cannot be read.
    """
    for found in _ids(store, operation_id):
        for stored in store.audit(found):
            yield {
                "operation_id": stored.operation_id,
                "seq": stored.seq,
                "at": stored.event.at.isoformat(),
                "kind": stored.event.kind,
                "summary": stored.event.summary,
                "data": dict(stored.event.data),
                "prev_hash": stored.prev_hash,
                "hash": stored.hash,
            }
