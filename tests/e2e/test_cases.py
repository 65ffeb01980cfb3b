"""Every handed case and canonical scenario, end to end: the real CLI in-process on virtual
time, the real simulator on loopback (see `tests/e2e/test_smoke.py` for real processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.runner import run_scenario, unmet

HERE = Path(__file__).resolve().parent.parent
EXAMPLES = HERE.parent / "examples"
SCENARIOS = [
    *sorted((HERE / "cases").glob("*.json")),
    *sorted((HERE / "scenarios").glob("*.json")),
    EXAMPLES / "slow-transcode.json",
    *sorted((HERE.parent / "src/waitbound/profiles/scenarios").glob("*.json")),
]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_reaches_expected_outcome(path: Path, tmp_path: Path) -> None:
    """`waitbound wait --json` meets every expectation the scenario file states."""
    expect = json.loads(path.read_text())["expect"]
    run = run_scenario(path, tmp_path)
    assert unmet(run, expect) == [], run.stderr
    assert run.exit_code == {"succeeded": 0, "timed_out": 3, "escalated": 3}.get(
        str(run.outcome["outcome"]), 1
    )


def test_an_in_process_scenario_run_draws_the_same_jitter_every_time(tmp_path: Path) -> None:
    """The runner seeds the command's generator: two runs of a scenario whose count of
    requests depends on the backoff's jitter send them at the same virtual times."""
    path = HERE / "cases" / "deadline-overshoot-by-backoff.json"
    first, second = (run_scenario(path, tmp_path / name) for name in ("a", "b"))
    assert [e.at_s for e in first.log] == [e.at_s for e in second.log]
    assert len(first.log) >= 4
