"""The public decision API: list what waits on a person, decide it, ask for more time.

Each function reads the record, applies the pure rules of ``_decisions.py`` and
persists the record with its audit event in one compare-and-swap write: the first
decision wins, and a second one gets a :class:`ConflictError` naming who decided what
and when. A worker writing the same record meanwhile (it keeps polling a running
operation) only makes the rule be applied again on the fresh record.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import anyio

from waitbound._base._clock import Clock, SystemClock
from waitbound._base._errors import ConflictError, DecisionConflictError, OperationNotFoundError
from waitbound._model._audit import AuditEvent
from waitbound._model._outcome import Outcome, Reason
from waitbound._model._record import Record
from waitbound._observe._telemetry import noted
from waitbound._profile._contract import Profile
from waitbound._rules._decisions import (
    decide_record,
    escalation_message,
    expire,
    request_extension_record,
)
from waitbound._rules._options import SYSTEM, Option, cost, options
from waitbound.stores import Store, open_store

__all__ = [
    "Escalation",
    "decide",
    "decide_async",
    "escalations",
    "escalations_async",
    "request_extension",
    "request_extension_async",
]

SCAN_LIMIT = 10_000
"""How many of the newest operations :func:`escalations` looks through."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Escalation:
    """An open decision request, as a person sees it.

    Attributes:
        operation_id: the operation; ``label``: whose it is.
        reason: why it stopped (``None`` for an agent's request on a running operation).
        requested_by: ``waitbound`` when the operation stopped, else who asked.
        opened_at, due_at: when the request was opened, and when it is closed as
            ``decision_timeout`` if nobody decides.
        options: ``(option, cost)`` pairs, e.g. ``("extend", "extend waiting once by 15
            minutes with 4 more checks")``.
        message: the escalation message: everything needed to decide in one look.
        outcome: the operation's :class:`Outcome` now.
    """

    operation_id: str
    label: str | None
    reason: Reason | None
    requested_by: str
    opened_at: datetime
    due_at: datetime
    options: tuple[tuple[str, str], ...]
    message: str
    outcome: Outcome

    def as_json(self) -> dict[str, object]:
        """The escalation as ``waitbound escalations --json`` prints it."""
        return {
            "operation_id": self.operation_id,
            "label": self.label,
            "reason": self.reason.value if self.reason else None,
            "requested_by": self.requested_by,
            "opened_at": self.opened_at.isoformat(),
            "due_at": self.due_at.isoformat(),
            "options": [{"option": o, "cost": c} for o, c in self.options],
            "message": self.message,
            "outcome": self.outcome.as_json(),
        }


def _escalation(record: Record, now: datetime) -> Escalation:
    request = record.oversight.decision_request
    assert request is not None
    return Escalation(
        operation_id=record.contract.operation_id,
        label=record.contract.label,
        reason=record.ending.reason,
        requested_by=request.requested_by,
        opened_at=request.opened_at,
        due_at=request.due_at,
        options=tuple((o.value, cost(record, o)) for o in options(record, now)),
        message=escalation_message(record, now),
        outcome=record.to_outcome(),
    )


