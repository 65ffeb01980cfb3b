"""A refused or unanswered cancel learns the end (issue 33, item 3): before stopping,
one status look with the cancel's reserved check; a job that already ended gets its
true outcome (a success stays a success, its note saying the cancel came too late);
only a job still running ends ``cancel_not_accepted``. All on virtual time against a
scripted provider (docs/decisions.md, "A cancel the provider does not accept")."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import httpx
import pytest

import waitbound
from tests.fakes import Answer, FakeClock, ScriptedProvider
from waitbound import (
    Grants,
    MemoryStore,
    Operation,
    OutcomeKind,
    Phase,
    Policy,
    Reason,
    Record,
    parse_profile,
    wait,
)

URL = "http://provider.test/status"
RESULT = "http://provider.test/result"
TABLE: dict[str, Any] = {
    "state": "status",
    "pending": ["running"],
    "succeeded": ["done"],
    "failed": ["failed"],
    "canceled": ["canceled"],
    "job_id": "id",
    "cancelable": "can_cancel",
    "result_url": "result_url",
    "cancel": {"url_template": "{status_url}/cancel"},
}
RUNNING: Answer = (200, {"status": "running", "id": "j-9", "can_cancel": True})
DONE: Answer = (200, {"status": "done", "id": "j-9", "result_url": RESULT})
TOO_LATE: Answer = (409, {"error": "job_already_succeeded"})


class Job:
    """One operation waited on until it stopped, its provider scripted."""

    def __init__(self, *answers: Answer, cancel: Answer | Exception, **policy: Any) -> None:
        self.store = MemoryStore()
        self.clock = FakeClock()
        self.provider = ScriptedProvider(
            self.clock,
            {"/status": list(answers), "/status/cancel": [cancel], "/result": [(200, {"n": 3})]},
        )
        wait(
            Operation(
                status_url=URL,
                profile=parse_profile(TABLE),
                policy=Policy(**{"base_delay_s": 1.0, "max_delay_s": 4.0, **policy}),
            ),
            operation_id="op-1",
            store=self.store,
            client=self.provider.client(),
            clock=self.clock,
            sleep=self.clock.sleep,
            rng=random.Random(3),
        )

    @property
    def record(self) -> Record:
        record = self.store.get("op-1")
        assert record is not None
        return record

    def running(self, requests_left: int = 27) -> None:
        """As a worker leaves it between polls: running, *requests_left* more allowed,
        ten minutes left (the plan spent the first wait's budget up to its deadline)."""
        record = self.record
        extra = record.requests_used + requests_left - record.policy.max_requests
        self.store.save(
            record.evolve(
                ending=record.ending.evolve(
                    outcome=None, reason=None, finished_at=None, phase=Phase.WAITING, error=None
                ),
                oversight=record.oversight.evolve(
                    decision_request=None, grants=Grants(requests=extra)
                ),
                schedule=record.schedule.evolve(
                    deadline_at=self.clock.now() + timedelta(minutes=10)
                ),
            ),
            [],
        )

    def cancel(self, *then: Answer) -> waitbound.Outcome:
        """``waitbound cancel`` (the API it calls); *then* replace the status script."""
        if then:
            self.provider.script["/status"] = list(then)
        return waitbound.cancel(
            "op-1", reason="wrong input", requested_by="ann", store=self.store,
            client=self.provider.client(), clock=self.clock, sleep=self.clock.sleep,
            rng=random.Random(3),
        )  # fmt: skip

    def decide_cancel(self, *then: Answer) -> waitbound.Outcome:
        """A person decides ``cancel`` on the stopped operation, then it is waited on."""
        waitbound.decide("op-1", "cancel", why="wrong input", by="ann", store=self.store,
                         clock=self.clock)  # fmt: skip
        if then:
            self.provider.script["/status"] = list(then)
        return wait(operation_id="op-1", store=self.store, client=self.provider.client(),
                    clock=self.clock, sleep=self.clock.sleep, rng=random.Random(3))  # fmt: skip


def test_a_cancel_refused_because_the_job_just_succeeded_ends_succeeded() -> None:
    """Regression (issue 33): the provider answered the cancel 409 because the job had
    just succeeded; it ended escalated (cancel_not_accepted), "last seen null", without
    a look. Now one status look shows the success: outcome succeeded, its result fetched
    once, and its note says the cancel came too late."""
    job = Job(RUNNING, cancel=TOO_LATE, max_requests=30, deadline_s=600)
    job.running()
    polled = job.provider.count("/status")
    outcome = job.cancel(DONE)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert outcome.reason is None
    assert outcome.result == {"n": 3}
    assert job.provider.count("/result") == 1
    assert job.provider.count("/status") == polled + 1
    assert job.provider.count("/status/cancel") == 1
    note = outcome.note or ""
    assert "the cancel requested by ann at" in note
    assert "refused by the provider (HTTP 409)" in note
    assert "came too late" in note
    assert "null" not in note
    assert outcome.as_json()["note"] == note
    finished = [s.event for s in job.store.audit("op-1") if s.event.kind == "finished"]
    assert "came too late" in finished[-1].summary


def test_a_decided_cancel_refused_after_a_budget_stop_learns_the_success() -> None:
    """The same after a person's ``cancel`` decision on an operation that spent its
    budget: the grant's reserved check looks, and the success stays a success."""
    job = Job(RUNNING, cancel=TOO_LATE, max_requests=6, deadline_s=600)
    assert job.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    outcome = job.decide_cancel(DONE, DONE)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert "the cancel decided by ann at" in (outcome.note or "")


def test_a_decided_cancel_of_one_check_carries_the_look_and_the_result_request() -> None:
    """Regression (issue 33): a person decides ``cancel --checks 1``; the provider
    refuses it (409) because the job just succeeded; the look (the grant's check) sees
    the success, and the result is fetched with the request the cancel's reserve
    carries (it ended request_budget_exhausted: no request was left for it)."""
    job = Job(RUNNING, cancel=TOO_LATE, max_requests=6, deadline_s=600)
    assert job.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    polled = job.provider.count("/status")
    waitbound.decide("op-1", "cancel", why="wrong input", by="ann", checks=1,
                     store=job.store, clock=job.clock)  # fmt: skip
    (decision,) = job.record.decisions
    assert decision.detail["grant"] == {"minutes": 3.0, "checks": 1, "action_requests": 2}
    job.provider.script["/status"] = [DONE]
    outcome = wait(operation_id="op-1", store=job.store, client=job.provider.client(),
                   clock=job.clock, sleep=job.clock.sleep, rng=random.Random(3))  # fmt: skip
    assert outcome.outcome is OutcomeKind.SUCCEEDED, outcome.error
    assert outcome.result == {"n": 3}
    assert job.provider.count("/result") == 1
    assert job.provider.count("/status/cancel") == 1
    assert job.provider.count("/status") == polled + 1
    assert "came too late" in (outcome.note or "")


@pytest.mark.parametrize(
    ("then", "outcome_kind"),
    [
        ((200, {"status": "failed", "id": "j-9", "error": {"code": "E"}}), OutcomeKind.FAILED),
        ((200, {"status": "canceled", "id": "j-9"}), OutcomeKind.CANCELED),
    ],
    ids=["failed", "canceled"],
)
def test_a_refused_cancel_of_a_job_that_already_ended_gets_its_own_outcome(
    then: Answer, outcome_kind: OutcomeKind
) -> None:
    """Any end the look shows is the outcome, never cancel_not_accepted."""
    job = Job(RUNNING, cancel=TOO_LATE, max_requests=30, deadline_s=600)
    job.running()
    outcome = job.cancel(then)
    assert outcome.outcome is outcome_kind
    assert "came too late" in (outcome.note or "")


def test_a_cancel_that_times_out_on_a_running_job_ends_cancel_not_accepted() -> None:
    """Regression (issue 33): a cancel that gets no answer, the job still running at the
    one look after it: escalated / cancel_not_accepted, naming what the look showed; the
    look is the only status request."""
    job = Job(RUNNING, cancel=httpx.ReadTimeout("timed out"), max_requests=30, deadline_s=600)
    job.running()
    polled = job.provider.count("/status")
    outcome = job.cancel(RUNNING)
    assert outcome.outcome is OutcomeKind.ESCALATED
    assert outcome.reason is Reason.CANCEL_NOT_ACCEPTED
    assert job.provider.count("/status") == polled + 1
    detail = str(outcome.error)
    assert "got no answer" in detail
    assert 'showed the job still "running"' in detail
    assert "null" not in detail
    assert outcome.note is None


def test_a_look_that_gets_no_answer_ends_cancel_not_accepted() -> None:
    """The look itself failing (a 503) is no news of an end: cancel_not_accepted at once,
    saying so, no second look."""
    job = Job(RUNNING, cancel=(503, None), max_requests=30, deadline_s=600)
    job.running()
    polled = job.provider.count("/status")
    outcome = job.cancel((503, None))
    assert outcome.reason is Reason.CANCEL_NOT_ACCEPTED
    assert job.provider.count("/status") == polled + 1
    assert "got no usable answer (HTTP 503)" in str(outcome.error)


def test_no_request_left_for_the_look_stops_at_once_without_last_seen_null() -> None:
    """With the cancel the last request of the budget, no look can be sent: it stops
    cancel_not_accepted at once, and a job never seen is "never seen", not "null"; a
    refusal means cancel is not offered again until a status answer says cancelable."""
    job = Job((503, None), cancel=TOO_LATE, max_requests=30, deadline_s=600,
              max_transport_failures=30)  # fmt: skip
    job.running(requests_left=1)
    record = job.record
    job.store.save(
        record.evolve(answer=record.answer.evolve(cancelable=True, provider_state=None)), []
    )
    polled = job.provider.count("/status")
    outcome = job.cancel()
    assert outcome.reason is Reason.CANCEL_NOT_ACCEPTED
    assert job.provider.count("/status") == polled
    detail = str(outcome.error)
    assert "no request was left for a status look" in detail
    assert "never seen" in detail
    assert "null" not in detail
    assert "cancel" not in outcome.options
