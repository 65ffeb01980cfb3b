"""Decisions end to end: the real CLI against the real simulator on loopback.

A wait that exhausts its request budget is listed by ``waitbound escalations``; a
person's ``waitbound decide … extend`` lets ``waitbound wait --operation-id`` continue
the same operation to ``succeeded`` within the grant, and the story shows who decided
what and the ``manual_extension`` that followed. A second decision conflicts; bad input
is one line, exit 2, and changes nothing.
"""

from __future__ import annotations

import getpass
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.runner import cli, cli_in_process
from waitbound.sim import Scenario, Simulator, parse_scenario
from waitbound.testing import FakeClock

pytestmark = pytest.mark.e2e

PROFILE = {
    "state": "status",
    "pending": ["queued", "running"],
    "succeeded": ["done"],
    "failed": ["failed"],
    "job_id": "id",
    "result": "output",
}

SCENARIO = {
    "id": "decide-extend",
    "description": "Running for four answers, then done: a budget of 3 runs out first.",
    "endpoints": {
        "status": [
            {"code": 200, "body": {"id": "exp_71c", "status": "running"}, "repeat": 4},
            {"code": 200, "body": {"id": "exp_71c", "status": "done", "output": {"rows": 12}}},
        ]
    },
}

OP = "report-export-01"


def _virtual(scenario: Scenario) -> Simulator:
    """The simulator on a virtual clock its commands share (:meth:`Setup.run`), started
    at the machine's time (a command that reads no injected clock sees the same day)."""
    clock = FakeClock(datetime.now(UTC), limit_s=7 * 24 * 3600.0)
    return Simulator(scenario, clock=clock, sleep=clock.sleep)


@dataclass
class Setup:
    sim: Simulator
    store: str
    profile: str

    def run(self, *args: str) -> tuple[int, str, str]:
        """The command in process on the simulator's virtual clock (the plan spreads a
        3-request budget over its deadline, a grant's checks over its minutes)."""
        clock = self.sim.clock
        assert isinstance(clock, FakeClock)
        done = cli_in_process(*args, "--store", self.store, clock=clock)
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, done.stdout, done.stderr

    def json(self, *args: str) -> tuple[int, dict[str, Any]]:
        code, out, err = self.run(*args, "--json")
        assert out.strip(), err
        return code, json.loads(out)


@pytest.fixture
def escalated(tmp_path: Path) -> Iterator[Setup]:
    """An operation that stopped with request_budget_exhausted after 3 status requests."""
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    with _virtual(parse_scenario(SCENARIO)) as sim:
        setup = Setup(sim=sim, store=str(tmp_path / "store.db"), profile=str(profile))
        code, outcome = setup.json(
            "wait",
            f"{sim.base_url}/status",
            "--profile",
            str(profile),
            "--operation-id",
            OP,
            "--max-requests",
            "3",
            "--base-delay",
            "0.05s",
            "--max-delay",
            "0.1s",
            "--min-delay",
            "0.05s",
            "--deadline",
            "2m",
        )
        assert (code, outcome["reason"]) == (3, "request_budget_exhausted"), outcome
        assert sim.count("status") == 3
        assert "extend" in outcome["options"]
        costs = {row["option"]: row["cost"] for row in outcome["option_costs"]}
        assert costs["extend"].startswith("extend waiting once by")
        yield setup


def _extend(setup: Setup) -> tuple[int, dict[str, Any]]:
    return setup.json(
        "decide", OP, "extend", "--minutes", "1", "--checks", "3", "--why", "quarter close",
        "--by", "ann",
    )  # fmt: skip


def _fingerprint(store: str) -> tuple[object, ...]:
    """The stored record and audit log, to show that a refused command changed nothing."""
    db = sqlite3.connect(store)
    try:
        return tuple(db.execute("SELECT * FROM operations").fetchall()) + tuple(
            db.execute("SELECT * FROM audit_events").fetchall()
        )
    finally:
        db.close()


