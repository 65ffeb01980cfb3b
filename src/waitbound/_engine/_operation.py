"""Operations: what to wait on or submit, and creating or resuming their records.

Creating an operation stores its record before anything is sent; resuming one keeps
its profile, policy, deadline, counters and next poll time (a restart never resets a
budget).
"""

from __future__ import annotations

import email.utils
import hashlib
import math
import os
import re
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from waitbound._base._clock import Clock
from waitbound._base._errors import ConflictError, OperationNotFoundError, StoreError, UsageError
from waitbound._base._urls import checked_url, origin, shown_url
from waitbound._engine._tell import create_and_tell, save_and_tell
from waitbound._model._audit import EventKind
from waitbound._model._audit_record import record_is_forged
from waitbound._model._record import (
    Contract,
    Ending,
    Oversight,
    Phase,
    Policy,
    Push,
    Record,
    Schedule,
)
from waitbound._model._record import Submission as SubmissionPart
from waitbound._observe._metrics import label_origins, label_profiles
from waitbound._observe._telemetry import with_caller_context
from waitbound._profile._contract import Profile
from waitbound._profile._protocol import IDEMPOTENT_METHODS, FinalStateVia, UrlKind
from waitbound._profile._schedule import DelaySource
from waitbound._rules._controller import audit_event, created_event
from waitbound._rules._decisions import decide_record, expire
from waitbound._rules._options import Option, cancel_refusal
from waitbound.stores import Store
from waitbound.stores._protocol import audit_key_of

__all__ = [
    "Operation",
    "Submission",
    "check_first_poll_after",
    "check_push",
    "check_url",
    "check_urls",
    "new_operation_id",
    "open_operation",
    "request_cancel",
]

_OPERATION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_RECEIVER: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
"""A webhook receiver's name: a ``[webhooks.NAME]`` table of ``serve.toml``."""


def new_operation_id() -> str:
    """Return a fresh operation id: ``op_`` and 20 random hex digits."""
    return f"op_{uuid.uuid4().hex[:20]}"


def check_url(url: str, what: str) -> str:
    """Return *url* when it is an absolute http(s) URL with a host and no credentials.

    Raises:
        UsageError: it is not.
    """
    try:
        return checked_url(url)
    except ValueError as exc:
        raise UsageError(f"{what} {shown_url(url)} cannot be used ({exc})") from None


