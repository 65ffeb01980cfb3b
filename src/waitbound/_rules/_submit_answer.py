"""What the first answer (the submission's) means: an outcome already, or where and
when to poll.

Pure functions (see the rules atop ``_controller.py``), returning a :class:`Step`.
A terminal state in the first answer is decided as a status answer's is
(``_status_answer.classified``). The HTTP meaning of an answer is stated in
``docs/waiting.md``.
"""

from __future__ import annotations

from waitbound._base._urls import redact_url, same_url
from waitbound._model._observation import Observation
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._model._record import Phase, Record
from waitbound._profile._actions import repeated_key
from waitbound._profile._contract import Reading
from waitbound._rules._answers import Meaning, meaning
from waitbound._rules._finish import Step, bounded, escalate, terminal
from waitbound._rules._next_poll import Timing, schedule
from waitbound._rules._polling_kinds import first_answer_reader, polling_kind
from waitbound._rules._status_answer import TERMINAL, classified
from waitbound._rules._trouble import is_throttled, submission_trouble

__all__ = ["decide_submit"]


def decide_submit(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    timing: Timing,
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
    match answer.meaning:
        case Meaning.TROUBLE:
            return submission_trouble(record, observation, timing)
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
            return _receipt(record, observation, reading, timing)
        case _:
            return terminal(
                record,
                now,
                OutcomeKind.FAILED,
                error={"http_status": code, "response": bounded(observation.body)},
            )


def _receipt(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    timing: Timing,
) -> Step:
    """A 2xx (or 303) first answer: end here, or poll where it says."""
    now = observation.at
    code = observation.http_status
    profile = record.contract.profile
    contract = profile.submit
    receipt = contract.read(
        method=record.submission.submit_method or "POST",
        request_url=record.submission.submit_url or "",
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
        ending=record.ending.evolve(phase=Phase.WAITING),
        submission=record.submission.evolve(
            job_id=record.submission.job_id or receipt.job_id,
            result_url=record.submission.result_url or receipt.result_url,
            cancel_url=record.submission.cancel_url or receipt.cancel_url,
            location_url=receipt.location_url,
        ),
        schedule=record.schedule.evolve(attempt=0),
    )
    stated = reading.classification if reading is not None else None
    if receipt.status_url is None:
        table = profile.first_answer
        by_code = None if code is None else table.by_code(code) or table.by_code_class(code)
        if stated in TERMINAL or by_code in TERMINAL:
            done = stated if stated in TERMINAL else by_code
            assert done is not None
            return classified(record, observation, done, reading, timing, answered_by=None)
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
        submission=record.submission.evolve(
            status_url=receipt.status_url,
            poll_kind=receipt.status_url_kind,
            poll_header=receipt.status_url_header,
        )
    )
    first = first_answer_reader(record)
    if first.resource and same_url(receipt.status_url, record.submission.submit_url):
        # Polling the original URI: the first answer is its first answer, read whole.
        stated = polling_kind(record).status(record, observation, reading) or stated
    if stated in TERMINAL:
        assert stated is not None
        return classified(record, observation, stated, reading, timing, answered_by=first)
    hint = Reading(classification=None, poll_hint_s=receipt.poll_hint)
    job = f" job {receipt.job_id}" if receipt.job_id else ""
    kind_note = polling_kind(record).aside
    return schedule(
        record,
        observation,
        hint,
        timing,
        note=f"submitted:{job} status at {redact_url(receipt.status_url)}{kind_note} "
        f"(from the {receipt.status_url_origin})",
    )
