"""The agent tools' behaviour, free of any protocol: jobs in the store, driven outside
the model.

:class:`Jobs` answers each tool from the durable store. Its :meth:`Jobs.drive` is the
same async worker any ``waitbound worker`` runs (:func:`waitbound.work`), restricted to
nothing but the providers' credentials, so operations progress between tool calls and
resume from the store after a restart.
"""

from __future__ import annotations

import fnmatch
import json
import math
import random
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Final

import anyio
import httpx

from waitbound._base._clock import Clock, SystemClock
from waitbound._base._errors import (
    ConflictError,
    DecisionConflictError,
    OperationNotFoundError,
    UsageError,
)
from waitbound._base._json import JSON
from waitbound._engine._api import check_async, submit_async
from waitbound._engine._driver import holder_is_gone, new_owner, safe_plan
from waitbound._engine._escalations import decide_async, request_extension_async
from waitbound._engine._operation import Submission, request_cancel
from waitbound._engine._tell import save_and_tell
from waitbound._engine._worker import WorkerSettings, work
from waitbound._model._audit import AuditEvent
from waitbound._model._record import Phase, Record
from waitbound._observe._metrics import label_profiles
from waitbound._rules._controller import Finish
from waitbound._rules._decisions import escalation_message, expire
from waitbound._rules._options import suggested_grant
from waitbound._story import story_line
from waitbound.mcp._answers import (
    Answer,
    entry,
    escalation_answer,
    fit,
    part_text,
    provider_of,
    scrub,
    submitting_message,
    view,
)
from waitbound.mcp._config import LABEL_PREFIX, McpConfig, ProviderConfig
from waitbound.mcp._principal import current
from waitbound.mcp._tasks import (
    ANSWER_MARK,
    BadResponses,
    answered_key,
    elicitation,
    input_key,
    offered,
    parse_responses,
    status_of,
    task,
    tool_result,
)
from waitbound.stores import Store
from waitbound.transports import HttpSettings

__all__ = ["Jobs"]

_PATH: Final = re.compile(r"/[A-Za-z0-9._~/-]*")
"""Paths an agent may name: unreserved characters only (RFC 3986 §2.3), so nothing is
percent-encoded, no ``@``, ``?`` or ``#``; ``..`` segments and ``//`` are refused too."""
_MAX_BODY_BYTES: Final = 1024 * 1024
_KEY: Final = re.compile(r"[A-Za-z0-9._:-]{1,100}")
_KEYED: Final = "mcp-"
"""The operation id prefix of a job started with the agent's own idempotency key."""
STORY_LINES: Final = 200
"""The most audit lines one story resource shows (the newest)."""
_SWEEP_S: Final = 30.0
"""How often the background worker looks for submissions nobody can finish."""
_SWEEP_LIMIT: Final = 500
"""The most open operations (newest first) one such look reads."""
_RECHECK_S: Final = 1.0
"""How often a waiting ``await_job`` re-reads the store when no change was signalled
(another process, such as a ``waitbound worker``, may be driving the operation)."""


