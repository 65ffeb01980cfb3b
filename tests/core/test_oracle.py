"""The honesty oracle (issue 20): random provider scripts, random human decisions,
cancels, kills and resumes, driven through the real API and stores; after every step
and at every outcome, each claim waitbound makes is checked against the provider's
log (``tests/core/oracle.py`` has the model and the checks).

It runs in ``make test`` with a fixed seed and a bounded number of examples. For a
longer hunt: ``WAITBOUND_ORACLE_EXAMPLES=2000 pytest tests/core/test_oracle.py
--hypothesis-seed=N`` (see docs/testing.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.cli.helpers import run_cli
from tests.core.oracle import (
    FIRST_STATUS,
    JOB,
    LEARNED_KEY,
    OP,
    OUTPUT,
    RESULT_BODY,
    RESUMING,
    Kill,
    Reply,
    World,
    check,
    detail,
    seed_history,
    status,
    words,
)
from tests.core.test_protocol import ACTION_URL, MONITOR, RESOURCE, SUBMIT, Drive, drive
from tests.core.test_protocol import Reply as Reply_
from tests.stores import pg
from waitbound import FinalStateVia, MemoryStore, OutcomeKind, Policy, Reason, SQLiteStore, Store
from waitbound.testing import FakeClock

EXAMPLES = int(os.environ.get("WAITBOUND_ORACLE_EXAMPLES", "0"))
"""More examples on demand; unset, a fixed seed and a bounded count (``make test``)."""


def oracle_settings(examples: int, steps: int = 20) -> settings:
    """Fixed seed, bounded count and no shrinking by default (a failure reports its whole
    story at once, in seconds); with ``WAITBOUND_ORACLE_EXAMPLES``, a random (or
    ``--hypothesis-seed``) hunt of that many examples that shrinks what it finds."""
    phases = list(Phase) if EXAMPLES else [Phase.explicit, Phase.reuse, Phase.generate]
    return settings(
        max_examples=EXAMPLES or examples,
        stateful_step_count=steps,
        derandomize=not EXAMPLES,
        database=None,
        deadline=None,
        phases=phases,
        report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        print_blob=True,
    )


# --- what the provider may say ------------------------------------------------------

HINTS: list[tuple[tuple[str, str], ...]] = [
    (),
    (),
    (),
    (),
    (("Retry-After", "3"),),
    (("Retry-After", "date+4"),),
    (("retry-after-ms", "1500"),),
    (("Retry-After", "soon"),),
    (("Retry-After", "-1"),),
    (("Retry-After", "400"),),
    (("Retry-After", "0"),),
]
BODY_HINTS: list[dict[str, object]] = [{}, {}, {}, {"poll_after": 2}, {"poll_after": "later"},
                                       {"poll_after": 900}]  # fmt: skip


@st.composite
def running(draw: st.DrawFn, moving: bool) -> Reply:
    state = draw(st.sampled_from(["running", "queued"]))
    body = status(state, **draw(st.sampled_from(BODY_HINTS)))
    cancelable = draw(st.sampled_from([None, True, True, False]))
    if cancelable is not None:
        body["can_cancel"] = cancelable
    location = draw(st.sampled_from([None, None, "/s/2", "/s/3", FIRST_STATUS])) if moving else None
    return Reply(
        state,
        draw(st.sampled_from([200, 202])),
        body,
        headers=draw(st.sampled_from(HINTS)),
        latency_s=draw(st.sampled_from([0.0, 0.0, 0.0, 0.5, 30.0])),
        location=location,
    )


ENDINGS = [
    Reply("done", 200, status("done", output=OUTPUT)),
    Reply("done_bare", 200, status("done")),
    Reply("done_error", 200, status("done", output=OUTPUT, error={"code": "E"})),
    Reply("partial", 200, status("partial", output=OUTPUT)),
    Reply("failed", 200, status("failed", error={"code": "E_CODEC"})),
    Reply("canceled", 200, status("canceled")),
    Reply("expired", 200, status("expired")),
    Reply("mystery", 200, status("paused")),
    # Another job's answers: never evidence for this operation (job identity).
    Reply("foreign_done", 200, status("done", output=OUTPUT, id="job-OTHER")),
    Reply("foreign_failed", 200, status("failed", error={"code": "E"}, id="job-OTHER")),
    # next_action decides: poll_status waits, retry_later is skipped, none needs an ending.
    Reply("poll_status", 200, status("done", output=OUTPUT, next_action="poll_status")),
    Reply("processing", 200, status("processing", next_action="poll_status")),
    Reply("retry_later", 200, status("queued", next_action="retry_later")),
    Reply("done_none", 200, status("done", output=OUTPUT, next_action="none")),
    Reply("failed_none", 200, status("failed", error={"code": "E"}, next_action="none")),
    Reply("running_none", 200, status("running", next_action="none")),
    Reply("odd_action", 200, status("running", next_action="later_maybe")),
]
TROUBLES = [
    Reply("no_state", 200, {"id": JOB}),
    Reply("404", 404, {"error": "not found"}),
    Reply("410", 410, None),
    Reply("401", 401, {"error": "bad token"}),
    Reply("403", 403, None),
    Reply("400", 400, {"error": "bad request"}),
    Reply("429", 429, None),
    Reply("429_hint", 429, None, headers=(("Retry-After", "5"),)),
    Reply("503", 503, None),
    Reply("503_hint", 503, None, headers=(("Retry-After", "date+6"),)),
    Reply("500", 500, {"error": "boom"}),
    Reply("empty", 200, None),
    Reply("garbage", 200, b"{not json"),
    Reply("list", 200, [1, 2]),
    Reply("drop", None, error="drop"),
    Reply("refused", None, error="refused"),
    Reply("slow", 200, status("running"), latency_s=60.0),
]


def status_replies(moving: bool) -> st.SearchStrategy[Reply]:
    return st.one_of(
        running(moving),
        running(moving),
        running(moving),
        st.sampled_from(ENDINGS),
        st.sampled_from(ENDINGS),
        st.sampled_from(TROUBLES),
    )


RESULTS = st.sampled_from(
    [
        Reply("result", 200, RESULT_BODY),
        Reply("result", 200, RESULT_BODY),
        Reply("409", 409, {"error": "not ready"}),
        Reply("409_hint", 409, None, headers=(("Retry-After", "2"),)),
        Reply("425", 425, None),
        Reply("404", 404, None),
        Reply("500", 500, None),
        Reply("429", 429, None),
        Reply("empty", 200, None),
        Reply("garbage", 200, b"<html>"),
        Reply("drop", None, error="drop"),
    ]
)
CANCELS = st.sampled_from(
    [
        Reply("accepted", 202, {}),
        Reply("accepted", 200, {"status": "canceling"}),
        Reply("refused", 409, {"error": "not cancelable"}),
        Reply("404", 404, None),
        Reply("500", 500, None),
        Reply("drop", None, error="drop"),
    ]
)
SUBMITS = st.sampled_from(
    [
        Reply("receipt", 202, {"id": JOB}, location=FIRST_STATUS),
        Reply("receipt", 202, {"id": JOB}, headers=(("Retry-After", "2"),), location=FIRST_STATUS),
        Reply("receipt", 201, status("queued"), location=FIRST_STATUS),
        Reply("500", 500, None),
        Reply("400", 400, {"error": "bad body"}),
        Reply("429", 429, None),
        Reply("drop", None, error="drop"),
    ]
)
KILLS = st.one_of(
    st.none(),
    st.none(),
    st.builds(Kill, at=st.integers(1, 4), where=st.sampled_from(["reserved", "answered"])),
)
OPTIONS = st.sampled_from(
    [
        "extend", "extend", "as_requested", "cancel", "cancel", "treat_as_pending",
        "mark_succeeded",
        "mark_failed", "resume_with_credentials", "resume_with_profile",
        "fetch_result_again", "abandon", "decline",
    ]
)  # fmt: skip
USUAL_MINUTES = st.sampled_from([None, None, 1, 2, 0.5, 30])
MINUTES = st.one_of(
    USUAL_MINUTES,
    USUAL_MINUTES,
    USUAL_MINUTES,
    st.sampled_from([1e-12, 1e-6, 0.001, 0.02, 1e6, 0, -1, float("nan"), float("inf")]),
)
"""Grants of every size: mostly ones a person would give, then tiny, huge and bad ones."""
USUAL_CHECKS = st.sampled_from([None, None, 1, 2, 3])
CHECKS = st.one_of(USUAL_CHECKS, USUAL_CHECKS, USUAL_CHECKS, st.sampled_from([6, 0, -1, 10**6]))
PAUSES = st.sampled_from([1.0, 30.0, 300.0, 7200.0, 7200.0, 8 * 24 * 3600.0])


class Oracle(RuleBasedStateMachine):
    """One operation, driven by random scripts and decisions; checked after each step."""

    store_kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None
        self.directory: str | None = None
        self.store: Store | None = None
        self.schema: str | None = None

    def new_store(self) -> Store:
        if self.store_kind == "sqlite":
            self.directory = tempfile.mkdtemp(prefix="oracle-")
            return SQLiteStore(Path(self.directory) / "oracle.db")
        if self.store_kind == "postgres":
            from waitbound.stores.postgres import PostgresStore, upgrade

            dsn = pg.require_postgres()
            self.schema = pg.new_schema_name()
            upgrade(dsn, schema=self.schema)
            return PostgresStore(dsn, schema=self.schema, max_size=2)
        return MemoryStore()

    @initialize(
        variant=st.sampled_from(["inline", "fetched"]),
        via_submit=st.booleans(),
        seed=st.integers(0, 3),
        learned=st.booleans(),
    )
    def begin(self, variant: str, via_submit: bool, seed: int, learned: bool) -> None:
        """One operation; with *learned*, on the learned schedule (its key's history
        seeded with finished jobs) and paced by its origin, so every claim is also
        checked where those features meet the rest."""
        self.store = self.new_store()
        policy = None
        if learned:
            seed_history(self.store, LEARNED_KEY)
            policy = replace(
                World.POLICY, schedule="learned", schedule_key=LEARNED_KEY, origin_pacing=True
            )
        self.world = World(
            self.store, variant=variant, via_submit=via_submit, seed=seed, policy=policy
        )

    @property
    def w(self) -> World:
        assert self.world is not None
        return self.world

    @rule(data=st.data(), kill=KILLS)
    def wait(self, data: st.DataObject, kill: Kill | None) -> None:
        """``waitbound wait`` (``run``) with the provider's next answers drawn."""
        self._wait(data, kill)

    @rule(data=st.data())
    def wait_to_the_end(self, data: st.DataObject) -> None:
        """``waitbound wait`` that nobody stops."""
        self._wait(data, None)

    def _wait(self, data: st.DataObject, kill: Kill | None) -> None:
        moving = self.w.via_submit
        self.w.drive(
            status=data.draw(st.lists(status_replies(moving), min_size=1, max_size=5)),
            result=data.draw(st.lists(RESULTS, max_size=2)),
            cancel=data.draw(st.lists(CANCELS, max_size=2)),
            submit=data.draw(st.lists(SUBMITS, max_size=2)) if not self.w.started else (),
            kill=kill,
        )

    def asks(self) -> bool:
        """Whether a decision request is open (a person is asked)."""
        record = self.store.get(OP) if self.world is not None and self.store else None
        return record is not None and record.decision_request is not None

    @precondition(asks)
    @rule(
        data=st.data(),
        minutes=MINUTES,
        checks=CHECKS,
        late=st.sampled_from([None, None, None, 60.0, 3 * 3600.0]),
    )
    def decide(self, data: st.DataObject, minutes: Any, checks: Any, late: float | None) -> None:
        """``waitbound decide`` on an open request: mostly an option on offer, sometimes
        any; any grant, in or out of its window."""
        offered = list(self.w.record.to_outcome().options)
        on_offer: int = data.draw(st.integers(0, 4))
        option: str = data.draw(st.sampled_from(offered) if offered and on_offer else OPTIONS)
        no_grant: int = data.draw(st.integers(0, 4))
        if (option not in RESUMING or option == "as_requested") and no_grant:
            minutes = checks = None  # a grant where none applies, now and then
        if late is not None:
            self.w.advance(late)
        self._decide(option, minutes, checks)

    @precondition(lambda self: self.world is not None and self.world.started)
    @rule(option=OPTIONS, minutes=MINUTES, checks=CHECKS)
    def decide_anything(self, option: str, minutes: Any, checks: Any) -> None:
        """``waitbound decide`` at any moment with any option: refused without a change
        unless it is open."""
        self._decide(option, minutes, checks)

    def _decide(self, option: str, minutes: Any, checks: Any) -> None:
        self.w.decide(
            option,
            minutes=minutes,
            checks=checks,
            profile=option == "resume_with_profile",
            credential=option == "resume_with_credentials",
        )

    def cancel_makes_sense(self) -> bool:
        """The operation runs, or its options list cancel (elsewhere a refusal is sure)."""
        record = self.store.get(OP) if self.world is not None and self.store else None
        return record is not None and (
            not record.is_finished or "cancel" in record.to_outcome().options
        )

    @precondition(cancel_makes_sense)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        """``waitbound cancel``: refused where it must be, else carried out and told."""
        self.w.cancel(
            cancel=data.draw(st.lists(CANCELS, min_size=1, max_size=2)),
            status=data.draw(st.lists(status_replies(self.w.via_submit), max_size=3)),
        )

    @precondition(lambda self: self.world is not None and self.world.started)
    @rule()
    def look(self) -> None:
        """``waitbound check``."""
        self.w.look()

    @precondition(lambda self: self.world is not None and self.world.started)
    @rule()
    def escalations(self) -> None:
        """``waitbound escalations`` (closes requests past their due time)."""
        self.w.escalations()

    @precondition(lambda self: self.world is not None and self.world.started)
    @rule(minutes=st.sampled_from([1, 5, 1e-9, 1e6]), checks=st.sampled_from([1, 3, 0]))
    def agent_asks(self, minutes: float, checks: int) -> None:
        """An agent asks for more time (MCP ``request_extension``): nothing is granted."""
        self.w.agent_asks(minutes, checks)

    @rule(seconds=PAUSES)
    def pause(self, seconds: float) -> None:
        """Time passes; nobody acts (and nothing may change)."""
        self.w.advance(seconds)
        if self.w.started and self.store is not None and (record := self.store.get(OP)):
            check(self.w, record)

    def teardown(self) -> None:
        if self.world is not None:
            self.world.client.close()
        if self.store is not None:
            self.store.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        if self.schema is not None:
            pg.drop_schema(self.schema)


