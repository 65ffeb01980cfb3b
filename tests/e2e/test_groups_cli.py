"""`waitbound wait-all` / `wait-any` on the real CLI against the real simulator: the
group's exit codes, its budget stopping it, and `show` / `escalations` listing it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.runner import cli
from waitbound.sim import Simulator, parse_scenario

STATE = ["--state-path", "status", "--pending", "running", "--succeeded", "done"]
PACE = ["--base-delay", "0.1s", "--max-delay", "0.2s", "--deadline", "60s"]


def _detach(store: str, base_url: str, operation_id: str) -> None:
    done = cli("wait", f"{base_url}/status", *STATE, *PACE, "--detach",
               "--operation-id", operation_id, "--store", store)  # fmt: skip
    assert done.returncode == 4, done.stderr


@pytest.mark.e2e
def test_wait_all_waits_for_every_member_and_exits_as_wait_does(tmp_path: Path) -> None:
    """Two detached operations: wait-all --json ends both (exit 0), prints the group id,
    each outcome and the group's spending; show GROUP lists the members."""
    scenario = parse_scenario(
        {"id": "group-ok", "endpoints": {"status": [
            {"code": 200, "body": {"status": "running"}, "repeat": 2},
            {"code": 200, "body": {"status": "done"}},
        ]}}
    )  # fmt: skip
    store = str(tmp_path / "s.db")
    with Simulator(scenario) as sim:
        _detach(store, sim.base_url, "op-a")
        _detach(store, sim.base_url, "op-b")
        done = cli("wait-all", "op-a", "op-b", "--max-requests", "10", "--deadline", "30s",
                   "--json", "--store", store)  # fmt: skip
        assert done.returncode == 0, done.stderr
        printed = json.loads(done.stdout)
        assert printed["kind"] == "all"
        assert printed["stopped"] is None
        assert printed["pending"] == []
        assert sorted(printed["done"]) == ["op-a", "op-b"]
        assert [o["outcome"] for o in printed["outcomes"]] == ["succeeded", "succeeded"]
        assert printed["requests_used"] == sim.count("status") <= 10
        shown = cli("show", printed["group_id"], "--store", store)
        assert shown.returncode == 0, shown.stderr
        assert f"group {printed['group_id']} (all): done" in shown.stdout
        assert "op-a: succeeded" in shown.stdout
        member = cli("show", "op-a", "--json", "--store", store)
        assert json.loads(member.stdout)["groups"] == [printed["group_id"]]


@pytest.mark.e2e
def test_a_group_stopped_by_its_budget_exits_3_and_escalations_lists_it(tmp_path: Path) -> None:
    """A job that never ends: wait-any --max-requests 2 sends 2 requests, stops
    request_budget_exhausted (exit 3), leaves the members waiting; escalations names
    the group and its waiting members; wait-all --group resumes it and sends nothing
    more (its budget is spent)."""
    scenario = parse_scenario(
        {
            "id": "group-stuck",
            "endpoints": {"status": [{"code": 200, "body": {"status": "running"}}]},
        }
    )
    store = str(tmp_path / "s.db")
    with Simulator(scenario) as sim:
        _detach(store, sim.base_url, "op-a")
        _detach(store, sim.base_url, "op-b")
        done = cli("wait-any", "op-a", "op-b", "--max-requests", "2", "--group",
                   "grp_00000000000000000001", "--store", store)  # fmt: skip
        assert done.returncode == 3, done.stderr
        assert "stopped (request_budget_exhausted); 2 of 2 requests used" in done.stdout
        assert sim.count("status") == 2
        listed = cli("escalations", "--json", "--store", store)
        assert listed.returncode == 0, listed.stderr
        (group,) = json.loads(listed.stdout)["stopped_groups"]
        assert (group["group_id"], group["reason"]) == (
            "grp_00000000000000000001",
            "request_budget_exhausted",
        )
        assert [m["state"] for m in group["members"]] == ["waiting", "waiting"]
        text = cli("escalations", "--store", store)
        assert "stopped at its own bound (request_budget_exhausted)" in text.stdout
        again = cli("wait-all", "--group", "grp_00000000000000000001", "--json", "--store", store)
        assert again.returncode == 3, again.stderr
        assert json.loads(again.stdout)["requests_used"] == 2
        assert sim.count("status") == 2
        refused = cli("wait-all", "--store", store)
        assert refused.returncode == 2
        assert "Traceback" not in refused.stderr


@pytest.mark.e2e
def test_wait_all_killed_after_a_reservation_resumes_with_the_groups_spending(
    tmp_path: Path,
) -> None:
    """`wait-all` dies by SIGKILL right after its 3rd request was counted and persisted
    (failpoint ``reserved:3``, before it is sent); `wait-all --group` resumes: the group
    goes on from 3 counted requests, sends at most its budget of 5 across both runs,
    and stops on it."""
    scenario = parse_scenario(
        {
            "id": "group-kill",
            "endpoints": {"status": [{"code": 200, "body": {"status": "running"}}]},
        }
    )
    store = str(tmp_path / "s.db")
    group = "grp_0000000000000000000a"
    with Simulator(scenario) as sim:
        _detach(store, sim.base_url, "op-a")
        _detach(store, sim.base_url, "op-b")
        killed = cli("wait-all", "op-a", "op-b", "--max-requests", "5", "--group", group,
                     "--store", store, env={"WAITBOUND_FAILPOINT": "reserved:3"})  # fmt: skip
        assert killed.returncode == -9, killed.stderr
        assert sim.count("status") == 2  # the 3rd was counted, never sent
        shown = json.loads(cli("show", group, "--json", "--store", store).stdout)["group"]
        assert (shown["state"], shown["requests_used"]) == ("waiting", 3)
        resumed = cli("wait-all", "--group", group, "--json", "--store", store)
        assert resumed.returncode == 3, resumed.stderr
        printed = json.loads(resumed.stdout)
        assert (printed["stopped"], printed["requests_used"]) == ("request_budget_exhausted", 5)
        assert sim.count("status") <= 5
