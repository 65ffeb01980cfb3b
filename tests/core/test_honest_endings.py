"""Outcomes whose words are true of what was seen (issue 20): an empty final resource is
never success, a staged monitor's final body is the result, words after a provider's
success say what is missing, and answers that can never become valid stop at once.

Real loop, virtual time, seeded RNG, scripted transports (no sockets, no sleeps)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.core.harness import PROFILE, run
from tests.core.test_protocol import (
    ACTION,
    ACTION_URL,
    LOC,
    MONITOR,
    RESOURCE,
    SUBMIT,
    Reply,
    drive,
)
from tests.fakes import FakeClock
from waitbound import OutcomeKind, Reason
from waitbound._model._outcome import Outcome
from waitbound._model._record import Phase
from waitbound._profile._protocol import FinalStateVia, UrlKind
from waitbound._rules._controller import Send, plan

RESULT = "http://provider.test/result"
DONE = (200, {"status": "done", "id": "j-9"})
CREATING = {"id": "w1", "properties": {"provisioningState": "Creating"}}
MON = {"id": "op1", "status": "Succeeded"}
NOT_COMPLETE = "NOT known to be complete"


def _words(outcome: Outcome) -> str:
    """Everything the outcome says in words: its message and its detail."""
    detail = outcome.error.get("detail") if isinstance(outcome.error, dict) else ""
    return f"{outcome.message} {detail}"


# --- 1. an empty or absent final resource is never succeeded ------------------------


@pytest.mark.parametrize(
    ("script", "method", "kw"),
    [
        ({RESOURCE: [(201, None), (200, None)]}, "PUT", {}),
        ({RESOURCE: [(204, None)]}, "PUT", {}),
        ({RESOURCE: [(201, CREATING), (200, {})]}, "PATCH", {}),
        ({RESOURCE: [(202, None, {"Location": LOC})], LOC: [(200, None)]}, "PUT", {}),
        ({RESOURCE: [(202, None, {"Location": LOC})], LOC: [(204, None)]}, "PATCH", {}),
        (
            {RESOURCE: [(201, CREATING, {"Azure-AsyncOperation": MONITOR}), (200, None)],
             MONITOR: [(200, MON)]},
            "PUT", {},
        ),
        (
            {RESOURCE: [(201, CREATING, {"Azure-AsyncOperation": MONITOR})],
             MONITOR: [(200, MON | {"resourceLocation": f"{RESOURCE}/out"})],
             f"{RESOURCE}/out": [(200, [])]},
            "PUT", {},
        ),
        (
            {ACTION: [(202, None, {"Azure-AsyncOperation": MONITOR})], MONITOR: [(200, MON)]},
            "POST", {"final_state_via": FinalStateVia.ORIGINAL_URI},
        ),
    ],
    ids=["put-201-empty-then-200-empty", "put-204", "patch-resource-200-{}",
         "put-location-200-empty", "patch-location-204", "put-aao-final-get-empty",
         "put-resource-location-[]", "original-uri-final-empty"],
)  # fmt: skip
def test_an_empty_final_resource_is_never_succeeded(
    script: dict[str, list[Reply]], method: str, kw: dict[str, Any]
) -> None:
    """Wherever the final state must be the resource (the first answer, the original
    URI, a Location URL, a final GET), an empty or absent body is integration_failure,
    never succeeded with a null result."""
    url = ACTION_URL if method == "POST" else SUBMIT
    if "final_state_via" in kw:
        script = {**script, ACTION: [script[ACTION][0], (204, None)]}
    result = drive(script, method=method, url=url, **kw)
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert result.outcome.result is None
    assert "no evidence of success" in result.detail()


def test_an_empty_resource_url_answer_is_not_success_with_a_given_url() -> None:
    """`wait --url-kind resource`: a 200 with no body at the resource is not success."""
    result = drive({RESOURCE: [(200, None)]}, wait_url=SUBMIT, url_kind=UrlKind.RESOURCE)
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE


@pytest.mark.parametrize(
    ("method", "script"),
    [
        ("POST", {ACTION: [(202, None, {"Location": LOC})], LOC: [(200, None)]}),
        ("POST", {ACTION: [(204, None)]}),
        ("DELETE", {RESOURCE: [(202, None, {"Location": LOC})], LOC: [(204, None)]}),
        ("DELETE", {RESOURCE: [(200, None)]}),
    ],
    ids=["post-location-200-empty", "post-204", "delete-location-204", "delete-200-empty"],
)
def test_an_action_or_delete_may_end_with_nothing(
    method: str, script: dict[str, list[Reply]]
) -> None:
    """A POST action or a DELETE has no resource to return: an empty final answer is
    success with a null result (ARM: 200/204 when the action needs no response)."""
    url = ACTION_URL if method == "POST" else SUBMIT
    result = drive(script, method=method, url=url)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result is None


# --- 2. a staged monitor that is the final state is the result, whole -----------------


@pytest.mark.parametrize(
    ("method", "headers", "via"),
    [
        ("POST", {"Azure-AsyncOperation": MONITOR, "Location": LOC},
         FinalStateVia.AZURE_ASYNC_OPERATION),
        ("POST", {"Operation-Location": MONITOR}, FinalStateVia.OPERATION_LOCATION),
        ("POST", {"Operation-Location": MONITOR}, None),
        ("DELETE", {"Operation-Location": MONITOR}, None),
        ("DELETE", {"Azure-AsyncOperation": MONITOR, "Location": LOC}, None),
    ],
    ids=["post-fsv-aao", "post-fsv-ol", "post-ol-no-location", "delete-ol", "delete-aao"],
)  # fmt: skip
def test_the_final_body_of_a_monitor_that_is_the_final_state_is_the_result(
    method: str, headers: dict[str, str], via: FinalStateVia | None
) -> None:
    """When the monitor is the final state (final-state-via, or nothing to fetch by
    method), its final body is the result, whole, as azure-core returns it; never null."""
    url = ACTION_URL if method == "POST" else SUBMIT
    where = ACTION if method == "POST" else RESOURCE
    monitor = MON | {"percentComplete": 100}
    script: dict[str, list[Reply]] = {
        where: [(202, None, headers)], MONITOR: [(200, {"status": "Running"}), (200, monitor)],
        LOC: [(500, None)],
    }  # fmt: skip
    result = drive(script, method=method, url=url, final_state_via=via)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == monitor
    assert result.web.count(LOC) == 0


def test_a_monitor_already_succeeded_in_the_first_answer_is_the_result_whole() -> None:
    """A first answer that is a Succeeded monitor (final-state-via operation-location):
    zero polls, its body the result."""
    first = MON | {"result": {"restarted": True}}
    script: dict[str, list[Reply]] = {ACTION: [(202, first, {"Operation-Location": MONITOR})]}
    result = drive(script, method="POST", url=ACTION_URL,
                   final_state_via=FinalStateVia.OPERATION_LOCATION)  # fmt: skip
    assert result.outcome.result == first
    assert len(result.web.sent) == 1


def test_a_plain_status_monitor_still_reads_its_result_expression() -> None:
    """Without a staged protocol (no final_get, no final-state-via) the profile's
    `result` expression reads the monitor, as before (AIP-151's `response`)."""
    result = run({"/status": [(200, {"status": "done", "output": {"rows": 3}})]})
    assert result.outcome.result == {"rows": 3}


# --- 3. the words after a provider's success -------------------------------------------


def test_a_budget_spent_after_success_says_succeeded_at_the_provider() -> None:
    """Regression: the budget runs out after the status said done, before the one result
    request: the detail and the message say the job succeeded at the provider and its
    result was not fetched, never "without a terminal answer" or "NOT complete"."""
    result = run({"/status": [DONE]}, result_url=RESULT, max_requests=1)
    outcome = result.outcome
    assert outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert (outcome.provider_outcome, outcome.unfetched) == (OutcomeKind.SUCCEEDED, "result")
    words = _words(outcome)
    assert "Job j-9 SUCCEEDED at the provider" in outcome.message
    assert "result is NOT available" in outcome.message
    assert "succeeded at the provider" in words
    assert "result was not fetched" in words
    assert NOT_COMPLETE not in words
    assert "without a terminal answer" not in words
    assert outcome.as_json()["provider_outcome"] == "succeeded"
    assert result.provider.count("/result") == 0


def test_result_unconfirmed_says_succeeded_at_the_provider() -> None:
    """Regression: a result answer lost to our own stop: result_unconfirmed, and the
    message says the job succeeded at the provider (its result is what is missing)."""
    clock = FakeClock()
    result = run({"/status": [DONE]}, result_url=RESULT, max_requests=5)
    record = result.store.get(result.outcome.operation_id)
    assert record is not None
    lost = record.evolve(
        ending=record.ending.evolve(
            phase=Phase.FETCHING_RESULT,
            settled_outcome=OutcomeKind.SUCCEEDED,
            outcome=None,
            reason=None,
        ),
        lease=record.lease.evolve(in_flight="result"),
        submission=record.submission.evolve(result_url=RESULT),
    )
    decision = plan(lost, clock.now() + timedelta(days=1), owner="w2")
    assert not isinstance(decision, Send)
    outcome = decision.transition.record.to_outcome()  # type: ignore[union-attr]
    assert outcome.reason is Reason.RESULT_UNCONFIRMED
    assert "SUCCEEDED at the provider" in outcome.message
    assert NOT_COMPLETE not in _words(outcome)


def test_result_fetch_failures_say_the_result_could_not_be_fetched() -> None:
    """5xx from the result URL past the transport budget: provider_failure, and the
    detail says the result could not be fetched, not that the state could not be learned."""
    result = run(
        {"/status": [DONE], "/result": [(500, None)]}, result_url=RESULT,
        max_transport_failures=1, base_delay_s=1,
    )  # fmt: skip
    outcome = result.outcome
    assert outcome.reason is Reason.PROVIDER_FAILURE
    words = _words(outcome)
    assert "its result could not be fetched" in words
    assert "state could not be learned" not in words
    assert NOT_COMPLETE not in words


def test_a_deadline_before_the_result_is_ready_says_succeeded_at_the_provider() -> None:
    """The result URL answers 409 until the deadline: contradiction (as before), and the
    message says the job succeeded at the provider."""
    result = run(
        {"/status": [DONE], "/result": [(409, None)]}, result_url=RESULT, deadline_s=10,
        base_delay_s=1,
    )  # fmt: skip
    assert result.outcome.reason is Reason.CONTRADICTION
    assert "SUCCEEDED at the provider" in result.outcome.message


def test_a_budget_spent_before_a_partial_successs_errors_page_says_so() -> None:
    """A partial success whose errors page cannot be fetched within the budget: the
    detail says the job completed with errors and its errors page was not fetched."""
    partial = (200, {"status": "partial", "output": 1, "errors_url": "/errors"})
    result = run({"/status": [partial]}, profile=PROFILE | {"errors_url": "errors_url"},
                 max_requests=1)  # fmt: skip
    outcome = result.outcome
    assert outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert outcome.unfetched == "errors page"
    assert "FINISHED WITH ERRORS at the provider" in outcome.message
    assert "errors page was not fetched" in _words(outcome)


def test_still_fetching_the_result_is_not_called_started_and_not_complete() -> None:
    """While the result is being fetched (outcome null), the message says the job
    succeeded at the provider and its result is NOT available yet."""
    outcome = Outcome(
        operation_id="op", outcome=None, job_id="j-9",
        provider_outcome=OutcomeKind.SUCCEEDED, unfetched="result",
    )  # fmt: skip
    assert outcome.message.startswith("Job j-9 SUCCEEDED at the provider")
    assert "NOT available yet" in outcome.message
    assert "STARTED" not in outcome.message


# --- 4. answers that can never become valid stop at once ------------------------------


def test_a_status_body_without_a_state_stops_within_the_grace() -> None:
    """A 200 monitor body with no status field before the job was ever seen is "not
    visible yet" within the not-found grace (issue 33: eventual consistency, as a 404),
    then integration_failure, saying it can never become a valid status; never the 9
    polls a longer wait would spend."""
    result = run({"/status": [(200, {"id": "op1"})]}, not_found_grace_s=10, base_delay_s=1)
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert 1 < result.provider.count("/status") <= 6
    assert "can never become a valid status" in _words(result.outcome)


def test_a_status_body_without_a_state_after_the_job_was_seen_stops_at_once() -> None:
    result = run({"/status": [(200, {"status": "running"}), (200, {"id": "op1"})]})
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert result.provider.count("/status") == 2


def test_a_404_before_the_job_is_seen_keeps_its_grace() -> None:
    """ "Not visible yet" is transient: a 404 first, then the job, succeeds."""
    result = run({"/status": [(404, None), (200, {"status": "done", "output": 1})]},
                 base_delay_s=1)  # fmt: skip
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED


@pytest.mark.parametrize("value", ["not a url", "http://", "https://", "<x>", "a\tb", "ops|1"])
@pytest.mark.parametrize("header", ["Azure-AsyncOperation", "Operation-Location", "Location"])
def test_a_polling_header_that_is_not_a_url_stops_with_the_first_answer(
    header: str, value: str
) -> None:
    """Regression: a polling header that is no URI reference, or a scheme without a
    host, is integration_failure with the first answer: nothing is polled."""
    result = drive({ACTION: [(202, None, {header: value})]}, method="POST", url=ACTION_URL)
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert len(result.web.sent) == 1


def test_a_polling_url_moved_to_a_value_that_is_not_a_url_stops_at_that_answer() -> None:
    """A Location URL whose 202 names a new Location that is not a URI reference stops
    there (integration_failure), not after the not-found grace."""
    result = drive(
        {ACTION: [(202, None, {"Location": LOC})], LOC: [(202, None, {"Location": "x y"})]},
        method="POST", url=ACTION_URL,
    )  # fmt: skip
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert result.web.count(LOC) == 1


def test_a_relative_polling_url_is_still_resolved() -> None:
    """A relative reference (RFC 3986 §4.2) is a URL: it resolves against the request."""
    result = drive(
        {ACTION: [(202, None, {"Operation-Location": "/operations/op1"})],
         MONITOR: [(200, MON)]},
        method="POST", url=ACTION_URL,
    )  # fmt: skip
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.web.count(MONITOR) == 1


def test_a_deadline_before_a_partial_successs_errors_page_ends_completed_with_errors() -> None:
    """The deadline passes with the errors page still to fetch: a finished job is never
    timed out; the outcome is the partial success, `errors` saying the page was not
    fetched."""
    partial = (200, {"status": "partial", "output": 1, "errors_url": "/errors"})
    stopped = run({"/status": [partial]}, profile=PROFILE | {"errors_url": "errors_url"},
                  max_requests=1)  # fmt: skip
    record = stopped.store.get(stopped.outcome.operation_id)
    assert record is not None
    due = record.evolve(
        ending=record.ending.evolve(
            phase=Phase.FETCHING_ERRORS, outcome=None, reason=None, error=None
        ),
        oversight=record.oversight.evolve(decision_request=None),
    )
    decision = plan(due, record.deadline_at + timedelta(seconds=1), owner="w")
    assert not isinstance(decision, Send)
    outcome = decision.transition.record.to_outcome()  # type: ignore[union-attr]
    assert outcome.outcome is OutcomeKind.COMPLETED_WITH_ERRORS
    assert outcome.errors == {"problem": "the errors page was not fetched before the deadline"}
    assert outcome.result == 1
    assert "may still run" not in _words(outcome)
    assert NOT_COMPLETE not in _words(outcome)


def test_a_lost_result_answer_says_succeeded_even_on_a_record_without_its_settled_outcome() -> None:
    """A record in the result phase written without `settled_outcome` (an older record):
    the phase alone says the provider's success was seen; result_unconfirmed's message
    says SUCCEEDED at the provider."""
    result = run({"/status": [DONE]}, result_url=RESULT, max_requests=5)
    record = result.store.get(result.outcome.operation_id)
    assert record is not None
    lost = record.evolve(
        ending=record.ending.evolve(
            phase=Phase.FETCHING_RESULT, settled_outcome=None, outcome=None, reason=None
        ),
        lease=record.lease.evolve(in_flight="result"),
        submission=record.submission.evolve(result_url=RESULT),
    )
    decision = plan(lost, FakeClock().now() + timedelta(days=1), owner="w2")
    assert not isinstance(decision, Send)
    outcome = decision.transition.record.to_outcome()  # type: ignore[union-attr]
    assert (outcome.reason, outcome.provider_outcome) == (
        Reason.RESULT_UNCONFIRMED,
        OutcomeKind.SUCCEEDED,
    )
    assert NOT_COMPLETE not in _words(outcome)


@pytest.mark.parametrize("body", [None, {}, ""], ids=["no-body", "{}", "empty-string"])
def test_an_empty_answer_from_a_result_url_is_never_succeeded(body: object) -> None:
    """Regression (any method, any profile): the status says done and the result URL
    answers 200 with nothing: integration_failure, and the words say the job succeeded
    at the provider while its result is NOT available."""
    result = run({"/status": [DONE], "/result": [(200, body)]}, result_url=RESULT)
    outcome = result.outcome
    assert outcome.reason is Reason.INTEGRATION_FAILURE
    assert outcome.result is None
    assert "no evidence of success" in _words(outcome)
    assert "SUCCEEDED at the provider" in outcome.message


def test_an_actions_final_get_at_its_location_may_be_empty() -> None:
    """ARM: after the monitor's success a POST's final GET at its Location may answer
    204 (the action needs no response): succeeded with a null result."""
    script: dict[str, list[Reply]] = {
        ACTION: [(202, None, {"Azure-AsyncOperation": MONITOR, "Location": LOC})],
        MONITOR: [(200, MON)],
        LOC: [(204, None)],
    }
    result = drive(script, method="POST", url=ACTION_URL)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result is None
    assert result.web.count(LOC) == 1
