"""The Store protocol every backend implements, and what they share."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from waitbound._base._errors import ConflictError, StoreError, UsageError
from waitbound._base._json import JSON
from waitbound._model._audit import (
    AuditEvent,
    StoredAuditEvent,
    head_is_authentic,
    head_mac,
    seal_all,
)
from waitbound._model._audit_record import asserted_digest
from waitbound._model._history import Evidence, ScheduleSummary
from waitbound._model._push import Channel, InboundDelivery, OutboxEntry, OutboxStatus
from waitbound._model._record import AuditHead, Record
from waitbound.stores._codec import brief, dump_json, load_json

if TYPE_CHECKING:
    from waitbound.stores._sql_dialect import SQLAccess

__all__ = [
    "DRIVABLE_PHASES",
    "AuditCursor",
    "Planner",
    "Store",
    "Write",
    "advance",
    "audit_key_of",
    "ClaimsByReservation",
    "InboxPruning",
    "SQLTables",
    "claimed",
    "cursor_of",
    "encode_json",
    "webhook_key",
    "decode_record",
    "encode_record",
    "is_claimable",
    "is_free",
    "outcomes",
    "planned",
    "readable",
]

_log = logging.getLogger("waitbound.stores")

Write = tuple[Record, Sequence[AuditEvent]]
"""One record write: the record (its ``version`` the one it was read at) and its events."""

Planner = Callable[[Record], Write | None]
"""What :meth:`Store.reserve_due` asks of each due record: the write to make (a
reservation, or an outcome reached without a request), or ``None`` to leave it alone."""


class Store(Protocol):
    """Durable operations and their audit logs.

    Every write is a compare-and-swap on ``Record.version`` and appends its audit
    events in the same transaction, so the log never disagrees with the record. A
    write that records an outcome also adds the operation's duration evidence to the
    schedule history in that transaction (``waitbound._model._history``, once per operation,
    the newest ``HISTORY_LIMIT`` per key).
    """

    def create(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """Store a new operation (its ``version`` becomes 1) with its first events.

        Raises:
            UsageError: an operation with this id exists already.
        """
        ...

    def get(self, operation_id: str) -> Record | None:
        """Return the operation, or ``None`` when there is none with this id."""
        ...

    def save(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        """Write *record* if the stored version still equals ``record.version``.

        Returns:
            The record as stored, with ``version`` incremented.

        Raises:
            ConflictError: another writer changed the record since it was read.
        """
        ...

    def audit(self, operation_id: str) -> list[StoredAuditEvent]:
        """Return the operation's audit events in order (empty when there are none)."""
        ...

    def claim_due(
        self, *, owner: str, now: datetime, lease_s: float, limit: int, label_prefix: str = ""
    ) -> list[Record]:
        """Lease up to *limit* operations that are due, atomically, oldest due first;
        with *label_prefix*, only operations whose ``label`` starts with it.

        Due: waiting or fetching (not finished, not submitting), ``next_poll_at <= now``,
        and no lease, or an expired one. Each claimed record is written with
        ``lease_owner = owner`` and ``lease_expires_at = now + lease_s`` (a version
        bump, no audit event: a claim changes no state a person reads). Concurrent
        callers never claim the same operation.
        """
        ...

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
        """Claim and reserve up to *limit* due operations in ONE transaction.

        The operations are selected exactly as :meth:`claim_due` selects them (due,
        drivable, free or with an expired lease, oldest due first, *label_prefix*),
        except that a lease held by one of *gone_owners* (holders known to be gone, see
        ``waitbound._engine._lease.holder_is_gone``) counts as expired. ``plan(record)`` is
        called for each, inside the transaction: the write it returns (a reservation
        leased to *owner*, or an outcome) is made as :meth:`save` makes it (audit
        events sealed in the same transaction, the push path's writes); ``None``
        leaves the record untouched. Concurrent callers never get the same operation.

        Returns:
            The records as stored by this call (only those *plan* returned a write for),
            in selection order.

        Raises:
            UsageError: *plan* returned a write for another operation or version, or a
                lease held by someone other than *owner*.
        """
        ...

    def save_many(self, items: Sequence[Write]) -> list[Record | ConflictError]:
        """Write each ``(record, events)`` as :meth:`save` would, all in ONE transaction.

        Each item is a compare-and-swap on its own ``version``: an item whose stored
        version moved on writes nothing (neither record nor events) and yields a
        :class:`ConflictError` in its slot; the others are written. Two items for one
        operation: the second sees the first's write (and so conflicts unless it was
        read after it).

        Returns:
            One entry per item, in order: the stored record, or the conflict.
        """
        ...

    def schedule_history(self, key: str) -> list[Evidence]:
        """The schedule key's duration evidence, newest first (at most
        ``HISTORY_LIMIT``; ``[]`` for an unknown key)."""
        ...

    def history_version(self, key: str) -> int:
        """The key's history version: changes whenever its history does (0: none)."""
        ...

    def schedules(self) -> list[ScheduleSummary]:
        """Every schedule key with history, by key."""
        ...

    def forget_schedule(self, key: str) -> int:
        """Drop the key's history (the learned schedule starts cold again); return how
        many pieces of evidence it held (0 for an unknown key)."""
        ...

    def pace(
        self,
        origin: str,
        planned_at: datetime,
        *,
        latest_at: datetime,
        now: datetime,
        rng_offset: float,
    ) -> datetime:
        """Pace one poll of *origin* planned at *planned_at* through the origin's
        calendar (``waitbound._model._pacing``), atomically: read the counts of the buckets
        :func:`~waitbound._model._pacing.span` names, pick the time with
        :func:`~waitbound._model._pacing.choose`, count the poll in its bucket, and prune every
        bucket before *now*'s (the calendar stays bounded).

        Args:
            origin: ``scheme://host:port`` of the status URL.
            planned_at: the time every other rule chose (aware UTC).
            latest_at: the latest the poll may move to (aware UTC).
            now: the current time (aware UTC).
            rng_offset: where in its bucket a moved poll lands, in ``[0, 1)``.

        Returns:
            The poll time, at or after *planned_at* and at or before *latest_at*.

        Raises:
            StoreError: the store could not answer (the caller then keeps *planned_at*).
        """
        ...

    def calendar_size(self) -> int:
        """How many (origin, bucket) counts the pacing calendar holds."""
        ...

    def pending_summary(self) -> tuple[int, datetime | None]:
        """How many operations have no outcome yet, and the earliest ``next_poll_at``
        among those a worker can drive (``None`` when there are none)."""
        ...

    def next_claimable(
        self, *, now: datetime, label_prefix: str = ""
    ) -> tuple[datetime | None, list[str]]:
        """When a worker should look again, and whose leases hold it back.

        Returns:
            The earliest instant an open, drivable operation (with *label_prefix*)
            becomes claimable, ``max(next_poll_at, lease_expires_at)`` (``None``: there
            is none; an instant at or before *now*: one is claimable already), and the
            distinct ``lease_owner`` values of operations that are due at *now* but
            leased until after it (at most 100), so the caller can tell which holders
            are gone.
        """
        ...

    def recent(
        self, *, label_prefix: str = "", limit: int = 50, open_only: bool = False
    ) -> list[Record]:
        """Up to *limit* operations whose ``label`` starts with *label_prefix*, newest
        (by ``created_at``) first; an empty prefix lists every operation, labelled or not.
        With *open_only*, only those without an outcome.

        A row that cannot be read back (a damaged record) is left out, with a warning
        logged (``waitbound.stores``): one operation never fails a listing for everyone.
        """
        ...

    def heads(self) -> list[tuple[str, int, str]]:
        """Every operation's ``(operation_id, audit_seq, audit_head)``, by id (code
        point order), read from the typed columns only: a record that cannot be read
        back is listed too (so ``waitbound audit verify --all`` reports it)."""
        ...

    # -- the push path (docs/webhooks.md) -------------------------------------------
    # ``create`` and ``save`` also, in the same transaction as the record: register a
    # record with ``push.webhook`` and a ``job_id`` as the operation deliveries about
    # that job match (the newest such operation wins), match the inbox's unmatched
    # deliveries for it (look-back), and insert the record's
    # ``waitbound._rules._notices.outbox_entries`` (an entry whose ``delivery_id`` exists is
    # left as it is).

    def put_delivery(self, delivery: InboundDelivery) -> InboundDelivery | None:
        """Store a verified webhook delivery, unless one with its (provider, webhook id)
        is stored already; in the same transaction, match it to the operation
        registered for its (provider, job id), if any.

        Returns:
            The delivery as stored (``operation_id`` set when matched), or ``None`` for
            a duplicate (nothing written).
        """
        ...

    def put_deliveries(self, deliveries: Sequence[InboundDelivery]) -> list[InboundDelivery | None]:
        """Store many verified deliveries in ONE transaction, each exactly as
        :meth:`put_delivery` stores it, in order (a delivery whose (provider, webhook
        id) came earlier in the same call is a duplicate too). The group commit of
        ``waitbound serve``'s receiver: written whole or not at all.

        Returns:
            One entry per delivery, in order: as :meth:`put_delivery` returns.
        """
        ...

    def pending_deliveries(self, *, limit: int) -> list[InboundDelivery]:
        """Up to *limit* deliveries matched to an operation but not applied, oldest first."""
        ...

    def mark_applied(self, provider: str, webhook_id: str, at: datetime) -> bool:
        """Take the delivery to apply it: mark it applied at *at*, unless it is marked
        already (or not stored).

        Returns:
            Whether this call marked it: of concurrent sweepers, only the one that did
            applies it, so a delivery is applied at most once.
        """
        ...

    def inbox(
        self, *, provider: str | None = None, operation_id: str | None = None, limit: int = 100
    ) -> list[InboundDelivery]:
        """Up to *limit* stored deliveries, newest first; only *provider*'s, or only
        those matched to *operation_id*, when given."""
        ...

    def claim_outbox(
        self,
        *,
        owner: str,
        now: datetime,
        lease_s: float,
        limit: int,
        channels: Sequence[Channel],
        operation_id: str | None = None,
    ) -> list[OutboxEntry]:
        """Lease up to *limit* pending entries on *channels* whose ``next_attempt_at``
        has come and whose lease is free or expired, oldest first (by
        ``next_attempt_at``, then ``delivery_id``); only *operation_id*'s entries when it
        is given (``None``: every operation's). Each is written with
        ``lease_owner = owner`` and ``lease_expires_at = now + lease_s``; concurrent
        callers never claim the same entry, and no entry outside the filter is touched."""
        ...

    def settle_outbox(self, entry: OutboxEntry) -> bool:
        """Write an attempt's result (``status``, ``attempts``, ``next_attempt_at``,
        ``delivered_at``, ``last_error``) and release the lease, if the stored entry is
        still pending and leased by ``entry.lease_owner``.

        Returns:
            Whether it was written (``False``: the lease was lost; nothing changed).
        """
        ...

    def add_outbox(self, entry: OutboxEntry) -> OutboxEntry:
        """Store a new entry (a replay).

        Raises:
            UsageError: an entry with its ``delivery_id`` exists already.
        """
        ...

    def outbox(
        self,
        *,
        operation_id: str | None = None,
        status: OutboxStatus | None = None,
        limit: int = 100,
    ) -> list[OutboxEntry]:
        """Up to *limit* entries, newest (by ``created_at``) first, filtered when given."""
        ...

    def get_outbox(self, delivery_id: str) -> OutboxEntry | None:
        """The entry with this id, or ``None``."""
        ...

    def audit_after(
        self, cursor: AuditCursor | None, *, label_prefix: str = "", limit: int = 500
    ) -> list[StoredAuditEvent]:
        """Up to *limit* audit events of operations whose ``label`` starts with
        *label_prefix*, in (``at``, operation id, seq) order, strictly after *cursor*
        (``None``: from the first). ``GET /events`` streams them."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


@runtime_checkable
class SQLTables(Protocol):
    """A store keeping its rows in SQL tables that other store modules use too (the
    sign-in sessions, ``_sessions``; the groups, ``_groups``): SQLite and PostgreSQL.

    Those modules reach the tables through this one method, never through the store's
    private members, so each backend keeps its locking, transactions, error handling
    and metrics to itself.
    """

    def sql_tables(self) -> SQLAccess:
        """The store's dialect (with its tables' names) and a way to open one of its
        transactions (see :class:`~waitbound.stores._sql_dialect.SQLAccess`)."""
        ...


@runtime_checkable
class InboxPruning(Protocol):
    """A store whose webhook inbox can be pruned (``waitbound serve``'s
    ``[inbox] retention_days``, see ``_inbox_retention``): every waitbound store."""

    def prune_inbox(self, *, before: datetime) -> tuple[int, int]:
        """In one transaction, delete the deliveries received before *before* (aware)
        that were applied to their operation or never matched to one (one matched and
        waiting to be applied is kept whatever its age); return how many were deleted
        and how many the inbox still holds.

        Raises:
            StoreError: the store failed (nothing is deleted).
        """
        ...


AuditCursor = tuple[datetime, str, int]
"""A position in the audit events of many operations: (``at``, operation id, seq)."""


def readable(
    rows: Sequence[Any], decode: Callable[[Any], Record], operation_id: Callable[[Any], str]
) -> list[Record]:
    """The records of *rows* that *decode* can read; the others are logged and left out
    (see :meth:`Store.recent`)."""
    records = []
    for row in rows:
        try:
            records.append(decode(row))
        except StoreError as exc:
            if isinstance(exc, UsageError):
                raise
            _log.warning("operation %r left out of a listing: %s", operation_id(row), exc)
    return records


def audit_key_of(store: object) -> bytes | None:
    """The audit key a waitbound store was opened with (``None``: none, or a store of
    another kind). For checks that must refuse a record the key proves forged."""
    key = getattr(store, "_audit_key", None)
    return key if isinstance(key, bytes) else None


def cursor_of(stored: StoredAuditEvent) -> AuditCursor:
    """The position of *stored* (see :meth:`Store.audit_after`)."""
    return (stored.event.at, stored.operation_id, stored.seq)


def webhook_key(record: Record) -> tuple[str, str] | None:
    """The (provider, job id) deliveries about *record*'s job carry, when it expects them."""
    if record.push.webhook is None or record.job_id is None:
        return None
    return (record.push.webhook, record.job_id)


