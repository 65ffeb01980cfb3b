"""Submissions are never sent twice blindly; credentials stay on their origin (real CLI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.runner import cli
from waitbound import SQLiteStore
from waitbound.sim import Simulator, parse_scenario

STATE = ["--state-path", "status", "--pending", "running", "--succeeded", "done"]
FAST = ["--base-delay", "0.1s", "--max-delay", "0.2s", "--deadline", "20s", "--json"]


def _scenario(endpoints: dict[str, Any]) -> Any:
    return parse_scenario({"id": "submit-e2e", "endpoints": endpoints})


@pytest.mark.e2e
def test_a_dropped_submission_is_never_sent_again_without_a_key(tmp_path: Path) -> None:
    """The connection drops after the job request arrived: one request, then escalated."""
    scenario = _scenario({"submit": [{"drop": True}], "status": [{"code": 200}]})
    with Simulator(scenario) as sim:
        done = cli("run", "POST", f"{sim.base_url}/jobs", *STATE, *FAST,
                   "--store", str(tmp_path / "s.db"))  # fmt: skip
        submits = sim.count("submit")
    outcome = json.loads(done.stdout)
    assert submits == 1
    assert outcome["outcome"] == "escalated"
    assert outcome["reason"] == "provider_failure"
    assert "may have created a job" in outcome["error"]["detail"]


@pytest.mark.e2e
def test_a_dropped_submission_is_sent_again_only_with_the_same_key(tmp_path: Path) -> None:
    """With an idempotency key, the resend carries the key header again; then the job is waited on.

    The simulator's log redacts the key's value (its name holds "key"); that the very same
    value is sent is checked against the stored key and in tests/core/test_submit.py.
    """
    scenario = _scenario(
        {
            "submit": [{"drop": True}, {"code": 202, "headers": {"Location": "/status"}}],
            "status": [{"code": 200, "body": {"status": "running"}},
                       {"code": 200, "body": {"status": "done"}}],
        }
    )  # fmt: skip
    with Simulator(scenario) as sim:
        done = cli("run", "POST", f"{sim.base_url}/jobs", *STATE, *FAST,
                   "--idempotency-key", "order-42", "--store", str(tmp_path / "s.db"),
                   "--operation-id", "op-key")  # fmt: skip
        submits = [e for e in sim.log() if e.endpoint == "submit"]
    assert json.loads(done.stdout)["outcome"] == "succeeded"
    assert [e.headers.get("Idempotency-Key") for e in submits] == ["[redacted]", "[redacted]"]
    opened = SQLiteStore(tmp_path / "s.db")
    assert opened.get("op-key").idempotency_key == "order-42"  # type: ignore[union-attr]
    opened.close()


@pytest.mark.e2e
@pytest.mark.parametrize("trusted", [False, True])
def test_a_foreign_status_url_is_polled_without_credentials(tmp_path: Path, trusted: bool) -> None:
    """The receipt points at another origin: polled without the header unless trusted."""
    foreign = _scenario({"status": [{"code": 200, "body": {"status": "done"}}]})
    with Simulator(foreign) as elsewhere:
        home = _scenario(
            {"submit": [{"code": 202, "headers": {"Location": f"{elsewhere.base_url}/status"}}]}
        )
        with Simulator(home) as sim:
            store = tmp_path / "s.db"
            extra = ["--trust-origin", elsewhere.base_url] if trusted else []
            done = cli("run", "POST", f"{sim.base_url}/jobs", *STATE, *FAST, *extra,
                       "--header", "Authorization: Bearer secret-T", "--store", str(store),
                       "--operation-id", "op-cred")  # fmt: skip
            home_log = sim.log()
        foreign_log = elsewhere.log()
    assert json.loads(done.stdout)["outcome"] == "succeeded"
    assert home_log[0].headers.get("Authorization") == "[redacted]"
    polled = [e.headers.get("Authorization") for e in foreign_log]
    assert polled == (["[redacted]"] if trusted else [None])
    opened = SQLiteStore(store)
    story = " ".join(s.event.summary for s in opened.audit("op-cred"))
    stored = json.dumps(opened.get("op-cred").to_json())  # type: ignore[union-attr]
    opened.close()
    assert ("without the caller's credentials" in story) is not trusted
    assert "secret-T" not in story + stored


@pytest.mark.e2e
def test_a_receipt_without_a_status_resource_is_one_clear_escalation(tmp_path: Path) -> None:
    """A 202 that names no status resource: escalated integration_failure, nothing guessed."""
    scenario = _scenario({"submit": [{"code": 202, "body": {"accepted": True}}]})
    with Simulator(scenario) as sim:
        done = cli("run", "POST", f"{sim.base_url}/jobs", *STATE, *FAST,
                   "--store", str(tmp_path / "s.db"))  # fmt: skip
        statuses = sim.count("status")
    outcome = json.loads(done.stdout)
    assert outcome["reason"] == "integration_failure"
    assert "named no status resource" in outcome["error"]["detail"]
    assert statuses == 0
