"""An operation as an MCP task: the pure mapping of ``waitbound.mcp._tasks`` and the
task methods of :class:`Jobs` on a real store (no provider needed: the records are
stored as they would be at each point of a job's life)."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes import FakeClock
from tests.hypothesis_profiles import examples
from tests.records import with_fields
from waitbound import (
    DecisionRequest,
    OutcomeKind,
    Policy,
    Reason,
    Record,
    SQLiteStore,
    parse_profile,
)
from waitbound._base._errors import OperationNotFoundError, UsageError
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)
from waitbound.mcp import Jobs, parse_config
from waitbound.mcp._tasks import (
    BadResponses,
    answered_key,
    input_key,
    parse_responses,
    status_of,
    task,
    tool_result,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def record(**changes: object) -> Record:
    base = Record(
        contract=Contract(
            operation_id="op_1",
            profile=parse_profile({"state": "s", "pending": ["p"], "succeeded": ["d"]}, name="t"),
            policy=Policy(deadline_s=600, max_requests=9),
            created_at=T0,
            label="mcp:reports",
        ),
        submission=Submission(status_url="https://api.example.com/s", job_id="job-1"),
        schedule=Schedule(
            deadline_at=T0 + timedelta(minutes=10), next_poll_at=T0 + timedelta(seconds=30)
        ),
    )
    return with_fields(base, **changes)


def opened(at: datetime, **fields: Any) -> DecisionRequest:
    return DecisionRequest(
        opened_at=at, due_at=at + timedelta(days=1), options=("extend",), **fields
    )


ESCALATED = {"outcome": OutcomeKind.ESCALATED, "reason": Reason.REQUEST_BUDGET_EXHAUSTED}


def test_each_stage_of_a_job_is_its_task_status() -> None:
    assert status_of(record()) == "working"
    assert status_of(record(outcome=OutcomeKind.SUCCEEDED)) == "completed"
    assert status_of(record(outcome=OutcomeKind.FAILED)) == "completed"
    assert status_of(record(outcome=OutcomeKind.CANCELED)) == "cancelled"
    stopped = record(**ESCALATED, decision_request=opened(T0))
    assert status_of(stopped) == "input_required"
    assert status_of(record(decision_request=opened(T0))) == "input_required"  # an agent asked
    assert status_of(record(**ESCALATED)) == "completed"  # its request was closed


def test_poll_interval_is_never_shorter_than_the_next_check() -> None:
    now = T0 + timedelta(seconds=10)
    working = task(record(), now, status_message="m", retention_s=60)
    assert working["pollIntervalMs"] == 20_000
    due = task(record(next_poll_at=T0), now, status_message="m", retention_s=60)
    assert due["pollIntervalMs"] == 1000
    assert working["ttlMs"] == (600 + 60) * 1000
    assert working["createdAt"] == "2026-01-01T00:00:00Z"
    assert "result" not in working
    assert "inputRequests" not in working


@settings(max_examples=examples(60), deadline=None)
@given(status=st.sampled_from(["succeeded", *[k.value for k in OutcomeKind]]))
def test_only_success_is_a_tool_result_without_is_error(status: str) -> None:
    result = tool_result({"status": status, "done": True})
    assert result["isError"] is (status != "succeeded")
    assert result["structuredContent"] == {"status": status, "done": True}


def test_a_key_names_its_request_and_is_never_reused() -> None:
    first = record(**ESCALATED, decision_request=opened(T0))
    later = record(**ESCALATED, decision_request=opened(T0 + timedelta(microseconds=1)))
    assert input_key(first) != input_key(later)
    assert input_key(record()) is None
    key = input_key(first)
    answered = first.evolve(
        oversight=first.oversight.evolve(
            decision_request=opened(T0, requested_by=f"elicitation {key} mcp-client x")
        )
    )
    assert answered_key(answered)
    assert input_key(answered) == key
    assert not answered_key(first)


GOOD = {"action": "accept", "content": {"option": "extend", "why": "more time"}}


def test_responses_to_keys_not_outstanding_are_ignored() -> None:
    assert parse_responses({"other": GOOD}, "k", ["extend"], 10).answer is None
    assert parse_responses({"k": GOOD}, None, ["extend"], 10).answer is None
    found = parse_responses({"k": GOOD, "other": {}}, "k", ["extend"], 10).answer
    assert found is not None
    assert (found.option, found.why, found.minutes, found.checks) == (
        "extend",
        "more time",
        None,
        None,
    )


@pytest.mark.parametrize(
    ("responses", "named"),
    [
        ([], "must be an object"),
        ({"k": "extend"}, "must be an object"),
        ({"k": {"action": "decline"}}, "only an accepted answer"),
        ({"k": {"action": "accept", "content": {"why": "w"}}}, "option must be one of"),
        ({"k": {"action": "accept", "content": {"option": "abandon", "why": "w"}}}, "one of"),
        ({"k": {"action": "accept", "content": {"option": "extend", "why": " "}}}, "why"),
        ({"k": {"action": "accept", "content": {"option": "extend", "why": "a\nb"}}}, "one line"),
        ({"k": {"action": "accept", "content": {"option": "extend", "why": "w", "x": 1}}}, "'x'"),
        (
            {"k": {"action": "accept", "content": {"option": "extend", "why": "w", "minutes": 11}}},
            "minutes",
        ),
        (
            {"k": {"action": "accept", "content": {"option": "extend", "why": "w", "checks": 0}}},
            "checks",
        ),
        (
            {
                "k": {
                    "action": "accept",
                    "content": {"option": "extend", "why": "w", "checks": True},
                }
            },
            "checks",
        ),
        ({"k": {"action": "accept", "content": {"option": "extend", "why": "w" * 501}}}, "why"),
        ({"k": {**GOOD, "extra": 1}}, "unknown field"),
        ({f"k{i}": {} for i in range(17)}, "at most 16"),
        ({"x" * 101: {}}, "1-100 characters"),
        ({"other": {"blob": "x" * 10_000}}, "too large"),
    ],
)
def test_bad_responses_are_one_line_naming_the_problem(responses: Any, named: str) -> None:
    with pytest.raises(BadResponses, match=named) as raised:
        parse_responses(responses, "k", ["extend"], 10)
    assert "\n" not in str(raised.value)
    assert len(str(raised.value)) < 300


def jobs_over(tmp_path: Path, *, decide: bool) -> tuple[Jobs, SQLiteStore, FakeClock]:
    config = parse_config(
        {
            "server": {"inbox_url": "https://inbox.example/inbox"},
            "providers": {
                "reports": {
                    "base_url": "https://api.example.com",
                    "profile": "next-action",
                    "decide_via_elicitation": decide,
                }
            },
        },
        base_dir=tmp_path,
    )
    store = SQLiteStore(tmp_path / "tasks.db")
    clock = FakeClock(T0 + timedelta(seconds=10))
    return Jobs(config, store, clock=clock), store, clock


def stopped(store: SQLiteStore) -> Record:
    return store.create(record(**ESCALATED, decision_request=opened(T0), finished_at=T0), [])


async def test_an_answer_decides_when_the_operator_says_so(tmp_path: Path) -> None:
    jobs, store, _ = jobs_over(tmp_path, decide=True)
    stopped(store)
    asked = jobs.task("op_1")
    assert asked["status"] == "input_required"
    (key,) = dict(asked["inputRequests"])  # type: ignore[arg-type]
    answer = {"action": "accept", "content": {"option": "extend", "why": "w", "checks": 2}}
    assert await jobs.answer_task("op_1", {key: answer}, by="mcp-client c/1 session s") is True
    after = store.get("op_1")
    assert after is not None
    (decision,) = after.decisions
    assert (decision.option, decision.by) == ("extend", "mcp-client c/1 session s")
    assert jobs.task("op_1")["status"] == "working"
    # the same key again: no longer outstanding, ignored
    assert await jobs.answer_task("op_1", {key: answer}, by="someone else") is False
    assert store.get("op_1") == after


async def test_an_answer_is_a_request_when_it_does_not_decide(tmp_path: Path) -> None:
    jobs, store, _ = jobs_over(tmp_path, decide=False)
    stopped(store)
    asked = jobs.task("op_1")
    assert "https://inbox.example/inbox" in str(asked["statusMessage"])
    (key,) = dict(asked["inputRequests"])  # type: ignore[arg-type]
    answer = {"action": "accept", "content": {"option": "extend", "why": "w"}}
    assert await jobs.answer_task("op_1", {key: answer}, by="mcp-client c/1 session s") is True
    after = store.get("op_1")
    assert after is not None
    assert after.decisions == ()
    assert after.decision_request is not None
    assert after.decision_request.requested_by == f"elicitation {key} mcp-client c/1 session s"
    waiting = jobs.task("op_1")
    assert waiting["status"] == "input_required"
    assert waiting["inputRequests"] == {}
    assert "a PERSON decides" in str(waiting["statusMessage"])
    assert await jobs.answer_task("op_1", {key: answer}, by="x") is False


async def test_an_expired_request_is_closed_before_a_task_is_read(tmp_path: Path) -> None:
    jobs, store, clock = jobs_over(tmp_path, decide=True)
    stopped(store)
    clock.advance(2 * 86400)
    done = jobs.task("op_1")
    assert done["status"] == "completed"
    assert dict(done["result"])["isError"] is True  # type: ignore[arg-type]
    after = store.get("op_1")
    assert after is not None
    assert after.reason is Reason.DECISION_TIMEOUT


async def test_other_tenants_operations_are_not_tasks(tmp_path: Path) -> None:
    jobs, store, _ = jobs_over(tmp_path, decide=True)
    store.create(record(operation_id="op_other", label="mcp:billing"), [])
    store.create(record(operation_id="op_plain", label=None), [])
    for foreign in ("op_other", "op_plain", "op_missing"):
        with pytest.raises(OperationNotFoundError):
            jobs.task(foreign)
        with pytest.raises(OperationNotFoundError):
            await jobs.answer_task(foreign, {}, by="x")
        with pytest.raises(OperationNotFoundError):
            jobs.cancel_task(foreign)
    for malformed in (None, 7, "", "x" * 129):
        with pytest.raises(UsageError):
            jobs.task(malformed)  # type: ignore[arg-type]


async def test_capabilities_are_honest_and_a_story_is_a_resource(tmp_path: Path) -> None:
    from mcp import Client

    from waitbound.mcp import create_server

    jobs, store, _ = jobs_over(tmp_path, decide=False)
    stopped(store)
    async with Client(create_server(jobs), mode="legacy") as client:
        capabilities = client.server_capabilities
        assert capabilities.prompts is None
        assert capabilities.resources is not None
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == [
            "waitbound://operations/{operation_id}/story"
        ]
        story = await client.read_resource("waitbound://operations/op_1/story")
        text = story.contents[0].text  # type: ignore[union-attr]
        assert text.startswith("Operation op_1 (mcp:reports): 0 events")
        with pytest.raises(Exception, match="op_none"):
            await client.read_resource("waitbound://operations/op_none/story")


async def test_an_answer_is_bounded_by_the_ceilings_and_the_first_decision_wins(
    tmp_path: Path,
) -> None:
    from waitbound import decide

    jobs, store, clock = jobs_over(tmp_path, decide=True)
    stopped(store)
    (key,) = dict(jobs.task("op_1")["inputRequests"])  # type: ignore[arg-type]
    before = store.get("op_1")
    too_many = {"action": "accept", "content": {"option": "extend", "why": "w", "checks": 10}}
    with pytest.raises(UsageError, match="request budget"):
        await jobs.answer_task("op_1", {key: too_many}, by="mcp-client c/1 session s")
    assert store.get("op_1") == before
    decide("op_1", "abandon", why="not needed", by="ann", store=store, clock=clock)
    answer = {"action": "accept", "content": {"option": "extend", "why": "w"}}
    assert await jobs.answer_task("op_1", {key: answer}, by="mcp-client c/1 session s") is False
    after = store.get("op_1")
    assert after is not None
    assert [(d.option, d.by) for d in after.decisions] == [("abandon", "ann")]


async def test_a_submission_cut_off_by_a_crash_is_not_left_working(tmp_path: Path) -> None:
    from waitbound import Phase

    jobs, store, _ = jobs_over(tmp_path, decide=False)
    store.create(
        record(
            phase=Phase.SUBMITTING,
            submit_url="https://api.example.com/jobs",
            submit_attempts=1,
            lease_owner=f"{socket.gethostname()}:999999999:dead",  # a process that died
            lease_expires_at=T0 + timedelta(hours=1),
        ),
        [],
    )
    assert jobs.task("op_1")["status"] == "working"
    settled = await jobs.task_now("op_1")
    assert settled["status"] == "input_required"  # escalated: it may have created a job
    stored = store.get("op_1")
    assert stored is not None
    assert stored.reason is Reason.PROVIDER_FAILURE


async def test_a_viewers_answer_never_decides_and_each_answer_is_its_holders(
    tmp_path: Path,
) -> None:
    """decide_via_elicitation on: a decider's answer is a decision recorded by its
    name; a viewer's is filed as a request; neither reaches another holder's task."""
    from waitbound.mcp._principal import Principal, acting_for

    jobs, store, _ = jobs_over(tmp_path, decide=True)
    stopped_now = {**ESCALATED, "decision_request": opened(T0), "finished_at": T0}
    store.create(record(**stopped_now, operation_id="op_ann", label="mcp:ann/reports"), [])
    store.create(record(**stopped_now, operation_id="op_bob", label="mcp:bob/reports"), [])
    ann = Principal(owner="ann", role="decider", by="ann")
    bob = Principal(owner="bob", role="viewer", by="bob")
    answer = {"action": "accept", "content": {"option": "extend", "why": "w", "checks": 2}}
    with acting_for(bob):
        (key,) = dict(jobs.task("op_bob")["inputRequests"])  # type: ignore[arg-type]
        with pytest.raises(OperationNotFoundError):
            jobs.task("op_ann")
        with pytest.raises(OperationNotFoundError):
            await jobs.answer_task("op_ann", {key: answer}, by=bob.by)
        assert await jobs.answer_task("op_bob", {key: answer}, by=bob.by) is True
    filed = store.get("op_bob")
    assert filed is not None
    assert filed.decisions == ()
    assert filed.decision_request is not None
    assert filed.decision_request.requested_by == f"elicitation {key} bob"
    with acting_for(ann):
        (key,) = dict(jobs.task("op_ann")["inputRequests"])  # type: ignore[arg-type]
        assert await jobs.answer_task("op_ann", {key: answer}, by=ann.by) is True
    decided = store.get("op_ann")
    assert decided is not None
    (decision,) = decided.decisions
    assert (decision.option, decision.by) == ("extend", "ann")