def encode_json(value: object) -> str:
    """A push-path value (a payload) as stored text (see :func:`dump_json`)."""
    return dump_json(value)


def encode_record(record: Record) -> str:
    """Encode a record as the versioned JSON text stores keep."""
    return dump_json(record.to_json())


def decode_record(text: str) -> Record:
    """Decode a record stored by :func:`encode_record`.

    Raises:
        SchemaVersionError: written by a newer waitbound.
        StoreError: the stored text is not a record.
    """
    try:
        data: JSON = load_json(text)
    except ValueError as exc:
        raise StoreError(f"a stored record is not valid JSON ({brief(exc)})") from None
    if not isinstance(data, dict):
        raise StoreError("a stored record is not a JSON object")
    try:
        return Record.from_json(data)
    except (TypeError, KeyError, ValueError, AssertionError) as exc:
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"a stored record is damaged ({brief(exc)})") from None


DRIVABLE_PHASES = ("waiting", "fetching_result", "fetching_errors")
"""Phases a worker drives; ``submitting`` belongs to the process holding the request body."""


def is_claimable(
    record: Record, now: datetime, label_prefix: str = "", gone_owners: Collection[str] = ()
) -> bool:
    """Whether *record* is due and free for a worker to claim (see ``Store.claim_due``)."""
    free = is_free(record, now, gone_owners)
    labelled = (record.label or "").startswith(label_prefix)
    return (
        record.phase.value in DRIVABLE_PHASES and record.next_poll_at <= now and free and labelled
    )


