"""Grants buy what they say (issue 33, item 2): ``as_requested`` grants what the agent
proposed with ``request_extension`` (minutes and checks) within the policy's ceilings,
and when the provider states an estimate (an estimated duration, ``expires_at``, a
long hint) the suggested grant is derived from it and says so. Virtual time against a
scripted provider (docs/decisions.md)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

import waitbound
from tests.fakes import Answer, FakeClock, ScriptedProvider
from waitbound import MemoryStore, Operation, Policy, Reason, Record, UsageError, parse_profile
from waitbound._rules._decisions import escalation_message
from waitbound._rules._options import cost, suggested_grant
from waitbound.mcp._tasks import offered

URL = "http://provider.test/status"
TABLE: dict[str, Any] = {
    "state": "status",
    "pending": ["running"],
    "succeeded": ["done"],
    "job_id": "id",
    "progress": "percent",
    "estimated_duration": "eta_s",
    "expires_at": "expires_at",
}
RUNNING: Answer = (200, {"status": "running", "id": "j-1"})
SHORT: dict[str, Any] = {"max_requests": 3, "deadline_s": 60, "max_extension_s": 600}
"""A one-minute wait whose grants may reach ten minutes."""


class Job:
    """One operation on virtual time; the agent may ask for more time while it runs."""

    def __init__(self, *answers: Answer, ask: tuple[float, int] | None = None, **policy: Any):
        self.store = MemoryStore()
        self.clock = FakeClock()
        self.provider = ScriptedProvider(self.clock, {"/status": list(answers)})
        operation = Operation(
            status_url=URL,
            profile=parse_profile(TABLE),
            policy=Policy(**{"base_delay_s": 1.0, "max_delay_s": 4.0, **policy}),
            label="nightly-export",
        )
        waitbound.start(operation, operation_id="op-1", store=self.store, clock=self.clock)
        if ask is not None:
            waitbound.request_extension(
                "op-1", minutes=ask[0], checks=ask[1], why="the export is slow",
                by="agent:mcp", store=self.store, clock=self.clock,
            )  # fmt: skip
        self.resume()

    def resume(self) -> waitbound.Outcome:
        return waitbound.wait(
            operation_id="op-1", store=self.store, client=self.provider.client(),
            clock=self.clock, sleep=self.clock.sleep, rng=random.Random(2),
        )  # fmt: skip

    @property
    def record(self) -> Record:
        record = self.store.get("op-1")
        assert record is not None
        return record

    def decide(self, option: str, **kwargs: Any) -> waitbound.Outcome:
        return waitbound.decide(
            "op-1", option, why="go on", by="ann", store=self.store, clock=self.clock, **kwargs
        )


@pytest.mark.parametrize("spelling", ["as_requested", "as-requested"])
def test_as_requested_grants_the_agents_five_minutes_and_three_checks(spelling: str) -> None:
    """Regression (issue 33): after request_extension (5 minutes, 3 checks) a plain
    extend granted the default (2 minutes, 1 check) and nothing granted the proposal.
    ``as_requested`` (``as-requested`` on a command line) grants exactly 5 minutes from
    the decision and 3 more checks."""
    job = Job(RUNNING, ask=(5, 3), **SHORT)
    assert job.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert "as_requested" in job.record.to_outcome().options
    used = job.record.requests_used
    now = job.clock.now()
    job.decide(spelling)
    after = job.record
    assert after.max_requests == used + 3
    assert after.deadline_at == now + timedelta(minutes=5)
    decided = after.decisions[-1]
    assert decided.option == "as_requested"
    assert decided.detail["grant"] == {"minutes": 5.0, "checks": 3, "requested_by": "agent:mcp"}


def test_a_plain_extend_still_grants_the_default() -> None:
    """The same request, answered with plain ``extend``: the suggested default grant (a
    third of the deadline and of the budget), not the agent's proposal."""
    job = Job(RUNNING, ask=(5, 3), **SHORT)
    used = job.record.requests_used
    now = job.clock.now()
    minutes, checks = suggested_grant(job.record)
    assert (minutes, checks) == (1.0, 1)
    job.decide("extend")
    assert job.record.max_requests == used + checks
    assert job.record.deadline_at == now + timedelta(minutes=minutes)


def test_as_requested_is_offered_only_with_a_proposal_and_takes_no_grant_of_its_own() -> None:
    """Without an agent's proposal there is no ``as_requested``; with one, minutes or
    checks given with it are refused in one line (they would be ignored)."""
    plain = Job(RUNNING, **SHORT)
    assert "as_requested" not in plain.record.to_outcome().options
    with pytest.raises(UsageError, match="is not open"):
        plain.decide("as_requested")
    job = Job(RUNNING, ask=(5, 3), **SHORT)
    with pytest.raises(UsageError, match="minutes and checks do not apply") as info:
        job.decide("as_requested", minutes=1)
    assert "\n" not in str(info.value)