def check_urls(operation: Operation | Submission) -> None:
    """Refuse an operation whose status or submit URL, result URL or cancel URL cannot be
    used (:func:`check_url`).

    Raises:
        UsageError: one of them cannot be used (the message names which).
    """
    if isinstance(operation, Operation):
        check_url(operation.status_url, "status URL")
    else:
        check_url(operation.url, "submit URL")
    for extra, what in (("result_url", "result URL"), ("cancel_url", "cancel URL")):
        url = getattr(operation, extra, None)
        if url is not None:
            check_url(url, what)


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """What to wait on: the status endpoint and the contract that reads it.

    Attributes:
        status_url: the status endpoint (absolute http or https URL).
        profile: the provider's state table.
        policy: deadline, budgets and pacing (seconds).
        result_url: fetched once after a terminal success; ``None`` means the
            result is read inline (the profile's ``result``) or from the profile's
            ``result_url`` / ``result_url_template``.
        cancel_url: the cancel action's URL, when no receipt or profile names it.
        cancel_on_deadline: send one cancel request when the deadline passes.
        trusted_origins: more origins (``https://files.example.com``) that may receive
            the caller's headers, besides the status URL's.
        job_id: the provider's job id, when the caller knows it.
        label: who or what the operation belongs to (1-128 printable characters),
            e.g. ``mcp:transcode``; :meth:`Store.recent` lists by its prefix.
        credential_label: a non-secret name for the credentials the caller's headers
            carry (1-128 printable characters), e.g. ``reports-bot-2025``; kept on the
            record so that ``resume_with_credentials`` can insist on other ones. Never
            the secret itself.
        url_kind: how the status URL's answers are read: ``status`` (a status
            monitor, the default), ``location`` (by status code, e.g. an Azure
            ``Location`` URL) or ``resource`` (the resource's provisioning state; the
            profile must describe that kind).
        webhook: the receiver of ``waitbound serve`` (``[webhooks.NAME]``, 1-64
            lower-case letters, digits, ``_`` or ``-``) whose deliveries about this job
            are expected; polling then slows to the backup schedule. ``None``: polling
            only.
        notify_url: where a signed completion webhook (Standard Webhooks) is sent once
            the operation finishes (absolute http or https URL); ``None``: none. See
            ``docs/completions.md``.
    """

    status_url: str
    profile: Profile
    policy: Policy = field(default_factory=Policy)
    result_url: str | None = None
    cancel_url: str | None = None
    cancel_on_deadline: bool = False
    trusted_origins: tuple[str, ...] = ()
    job_id: str | None = None
    label: str | None = None
    credential_label: str | None = None
    url_kind: UrlKind = UrlKind.STATUS
    webhook: str | None = None
    notify_url: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """A job request to send (once), then wait on.

    Attributes:
        method: the HTTP method, e.g. ``POST``.
        url: the submit endpoint (absolute http or https URL).
        profile: the provider's contract; its ``submit`` part says where the
            receipt names the job id and the status URL.
        policy: deadline (counted from the submission), budgets and pacing.
        body: the request body (never stored; only its fingerprint is).
        content_type: sent as ``Content-Type`` with a body.
        idempotency_key: sent in the profile's idempotency header, or as Azure's
            ``Repeatability-Request-ID`` (generated when the profile names a scheme and
            this is ``None``).
        max_submit_attempts: how many times a submission without an answer (a
            timeout, a dropped connection, a 5xx) may be sent, when sending it again is
            safe: with an idempotency key, or by an idempotent method (PUT, DELETE;
            RFC 9110 §9.2.2). Otherwise it is sent once.
        final_state_via: where the final state is after the status monitor reports
            success (Azure's ``final-state-via``), overriding the profile.
        result_url, cancel_url, cancel_on_deadline, trusted_origins, label,
            credential_label, webhook, notify_url: as in :class:`Operation` (headers go
            to the submit URL's origin and these).
    """

    method: str
    url: str
    profile: Profile
    policy: Policy = field(default_factory=Policy)
    body: bytes = b""
    content_type: str | None = "application/json"
    idempotency_key: str | None = None
    max_submit_attempts: int = 3
    final_state_via: FinalStateVia | None = None
    result_url: str | None = None
    cancel_url: str | None = None
    cancel_on_deadline: bool = False
    trusted_origins: tuple[str, ...] = ()
    label: str | None = None
    credential_label: str | None = None
    webhook: str | None = None
    notify_url: str | None = None

    def fingerprint(self) -> str:
        """``sha256`` over method, URL and body: what identifies the request in the record."""
        digest = hashlib.sha256(f"{self.method.upper()}\n{self.url}\n".encode() + self.body)
        return f"sha256:{digest.hexdigest()}"

    def idempotency_headers(self, key: str | None, first_sent: datetime) -> dict[str, str]:
        """The headers that make a resend of this request safe (none without a key).

        ``repeatability`` (Azure's repeatable requests): ``Repeatability-Request-ID``
        with the key and ``Repeatability-First-Sent`` with *first_sent* as an
        IMF-fixdate, the same on every attempt. Otherwise the key in the profile's
        ``idempotency_header`` (``Idempotency-Key`` when the caller gave a key).
        """
        if key is None:
            return {}
        contract = self.profile.submit
        if contract.idempotency_scheme == "repeatability":
            return {
                "Repeatability-Request-ID": key,
                "Repeatability-First-Sent": email.utils.format_datetime(first_sent, usegmt=True),
            }
        return {contract.idempotency_header or "Idempotency-Key": key}


def _check_id(operation_id: str | None) -> None:
    if operation_id is not None and not _OPERATION_ID.fullmatch(operation_id):
        raise UsageError(
            f"operation id {operation_id[:40]!r} must be 1-128 letters, digits, "
            "'.', '_', ':' or '-'"
        )


def _resume(store: Store, existing: Record, clock: Clock, *, callback: bool = False) -> Record:
    _check_signed(store, existing)
    if existing.is_finished:
        return existing
    if callback and not existing.push.callback:  # this process brings an on_complete
        existing = existing.evolve(push=existing.push.evolve(callback=True))
    event = audit_event(
        existing,
        clock.now(),
        EventKind.RESUMED,
        f"resumed: {existing.requests_used} of {existing.max_requests} requests "
        f"used, deadline {existing.schedule.deadline_at.isoformat()}",
    )
    try:
        return save_and_tell(store, existing, [event])
    except ConflictError:  # another process moved it on; its record is as good
        return store.get(existing.contract.operation_id) or existing


