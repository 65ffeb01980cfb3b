"""Deciding what the provider's answer to a cancel means.

A pure function in the manner of ``_decide.py`` (see the rules atop ``_controller.py``):
the record with the answer's bookkeeping applied and the observation in, a
:data:`~waitbound._finish.Step` out. The rules are stated in ``docs/waiting.md``
("Canceling") and ``docs/decisions.md``.
"""

from __future__ import annotations

from waitbound._finish import Step, escalate, timed_out
from waitbound._json import show
from waitbound._observation import Observation
from waitbound._outcome import Reason
from waitbound._record import Record

__all__ = ["accepted_cancel", "decide_cancel"]


def decide_cancel(record: Record, observation: Observation) -> Step:
    """Record the provider's answer to a cancel.

    Accepted (2xx): the status endpoint, asked at once, decides the outcome. Not
    accepted (any other answer: a refusal such as 409, a throttle, a 5xx, no answer):
    waiting stops at once with ``escalated`` / ``cancel_not_accepted``, the job's last
    state kept (it may still run); a refusal (a 4xx but 429) also records that the job
    is not cancelable now, so ``cancel`` is offered again only once a status answer
    says it is. The cancel of ``--cancel-on-deadline``, sent at the deadline, ends
    ``timed_out`` either way, its answer stated.
    """
    now = observation.at
    code = observation.http_status
    answer = observation.transport_error or f"HTTP {code}"
    accepted = code is not None and 200 <= code < 300
    asker = _cancel_asker(record)
    record = record.evolve(cancel_due=False)
    if now >= record.stop_at:
        verdict = "accepted" if accepted else "not accepted"
        return timed_out(record, now, f"; cancel requested at the deadline ({answer}): {verdict}")
    if accepted:
        record = record.evolve(
            next_poll_at=now, delay_source=None, attempt=0, cancel_accepted_at=now
        )
        summary = f"cancel accepted ({answer}); the status endpoint will tell how the job ends"
        return record, "cancel_answered", summary, {"http_status": code, "accepted": True}
    refused = code is not None and 400 <= code < 500 and code != 429
    if refused:
        record = record.evolve(cancelable=False)
        what = f"was refused by the provider (HTTP {code})"
    elif code is None:
        what = f"got no answer ({answer}): whether the provider received it is not known"
    else:
        what = f"was not accepted (HTTP {code})"
    detail = (
        f"{asker} {what}; waiting stopped at once. The job was last seen "
        f"{show(record.provider_state)} and may still run"
    )
    return escalate(record, now, Reason.CANCEL_NOT_ACCEPTED, detail, response=observation.body)


def _cancel_asker(record: Record) -> str:
    """Whose cancel this was, in words: "the cancel decided by ann at …" (a person's
    decision), "… requested by …" (``waitbound cancel`` of a running operation)."""
    last = record.decisions[-1] if record.decisions else None
    at = record.cancel_requested_at
    if record.cancel_requested_by is None or at is None:
        return "the cancel"
    how = (
        "decided" if last is not None and last.option == "cancel" and last.at == at else "requested"
    )
    return f"the cancel {how} by {record.cancel_requested_by} at {at.isoformat()}"


def accepted_cancel(record: Record) -> str | None:
    """What a stop without a terminal answer must also say when the provider accepted
    a cancel (``cancel_accepted_at``) and no answer since said how the job ended: "the
    cancel requested by ana at … was accepted by the provider at …, but how the job
    ended is not known"; ``None`` otherwise."""
    at = record.cancel_accepted_at
    if at is None or record.ended_seen_at is not None:  # a terminal answer was seen
        return None
    return (
        f"{_cancel_asker(record)} was accepted by the provider at {at.isoformat()}, but "
        "how the job ended is not known"
    )
