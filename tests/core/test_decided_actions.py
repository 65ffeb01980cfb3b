"""Decisions that resume an operation for an action (a cancel, a result fetched again):
the action's own requests come with the grant, the action is carried out or the
outcome says why not, a cancel the provider does not accept stops at once, the options
and ``waitbound cancel`` follow one rule, and a grant has a minimum. All on virtual
time against a scripted provider (docs/decisions.md)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import waitbound
from tests.fakes import Answer, FakeClock, ScriptedProvider, work_virtually
from tests.hypothesis_profiles import examples
from waitbound import (
    Grants,
    MemoryStore,
    Operation,
    OutcomeKind,
    Phase,
    Policy,
    Reason,
    Record,
    UsageError,
    parse_profile,
    wait,
)
from waitbound._engine._operation import request_cancel
from waitbound._rules._controller import Finish, plan
from waitbound._rules._options import Option, cancel_refusal, open_request, options
from waitbound.stores import Store
from waitbound.stores.sqlite import SQLiteStore

URL = "http://provider.test/status"
SEED = 5
TABLE: dict[str, Any] = {
    "state": "status",
    "pending": ["running"],
    "succeeded": ["done"],
    "failed": ["failed"],
    "canceled": ["canceled"],
    "job_id": "id",
    "cancelable": "can_cancel",
    "cancel": {"url_template": "{status_url}/cancel"},
}
CANCELABLE: Answer = (200, {"status": "running", "id": "j-9", "can_cancel": True})
CANCELED: Answer = (200, {"status": "canceled", "id": "j-9"})


class Op:
    """One stored operation on virtual time, and the scripted provider it talks to."""

    def __init__(self, store: Store, *answers: Answer, cancel: Answer = (202, {}), **policy: Any):
        self.store = store
        self.clock = FakeClock()
        self.provider = ScriptedProvider(
            self.clock, {"/status": list(answers), "/status/cancel": [cancel]}
        )
        self.outcome = wait(
            Operation(
                status_url=URL,
                profile=parse_profile(TABLE),
                policy=Policy(**{"base_delay_s": 1.0, "max_delay_s": 4.0, **policy}),
            ),
            operation_id="op-1",
            store=store,
            client=self.provider.client(),
            clock=self.clock,
            sleep=self.clock.sleep,
            rng=random.Random(SEED),
        )

    @property
    def record(self) -> Record:
        record = self.store.get("op-1")
        assert record is not None
        return record

    def decide(self, option: str, **kwargs: Any) -> waitbound.Outcome:
        kwargs.setdefault("why", "wrong input file")
        kwargs.setdefault("by", "ann")
        return waitbound.decide("op-1", option, store=self.store, clock=self.clock, **kwargs)

    def resume(self, *answers: Answer) -> waitbound.Outcome:
        """Continue under ``wait(operation_id=…)``; *answers* replace the status script."""
        if answers:
            self.provider.script["/status"] = list(answers)
        return wait(
            operation_id="op-1",
            store=self.store,
            client=self.provider.client(),
            clock=self.clock,
            sleep=self.clock.sleep,
            rng=random.Random(SEED),
        )

    def cancel(self) -> waitbound.Outcome:
        """``waitbound cancel`` (the API it calls), then wait for how it ends."""
        return waitbound.cancel(
            "op-1",
            reason="wrong input file",
            requested_by="ann",
            store=self.store,
            client=self.provider.client(),
            clock=self.clock,
            sleep=self.clock.sleep,
            rng=random.Random(SEED),
        )


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    opened = SQLiteStore(tmp_path / "waitbound.db")
    try:
        yield opened
    finally:
        opened.close()


# --- a decided cancel carries the requests it needs ---------------------------------


def test_a_decided_cancel_with_the_default_grant_of_one_check_ends_canceled(store: Store) -> None:
    """Regression (issue 20): budget spent, the default grant is one check; deciding
    cancel sends the cancel AND the status check after it (the cancel is not paid from
    the check), and the provider's canceled makes the outcome canceled."""
    op = Op(store, CANCELABLE, max_requests=3)
    assert op.outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    op.decide("cancel")
    assert op.record.max_requests == 3 + 1 + 1  # the cancel request + the one check
    outcome = op.resume(CANCELED)
    assert outcome.outcome is OutcomeKind.CANCELED
    assert op.provider.count("/status/cancel") == 1
    assert op.provider.count("/status") == 3 + 1
    (decision,) = op.record.decisions
    assert decision.detail["grant"] == {"minutes": 3.0, "checks": 1, "action_requests": 1}