def _check_signed(store: Store, record: Record) -> None:
    """Refuse a record its store's audit key proves was changed without the key (its
    outcome, result, counters, ... or head), so a forged outcome is never reported and
    a resumed write never signs it.

    Raises:
        StoreError: the record's MAC does not match it (see ``docs/audit.md``).
    """
    key = audit_key_of(store)
    if key is not None and record_is_forged(record, key):
        raise StoreError(
            f"operation {record.contract.operation_id}: its record does not match its audit MAC "
            "(it was changed without the audit key); nothing it says is reported; check "
            f"it with `waitbound audit verify {record.contract.operation_id}`"
        )


def _create(store: Store, record: Record, clock: Clock) -> Record:
    try:
        return create_and_tell(store, record, [with_caller_context(record, created_event(record))])
    except UsageError:  # created a moment ago by a process started with the same id
        existing = store.get(record.contract.operation_id)
        if existing is None:
            raise
        return _resume(store, existing, clock, callback=record.push.callback)


def check_first_poll_after(first_poll_after_s: float, policy: Policy) -> float:
    """Return *first_poll_after_s* (seconds) when the first request of a new operation
    under *policy* may wait that long: a finite number from 0, less than the time to its
    deadline (or business deadline, when earlier).

    Raises:
        UsageError: it is not (one line naming the value and the bound).
    """
    value = first_poll_after_s
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise UsageError(
            f"first_poll_after_s must be a non-negative number of seconds, got {value!r}"
        )
    bound_s, which = policy.deadline_s, "deadline_s"
    if policy.business_deadline_s is not None and policy.business_deadline_s < bound_s:
        bound_s, which = policy.business_deadline_s, "business_deadline_s"
    if value >= bound_s:
        raise UsageError(
            f"first_poll_after_s ({value:g}s) is not before {which} ({bound_s:g}s): no "
            f"request would ever be sent; lower first_poll_after_s or raise {which}"
        )
    return float(value)


def open_operation(
    store: Store,
    operation: Operation | Submission | None,
    *,
    operation_id: str | None,
    clock: Clock,
    callback: bool = False,
    first_poll_after_s: float = 0.0,
) -> Record:
    """Create the operation's record, or load it to resume.

    An existing record keeps its own profile, policy, deadline, counters and next
    poll time: a restart never resets a budget. *operation* may be ``None`` only to
    resume. *callback*: an ``on_complete`` callable will take the completion
    (``Record.push.callback``; set on a resumed operation that is not finished too).
    *first_poll_after_s*: a new :class:`Operation`'s first request is sent that many
    seconds after its creation, not at once (its caller holds a fresh answer): the
    record's first ``next_poll_at``, delay source ``first_poll_after``; 0 sends it at
    once. A resumed operation keeps its stored next poll time.

    Raises:
        UsageError: a bad id, URL or webhook receiver name, a resume whose status URL
            or request differs from the stored one, an unknown id without an
            *operation* to create, or a *first_poll_after_s* that is negative, not
            before the deadline, or given without an :class:`Operation`.
    """
    _check_id(operation_id)
    if first_poll_after_s != 0 or not isinstance(first_poll_after_s, int | float):
        if not isinstance(operation, Operation):
            raise UsageError(
                "first_poll_after_s is set when an operation is created: give the "
                "Operation (its status URL) to wait on"
            )
        check_first_poll_after(first_poll_after_s, operation.policy)
    if operation is not None:
        check_push(operation)
        check_urls(operation)
    if operation is not None:  # this process's caller named them: metric labels
        label_origins(_origins_named(operation))
        label_profiles((operation.profile.name,))
    existing = store.get(operation_id) if operation_id else None
    if existing is not None:
        if (
            isinstance(operation, Operation)
            and operation.status_url != existing.submission.status_url
        ):
            raise UsageError(
                f"operation {operation_id} waits on another status URL; "
                "resume it without a URL, or use a new operation id"
            )
        if isinstance(operation, Submission) and (
            operation.fingerprint() != existing.submission.submit_fingerprint
        ):
            raise UsageError(
                f"operation {operation_id} was created by another request; use a new operation id"
            )
        return _resume(store, existing, clock, callback=callback)
    if operation is None:
        raise OperationNotFoundError(operation_id or "")
    record = _new_record(operation, operation_id, clock.now())
    if first_poll_after_s > 0:
        record = record.evolve(
            schedule=record.schedule.evolve(
                next_poll_at=record.contract.created_at + timedelta(seconds=first_poll_after_s),
                delay_source=DelaySource.FIRST_POLL_AFTER,
            )
        )
    push = Push(webhook=operation.webhook, notify_url=operation.notify_url, callback=callback)
    return _create(store, record.evolve(push=push), clock)


