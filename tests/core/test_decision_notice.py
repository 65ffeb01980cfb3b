"""A decision request opened on an operation with a notify URL is announced once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from waitbound import MemoryStore, Policy, Record, parse_profile
from waitbound._model._outcome import OutcomeKind, Reason
from waitbound._model._push import Channel, decision_delivery_id
from waitbound._model._record import (
    Contract,
    DecisionRequest,
    Phase,
    Push,
    Schedule,
    Submission,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PROFILE = parse_profile({"state": "status", "pending": ["running"], "succeeded": ["done"]})


def _record(**push: object) -> Record:
    return Record(
        contract=Contract(operation_id="op-d", profile=PROFILE, policy=Policy(), created_at=T0),
        submission=Submission(status_url="https://api.example/jobs/1", job_id="job-1"),
        schedule=Schedule(deadline_at=T0 + timedelta(minutes=10), next_poll_at=T0),
        push=Push(**push),  # type: ignore[arg-type]
    )


def _escalated(record: Record, at: datetime) -> Record:
    return record.evolve(
        ending=record.ending.evolve(
            phase=Phase.DONE,
            outcome=OutcomeKind.ESCALATED,
            reason=Reason.REQUEST_BUDGET_EXHAUSTED,
            finished_at=at,
        ),
        oversight=record.oversight.evolve(
            decision_request=(
                DecisionRequest(
                    opened_at=at, due_at=at + timedelta(days=7), options=("extend", "abandon")
                )
            )
        ),
    )


def test_an_opened_decision_request_owes_one_notice_to_the_notify_url() -> None:
    """The notice is written with the escalation, once however often the record is
    written again; it carries the escalation message and the options."""
    store = MemoryStore()
    stored = store.create(_record(notify_url="https://me.example/hook"), [])
    at = T0 + timedelta(minutes=3)
    stored = store.save(_escalated(stored, at), [])
    store.save(stored, [])
    entries = store.outbox(operation_id="op-d")
    assert [e.delivery_id for e in entries] == [decision_delivery_id("op-d", at)]
    (entry,) = entries
    assert entry.channel is Channel.WEBHOOK
    assert entry.target == "https://me.example/hook"
    assert entry.payload["type"] == "operation.decision_requested"
    data = entry.payload["data"]
    assert isinstance(data, dict)
    decision = data["decision"]
    assert isinstance(decision, dict)
    assert decision["options"] == ["extend", "abandon"]
    assert "needs a decision" in str(decision["message"])


def test_a_second_request_is_announced_and_the_final_outcome_completes() -> None:
    """Each request has its own notice; the completion follows the final outcome."""
    store = MemoryStore()
    stored = store.create(_record(notify_url="https://me.example/hook"), [])
    first, second = T0 + timedelta(minutes=3), T0 + timedelta(minutes=9)
    stored = store.save(_escalated(stored, first), [])
    stored = store.save(_escalated(stored, second), [])
    final = stored.evolve(
        oversight=stored.oversight.evolve(decision_request=None),
        ending=stored.ending.evolve(outcome=OutcomeKind.SUCCEEDED, reason=None),
    )
    store.save(final, [])
    types = sorted(str(e.payload["type"]) for e in store.outbox(operation_id="op-d"))
    assert types == [
        "operation.completed",
        "operation.decision_requested",
        "operation.decision_requested",
    ]


def test_without_a_notify_url_no_notice_is_owed() -> None:
    """A callback alone is told of completions, not of decision requests."""
    store = MemoryStore()
    stored = store.create(_record(callback=True), [])
    store.save(_escalated(stored, T0 + timedelta(minutes=3)), [])
    assert store.outbox(operation_id="op-d") == []
