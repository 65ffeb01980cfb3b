"""What a status answer means: an outcome, or when to look again.

Pure functions (see the rules atop ``_controller.py``): each takes the record with
the answer's bookkeeping applied, the observation and a ``random.Random``, and
returns a :class:`Step`: the record after the decision plus the audit event that
explains it. A status answer is read by the kind of the URL that answered (its state
table); a classified answer, here or in the first answer (``_submit_answer.py``), is
decided by :func:`classified`, and a run's ending settled by ``_settle.py``.
The HTTP meaning of an answer, the classification details and the outcome rules are
stated in ``docs/waiting.md``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from waitbound._base._json import JSON, show
from waitbound._base._urls import redact_url
from waitbound._model._audit import EventKind
from waitbound._model._observation import Observation
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._model._record import Record
from waitbound._profile._actions import repeated_key
from waitbound._profile._contract import Classification, Reading
from waitbound._rules._answers import Meaning, meaning
from waitbound._rules._doubt import cleared, doubt, foreign_job
from waitbound._rules._finish import Step, escalate, seconds_between
from waitbound._rules._next_poll import Timing, schedule
from waitbound._rules._polling_kinds import PollingKind, UnusablePollingUrl, polling_kind
from waitbound._rules._settle import ended, settle
from waitbound._rules._trouble import is_throttled, provider_trouble, throttled

__all__ = ["TERMINAL", "classified", "decide_status"]


TERMINAL: Final = frozenset(Classification) - {Classification.PENDING, Classification.UNKNOWN}
"""The classes that end a run (every one but pending and unknown)."""


def decide_status(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    timing: Timing,
) -> Step:
    """Decide what a status answer means (the tables in ``_answers.py`` and the rules
    in ``docs/waiting.md``), read by the kind of the URL that answered.

    Args:
        record: the record with the answer's bookkeeping applied.
        observation: the answer.
        reading: what the profile read from its JSON body, or ``None``.
        timing: what the next poll time needs (the jitter's generator, the learned
            schedules, the origin calendar), and whether this answer is the one look
            after a cancel the provider did not accept (``timing.refused_cancel``:
            ``_canceling.after_refused_cancel``, which decides what it means for the
            operation; a look it schedules is decided in ``_next_poll.schedule``).
    """
    step = _decide_status(record, observation, reading, timing)
    if timing.refused_cancel is not None and step.kind is not EventKind.SCHEDULED:
        step = timing.refused_cancel(step, observation)
    return step


def _decide_status(
    record: Record, observation: Observation, reading: Reading | None, timing: Timing
) -> Step:
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
    reader = polling_kind(record)
    answer = meaning(
        "status",
        code,
        table=reader.table(record),
        throttled=is_throttled(record, observation, reading),
    )
    match answer.meaning:
        case Meaning.TROUBLE:
            return provider_trouble(record, observation, reading, timing)
        case Meaning.THROTTLED:
            return throttled(record, observation, reading, timing)
        case Meaning.CLASSIFIED:
            assert answer.classification is not None
            return classified(
                record, observation, answer.classification, reading, timing,
                answered_by=reader,
            )  # fmt: skip
        case Meaning.DENIED:
            return escalate(
                record,
                now,
                Reason.AUTHORIZATION_DENIED,
                f"the status URL answered HTTP {code}; check the credentials (not retried)",
                response=observation.body,
            )
        case Meaning.NOT_FOUND:
            return _not_visible(record, observation, reading, timing, f"HTTP {code}")
        case Meaning.BODY:
            found = reader.status(record, observation, reading)
            if found is not None:
                return classified(record, observation, found, reading, timing, answered_by=reader)
            if reading is not None and _not_seen_yet(record, now):  # eventual consistency
                note = f"HTTP {code} with no state: not visible yet"
                return schedule(record, observation, reading, timing, note=note)
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


def _no_state(record: Record, observation: Observation) -> Step:
    """A 2xx JSON body in which the profile finds no state (and no ``when_no_state`` row
    applies): an answer that can never become valid, so the operation stops at once.

    Unlike a 404 ("not visible yet" within the not-found grace), the URL answered and
    said what it holds; asking again spends requests on the same broken document
    (azure-core raises on the first such body too).
    """
    reader = polling_kind(record)
    table = reader.table(record)
    field = str(table.state.expression) if table.state is not None else "done"
    return escalate(
        record,
        observation.at,
        Reason.INTEGRATION_FAILURE,
        f"the {reader.name} answered HTTP {observation.http_status} with a body that has no state "
        f"(nothing at {field!r}); such an answer can never become a valid status, so it is "
        "not asked again",
        response=observation.body,
    )


def _not_seen_yet(record: Record, now: datetime) -> bool:
    """The job was never seen and the not-found grace still runs: a 404 or a 2xx body
    without a state (a listing still empty right after the job was started: eventual
    consistency) is "not visible yet", asked again; once a state was seen, it is not."""
    return record.answer.job_seen_at is None and seconds_between(
        record.contract.created_at, now
    ) < (record.contract.policy.not_found_grace_s)


def _not_visible(
    record: Record, observation: Observation, reading: Reading | None, timing: Timing, what: str
) -> Step:
    """A 404 or 410: "not visible yet" within the not-found grace before the job was
    ever seen; else the contract does not explain it."""
    now = observation.at
    if _not_seen_yet(record, now):
        return schedule(record, observation, reading, timing, note=f"{what}: not visible yet")
    seen = "after the job was seen" if record.answer.job_seen_at else "past the not-found grace"
    return escalate(
        record,
        now,
        Reason.INTEGRATION_FAILURE,
        f"the status URL answered {what} {seen}; the contract does not explain it",
        response=observation.body,
    )


def classified(
    record: Record,
    observation: Observation,
    classification: Classification,
    reading: Reading | None,
    timing: Timing,
    *,
    answered_by: PollingKind | None,
) -> Step:
    """A classified answer: pending → schedule (moving the polling URL when the answer
    names a new one); terminal → the outcome. *answered_by*: the reader of the URL that
    answered (the polling URL's, or the first answer's); ``None``: a first answer that
    named no polling URL, itself the final state (see :func:`~waitbound._rules._settle.settle`)."""
    now = observation.at
    if reading is not None and (other := foreign_job(record, reading.job_id)) is not None:
        what = "first answer" if observation.kind == "submit" else "status answer"
        return doubt(
            record, observation, reading, timing,
            f"the {what} names job {other}, not this operation's job {record.submission.job_id}",
            extra={"job_mismatch": {"expected": record.submission.job_id, "named": other}},
        )  # fmt: skip
    if reading is not None and reading.ending_unnamed:
        return doubt(
            record, observation, reading, timing,
            f"the answer says the run is over ({show(reading.decided)}) but its state "
            f"{show(reading.state)} names no ending",
        )  # fmt: skip
    record = cleared(record)
    if reading is not None:
        record = record.evolve(
            answer=record.answer.evolve(
                provider_state=reading.state,
                progress=reading.progress
                if reading.progress is not None
                else record.answer.progress,
                job_seen_at=record.answer.job_seen_at or now,
            ),
            submission=record.submission.evolve(job_id=record.submission.job_id or reading.job_id),
        )
    elif record.answer.job_seen_at is None:
        record = record.evolve(answer=record.answer.evolve(job_seen_at=now))
    treated = (
        classification is Classification.UNKNOWN
        and reading is not None
        and reading.state in record.oversight.grants.pending_states
    )
    if treated:  # a person decided this one value is pending for this operation
        classification = Classification.PENDING
    if classification is Classification.PENDING:  # the history's duration evidence
        record = record.evolve(answer=record.answer.evolve(pending_seen_at=now))
    elif classification in TERMINAL and record.answer.ended_seen_at is None:
        record = record.evolve(answer=record.answer.evolve(ended_seen_at=now))
    match classification:
        case Classification.PENDING:
            if record.answer.success_seen_at is not None:
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
            return _pending(record, observation, reading, timing, treated=treated)
        case Classification.SUCCEEDED | Classification.PARTIAL:
            return settle(
                record, observation, classification, reading, timing, answered_by=answered_by
            )
        case Classification.FAILED:
            return ended(record, now, OutcomeKind.FAILED, reading)
        case Classification.CANCELED:
            return ended(record, now, OutcomeKind.CANCELED, reading)
        case Classification.EXPIRED:
            return ended(record, now, OutcomeKind.EXPIRED, reading)
        case Classification.SKIPPED:
            return ended(record, now, OutcomeKind.CANCELED, reading, reason=Reason.SKIPPED)
        case _:
            return escalate(
                record,
                now,
                Reason.UNKNOWN_STATE,
                f"state {show(record.answer.provider_state)} is in none of the lists of profile "
                f"{record.contract.profile.name}; not guessing what it means",
                response=observation.body,
            )


def _pending(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    timing: Timing,
    *,
    treated: bool = False,
) -> Step:
    """Still running: look again later, at the polling URL this answer names (a new
    ``Location`` on every 202 moves it; same-origin and credential rules as ever)."""
    notes = []
    if reading is not None and reading.unlisted:
        notes.append(f"unlisted state {show(reading.state)}: pending by the profile")
    if treated and reading is not None:
        notes.append(f"state {show(reading.state)}: pending by a person's decision")
    reader = polling_kind(record)
    moved: dict[str, JSON] = {}
    try:
        url = reader.next_url(record, observation)
    except UnusablePollingUrl as exc:
        return escalate(record, observation.at, Reason.INTEGRATION_FAILURE, str(exc))
    if url is not None and reader.moved(record, url):
        old = record.submission.status_url or ""
        moved = {"polling_url_moved": {"from": redact_url(old), "to": redact_url(url)}}
        notes.append(f"polling URL moved from {redact_url(old)} to {redact_url(url)}")
        pinned = record.submission.caller_url or record.submission.submit_url or old
        record = record.evolve(
            submission=record.submission.evolve(status_url=url, caller_url=pinned)
        )
    return schedule(record, observation, reading, timing, note="; ".join(notes), extra=moved)