def _origins_named(operation: Operation | Submission) -> list[tuple[str, str | None, int | None]]:
    """The origins of the URLs a caller named in *operation* (checked already)."""
    named = operation.status_url if isinstance(operation, Operation) else operation.url
    urls = [named, operation.result_url, operation.cancel_url, *operation.trusted_origins]
    found = []
    for url in urls:
        if url is not None:
            try:
                found.append(origin(url))
            except ValueError:
                continue
    return found


def check_push(operation: Operation | Submission) -> None:
    """Check an operation's push opt-in: ``webhook`` a receiver name, ``notify_url`` an
    absolute http(s) URL without credentials.

    Raises:
        UsageError: either cannot be used (the message quotes a bounded part only).
    """
    if operation.webhook is not None and not (
        isinstance(operation.webhook, str) and _RECEIVER.fullmatch(operation.webhook)
    ):
        raise UsageError(
            f"webhook receiver {str(operation.webhook)[:40]!r} must be 1-64 lower-case "
            "letters, digits, '_' or '-', starting with a letter or digit (a "
            "[webhooks.NAME] of serve.toml)"
        )
    if operation.webhook is not None and not _learns_job_id(operation):
        raise UsageError(
            f"webhook deliveries are matched by the job's id, and this operation never "
            f"learns it: give the job id (--job-id-path, or a profile whose job_id names "
            f"it{'' if isinstance(operation, Submission) else '; Operation(job_id=…)'})"
        )
    if operation.notify_url is not None:
        check_url(operation.notify_url, "notify URL")


def _learns_job_id(operation: Operation | Submission) -> bool:
    """Whether the operation's record can hold a job id: given, or named by the profile
    in a status body (or, submitted, in the receipt)."""
    profile = operation.profile
    if "job_id" in profile.expressions:
        return True
    if isinstance(operation, Submission):
        return "job_id" in profile.submit.expressions
    return operation.job_id is not None


def _check_label(label: str | None, what: str = "label") -> None:
    if label is not None and not (0 < len(label) <= 128 and label.isprintable()):
        raise UsageError(f"{what} {label[:40]!r} must be 1-128 printable characters")


def _new_record(
    operation: Operation | Submission, operation_id: str | None, now: datetime
) -> Record:
    """A new record of *operation*, built from its parts: what it was created with, where
    the job is (a URL to poll, or the request that submits it), when to look first."""
    _check_label(operation.label)
    _check_label(operation.credential_label, "credential label")
    policy = operation.policy
    business = policy.business_deadline_s
    contract = Contract(
        operation_id=operation_id or new_operation_id(),
        profile=operation.profile,
        policy=policy,
        created_at=now,
        business_deadline_at=None if business is None else now + timedelta(seconds=business),
        label=operation.label,
        trusted_origins=tuple(check_url(o, "trusted origin") for o in operation.trusted_origins),
        cancel_on_deadline=operation.cancel_on_deadline,
    )
    schedule = Schedule(deadline_at=now + timedelta(seconds=policy.deadline_s), next_poll_at=now)
    oversight = Oversight(credential_label=operation.credential_label)
    if isinstance(operation, Operation):
        if operation.url_kind not in operation.profile.tables:
            raise UsageError(
                f"profile {operation.profile.name} does not say how to read a "
                f"{operation.url_kind.value} URL (add url_kinds.{operation.url_kind.value})"
            )
        submission = SubmissionPart(
            status_url=operation.status_url,
            poll_kind=operation.url_kind,
            # A Location URL moves with every 202 that names a new one (as a submitted
            # operation's does): the caller's URL is pinned as the trusted origin.
            poll_header="location" if operation.url_kind is UrlKind.LOCATION else None,
            result_url=operation.result_url,
            cancel_url=operation.cancel_url,
            job_id=operation.job_id,
        )
        return Record(
            contract=contract, submission=submission, schedule=schedule, oversight=oversight
        )
    key = operation.idempotency_key
    submit = operation.profile.submit
    if key is None and submit.idempotency_scheme == "repeatability":
        key = str(uuid.uuid4())
    elif key is None and submit.idempotency_header:
        key = f"wb-{uuid.uuid4().hex}"
    method = operation.method.upper()
    resendable = key is not None or method in IDEMPOTENT_METHODS
    return Record(
        contract=contract.evolve(
            max_submit_attempts=operation.max_submit_attempts if resendable else 1,
            final_state_via=operation.final_state_via,
        ),
        submission=SubmissionPart(
            status_url=None,
            result_url=operation.result_url,
            cancel_url=operation.cancel_url,
            submit_method=method,
            submit_url=operation.url,
            submit_fingerprint=operation.fingerprint(),
            idempotency_key=key,
        ),
        schedule=schedule,
        ending=Ending(phase=Phase.SUBMITTING),
        oversight=oversight,
    )


