"""`--follow`: every audit event of the operation, in order, whoever wrote it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from waitbound import AuditEvent, MemoryStore, Policy, Record, parse_profile
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)
from waitbound.cli._progress import Progress

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PROFILE = parse_profile({"state": "status", "pending": ["running"], "succeeded": ["done"]})


def _event(kind: str, summary: str, at_s: float) -> AuditEvent:
    return AuditEvent(at=T0 + timedelta(seconds=at_s), kind=kind, summary=summary, data={})


def test_follow_prints_events_other_writers_stored_before_ours_in_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A serve's webhook event stored between two of this process's events is printed
    between them, each event once."""
    store = MemoryStore()
    record = Record(
        contract=Contract(operation_id="op-f", profile=PROFILE, policy=Policy(), created_at=T0),
        submission=Submission(status_url="https://api.example/jobs/1"),
        schedule=Schedule(deadline_at=T0 + timedelta(minutes=10), next_poll_at=T0),
    )
    first = _event("created", "created by this process", 0)
    stored = store.create(record, [first])
    sink = Progress(None, follow=True)
    sink.start("op-f")
    sink.attach(store, "op-f")
    sink(first)
    other = _event("webhook_received", "a webhook from reports brought the check forward", 1)
    stored = store.save(stored, [other])
    ours = _event("abandoned", "ours again", 2)
    store.save(stored, [ours])
    sink(ours)
    sink.close()
    lines = capsys.readouterr().err.splitlines()
    story = [line for line in lines if "process" in line or "webhook" in line or "ours" in line]
    assert len(story) == 3, lines
    assert "created by this process" in story[0]
    assert "a webhook from reports" in story[1]
    assert "ours again" in story[2]
