"""The story's sentences (``_rules/_sentences.py``): each common event's words, exactly
as the audit log has always stored them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from waitbound import OutcomeKind, Reason
from waitbound._profile._schedule import DelaySource
from waitbound._rules import _sentences as sentences

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        (
            sentences.created(
                "waiting on https://p.test/s", "inline", deadline_at=T0,
                business_deadline_at=None, max_requests=30, first_after_s=None,
            ),
            "waiting on https://p.test/s with profile inline: deadline "
            "2026-01-01T12:00:00+00:00, at most 30 requests",
        ),
        (
            sentences.created(
                "waiting on https://p.test/s", "inline", deadline_at=T0,
                business_deadline_at=T0, max_requests=3, first_after_s=2.5,
            ),
            "waiting on https://p.test/s with profile inline: deadline "
            "2026-01-01T12:00:00+00:00, business deadline 2026-01-01T12:00:00+00:00, at most "
            "3 requests; first request after 2.5s (the caller holds a fresh answer)",
        ),
        (
            sentences.reserved("status", 2, 30, timeout_s=30.0, late_s=1.5),
            "reserved status request 2 of 30 (timeout 30s); 1.5s later than planned",
        ),
        (
            sentences.reserved("result", 2, 30, timeout_s=9.9784, late_s=4.0),
            "reserved result request 2 of 30 (timeout 9.98s)",
        ),
        (
            sentences.observed(
                "status", 1, transport_error=None, http_status=200, state="running",
                classification="pending", progress={"done": 3}, request_id="r-1",
            ),
            'status request 1 answered HTTP 200: state "running" (pending), progress '
            '{"done": 3} [request id r-1]',
        ),
        (
            sentences.observed("status", 2, transport_error="timed out", http_status=None),
            "status request 2 failed: timed out",
        ),
        (
            sentences.scheduled("throttled", 4.0, DelaySource.LOCAL_BACKOFF, [("body", "x")]),
            "throttled; next request in 4s (local_backoff); ignored body 'x'",
        ),
        (
            sentences.scheduled("", 12.345, DelaySource.BUDGET_SPREAD),
            "next request in 12.3s (budget_spread)",
        ),
        (
            sentences.result_due(OutcomeKind.SUCCEEDED, "https://p.test/r"),
            "terminal succeeded; fetching the result from https://p.test/r once",
        ),
        (
            sentences.receipt_due(OutcomeKind.FAILED, None, "https://p.test/r"),
            "terminal failed; fetching its receipt from https://p.test/r once",
        ),
        (
            sentences.finished(OutcomeKind.TIMED_OUT, Reason.DEADLINE_EXCEEDED, detail="late"),
            "outcome timed_out (deadline_exceeded): late",
        ),
        (
            sentences.finished(OutcomeKind.SUCCEEDED, None, late_cancel="too late"),
            "outcome succeeded; too late",
        ),
    ],
)  # fmt: skip
def test_each_sentence_is_the_one_the_audit_log_stores(said: str, expected: str) -> None:
    assert said == expected
