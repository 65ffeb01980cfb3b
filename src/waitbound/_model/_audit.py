"""The audit log: append-only, hash-chained events that read like a story.

Each stored event carries ``prev_hash`` and ``hash = sha256(prev_hash + canonical
JSON of the event)``, so editing, dropping or reordering an event breaks the chain
(:func:`diagnose_chain` says which event and how; :func:`verify_chain` raises). Stores
append events in the same transaction as the record change they describe, and write
the chain's head (``audit_seq``, ``audit_head``) on the record; with an audit key the
head also carries an HMAC (:func:`head_mac`), so events and head rewritten together
are detected too.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Final

from waitbound._base._errors import StoreError
from waitbound._base._json import JSON, canonical_json

__all__ = [
    "GENESIS_HASH",
    "MAC_V2",
    "HASHED",
    "AuditEvent",
    "AuditFinding",
    "AuditProblem",
    "EventKind",
    "StoredAuditEvent",
    "diagnose_chain",
    "head_is_authentic",
    "head_mac",
    "mac_asserted",
    "seal",
    "seal_all",
    "verify_chain",
]

GENESIS_HASH = "0" * 64

HASHED = ("utf-8", "surrogatepass")
"""How hashed text becomes bytes: UTF-8, and a lone surrogate (which UTF-8 cannot
encode, but a Python caller's string may hold) as its three bytes. Text without one
is plain UTF-8."""


class EventKind(StrEnum):
    """What an audit event (and a rule's step) says happened: its ``kind``.

    The values are the names stored in the audit log, printed by ``waitbound story``
    and sent as span events (``waitbound.KIND``); a stored event's ``kind`` is the plain
    string, which compares equal to its member.
    """

    CREATED = "created"
    """The operation was created (its deadline, budget and first request)."""
    RESUMED = "resumed"
    """A later run took the stored operation up again."""
    RESERVED = "reserved"
    """A request was reserved (counted) before it is sent."""
    SEND_SKIPPED = "send_skipped"
    """A reserved request was not sent (released, or its answer came too late)."""
    LATE_ANSWER = "late_answer"
    """An answer arrived after its reservation had been given up."""
    ANSWER_LOST = "answer_lost"
    """The answer to the last reserved request was never recorded."""
    OBSERVED = "observed"
    """An answer was recorded: what it said, and what it means."""
    SCHEDULED = "scheduled"
    """The next status request was scheduled."""
    RESULT_DUE = "result_due"
    """The job succeeded: its result is requested next."""
    ERRORS_DUE = "errors_due"
    """A partial success: its first page of errors is requested next."""
    CANCEL_REQUESTED = "cancel_requested"
    """Someone asked for the job to be canceled."""
    CANCEL_ANSWERED = "cancel_answered"
    """The provider answered the cancel request (accepted or refused)."""
    WEBHOOK_RECEIVED = "webhook_received"
    """A webhook delivery about the operation was received."""
    EXTENSION_REQUESTED = "extension_requested"
    """A person was asked to decide (an escalation's decision request)."""
    DECIDED = "decided"
    """A person's (or the timeout's) decision was applied."""
    FINISHED = "finished"
    """The operation ended: its outcome and reason."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvent:
    """One thing that happened to an operation.

    Attributes:
        at: when, aware UTC.
        kind: a short machine name (``created``, ``reserved``, ``observed``,
            ``scheduled``, ``finished``, ...): an :class:`EventKind` value, stored and
            read back as the plain string.
        summary: one sentence a person can read.
        data: machine fields: state, requests used, next poll time and its delay
            source, HTTP status, request id, ... (never a secret).
    """

    at: datetime
    kind: str
    summary: str
    data: Mapping[str, JSON] = field(default_factory=dict)

    def payload(self, operation_id: str, seq: int) -> dict[str, JSON]:
        """The canonical content the hash covers."""
        return {
            "operation_id": operation_id,
            "seq": seq,
            "at": self.at.isoformat(),
            "kind": self.kind,
            "summary": self.summary,
            "data": dict(self.data),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredAuditEvent:
    """An audit event as stored: numbered from 1 and chained by hash."""

    operation_id: str
    seq: int
    event: AuditEvent
    prev_hash: str
    hash: str


def seal(operation_id: str, seq: int, event: AuditEvent, prev_hash: str) -> StoredAuditEvent:
    """Number and chain one event after the event whose hash is *prev_hash*."""
    digest = hashlib.sha256(
        (prev_hash + canonical_json(event.payload(operation_id, seq))).encode(*HASHED)
    ).hexdigest()
    return StoredAuditEvent(
        operation_id=operation_id, seq=seq, event=event, prev_hash=prev_hash, hash=digest
    )


def seal_all(
    operation_id: str, events: Sequence[AuditEvent], *, last_seq: int, last_hash: str
) -> list[StoredAuditEvent]:
    """Seal *events* in order after the stored event ``(last_seq, last_hash)``."""
    sealed = []
    for offset, event in enumerate(events, start=1):
        stored = seal(operation_id, last_seq + offset, event, last_hash)
        sealed.append(stored)
        last_hash = stored.hash
    return sealed


def verify_chain(
    events: Sequence[StoredAuditEvent], *, head: tuple[int, str] | None = None
) -> None:
    """Check that *events* (one operation's, in order) form an unbroken chain.

    Args:
        events: the stored events, in order.
        head: the ``(audit_seq, audit_head)`` the operation's record names; when
            given, the chain must end exactly there (so removed last events show).

    Raises:
        StoreError: the chain is broken; the message is :meth:`AuditFinding.line` of
            the first finding of :func:`diagnose_chain`.
    """
    operation_id = events[0].operation_id if events else "?"
    finding = diagnose_chain(operation_id, events, head=head)
    if finding is not None:
        raise StoreError(f"audit log is broken: {finding.line()}")


# --- diagnosis ------------------------------------------------------------------------


class AuditProblem(StrEnum):
    """What is wrong with an operation's audit chain (see ``docs/audit.md``)."""

    EDITED = "edited"
    """An event's content no longer matches its hash, or an event was rewritten (its
    hash recomputed) so the next event no longer links to it."""
    DELETED = "deleted"
    """Events are missing inside the chain (a gap in the numbers, or the rest renumbered)."""
    INSERTED = "inserted"
    """An event that was never written: a duplicate number, an extra event inside the
    chain, or events after the head the record names."""
    REORDERED = "reordered"
    """Events are stored out of the order they were written in."""
    TRUNCATED = "truncated"
    """The chain ends before the head the record names: its last events were removed."""
    HEAD_MISMATCH = "head_mismatch"
    """The chain ends at the record's event number with another hash: the last event
    or the record's head was rewritten."""
    UNAUTHENTICATED = "unauthenticated"
    """An audit key is given but the record's head carries no MAC (it was written
    without the key, or the MAC was removed)."""
    FORGED_HEAD = "forged_head"
    """The record's head MAC does not match: the head (and with it the events) was
    rewritten by someone without the audit key."""
    FORGED_RECORD = "forged_record"
    """The head's MAC verifies, but the record no longer asserts what was signed with
    it: its outcome, reason, result, counters or decisions were changed without the key."""
    UNREADABLE = "unreadable"
    """The store cannot read the operation's record or events back."""
    MISSING = "missing"
    """An operation a checkpoint names is no longer in the store."""
    ROLLED_BACK = "rolled_back"
    """The chain no longer reaches the head a checkpoint recorded for it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditFinding:
    """The first thing wrong with one operation's audit chain.

    Attributes:
        operation_id: the operation.
        problem: what is wrong.
        seq: the number of the first bad event; ``None`` when the finding is about the
            record's head or the operation as a whole.
        detail: one sentence saying what was found, for a person.
    """

    operation_id: str
    problem: AuditProblem
    seq: int | None
    detail: str

    def line(self) -> str:
        """The finding as one line: ``OPERATION: PROBLEM at event N: detail``."""
        where = f" at event {self.seq}" if self.seq is not None else ""
        return f"{self.operation_id}: {self.problem.value}{where}: {self.detail}"

    def as_json(self) -> dict[str, JSON]:
        """The finding as a JSON object (``operation_id``, ``problem``, ``seq``, ``detail``)."""
        return {
            "operation_id": self.operation_id,
            "problem": self.problem.value,
            "seq": self.seq,
            "detail": self.detail,
        }


MAC_V2: Final = "v2:"
"""The prefix of a head MAC that also covers the record's asserted fields."""


def head_mac(
    key: bytes, operation_id: str, audit_seq: int, audit_head: str, asserted: str | None = None
) -> str:
    """The HMAC-SHA256 (RFC 2104) of a chain head, as stored in ``Record.audit_mac``.

    Without *asserted* (version 1, written before this release): hex of the HMAC of
    ``f"{operation_id}\\n{audit_seq}\\n{audit_head}"`` (UTF-8), so a head cannot be moved
    to another operation or another event number. With *asserted* (the hex SHA-256 of
    the record's asserted fields, :func:`waitbound._model._audit_record.asserted_digest`):
    ``f"v2:{asserted}:{hex HMAC of 'v2\\n' + operation_id + '\\n' + seq + '\\n' + head +
    '\\n' + asserted}"``, so the outcome, reason, result and counters the record asserts
    are bound to the authenticated head too.
    """
    if asserted is None:
        message = f"{operation_id}\n{audit_seq}\n{audit_head}".encode(*HASHED)
        return hmac.new(key, message, hashlib.sha256).hexdigest()
    message = f"v2\n{operation_id}\n{audit_seq}\n{audit_head}\n{asserted}".encode(*HASHED)
    return f"{MAC_V2}{asserted}:{hmac.new(key, message, hashlib.sha256).hexdigest()}"


def mac_asserted(mac: str | None) -> str | None:
    """The asserted-fields digest a version-2 MAC covers (``None``: a version-1 MAC, or none)."""
    if mac is None or not mac.startswith(MAC_V2):
        return None
    return mac[len(MAC_V2) :].split(":", 1)[0]


def head_is_authentic(
    key: bytes, operation_id: str, audit_seq: int, audit_head: str, mac: str | None
) -> bool:
    """Whether *mac* is the head's MAC under *key* (compared in constant time), of
    either version; a version-2 MAC is checked over the digest it names (whether the
    record still has those fields is :func:`diagnose_chain`'s ``asserted`` check)."""
    if mac is None:
        return False
    asserted = mac_asserted(mac)
    expected = head_mac(key, operation_id, audit_seq, audit_head, asserted)
    return hmac.compare_digest(mac, expected)


def diagnose_chain(
    operation_id: str,
    events: Sequence[StoredAuditEvent],
    *,
    head: tuple[int, str] | None = None,
    mac: str | None = None,
    key: bytes | None = None,
    asserted: str | None = None,
) -> AuditFinding | None:
    """Find the first thing wrong with one operation's stored audit chain.

    The events are checked in the order given (a store returns them by ``seq``): each
    must be numbered one more than the last, name the last event's hash as its
    ``prev_hash``, and hash to its ``hash``. When one does not, the neighbouring events
    tell which tampering it was: an event that hashes correctly under another number
    was moved (``reordered``) or renumbered after a deletion or insertion.

    Args:
        operation_id: the operation the events belong to.
        events: its stored events, in the order the store returned them.
        head: the ``(audit_seq, audit_head)`` the operation's record names; when given,
            the chain must end exactly there (so removed or added last events show).
        mac: the record's ``audit_mac``, checked only when *key* is given.
        key: the audit key; when given, the head must carry a valid MAC
            (:func:`head_mac`), so rewriting events and head together is detected.
        asserted: the digest of the record's asserted fields as stored now
            (:func:`waitbound._model._audit_record.asserted_digest`); with *key* and a
            version-2 MAC, it must be the digest the MAC covers (else
            ``forged_record``). A version-1 MAC covers the head only.

    Returns:
        The first finding, or ``None`` when the chain is intact (and, with *key*,
        authenticated).
    """
    finding = _diagnose_links(operation_id, events)
    if finding is not None:
        return finding
    last_seq, last_hash = (events[-1].seq, events[-1].hash) if events else (0, GENESIS_HASH)
    if head is not None:
        finding = _diagnose_head(operation_id, head, last_seq, last_hash)
        if finding is not None:
            return finding
    if key is None:
        return None
    seq, digest = head if head is not None else (last_seq, last_hash)
    if mac is None:
        return AuditFinding(
            operation_id=operation_id,
            problem=AuditProblem.UNAUTHENTICATED,
            seq=None,
            detail=f"the record's head (event {seq}) has no MAC: it was written without the "
            "audit key, or its MAC was removed",
        )
    if not head_is_authentic(key, operation_id, seq, digest, mac):
        return AuditFinding(
            operation_id=operation_id,
            problem=AuditProblem.FORGED_HEAD,
            seq=None,
            detail=f"the record's head (event {seq}) does not match its MAC: the head was "
            "rewritten without the audit key (or a different key is given)",
        )
    signed = mac_asserted(mac)
    if asserted is not None and signed is not None and signed != asserted:
        return AuditFinding(
            operation_id=operation_id,
            problem=AuditProblem.FORGED_RECORD,
            seq=None,
            detail="the record no longer asserts what its MAC signed (its outcome, reason, "
            "result, counters or decisions were changed without the audit key)",
        )
    return None


def _found(operation_id: str, problem: AuditProblem, seq: int, detail: str) -> AuditFinding:
    return AuditFinding(operation_id=operation_id, problem=problem, seq=seq, detail=detail)


def _belongs(stored: StoredAuditEvent, seq: int, prev: str) -> bool:
    """Whether *stored* is the event written as *seq* right after the hash *prev*."""
    return stored.prev_hash == prev and _hashes_as(stored, seq)


def _hashes_as(stored: StoredAuditEvent, seq: int) -> bool:
    """Whether *stored*'s content and ``prev_hash`` hash to its ``hash`` as event *seq*."""
    return seal(stored.operation_id, seq, stored.event, stored.prev_hash).hash == stored.hash


def _written_as(stored: StoredAuditEvent, most: int) -> int | None:
    """The number *stored* was sealed with, searched in ``1..most``; ``None``: none
    (its content was changed)."""
    return next((seq for seq in range(1, most + 1) if _hashes_as(stored, seq)), None)


def _span(first: int, last: int) -> str:
    return f"event {first}" if first == last else f"events {first}-{last}"


def _diagnose_links(operation_id: str, events: Sequence[StoredAuditEvent]) -> AuditFinding | None:
    """The first event that breaks the chain, and how (see :func:`diagnose_chain`)."""
    positions = {stored.hash: index for index, stored in enumerate(events)}
    most = max([len(events), *(s.seq for s in events)], default=0) + 1
    prev, expected = GENESIS_HASH, 1
    for index, stored in enumerate(events):
        seq = stored.seq
        later = events[index + 1 :]
        if stored.operation_id != operation_id:
            return _found(
                operation_id,
                AuditProblem.INSERTED,
                seq,
                f"the event numbered {seq} belongs to operation {stored.operation_id!r}",
            )
        if seq < expected:
            if index > 0 and seq == events[index - 1].seq:
                return _found(
                    operation_id, AuditProblem.INSERTED, seq, f"two events are numbered {seq}"
                )
            if index == 0:
                return _found(
                    operation_id,
                    AuditProblem.INSERTED,
                    seq,
                    f"an event numbered {seq} precedes event 1",
                )
            return _found(
                operation_id,
                AuditProblem.REORDERED,
                seq,
                f"event {seq} is stored after event {events[index - 1].seq}",
            )
        if seq > expected:
            moved = next((s for s in events[index:] if _belongs(s, expected, prev)), None)
            if moved is not None:
                return _found(
                    operation_id,
                    AuditProblem.REORDERED,
                    expected,
                    f"event {expected} is stored as event {moved.seq}",
                )
            return _found(
                operation_id,
                AuditProblem.DELETED,
                expected,
                f"{_span(expected, seq - 1)} missing: the chain goes from event "
                f"{expected - 1} to event {seq}",
            )
        if _hashes_as(stored, seq):
            if stored.prev_hash == prev:
                prev, expected = stored.hash, expected + 1
                continue
            if positions.get(stored.prev_hash, -1) > index:
                return _found(
                    operation_id,
                    AuditProblem.REORDERED,
                    seq,
                    f"event {seq} follows an event that is stored after it",
                )
            if later and _belongs(later[0], seq, prev):
                return _found(
                    operation_id,
                    AuditProblem.INSERTED,
                    seq,
                    f"event {seq} was never written: the next event was written as event {seq}",
                )
            if seq > 1:
                return _found(
                    operation_id,
                    AuditProblem.EDITED,
                    seq - 1,
                    f"event {seq - 1} was rewritten (its hash recomputed): event {seq} still "
                    "links to the original",
                )
            return _found(
                operation_id,
                AuditProblem.EDITED,
                seq,
                "event 1 was rewritten: it does not start the chain",
            )
        written = _written_as(stored, most)
        if written is None:
            if later and _belongs(later[0], seq, prev):
                return _found(
                    operation_id,
                    AuditProblem.INSERTED,
                    seq,
                    f"event {seq} was never written: the next event was written as event {seq}",
                )
            return _found(
                operation_id,
                AuditProblem.EDITED,
                seq,
                f"event {seq}'s content no longer matches its hash",
            )
        if written > seq:
            if positions.get(stored.prev_hash, -1) > index:
                return _found(
                    operation_id,
                    AuditProblem.REORDERED,
                    seq,
                    f"the event stored as {seq} was written as event {written}",
                )
            return _found(
                operation_id,
                AuditProblem.DELETED,
                seq,
                f"{_span(seq, written - 1)} missing: the event now numbered {seq} was "
                f"written as event {written} (the rest were renumbered)",
            )
        return _found(
            operation_id,
            AuditProblem.INSERTED,
            written,
            f"{_span(written, seq - 1)} never written: the event now numbered {seq} was "
            f"written as event {written}",
        )
    return None


def _diagnose_head(
    operation_id: str, head: tuple[int, str], last_seq: int, last_hash: str
) -> AuditFinding | None:
    """Whether an intact chain ends where the record's head says."""
    head_seq, head_hash = head
    if head_seq > last_seq:
        return _found(
            operation_id,
            AuditProblem.TRUNCATED,
            last_seq + 1,
            f"the chain ends at event {last_seq}, but the record's head names event "
            f"{head_seq}: {_span(last_seq + 1, head_seq)} removed",
        )
    if head_seq < last_seq:
        return _found(
            operation_id,
            AuditProblem.INSERTED,
            head_seq + 1,
            f"the record's head names event {head_seq}, but the chain goes on to event "
            f"{last_seq}: {_span(head_seq + 1, last_seq)} added after it",
        )
    if head_hash != last_hash:
        return _found(
            operation_id,
            AuditProblem.HEAD_MISMATCH,
            head_seq,
            f"event {head_seq}'s hash is not the head the record names: the last event or "
            "the record's head was rewritten",
        )
    return None