def test_extend_continues_the_same_operation_to_success_within_the_grant(
    escalated: Setup,
) -> None:
    """escalations lists the stopped wait with extend; decide extend --checks 3 lets
    `wait --operation-id` finish it with at most 3 more requests; show tells the story."""
    setup = escalated
    code, listed = setup.json("escalations")
    assert code == 0
    assert [e["operation_id"] for e in listed["escalations"]] == [OP]
    (open_request,) = listed["escalations"]
    assert "extend" in [o["option"] for o in open_request["options"]]
    assert "Status requests: 3 of 3" in open_request["message"]
    assert "Stopped because: request_budget_exhausted" in open_request["message"]

    code, decided = _extend(setup)
    assert code == 0, decided
    assert decided["decision"]["option"] == "extend"
    assert decided["decision"]["by"] == f"ann (os user {getpass.getuser()})"
    assert decided["outcome"]["done"] is False
    assert decided["continue_with"].startswith(f"waitbound wait --operation-id {OP} --store ")

    code, outcome = setup.json("wait", "--operation-id", OP)
    assert code == 0, outcome
    assert outcome["outcome"] == "succeeded"
    assert outcome["result"] == {"rows": 12}
    assert setup.sim.count("status") - 3 <= 3
    assert outcome["status_requests_used"] == setup.sim.count("status")

    code, story, err = setup.run("show", OP, "--events")
    assert code == 0, err
    assert f"decided by ann (os user {getpass.getuser()}): extend (quarter close)" in story
    assert "manual_extension" in story
    assert "chain intact" in story
    code, listed = setup.json("escalations")
    assert listed["escalations"] == []


def test_a_second_decision_conflicts_naming_the_first(escalated: Setup) -> None:
    """The first decision wins; a second one is refused with who decided, and changes
    nothing."""
    assert _extend(escalated)[0] == 0
    before = _fingerprint(escalated.store)
    code, out, err = escalated.run("decide", OP, "abandon", "--why", "too late", "--by", "bob")
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1, err
    assert f"decided first by ann (os user {getpass.getuser()})" in err
    assert _fingerprint(escalated.store) == before


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("decide", OP, "mark_succeeded", "--why", "x"), "is not open"),
        (("decide", OP, "extend", "--minutes", "500", "--why", "x"), "beyond the ceiling"),
        (("decide", OP, "extend", "--checks", "0", "--why", "x"), "checks must be"),
        (("decide", "no-such-op", "extend", "--why", "x"), "no operation"),
        (("decide", OP, "extend"), "--why is required"),
        (("decide", OP, "extend", "--why", "  "), "--why is required"),
        (("decide", OP, "frobnicate", "--why", "x"), "is not open"),
        (("decide", OP, "extend", "--minutes", "1e-12", "--why", "x"), "below the minimum"),
    ],
    ids=["not-offered", "beyond-ceiling", "no-checks", "unknown-id", "no-why", "blank-why",
         "no-such-option", "below-minimum"],
)  # fmt: skip
def test_bad_decisions_are_one_line_and_change_nothing(
    escalated: Setup, args: tuple[str, ...], says: str
) -> None:
    """Every bad decision: exit 2, one error line saying what, the store unchanged."""
    before = _fingerprint(escalated.store)
    code, out, err = escalated.run(*args)
    assert (code, out) == (2, ""), err
    assert len(err.splitlines()) == 1, err
    assert says in err
    assert _fingerprint(escalated.store) == before
    assert escalated.sim.count("status") == 3


def test_a_decision_on_a_running_operation_is_refused(tmp_path: Path) -> None:
    """A detached, still running operation has no decision request: decide refuses it."""
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    store = str(tmp_path / "store.db")
    with Simulator(parse_scenario(SCENARIO)) as sim:
        started = cli(
            "wait", f"{sim.base_url}/status", "--profile", str(profile), "--operation-id", OP,
            "--detach", "--store", store,
        )  # fmt: skip
        assert started.returncode == 4, started.stderr
        before = _fingerprint(store)
        done = cli("decide", OP, "extend", "--why", "x", "--store", store)
        assert (done.returncode, done.stdout) == (2, "")
        assert "no open decision request" in done.stderr
        assert len(done.stderr.splitlines()) == 1
        assert _fingerprint(store) == before
        listed = cli("escalations", "--store", store)
        assert (listed.returncode, listed.stdout) == (0, "nothing waits on a decision\n")


# --- decisions x cancel: a person's cancel is carried out, a refusal is said ----------

CANCEL_PROFILE = {
    **PROFILE,
    "canceled": ["canceled"],
    "cancelable": "can_cancel",
    "cancel": {"url_template": "cancel"},
}
RUNNING_CANCELABLE = {"code": 200, "body": {"id": "j-9", "status": "running", "can_cancel": True}}


def _stopped_cancelable(tmp_path: Path, sim: Simulator) -> Setup:
    """A wait on *sim* that stopped request_budget_exhausted after 3 cancelable answers."""
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(CANCEL_PROFILE))
    setup = Setup(sim=sim, store=str(tmp_path / "store.db"), profile=str(profile))
    code, outcome = setup.json(
        "wait", f"{sim.base_url}/status", "--profile", str(profile), "--operation-id", OP,
        "--max-requests", "3", "--base-delay", "0.05s", "--max-delay", "0.1s",
        "--min-delay", "0.05s", "--deadline", "3m",
    )  # fmt: skip
    assert (code, outcome["reason"]) == (3, "request_budget_exhausted"), outcome
    assert "cancel" in outcome["options"]
    return setup


