"""The public outcome vocabulary: exactly one honest answer per operation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from waitbound._base._errors import WaitboundError
from waitbound._base._json import JSON, JSONScalar

__all__ = [
    "EscalatedError",
    "JobFailedError",
    "Outcome",
    "OutcomeError",
    "OutcomeKind",
    "Reason",
    "StillWaitingError",
    "StoppedWaitingError",
    "TimedOutError",
]


class OutcomeError(WaitboundError):
    """The operation reached an outcome other than ``succeeded``.

    Attributes:
        outcome: the full :class:`~waitbound.Outcome` (operation id, reason,
            provider state, job id, budgets used, last HTTP status, error).
    """

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        detail = f" ({outcome.reason})" if outcome.reason else ""
        super().__init__(
            f"operation {outcome.operation_id}: {outcome.outcome or 'still waiting'}{detail}"
            + (f"; job {outcome.job_id}" if outcome.job_id else "")
        )

    @property
    def operation_id(self) -> str:
        """Our id of the operation."""
        return self.outcome.operation_id

    @property
    def reason(self) -> str | None:
        """The machine-readable reason, or ``None`` when the outcome needs none."""
        return self.outcome.reason


class JobFailedError(OutcomeError):
    """The provider reported a terminal state that is not a full success."""


class StoppedWaitingError(OutcomeError):
    """We stopped waiting without a reported outcome; the job id is kept.

    Usually no terminal answer was seen; when ``outcome.provider_outcome`` is set, the
    provider did say how the job ended and only its result (``outcome.unfetched``) is
    missing: do not submit the job again."""


class TimedOutError(StoppedWaitingError):
    """The deadline passed (reason ``deadline_exceeded``); the job may still run."""


class EscalatedError(StoppedWaitingError):
    """The wait stopped and asks for a decision; ``reason`` says why."""


class StillWaitingError(OutcomeError):
    """The operation has no outcome yet: the job is NOT known to be complete."""


class OutcomeKind(StrEnum):
    """How an operation ended."""

    SUCCEEDED = "succeeded"
    """Terminal success; every required result field validated."""
    COMPLETED_WITH_ERRORS = "completed_with_errors"
    """Terminal and partially successful; counts reported."""
    FAILED = "failed"
    """The provider reported a terminal failure; its error is preserved."""
    CANCELED = "canceled"
    """Terminal without success; never resubmitted automatically."""
    EXPIRED = "expired"
    """Terminal without success; never resubmitted automatically."""
    TIMED_OUT = "timed_out"
    """Reason ``deadline_exceeded``; the job may still be running."""
    ESCALATED = "escalated"
    """Stopped without a reported outcome; ``reason`` says why (``provider_outcome``:
    the provider's terminal answer, when one was seen and its result not fetched)."""

    @property
    def exit_code(self) -> int:
        """The CLI exit code: 0 succeeded; 1 other terminal; 3 timed out or escalated."""
        if self is OutcomeKind.SUCCEEDED:
            return 0
        if self in (OutcomeKind.TIMED_OUT, OutcomeKind.ESCALATED):
            return 3
        return 1


class Reason(StrEnum):
    """Machine-readable reason for ``timed_out``, ``escalated`` (and ``canceled``: ``skipped``)."""

    DEADLINE_EXCEEDED = "deadline_exceeded"
    REQUEST_BUDGET_EXHAUSTED = "request_budget_exhausted"
    PROVIDER_FAILURE = "provider_failure"
    RATE_LIMITED = "rate_limited"
    UNKNOWN_STATE = "unknown_state"
    AUTHORIZATION_DENIED = "authorization_denied"
    CONTRADICTION = "contradiction"
    INTEGRATION_FAILURE = "integration_failure"
    RESULT_UNCONFIRMED = "result_unconfirmed"
    """The job succeeded, but the answer to the one result request was lost when
    waitbound stopped: the provider is not to blame, and the job need not be submitted
    again; a person may decide to fetch the result once more."""
    SKIPPED = "skipped"
    """With ``canceled``: the provider skipped the run (it never ran)."""
    BUSINESS_DEADLINE_EXCEEDED = "business_deadline_exceeded"
    """With ``timed_out``: the business deadline passed; the result would no longer be
    useful, even though the provider's deadline was later."""
    CANCEL_NOT_ACCEPTED = "cancel_not_accepted"
    """With ``escalated``: the provider did not accept a cancel (it refused it, e.g.
    HTTP 409, or gave no answer); waiting stopped at once, the job's last state kept:
    the job may still run."""
    DECISION_TIMEOUT = "decision_timeout"
    """A decision was asked of a person and nobody answered before the decision
    deadline; the operation is closed (its last reason is in ``error``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """The answer to one wait.

    Attributes:
        operation_id: our id of the operation.
        outcome: how it ended.
        reason: why it stopped, for ``timed_out`` and ``escalated``; else ``None``.
        provider_state: the last state value the provider reported, or ``None``.
        job_id: the provider's job id, when known (always kept on a timeout).
        status_requests_used: status requests sent (each one counted).
        transport_failures_used: 5xx answers, timeouts and connection errors counted.
        rate_limited_used: throttled answers counted.
        result_requests_used: result-endpoint requests sent.
        elapsed_seconds: seconds from the operation's creation to its end.
        last_http_status: the last HTTP status seen, or ``None``.
        request_id: the provider's request id of the last answer, or ``None``.
        result: the result (inline JSON) for a success, else ``None``.
        result_url: where the provider keeps a result that was not fetched (an expired
            or canceled batch's partial output file), without user info, a query
            string shown as ``?…``; ``None`` when there is none or it was fetched
            into ``result``.
        error: the provider's error, or our description of why we stopped.
        counts: per-item counts, when the profile names them.
        usage: the provider's usage report; ``None`` when it gave none (unknown, not 0).
        errors: the first page of per-item errors, when the provider names an errors URL:
            kept whole when small, else structured and bounded (at most 20 whole items,
            with ``omitted_items`` counting the rest; see ``docs/waiting.md``).
        errors_url: where the detailed per-item errors are (the provider's
            ``errors_url``), without user info; its query is kept when the profile
            marks it safe (``errors_url_query_safe``), else shown as ``?…``; ``None``
            when the provider named none.
        options: for ``escalated`` and ``timed_out``, the bounded choices left to a
            person while the decision request is open (see ``waitbound decide``).
        decided_by: who decided the outcome, when a person asserted it
            (``mark_succeeded`` / ``mark_failed``).
        next_check_at: while still waiting (``outcome`` is ``None``), when the next
            request is due; ``None`` once finished.
        provider_outcome: how the provider said the job ended when the operation has
            not reported that end: ``succeeded`` (or ``completed_with_errors``) while its
            result or errors page is still being fetched, or with an ``escalated`` /
            ``timed_out`` outcome that stopped before the result was fetched. The job
            is then known to be complete at the provider; its result is what is
            missing. ``None`` otherwise.
        unfetched: with ``provider_outcome``, what is missing: ``"result"`` or
            ``"errors page"`` (a partial success's first page of errors; its result is
            in ``result``); ``None`` otherwise.
        note: what else a reader must know about how it ended, in words: a cancel the
            provider refused because the job had already ended ("the cancel decided by
            ann at … was refused by the provider (HTTP 409): it came too late, the job
            had already ended"); ``None`` otherwise.
    """

    operation_id: str
    outcome: OutcomeKind | None
    reason: Reason | None = None
    provider_state: JSONScalar = None
    job_id: str | None = None
    status_requests_used: int = 0
    transport_failures_used: int = 0
    rate_limited_used: int = 0
    result_requests_used: int = 0
    elapsed_seconds: float = 0.0
    last_http_status: int | None = None
    request_id: str | None = None
    result: JSON = None
    result_url: str | None = None
    error: JSON = None
    counts: Mapping[str, JSON] | None = None
    usage: JSON = None
    errors: JSON = None
    errors_url: str | None = None
    options: tuple[str, ...] = field(default=())
    next_check_at: datetime | None = None
    decided_by: str | None = None
    provider_outcome: OutcomeKind | None = None
    unfetched: str | None = None
    note: str | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the outcome is ``succeeded``."""
        return self.outcome is OutcomeKind.SUCCEEDED

    @property
    def done(self) -> bool:
        """Whether the operation has an outcome (``False``: still waiting)."""
        return self.outcome is not None

    @property
    def exit_code(self) -> int:
        """The CLI exit code: 0 succeeded; 1 other terminal; 3 stopped; 4 still waiting."""
        return 4 if self.outcome is None else self.outcome.exit_code

    @property
    def message(self) -> str:
        """One or two plain sentences no reader can take for success unless it is one.

        For example: "Job job_7f21c has STARTED and is NOT complete. Do not report
        success. Check again after 30 s."
        """
        job = f"Job {self.job_id}" if self.job_id else f"Operation {self.operation_id}"
        unfinished = "Do not report success."
        if self.provider_outcome is not None and not self.succeeded:
            return self._unfetched_message(job)
        match self.outcome:
            case None:
                after = ""
                if self.next_check_at is not None:
                    after = f" Check again after {_whole_seconds(self.next_check_at)} s."
                return f"{job} has STARTED and is NOT complete. {unfinished}{after}"
            case OutcomeKind.SUCCEEDED if self.result is None:
                return f"{job} SUCCEEDED; it returned no result."
            case OutcomeKind.SUCCEEDED:
                return f"{job} SUCCEEDED; its result is available."
            case OutcomeKind.COMPLETED_WITH_ERRORS:
                counts = self.counts or {}
                tally = (
                    f" {counts.get('succeeded')} of {counts.get('total')} items succeeded."
                    if counts.get("total") is not None
                    else ""
                )
                return f"{job} FINISHED WITH ERRORS: only part of it succeeded.{tally}"
            case OutcomeKind.FAILED:
                return f"{job} FAILED. {unfinished}"
            case OutcomeKind.CANCELED | OutcomeKind.EXPIRED:
                why = " (the provider skipped the run)" if self.reason is Reason.SKIPPED else ""
                return f"{job} was {self.outcome.value.upper()}{why}. {unfinished}"
            case OutcomeKind.TIMED_OUT:
                return (
                    f"Stopped waiting at the deadline: {job} may still be running and is NOT "
                    f"known to be complete. {unfinished} Look again later with operation "
                    f"{self.operation_id}."
                )
            case _:
                reason = self.reason.value if self.reason else "unknown"
                decide = (
                    f"A person must decide: {', '.join(self.options)}."
                    if self.options
                    else "No decision is open: the outcome stands."
                )
                return (
                    f"Stopped waiting ({reason}): {job} is NOT known to be complete. "
                    f"{unfinished} {decide}"
                )

    def _decide_words(self) -> str:
        if self.options:
            return f"A person must decide: {', '.join(self.options)}."
        return "No decision is open: the outcome stands."

    def _unfetched_message(self, job: str) -> str:
        """The message when the provider said the job ended but its result (or errors
        page) is not in hand: the job IS complete at the provider; never "NOT complete"."""
        ended = (
            "FINISHED WITH ERRORS"
            if self.provider_outcome is OutcomeKind.COMPLETED_WITH_ERRORS
            else str(self.provider_outcome).upper()
        )
        head = f"{job} {ended} at the provider (it is complete there)"
        piece = self.unfetched or "result"
        hold = f"Do not report success until its {piece} is in hand; do not submit the job again."
        match self.outcome:
            case None:
                after = ""
                if self.next_check_at is not None:
                    after = f" Check again after {_whole_seconds(self.next_check_at)} s."
                return (
                    f"{head}; its {piece} is being fetched and is NOT available yet. {hold}{after}"
                )
            case OutcomeKind.TIMED_OUT:
                return (
                    f"Stopped waiting at the deadline: {head}, but its {piece} is NOT available. "
                    f"{hold} Look again later with operation {self.operation_id}."
                )
            case _:
                reason = self.reason.value if self.reason else "unknown"
                return (
                    f"Stopped waiting ({reason}): {head}, but its {piece} is NOT available. "
                    f"{hold} {self._decide_words()}"
                )

    def raise_for_outcome(self) -> Outcome:
        """Return ``self`` when it succeeded; raise otherwise.

        Raises:
            JobFailedError: failed, completed_with_errors, canceled or expired.
            StillWaitingError: no outcome yet (a :func:`check` of a running job).
            TimedOutError: timed_out.
            EscalatedError: escalated (see ``reason`` and ``options``).
        """
        match self.outcome:
            case OutcomeKind.SUCCEEDED:
                return self
            case None:
                raise StillWaitingError(self)
            case OutcomeKind.TIMED_OUT:
                raise TimedOutError(self)
            case OutcomeKind.ESCALATED:
                raise EscalatedError(self)
            case _:
                raise JobFailedError(self)

    def as_json(self) -> dict[str, JSON]:
        """Return the outcome as the JSON object ``waitbound wait --json`` prints."""
        return {
            "operation_id": self.operation_id,
            "done": self.done,
            "outcome": self.outcome.value if self.outcome else None,
            "reason": self.reason.value if self.reason else None,
            "provider_state": self.provider_state,
            "job_id": self.job_id,
            "status_requests_used": self.status_requests_used,
            "transport_failures_used": self.transport_failures_used,
            "rate_limited_used": self.rate_limited_used,
            "result_requests_used": self.result_requests_used,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "last_http_status": self.last_http_status,
            "request_id": self.request_id,
            "result": self.result,
            "result_url": self.result_url,
            "error": self.error,
            "counts": dict(self.counts) if self.counts is not None else None,
            "usage": self.usage,
            "errors": self.errors,
            "errors_url": self.errors_url,
            "options": list(self.options),
            "decided_by": self.decided_by,
            "next_check_at": self.next_check_at.isoformat() if self.next_check_at else None,
            "provider_outcome": self.provider_outcome.value if self.provider_outcome else None,
            "unfetched": self.unfetched,
            "note": self.note,
            "message": self.message,
        }


def _whole_seconds(when: datetime) -> int:
    """Whole seconds from now until *when*, at least 1 (for a message, not a decision)."""
    return max(1, math.ceil((when - datetime.now(UTC)).total_seconds()))
