"""Smoke tests on real processes and real time: the scenario files run in-process on
virtual time (``test_cases.py``, ``test_azure_matrix.py``); these few run the same files
through ``python -m waitbound`` in a subprocess, so that the console entry point, the
exit codes as a shell sees them, real sleeps and two processes sharing a store are
proven too. Crash and resume: ``test_resume.py``, ``test_crash.py``; SIGTERM:
``test_stall.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.runner import cli, run_scenario, run_scenario_subprocess, unmet

HERE = Path(__file__).resolve().parent.parent
PROFILES = HERE.parent / "src/waitbound/profiles/scenarios"

#: One scenario per exit code a wait can end with (0, 1, 3 timed out, 3 escalated), and
#: one canceled by a second process while the first one waits.
SMOKE = {
    "succeeded-exit-0": (HERE.parent / "examples/slow-transcode.json", 0),
    "failed-exit-1": (HERE / "scenarios/late-failure.json", 1),
    "timed-out-exit-3": (HERE / "scenarios/timeout-returns-job-id.json", 3),
    "escalated-exit-3": (HERE / "cases/unknown-status-stops.json", 3),
    "canceled-by-another-process-exit-1": (PROFILES / "aip151-cancel.json", 1),
}


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(SMOKE))
def test_a_real_process_on_real_time_meets_the_scenario(name: str, tmp_path: Path) -> None:
    """`python -m waitbound` meets the scenario's expectations and exits with its code,
    and ends exactly as the in-process run on virtual time does."""
    path, exit_code = SMOKE[name]
    expect = json.loads(path.read_text(encoding="utf-8"))["expect"]
    real = run_scenario_subprocess(path, tmp_path / "real")
    assert unmet(real, expect) == [], real.stderr
    assert real.exit_code == exit_code, real.stderr
    virtual = run_scenario(path, tmp_path / "virtual")
    same = ("outcome", "reason", "job_id", "counts")
    assert {k: real.outcome[k] for k in same} == {k: virtual.outcome[k] for k in same}
    assert virtual.exit_code == exit_code


@pytest.mark.e2e
def test_a_usage_error_exits_2_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    """A bad flag, from a real process: exit 2, one `waitbound: error:` line, no traceback."""
    done = cli("wait", "http://127.0.0.1:9/status", "--deadline", "soon", "--store", "-", env={})
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("waitbound: error:"), done.stderr
    assert "Traceback" not in done.stderr
