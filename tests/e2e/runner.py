"""Run a scenario end to end: the real simulator on loopback and the real CLI, either
in-process on virtual time (:func:`run_scenario`, the default: the same command, its
sleeps advancing a fake clock the simulator reads too) or in a subprocess on real time
(:func:`run_scenario_subprocess`, kept for the smoke tests)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tests.cli.helpers import SUBPROCESS, in_process
from waitbound import Record
from waitbound.cli import run as cli_run
from waitbound.sim import RequestLogEntry, Scenario, Simulator, load_scenario
from waitbound.stores import SQLiteStore
from waitbound.testing import FakeClock

_WAIT_FLAGS = {
    "deadline_s": "--deadline",
    "max_requests": "--max-requests",
    "base_delay_s": "--base-delay",
    "max_delay_s": "--max-delay",
    "min_delay_s": "--min-delay",
    "max_transport_failures": "--max-transport-failures",
    "max_rate_limited": "--max-rate-limited",
    "not_found_grace_s": "--not-found-grace",
    "request_timeout_s": "--request-timeout",
    "first_poll_after_s": "--first-poll-after",
}


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``waitbound ARGS`` and capture its output: in this process on real time
    (:func:`tests.cli.helpers.in_process`), or, given an *env* (failpoints, telemetry
    exporters: what a process of its own must hold) or ``$WAITBOUND_TEST_SUBPROCESS=1``,
    as ``python -m waitbound ARGS``."""
    if env is None and not SUBPROCESS:
        code, out, err = in_process(list(args), dict(os.environ), Path.cwd())
        return subprocess.CompletedProcess(["waitbound", *args], code, out, err)
    return subprocess.run(
        [sys.executable, "-m", "waitbound", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def wait_args(
    settings: dict[str, object], base_url: str, workdir: Path, scenario_dir: Path
) -> list[str]:
    """Translate a scenario's ``wait`` settings into ``waitbound wait`` arguments.

    ``profile`` is an inline profile object, a file path relative to the scenario (ending in
    ``.json`` or ``.toml``), or a built-in profile's name (e.g. ``"azure"``).
    ``final_state_via`` becomes ``--final-state-via VALUE``.
    """
    profile = settings["profile"]
    if isinstance(profile, str) and not profile.endswith((".json", ".toml")):
        profile_arg = profile
    elif isinstance(profile, str):
        profile_arg = str(scenario_dir / profile)
    else:
        profile_path = workdir / "profile.json"
        profile_path.write_text(json.dumps(profile))
        profile_arg = str(profile_path)
    args = ["--profile", profile_arg, "--json"]
    for key, flag in _WAIT_FLAGS.items():
        if key in settings:
            args += [flag, f"{settings[key]}s" if key.endswith("_s") else str(settings[key])]
    if settings.get("result"):
        args += ["--result-url", f"{base_url}/result"]
    if "final_state_via" in settings:
        args += ["--final-state-via", str(settings["final_state_via"])]
    return args


def command(scenario: Scenario, base_url: str, workdir: Path, scenario_dir: Path) -> list[str]:
    """``run METHOD {base_url}/jobs`` when the scenario scripts a submit endpoint, else
    ``wait {base_url}/status``; then the scenario's ``wait`` settings.

    ``wait.submit_method`` (default ``POST``) and ``wait.submit_path`` (default ``/jobs``,
    query allowed) say what to submit."""
    settings = dict(scenario.wait)
    head = ["wait", f"{base_url}/status"]
    if scenario.endpoints["submit"]:
        method = str(settings.get("submit_method", "POST")).lower()
        head = ["run", method, f"{base_url}{settings.get('submit_path', '/jobs')}"]
        if "submit_body" in settings:
            body = workdir / "body.json"
            body.write_text(json.dumps(settings["submit_body"]))
            head += ["--body", str(body)]
    own = ("submit_method", "submit_path", "submit_body", "cancel_after_status_requests")
    rest = {k: v for k, v in settings.items() if k not in own}
    return [*head, *wait_args(rest, base_url, workdir, scenario_dir)]


@dataclass
class CaseRun:
    """What one end-to-end run produced."""

    outcome: dict[str, object]
    exit_code: int
    stderr: str
    elapsed_s: float  # the outcome's own elapsed_seconds: interpreter start-up is not the wait's
    log: list[RequestLogEntry]

    def count(self, endpoint: str) -> int:
        return sum(1 for entry in self.log if entry.endpoint == endpoint)

    def status_times(self) -> list[float]:
        return [entry.at_s for entry in self.log if entry.endpoint == "status"]


@dataclass
class Done:
    """What one command printed and returned (a subprocess's or an in-process run's)."""

    returncode: int
    stdout: str
    stderr: str


SEED = 20261207
"""The jitter's seed of every in-process scenario run: a scenario's outcome and request
counts are the same on every run (a subprocess run draws from the system's generator)."""


def cli_in_process(*args: str, clock: FakeClock) -> Done:
    """Run ``waitbound ARGS`` in this process through :func:`waitbound.cli.run`, its
    waits on *clock* (virtual time: its sleeps advance the clock, never the machine's),
    its jitter drawn from a generator seeded with :data:`SEED`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_run(list(args), clock=clock, sleep=clock.sleep, rng=random.Random(SEED))
    return Done(code, out.getvalue(), err.getvalue())


def run_scenario(path: Path, workdir: Path, *extra: str) -> CaseRun:
    """The scenario run as :func:`run_scenario_subprocess` runs it, in-process on virtual
    time: one :class:`~waitbound.testing.FakeClock` is the command's clock and sleep and
    the simulator's clock, so ``after_s``, gaps and ``elapsed_seconds`` are virtual
    seconds and no test waits for them (nor depends on the machine's speed).

    With ``wait.cancel_after_status_requests: k``, ``waitbound cancel`` runs (in-process,
    on the same clock) at the wait's first sleep after the simulator has answered k
    status requests: the cancel's JSON is the outcome, and the wait must end the same.
    """
    scenario = load_scenario(path)
    cancel_after = scenario.wait.get("cancel_after_status_requests")
    workdir.mkdir(parents=True, exist_ok=True)
    clock = FakeClock(limit_s=7 * 24 * 3600.0)
    with Simulator(scenario, clock=clock, sleep=clock.sleep) as simulator:
        args = command(scenario, simulator.base_url, workdir, path.parent)
        store = str(workdir / "store.db")
        args += ["--store", store, "--operation-id", "op-e2e", *extra]
        if cancel_after is None:
            done = cli_in_process(*args, clock=clock)
        else:
            done = _with_cancel_in_process(args, simulator, int(cancel_after), store, clock)  # type: ignore[call-overload]
        log = simulator.log()
    assert done.stdout.strip(), f"no JSON on stdout; stderr: {done.stderr}"
    outcome = json.loads(done.stdout)
    return CaseRun(
        outcome=outcome,
        exit_code=done.returncode,
        stderr=done.stderr,
        elapsed_s=float(outcome["elapsed_seconds"]),
        log=log,
    )


def _with_cancel_in_process(
    args: list[str], simulator: Simulator, after: int, store: str, clock: FakeClock
) -> Done:
    """Run *args*; at its first sleep once *after* status requests were answered, run
    ``waitbound cancel`` to its end; the wait then ends as the cancel says."""
    canceled: list[Done] = []

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if not canceled and simulator.count("status") >= after:
            canceled.append(
                cli_in_process(
                    "cancel", "op-e2e", "--reason", "e2e", "--store", store, "--json", clock=clock
                )
            )

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        cli_run(args, clock=clock, sleep=sleep, rng=random.Random(SEED))
    assert canceled, "the wait never reached the cancel point"
    assert canceled[0].returncode != 2, canceled[0].stderr
    waited = json.loads(out.getvalue())
    assert waited["outcome"] == json.loads(canceled[0].stdout)["outcome"], err.getvalue()
    return canceled[0]


def run_scenario_subprocess(path: Path, workdir: Path, *extra: str) -> CaseRun:
    """Serve the scenario, run ``waitbound wait`` (or ``run``) on it in a subprocess on
    real time, and collect everything.

    With ``wait.cancel_after_status_requests: k``, ``waitbound cancel`` is run once the
    simulator has answered k status requests; the cancel command's JSON is the outcome.
    """
    scenario = load_scenario(path)
    cancel_after = scenario.wait.get("cancel_after_status_requests")
    workdir.mkdir(parents=True, exist_ok=True)
    with Simulator(scenario) as simulator:
        args = command(scenario, simulator.base_url, workdir, path.parent)
        store = str(workdir / "store.db")
        args += ["--store", store, "--operation-id", "op-e2e", *extra]
        if cancel_after is None:
            done = cli(*args, env={})  # an env of its own: a real process
        else:
            done = _with_cancel(args, simulator, int(cancel_after), store)  # type: ignore[call-overload]
        log = simulator.log()
    assert done.stdout.strip(), f"no JSON on stdout; stderr: {done.stderr}"
    outcome = json.loads(done.stdout)
    return CaseRun(
        outcome=outcome,
        exit_code=done.returncode,
        stderr=done.stderr,
        elapsed_s=float(outcome["elapsed_seconds"]),
        log=log,
    )


def _with_cancel(
    args: list[str], simulator: Simulator, after: int, store: str
) -> subprocess.CompletedProcess[str]:
    """Run *args* in the background; cancel once *after* status requests were answered."""
    waiting = subprocess.Popen(
        [sys.executable, "-m", "waitbound", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        end = time.monotonic() + 30
        while simulator.count("status") < after:
            assert time.monotonic() < end, "the wait never reached the cancel point"
            time.sleep(0.02)
        canceled = cli("cancel", "op-e2e", "--reason", "e2e", "--store", store, "--json", env={})
        waited_out, waited_err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert canceled.returncode != 2, canceled.stderr
    assert json.loads(waited_out)["outcome"] == json.loads(canceled.stdout)["outcome"], waited_err
    return canceled


def wait_for_record(
    store: str, operation_id: str, ready: Callable[[Record], bool], *, ceiling_s: float = 60
) -> None:
    """Return once *operation_id* in the SQLite *store* (another process writes it) is
    *ready*; *ceiling_s* is a safety net for a process that never gets there, not a
    bound on how fast it must be."""
    end = time.monotonic() + ceiling_s
    while True:
        try:
            opened = SQLiteStore(Path(store), read_only=True)
            try:
                record = opened.get(operation_id)
            finally:
                opened.close()
            if record is not None and ready(record):
                return
        except Exception:
            pass
        assert time.monotonic() < end, f"{operation_id} never got ready ({ready.__doc__})"
        time.sleep(0.05)


def unmet(run: CaseRun, expect: dict[str, object]) -> list[str]:
    """Every ``expect`` key the run did not meet, in words (empty when all are met)."""
    problems = []
    statuses = run.count("status")
    checks: dict[str, tuple[object, bool]] = {
        "outcome": (run.outcome["outcome"], run.outcome["outcome"] == expect.get("outcome")),
        "reason": (run.outcome["reason"], run.outcome["reason"] == expect.get("reason")),
        "max_status_requests": (statuses, statuses <= expect.get("max_status_requests", 0)),  # type: ignore[operator]
        "min_status_requests": (statuses, statuses >= expect.get("min_status_requests", 0)),  # type: ignore[operator]
        "result_requests": (
            run.count("result"),
            run.count("result") == expect.get("result_requests"),
        ),
        "cancel_requests": (
            run.count("cancel"),
            run.count("cancel") == expect.get("cancel_requests"),
        ),
        "max_elapsed_s": (run.elapsed_s, run.elapsed_s <= expect.get("max_elapsed_s", 0)),  # type: ignore[operator]
        "min_elapsed_s": (run.elapsed_s, run.elapsed_s >= expect.get("min_elapsed_s", 0)),  # type: ignore[operator]
        "job_id": (run.outcome["job_id"], run.outcome["job_id"] == expect.get("job_id")),
        "last_http_status": (
            run.outcome["last_http_status"],
            run.outcome["last_http_status"] == expect.get("last_http_status"),
        ),
        "rate_limited_used": (
            run.outcome["rate_limited_used"],
            run.outcome["rate_limited_used"] == expect.get("rate_limited_used"),
        ),
        "counts": (run.outcome["counts"], run.outcome["counts"] == expect.get("counts")),
        "usage": (run.outcome["usage"], run.outcome["usage"] == expect.get("usage")),
        "result_url_path": (
            run.outcome["result_url"],
            isinstance(run.outcome["result_url"], str)
            and urlsplit(run.outcome["result_url"]).path == expect.get("result_url_path"),
        ),
    }
    if "result" in expect:
        checks["result"] = (
            run.outcome.get("result"),
            run.outcome.get("result") == expect["result"],
        )
    if "requests" in expect:
        checks["requests"] = (len(run.log), len(run.log) == expect["requests"])
    for key, (got, ok) in checks.items():
        if key in expect and not ok:
            problems.append(f"{key}: expected {expect[key]!r}, got {got!r}")
    times = run.status_times()
    for gap in expect.get("min_gap_s", []):  # type: ignore[attr-defined]
        k, seconds = gap["after_request"], gap["seconds"]
        if len(times) <= k:
            problems.append(f"min_gap_s: no status request {k + 1}")
        elif times[k] - times[k - 1] < seconds:
            problems.append(
                f"min_gap_s: {times[k] - times[k - 1]:.3f}s between status requests {k} and "
                f"{k + 1}, expected at least {seconds}s"
            )
    return problems