class SQLiteOracle(Oracle):
    store_kind = "sqlite"


class PostgresOracle(Oracle):
    store_kind = "postgres"


def test_the_oracle_finds_every_claim_true_on_the_memory_store() -> None:
    """Random scripts, decisions, cancels, kills and resumes on the memory store: every
    outcome's kind, reason and words are true of the provider's log."""
    run_state_machine_as_test(Oracle, settings=oracle_settings(40))


def test_the_oracle_finds_every_claim_true_on_the_sqlite_store() -> None:
    """The same oracle on SQLite: a record that went through the store says no more."""
    run_state_machine_as_test(SQLiteOracle, settings=oracle_settings(15))


def test_the_oracle_finds_every_claim_true_on_the_postgres_store() -> None:
    """The same oracle on PostgreSQL (a fresh schema per example; fewer examples)."""
    pg.require_postgres()
    run_state_machine_as_test(PostgresOracle, settings=oracle_settings(5))


# --- the faults issue 20 lists, each through the same checks ----------------------
#
# Each test below plays one of the faults of issue 20's first section on a World (the
# oracle's checks run after every step), or, for the Azure protocol cases, on the
# protocol tests' scripted web with the same checks of the words and the evidence.

RUNNING = Reply("running", 200, status("running", can_cancel=True))
DONE = Reply("done", 200, status("done", output=OUTPUT))
NOT_READY = Reply("409", 409, {"error": "not ready"})
CANCELED = Reply("canceled", 200, status("canceled"))


