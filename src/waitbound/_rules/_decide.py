"""Deciding what one answer means: an outcome, or when to look again.

Pure functions (see the rules atop ``_controller.py``): each takes the record with
the answer's bookkeeping applied, the observation and a ``random.Random``, and
returns a :class:`Step`: the record after the decision plus the audit event that
explains it. The HTTP meaning of an answer, the classification details and the
outcome rules are stated in ``docs/waiting.md``.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Final

from waitbound._base._json import JSON, show
from waitbound._base._urls import redact_url, resolve, same_url, shown_url
from waitbound._model._audit import EventKind
from waitbound._model._errors_page import errors_page
from waitbound._model._observation import Observation
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._model._record import Phase, Record
from waitbound._profile._actions import repeated_key
from waitbound._profile._contract import Classification, Counts, Reading, is_present
from waitbound._profile._protocol import IDEMPOTENT_METHODS, UrlKind, final_url
from waitbound._rules import _sentences as sentences
from waitbound._rules._answers import Meaning, meaning
from waitbound._rules._doubt import cleared, doubt, foreign_job
from waitbound._rules._final_state import empty_resource, monitor_result
from waitbound._rules._finish import (
    Step,
    bounded,
    escalate,
    finish,
    seconds_between,
    terminal,
)
from waitbound._rules._learned import ModelLookup
from waitbound._rules._next_poll import is_throttled, provider_trouble, schedule, throttled

__all__ = [
    "decide_errors",
    "decide_result",
    "decide_status",
    "decide_submit",
    "first_answer_kind",
]


def decide_status(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    rng: random.Random,
    *,
    models: ModelLookup | None = None,
) -> Step:
    """Decide what a status answer means (the tables in ``_answers.py`` and the rules
    in ``docs/waiting.md``), read by the kind of the URL that answered.

    Args:
        record: the record with the answer's bookkeeping applied.
        observation: the answer.
        reading: what the profile read from its JSON body, or ``None``.
        rng: draws the jitter of the next delay.
        models: the learned schedules (``Policy.schedule = "learned"``); ``None``:
            the formula.
    """
    now = observation.at
    code = observation.http_status
    if reading is not None and reading.ambiguous is not None and code is not None:
        return escalate(
            record,
            now,
            Reason.INTEGRATION_FAILURE,
            repeated_key("status body", reading.ambiguous),
            response=observation.body,
        )
    table = record.profile.table(record.poll_kind)
    answer = meaning(
        "status", code, table=table, throttled=is_throttled(record, observation, reading)
    )
    match answer.meaning:
        case Meaning.TROUBLE:
            return provider_trouble(record, observation, reading, rng)
        case Meaning.THROTTLED:
            return throttled(record, observation, reading, rng)
        case Meaning.CLASSIFIED:
            assert answer.classification is not None
            return _classified(
                record, observation, answer.classification, reading, rng, models=models
            )
        case Meaning.DENIED:
            return escalate(
                record,
                now,
                Reason.AUTHORIZATION_DENIED,
                f"the status URL answered HTTP {code}; check the credentials (not retried)",
                response=observation.body,
            )
        case Meaning.NOT_FOUND:
            return _not_visible(record, observation, reading, rng, f"HTTP {code}")
        case Meaning.BODY:
            found = _by_table(record, observation, reading)
            if found is not None:
                return _classified(record, observation, found, reading, rng, models=models)
            if reading is not None and _not_seen_yet(record, now):  # eventual consistency
                note = f"HTTP {code} with no state: not visible yet"
                return schedule(record, observation, reading, rng, note=note)
            if reading is not None:
                return _no_state(record, observation)
            problem = observation.body_problem or "an empty body"
            return escalate(
                record,
                now,
                Reason.INTEGRATION_FAILURE,
                f"the status URL answered HTTP {code} with {problem}",
            )
        case _:
            return escalate(
                record,
                now,
                Reason.INTEGRATION_FAILURE,
                f"the status URL answered HTTP {code}"
                + (f" with {observation.body_problem}" if observation.body_problem else "")
                + ", which the profile does not explain",
                response=observation.body,
            )


def _by_table(
    record: Record, observation: Observation, reading: Reading | None
) -> Classification | None:
    """The class the polling URL's state table gives this answer: an exact code row,
    the body's state, or the ``when_no_state`` row for a body (possibly empty) without
    one; ``None`` when none applies."""
    table = record.profile.table(record.poll_kind)
    code = observation.http_status
    if code is None or observation.body_problem is not None:
        return None
    if (by_code := table.by_code(code)) is not None:
        return by_code
    found = reading.classification if reading is not None else None
    return found if found is not None else table.when_no_state.get(code)


def _no_state(record: Record, observation: Observation) -> Step:
    """A 2xx JSON body in which the profile finds no state (and no ``when_no_state`` row
    applies): an answer that can never become valid, so the operation stops at once.

    Unlike a 404 ("not visible yet" within the not-found grace), the URL answered and
    said what it holds; asking again spends requests on the same broken document
    (azure-core raises on the first such body too).
    """
    table = record.profile.table(record.poll_kind)
    where = "status URL" if record.poll_kind is UrlKind.STATUS else f"{record.poll_kind.value} URL"
    field = str(table.state.expression) if table.state is not None else "done"
    return escalate(
        record,
        observation.at,
        Reason.INTEGRATION_FAILURE,
        f"the {where} answered HTTP {observation.http_status} with a body that has no state "
        f"(nothing at {field!r}); such an answer can never become a valid status, so it is "
        "not asked again",
        response=observation.body,
    )


def _not_seen_yet(record: Record, now: datetime) -> bool:
    """The job was never seen and the not-found grace still runs: a 404 or a 2xx body
    without a state (a listing still empty right after the job was started: eventual
    consistency) is "not visible yet", asked again; once a state was seen, it is not."""
    return record.job_seen_at is None and seconds_between(record.created_at, now) < (
        record.policy.not_found_grace_s
    )


def _not_visible(
    record: Record, observation: Observation, reading: Reading | None, rng: random.Random, what: str
) -> Step:
    """A 404 or 410: "not visible yet" within the not-found grace before the job was
    ever seen; else the contract does not explain it."""
    now = observation.at
    if _not_seen_yet(record, now):
        return schedule(record, observation, reading, rng, note=f"{what}: not visible yet")
    seen = "after the job was seen" if record.job_seen_at else "past the not-found grace"
    return escalate(
        record,
        now,
        Reason.INTEGRATION_FAILURE,
        f"the status URL answered {what} {seen}; the contract does not explain it",
        response=observation.body,
    )


def _classified(
    record: Record,
    observation: Observation,
    classification: Classification,
    reading: Reading | None,
    rng: random.Random,
    *,
    final_here: bool | None = None,
    models: ModelLookup | None = None,
) -> Step:
    """A classified answer: pending → schedule (moving the polling URL when the answer
    names a new one); terminal → the outcome. *final_here*: this answer's body is the
    final state (by default: it came from a ``location`` or ``resource`` URL)."""
    now = observation.at
    if reading is not None and (other := foreign_job(record, reading.job_id)) is not None:
        what = "first answer" if observation.kind == "submit" else "status answer"
        return doubt(
            record, observation, reading, rng,
            f"the {what} names job {other}, not this operation's job {record.job_id}",
            extra={"job_mismatch": {"expected": record.job_id, "named": other}},
        )  # fmt: skip
    if reading is not None and reading.ending_unnamed:
        return doubt(
            record, observation, reading, rng,
            f"the answer says the run is over ({show(reading.decided)}) but its state "
            f"{show(reading.state)} names no ending",
        )  # fmt: skip
    record = cleared(record)
    if reading is not None:
        record = record.evolve(
            provider_state=reading.state,
            progress=reading.progress if reading.progress is not None else record.progress,
            job_id=record.job_id or reading.job_id,
            job_seen_at=record.job_seen_at or now,
        )
    elif record.job_seen_at is None:
        record = record.evolve(job_seen_at=now)
    treated = (
        classification is Classification.UNKNOWN
        and reading is not None
        and reading.state in record.grants.pending_states
    )
    if treated:  # a person decided this one value is pending for this operation
        classification = Classification.PENDING
    if final_here is None:
        final_here = record.poll_kind is not UrlKind.STATUS
    if classification is Classification.PENDING:  # the history's duration evidence
        record = record.evolve(pending_seen_at=now)
    elif classification in _TERMINAL and record.ended_seen_at is None:
        record = record.evolve(ended_seen_at=now)
    match classification:
        case Classification.PENDING:
            if record.success_seen_at is not None:
                return escalate(
                    record,
                    now,
                    Reason.CONTRADICTION,
                    f"the job reported success, then {show(reading.state if reading else None)}",
                    response=observation.body,
                )
            if reading is not None and reading.expires_at and now > reading.expires_at:
                return escalate(
                    record,
                    now,
                    Reason.CONTRADICTION,
                    f"the job is still {show(reading.state)} after its own expiry time "
                    f"{reading.expires_at.isoformat()}",
                    response=observation.body,
                )
            return _pending(record, observation, reading, rng, treated=treated, models=models)
        case Classification.SUCCEEDED | Classification.PARTIAL:
            return _settle(record, observation, classification, reading, rng, final_here=final_here)
        case Classification.FAILED:
            return _ended(record, now, OutcomeKind.FAILED, reading)
        case Classification.CANCELED:
            return _ended(record, now, OutcomeKind.CANCELED, reading)
        case Classification.EXPIRED:
            return _ended(record, now, OutcomeKind.EXPIRED, reading)
        case Classification.SKIPPED:
            return _ended(record, now, OutcomeKind.CANCELED, reading, reason=Reason.SKIPPED)
        case _:
            return escalate(
                record,
                now,
                Reason.UNKNOWN_STATE,
                f"state {show(record.provider_state)} is in none of the lists of profile "
                f"{record.profile.name}; not guessing what it means",
                response=observation.body,
            )


def _pending(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    rng: random.Random,
    *,
    treated: bool = False,
    models: ModelLookup | None = None,
) -> Step:
    """Still running: look again later, at the polling URL this answer names (a new
    ``Location`` on every 202 moves it; same-origin and credential rules as ever)."""
    notes = []
    if reading is not None and reading.unlisted:
        notes.append(f"unlisted state {show(reading.state)}: pending by the profile")
    if treated and reading is not None:
        notes.append(f"state {show(reading.state)}: pending by a person's decision")
    header = record.poll_header
    named = observation.headers.get(header) if header and observation.kind == "status" else None
    moved: dict[str, JSON] = {}
    if named:
        try:
            url = record.profile.submit.carried(
                resolve(record.status_url or "", named), record.submit_url
            )
        except ValueError as exc:
            return escalate(
                record,
                observation.at,
                Reason.INTEGRATION_FAILURE,
                f"the {header} header named a polling URL {shown_url(named)} that cannot be "
                f"used ({exc})",
            )
        if url != record.status_url:
            old = record.status_url or ""
            moved = {"polling_url_moved": {"from": redact_url(old), "to": redact_url(url)}}
            notes.append(f"polling URL moved from {redact_url(old)} to {redact_url(url)}")
            pinned = record.caller_url or record.submit_url or old
            record = record.evolve(status_url=url, caller_url=pinned)
    return schedule(record, observation, reading, rng, note="; ".join(notes), models=models).adding(
        moved
    )


def _settle(
    record: Record,
    observation: Observation,
    classification: Classification,
    reading: Reading | None,
    rng: random.Random,
    *,
    final_here: bool,
) -> Step:
    """A terminal success or partial success: validate it, then fetch or finish.

    *final_here*: this answer's body is the final state (a ``location`` or
    ``resource`` URL's, or a first answer that ended the operation), read as the
    result document; else the final state is fetched once from the result URL or
    where ``final-state-via`` points, or is the monitor's own ``result``.

    Counts that report unsuccessful items decide the outcome first (they explain a
    missing output file); only a success they leave standing needs its required fields.
    """
    now = observation.at
    policy = record.policy
    counts = reading.counts.settled() if reading is not None and reading.counts else None
    by_counts = _by_counts(counts) if counts is not None and counts.unsuccessful else None
    if by_counts is None and reading is not None and reading.missing_required:
        seen_at = record.success_seen_at or now
        confirms = record.confirm_requests_used + (record.success_seen_at is not None)
        window_over = record.success_seen_at is not None and (
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
        record = record.evolve(success_seen_at=seen_at, confirm_requests_used=confirms)
        return schedule(
            record,
            observation,
            reading,
            rng,
            note=f"success without {', '.join(reading.missing_required)}; confirming",
            confirming=True,
        )
    error = reading.error if reading is not None else None
    if classification is Classification.SUCCEEDED and is_present(error):
        return _ended(record, now, OutcomeKind.FAILED, reading, counts=counts)
    outcome = by_counts or (
        OutcomeKind.COMPLETED_WITH_ERRORS
        if classification is Classification.PARTIAL
        else OutcomeKind.SUCCEEDED
    )
    if outcome in (OutcomeKind.FAILED, OutcomeKind.CANCELED, OutcomeKind.EXPIRED):
        return _ended(record, now, outcome, reading, counts=counts)
    result_url = _result_url(record, observation, reading, final_here=final_here)
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
        document = record.profile.read_result(observation.body)
        if document.ambiguous is not None:
            detail = repeated_key("result", document.ambiguous)
            return escalate(record, now, Reason.INTEGRATION_FAILURE, detail)
        if is_present(document.output_error):
            return terminal(
                record, now, OutcomeKind.FAILED, error=document.output_error, counts=counts,
                usage=document.usage,
            )  # fmt: skip
        return _complete(
            record, now, outcome, result=document.output, error=error, counts=counts,
            usage=document.usage,
        )  # fmt: skip
    if result_url is None:
        if reading is not None and is_present(reading.output_error):
            return terminal(
                record, now, OutcomeKind.FAILED, error=reading.output_error, counts=counts,
                usage=reading.usage,
            )  # fmt: skip
        return _complete(
            record,
            now,
            outcome,
            result=monitor_result(record, observation, reading),
            error=error,
            counts=counts,
            usage=reading.usage if reading is not None else None,
        )
    record = record.evolve(
        phase=Phase.FETCHING_RESULT,
        settled_outcome=outcome,
        result_url=result_url,
        error=error,
        counts=counts.as_json() if counts else None,
        usage=reading.usage if reading is not None else None,
        next_poll_at=now,
        delay_source=None,
        attempt=0,
    )
    return Step(
        record,
        EventKind.RESULT_DUE,
        sentences.result_due(outcome, redact_url(result_url)),
        {"result_url": redact_url(result_url)},
    )


def _ended(
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
    reference = record.result_url or _named_result_url(record, reading)
    if isinstance(reference, str):
        record = record.evolve(result_url=reference)
        if record.profile.result_for_every_ending and record.result_fetched_at is None:
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
        url = record.profile.submit.carried(
            resolve(record.status_url or record.submit_url or "", record.result_url or ""),
            record.submit_url,
        )
    except ValueError:  # not a URL the credentials may follow: the ending as it is
        return terminal(
            record, now, outcome, error=reading.error, counts=counts or reading.counts,
            usage=reading.usage, reason=reason,
        )  # fmt: skip
    counted = counts or reading.counts
    record = record.evolve(
        phase=Phase.FETCHING_RESULT,
        settled_outcome=outcome,
        settled_reason=reason,
        result_url=url,
        error=reading.error if is_present(reading.error) else None,
        counts=counted.as_json() if counted else None,
        usage=reading.usage,
        next_poll_at=now,
        delay_source=None,
        attempt=0,
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
    record: Record, observation: Observation, reading: Reading | None, *, final_here: bool
) -> str | ValueError | None:
    """Where the final state is: a URL to fetch once, :data:`HERE`, or ``None`` when
    the status monitor is the final state and its ``result`` the result.

    A URL the caller or the receipt named comes first; then, unless this answer is
    final by its kind (*final_here*), the place ``final-state-via`` names, the
    monitor's ``result_url`` / ``result_id`` among them (``_protocol.final_url``).
    Relative URLs resolve against the status URL; the URL that just answered is not
    fetched again (:data:`HERE`).
    """
    profile = record.profile
    base = record.status_url or ""
    if record.result_url is None and final_here:
        return HERE
    candidate = record.result_url
    if candidate is None:
        named = _named_result_url(record, reading)
        if isinstance(named, ValueError):
            return named
        candidate = _final_url(record, named)
    if candidate is None:
        return None
    try:
        url = profile.submit.carried(resolve(base, candidate), record.submit_url)
    except ValueError as exc:
        return ValueError(f"the result URL {shown_url(candidate)} cannot be used ({exc})")
    answered = record.submit_url if observation.kind == "submit" else record.status_url
    return HERE if same_url(url, answered) and record.result_url is None else url


def _named_result_url(record: Record, reading: Reading | None) -> str | ValueError | None:
    """The result URL a status body names (``result_url``, or ``result_id`` in the
    profile's template), resolved against the status URL; ``None`` when it names none."""
    profile = record.profile
    named = None
    if reading is not None and reading.result_url:
        named = reading.result_url
    elif reading is not None and reading.result_id and profile.result_url_template:
        named = profile.result_url_template.replace("{result_id}", reading.result_id)
    if named is None:
        return None
    try:
        return resolve(record.status_url or record.submit_url or "", named)
    except ValueError as exc:
        return ValueError(f"the result URL {shown_url(named)} cannot be used ({exc})")


def _final_url(record: Record, monitor_result_url: str | None) -> str | None:
    """Where the protocol puts the final state (``_protocol.final_url``) for *record*."""
    contract = record.profile.submit
    return final_url(
        method=record.submit_method,
        request_url=record.submit_url,
        location_url=record.location_url,
        monitor_result_url=monitor_result_url,
        via=record.final_state_via or contract.final_state_via,
        by_method=contract.final_get,
    )


def decide_result(record: Record, observation: Observation, rng: random.Random) -> Step:
    """Decide what a result-endpoint answer means: 409/425 not ready, 2xx the result
    document (the tables in ``_answers.py``)."""
    now = observation.at
    code = observation.http_status
    answer = meaning("result", code, throttled=is_throttled(record, observation, None))
    match answer.meaning:
        case Meaning.TROUBLE:
            return provider_trouble(record, observation, None, rng)
        case Meaning.DENIED:
            return escalate(
                record, now, Reason.AUTHORIZATION_DENIED, f"the result URL answered HTTP {code}"
            )
        case Meaning.THROTTLED:
            return throttled(record, observation, None, rng)
        case Meaning.NOT_READY:
            return schedule(record, observation, None, rng, note=f"result not ready (HTTP {code})")
        case Meaning.BODY if observation.body_problem is None:
            document = record.profile.read_result(observation.body)
            if (other := foreign_job(record, document.job_id)) is not None:
                return doubt(
                    record, observation, None, rng,
                    f"the result document names job {other}, not this operation's job "
                    f"{record.job_id}",
                    extra={"job_mismatch": {"expected": record.job_id, "named": other}},
                )  # fmt: skip
            record = cleared(record).evolve(result_fetched_at=now)
            if document.ambiguous is not None:
                detail = repeated_key("result", document.ambiguous)
                return escalate(record, now, Reason.INTEGRATION_FAILURE, detail)
            settled = record.settled_outcome or OutcomeKind.SUCCEEDED
            if empty := empty_resource(record, observation, settled):
                return escalate(record, now, Reason.INTEGRATION_FAILURE, empty)
            usage = document.usage if is_present(document.usage) else record.usage
            if settled in _UNSUCCESSFUL:  # the receipt of a run that ended otherwise
                error = document.output_error if is_present(document.output_error) else None
                return terminal(
                    record, now, settled, result=document.output, error=error or record.error,
                    usage=usage, reason=record.settled_reason,
                )  # fmt: skip
            if is_present(document.output_error):
                return terminal(
                    record, now, OutcomeKind.FAILED, error=document.output_error, usage=usage
                )
            return _complete(
                record,
                now,
                settled,
                result=document.output,
                error=record.error,
                usage=usage,
            )
        case _:
            problem = observation.body_problem or f"HTTP {code}"
            return escalate(
                record,
                now,
                Reason.INTEGRATION_FAILURE,
                f"the result URL answered {problem}",
                response=observation.body,
            )


def _complete(
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
    if outcome is OutcomeKind.COMPLETED_WITH_ERRORS and record.errors_url:
        record = record.evolve(
            phase=Phase.FETCHING_ERRORS,
            settled_outcome=outcome,
            result=result,
            error=error if is_present(error) else None,
            usage=usage,
            counts=counts.as_json() if counts is not None else record.counts,
            next_poll_at=now,
            delay_source=None,
            attempt=0,
        )
        summary = sentences.errors_due(redact_url(record.errors_url or ""))
        return Step(record, EventKind.ERRORS_DUE, summary, {})
    return terminal(record, now, outcome, result=result, error=error, counts=counts, usage=usage)


def decide_errors(record: Record, observation: Observation) -> Step:
    """Keep the first page of per-item errors (bounded); the outcome stands either way."""
    code = observation.http_status
    if code is not None and 200 <= code < 300 and observation.body_problem is None:
        errors: JSON = errors_page(observation.body)
    else:
        problem = observation.transport_error or observation.body_problem or f"HTTP {code}"
        errors = {"problem": f"the errors URL answered {problem}"}
    record = record.evolve(errors=errors)
    return finish(
        record, observation.at, record.settled_outcome or OutcomeKind.COMPLETED_WITH_ERRORS, None
    )


def decide_submit(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    rng: random.Random,
    *,
    models: ModelLookup | None = None,
) -> Step:
    """Read the first answer: an outcome already, or where and when to poll.

    The first answer is an observation like any other: a terminal state in its body
    (read by the request URL's kind: the resource itself for a PUT or PATCH where the
    profile polls the original URI) ends the operation with zero polls; without a
    polling URL, the profile's ``submit.http_status_states`` may say the code alone
    means done, its body the result. A submission is sent again after no answer only
    when that is safe: with its idempotency key, or by an idempotent method (PUT,
    DELETE; RFC 9110 §9.2.2).

    Raises nothing: every answer becomes a step (waiting, a retry, or an outcome).
    """
    now = observation.at
    code = observation.http_status
    answer = meaning("submit", code, throttled=is_throttled(record, observation, reading))
    resend = bool(record.idempotency_key) or record.submit_method in IDEMPOTENT_METHODS
    match answer.meaning:
        case Meaning.TROUBLE:
            what = observation.transport_error or f"HTTP {code}"
            record = record.evolve(transport_failures_used=record.transport_failures_used + 1)
            if resend and record.submit_attempts < record.max_submit_attempts:
                why = (
                    "with the same idempotency key"
                    if record.idempotency_key
                    else f"({record.submit_method} is idempotent)"
                )
                return schedule(
                    record,
                    observation,
                    None,
                    rng,
                    note=f"no answer to the submission ({what}); sending it again {why}",
                    demanded=code == 503,
                )
            key = (
                f" with idempotency key {record.idempotency_key}" if record.idempotency_key else ""
            )
            return escalate(
                record,
                now,
                Reason.PROVIDER_FAILURE,
                f"no answer to the submission ({what}) after {record.submit_attempts} attempt(s)"
                f"{key}; it may have created a job",
            )
        case Meaning.DENIED:
            return escalate(
                record,
                now,
                Reason.AUTHORIZATION_DENIED,
                f"the submission answered HTTP {code}",
                response=observation.body,
            )
        case Meaning.THROTTLED:
            return escalate(
                record,
                now,
                Reason.RATE_LIMITED,
                f"the submission was throttled (HTTP {code}): no job was created; "
                "submit again later",
                response=observation.body,
            )
        case Meaning.BODY:
            return _receipt(record, observation, reading, rng, models=models)
        case _:
            return terminal(
                record,
                now,
                OutcomeKind.FAILED,
                error={"http_status": code, "response": bounded(observation.body)},
            )


_TERMINAL: Final = frozenset(Classification) - {Classification.PENDING, Classification.UNKNOWN}
_UNSUCCESSFUL: Final = frozenset({OutcomeKind.FAILED, OutcomeKind.CANCELED, OutcomeKind.EXPIRED})


def _receipt(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    rng: random.Random,
    *,
    models: ModelLookup | None = None,
) -> Step:
    """A 2xx (or 303) first answer: end here, or poll where it says."""
    now = observation.at
    code = observation.http_status
    profile = record.profile
    contract = profile.submit
    receipt = contract.read(
        method=record.submit_method or "POST",
        request_url=record.submit_url or "",
        headers=observation.headers,
        body=observation.body,
    )
    if receipt.problem is not None:
        return escalate(
            record, now, Reason.INTEGRATION_FAILURE, receipt.problem, response=observation.body
        )
    if reading is not None and reading.ambiguous is not None:
        detail = repeated_key("first answer", reading.ambiguous)
        return escalate(record, now, Reason.INTEGRATION_FAILURE, detail, response=observation.body)
    record = record.evolve(
        phase=Phase.WAITING,
        job_id=record.job_id or receipt.job_id,
        result_url=record.result_url or receipt.result_url,
        cancel_url=record.cancel_url or receipt.cancel_url,
        location_url=receipt.location_url,
        attempt=0,
    )
    stated = reading.classification if reading is not None else None
    if receipt.status_url is None:
        table = profile.first_answer
        by_code = None if code is None else table.by_code(code) or table.by_code_class(code)
        if stated in _TERMINAL or by_code in _TERMINAL:
            done = stated if stated in _TERMINAL else by_code
            assert done is not None
            return _classified(record, observation, done, reading, rng, final_here=True)
        places = ", ".join(s.origin for s in contract.polling) or "nowhere"
        return escalate(
            record,
            now,
            Reason.INTEGRATION_FAILURE,
            f"the submission answered HTTP {code} but named no status resource "
            f"(looked at: {places}); not guessing a URL",
            response=observation.body,
        )
    record = record.evolve(
        status_url=receipt.status_url,
        poll_kind=receipt.status_url_kind,
        poll_header=receipt.status_url_header,
    )
    kind = first_answer_kind(record)
    if kind is UrlKind.RESOURCE and same_url(receipt.status_url, record.submit_url):
        # Polling the original URI: the first answer is its first answer, read whole.
        stated = _by_table(record, observation, reading) or stated
    if stated in _TERMINAL:
        assert stated is not None
        final_here = kind is not UrlKind.STATUS
        return _classified(record, observation, stated, reading, rng, final_here=final_here)
    hint = Reading(classification=None, poll_hint_s=receipt.poll_hint)
    job = f" job {receipt.job_id}" if receipt.job_id else ""
    polled = receipt.status_url_kind
    kind_note = f" ({polled.value} URL)" if polled is not UrlKind.STATUS else ""
    return schedule(
        record,
        observation,
        hint,
        rng,
        note=f"submitted:{job} status at {redact_url(receipt.status_url)}{kind_note} "
        f"(from the {receipt.status_url_origin})",
        models=models,
    )


def first_answer_kind(record: Record) -> UrlKind:
    """How the first answer's body is read: as the resource itself when the profile
    polls the original URI for this method (a PUT or PATCH at Azure), else as a
    status body."""
    for source in record.profile.submit.polling:
        if source.kind is UrlKind.RESOURCE and record.submit_method in source.request_methods:
            return UrlKind.RESOURCE
    return UrlKind.STATUS
