"""The agent tools answered from the store alone: listing, reading a finished job's
parts, asking for a cancel or for more time, and the story. None of them sends a
request; what they ask for, the background worker sends.
"""

from __future__ import annotations

from typing import Final

from waitbound._base._errors import UsageError
from waitbound._engine._escalations import request_extension_async
from waitbound._engine._operation import request_cancel
from waitbound._model._record import Phase, Record
from waitbound._story import story_line
from waitbound.mcp._answers import (
    Answer,
    entry,
    escalation_answer,
    fit,
    part_text,
    provider_of,
    scrub,
)
from waitbound.mcp._jobs_core import JobsCore
from waitbound.mcp._principal import current

__all__ = ["STORY_LINES", "StoredTools"]

STORY_LINES: Final = 200
"""The most audit lines one story resource shows (the newest)."""


class StoredTools(JobsCore):
    """The tools that read and write the store only (see :class:`~waitbound.mcp.Jobs`)."""

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
