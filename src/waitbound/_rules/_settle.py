"""How a run's ending becomes its outcome: a terminal answer settled.

Pure functions (see the rules atop ``_controller.py``), returning a :class:`Step`, shared
by the answer of every request kind that can report an ending (``_status_answer.py``,
``_submit_answer.py``, ``_result_answer.py``): :func:`settle` validates a terminal
success, then fetches its final state once or finishes; :func:`ended` keeps what a run
that ended otherwise reported (fetching its receipt where the contract says one
exists); :func:`complete` finishes a success, first fetching its errors page once. The
outcome rules are stated in ``docs/waiting.md``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from waitbound._base._json import JSON, show
from waitbound._base._urls import redact_url, resolve, same_url, shown_url
from waitbound._model._audit import EventKind
from waitbound._model._observation import Observation
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._model._record import Phase, Record
from waitbound._profile._actions import repeated_key
from waitbound._profile._contract import Classification, Counts, Reading, is_present
from waitbound._rules import _sentences as sentences
from waitbound._rules._final_state import empty_resource, monitor_result
from waitbound._rules._finish import Step, escalate, seconds_between, terminal
from waitbound._rules._next_poll import Timing, schedule
from waitbound._rules._polling_kinds import PollingKind

__all__ = ["complete", "ended", "settle"]


def settle(
    record: Record,
    observation: Observation,
    classification: Classification,
    reading: Reading | None,
    timing: Timing,
    *,
    answered_by: PollingKind | None,
) -> Step:
    """A terminal success or partial success: validate it, then fetch or finish.

    *answered_by*: the reader of the URL that answered (``_polling_kinds``). When it
    says its answer is the final state (a ``location`` or ``resource`` URL's), or is
    ``None`` (a first answer that named no polling URL), this answer's body is read
    as the result document; else the final state is fetched once from the result URL
    or where the reader says (``final-state-via``), or is the monitor's own ``result``.

    Counts that report unsuccessful items decide the outcome first (they explain a
    missing output file); only a success they leave standing needs its required fields.
    """
    now = observation.at
    policy = record.contract.policy
    counts = reading.counts.settled() if reading is not None and reading.counts else None
    by_counts = _by_counts(counts) if counts is not None and counts.unsuccessful else None
    if by_counts is None and reading is not None and reading.missing_required:
        seen_at = record.answer.success_seen_at or now
        confirms = record.counters.confirm_requests_used + (
            record.answer.success_seen_at is not None
        )
        window_over = record.answer.success_seen_at is not None and (
            seconds_between(seen_at, now) >= policy.confirm_window_s
        )
        if confirms >= policy.confirm_max_requests or window_over:
            return escalate(
                record,
                now,
                Reason.CONTRADICTION,
                f"the job reported {show(reading.state)} without "
                f"{', '.join(reading.missing_required)} after {confirms} confirmation request(s)",
                response=observation.body,
            )
        record = record.evolve(
            answer=record.answer.evolve(success_seen_at=seen_at),
            counters=record.counters.evolve(confirm_requests_used=confirms),
        )
        return schedule(
            record,
            observation,
            reading,
            timing,
            note=f"success without {', '.join(reading.missing_required)}; confirming",
            confirming=True,
        )
    error = reading.error if reading is not None else None
    if classification is Classification.SUCCEEDED and is_present(error):
        return ended(record, now, OutcomeKind.FAILED, reading, counts=counts)
    outcome = by_counts or (
        OutcomeKind.COMPLETED_WITH_ERRORS
        if classification is Classification.PARTIAL
        else OutcomeKind.SUCCEEDED
    )
    if outcome in (OutcomeKind.FAILED, OutcomeKind.CANCELED, OutcomeKind.EXPIRED):
        return ended(record, now, outcome, reading, counts=counts)
    result_url = _result_url(record, observation, reading, answered_by)
    if isinstance(result_url, ValueError):
        return escalate(record, now, Reason.INTEGRATION_FAILURE, str(result_url))
    if result_url in (HERE, None) and observation.body_problem is not None:
        # The job is done, but its final state cannot be read: never report null.
        where = "submission" if observation.kind == "submit" else "polling URL"
        return escalate(
            record,
            now,
            Reason.INTEGRATION_FAILURE,
            f"the {where} answered HTTP {observation.http_status} ({outcome.value}) with "
            f"{observation.body_problem}; the result cannot be read from it",
        )
    if result_url is HERE and (empty := empty_resource(record, observation, outcome)):
        return escalate(record, now, Reason.INTEGRATION_FAILURE, empty)
    if result_url is HERE:
        document = record.contract.profile.read_result(observation.body)
        if document.ambiguous is not None:
            detail = repeated_key("result", document.ambiguous)
            return escalate(record, now, Reason.INTEGRATION_FAILURE, detail)
        if is_present(document.output_error):
            return terminal(
                record, now, OutcomeKind.FAILED, error=document.output_error, counts=counts,
                usage=document.usage,
            )  # fmt: skip
        return complete(
            record, now, outcome, result=document.output, error=error, counts=counts,
            usage=document.usage,
        )  # fmt: skip
    if result_url is None:
        if reading is not None and is_present(reading.output_error):
            return terminal(
                record, now, OutcomeKind.FAILED, error=reading.output_error, counts=counts,
                usage=reading.usage,
            )  # fmt: skip
        return complete(
            record,
            now,
            outcome,
            result=monitor_result(record, observation, reading),
            error=error,
            counts=counts,
            usage=reading.usage if reading is not None else None,
        )
    record = record.evolve(
        ending=record.ending.evolve(
            phase=Phase.FETCHING_RESULT,
            settled_outcome=outcome,
            error=error,
            counts=counts.as_json() if counts else None,
            usage=reading.usage if reading is not None else None,
        ),
        submission=record.submission.evolve(result_url=result_url),
        schedule=record.schedule.evolve(next_poll_at=now, delay_source=None, attempt=0),
    )
    return Step(
        record,
        EventKind.RESULT_DUE,
        sentences.result_due(outcome, redact_url(result_url)),
        {"result_url": redact_url(result_url)},
    )


def ended(
    record: Record,
    now: datetime,
    outcome: OutcomeKind,
    reading: Reading | None,
    *,
    counts: Counts | None = None,
    reason: Reason | None = None,
) -> Step:
    """A terminal state without success: the body's error, counts and usage are kept, and
    a partial output it names (an expired batch's output file) is kept as a reference
    (``result_url`` on the outcome), never fetched."""
    if reading is None:
        return terminal(record, now, outcome, reason=reason)
    reference = record.submission.result_url or _named_result_url(record, reading)
    if isinstance(reference, str):
        record = record.evolve(submission=record.submission.evolve(result_url=reference))
        if (
            record.contract.profile.result_for_every_ending
            and record.ending.result_fetched_at is None
        ):
            return _fetch_receipt(record, now, outcome, reading, counts=counts, reason=reason)
    return terminal(
        record,
        now,
        outcome,
        error=reading.error,
        counts=counts or reading.counts,
        usage=reading.usage,
        reason=reason,
    )


def _fetch_receipt(
    record: Record,
    now: datetime,
    outcome: OutcomeKind,
    reading: Reading,
    *,
    counts: Counts | None,
    reason: Reason | None,
) -> Step:
    """A run that ended without success under a contract whose result URL holds the full
    receipt after any ending (``result_for_every_ending``): fetch it once, so its
    ``output_error``, ``usage`` and request id reach the outcome; the ending is settled
    (``settled_outcome``, ``settled_reason``) and stands whatever the fetch brings."""
    try:
        url = record.contract.profile.submit.carried(
            resolve(
                record.submission.status_url or record.submission.submit_url or "",
                record.submission.result_url or "",
            ),
            record.submission.submit_url,
        )
    except ValueError:  # not a URL the credentials may follow: the ending as it is
        return terminal(
            record, now, outcome, error=reading.error, counts=counts or reading.counts,
            usage=reading.usage, reason=reason,
        )  # fmt: skip
    counted = counts or reading.counts
    record = record.evolve(
        ending=record.ending.evolve(
            phase=Phase.FETCHING_RESULT,
            settled_outcome=outcome,
            settled_reason=reason,
            error=reading.error if is_present(reading.error) else None,
            counts=counted.as_json() if counted else None,
            usage=reading.usage,
        ),
        submission=record.submission.evolve(result_url=url),
        schedule=record.schedule.evolve(next_poll_at=now, delay_source=None, attempt=0),
    )
    return Step(
        record,
        EventKind.RESULT_DUE,
        sentences.receipt_due(outcome, reason, redact_url(url)),
        {"result_url": redact_url(url)},
    )


def _by_counts(counts: Counts) -> OutcomeKind:
    """Some items did not succeed: with none succeeded, the job failed (or was canceled,
    or expired, when that is all that happened to them); else it completed with errors."""
    if counts.succeeded != 0:
        return OutcomeKind.COMPLETED_WITH_ERRORS
    if counts.failed:
        return OutcomeKind.FAILED
    return OutcomeKind.CANCELED if counts.canceled else OutcomeKind.EXPIRED


HERE: Final = "this answer"
"""The final state is the answer just read (its body is the result document)."""


def _result_url(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    answered_by: PollingKind | None,
) -> str | ValueError | None:
    """Where the final state is: a URL to fetch once, :data:`HERE`, or ``None`` when
    the status monitor is the final state and its ``result`` the result.

    A URL the caller or the receipt named comes first; then, unless this answer is
    final by its kind (see :func:`settle`), the place the reader of the URL that
    answered names (``final-state-via``; the monitor's ``result_url`` / ``result_id``
    among them: ``StatusMonitorPolling.final_url``).
    Relative URLs resolve against the status URL; the URL that just answered is not
    fetched again (:data:`HERE`).
    """
    profile = record.contract.profile
    base = record.submission.status_url or ""
    if record.submission.result_url is None and (answered_by is None or answered_by.final_here):
        return HERE
    candidate = record.submission.result_url
    if candidate is None:
        assert answered_by is not None
        named = _named_result_url(record, reading)
        if isinstance(named, ValueError):
            return named
        candidate = answered_by.final_url(record, named)
    if candidate is None:
        return None
    try:
        url = profile.submit.carried(resolve(base, candidate), record.submission.submit_url)
    except ValueError as exc:
        return ValueError(f"the result URL {shown_url(candidate)} cannot be used ({exc})")
    answered = (
        record.submission.submit_url
        if observation.kind == "submit"
        else record.submission.status_url
    )
    return HERE if same_url(url, answered) and record.submission.result_url is None else url


def _named_result_url(record: Record, reading: Reading | None) -> str | ValueError | None:
    """The result URL a status body names (``result_url``, or ``result_id`` in the
    profile's template), resolved against the status URL; ``None`` when it names none."""
    profile = record.contract.profile
    named = None
    if reading is not None and reading.result_url:
        named = reading.result_url
    elif reading is not None and reading.result_id and profile.result_url_template:
        named = profile.result_url_template.replace("{result_id}", reading.result_id)
    if named is None:
        return None
    try:
        return resolve(record.submission.status_url or record.submission.submit_url or "", named)
    except ValueError as exc:
        return ValueError(f"the result URL {shown_url(named)} cannot be used ({exc})")


def complete(
    record: Record,
    now: datetime,
    outcome: OutcomeKind,
    *,
    result: JSON,
    error: JSON,
    usage: JSON,
    counts: Counts | None = None,
) -> Step:
    """A (partial) success with its result: finish, or first fetch the errors page once."""
    if outcome is OutcomeKind.COMPLETED_WITH_ERRORS and record.submission.errors_url:
        record = record.evolve(
            ending=record.ending.evolve(
                phase=Phase.FETCHING_ERRORS,
                settled_outcome=outcome,
                result=result,
                error=error if is_present(error) else None,
                usage=usage,
                counts=counts.as_json() if counts is not None else record.ending.counts,
            ),
            schedule=record.schedule.evolve(next_poll_at=now, delay_source=None, attempt=0),
        )
        summary = sentences.errors_due(redact_url(record.submission.errors_url or ""))
        return Step(record, EventKind.ERRORS_DUE, summary, {})
    return terminal(record, now, outcome, result=result, error=error, counts=counts, usage=usage)