def memory_world(variant: str = "inline", **policy: Any) -> World:
    settings_: dict[str, Any] = {
        "deadline_s": 120, "max_requests": 6, "max_transport_failures": 2,
        "max_rate_limited": 2, "base_delay_s": 1, "max_delay_s": 8,
        "request_timeout_s": 10, "not_found_grace_s": 5, "lease_s": 5,
    }  # fmt: skip
    return World(MemoryStore(), variant=variant, policy=Policy(**(settings_ | policy)))


def test_an_empty_result_answer_is_never_a_success() -> None:
    """Fault 1's kind: the status says done, the result endpoint answers 200 with no body:
    that is no evidence of a result, so the outcome is not succeeded."""
    world = memory_world("fetched")
    record = world.drive(status=[DONE], result=[Reply("empty", 200, None)])
    assert record.outcome is not OutcomeKind.SUCCEEDED


def test_untrue_words_after_a_success_whose_result_was_not_fetched() -> None:
    """Fault 3: the status said done, then the result endpoint kept answering 409 until
    the request budget ran out: the outcome never says the job is not complete."""
    world = memory_world("fetched", max_requests=3)
    record = world.drive(status=[DONE], result=[NOT_READY])
    assert record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    said = words(record)
    assert "succeeded" in said, said


def test_untrue_words_after_a_success_whose_result_answer_was_lost() -> None:
    """Fault 3 (result_unconfirmed): the one result request's answer is lost to a kill;
    the resumed operation stops result_unconfirmed, and its words do not call the job
    incomplete."""
    world = memory_world("fetched")
    world.drive(status=[DONE], kill=Kill(at=2, where="answered"))
    record = world.drive()
    assert record.reason is Reason.RESULT_UNCONFIRMED
    assert "succeeded" in words(record)


