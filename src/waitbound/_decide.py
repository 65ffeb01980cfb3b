"""Deciding what one answer means: an outcome, or when to look again.

Pure functions (see the rules atop ``_controller.py``): each takes the record with
the answer's bookkeeping applied, the observation and a ``random.Random``, and
returns a :data:`Step`: the record after the decision plus the audit event that
explains it. The HTTP meaning of an answer, the classification details and the
outcome rules are stated in ``docs/waiting.md``.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta

from waitbound._actions import repeated_key
from waitbound._contract import Classification, Counts, Reading, is_present
from waitbound._finish import (
    Step,
    bounded,
    deadline_reached,
    escalate,
    finish,
    seconds_between,
    terminal,
    timed_out,
)
from waitbound._json import JSON, show
from waitbound._observation import Observation
from waitbound._outcome import OutcomeKind, Reason
from waitbound._record import Phase, Record
from waitbound._schedule import DelaySource, backoff_delay_s, hinted_delay_s, read_hints
from waitbound._urls import redact_url, resolve, shown_url

__all__ = [
    "THROTTLE_FACTOR",
    "decide_cancel",
    "decide_errors",
    "decide_result",
    "decide_status",
    "decide_submit",
]

THROTTLE_FACTOR = 4.0
"""A throttle without a hint backs off at least this many times the current delay."""


def decide_status(
    record: Record, observation: Observation, reading: Reading | None, rng: random.Random
) -> Step:
    """Decide what a status answer means (the table in ``docs/waiting.md``).

    Args:
        record: the record with the answer's bookkeeping applied.
        observation: the answer.
        reading: what the profile read from its JSON body, or ``None``.
        rng: draws the jitter of the next delay.
    """
    now = observation.at
    code = observation.http_status
    if observation.transport_error is not None or code is None:
        return _provider_trouble(record, observation, reading, rng)
    if reading is not None and reading.ambiguous is not None:
        return escalate(
            record,
            now,
            Reason.INTEGRATION_FAILURE,
            repeated_key("status body", reading.ambiguous),
            response=observation.body,
        )
    if _throttled_by_rule(record, observation, reading):
        return _throttled(record, observation, reading, rng)
    mapped = record.profile.http_status_states.get(code)
    if mapped is not None:
        return _classified(record, observation, mapped, reading, rng)
    if code in (401, 403):
        return escalate(
            record,
            now,
            Reason.AUTHORIZATION_DENIED,
            f"the status URL answered HTTP {code}; check the credentials (not retried)",
            response=observation.body,
        )
    if code == 429 or (reading is not None and reading.throttled):
        return _throttled(record, observation, reading, rng)
    if code >= 500:
        return _provider_trouble(record, observation, reading, rng)
    if code in (404, 410) or (200 <= code < 300 and reading and reading.classification is None):
        what = f"HTTP {code}" if code in (404, 410) else "a body without a state"
        if record.job_seen_at is None and seconds_between(record.created_at, now) < (
            record.policy.not_found_grace_s
        ):
            return _schedule(record, observation, reading, rng, note=f"{what}: not visible yet")
        seen = "after the job was seen" if record.job_seen_at else "past the not-found grace"
        return escalate(
            record,
            now,
            Reason.INTEGRATION_FAILURE,
            f"the status URL answered {what} {seen}; the contract does not explain it",
            response=observation.body,
        )
    if not 200 <= code < 300:
        return escalate(
            record,
            now,
            Reason.INTEGRATION_FAILURE,
            f"the status URL answered HTTP {code}"
            + (f" with {observation.body_problem}" if observation.body_problem else "")
            + ", which the profile does not explain",
            response=observation.body,
        )
    if reading is None:
        problem = observation.body_problem or "an empty body"
        return escalate(
            record,
            now,
            Reason.INTEGRATION_FAILURE,
            f"the status URL answered HTTP {code} with {problem}",
        )
    assert reading.classification is not None
    return _classified(record, observation, reading.classification, reading, rng)


def _classified(
    record: Record,
    observation: Observation,
    classification: Classification,
    reading: Reading | None,
    rng: random.Random,
) -> Step:
    now = observation.at
    if reading is not None:
        record = replace(
            record,
            provider_state=reading.state,
            progress=reading.progress if reading.progress is not None else record.progress,
            job_id=record.job_id or reading.job_id,
        )
    record = replace(record, job_seen_at=record.job_seen_at or now)
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
            return _schedule(record, observation, reading, rng)
        case Classification.SUCCEEDED | Classification.PARTIAL:
            return _settle(record, observation, classification, reading, rng)
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


def _settle(
    record: Record,
    observation: Observation,
    classification: Classification,
    reading: Reading | None,
    rng: random.Random,
) -> Step:
    """A terminal success or partial success: validate it, then fetch or finish.

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
        record = replace(record, success_seen_at=seen_at, confirm_requests_used=confirms)
        return _schedule(
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
    result_url = _result_url(record, reading)
    if isinstance(result_url, ValueError):
        return escalate(record, now, Reason.INTEGRATION_FAILURE, str(result_url))
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
            result=reading.result if reading is not None else None,
            error=error,
            counts=counts,
            usage=reading.usage if reading is not None else None,
        )
    record = replace(
        record,
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
    return (
        record,
        "result_due",
        f"terminal {outcome.value}; fetching the result from {redact_url(result_url)} once",
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
    reference = _result_url(record, reading)
    if isinstance(reference, str):
        record = replace(record, result_url=reference)
    return terminal(
        record,
        now,
        outcome,
        error=reading.error,
        counts=counts or reading.counts,
        usage=reading.usage,
        reason=reason,
    )


def _by_counts(counts: Counts) -> OutcomeKind:
    """Some items did not succeed: with none succeeded, the job failed (or was canceled,
    or expired, when that is all that happened to them); else it completed with errors."""
    if counts.succeeded != 0:
        return OutcomeKind.COMPLETED_WITH_ERRORS
    if counts.failed:
        return OutcomeKind.FAILED
    return OutcomeKind.CANCELED if counts.canceled else OutcomeKind.EXPIRED


def _result_url(record: Record, reading: Reading | None) -> str | ValueError | None:
    """The result URL: given, or read from the body; relative resolves against the status URL."""
    candidate = record.result_url
    profile = record.profile
    if candidate is None and reading is not None:
        if reading.result_url:
            candidate = reading.result_url
        elif reading.result_id and profile.result_url_template:
            candidate = profile.result_url_template.replace("{result_id}", reading.result_id)
    if candidate is None:
        return None
    try:
        return resolve(record.status_url or "", candidate)
    except ValueError as exc:
        return ValueError(f"the result URL {shown_url(candidate)} cannot be used ({exc})")


def decide_result(record: Record, observation: Observation, rng: random.Random) -> Step:
    """Decide what a result-endpoint answer means: 409/425 not ready, 2xx the result."""
    now = observation.at
    code = observation.http_status
    if observation.transport_error is not None or code is None or code >= 500:
        return _provider_trouble(record, observation, None, rng)
    if code == 429 or _throttled_by_rule(record, observation, None):
        return _throttled(record, observation, None, rng)
    if code in (401, 403):
        return escalate(
            record, now, Reason.AUTHORIZATION_DENIED, f"the result URL answered HTTP {code}"
        )
    if code in (409, 425):
        return _schedule(record, observation, None, rng, note=f"result not ready (HTTP {code})")
    if 200 <= code < 300 and observation.body_problem is None:
        document = record.profile.read_result(observation.body)
        record = replace(record, result_fetched_at=now)
        if document.ambiguous is not None:
            detail = repeated_key("result", document.ambiguous)
            return escalate(record, now, Reason.INTEGRATION_FAILURE, detail)
        usage = document.usage if is_present(document.usage) else record.usage
        if is_present(document.output_error):
            return terminal(
                record, now, OutcomeKind.FAILED, error=document.output_error, usage=usage
            )
        return _complete(
            record,
            now,
            record.settled_outcome or OutcomeKind.SUCCEEDED,
            result=document.output,
            error=record.error,
            usage=usage,
        )
    problem = observation.body_problem or f"HTTP {code}"
    return escalate(
        record,
        now,
        Reason.INTEGRATION_FAILURE,
        f"the result URL answered {problem}",
        response=observation.body,
    )


def _throttled_by_rule(record: Record, observation: Observation, reading: Reading | None) -> bool:
    """The profile's ``throttle`` rule says this answer is a throttle (checked before the
    401/403 rule: GitHub throttles with 403)."""
    code = observation.http_status
    body_throttled = reading is not None and reading.throttled
    return code is not None and record.profile.throttled_by(
        code, observation.headers, body_throttled=body_throttled
    )


def _throttled(
    record: Record, observation: Observation, reading: Reading | None, rng: random.Random
) -> Step:
    used = record.rate_limited_used + 1
    record = replace(record, rate_limited_used=used)
    if used > record.policy.max_rate_limited:
        return escalate(
            record,
            observation.at,
            Reason.RATE_LIMITED,
            f"throttled {used} times; the rate-limit budget is {record.policy.max_rate_limited}",
        )
    return _schedule(record, observation, reading, rng, note="throttled", throttle=True)


def _provider_trouble(
    record: Record, observation: Observation, reading: Reading | None, rng: random.Random
) -> Step:
    what = observation.transport_error or f"HTTP {observation.http_status}"
    used = record.transport_failures_used + 1
    record = replace(record, transport_failures_used=used)
    if used > record.policy.max_transport_failures:
        return escalate(
            record,
            observation.at,
            Reason.PROVIDER_FAILURE,
            f"{what}; {used} transport failures (budget {record.policy.max_transport_failures}); "
            f"the job's state could not be learned (last known {show(record.provider_state)})",
        )
    return _schedule(
        record,
        observation,
        reading,
        rng,
        note=f"provider trouble ({what})",
        demanded=observation.http_status == 503,
    )


def _schedule(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    rng: random.Random,
    *,
    note: str = "",
    throttle: bool = False,
    demanded: bool = False,
    confirming: bool = False,
) -> Step:
    """Set ``next_poll_at`` from hints, backoff and jitter; stop if it lands past the deadline.

    A valid positive hint is a minimum (raised to the floor, then jittered upward
    only). Without one, or with a hint of zero (no minimum, audited as such): local
    backoff; a throttle multiplies it by :data:`THROTTLE_FACTOR`; a confirmation
    re-check fits its requests inside the confirmation window.
    """
    now = observation.at
    policy = record.policy
    floor = policy.floor_s
    told, invalid = read_hints(
        observation.headers, reading, record.profile, now=now, throttled=throttle
    )
    hint = told if told is not None and told.delay_s > 0 else None
    if told is not None and hint is None:
        note = f"{note + '; ' if note else ''}hint 0 ({told.origin}): no minimum"
    if hint is not None:
        minimum = max(hint.delay_s, floor)
        delay = hinted_delay_s(minimum, jitter=policy.hint_jitter, rng=rng)
        source = hint.source
        demanded = demanded or throttle
    else:
        minimum = floor
        delay = backoff_delay_s(
            record.attempt,
            base_delay_s=policy.base_delay_s,
            max_delay_s=policy.max_delay_s,
            rng=rng,
        )
        if throttle:
            delay *= THROTTLE_FACTOR
            minimum = delay
            demanded = True
        if confirming:
            delay = min(delay, policy.confirm_window_s / (policy.confirm_max_requests + 1))
        delay = max(delay, floor)
        source = DelaySource.LOCAL_BACKOFF
    record = replace(record, attempt=record.attempt + 1)
    extra: dict[str, JSON] = {
        "invalid_hints": [
            {"origin": bad.origin, "value": bad.value, "problem": bad.problem} for bad in invalid
        ]
    }
    if hint is not None:
        extra["hint"] = {"origin": hint.origin, "delay_s": hint.delay_s}
    elif told is not None:
        extra["hint"] = {"origin": told.origin, "delay_s": 0.0, "minimum": False}
    earliest = now + timedelta(seconds=minimum)
    if earliest >= record.deadline_at:
        wait = (
            f"told to wait {minimum:g}s ({hint.origin})" if hint else f"backing off {minimum:.3g}s"
        )
        if demanded:
            record, kind, summary, more = escalate(
                record,
                now,
                Reason.RATE_LIMITED,
                f"{note or 'throttled'}: {wait}, past the deadline",
            )
        else:
            record, kind, summary, more = deadline_reached(
                record, now, f"; {wait}, past the deadline"
            )
        return record, kind, summary, extra | more
    next_poll_at = min(now + timedelta(seconds=delay), record.deadline_at)
    record = replace(record, next_poll_at=next_poll_at, delay_source=source)
    ignored = (
        "; ignored " + ", ".join(f"{b.origin} {b.value!r}" for b in invalid) if invalid else ""
    )
    summary = (
        f"{note + '; ' if note else ''}next request in {seconds_between(now, next_poll_at):.3g}s "
        f"({source.value}){ignored}"
    )
    return record, "scheduled", summary, extra


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
        record = replace(
            record,
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
        summary = (
            "completed with errors; fetching the first page of errors from "
            f"{redact_url(record.errors_url or '')} once"
        )
        return record, "errors_due", summary, {}
    return terminal(record, now, outcome, result=result, error=error, counts=counts, usage=usage)


def decide_errors(record: Record, observation: Observation) -> Step:
    """Keep the first page of per-item errors (bounded); the outcome stands either way."""
    code = observation.http_status
    if code is not None and 200 <= code < 300 and observation.body_problem is None:
        errors: JSON = bounded(observation.body)
    else:
        problem = observation.transport_error or observation.body_problem or f"HTTP {code}"
        errors = {"problem": f"the errors URL answered {problem}"}
    record = replace(record, errors=errors)
    return finish(
        record, observation.at, record.settled_outcome or OutcomeKind.COMPLETED_WITH_ERRORS, None
    )


def decide_cancel(record: Record, observation: Observation) -> Step:
    """Record the provider's answer to a cancel; the status endpoint decides the outcome."""
    now = observation.at
    code = observation.http_status
    answer = observation.transport_error or f"HTTP {code}"
    record = replace(record, cancel_due=False)
    if now >= record.deadline_at:
        return timed_out(record, now, f"; cancel requested at the deadline ({answer})")
    accepted = code is not None and 200 <= code < 300
    if accepted:
        record = replace(record, next_poll_at=now, delay_source=None, attempt=0)
    verdict = "accepted" if accepted else "not accepted"
    summary = f"cancel {verdict} ({answer}); the status endpoint will tell how the job ends"
    return record, "cancel_answered", summary, {"http_status": code, "accepted": accepted}


def decide_submit(record: Record, observation: Observation, rng: random.Random) -> Step:
    """Read the receipt; a submission is repeated only with its idempotency key after no answer.

    Raises nothing: every answer becomes a step (waiting, a retry, or an outcome).
    """
    now = observation.at
    code = observation.http_status
    if observation.transport_error is not None or code is None or code >= 500:
        what = observation.transport_error or f"HTTP {code}"
        record = replace(record, transport_failures_used=record.transport_failures_used + 1)
        if record.idempotency_key and record.submit_attempts < record.max_submit_attempts:
            return _schedule(
                record,
                observation,
                None,
                rng,
                note=f"no answer to the submission ({what}); sending it again with the "
                "same idempotency key",
                demanded=code == 503,
            )
        key = f" with idempotency key {record.idempotency_key}" if record.idempotency_key else ""
        return escalate(
            record,
            now,
            Reason.PROVIDER_FAILURE,
            f"no answer to the submission ({what}) after {record.submit_attempts} attempt(s)"
            f"{key}; it may have created a job",
        )
    if code == 429 or _throttled_by_rule(record, observation, None):
        return escalate(
            record,
            now,
            Reason.RATE_LIMITED,
            f"the submission was throttled (HTTP {code}): no job was created; submit again later",
            response=observation.body,
        )
    if code in (401, 403):
        return escalate(
            record,
            now,
            Reason.AUTHORIZATION_DENIED,
            f"the submission answered HTTP {code}",
            response=observation.body,
        )
    if not (200 <= code < 300 or code == 303):
        return terminal(
            record,
            now,
            OutcomeKind.FAILED,
            error={"http_status": code, "response": bounded(observation.body)},
        )
    contract = record.profile.submit
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
    if receipt.status_url is None:
        places = ", ".join(contract.status_url_headers) + " headers, the receipt body"
        return escalate(
            record,
            now,
            Reason.INTEGRATION_FAILURE,
            f"the submission answered HTTP {code} but named no status resource "
            f"(looked at: {places}); not guessing a URL",
            response=observation.body,
        )
    record = replace(
        record,
        phase=Phase.WAITING,
        status_url=receipt.status_url,
        job_id=record.job_id or receipt.job_id,
        result_url=record.result_url or receipt.result_url,
        cancel_url=record.cancel_url or receipt.cancel_url,
        attempt=0,
    )
    hint = Reading(classification=None, poll_hint_s=receipt.poll_hint)
    job = f" job {receipt.job_id}" if receipt.job_id else ""
    return _schedule(
        record,
        observation,
        hint,
        rng,
        note=f"submitted:{job} status at {redact_url(receipt.status_url)} "
        f"(from the {receipt.status_url_origin})",
    )
