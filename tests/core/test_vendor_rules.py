"""Vendor rules: counts before required fields, what survives a terminal state, throttles
said with headers, Unix times, and a hint of zero. Virtual time and a seeded RNG."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.core.harness import PROFILE, run
from tests.fakes import START, Answer
from waitbound import (
    OutcomeKind,
    Reason,
)
from waitbound.profiles import builtin_profile

OPENAI = dict(builtin_profile("openai-batch").source)
GITHUB = dict(builtin_profile("github-actions-run").source)
OUTPUT = "/v1/files/file-out/content"
ERRORS = "/v1/files/file-err/content"


def _batch(status: str, completed: int, failed: int, **more: Any) -> dict[str, Any]:
    """An OpenAI Batch object (the fields the profile reads)."""
    return {
        "id": "batch_1",
        "status": status,
        "output_file_id": None,
        "error_file_id": None,
        "errors": None,
        "expires_at": int((START + timedelta(days=1)).timestamp()),
        "request_counts": {"total": completed + failed, "completed": completed, "failed": failed},
        **more,
    }


def _epoch(seconds_from_start: float) -> str:
    return str(int((START + timedelta(seconds=seconds_from_start)).timestamp()))


# --- 1. counts are read before required fields ---------------------------------------


def test_a_completed_batch_with_no_successes_and_no_output_file_is_failed() -> None:
    """`completed`, 0 succeeded, 3 failed, no output_file_id: the counts explain the
    missing file, so the outcome is failed at once (no confirmation, no contradiction)."""
    body = _batch("completed", 0, 3, error_file_id="file-err")
    result = run({"/status": [(200, body)]}, profile=OPENAI)
    assert result.outcome.outcome is OutcomeKind.FAILED
    assert result.outcome.counts == {"succeeded": 0, "failed": 3, "total": 3}
    assert result.outcome.status_requests_used == 1
    assert result.outcome.result_requests_used == 0


def test_a_partly_failed_batch_without_output_file_completes_with_errors_unconfirmed() -> None:
    """Some items failed: completed_with_errors, decided by the counts without the
    require_on_success confirmation."""
    script: dict[str, list[Answer]] = {
        "/status": [(200, _batch("completed", 2, 1, error_file_id="file-err"))],
        ERRORS: [(200, {"line": 3})],
    }
    result = run(script, profile=OPENAI)
    assert result.outcome.outcome is OutcomeKind.COMPLETED_WITH_ERRORS
    assert result.outcome.status_requests_used == 1


def test_a_success_the_counts_leave_standing_still_needs_its_output_file() -> None:
    """No failed items: a completed batch without output_file_id is confirmed, then
    escalates contradiction (as before)."""
    result = run(
        {"/status": [(200, _batch("completed", 3, 0))]}, profile=OPENAI, confirm_max_requests=1
    )
    assert result.outcome.reason is Reason.CONTRADICTION
    assert result.outcome.status_requests_used == 2


@pytest.mark.parametrize(
    ("failed", "outcome", "succeeded"),
    [(4, OutcomeKind.FAILED, 0), (1, OutcomeKind.COMPLETED_WITH_ERRORS, 3)],
)
def test_succeeded_not_reported_is_derived_from_the_total(
    failed: int, outcome: OutcomeKind, succeeded: int
) -> None:
    """Counts without `succeeded` but with `total`: succeeded = total - unsuccessful."""
    table = {**PROFILE, "counts": {"failed": "n_failed", "total": "n_total"}}
    body = {"status": "done", "n_failed": failed, "n_total": 4}
    result = run({"/status": [(200, body)]}, profile=table)
    assert result.outcome.outcome is outcome
    assert result.outcome.counts == {"succeeded": succeeded, "failed": failed, "total": 4}


def test_the_openai_profile_requires_only_the_output_file() -> None:
    """The counts rule made the old `request_counts.completed == 0` escape unnecessary."""
    assert OPENAI["require_on_success"] == ["output_file_id"]


# --- 2. counts, usage and the partial output survive every terminal state ------------


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ("expired", OutcomeKind.EXPIRED),
        ("cancelled", OutcomeKind.CANCELED),
        ("failed", OutcomeKind.FAILED),
    ],
)
def test_a_batch_ended_without_success_keeps_counts_usage_and_its_output_reference(
    status: str, outcome: OutcomeKind
) -> None:
    """Counts, usage and the output file of an expired / cancelled / failed batch are in
    the outcome; the file is named by `result_url`, not fetched."""
    usage = {"input_tokens": 10, "output_tokens": 4}
    body = _batch(status, 3, 1, output_file_id="file-out", usage=usage)
    result = run({"/status": [(200, body)]}, profile=OPENAI)
    assert result.outcome.outcome is outcome
    assert result.outcome.counts == {"succeeded": 3, "failed": 1, "total": 4}
    assert result.outcome.usage == usage
    assert result.outcome.result_url == f"http://provider.test{OUTPUT}"
    assert result.outcome.as_json()["result_url"] == f"http://provider.test{OUTPUT}"
    assert result.outcome.result_requests_used == 0


def test_a_fetched_result_names_no_result_url() -> None:
    """Once the result is fetched into `result`, `result_url` is None."""
    body = _batch("completed", 2, 0, output_file_id="file-out")
    result = run({"/status": [(200, body)], OUTPUT: [(200, {"ok": 1})]}, profile=OPENAI)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == {"ok": 1}
    assert result.outcome.result_url is None


def test_the_result_url_in_an_outcome_drops_its_query() -> None:
    """A result URL may carry a signature in its query: the outcome shows it without
    (``?…`` says one was dropped), as the audit log does."""
    table = {**PROFILE, "result_url": "file"}
    body = {"status": "expired", "file": "https://files.test/out?sig=s3cret"}
    result = run({"/status": [(200, body)]}, profile=table)
    assert result.outcome.result_url == "https://files.test/out?…"


# --- 3. the status body's usage survives a result fetched from a result URL ----------


@pytest.mark.parametrize(
    ("document", "usage"),
    [({"ok": 1}, {"tokens": 7}), ({"ok": 1, "usage": {"tokens": 9}}, {"tokens": 9})],
    ids=["status-usage-kept", "document-usage-wins"],
)
def test_usage_from_the_status_body_is_kept_unless_the_document_has_its_own(
    document: dict[str, Any], usage: dict[str, Any]
) -> None:
    """The result document's usage wins when present, else the status body's stands."""
    table = {**PROFILE, "usage": "usage", "result_url": "result_url"}
    del table["result"]
    status = {"status": "done", "usage": {"tokens": 7}, "result_url": "/out"}
    result = run({"/status": [(200, status)], "/out": [(200, document)]}, profile=table)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.usage == usage