def test_a_proposal_beyond_the_ceiling_is_refused_naming_it() -> None:
    """A proposal the policy's ceilings no longer allow (filed under a wider policy) is
    refused in one line naming the ceiling; nothing changes."""
    job = Job(RUNNING, ask=(5, 3), **SHORT)
    record = job.record
    assert record.decision_request is not None
    wide = replace(record.decision_request, minutes=50.0)
    job.store.save(record.evolve(oversight=record.oversight.evolve(decision_request=wide)), [])
    before = job.record
    with pytest.raises(UsageError, match=r"beyond the ceiling of 10 minutes") as info:
        job.decide("as_requested")
    assert "max_extension_s" in str(info.value)
    assert "\n" not in str(info.value)
    assert job.record == before


def test_the_mcp_elicitation_offers_as_requested() -> None:
    """The MCP decision path (an elicitation's options) offers ``as_requested`` with its
    cost stating the proposal."""
    job = Job(RUNNING, ask=(5, 3), **SHORT)
    found = [o.value for o in offered(job.record, job.clock.now())]
    assert "as_requested" in found
    words = cost(job.record, waitbound.Option("as_requested"))
    assert "as agent:mcp requested: by at least 5 minutes with 3 more checks" in words


# --- the suggested grant from the provider's estimate ---------------------------------


@pytest.mark.parametrize(
    ("body", "headers", "source"),
    [
        ({"eta_s": 540}, {}, "the provider's estimated duration of 9 minutes"),
        ({"expires_at": "2026-01-01T12:09:00Z"}, {}, "the job's own expiry time"),
        ({}, {"Retry-After": "540"}, "the provider's hint (Retry-After header"),
    ],
    ids=["estimated_duration", "expires_at", "hint"],
)
def test_the_suggested_grant_is_derived_from_the_providers_estimate_and_says_so(
    body: dict[str, Any], headers: dict[str, str], source: str
) -> None:
    """Regression (issue 33): the suggested grant was a third of the deadline whatever
    the provider said. A job the provider says ends about 9 minutes after it started,
    stopped early (its budget, its deadline): the suggestion covers the estimate (with a quarter
    more, in whole minutes), the cost says where it came from, and a plain extend
    grants it."""
    answer: Answer = (200, {"status": "running", "id": "j-1", **body}, headers)
    job = Job(answer, max_requests=3, deadline_s=60, max_extension_s=3600)
    record = job.record  # a 540 s hint past a 60 s deadline: stopped at once
    assert record.reason in (Reason.REQUEST_BUDGET_EXHAUSTED, Reason.DEADLINE_EXCEEDED)
    assert record.estimate_from is not None
    assert source in record.estimate_from
    request = record.decision_request
    assert request is not None
    assert record.estimated_end_at is not None
    left_s = (record.estimated_end_at - request.opened_at).total_seconds()
    minutes, _ = suggested_grant(record)
    assert minutes * 60 >= left_s * 1.25
    assert minutes * 60 < left_s * 1.25 + 60
    words = cost(record, waitbound.Option.EXTEND)
    assert f"by at least {minutes:g} minutes" in words
    assert source in words
    now = job.clock.now()
    job.decide("extend")
    assert job.record.deadline_at == now + timedelta(minutes=minutes)


def test_a_short_hint_is_no_estimate() -> None:
    """A hint within the backoff's range (``Retry-After: 1``) says how fast to look, not
    when the job ends: the default grant stands."""
    job = Job((200, {"status": "running"}, {"Retry-After": "1"}), max_requests=3)
    assert job.record.estimated_end_at is None
    assert suggested_grant(job.record) == (3.0, 1)


def test_the_escalation_message_says_what_the_job_is_its_progress_and_estimate() -> None:
    """The inbox card (the escalation message) shows the job's label, its source, its
    progress and the provider's estimate."""
    job = Job((200, {"status": "running", "percent": 40, "eta_s": 540}), max_requests=3)
    message = escalation_message(job.record, job.clock.now())
    lines = message.splitlines()
    assert "Label: nightly-export" in lines
    assert "Source: inline profile, http://provider.test/status" in lines
    assert "Progress: 40" in lines
    estimate = [line for line in lines if line.startswith("Provider estimate: ends by ")]
    assert estimate
    assert "estimated duration of 9 minutes" in estimate[0]