def test_a_cancel_grant_of_k_checks_gives_k_status_checks_after_the_cancel() -> None:
    """--checks K with cancel: the cancel, then up to K status requests; a job still
    running after them stops request_budget_exhausted saying the budget was used."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3)
    op.decide("cancel", minutes=1, checks=2)
    outcome = op.resume(CANCELABLE)
    assert outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert op.provider.count("/status/cancel") == 1
    assert op.provider.count("/status") == 3 + 2


def test_fetch_result_again_carries_its_result_request_on_top_of_the_checks() -> None:
    """fetch_result_again's grant: the result request plus the checks granted."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3)
    record = op.record.evolve(ending=op.record.ending.evolve(reason=Reason.RESULT_UNCONFIRMED))
    record = open_request(
        record.evolve(oversight=record.oversight.evolve(decision_request=None)), op.clock.now()
    )
    op.store.save(record, [])
    op.decide("fetch_result_again", minutes=1, checks=2)
    assert op.record.max_requests == 3 + 1 + 2


# --- a decided action is carried out, or the outcome says why not --------------------


def test_a_decided_cancel_whose_window_passed_says_it_was_not_sent(store: Store) -> None:
    """Regression (issue 20): nobody resumed the operation within the cancel's grant:
    no cancel is sent, and the timed_out outcome names the cancel, who decided it,
    when, and why it was not sent; cancel is open again for a new decision."""
    op = Op(store, CANCELABLE, max_requests=3, deadline_s=60)
    op.decide("cancel")
    decided_at = op.clock.now()
    op.clock.advance(120)
    outcome = op.resume()
    assert outcome.outcome is OutcomeKind.TIMED_OUT
    assert op.provider.count("/status/cancel") == 0
    detail = str(outcome.error)
    assert (
        f"the cancel decided by ann at {decided_at.isoformat()} was not sent: the deadline "
        "passed before any wait or worker sent a request for it"
    ) in detail
    assert "cancel" in outcome.options
    assert not op.record.cancel_due or op.record.is_finished


def test_an_extension_whose_window_passed_says_it_sent_no_request() -> None:
    """The same for any resuming decision: an extend nobody acted on within its window
    is named in the outcome, not dropped in silence."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3, deadline_s=60)
    op.decide("extend", minutes=1, checks=2)
    op.clock.advance(61)
    outcome = op.resume()
    assert outcome.outcome is OutcomeKind.TIMED_OUT
    assert "the extend decided by ann at " in str(outcome.error)
    assert "sent no request" in str(outcome.error)


def test_an_extension_that_sent_requests_is_not_called_undone() -> None:
    """An extend that was acted on and then ran out is an ordinary stop."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3, deadline_s=60)
    op.decide("extend", minutes=1, checks=2)
    outcome = op.resume()
    assert outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert "decided by" not in str(outcome.error)