def test_a_decided_cancel_with_the_default_grant_ends_canceled(tmp_path: Path) -> None:
    """Regression (issue 20): `decide OP cancel` with the default grant (one check) after
    a budget stop; `wait --operation-id` sends the cancel AND the status check after it,
    and the provider's canceled is the outcome. The cancel's cost is stated."""
    scenario = {
        "id": "decide-cancel",
        "description": "Cancelable and running for three answers, then canceled.",
        "endpoints": {
            "status": [
                {**RUNNING_CANCELABLE, "repeat": 3},
                {"code": 200, "body": {"id": "j-9", "status": "canceled"}},
            ],
            "cancel": [{"code": 202, "body": {}}],
        },
    }
    with _virtual(parse_scenario(scenario)) as sim:
        setup = _stopped_cancelable(tmp_path, sim)
        code, listed = setup.json("escalations")
        (request,) = listed["escalations"]
        costs = {o["option"]: o["cost"] for o in request["options"]}
        assert costs["cancel"].startswith("cancel at provider: 1 cancel request plus 1 more check")
        code, out, err = setup.run("decide", OP, "cancel", "--why", "wrong input", "--by", "ann")
        assert code == 0, err
        assert f"continue it: waitbound wait --operation-id {OP}" in out
        assert "the grant's deadline: after it nothing is sent" in out
        code, outcome = setup.json("wait", "--operation-id", OP)
        assert (code, outcome["outcome"]) == (1, "canceled"), outcome
        assert sim.count("cancel") == 1
        assert sim.count("status") == 3 + 1


def test_a_refused_cancel_stops_at_once_and_the_outcome_says_so(tmp_path: Path) -> None:
    """Regression (issue 20, issue 33): `waitbound cancel` of a stopped, cancelable job
    (accepted: its options list cancel) that the provider refuses with 409: no polling on
    until the budget is spent, only the one status look that tells whether the job
    already ended; still running: escalated / cancel_not_accepted, the refusal in the
    outcome, the job's last state kept."""
    scenario = {
        "id": "cancel-refused",
        "description": "Cancelable and running forever; the cancel is refused with 409.",
        "endpoints": {
            "status": [RUNNING_CANCELABLE],
            "cancel": [{"code": 409, "body": {"error": "job_not_cancelable"}}],
        },
    }
    with _virtual(parse_scenario(scenario)) as sim:
        setup = _stopped_cancelable(tmp_path, sim)
        code, outcome = setup.json("cancel", OP, "--reason", "wrong input", "--requested-by", "ann")
        assert code == 3, outcome
        assert (outcome["outcome"], outcome["reason"]) == ("escalated", "cancel_not_accepted")
        assert outcome["provider_state"] == "running"
        assert "the cancel decided by ann at" in outcome["error"]["detail"]
        assert "was refused by the provider (HTTP 409)" in outcome["error"]["detail"]
        assert "the status look after it showed the job still" in outcome["error"]["detail"]
        assert "cancel" in outcome["options"]  # the look said it is cancelable
        assert sim.count("cancel") == 1
        assert sim.count("status") == 4  # one look after the refusal, then stopped


def test_decide_as_requested_grants_the_agents_proposal(escalated: Setup) -> None:
    """Regression (issue 33): `waitbound decide ID as-requested` grants what the agent
    proposed with request_extension (here 1.5 minutes, 2 checks); the option is listed
    with its cost; minutes given with it are refused in one line, exit 2."""
    import waitbound

    store = waitbound.open_store(escalated.store)
    try:
        waitbound.request_extension(
            OP, minutes=1.5, checks=2, why="slow export", by="agent:mcp", store=store
        )
    finally:
        store.close()
    code, listed = escalated.json("escalations")
    assert code == 0
    options = {o["option"]: o["cost"] for o in listed["escalations"][0]["options"]}
    assert (
        "as agent:mcp requested: by at least 1.5 minutes with 2 more checks"
        in (options["as_requested"])
    )
    code, _, err = escalated.run(
        "decide", OP, "as-requested", "--minutes", "2", "--why", "x", "--by", "ann"
    )
    assert code == 2
    assert "minutes and checks do not apply" in err
    assert "\n" not in err.strip()
    code, decided = escalated.json("decide", OP, "as-requested", "--why", "ok", "--by", "ann")
    assert code == 0, decided
    assert decided["decision"]["option"] == "as_requested"
    grant = decided["decision"]["detail"]["grant"]
    assert (grant["minutes"], grant["checks"]) == (1.5, 2)
    after = decided["decision"]["detail"]["limits_after"]
    assert after["max_requests"] == 3 + 2
