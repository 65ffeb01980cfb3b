"""The Azure long-running-operation matrix, end to end: `waitbound run … --profile azure --json`.

The scenarios live in ``tests/scenarios/azure/`` (generated from the table in
``generate.py``; each cites the Azure rule it checks). Every one must reach its outcome,
its exact result and its exact request count through the real CLI and the real simulator.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.runner import run_scenario, unmet
from tests.scenarios.azure import generate

MATRIX = sorted(generate.HERE.glob("*.json"))
EXIT_CODES = {"succeeded": 0, "timed_out": 3, "escalated": 3}


def test_the_matrix_files_are_current() -> None:
    """The checked-in JSON is exactly what the generator writes (run it after editing the table)."""
    wanted = generate.files()
    assert sorted(wanted) == MATRIX, "run: python -m tests.scenarios.azure.generate"
    stale = [path.name for path, text in wanted.items() if path.read_text(encoding="utf-8") != text]
    assert stale == [], "run: python -m tests.scenarios.azure.generate"


def test_the_matrix_covers_the_contract() -> None:
    """Every method, polling header, first-answer code and final-state-via appears."""
    data = [json.loads(path.read_text(encoding="utf-8")) for path in MATRIX]
    methods = {d["wait"]["submit_method"] for d in data}
    firsts = {d["endpoints"]["submit"][-1]["code"] for d in data}
    headers = {h for d in data for h in d["endpoints"]["submit"][-1].get("headers", {})}
    via = {d["wait"].get("final_state_via") for d in data}
    outcomes = {d["expect"]["outcome"] for d in data}
    assert methods == {"PUT", "PATCH", "POST", "DELETE"}
    assert {200, 201, 202, 204} <= firsts
    assert {"Azure-AsyncOperation", "Operation-Location", "Location"} <= headers
    assert any(not d["endpoints"]["submit"][-1].get("headers") for d in data)
    assert via == {None, "location", "original-uri", "azure-async-operation", "operation-location"}
    assert outcomes == {"succeeded", "failed", "canceled", "escalated"}
    assert 40 <= len(data) <= 75


@pytest.mark.parametrize("path", MATRIX, ids=lambda p: p.stem)
def test_azure_scenario(path: Path, tmp_path: Path) -> None:
    """`waitbound run … --profile azure --json` meets the scenario's outcome, result, requests."""
    expect = json.loads(path.read_text(encoding="utf-8"))["expect"]
    run = run_scenario(path, tmp_path)
    trace = [f"{e.method} {e.path} -> {e.code}" for e in run.log]
    assert unmet(run, expect) == [], f"{trace}\n{run.stderr}"
    assert run.exit_code == EXIT_CODES.get(expect["outcome"], 1)
