"""The real ``waitbound`` command against hostile input: refusals, interrupts, escapes.

Every test runs ``python -m waitbound`` in a subprocess with ``WAITBOUND_STORE``
pointing into ``tmp_path``. Providers are a closed port on 127.0.0.1 or the
simulator, started in this process.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import waitbound
from tests.cli.helpers import (
    INLINE,
    assert_refused,
    cli_env,
    closed_port,
    run_cli,
)
from waitbound.sim import Simulator, parse_scenario

NO_RETRY = ("--max-transport-failures", "0")
BUILTIN = (
    "aip151",
    "anthropic-batch",
    "azure",
    "github-actions-run",
    "next-action",
    "openai-batch",
    "openai-response",
    "provider-kit",
)
FORGED = "finished outcome succeeded"


@pytest.fixture
def simulator_for() -> Iterator[Callable[[dict[str, object]], Simulator]]:
    """Start simulators for scenarios in this process; stop them all afterwards."""
    started: list[Simulator] = []

    def start(scenario: dict[str, object]) -> Simulator:
        simulator = Simulator(parse_scenario(scenario)).start()
        started.append(simulator)
        return simulator

    yield start
    for simulator in started:
        simulator.stop()


def until(condition: Callable[[], object], timeout_s: float = 20) -> None:
    """Poll *condition* every 10 ms until it holds (fail after *timeout_s*)."""
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.01)


# --- headers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "secret"),
    [
        ("Authorization: Bearer tökén", "tökén"),
        ("Authorization: Bearer t\u00f6k\u00e9n-\u2603", "\u2603"),
        ("Content-Length: 5", None),
        ("Transfer-Encoding: chunked", "chunked"),
        ("Host: evil.test", "evil.test"),
    ],
    ids=["non-ascii-value", "non-ascii-symbol", "content-length", "transfer-encoding", "host"],
)
def test_unsendable_header_is_refused_without_echoing_it(
    tmp_path: Path, header: str, secret: str | None
) -> None:
    """A non-ASCII value or a framing header exits 2 in one line; the value is not echoed."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    done = run_cli(tmp_path, "wait", url, *INLINE, "--header", header, *NO_RETRY)
    line = assert_refused(done, tmp_path)
    assert "--header" in line
    if secret is not None:
        assert secret not in done.stderr + done.stdout


# --- durations ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--deadline", "300000000000"), ("--deadline", "year")),
        (("--request-timeout", "9000000h"), ("--request-timeout", "year")),
        (
            ("--base-delay", "0.5s", "--min-delay", "5s", "--max-delay", "1s"),
            ("--min-delay", "--max-delay"),
        ),
    ],
    ids=["deadline-300e9", "request-timeout-9e6h", "floor-above-cap"],
)
def test_duration_out_of_range_is_refused_in_one_line(
    tmp_path: Path, flags: tuple[str, ...], words: tuple[str, ...]
) -> None:
    """A duration beyond a year, or a floor above the cap, exits 2 in one line naming the flag."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    line = assert_refused(run_cli(tmp_path, "wait", url, *INLINE, *flags, *NO_RETRY), tmp_path)
    for word in words:
        assert word in line, f"{word!r} not named in: {line}"


DISAGREEING = ("--max-requests", "4", "--base-delay", "1s", "--max-delay", "1s", "--deadline", "1m")
"""A budget that cannot cover its deadline at the cap: the CLI warns about it."""


@pytest.mark.parametrize(
    "command",
    [("wait", "http://\u2603.net/status"), ("run", "POST", "ftp://jobs.example/jobs")],
    ids=["wait-idna", "run-not-http"],
)
def test_bad_input_gets_its_one_line_alone_even_with_a_budget_warning(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """A URL that cannot be used is refused in one line: the budget's warning line is said
    only once the input is checked (it came first, making the refusal two lines)."""
    done = run_cli(tmp_path, *command, *INLINE, *DISAGREEING, *NO_RETRY)
    line = assert_refused(done, tmp_path)
    assert "cannot be used" in line
    assert "warning" not in done.stderr


def test_a_disagreeing_budget_is_warned_about_once_when_the_operation_is_made(
    tmp_path: Path,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/status"
    done = run_cli(tmp_path, "wait", url, *INLINE, *DISAGREEING, "--detach")
    assert done.returncode == 4, done.stderr
    [warning] = done.stderr.strip().splitlines()
    assert warning.startswith("warning: the budget and the --deadline disagree")
    assert "--max-requests or --max-delay" in warning


# --- stores -------------------------------------------------------------------------


def test_empty_store_path_is_refused(tmp_path: Path) -> None:
    """--store '' exits 2 with one line saying the path is empty."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    line = assert_refused(
        run_cli(tmp_path, "wait", url, *INLINE, "--store", "", *NO_RETRY), tmp_path
    )
    assert "empty" in line