def test_a_persons_cancel_after_budget_exhaustion_is_carried_out() -> None:
    """Fault 4: after request_budget_exhausted, a person decides cancel with the default
    grant (one check for a budget of 2): the cancel is sent and the job's end is learned
    (canceled), or the outcome says what became of the cancel."""
    world = memory_world(max_requests=2)
    stopped = world.drive(status=[RUNNING])
    assert stopped.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert world.decide("cancel")
    record = world.drive(status=[CANCELED], cancel=[Reply("accepted", 202, {})])
    assert world.provider.hits("cancel")
    assert record.outcome is OutcomeKind.CANCELED or "cancel" in detail(record)


def test_waitbound_cancel_after_budget_exhaustion_counts_its_grant() -> None:
    """Found by a long hunt: ``waitbound cancel`` of an operation stopped at
    request_budget_exhausted is a person's ``cancel`` decision, and its default grant
    plus the cancel's own request are requests the budget allows (the oracle held them
    to the policy's budget alone). The cancel is sent; every check holds."""
    world = memory_world(max_requests=6)
    stopped = world.drive(status=[RUNNING])
    assert stopped.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    after = world.cancel(cancel=[Reply("accepted", 202, {})], status=[])
    assert after is not None
    assert world.provider.hits("cancel")
    assert after.requests_used > world.policy.max_requests
    assert [d.option for d in world.decisions] == ["cancel"]