def is_free(record: Record, now: datetime, gone_owners: Collection[str] = ()) -> bool:
    """Whether *record* has no lease, an expired one, or one held by a gone owner."""
    return (
        record.lease_expires_at is None
        or record.lease_expires_at <= now
        or record.lease_owner in gone_owners
    )


def planned(record: Record, owner: str, plan: Planner) -> Write | None:
    """``plan(record)``, checked: a write of this record at its version, leased to
    *owner* when leased at all (see :meth:`Store.reserve_due`).

    Raises:
        UsageError: the write is for another operation or version, or another owner.
    """
    write = plan(record)
    if write is None:
        return None
    new = write[0]
    if new.operation_id != record.operation_id or new.version != record.version:
        raise UsageError(
            f"reserve_due: plan returned a write of {new.operation_id!r} version "
            f"{new.version} for {record.operation_id!r} version {record.version}"
        )
    if new.lease_owner is not None and new.lease_owner != owner:
        raise UsageError(
            f"reserve_due: plan leased {record.operation_id!r} to {new.lease_owner!r}, "
            f"not to the caller {owner!r}"
        )
    return write


def outcomes(
    written: Sequence[Record | None], items: Sequence[Write]
) -> list[Record | ConflictError]:
    """:meth:`Store.save_many`'s answer: each write's stored record, or its conflict."""
    return [
        stored if stored is not None else ConflictError(item[0].operation_id, item[0].version)
        for stored, item in zip(written, items, strict=True)
    ]


