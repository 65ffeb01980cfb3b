"""`waitbound wait --detach` and `waitbound worker`, end to end on the simulator."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.runner import cli
from waitbound import OutcomeKind, SQLiteStore
from waitbound.sim import Simulator, parse_scenario

STATE = ["--state-path", "status", "--pending", "running", "--succeeded", "done"]
PACE = ["--base-delay", "0.1s", "--max-delay", "0.2s", "--deadline", "30s"]
PACE += ["--max-requests", "2000"]
"""Looks 0.1-0.2 s apart: 2,000 requests at the 0.2 s cap cover even a 300 s deadline, so
the plan never spreads them over it (30, the default, were about 1 s and 10 s apart)."""


@pytest.mark.e2e
def test_detached_operations_are_finished_by_a_worker(tmp_path: Path) -> None:
    """Three detached waits return at once; one worker --until-idle drives them all home."""
    scenario = parse_scenario(
        {"id": "w", "endpoints": {"status": [
            {"code": 200, "body": {"status": "running"}, "repeat": 6},
            {"code": 200, "body": {"status": "done"}},
        ]}}
    )  # fmt: skip
    store = str(tmp_path / "s.db")
    with Simulator(scenario) as sim:
        # the deadline runs from each creation, before three CLI launches and the
        # worker's: a bound, never a timing check, so far past what a slow machine needs
        detach = ["wait", f"{sim.base_url}/status", *STATE, *PACE, "--deadline", "300s",
                  "--detach", "--json"]  # fmt: skip
        started = [json.loads(cli(*detach, "--store", store).stdout) for _ in range(3)]
        assert sim.count("status") == 0
        assert all(not s["done"] and "NOT complete" in s["message"] for s in started)
        done = cli("worker", "--until-idle", "--store", store, timeout=60)
    assert done.returncode == 0, done.stderr
    opened = SQLiteStore(store)
    outcomes = [opened.get(s["operation_id"]).outcome for s in started]  # type: ignore[union-attr]
    opened.close()
    assert outcomes == [OutcomeKind.SUCCEEDED] * 3


@pytest.mark.e2e
def test_sigterm_stops_a_worker_cleanly(tmp_path: Path) -> None:
    """SIGTERM: the worker finishes what is in flight, releases its leases and exits 0."""
    scenario = parse_scenario(
        {"id": "w", "endpoints": {"status": [{"code": 200, "body": {"status": "running"},
                                              "delay_s": 0.3}]}}
    )  # fmt: skip
    store = str(tmp_path / "s.db")
    with Simulator(scenario) as sim:
        op = json.loads(cli("wait", f"{sim.base_url}/status", *STATE, *PACE, "--detach",
                            "--json", "--store", store).stdout)  # fmt: skip
        worker = subprocess.Popen(
            [sys.executable, "-m", "waitbound", "worker", "--store", store],
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        end = time.monotonic() + 20
        while sim.count("status") < 2:
            assert time.monotonic() < end
            time.sleep(0.02)
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=20)
    assert worker.returncode == 0, err
    opened = SQLiteStore(store)
    record = opened.get(op["operation_id"])
    opened.close()
    assert record is not None
    assert record.lease_owner is None
    assert record.in_flight is None
    assert record.status_requests_used == sim.count("status")


def _two_origins(
    tmp_path: Path, worker_flags: Callable[[str], list[str]]
) -> tuple[tuple[list[Any], list[Any]], str]:
    """Two detached operations on two simulators (two origins); one worker drives both."""
    scenario = parse_scenario(
        {"id": "o", "endpoints": {"status": [
            {"code": 200, "body": {"status": "running"}},
            {"code": 200, "body": {"status": "done"}},
        ]}}
    )  # fmt: skip
    store = str(tmp_path / "s.db")
    with Simulator(scenario) as a, Simulator(scenario) as b:
        for sim, op in ((a, "op-a"), (b, "op-b")):
            detached = cli("wait", f"{sim.base_url}/status", *STATE, *PACE, "--detach",
                           "--operation-id", op, "--store", store)  # fmt: skip
            assert detached.returncode == 4, detached.stderr
        done = cli("worker", "--until-idle", "--store", store, "--json",
                   *worker_flags(a.base_url), timeout=60)  # fmt: skip
        logs = (a.log(), b.log())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finished"] == {"succeeded": 2}
    return logs, store


@pytest.mark.e2e
def test_worker_credentials_go_to_their_own_origin_only(tmp_path: Path) -> None:
    """--header-for ORIGIN_A: A's requests carry it, origin B's simulator sees none."""
    (a_log, b_log), _ = _two_origins(
        tmp_path, lambda a: ["--header-for", a, "Authorization: Bearer A-ONLY"]
    )
    assert [e.headers.get("Authorization") for e in a_log] == ["[redacted]", "[redacted]"]
    assert [e.headers.get("Authorization") for e in b_log] == [None, None]


@pytest.mark.e2e
def test_worker_credentials_file_binds_headers_to_origins(tmp_path: Path) -> None:
    """--credentials FILE: ${ENV} expanded; the header reaches A only, never B."""
    path = tmp_path / "creds.toml"

    def flags(a: str) -> list[str]:
        path.write_text(
            f'[[credentials]]\norigin = "{a}"\nheaders = {{ X-Api-Key = "${{WB_KEY}}" }}\n'
        )
        return ["--credentials", str(path), "--quiet"]

    os.environ["WB_KEY"] = "key-for-a-only"
    try:
        (a_log, b_log), _ = _two_origins(tmp_path, flags)
    finally:
        del os.environ["WB_KEY"]
    assert all(e.headers.get("X-Api-Key") == "[redacted]" for e in a_log)
    assert all("X-Api-Key" not in e.headers for e in b_log)


@pytest.mark.e2e
def test_worker_audit_says_a_request_went_without_credentials(tmp_path: Path) -> None:
    """B's story says its requests went without the caller's credentials."""
    _, store = _two_origins(tmp_path, lambda a: ["--header-for", a, "Authorization: Bearer A-ONLY"])
    opened = SQLiteStore(store)
    a_story = " ".join(s.event.summary for s in opened.audit("op-a"))
    b_story = " ".join(s.event.summary for s in opened.audit("op-b"))
    opened.close()
    assert "without the caller's credentials" not in a_story
    assert "without the caller's credentials" in b_story


@pytest.mark.e2e
def test_a_worker_holding_no_credentials_never_says_a_request_went_without_them(
    tmp_path: Path,
) -> None:
    """With no --header-for or --credentials at all, no story says "without the caller's
    credentials (none held for this origin)": there were none to withhold."""
    _, store = _two_origins(tmp_path, lambda a: [])
    opened = SQLiteStore(store)
    story = " ".join(s.event.summary for op in ("op-a", "op-b") for s in opened.audit(op))
    opened.close()
    assert "without the caller's credentials" not in story
    assert "status request" in story