def test_waitbound_cancel_closes_an_expired_request_on_a_running_operation() -> None:
    """Found by a long hunt: an agent's request on an operation not yet polled lapses
    (days pass); ``waitbound cancel`` is refused (nothing says the job is cancelable)
    and, as the first look at it, closes the lapsed request as decision_timeout; the
    operation goes on as it was (no reason set)."""
    world = memory_world()
    assert world.agent_asks(1, 1)
    world.advance(8 * 86_400)
    assert world.cancel(cancel=[Reply("accepted", 202, {})]) is None
    record = world.record
    assert record.decision_request is None
    assert record.decisions[-1].option == "decision_timeout"
    assert record.outcome is None
    assert record.reason is None


def test_an_accepted_cancel_with_no_request_left_says_so() -> None:
    """Found by a long hunt: the budget ran out, a person granted one more check and
    then asked for a cancel; the cancel took that last request and the provider
    accepted it. The stop says the cancel was accepted and that how the job ended is
    not known (it said only "without a terminal answer, last state running")."""
    world = memory_world()
    stopped = world.drive(status=[RUNNING])
    assert stopped.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert world.decide("extend", checks=1)
    after = world.cancel(cancel=[Reply("accepted", 202, {})])
    assert after is not None
    assert after.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    said = detail(after)
    assert "was accepted by the provider" in said, said
    assert "how the job ended is not known" in said, said


def test_a_grant_carries_the_result_request_on_top_of_its_checks() -> None:
    """Found by a long hunt: a person's grant of one check on a job whose result is
    still to fetch gives that check and the result request (issue 33: a grant that sees
    the job succeed also fetches its result); the oracle had counted the check only."""
    world = memory_world("fetched")
    stopped = world.drive(status=[RUNNING])
    assert stopped.outcome is OutcomeKind.TIMED_OUT
    used = world.record.requests_used
    assert world.decide("extend", checks=1)
    assert world.record.max_requests == used + 2
    after = world.drive(status=[DONE])
    assert after.outcome is OutcomeKind.SUCCEEDED


