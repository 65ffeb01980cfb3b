"""The agent's jobs as MCP tasks (the Tasks extension; see ``_tasks.py`` for the
protocol's shapes): an operation read as a task, an elicitation's answer recorded as a
decision or filed as a request a person decides, and ``tasks/cancel``.
"""

from __future__ import annotations

import anyio

from waitbound._base._errors import ConflictError, DecisionConflictError, UsageError
from waitbound._engine._escalations import decide_async, request_extension_async
from waitbound._engine._tell import save_and_tell
from waitbound._model._record import Phase, Record
from waitbound._rules._decisions import escalation_message, expire
from waitbound._rules._options import suggested_grant
from waitbound.mcp._answers import Answer, provider_of, scrub, submitting_message
from waitbound.mcp._principal import current
from waitbound.mcp._stored_tools import StoredTools
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

__all__ = ["JobTasks"]


class JobTasks(StoredTools):
    """The task side of :class:`~waitbound.mcp.Jobs` (``task_now``, which may send a
    look, is there)."""

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
