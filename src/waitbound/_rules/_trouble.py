"""Whether an answer of trouble is still tolerable: a throttle, a 5xx, no answer.

Pure functions (see the rules atop ``_controller.py``) used by the answer modules
(``_status_answer.py``, ``_result_answer.py``, ``_submit_answer.py``) where an answer's
meaning is decided: :func:`is_throttled` says whether an answer is a throttle by the
profile's word; :func:`throttled` and :func:`provider_trouble` count one against its
budget (``max_rate_limited``, ``max_transport_failures``, plus what decisions granted)
and either stop the operation (``rate_limited``, ``provider_failure``) once the budget
is exceeded or look again (``_next_poll.schedule``, which only picks the time);
:func:`submission_trouble` does the same for the first answer, whose retry is safe
only with an idempotency key or an idempotent method. The budgets are stated in
``docs/waiting.md``.
"""

from __future__ import annotations

from waitbound._base._json import show
from waitbound._model._observation import Observation
from waitbound._model._outcome import Reason
from waitbound._model._record import Record
from waitbound._profile._contract import Reading
from waitbound._profile._protocol import IDEMPOTENT_METHODS
from waitbound._rules._finish import Step, escalate
from waitbound._rules._next_poll import Timing, schedule

__all__ = ["is_throttled", "provider_trouble", "submission_trouble", "throttled"]


def is_throttled(record: Record, observation: Observation, reading: Reading | None) -> bool:
    """The answer is a throttle by the profile's word: its body's ``throttled``
    expression, or its ``throttle`` rule (a status such as GitHub's 403 with a
    rate-limit header), checked before the 401/403 rule; a 429 always is."""
    code = observation.http_status
    body_throttled = reading is not None and reading.throttled
    return body_throttled or (
        code is not None and record.contract.profile.throttled_by(code, observation.headers)
    )


def throttled(
    record: Record, observation: Observation, reading: Reading | None, timing: Timing
) -> Step:
    """A throttle: counted against ``max_rate_limited``; past it, escalate
    ``rate_limited``, else look again later (a throttle's backoff, ``_next_poll``)."""
    used = record.counters.rate_limited_used + 1
    record = record.evolve(counters=record.counters.evolve(rate_limited_used=used))
    if used > record.max_rate_limited:
        return escalate(
            record,
            observation.at,
            Reason.RATE_LIMITED,
            f"throttled {used} times; the rate-limit budget is {record.max_rate_limited}",
        )
    return schedule(
        record, observation, reading, timing, note="throttled", throttle=True, unseen=True
    )


def provider_trouble(
    record: Record, observation: Observation, reading: Reading | None, timing: Timing
) -> Step:
    """A 5xx or no answer: counted against ``max_transport_failures``; past it, escalate
    ``provider_failure`` (saying what is known of the job), else look again later (a
    503's wait is a demand no webhook cuts short)."""
    what = observation.transport_error or f"HTTP {observation.http_status}"
    used = record.counters.transport_failures_used + 1
    record = record.evolve(counters=record.counters.evolve(transport_failures_used=used))
    if used > record.max_transport_failures:
        settled, missing = record.provider_outcome, record.unfetched
        learned = (
            f"the job {settled.value} at the provider (last state "
            f"{show(record.answer.provider_state)}), but its {missing} could not be fetched"
            if settled is not None and missing is not None
            else "the job's state could not be learned "
            f"(last known {show(record.answer.provider_state)})"
        )
        return escalate(
            record,
            observation.at,
            Reason.PROVIDER_FAILURE,
            f"{what}; {used} transport failures (budget {record.max_transport_failures}); "
            + learned,
        )
    return schedule(
        record,
        observation,
        reading,
        timing,
        note=f"provider trouble ({what})",
        demanded=observation.http_status == 503,
        unseen=True,
    )


def submission_trouble(record: Record, observation: Observation, timing: Timing) -> Step:
    """No answer to the submission, or a 5xx: counted as a transport failure; sent again
    (at a time ``_next_poll`` picks) only when that is safe (its idempotency key, or an
    idempotent method: PUT, DELETE) and attempts are left (``max_submit_attempts``),
    else escalate ``provider_failure``: it may have created a job."""
    now = observation.at
    code = observation.http_status
    resend = (
        bool(record.submission.idempotency_key)
        or record.submission.submit_method in IDEMPOTENT_METHODS
    )
    what = observation.transport_error or f"HTTP {code}"
    record = record.evolve(
        counters=record.counters.evolve(
            transport_failures_used=record.counters.transport_failures_used + 1
        )
    )
    if resend and record.counters.submit_attempts < record.contract.max_submit_attempts:
        why = (
            "with the same idempotency key"
            if record.submission.idempotency_key
            else f"({record.submission.submit_method} is idempotent)"
        )
        return schedule(
            record,
            observation,
            None,
            timing,
            note=f"no answer to the submission ({what}); sending it again {why}",
            demanded=code == 503,
        )
    key = (
        f" with idempotency key {record.submission.idempotency_key}"
        if record.submission.idempotency_key
        else ""
    )
    return escalate(
        record,
        now,
        Reason.PROVIDER_FAILURE,
        f"no answer to the submission ({what}) after {record.counters.submit_attempts} attempt(s)"
        f"{key}; it may have created a job",
    )