class Jobs:
    """The agent tools over one store and one configuration.

    Args:
        config: the providers and the answer bounds.
        store: where operations live (shared with any worker).
        client: an ``httpx.AsyncClient`` to send with; ``None`` makes one per call.
        clock, rng: time and jitter, injectable for tests.
        http: body cap, redirects and connect timeout (default: the config's
            ``max_response_bytes``).

    Every tool raises :class:`~waitbound.UsageError` (or
    :class:`~waitbound.OperationNotFoundError`) for bad input, before storing anything.
    """

    def __init__(
        self,
        config: McpConfig,
        store: Store,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        http: HttpSettings | None = None,
    ) -> None:
        self.config, self.store, self.client = config, store, client
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.http = http or HttpSettings(max_body_bytes=config.max_response_bytes)
        self._changed = anyio.Event()
        self._secrets = config.secrets()
        self._credentials = config.credentials()
        label_profiles(provider.profile.name for provider in config.providers.values())

    # -- plumbing -----------------------------------------------------------------

    def credentials(self, record: Record) -> Mapping[str, str]:
        """The headers *record*'s own URL gets: its provider's, when that URL is under
        the provider's ``base_url`` (``{}`` otherwise, and for other operations)."""
        return self._credentials(record)

    def changed(self) -> anyio.Event:
        """An event set at the next change this process makes or sees (an operation
        driven by its worker, a decision or request recorded through a task)."""
        return self._changed

    def _notify(self, event: AuditEvent) -> None:
        """Wake every waiting ``await_job``: some operation changed."""
        self._changed.set()
        self._changed = anyio.Event()

    def _clean(self, record: Record) -> Record:
        """*record* with configured secrets scrubbed from what the provider said, before
        any of it is cut into parts (a secret split across two parts would escape)."""
        if not self._secrets:
            return record
        said = {
            name: scrub(getattr(record, name), self._secrets)
            for name in (
                "result",
                "result_url",
                "error",
                "errors",
                "progress",
                "provider_state",
                "job_id",
            )
        }
        return replace(record, **said)  # type: ignore[arg-type]

    def _record(self, operation_id: object) -> Record:
        if not isinstance(operation_id, str) or not 0 < len(operation_id) <= 128:
            raise UsageError("operation_id must be the id start_job returned (1-128 characters)")
        record = self.store.get(operation_id)
        if record is None or provider_of(record) not in self.config.providers:
            raise OperationNotFoundError(operation_id)
        if not current().reaches(record.label):  # another principal's: as if unknown
            raise OperationNotFoundError(operation_id)
        return record

    def _provider(self, name: object) -> ProviderConfig:
        known = ", ".join(sorted(self.config.providers))
        if not isinstance(name, str) or name not in self.config.providers:
            raise UsageError(f"unknown provider {str(name)[:40]!r}; configured: {known}")
        return self.config.providers[name]

    async def drive(self, stop: anyio.Event, settings: WorkerSettings | None = None) -> None:
        """Drive this server's due operations (labelled ``mcp:``) until *stop* is set:
        the background worker of the MCP server. Other operations in the store are left
        to workers that hold their credentials. Every ``_SWEEP_S`` seconds it also
        settles the submissions nobody can finish (:meth:`settle_lost_submissions`)."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._sweep, stop)
            await self._work(stop, settings)
            group.cancel_scope.cancel()

    async def _sweep(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            self.settle_lost_submissions()
            with anyio.move_on_after(_SWEEP_S):
                await stop.wait()

    async def _work(self, stop: anyio.Event, settings: WorkerSettings | None) -> None:
        await work(
            self.store,
            settings=replace(settings or WorkerSettings(), label_prefix=LABEL_PREFIX),
            # bound to each provider's places: a record naming elsewhere is refused
            headers=self._credentials,
            client=self.client,
            clock=self.clock,
            rng=self.rng,
            on_event=self._notify,
            stop=stop,
            http=self.http,
        )

    # -- the tools ----------------------------------------------------------------

    async def start_job(
        self,
        provider: str,
        body: JSON = None,
        path: str | None = None,
        method: str | None = None,
        idempotency_key: str | None = None,
    ) -> Answer:
        """Submit a job to a configured provider, record it, and return at once.

        The same *idempotency_key* (with the same request) returns the same operation
        instead of submitting twice.

        Raises:
            UsageError: unknown provider, a method or path not allowed, a body that is
                too large, or a bad key.
        """
        chosen = self._provider(provider)
        verb = (method or chosen.allowed_methods[0]).upper()
        if verb not in chosen.allowed_methods:
            raise UsageError(
                f"method {verb[:10]!r} is not allowed for provider {chosen.name}; "
                f"allowed: {', '.join(chosen.allowed_methods)}"
            )
        where = path or chosen.submit_path
        if (
            not isinstance(where, str)
            or not _PATH.fullmatch(where)
            or ".." in where.split("/")
            or "//" in where
        ):
            raise UsageError(
                f"path {str(where)[:60]!r} must start with '/' and hold only letters, digits "
                "and '.', '_', '~', '-', '/' (no '..' or '//')"
            )
        if not any(fnmatch.fnmatchcase(where, pattern) for pattern in chosen.allowed_paths):
            raise UsageError(
                f"path {where[:60]!r} is outside the allowed paths of provider {chosen.name}: "
                f"{', '.join(chosen.allowed_paths)}"
            )
        content = b"" if body is None else json.dumps(body, ensure_ascii=False).encode()
        if len(content) > _MAX_BODY_BYTES:
            raise UsageError(f"body is {len(content)} bytes; at most {_MAX_BODY_BYTES} are sent")
        if idempotency_key is not None and not _KEY.fullmatch(idempotency_key):
            raise UsageError("idempotency_key must be 1-100 letters, digits, '.', '_', ':' or '-'")
        submission = Submission(
            method=verb,
            url=chosen.base_url + where,
            profile=chosen.profile,
            policy=chosen.policy,
            body=content,
            content_type="application/json" if body is not None else None,
            idempotency_key=idempotency_key,
            label=current().label(chosen.name),
            trusted_origins=chosen.trusted_origins,  # what its story says reaches them
        )
        operation_id = None
        if idempotency_key is not None:
            operation_id = current().key_scope(chosen.name, idempotency_key)
            existing = self.store.get(operation_id)
            if existing is not None and existing.submit_fingerprint != submission.fingerprint():
                raise UsageError(
                    f"idempotency_key {idempotency_key!r} was already used for another request "
                    f"(operation {operation_id}); use a new key"
                )
        handle = await submit_async(
            submission,
            operation_id=operation_id,
            store=self.store,
            headers=self._credentials,
            client=self.client,
            clock=self.clock,
            rng=self.rng,
            on_event=self._notify,
            http=self.http,
        )
        answer = self._view(self._record(handle.operation_id))
        if not answer["done"]:
            answer["poll_after_seconds"] = answer["next_check_after_seconds"]
        return answer

    async def await_job(self, operation_id: str, max_wait_seconds: float | None = None) -> Answer:
        """Wait inside the server until the operation has an outcome or the ceiling
        (*max_wait_seconds*, default and cap from the configuration) is reached.

        Safe to call again: it reads the stored operation and waits; it sends nothing
        itself (the background worker does).

        Raises:
            UsageError: a negative or non-numeric wait.
            OperationNotFoundError: no such operation.
        """
        ceiling = self._ceiling(max_wait_seconds)
        record = self._record(operation_id)
        if record.phase is Phase.SUBMITTING:
            record = await self._look(record)
        start = self.clock.monotonic()
        while not record.is_finished and record.phase is not Phase.SUBMITTING:
            left = ceiling - (self.clock.monotonic() - start)
            if left <= 0:
                break
            changed = self._changed
            with anyio.move_on_after(min(left, _RECHECK_S)):
                await changed.wait()
            record = self._record(operation_id)
        answer = self._view(record)
        answer["waited_seconds"] = round(self.clock.monotonic() - start, 1)
        if not record.is_finished and record.phase is not Phase.SUBMITTING:
            answer["message"] = (
                f"Waited {ceiling:g} s: the job is still running in the background and is "
                f"NOT complete. Do not report success. Call await_job again with "
                f"operation_id {record.operation_id!r}."
            )
        return answer

    def _ceiling(self, wanted: object) -> float:
        if wanted is None:
            return self.config.default_wait_seconds
        if not isinstance(wanted, int | float) or isinstance(wanted, bool) or math.isnan(wanted):
            raise UsageError("max_wait_seconds must be a number of seconds")
        if wanted < 0:
            raise UsageError(f"max_wait_seconds must not be negative, got {wanted:g}")
        return min(float(wanted), self.config.max_wait_seconds)

    async def check_job(self, operation_id: str) -> Answer:
        """One look at the stored operation; a request is sent only when one is due
        and no worker holds it.

        Raises:
            OperationNotFoundError: no such operation.
        """
        return self._view(await self._look(self._record(operation_id)))

    async def _look(self, record: Record) -> Record:
        """*record* after one bounded look: at most one request, only when one is due
        and nobody holds the operation. A submission whose answer was lost (the server
        stopped mid-submit) is settled here when nobody can finish it
        (:meth:`_abandoned`): escalated, since it may have created a job."""
        if record.is_finished:
            return record
        if record.phase is not Phase.SUBMITTING:
            await check_async(
                record.operation_id,
                store=self.store,
                headers=self._credentials,
                client=self.client,
                clock=self.clock,
                rng=self.rng,
                on_event=self._notify,
                http=self.http,
            )
        elif self._abandoned(record):
            return self._settle(record)
        return self._record(record.operation_id)

    def _abandoned(self, record: Record) -> bool:
        """Whether nobody can finish *record*'s submission any more: the agent cannot
        resend it (no idempotency key of its own), or its deadline has passed (a keyed
        one may be resent with ``start_job`` until then)."""
        return not record.operation_id.startswith(_KEYED) or self.clock.now() >= record.stop_at

    def _settle(self, record: Record) -> Record:
        """Stop a submission nobody can finish, by the controller's own rule (its body
        and headers are never stored, so it cannot be sent from here): escalated
        ``provider_failure``, "it may have created a job", with the options a person
        has (``abandon``; ``cancel`` where a cancel action is known). One whose
        submission is in flight now (a live lease) is left as it is."""
        now = self.clock.now()
        leased = record.lease_expires_at is not None and record.lease_expires_at > now
        if leased and holder_is_gone(record.lease_owner):
            record = record.evolve(lease_expires_at=now)
        decision = safe_plan(record, now, owner=new_owner())
        if not isinstance(decision, Finish):
            return record
        transition = decision.transition
        try:
            return save_and_tell(self.store, transition.record, transition.events, self._notify)
        except ConflictError:  # written meanwhile (its submission answered): as it is now
            return self._record(record.operation_id)

    def settle_lost_submissions(self) -> int:
        """Settle this server's submissions nobody can finish (see :meth:`_abandoned`):
        the background worker's look, so one is never left ``submitting`` with nobody
        to drive it. Reads at most ``_SWEEP_LIMIT`` open operations, newest first.

        Returns:
            How many were settled.
        """
        settled = 0
        for record in self.store.recent(
            label_prefix=LABEL_PREFIX, limit=_SWEEP_LIMIT, open_only=True
        ):
            if (
                record.phase is Phase.SUBMITTING
                and provider_of(record) in self.config.providers
                and self._abandoned(record)
                and self._settle(record).is_finished
            ):
                settled += 1
        return settled

    def list_jobs(self, include_finished: bool = True) -> Answer:
        """The agent's operations, newest first (in flight and recently finished)."""
        now = self.clock.now()
        limit = self.config.list_limit
        records = self.store.recent(
            label_prefix=current().label_prefix, limit=limit + 1, open_only=not include_finished
        )
        shown = [entry(r, now) for r in records[:limit] if provider_of(r) in self.config.providers]
        in_flight = sum(1 for line in shown if not line["done"])
        are = "is" if in_flight == 1 else "are"
        return {
            "operations": shown,  # type: ignore[dict-item]
            "in_flight": in_flight,
            "more": len(records) > limit,
            "message": (
                f"{in_flight} of these operations {are} NOT complete; call await_job or "
                "check_job with an operation_id for one of them."
                if in_flight
                else "No listed operation is still running."
            ),
        }

    def get_result(self, operation_id: str, part: str = "result", offset: int = 0) -> Answer:
        """A part (``result`` or ``error``) of a finished operation, read from the store
        (the provider was asked for it at most once), *max_answer_chars* at a time.

        Raises:
            UsageError: a bad part or offset.
            OperationNotFoundError: no such operation.
        """
        if part not in ("result", "error"):
            raise UsageError(f"part must be 'result' or 'error', got {str(part)[:20]!r}")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise UsageError("offset must be a whole number >= 0")
        record = self._record(operation_id)
        if not record.is_finished:
            return self._view(record)
        value, text = part_text(self._clean(record), part)
        size = self.config.max_answer_chars
        if text is not None and offset > len(text):
            raise UsageError(f"offset {offset} is past the end ({len(text)} characters)")
        answer: Answer = {
            "operation_id": record.operation_id,
            "done": True,
            "status": record.outcome.value if record.outcome else None,
            "part": part,
        }
        if text is None:
            answer["message"] = f"Operation {record.operation_id} has no {part}."
            return answer
        chunk = fit(text[offset : offset + size], size)
        following = offset + len(chunk)
        answer |= {
            "text": chunk,
            "offset": offset,
            "total_chars": len(text),
            "next_offset": following if following < len(text) else None,
            "message": (
                f"Characters {offset}-{following} of {len(text)} of the {part}"
                + (" (a plain string)." if isinstance(value, str) else " (JSON text).")
                + (
                    f" Call get_result with offset {following} for more."
                    if following < len(text)
                    else ""
                )
            ),
        }
        return answer

    def cancel_job(self, operation_id: str, reason: str | None = None) -> Answer:
        """Ask for the job's cancellation, where the configuration lets agents cancel
        and the job is cancelable now; the background worker sends the request.

        Raises:
            UsageError: cancel is not allowed, or the job cannot be canceled now
                (the message says why).
            OperationNotFoundError: no such operation.
        """
        record = self._record(operation_id)
        provider = self.config.providers[provider_of(record) or ""]
        if not provider.allow_cancel:
            raise UsageError(
                f"agents may not cancel jobs of provider {provider.name} (allow_cancel is "
                "off in the server's configuration); ask a person"
            )
        if record.phase is Phase.SUBMITTING and not record.is_finished:
            return self._cancel_submission(record)
        if record.cancel_requested_at is not None:
            answer = self._view(record)
            answer["message"] = (
                f"Cancellation was already requested at {record.cancel_requested_at:%H:%M:%S} "
                "UTC; it is NOT yet confirmed. Call await_job to learn how the job ends."
            )
            return answer
        why = None if reason is None else str(reason)[:200]
        request_cancel(
            self.store,
            self.clock,
            record.operation_id,
            reason=why,
            requested_by="agent",
            by_a_person=False,
        )
        answer = self._view(self._record(operation_id))
        answer["message"] = (
            "Cancellation requested; it is NOT yet confirmed. Call await_job to learn how "
            "the job ends."
        )
        return answer

    def _cancel_submission(self, record: Record) -> Answer:
        """Cancel a submission whose job is not known: nothing can be canceled at the
        provider, so it is stopped here (no resend) and a person decides (it may have
        created a job); one in flight now is refused, to be asked again.

        Raises:
            UsageError: the submission is being sent right now.
        """
        settled = self._settle(record)
        if not settled.is_finished:
            raise UsageError(
                f"operation {record.operation_id} is being submitted right now; no job is "
                "known yet to cancel. Ask again in a few seconds"
            )
        answer = self._view(settled)
        answer["message"] = (
            f"Operation {record.operation_id} was being submitted and no job is known, so "
            "nothing could be canceled at the provider. It is stopped (it will not be sent "
            "again) and a PERSON decides: it may have created a job."
        )
        return answer

    async def request_extension(
        self, operation_id: str, minutes: float, checks: int, why: str
    ) -> Answer:
        """File a request for more time that a PERSON answers (``waitbound escalations``,
        ``waitbound decide``); nothing is extended by it. Filed as
        ``agent:LABEL`` (``agent:mcp:PROVIDER``).

        Raises:
            UsageError: a blank ``why``, a proposal beyond the policy's ceilings, or a
                finished operation with nothing open.
            OperationNotFoundError: no such operation.
        """
        record = self._record(operation_id)
        filed = await request_extension_async(
            record.operation_id,
            minutes=minutes,
            checks=checks,
            why=why,
            by=f"agent:{record.label}",
            store=self.store,
            clock=self.clock,
        )
        answer = escalation_answer(
            self._clean(self._record(operation_id)),
            filed,
            max_chars=self.config.max_answer_chars,
        )
        return scrub(answer, self._secrets)  # type: ignore[return-value]

    def story(self, operation_id: str) -> str:
        """The operation's story (its audit events, one line each, oldest first), as
        ``waitbound show`` prints them; secrets scrubbed, the newest
        ``STORY_LINES`` lines at most.

        Raises:
            UsageError: a malformed id.
            OperationNotFoundError: no such operation of this server's providers.
        """
        record = self._record(operation_id)
        lines = [story_line(stored.event) for stored in self.store.audit(record.operation_id)]
        shown = lines[-STORY_LINES:]
        head = [f"Operation {record.operation_id} ({record.label}): {len(lines)} events"]
        if len(lines) > len(shown):
            head.append(f"(the newest {len(shown)} shown)")
        return str(scrub("\n".join([" ".join(head), *shown]), self._secrets))

    # -- tasks (the MCP Tasks extension; see _tasks.py) ----------------------------

    def _current(self, operation_id: object) -> Record:
        """The stored operation, its decision request closed as ``decision_timeout``
        first when it is past due (as ``waitbound escalations`` does)."""
        while True:
            record = self._record(operation_id)
            expired = expire(record, self.clock.now())
            if expired is None:
                return record
            after, event = expired
            try:
                save_and_tell(self.store, after, [event], self._notify)
            except ConflictError:
                continue

    def task(self, operation_id: str) -> Answer:
        """The operation as a task (``DetailedTask``), read from the store.

        Raises:
            UsageError: a malformed id.
            OperationNotFoundError: no such operation of this server's providers.
        """
        record = self._clean(self._current(operation_id))
        now = self.clock.now()
        status = status_of(record)
        provider = self.config.providers[provider_of(record) or ""]
        result = None
        requests: dict[str, Answer] = {}
        message = (
            submitting_message(record)
            if record.phase is Phase.SUBMITTING and not record.is_finished
            else record.to_outcome().message
        )
        if status == "completed":
            result = tool_result(self._view(record))
        elif status == "input_required":
            where = self._where_a_person_decides(record)
            key = input_key(record)
            if answered_key(record):
                message = (
                    f"{message} Your answer was filed as a request: a PERSON decides it "
                    f"({where}). Nothing was changed by it yet."
                )
            else:
                decides = (
                    "Your answer to this request is recorded as the decision."
                    if provider.decide_via_elicitation
                    else f"Your answer is filed as a request; a PERSON decides ({where})."
                )
                message = f"{message} A decision is needed. {decides}"
                asked = f"{escalation_message(record, now)}\n\n{decides}"
                requests[key or ""] = elicitation(
                    record, now, asked, max_chars=self.config.max_answer_chars
                )
        answer = task(
            record,
            now,
            status_message=message,
            retention_s=self.config.task_retention_seconds,
            result=result,
            input_requests=requests,
        )
        return scrub(answer, self._secrets)  # type: ignore[return-value]

    async def task_now(self, operation_id: str) -> Answer:
        """:meth:`task`, after settling a submission whose answer was lost (the server
        stopped mid-submit), as ``await_job`` does: a task never stays ``working`` on
        a submission nobody will finish."""
        record = self._record(operation_id)
        if record.phase is Phase.SUBMITTING:
            await self._look(record)
        return self.task(operation_id)

    def _where_a_person_decides(self, record: Record) -> str:
        inbox = self.config.inbox_url
        command = f"waitbound decide {record.operation_id}"
        return f"in the inbox at {inbox}, or with `{command}`" if inbox else f"with `{command}`"

    async def answer_task(self, operation_id: str, responses: object, *, by: str) -> bool:
        """Record a client's ``inputResponses`` to the task's elicitation.

        With the provider's ``decide_via_elicitation`` on, the answer is decided
        through :func:`waitbound.decide` by *by* (the same ceilings; the first
        decision wins, a later one is ignored); off, it is filed as a request a person
        decides (like ``request_extension``), and the task stays ``input_required``.
        Responses to keys that are not outstanding are ignored.

        Returns:
            Whether an answer was recorded.

        Raises:
            UsageError: a wrong shape, a value out of bounds, a grant beyond the
                ceilings (nothing is changed).
            OperationNotFoundError: no such operation.
        """
        record = self._current(operation_id)
        now = self.clock.now()
        outstanding = None if answered_key(record) else input_key(record)
        allowed = [o.value for o in offered(record, now)]
        try:
            answered = parse_responses(
                responses, outstanding, allowed, record.policy.extension_ceiling_s / 60
            ).answer
        except BadResponses as exc:
            raise UsageError(str(exc)) from None
        if answered is None or outstanding is None:
            return False
        provider = self.config.providers[provider_of(record) or ""]
        who = by[:80]
        if provider.decide_via_elicitation and current().decides:
            try:
                await decide_async(
                    record.operation_id,
                    answered.option,
                    why=answered.why,
                    by=who,
                    minutes=answered.minutes,
                    checks=answered.checks,
                    store=self.store,
                    clock=self.clock,
                )
            except DecisionConflictError:
                return False  # someone decided first: this answer is no longer outstanding
        else:
            minutes, checks = suggested_grant(record)
            await request_extension_async(
                record.operation_id,
                minutes=answered.minutes if answered.minutes is not None else minutes,
                checks=answered.checks if answered.checks is not None else checks,
                why=f"answered {answered.option}: {answered.why}"[:500],
                by=f"{ANSWER_MARK}{outstanding} {who}",
                store=self.store,
                clock=self.clock,
            )
        self._changed.set()
        self._changed = anyio.Event()
        return True

    def cancel_task(self, operation_id: str) -> None:
        """``tasks/cancel``: the rules of :meth:`cancel_job` (allowed for the provider,
        cancelable now, a stopped operation left to a person).

        Raises:
            UsageError: the cancel is refused (the message says why); nothing changed.
            OperationNotFoundError: no such operation.
        """
        self.cancel_job(operation_id, reason="tasks/cancel")

    def _view(self, record: Record) -> Answer:
        return view(self._clean(record), self.clock.now(), max_chars=self.config.max_answer_chars)


async def _no_sleep(seconds: float) -> None:
    """A look never sleeps: an operation not due is left as it is."""