@pytest.mark.parametrize("how", ["env", "flag"])
def test_memory_store_writes_no_file(tmp_path: Path, how: str) -> None:
    """WAITBOUND_STORE=memory: (or --store memory:) keeps nothing: no file appears at all."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    env = cli_env(tmp_path, WAITBOUND_STORE="memory:") if how == "env" else cli_env(tmp_path)
    flags = ("--store", "memory:") if how == "flag" else ()
    done = run_cli(tmp_path, "wait", url, *INLINE, *flags, *NO_RETRY, "--json", env=env)
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout)["reason"] == "provider_failure"
    assert not (tmp_path / "memory:").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --- the simulator ------------------------------------------------------------------


def test_sim_on_a_port_in_use_is_refused_in_one_line(tmp_path: Path) -> None:
    """`waitbound sim --port P` with P already bound exits 2 with one line, no traceback."""
    scenario = tmp_path / "s.json"
    scenario.write_text(
        json.dumps({"id": "x", "endpoints": {"status": [{"code": 200}]}}), encoding="utf-8"
    )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = run_cli(tmp_path, "sim", str(scenario), "--port", str(port), timeout=30)
    line = assert_refused(done, tmp_path)
    assert str(port) in line


# --- interrupts ---------------------------------------------------------------------

PENDING_FOREVER: dict[str, object] = {
    "id": "pending-forever",
    "endpoints": {"status": [{"code": 200, "body": {"status": "running", "id": "job-i"}}]},
}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupt_saves_the_operation_and_says_how_to_resume(
    tmp_path: Path, simulator_for: Callable[[dict[str, object]], Simulator], signum: int
) -> None:
    """SIGINT/SIGTERM mid-wait: exit 130 naming the id and how to resume; resuming works."""
    simulator = simulator_for(PENDING_FOREVER)
    env = cli_env(tmp_path)
    # a cap past five times the deadline: the plan keeps no request for the deadline's end
    argv = [
        sys.executable, "-m", "waitbound", "wait", f"{simulator.base_url}/status", *INLINE,
        "--job-id-path", "id", "--deadline", "30s", "--max-requests", "4",
        "--base-delay", "1s", "--max-delay", "200s", "--request-timeout", "5s",
    ]  # fmt: skip
    first = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        until(lambda: simulator.count("status") >= 1 or first.poll() is not None)
        first.send_signal(signum)
        stdout, stderr = first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 130, (first.returncode, stderr)
    assert "Traceback" not in stderr
    assert stdout == ""
    last = stderr.strip().splitlines()[-1]
    found = re.search(r"--operation-id ([A-Za-z0-9._:-]+)", last)
    assert found, last
    operation_id = found.group(1)
    assert last.startswith("waitbound: error: ")
    assert f"operation {operation_id}" in last
    second = run_cli(tmp_path, "wait", "--operation-id", operation_id, "--json", env=env)
    assert second.returncode == 3, second.stderr
    outcome = json.loads(second.stdout)
    assert outcome["operation_id"] == operation_id
    assert outcome["reason"] == "request_budget_exhausted"
    assert outcome["status_requests_used"] == 4
    assert outcome["job_id"] == "job-i"
    assert simulator.count("status") == 4


# --- control characters -------------------------------------------------------------

HOSTILE = (
    f"\u001b[31mX\n{FORGED}",
    f"\u001b]0;pwned\u0007\r{FORGED}",
    f"ok\u2028{FORGED}\u0085{FORGED}",
)
HOSTILE_IDS = ("csi-newline", "osc-carriage-return", "unicode-line-separators")


def hostile_run(
    tmp_path: Path, simulator_for: Callable[[dict[str, object]], Simulator], state: str
) -> subprocess.CompletedProcess[str]:
    """Wait on a provider whose state is a terminal escape and a forged line."""
    simulator = simulator_for(
        {"id": "hostile-state", "endpoints": {"status": [{"code": 200, "body": {"status": state}}]}}
    )
    url = f"{simulator.base_url}/status"
    done = run_cli(tmp_path, "wait", url, *INLINE, "--operation-id", "op-esc", *NO_RETRY)
    assert done.returncode == 3, done.stderr
    return done


def assert_no_forgery(text: str) -> None:
    """No raw ESC or BEL, and no line that starts with the forged text."""
    assert "\x1b" not in text
    assert "\x07" not in text
    forged = [line for line in text.splitlines() if line.lstrip().startswith(FORGED)]
    assert forged == [], forged


@pytest.mark.parametrize("state", HOSTILE, ids=HOSTILE_IDS)
def test_show_escapes_control_characters_in_a_providers_state(
    tmp_path: Path, simulator_for: Callable[[dict[str, object]], Simulator], state: str
) -> None:
    """`waitbound show` prints a hostile state escaped: no raw ESC, no forged line."""
    hostile_run(tmp_path, simulator_for, state)
    done = run_cli(tmp_path, "show", "op-esc")
    assert done.returncode == 0, done.stderr
    assert "unknown_state" in done.stdout
    assert_no_forgery(done.stdout)


@pytest.mark.parametrize("state", HOSTILE, ids=HOSTILE_IDS)
def test_wait_output_escapes_control_characters_in_a_providers_state(
    tmp_path: Path, simulator_for: Callable[[dict[str, object]], Simulator], state: str
) -> None:
    """`waitbound wait` prints the same hostile state escaped (stdout and stderr)."""
    done = hostile_run(tmp_path, simulator_for, state)
    assert "unknown_state" in done.stdout
    assert_no_forgery(done.stdout)
    assert_no_forgery(done.stderr)


@pytest.mark.parametrize("job_id", HOSTILE, ids=HOSTILE_IDS)
def test_submit_output_escapes_control_characters_in_a_providers_job_id(
    tmp_path: Path, simulator_for: Callable[[dict[str, object]], Simulator], job_id: str
) -> None:
    """`waitbound submit` prints the receipt's job id escaped: no raw ESC, no forged line."""
    simulator = simulator_for(
        {
            "id": "hostile-receipt",
            "endpoints": {
                "submit": [{"code": 202, "body": {"id": job_id, "links": {"status": "/status"}}}],
                "status": [{"code": 200, "body": {"status": "running", "id": job_id}}],
            },
        }
    )
    table = {
        "state": "status",
        "pending": ["running"],
        "succeeded": ["done"],
        "job_id": "id",
        "submit": {"status_url": "links.status"},
    }
    (tmp_path / "p.json").write_text(json.dumps(table), encoding="utf-8")
    done = run_cli(
        tmp_path, "submit", "POST", f"{simulator.base_url}/jobs", "--profile", "p.json",
        "--operation-id", "op-sub",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "op-sub: submitted" in done.stdout
    assert_no_forgery(done.stdout)
    show = run_cli(tmp_path, "show", "op-sub")
    assert show.returncode == 0, show.stderr
    assert_no_forgery(show.stdout)


# --- built-in profiles --------------------------------------------------------------


def test_profiles_lists_the_built_in_names(tmp_path: Path) -> None:
    """`waitbound profiles` prints one line per built-in profile, its name first."""
    done = run_cli(tmp_path, "profiles")
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    assert names == list(BUILTIN)


def test_profiles_show_prints_the_profile_as_json(tmp_path: Path) -> None:
    """`waitbound profiles show azure` prints that profile as JSON, named azure."""
    done = run_cli(tmp_path, "profiles", "show", "azure")
    assert done.returncode == 0, done.stderr
    profile = json.loads(done.stdout)
    assert profile["name"] == "azure"
    waitbound.parse_profile(profile, name="azure")


@pytest.mark.parametrize(
    "args",
    [
        ["profiles", "show", "nope"],
        ["wait", "http://127.0.0.1:9/status", "--profile", "nope", *NO_RETRY],
    ],
    ids=["profiles-show", "wait-profile"],
)
def test_unknown_built_in_profile_is_refused_listing_the_names(
    tmp_path: Path, args: list[str]
) -> None:
    """An unknown profile name exits 2 with one line naming it and listing the built-in names."""
    line = assert_refused(run_cli(tmp_path, *args), tmp_path)
    assert "'nope'" in line
    for name in BUILTIN:
        assert name in line, f"{name} not listed in: {line}"


# --- text that is not UTF-8 -----------------------------------------------------------

BAD = "\udcff"
"""What Python makes of the byte 0xff in an argument (``$'\\xff'`` in a shell)."""
BAD_ARGS = {
    "deliveries replay": ["deliveries", "replay", BAD],
    "deliveries --operation-id": ["deliveries", "--operation-id", BAD],
    "show": ["show", BAD],
    "audit verify": ["audit", "verify", BAD],
    "audit story": ["audit", "story", BAD],
    "audit export": ["audit", "export", BAD],
    "decide operation": ["decide", BAD, "abandon", "--why", "w"],
    "decide option": ["decide", "op-1", "a" + BAD, "--why", "w"],
    "decide --why": ["decide", "op-1", "abandon", "--why", BAD],
    "decide --by": ["decide", "op-1", "abandon", "--why", "w", "--by", BAD],
    "cancel": ["cancel", BAD],
    "cancel --reason": ["cancel", "op-1", "--reason", BAD],
    "cancel --requested-by": ["cancel", "op-1", "--requested-by", BAD],
    "escalations --label-prefix": ["escalations", "--label-prefix", BAD],
    "worker --label-prefix": ["worker", "--until-idle", "--label-prefix", BAD],
    "serve --label-prefix": ["serve", "--label-prefix", BAD],
    "wait --operation-id": ["wait", "http://127.0.0.1:9/s", *INLINE, "--detach",
                            "--operation-id", BAD],
    "wait --pending": ["wait", "http://127.0.0.1:9/s", "--state-path", "s", "--pending", "a" + BAD,
                       "--succeeded", "b", "--detach"],
    "submit --idempotency-key": ["submit", "POST", "http://127.0.0.1:9/s", *INLINE,
                                 "--idempotency-key", BAD],
}  # fmt: skip


@pytest.mark.parametrize("store_kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize("args", list(BAD_ARGS.values()), ids=list(BAD_ARGS))
def test_text_that_is_not_utf8_is_a_usage_error_before_any_store(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    store_kind: str,
) -> None:
    """An id, a label prefix, a state value or an audit note whose bytes are not UTF-8:
    exit 2, one line naming the parameter and the bytes — never exit 5 "a stored value
    is damaged", nor a traceback — whatever the store (a PostgreSQL one that is not
    even reachable: nothing is opened)."""
    from waitbound.cli import run as run_in_process

    path = tmp_path / "flag-store.db"
    spec = str(path) if store_kind == "sqlite" else f"postgresql://w@127.0.0.1:{closed_port()}/w"
    code = run_in_process([*args, "--store", spec])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert (code, captured.out) == (2, "")
    (line,) = captured.err.splitlines()
    assert re.fullmatch(
        r"waitbound: error: Invalid value for '[^']+': b'a?\\xff' is not UTF-8 text", line
    ), line
    assert not path.exists()


def test_a_non_utf8_delivery_id_from_a_shell_is_one_line_exit_2(tmp_path: Path) -> None:
    """The real bytes on a real command line (``deliveries replay $'\\xff'``)."""
    line = assert_refused(run_cli(tmp_path, "deliveries", "replay", BAD), tmp_path)
    assert line == "waitbound: error: Invalid value for 'DELIVERY_ID': b'\\xff' is not UTF-8 text"
