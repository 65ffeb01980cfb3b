"""What a result answer means, and the errors page after it.

Pure functions (see the rules atop ``_controller.py``), returning a :class:`Step`:
:func:`decide_result` reads the answer of the result URL (409/425 not ready, 2xx the
result document) and :func:`decide_errors` keeps the first page of per-item errors.
The HTTP meaning of an answer is stated in ``docs/waiting.md``.
"""

from __future__ import annotations

from typing import Final

from waitbound._base._json import JSON
from waitbound._model._errors_page import errors_page
from waitbound._model._observation import Observation
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._model._record import Record
from waitbound._profile._actions import repeated_key
from waitbound._profile._contract import is_present
from waitbound._rules._answers import Meaning, meaning
from waitbound._rules._doubt import cleared, doubt, foreign_job
from waitbound._rules._final_state import empty_resource
from waitbound._rules._finish import Step, escalate, finish, terminal
from waitbound._rules._next_poll import Timing, schedule
from waitbound._rules._settle import complete
from waitbound._rules._trouble import is_throttled, provider_trouble, throttled

__all__ = ["decide_errors", "decide_result"]


_UNSUCCESSFUL: Final = frozenset({OutcomeKind.FAILED, OutcomeKind.CANCELED, OutcomeKind.EXPIRED})


def decide_result(record: Record, observation: Observation, timing: Timing) -> Step:
    """Decide what a result-endpoint answer means: 409/425 not ready, 2xx the result
    document (the tables in ``_answers.py``)."""
    now = observation.at
    code = observation.http_status
    answer = meaning("result", code, throttled=is_throttled(record, observation, None))
    match answer.meaning:
        case Meaning.TROUBLE:
            return provider_trouble(record, observation, None, timing)
        case Meaning.DENIED:
            return escalate(
                record, now, Reason.AUTHORIZATION_DENIED, f"the result URL answered HTTP {code}"
            )
        case Meaning.THROTTLED:
            return throttled(record, observation, None, timing)
        case Meaning.NOT_READY:
            return schedule(
                record, observation, None, timing, note=f"result not ready (HTTP {code})"
            )
        case Meaning.BODY if observation.body_problem is None:
            document = record.contract.profile.read_result(observation.body)
            if (other := foreign_job(record, document.job_id)) is not None:
                return doubt(
                    record, observation, None, timing,
                    f"the result document names job {other}, not this operation's job "
                    f"{record.submission.job_id}",
                    extra={"job_mismatch": {"expected": record.submission.job_id, "named": other}},
                )  # fmt: skip
            record = cleared(record)
            record = record.evolve(ending=record.ending.evolve(result_fetched_at=now))
            if document.ambiguous is not None:
                detail = repeated_key("result", document.ambiguous)
                return escalate(record, now, Reason.INTEGRATION_FAILURE, detail)
            settled = record.ending.settled_outcome or OutcomeKind.SUCCEEDED
            if empty := empty_resource(record, observation, settled):
                return escalate(record, now, Reason.INTEGRATION_FAILURE, empty)
            usage = document.usage if is_present(document.usage) else record.ending.usage
            if settled in _UNSUCCESSFUL:  # the receipt of a run that ended otherwise
                error = document.output_error if is_present(document.output_error) else None
                error = error or record.ending.error
                return terminal(
                    record, now, settled, result=document.output, error=error,
                    usage=usage, reason=record.ending.settled_reason,
                )  # fmt: skip
            if is_present(document.output_error):
                return terminal(
                    record, now, OutcomeKind.FAILED, error=document.output_error, usage=usage
                )
            return complete(
                record,
                now,
                settled,
                result=document.output,
                error=record.ending.error,
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


def decide_errors(record: Record, observation: Observation) -> Step:
    """Keep the first page of per-item errors (bounded); the outcome stands either way."""
    code = observation.http_status
    if code is not None and 200 <= code < 300 and observation.body_problem is None:
        errors: JSON = errors_page(observation.body)
    else:
        problem = observation.transport_error or observation.body_problem or f"HTTP {code}"
        errors = {"problem": f"the errors URL answered {problem}"}
    record = record.evolve(ending=record.ending.evolve(errors=errors))
    return finish(
        record,
        observation.at,
        record.ending.settled_outcome or OutcomeKind.COMPLETED_WITH_ERRORS,
        None,
    )