def test_a_persons_cancel_whose_window_passed_is_reported_not_sent() -> None:
    """Fault 4: the grant's window passes before anyone runs wait: the cancel is never
    sent, and the outcome says so."""
    world = memory_world(max_requests=2)
    world.drive(status=[RUNNING])
    assert world.decide("cancel", minutes=1, checks=2)
    world.advance(120)
    record = world.drive(status=[CANCELED])
    assert not world.provider.hits("cancel")
    assert "cancel" in detail(record), words(record)


def test_waitbound_cancel_accepts_what_the_options_offer_after_a_timeout() -> None:
    """Fault 4: ``cancel`` is offered on a timed_out operation only where ``waitbound
    cancel`` accepts it (the oracle checks every refusal against the options)."""
    world = memory_world(deadline_s=10, base_delay_s=4, max_delay_s=4)
    record = world.drive(status=[RUNNING])
    assert record.outcome is OutcomeKind.TIMED_OUT
    offered = record.to_outcome().options
    after = world.cancel(cancel=[Reply("accepted", 202, {})], status=[CANCELED])
    assert after is not None or "cancel" not in offered


def test_a_cancel_the_provider_refuses_ends_the_wait_saying_so() -> None:
    """Fault 4: ``waitbound cancel`` on a running job; the provider answers 409: the wait
    ends promptly (not polling on until the budget is spent) and says the cancel was
    refused."""
    world = memory_world(max_requests=10)
    world.drive(status=[RUNNING], kill=Kill(at=2, where="reserved"))
    world.advance(30)
    refused = Reply("refused", 409, {"error": "not cancelable"})
    record = world.cancel(cancel=[refused], status=[RUNNING])
    assert record is not None
    cancel_hit = world.provider.hits("cancel")[-1]
    after = [h for h in world.provider.hits("status") if h.n > cancel_hit.n]
    assert len(after) <= 1, f"{len(after)} status requests after the refused cancel"
    assert "cancel" in detail(record)


@pytest.mark.parametrize(
    "after",
    [
        # The look shows "done" with no output: a contradiction (the long hunt's case
        # had the budget end the confirming look instead; the same words were missing).
        [Reply("done_bare", 200, status("done"))],
        # The look's answer has no state: an integration failure, a stop of its own.
        [Reply("no_state", 200, {"id": "job-7"})],
    ],
    ids=["a bare done", "no state"],
)
def test_a_refused_cancel_is_said_by_whatever_stop_follows(after: list[Reply]) -> None:
    """Found by a long hunt: a person's cancel refused by the provider, then the look
    after it ended in another stop (a bare "done", the budget while confirming it, an
    answer with no state): the outcome's words did not say the cancel was refused.
    Every stop now speaks of a cancel it did not carry out (``_finish.finish``)."""
    world = memory_world(max_requests=9)
    world.drive(status=[RUNNING], kill=Kill(at=2, where="reserved"))
    world.advance(30)
    refused = Reply("refused", 409, {"error": "not cancelable"})
    record = world.cancel(cancel=[refused], status=after)
    assert record is not None
    assert record.outcome in (OutcomeKind.ESCALATED, OutcomeKind.TIMED_OUT), record.outcome
    assert "cancel" in detail(record), detail(record)


@pytest.mark.parametrize("minutes", [1e-12, 1e-320, 1e-6])
def test_a_grant_too_small_to_mean_anything_costs_no_grant(minutes: float) -> None:
    """Fault 5: --minutes 1e-12 (and 1e-320): refused without using one of
    max_extensions, or granted with at least one request's floor of time."""
    world = memory_world(max_requests=2)
    world.drive(status=[RUNNING])
    world.advance(200)  # past the first deadline: the grant alone sets the new one
    before = world.record.grants.extensions
    if not world.decide("extend", minutes=minutes, checks=1):
        assert world.record.grants.extensions == before


def judged(result: Drive) -> Drive:
    """The oracle's checks on a protocol drive: one outcome; succeeded only with an
    answer that carried something; words that match the outcome."""
    finished = result.events("finished")
    assert len(finished) == 1, f"{len(finished)} outcomes"
    outcome = result.outcome
    if outcome.outcome is OutcomeKind.SUCCEEDED:
        assert outcome.result is not None, "succeeded with nothing received"
    else:
        assert "SUCCEEDED" not in outcome.message
    return result


