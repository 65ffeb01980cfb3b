"""Where a staged protocol's final state is, and what it must hold.

Pure functions over the record and one answer (the rules atop ``_controller.py``):
whether the profile states a staged protocol (``submit.final_get``, a
``final-state-via``), what the result is when the status monitor is the final state,
and whether an answer read as the final state must be the resource itself, so that an
empty or absent one is never success. The rules are stated in ``docs/waiting.md``
("final-state-via", "An empty final resource").
"""

from __future__ import annotations

from waitbound._base._json import JSON, show
from waitbound._base._urls import same_url
from waitbound._model._observation import Observation
from waitbound._model._outcome import OutcomeKind
from waitbound._model._record import Record
from waitbound._profile._contract import Reading, is_present
from waitbound._profile._protocol import FinalStateVia
from waitbound._rules._polling_kinds import polling_kind

__all__ = ["empty_resource", "monitor_result", "resource_required", "staged"]


def monitor_result(record: Record, observation: Observation, reading: Reading | None) -> JSON:
    """The result when the status monitor is the final state: under a staged protocol
    (:func:`staged`) the monitor's final body, whole, as azure-core's poller returns it
    (its ``result`` member, when it has one, is inside it); else the profile's
    ``result`` read from it (AIP-151's ``response``)."""
    if staged(record):
        return observation.body
    return reading.result if reading is not None else None


def staged(record: Record) -> bool:
    """Whether the profile (or the caller) says where a staged protocol's final state is:
    ``submit.final_get`` or a ``final-state-via``."""
    contract = record.contract.profile.submit
    return bool(contract.final_get or record.contract.final_state_via or contract.final_state_via)


def resource_required(record: Record) -> bool:
    """Whether the operation's final state is the resource itself, so it must be a
    document: the method's final state is its request URL (``submit.final_get``: at
    Azure PUT and PATCH), ``final-state-via`` is ``original-uri``, or the polling URL is
    the resource (kind ``resource``)."""
    contract = record.contract.profile.submit
    via = record.contract.final_state_via or contract.final_state_via
    by_method = contract.final_get.get((record.submission.submit_method or "").upper())
    return (
        by_method == "request_url"
        or via is FinalStateVia.ORIGINAL_URI
        or polling_kind(record).resource
    )


def _may_be_empty(record: Record, observation: Observation) -> bool:
    """Whether this answer may be an empty final state: a polling URL's own terminal
    answer unless the final state is the resource, and a fetched result only when it is
    a POST's or DELETE's final GET at its first answer's ``Location`` (ARM: an action
    that needs no response answers 200/204 there). Any other fetched result (an
    explicit result URL, a resource's final GET) must hold something."""
    if observation.kind != "result":
        return not resource_required(record)
    if (record.submission.submit_method or "").upper() not in ("POST", "DELETE"):
        return False
    return same_url(record.submission.result_url, record.submission.location_url)


def empty_resource(record: Record, observation: Observation, outcome: OutcomeKind) -> str | None:
    """Why an answer that would be the final state cannot be: it must hold the resource
    or the result (see :func:`_may_be_empty`) and its body is empty or absent (no body,
    ``{}``, ``[]``, ``""``). ``None`` when the answer can be the final state.

    An empty final resource is no evidence of success (azure-core raises on an empty
    original-URI answer):
    the outcome is ``integration_failure``, never ``succeeded`` with a null result.
    """
    if is_present(observation.body) or _may_be_empty(record, observation):
        return None
    code = observation.http_status
    kinds = {"submit": "submission", "result": "result URL"}
    where = kinds.get(observation.kind, polling_kind(record).name)
    what = "no body" if observation.body is None else f"an empty body ({show(observation.body)})"
    if observation.kind == "result" and not resource_required(record):
        return (
            f"the {where} answered HTTP {code} with {what} after the job {outcome.value}: "
            "an empty or absent result is no evidence of success, so it is not reported "
            "as succeeded"
        )
    method = record.submission.submit_method or "operation"
    return (
        f"the {where} answered HTTP {code} ({outcome.value} by the profile) with {what}, "
        f"but the final state of this {method} is the resource itself: an empty or absent "
        "resource is no evidence of success, so it is not reported as succeeded"
    )