def test_a_requested_cancel_with_no_request_left_says_it_was_not_sent() -> None:
    """A running operation whose cancel is due but whose budget is spent (another
    process marked it due while the last request was out): the stop says so."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3)
    now = op.clock.now()
    running = op.record.evolve(
        ending=op.record.ending.evolve(
            outcome=None, reason=None, finished_at=None, phase=Phase.WAITING
        ),
        oversight=op.record.oversight.evolve(
            decision_request=None,
            cancel_due=True,
            cancel_requested_at=now,
            cancel_requested_by="mcp:bot",
        ),
    )
    step = plan(running, now, owner="worker-1")
    assert isinstance(step, Finish)
    assert step.transition.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    detail = str(step.transition.record.error)
    assert f"the cancel requested by mcp:bot at {now.isoformat()} was not sent" in detail
    assert "no request was left" in detail


# --- waitbound cancel and the cancel option: one rule ---------------------------------


def test_waitbound_cancel_cancels_a_timed_out_operation_that_is_cancelable(store: Store) -> None:
    """Regression (issue 20): a timed_out job may still run; its options list cancel,
    so waitbound cancel accepts it: a cancel decision with the default grant, sent and
    followed to canceled."""
    op = Op(store, CANCELABLE, deadline_s=5, base_delay_s=2, max_delay_s=2)
    assert op.outcome.outcome is OutcomeKind.TIMED_OUT
    assert "cancel" in op.outcome.options
    op.provider.script["/status"] = [CANCELED]
    outcome = op.cancel()
    assert outcome.outcome is OutcomeKind.CANCELED
    assert op.provider.count("/status/cancel") == 1
    decision = op.record.decisions[-1]
    assert (decision.option, decision.by, decision.why) == ("cancel", "ann", "wrong input file")


def _case(
    outcome: OutcomeKind | None, reason: Reason | None, cancelable: bool, grants_left: bool
) -> Record:
    """A record in *outcome*/*reason* with an open decision request where one opens."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=1)
    record = op.record.evolve(
        ending=op.record.ending.evolve(outcome=outcome, reason=reason),
        answer=op.record.answer.evolve(cancelable=cancelable),
        oversight=op.record.oversight.evolve(
            decision_request=None, grants=Grants() if grants_left else Grants(extensions=3)
        ),
    )
    if outcome is None:
        record = record.evolve(ending=record.ending.evolve(finished_at=None, phase=Phase.WAITING))
        return open_request(record, op.clock.now(), requested_by="agent:x", minutes=1, checks=1)
    if outcome in (OutcomeKind.TIMED_OUT, OutcomeKind.ESCALATED):
        return open_request(record, op.clock.now())
    return record


_CASES = [
    (outcome, reason, cancelable, grants_left)
    for outcome, reason, cancelable, grants_left in itertools.product(
        [None, *OutcomeKind], [None, *Reason], [True, False], [True, False]
    )
    if (outcome is None) == (reason is None) or outcome in (OutcomeKind.CANCELED,)
]


@pytest.mark.parametrize(("outcome", "reason", "cancelable", "grants_left"), _CASES)
def test_cancel_is_offered_exactly_where_waitbound_cancel_accepts_it(
    outcome: OutcomeKind | None, reason: Reason | None, cancelable: bool, grants_left: bool
) -> None:
    """For every outcome and reason (cancelable or not, grants left or not): cancel is
    in the options if and only if waitbound cancel accepts the operation."""
    record = _case(outcome, reason, cancelable, grants_left)
    store, clock = MemoryStore(), FakeClock()
    store.create(record, [])
    offered = Option.CANCEL in options(record, clock.now())
    refusal = ""
    try:
        request_cancel(store, clock, record.operation_id, reason="r", requested_by="ann")
    except UsageError as refused:
        refusal = str(refused)
    accepted = not refusal
    assert "\n" not in refusal
    if record.decision_request is not None and (record.is_finished or grants_left):
        assert offered == accepted  # a running job's own cancel needs no grant
    assert accepted == (cancel_refusal(record, clock.now()) is None)


# --- a cancel the provider does not accept stops at once -------------------------------


@pytest.mark.parametrize(
    ("answer", "words", "offered_again"),
    [
        ((409, {"error": "job_not_cancelable"}), "was refused by the provider (HTTP 409)", True),
        ((400, None), "was refused by the provider (HTTP 400)", True),
        ((503, None), "was not accepted (HTTP 503)", True),
        (httpx.ConnectError("refused"), "got no answer", True),
    ],
    ids=["409", "400", "503", "no-answer"],
)
def test_a_cancel_the_provider_does_not_accept_stops_the_wait_at_once_saying_so(
    answer: Answer, words: str, offered_again: bool
) -> None:
    """Regression (issue 20, issue 33): waitbound cancel of a running job the provider
    will not cancel: no polling on until the budget is spent, only the one status look
    that tells whether the job already ended; still running, the outcome is escalated /
    cancel_not_accepted, says whose cancel and what was answered, and keeps the job's
    last state. After a refusal cancel is not offered until a status says cancelable
    (here the look's answer says so)."""
    op = Op(MemoryStore(), CANCELABLE, cancel=answer, max_requests=30, deadline_s=600)
    op.store.save(  # still running: as a worker would leave it between polls
        op.record.evolve(
            ending=op.record.ending.evolve(
                outcome=None, reason=None, finished_at=None, phase=Phase.WAITING
            ),
            oversight=op.record.oversight.evolve(decision_request=None, grants=Grants(requests=27)),
        ),
        [],
    )
    polled = op.provider.count("/status")
    started = op.clock.now()
    outcome = op.cancel()
    assert outcome.outcome is OutcomeKind.ESCALATED
    assert outcome.reason is Reason.CANCEL_NOT_ACCEPTED
    assert outcome.provider_state == "running"
    assert op.provider.count("/status") == polled + 1  # one look, then stopped
    assert op.clock.now() - started < timedelta(seconds=1)
    detail = str(outcome.error)
    assert "the cancel requested by ann at" in detail
    assert words in detail
    assert ("cancel" in outcome.options) is offered_again
    assert "extend" in outcome.options


def test_a_decided_cancel_the_provider_refuses_says_so() -> None:
    """The same after a person's decision: the outcome names the decision."""
    op = Op(MemoryStore(), CANCELABLE, cancel=(409, None), max_requests=2)
    op.decide("cancel")
    outcome = op.resume()
    assert outcome.reason is Reason.CANCEL_NOT_ACCEPTED
    assert "the cancel decided by ann at" in str(outcome.error)
    assert op.provider.count("/status") == 3  # the one look after the refusal


# --- grants have a minimum ---------------------------------------------------------------


@pytest.mark.parametrize("minutes", [1e-12, 1e-320, 0.01, 5e-324])
def test_a_grant_below_one_second_is_refused_in_one_line(minutes: float) -> None:
    """Regression (issue 20): minutes 1e-12 used one of max_extensions and gave nothing;
    below the 1-second minimum a grant is refused and nothing changes."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3)
    before = op.record
    with pytest.raises(UsageError, match="below the minimum of 1 second for one grant") as info:
        op.decide("extend", minutes=minutes, checks=1)
    assert "\n" not in str(info.value)
    assert op.record == before


def test_an_agents_proposal_below_the_minimum_is_refused() -> None:
    """The agent's request for more time follows the same minimum."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3)
    with pytest.raises(UsageError, match="below the minimum"):
        waitbound.request_extension(
            "op-1", minutes=1e-12, checks=1, why="w", by="agent:x", store=op.store, clock=op.clock
        )


def test_a_grant_of_one_second_is_accepted() -> None:
    """The minimum itself is a grant."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3)
    assert op.decide("extend", minutes=1 / 60, checks=1).outcome is None


# --- every option states its cost -------------------------------------------------------


def test_cancel_states_its_cost_like_every_other_option() -> None:
    """Regression (issue 20): cancel's entry names the cancel request and the checks and
    time after it, in option_costs, escalations and the escalation message."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3)
    costs = dict(waitbound.option_costs(op.record))
    assert costs["cancel"] == (
        "cancel at provider: 1 cancel request plus 1 more check within at least 3 minutes"
    )
    (listed,) = waitbound.escalations(store=op.store, clock=op.clock)
    assert dict(listed.options)["cancel"] == costs["cancel"]
    assert costs["cancel"] in listed.message


def test_waitbound_cancel_of_a_stopped_operation_past_its_decision_deadline_is_refused() -> None:
    """The decision request is overdue: waitbound cancel closes it as decision_timeout
    (as any decision would) and refuses in one line; nothing is sent."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3, decision_timeout_s=3600)
    op.clock.advance(3600)
    with pytest.raises(UsageError, match="closed as decision_timeout") as info:
        op.cancel()
    assert "\n" not in str(info.value)
    assert op.record.reason is Reason.DECISION_TIMEOUT
    assert op.provider.count("/status/cancel") == 0


def test_a_worker_carries_out_a_decided_cancel() -> None:
    """Whoever drives the operation carries the decision out: a worker sends the cancel
    a person decided, then the status check, and ends canceled (virtual time that moves
    only when the worker is idle)."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/status": [CANCELABLE], "/status/cancel": [(202, {})]})
    store = MemoryStore()
    waitbound.start(
        Operation(status_url=URL, profile=parse_profile(TABLE), policy=Policy(max_requests=1)),
        operation_id="op-1",
        store=store,
        clock=clock,
    )
    settings = waitbound.WorkerSettings(until_idle=True, lease_s=30, idle_s=0.01)
    work_virtually(store, clock, provider, settings=settings)
    stopped = store.get("op-1")
    assert stopped is not None
    assert stopped.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    waitbound.decide("op-1", "cancel", why="wrong input", by="ann", store=store, clock=clock)
    provider.script["/status"] = [CANCELED]
    work_virtually(store, clock, provider, settings=settings)
    done = store.get("op-1")
    assert done is not None
    assert done.outcome is OutcomeKind.CANCELED
    assert provider.count("/status/cancel") == 1
    assert provider.count("/status") == 2


def test_an_agents_cancel_of_a_stopped_operation_is_refused_a_person_decides() -> None:
    """The MCP tool's cancel (not by a person) of a stopped, cancelable operation: it
    would be a decision, and an agent never decides; refused, nothing changed."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3)
    before = op.record
    with pytest.raises(UsageError, match="a decision a person makes"):
        request_cancel(
            op.store, op.clock, "op-1", reason="r", requested_by="agent", by_a_person=False
        )
    assert op.record == before


def test_fetch_result_again_whose_window_passed_stays_result_unconfirmed() -> None:
    """A fetch_result_again nobody acted on in time: the result was never asked for,
    so the stop is result_unconfirmed again (never "the result endpoint was not
    ready"), saying the decision sent no request and the job succeeded."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=3, deadline_s=60)
    record = op.record.evolve(
        ending=op.record.ending.evolve(
            reason=Reason.RESULT_UNCONFIRMED,
            stopped_phase=Phase.FETCHING_RESULT,
            settled_outcome=OutcomeKind.SUCCEEDED,
        ),
        submission=op.record.submission.evolve(result_url="http://provider.test/result"),
        answer=op.record.answer.evolve(provider_state="done"),
        oversight=op.record.oversight.evolve(decision_request=None),
    )
    op.store.save(open_request(record, op.clock.now()), [])
    op.decide("fetch_result_again", minutes=1, checks=1)
    op.clock.advance(61)
    outcome = op.resume()
    assert outcome.reason is Reason.RESULT_UNCONFIRMED
    detail = str(outcome.error)
    assert "the fetch_result_again decided by ann at" in detail
    assert "sent no request" in detail
    assert "not ready" not in detail
    assert "fetch_result_again" in outcome.options


# --- the property: a decided cancel is carried out or said, within its grant ----------

_STATUS = st.sampled_from(
    [
        CANCELABLE,
        CANCELED,
        (200, {"status": "running", "id": "j-9", "can_cancel": False}),
        (503, None),
    ]
)
_CANCEL_ANSWERS = st.sampled_from([(202, {}), (409, {"error": "conflict"}), (503, None)])
_STEPS = st.tuples(
    st.sampled_from(["cancel", "cancel", "extend", "abandon"]),
    st.sampled_from([0.5, 1.0, 2.0]),  # minutes
    st.integers(1, 3),  # checks
    st.sampled_from([0.0, 3.0, 150.0]),  # seconds a person takes to decide
    st.sampled_from([0.0, 0.0, 200.0]),  # seconds before anyone resumes it
    _CANCEL_ANSWERS,
    st.lists(_STATUS, min_size=1, max_size=4),
)


@settings(max_examples=examples(60), deadline=None, derandomize=True)
@given(steps=st.lists(_STEPS, min_size=1, max_size=4), max_requests=st.integers(1, 3))
def test_a_decided_cancel_is_carried_out_or_the_outcome_says_why_not(
    steps: list[tuple[str, float, int, float, float, Answer, list[Answer]]], max_requests: int
) -> None:
    """However the provider answers and people decide: a decided cancel is sent, or the
    outcome says it was not; a cancel not accepted stops at once saying so; an accepted
    one answered canceled ends canceled; requests stay within the budget plus each
    grant's checks and its action's own request; every resume ends with one outcome."""
    op = Op(MemoryStore(), CANCELABLE, max_requests=max_requests, deadline_s=30,
            max_extension_s=120, max_transport_failures=1)  # fmt: skip
    granted = 0
    for option, minutes, asked_checks, pause_s, late_s, cancel_answer, answers in steps:
        op.clock.advance(pause_s)
        if option not in op.record.to_outcome().options:
            continue
        op.provider.script["/status/cancel"] = [cancel_answer]
        checks = min(asked_checks, max_requests)  # a grant is at most the policy's budget
        grant = {"minutes": minutes, "checks": checks} if option != "abandon" else {}
        op.decide(option, **grant)
        if option == "abandon":
            break
        granted += checks + (option == "cancel")
        cancels, polls = op.provider.count("/status/cancel"), op.provider.count("/status")
        op.clock.advance(late_s)
        outcome = op.resume(*answers)
        assert outcome.outcome is not None
        if option != "cancel":
            continue
        detail = str(outcome.error)
        if op.provider.count("/status/cancel") == cancels:
            assert late_s > 0
            assert "was not sent" in detail
        elif cancel_answer != (202, {}) and answers[0] == CANCELED:
            # The one look shows the job already ended: its own outcome, the cancel late.
            assert outcome.outcome is OutcomeKind.CANCELED
            assert "came too late" in (outcome.note or "")
            assert op.provider.count("/status") == polls + 1
        elif cancel_answer != (202, {}):
            assert outcome.reason is Reason.CANCEL_NOT_ACCEPTED
            assert "the cancel decided by ann at" in detail
            assert "last seen null" not in detail
            assert op.provider.count("/status") == polls + 1
        elif answers[0] == CANCELED:
            assert outcome.outcome is OutcomeKind.CANCELED
    assert len(op.provider.requests) <= max_requests + granted
    assert op.record.requests_used == len(op.provider.requests)