def test_an_empty_final_resource_is_never_a_success() -> None:
    """Fault 1: a PUT answered 201 with an empty body and no polling header, whose
    resource then answers 200 with an empty body, does not end succeeded."""
    result = judged(drive({RESOURCE: [(201, None), (200, None)]}))
    assert result.outcome.outcome is not OutcomeKind.SUCCEEDED
    assert result.outcome.exit_code != 0


MONITOR_FINAL = {"id": "op1", "status": "Succeeded", "endTime": "2026-01-01T12:00:05Z"}


@pytest.mark.parametrize(
    ("method", "header", "via"),
    [
        ("PUT", "Azure-AsyncOperation", FinalStateVia.AZURE_ASYNC_OPERATION),
        ("POST", "Operation-Location", FinalStateVia.OPERATION_LOCATION),
        ("DELETE", "Operation-Location", None),
        ("POST", "Operation-Location", None),
    ],
    ids=["put-azure-async-operation", "post-operation-location", "delete", "post-no-location"],
)
def test_the_status_monitors_final_body_is_the_result_when_the_final_state_is_there(
    method: str, header: str, via: FinalStateVia | None
) -> None:
    """Fault 2: with the final state at the status monitor (final-state-via, or a DELETE
    or POST whose monitor carries it), the outcome's result is the monitor's final body,
    as azure-core returns it, never null."""
    url = ACTION_URL if method == "POST" else SUBMIT
    script: dict[str, list[Reply_]] = {
        url.split("?")[0]: [(202, None, {header: MONITOR})],
        MONITOR: [(200, MONITOR_FINAL)],
    }
    result = judged(drive(script, method=method, url=url, final_state_via=via))
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == MONITOR_FINAL


def test_a_monitor_body_without_a_status_stops_at_once() -> None:
    """Fault 7: an Operation-Location monitor whose body has no status field stops
    within the not-found grace (issue 33: before the job is seen, a body without a state
    may be eventual consistency, as a 404 is), never after 9 or 19 polls."""
    script: dict[str, list[Reply_]] = {
        SUBMIT.split("?")[0]: [(202, None, {"Operation-Location": MONITOR})],
        MONITOR: [(200, {"id": "op1"})],
    }
    result = judged(drive(script, method="DELETE"))
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert 1 <= result.web.count(MONITOR) <= 5, result.web.places()


def test_a_polling_header_that_is_not_a_url_stops_at_once() -> None:
    """Fault 7: an Operation-Location that is not a URL is never polled: the operation
    stops at the receipt, naming the header."""
    script: dict[str, list[Reply_]] = {
        SUBMIT.split("?")[0]: [(202, None, {"Operation-Location": "not a url"})]
    }
    result = judged(drive(script, method="DELETE"))
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert result.web.places() == [f"DELETE {RESOURCE}"], result.web.places()


@pytest.mark.parametrize("typed", ["1_0", "1e-12"])
def test_minutes_a_person_types_mean_what_they_say_or_are_refused(
    tmp_path: Path, typed: str
) -> None:
    """Fault 5 at the command line: ``waitbound decide ... extend --minutes 1_0`` is not
    read as 10, and a grant too small to mean anything costs no grant: refused with one
    line (exit 2) and nothing stored changes, or granted with time to send a request."""
    store = SQLiteStore(tmp_path / "s.db")
    # The command reads the real clock: the operation timed out two minutes ago, so the
    # grant alone sets the new deadline.
    then = FakeClock(datetime.now(UTC) - timedelta(minutes=3))
    policy = Policy(deadline_s=10, base_delay_s=4, max_delay_s=4, max_extension_s=3600)
    world = World(store, policy=policy, clock=then)
    world.drive(status=[RUNNING])
    assert world.record.reason is Reason.DEADLINE_EXCEEDED
    before = world.record
    store.close()
    done = run_cli(tmp_path, "decide", OP, "extend", "--minutes", typed, "--checks", "1",
                   "--why", "oracle", "--store", str(tmp_path / "s.db"))  # fmt: skip
    reopened = SQLiteStore(tmp_path / "s.db")
    try:
        after = reopened.get(OP)
    finally:
        reopened.close()
    assert after is not None
    assert "Traceback" not in done.stderr
    if done.returncode == 0:
        window_s = (after.stop_at - after.decisions[-1].at).total_seconds()
        assert typed != "1_0", f"--minutes 1_0 was accepted: deadline {after.deadline_at}"
        assert window_s >= before.policy.floor_s, f"granted {window_s:g}s: nothing"
    else:
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert after.version == before.version