def claimed(record: Record, *, owner: str, now: datetime, lease_s: float) -> Record:
    """*record* with the claim's lease set (the version is bumped by the write)."""
    return record.evolve(lease=record.lease.held(owner, now + timedelta(seconds=lease_s)))


class ClaimsByReservation:
    """:meth:`Store.claim_due` for a store that has :meth:`Store.reserve_due`: the same
    selection and transaction, with a plan that only leases (no audit event)."""

    def claim_due(
        self: Store,
        *,
        owner: str,
        now: datetime,
        lease_s: float,
        limit: int,
        label_prefix: str = "",
    ) -> list[Record]:
        """See :meth:`Store.claim_due`."""
        return self.reserve_due(
            owner=owner,
            now=now,
            limit=limit,
            plan=lambda record: (claimed(record, owner=owner, now=now, lease_s=lease_s), ()),
            label_prefix=label_prefix,
        )


def advance(
    record: Record, events: Sequence[AuditEvent], audit_key: bytes | None = None
) -> tuple[Record, list[StoredAuditEvent]]:
    """The record as it is after a successful write, and its events sealed onto its chain.

    The record carries the chain's head (``audit_seq``, ``audit_head``), written in the
    same transaction as the events, so removing the last events is detected too.

    With *audit_key*, the head the write leaves is signed (``audit_mac``, version 2:
    the head and the record's asserted fields, see :func:`waitbound._model._audit.head_mac`
    and :mod:`waitbound._model._audit_record`) when the head it extends is authentic: a new
    operation, or a head whose MAC verifies. A head without a valid MAC is never
    signed over (that would bless a rewrite): its ``audit_mac`` is kept as it was, so
    ``verify`` goes on reporting it. Without a key, a write that moves the head drops
    the MAC (nobody signed the new head); one that does not move it keeps it.
    """
    sealed = seal_all(
        record.operation_id, events, last_seq=record.audit_seq, last_hash=record.audit_head
    )
    # One copy of the record: a new audit part when the head moved, the rest shared.
    seq, head, mac = record.audit_seq, record.audit_head, record.audit_mac
    if sealed:
        seq, head = sealed[-1].seq, sealed[-1].hash
    if audit_key is not None:
        extends_authentic = record.version == 0 or head_is_authentic(
            audit_key, record.operation_id, record.audit_seq, record.audit_head, record.audit_mac
        )
        if extends_authentic:
            mac = head_mac(audit_key, record.operation_id, seq, head, asserted_digest(record))
    elif sealed:
        mac = None
    audit = record.audit
    if (seq, head, mac) != (audit.audit_seq, audit.audit_head, audit.audit_mac):
        audit = AuditHead(audit_seq=seq, audit_head=head, audit_mac=mac)
    stored = record.evolve(audit=audit, version=record.version + 1)
    return stored, sealed