def request_cancel(
    store: Store,
    clock: Clock,
    operation_id: str,
    *,
    reason: str | None,
    requested_by: str | None,
    by_a_person: bool = True,
    once: bool = False,
) -> Record:
    """Mark the operation's cancel as due (audited), after checking it is allowed.

    The rule is :func:`~waitbound._rules._options.cancel_refusal`, the one the ``cancel``
    option of a decision request follows. A running operation's cancel is sent within
    its own budget. A stopped one (``timed_out`` or ``escalated``; the job may still
    run) is canceled by deciding its open request's ``cancel`` option, by
    *requested_by* with *reason*: the default grant, plus the cancel request itself
    (see ``docs/decisions.md``).

    A worker may write the record at the same moment (it keeps polling): the check and
    the write are then simply done again on the fresh record.

    *by_a_person* false (an agent's cancel, the MCP tool): a stopped operation is
    refused, since canceling it is a decision and an agent never decides.

    *once* (a group's ``cancel_rest``): an operation whose cancel was requested already
    (due or sent, by anyone) is returned as stored and nothing is written. The check
    is made on the record the write replaces (a compare-and-swap on its version), so of
    several processes asking at once exactly one requests the cancel, and the job gets
    one cancel request.

    Raises:
        OperationNotFoundError: no such operation.
        UsageError: nothing to cancel (finished, or stopped with no grant left), no
            cancel action, not cancelable now, or stopped and not *by_a_person*.
    """
    who = requested_by or f"{os.environ.get('USER', 'someone')}@{socket.gethostname()}"
    while True:
        record = store.get(operation_id)
        if record is None:
            raise OperationNotFoundError(operation_id)
        now = clock.now()
        if (expired := expire(record, now)) is not None:
            # The first look closes a decision request past its due time (a running
            # operation goes on as it was, and its cancel is then judged afresh).
            closed, note = expired
            try:
                save_and_tell(store, closed, [note])
            except ConflictError:
                continue
            if not closed.is_finished:
                continue
            raise UsageError(
                f"operation {operation_id} is finished ({closed.ending.outcome}) and its decision "
                "request was closed as decision_timeout: there is nothing to cancel"
            )
        if once and record.oversight.cancel_requested_at is not None and not record.is_finished:
            return record  # claimed already: one cancel per operation
        refusal = cancel_refusal(record, now)
        if refusal is not None:
            raise UsageError(refusal)
        if record.is_finished and not by_a_person:
            raise UsageError(
                f"operation {operation_id} stopped ({record.ending.outcome}); canceling it now "
                "is a "
                f"decision a person makes: waitbound decide {operation_id} cancel --why …"
            )
        if record.is_finished:
            why = reason or "cancel requested with waitbound cancel (no reason given)"
            due, event = decide_record(record, Option.CANCEL, by=who, why=why, now=now)
        else:
            event = audit_event(
                record,
                now,
                EventKind.CANCEL_REQUESTED,
                f"cancel requested by {who}" + (f": {reason}" if reason else ""),
                requested_by=who,
                cancel_reason=reason,
            )
            due = record.evolve(oversight=record.oversight.cancel_requested(now, who, reason))
        try:
            return save_and_tell(store, due, [event])
        except ConflictError:
            continue
