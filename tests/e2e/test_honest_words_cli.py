"""Words after a provider's success, through the real CLI and the real simulator: the
outcome says what was seen (issue 20). The Azure-side faults (an empty final resource,
a monitor's final body, a status body without a state, a polling header that is not a
URL) are scenarios of the Azure matrix (``tests/e2e/test_azure_matrix.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.runner import run_scenario

PROFILE = {"state": "status", "pending": ["processing"], "succeeded": ["completed"],
           "failed": ["failed"], "job_id": "id"}  # fmt: skip


def _scenario(tmp_path: Path, status: list[dict[str, object]], **wait: object) -> Path:
    path = tmp_path / "scenario.json"
    path.write_text(
        json.dumps(
            {
                "id": "honest-words",
                "description": "the status says completed; the result is not fetched",
                "endpoints": {"status": status, "result": [{"code": 200, "body": {"rows": 3}}]},
                "wait": {"profile": PROFILE, "deadline_s": 20, "base_delay_s": 0.05, **wait},
                "expect": {},
            }
        )
    )
    return path


def test_a_budget_spent_before_the_result_says_succeeded_at_the_provider(
    tmp_path: Path,
) -> None:
    """Regression: `wait --max-requests 1 --result-url …` on a job that is completed: the
    one request is the status, so the result is not fetched; the outcome says the job
    SUCCEEDED at the provider and its result is NOT available, never NOT complete."""
    done = [{"code": 200, "body": {"status": "completed", "id": "j-9"}}]
    run = run_scenario(_scenario(tmp_path, done, max_requests=1, result=True), tmp_path)
    outcome = run.outcome
    assert (outcome["outcome"], outcome["reason"]) == ("escalated", "request_budget_exhausted")
    assert (outcome["provider_outcome"], outcome["unfetched"]) == ("succeeded", "result")
    message = str(outcome["message"])
    assert message.startswith("Stopped waiting (request_budget_exhausted): Job j-9 SUCCEEDED")
    assert "NOT known to be complete" not in message
    detail = str(outcome["error"]["detail"])  # type: ignore[index]
    assert "succeeded at the provider" in detail
    assert "result was not fetched" in detail
    assert "without a terminal answer" not in detail
    assert run.count("result") == 0
    assert run.exit_code == 3


def test_a_status_body_without_a_state_stops_after_one_request(tmp_path: Path) -> None:
    """Regression: a status body with no status field stops the wait at the first
    answer (integration_failure), with no not-found grace. (Within a grace, a body
    without a state before the job was ever seen is "not visible yet", as a 404 is:
    issue 33; tests/core/test_honest_endings.py covers it.)"""
    nothing = [{"code": 200, "body": {"id": "j-9"}}]
    run = run_scenario(_scenario(tmp_path, nothing, not_found_grace_s=0), tmp_path)
    assert (run.outcome["outcome"], run.outcome["reason"]) == ("escalated", "integration_failure")
    assert run.count("status") == 1