def default_decider() -> str:
    """Who decides when nobody says: ``user@host`` of this process."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "someone"
    return f"{user}@{socket.gethostname()}"


def _update(
    store: Store,
    operation_id: str,
    change: Callable[[Record], tuple[Record, AuditEvent] | None],
) -> Record:
    """Apply *change* to the stored record and save it (compare-and-swap), again on the
    fresh record after a concurrent write; ``None`` from *change* saves nothing."""
    while True:
        record = store.get(operation_id)
        if record is None:
            raise OperationNotFoundError(operation_id)
        changed = change(record)
        if changed is None:
            return record
        after, event = changed
        try:
            saved = store.save(after, [event])
        except ConflictError:
            continue
        noted(store, saved, "decision", [event])
        return saved


def escalations(
    *, store: Store | None = None, clock: Clock | None = None, label_prefix: str = ""
) -> list[Escalation]:
    """Every open decision request, newest first.

    Requests past their due time are closed as ``decision_timeout`` on the way (and
    not listed): nothing waits on a person silently forever.

    Args:
        store: where the operations are (default: the local SQLite store).
        clock: the time source (default: the system clock).
        label_prefix: only operations whose label starts with it.

    Returns:
        The open requests, as :class:`Escalation` values.

    Raises:
        StoreError: the store cannot be used.
    """
    store = store if store is not None else open_store()
    clock = clock or SystemClock()
    found = []
    for record in store.recent(label_prefix=label_prefix, limit=SCAN_LIMIT):
        if record.oversight.decision_request is None:
            continue
        now = clock.now()
        if now >= record.oversight.decision_request.due_at:
            _update(store, record.contract.operation_id, lambda fresh: expire(fresh, clock.now()))
            continue
        found.append(_escalation(record, now))
    return sorted(found, key=lambda e: e.opened_at, reverse=True)


def decide(
    operation_id: str,
    option: Option | str,
    *,
    why: str,
    by: str | None = None,
    minutes: float | None = None,
    checks: int | None = None,
    profile: Profile | None = None,
    credential_label: str | None = None,
    store: Store | None = None,
    clock: Clock | None = None,
) -> Outcome:
    """Answer an operation's open decision request with one of its options.

    ``extend`` (and every option that resumes the operation) makes it due again: it
    goes on under ``waitbound wait --operation-id`` or any worker, within the granted
    deadline (*minutes* from now) and *checks* further requests; the counters are not
    reset. See ``docs/decisions.md`` for every option.

    Args:
        operation_id: the operation.
        option: ``extend``, ``cancel``, ``treat_as_pending``, ``mark_succeeded``,
            ``mark_failed``, ``resume_with_credentials``, ``resume_with_profile``,
            ``fetch_result_again``, ``abandon`` or ``decline`` — one of those open on it.
        why: the reason, one line (required; kept in the audit log).
        by: who decides (default: ``user@host``).
        minutes, checks: the grant of a resuming option (default: a third of the
            policy's deadline and request budget), bounded by ``max_extension_s`` and
            the policy's request budget.
        profile: the corrected profile (``resume_with_profile``).
        credential_label: a non-secret name of the new credentials
            (``resume_with_credentials``; must differ from the denied ones').
        store, clock: as in :func:`waitbound.wait`.

    Returns:
        The operation's :class:`Outcome` after the decision (``done`` false once it is
        due again).

    Raises:
        OperationNotFoundError: no such operation.
        UsageError: no open request, an option it does not offer, a missing ``why``,
            a grant beyond the ceilings. Nothing is changed.
        DecisionConflictError: someone decided first (the message names who, what and
            when).
    """
    store = store if store is not None else open_store()
    clock = clock or SystemClock()
    who = by or default_decider()
    seen: list[int] = []

    def change(record: Record) -> tuple[Record, AuditEvent]:
        decided_meanwhile = seen and len(record.oversight.decisions) > seen[0]
        if decided_meanwhile or (
            record.oversight.decision_request is None and record.oversight.decisions
        ):
            raise _conflict(record)
        expired = expire(record, clock.now())
        if expired is not None:  # too late: close it as decision_timeout, then say so
            seen.append(len(record.oversight.decisions))
            return expired
        seen.append(len(record.oversight.decisions))
        return decide_record(
            record,
            option,
            by=who,
            why=why,
            now=clock.now(),
            minutes=minutes,
            checks=checks,
            profile=profile,
            credential_label=credential_label,
        )

    after = _update(store, operation_id, change)
    if (
        seen
        and len(after.oversight.decisions) > seen[0]
        and after.oversight.decisions[-1].by == SYSTEM
    ):
        raise _conflict(after)
    return after.to_outcome()


def _conflict(record: Record) -> DecisionConflictError:
    last = record.oversight.decisions[-1]
    return DecisionConflictError(
        record.contract.operation_id, last.by, f"{last.option} ({last.why})", last.at.isoformat()
    )


def request_extension(
    operation_id: str,
    *,
    minutes: float,
    checks: int,
    why: str,
    by: str,
    store: Store | None = None,
    clock: Clock | None = None,
) -> Escalation:
    """File a request for more time that a person answers (never granted by itself).

    For agents (the MCP tool ``request_extension``): the request appears in
    :func:`escalations` with options ``extend``, ``cancel`` (when cancelable) and
    ``decline`` on a running operation,
    or adds the proposal to an open escalation.

    Raises:
        OperationNotFoundError: no such operation.
        UsageError: finished with nothing open, a blank ``why``, a proposal beyond the
            ceilings.
    """
    store = store if store is not None else open_store()
    clock = clock or SystemClock()
    record = _update(
        store,
        operation_id,
        lambda fresh: request_extension_record(
            fresh, now=clock.now(), minutes=minutes, checks=checks, why=why, by=by
        ),
    )
    return _escalation(record, clock.now())


async def escalations_async(
    *, store: Store | None = None, clock: Clock | None = None, label_prefix: str = ""
) -> list[Escalation]:
    """:func:`escalations`, without blocking the event loop (the store runs in a thread)."""
    return await anyio.to_thread.run_sync(
        lambda: escalations(store=store, clock=clock, label_prefix=label_prefix)
    )


async def decide_async(
    operation_id: str,
    option: Option | str,
    *,
    why: str,
    by: str | None = None,
    minutes: float | None = None,
    checks: int | None = None,
    profile: Profile | None = None,
    credential_label: str | None = None,
    store: Store | None = None,
    clock: Clock | None = None,
) -> Outcome:
    """:func:`decide`, without blocking the event loop (the store runs in a thread)."""
    return await anyio.to_thread.run_sync(
        lambda: decide(
            operation_id,
            option,
            why=why,
            by=by,
            minutes=minutes,
            checks=checks,
            profile=profile,
            credential_label=credential_label,
            store=store,
            clock=clock,
        )
    )


async def request_extension_async(
    operation_id: str,
    *,
    minutes: float,
    checks: int,
    why: str,
    by: str,
    store: Store | None = None,
    clock: Clock | None = None,
) -> Escalation:
    """:func:`request_extension`, without blocking the event loop."""
    return await anyio.to_thread.run_sync(
        lambda: request_extension(
            operation_id,
            minutes=minutes,
            checks=checks,
            why=why,
            by=by,
            store=store,
            clock=clock,
        )
    )
