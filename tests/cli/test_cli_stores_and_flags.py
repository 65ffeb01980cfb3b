"""The real command and its stores, exit codes, limits, hints and JSON summaries.

Most tests run ``python -m waitbound`` in a subprocess with ``WAITBOUND_STORE`` in
``tmp_path``; the disk-full test runs the command in this process so the store can be
given a size limit.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import waitbound
from tests.cli.helpers import INLINE, assert_refused, closed_port, run_cli
from waitbound._profile._policy import policy_json
from waitbound.cli import run as run_in_process
from waitbound.cli._store_access import resume_hint
from waitbound.sim import Simulator, parse_scenario
from waitbound.stores import sqlite as sqlite_store

NO_RETRY = ("--max-transport-failures", "0", "--max-requests", "1", "--deadline", "30s")
RUNNING = {"code": 200, "body": {"status": "running"}}


@pytest.fixture
def running() -> Iterator[Simulator]:
    """A provider whose job runs forever."""
    with Simulator(parse_scenario({"id": "r", "endpoints": {"status": [RUNNING]}})) as sim:
        yield sim


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _detached(tmp_path: Path, url: str, store: Path, op: str = "op-1", *extra: str) -> None:
    done = run_cli(tmp_path, "wait", url, *INLINE, "--detach", "--operation-id", op,
                   "--store", str(store), *extra)  # fmt: skip
    assert done.returncode == 4, done.stderr


# --- stores opened for what the command does ---------------------------------------


def test_show_reads_a_read_only_copy_of_a_store_without_changing_it(
    tmp_path: Path, running: Simulator
) -> None:
    """A store copied for audit and made read-only is shown; not one byte changes."""
    store = tmp_path / "live.db"
    _detached(tmp_path, f"{running.base_url}/status", store)
    audit = tmp_path / "audit"
    audit.mkdir()
    copy = audit / "copy.db"
    copy.write_bytes(store.read_bytes())
    copy.chmod(0o444)
    audit.chmod(0o555)
    try:
        before = _digest(copy)
        done = run_cli(tmp_path, "show", "op-1", "--store", str(copy))
        assert done.returncode == 0, done.stderr
        assert "operation op-1" in done.stdout
        assert "chain intact" in done.stdout
        assert _digest(copy) == before
    finally:
        audit.chmod(0o755)


@pytest.mark.parametrize("command", [["show", "op-1"], ["worker", "--until-idle"]])
def test_a_command_that_records_nothing_never_creates_a_store(
    tmp_path: Path, command: list[str]
) -> None:
    """show / worker on a mistyped path: exit 2 'does not exist'; no file, no folder."""
    done = run_cli(tmp_path, *command, "--store", "typo/x.db")
    line = assert_refused(done, tmp_path)
    assert "typo/x.db does not exist" in line
    assert not (tmp_path / "typo").exists()
    assert not (tmp_path / "env-store.db").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["wait", "{url}", *INLINE, *NO_RETRY],
        ["show", "op-1"],
        ["worker", "--until-idle"],
        ["cancel", "op-1"],
    ],
    ids=["wait", "show", "worker", "cancel"],
)
def test_a_foreign_sqlite_database_is_refused_and_gets_no_tables(
    tmp_path: Path, command: list[str]
) -> None:
    """Another program's SQLite file: one line, exit 2; its tables and bytes untouched."""
    foreign = tmp_path / "app.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    db.commit()
    db.close()
    before = _digest(foreign)
    url = f"http://127.0.0.1:{closed_port()}/status"
    argv = [a.replace("{url}", url) for a in command]
    line = assert_refused(run_cli(tmp_path, *argv, "--store", str(foreign)), tmp_path)
    assert "not a waitbound store" in line
    assert "'invoices'" in line
    assert _digest(foreign) == before


# --- store failures: exit 5 ---------------------------------------------------------


def test_a_full_disk_mid_wait_exits_5_saying_what_to_do(
    tmp_path: Path,
    running: Simulator,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The store cannot grow mid-wait: exit 5, one line: free disk space, then resume."""
    opened = sqlite_store.SQLiteStore.__init__

    def tiny(self: sqlite_store.SQLiteStore, *args: Any, **kwargs: Any) -> None:
        opened(self, *args, **kwargs)
        (pages,) = self._db.execute("PRAGMA page_count").fetchone()
        self._db.execute(f"PRAGMA max_page_count = {pages + 1}")

    monkeypatch.setattr(sqlite_store.SQLiteStore, "__init__", tiny)
    store = tmp_path / "s.db"
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = run_in_process(
            ["wait", f"{running.base_url}/status", *INLINE, "--store", str(store),
             "--operation-id", "op-full", "--base-delay", "0.01s", "--max-delay", "0.02s",
             "--min-delay", "0.01s", "--max-requests", "500", "--deadline", "8s", "--quiet"]
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGTERM, previous)
    captured = capsys.readouterr()
    assert code == 5, captured.err
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    assert "full" in lines[0]
    assert "free disk space, then resume with `waitbound wait --operation-id op-full" in lines[0]
    assert f"--store {store}`" in lines[0]
    monkeypatch.undo()
    reopened = waitbound.SQLiteStore(store)
    record = reopened.get("op-full")
    assert record is not None
    waitbound.verify_chain(reopened.audit("op-full"), head=(record.audit_seq, record.audit_head))
    reopened.close()
    assert record.status_requests_used <= running.count("status") + 1


# --- limits -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--max-requests", str(10**12)), ("--max-requests", "100000")),
        (("--max-transport-failures", "100001"), ("--max-transport-failures", "100000")),
        (("--max-rate-limited", str(10**9)), ("--max-rate-limited", "100000")),
        (("--min-delay", "0"), ("--min-delay", "more than 0")),
        (("--min-delay", "0ms"), ("--min-delay", "more than 0")),
        (("--max-response-bytes", "1023"), ("--max-response-bytes", "1024")),
        (("--max-response-bytes", str(2**30 + 1)), ("--max-response-bytes", "1073741824")),
    ],
    ids=["requests", "transport", "rate-limited", "min-delay-0", "min-delay-0ms", "bytes-low",
         "bytes-high"],
)  # fmt: skip
def test_absurd_limits_are_refused_in_one_line_naming_the_flag_and_limit(
    tmp_path: Path, flags: tuple[str, ...], words: tuple[str, ...]
) -> None:
    """A budget past 100,000, a zero delay floor or a response cap out of range: exit 2."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    line = assert_refused(run_cli(tmp_path, "wait", url, *INLINE, *flags), tmp_path)
    for word in words:
        assert word in line, f"{word!r} not named in: {line}"


def test_max_response_bytes_caps_what_is_read_from_the_provider(tmp_path: Path) -> None:
    """A 4 KiB answer is read by default, and refused under --max-response-bytes 1024."""
    big = {"code": 200, "body": {"status": "done", "padding": "x" * 4096}}
    with Simulator(parse_scenario({"id": "big", "endpoints": {"status": [big]}})) as sim:
        url = f"{sim.base_url}/status"
        default = run_cli(tmp_path, "wait", url, *INLINE, "--json", *NO_RETRY)
        capped = run_cli(tmp_path, "wait", url, *INLINE, "--json", "--max-response-bytes",
                         "1024", *NO_RETRY)  # fmt: skip
    assert json.loads(default.stdout)["outcome"] == "succeeded", default.stderr
    outcome = json.loads(capped.stdout)
    assert outcome["outcome"] == "escalated", capped.stderr
    assert "larger than 1024 bytes" in json.dumps(outcome["error"])


# --- exit codes, hints and summaries ------------------------------------------------


def test_detach_exits_4_and_every_exit_code_is_in_the_help(tmp_path: Path) -> None:
    """--detach: still waiting, exit 4; `wait --help` lists 0, 1, 2, 3, 4, 5 and 130."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    done = run_cli(tmp_path, "wait", url, *INLINE, "--detach", "--json")
    assert done.returncode == 4, done.stderr
    assert json.loads(done.stdout)["done"] is False
    helped = run_cli(tmp_path, "wait", "--help").stdout
    text = " ".join(helped.split())
    for words in ("0 succeeded", "3 timed_out or escalated", "4 still waiting",
                  "5 the store failed", "130 interrupted"):  # fmt: skip
        assert words in text, words


def test_submit_hint_names_the_store_and_headers_but_never_a_value(tmp_path: Path) -> None:
    """The printed `waitbound wait --operation-id …` polls the same store, with header names."""
    accepted = {"code": 202, "headers": {"Location": "/status"}}
    scenario = {"id": "s", "endpoints": {"submit": [accepted], "status": [RUNNING]}}
    store = tmp_path / "my store.db"
    with Simulator(parse_scenario(scenario)) as sim:
        done = run_cli(tmp_path, "submit", "POST", f"{sim.base_url}/jobs", *INLINE,
                       "--store", str(store), "--operation-id", "op-s",
                       "--header", "Authorization: Bearer sekret-value-1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    hint = done.stdout.splitlines()[-1]
    assert hint == (
        f"wait for it: waitbound wait --operation-id op-s --store '{store}' "
        "--header 'Authorization: …'"
    )
    assert "sekret" not in done.stdout + done.stderr


def test_resume_hint_hides_a_dsn_password() -> None:
    """A PostgreSQL DSN in a hint shows user:***@, never the password."""
    hint = resume_hint("op-1", "postgresql://app:hunter2@db:5432/jobs", ["X-Api-Key"])
    assert "hunter2" not in hint
    assert "app:***@db:5432/jobs" in hint
    assert hint.endswith("--header 'X-Api-Key: …'`")


def test_cancel_no_wait_sends_the_cancel_records_the_answer_and_exits_4(tmp_path: Path) -> None:
    """--no-wait: one cancel request, no status request after it, exit 4 (still waiting)."""
    scenario = {"id": "c", "endpoints": {"status": [RUNNING], "cancel": [{"code": 202}]}}
    profile = tmp_path / "p.json"
    table = {"state": "status", "pending": ["running"], "cancel": {"always": True}}
    profile.write_text(json.dumps(table))
    store = tmp_path / "s.db"
    with Simulator(parse_scenario(scenario)) as sim:
        _detached(tmp_path, f"{sim.base_url}/status", store, "op-c", "--profile", str(profile),
                  "--cancel-url", f"{sim.base_url}/cancel")  # fmt: skip
        done = run_cli(tmp_path, "cancel", "op-c", "--no-wait", "--json", "--store", str(store))
        counts = (sim.count("cancel"), sim.count("status"))
    assert done.returncode == 4, done.stderr
    assert json.loads(done.stdout)["done"] is False
    assert counts == (1, 0)
    opened = waitbound.SQLiteStore(store)
    kinds = [s.event.kind for s in opened.audit("op-c")]
    opened.close()
    assert kinds[-1] == "cancel_answered"


def test_cancel_that_stops_prints_each_open_options_cost(tmp_path: Path) -> None:
    """A cancel the provider refuses stops the wait: its options print with their costs."""
    scenario = {"id": "c", "endpoints": {"status": [RUNNING], "cancel": [{"code": 409}]}}
    profile = tmp_path / "p.json"
    table = {"state": "status", "pending": ["running"], "cancel": {"always": True}}
    profile.write_text(json.dumps(table))
    store = tmp_path / "s.db"
    with Simulator(parse_scenario(scenario)) as sim:
        _detached(tmp_path, f"{sim.base_url}/status", store, "op-c", "--profile", str(profile),
                  "--cancel-url", f"{sim.base_url}/cancel")  # fmt: skip
        done = run_cli(tmp_path, "cancel", "op-c", "--store", str(store))
        again = run_cli(tmp_path, "show", "op-c", "--json", "--store", str(store))
    assert done.returncode == 3, done.stderr
    costs = json.loads(again.stdout)["option_costs"]
    assert costs
    for entry in costs:
        assert f"{entry['option']:<24} {entry['cost']}" in done.stdout


def test_profiles_and_db_upgrade_print_json(tmp_path: Path) -> None:
    """`profiles --json` lists names and descriptions; `db upgrade --json` its result."""
    listed = json.loads(run_cli(tmp_path, "profiles", "--json").stdout)
    assert [p["name"] for p in listed][:2] == ["aip151", "anthropic-batch"]
    assert all(set(p) == {"name", "description"} and p["description"] for p in listed)
    store = tmp_path / "s.db"
    waitbound.SQLiteStore(store).close()
    upgraded = run_cli(tmp_path, "db", "upgrade", "--store", str(store), "--json")
    assert upgraded.returncode == 0, upgraded.stderr
    assert json.loads(upgraded.stdout) == {"store": str(store), "applied": [], "version": 5}


def test_worker_refuses_a_plain_header(tmp_path: Path) -> None:
    """`worker --header`: one line pointing to --header-for ORIGIN or --credentials."""
    waitbound.SQLiteStore(tmp_path / "flag-store.db").close()
    done = run_cli(tmp_path, "worker", "--until-idle", "--store", str(tmp_path / "flag-store.db"),
                   "--header", "Authorization: Bearer A-ONLY")  # fmt: skip
    line = assert_refused(done, tmp_path)
    assert "--header-for ORIGIN" in line
    assert "--credentials" in line
    assert "A-ONLY" not in done.stderr


def test_worker_until_idle_prints_a_json_summary(tmp_path: Path, running: Simulator) -> None:
    """The summary: steps, operations finished by outcome, still waiting, errors."""
    store = tmp_path / "s.db"
    # One request (the budget's last is kept late in the deadline: issue 33's plan):
    # the worker's step finds the budget spent and escalates.
    _detached(tmp_path, f"{running.base_url}/status", store, "op-w", "--max-requests", "1",
              "--base-delay", "0.05s", "--max-delay", "600s")  # fmt: skip
    done = run_cli(tmp_path, "worker", "--until-idle", "--store", str(store), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "stopped": "idle",
        "steps": 2,
        "finished": {"escalated": 1},
        "operations_finished": 1,
        "still_waiting": 0,
        "errors": [],
    }
    text = run_cli(tmp_path, "worker", "--until-idle", "--store", str(store))
    assert text.stdout.startswith("worker stopped (idle) after 0 steps: 0 operations finished")


# --- --first-poll-after -------------------------------------------------------------


def test_first_poll_after_waits_before_the_first_request(tmp_path: Path) -> None:
    """wait --first-poll-after 1s: the job's first status request is sent a second after
    the start, not at once; the record says why (delay source first_poll_after)."""
    done_body = {"code": 200, "body": {"status": "done"}}
    store = tmp_path / "s.db"
    with Simulator(parse_scenario({"id": "d", "endpoints": {"status": [done_body]}})) as sim:
        done = run_cli(tmp_path, "wait", f"{sim.base_url}/status", *INLINE, "--json",
                       "--first-poll-after", "1s", "--operation-id", "op-f",
                       "--store", str(store))  # fmt: skip
        requests = sim.count("status")
    outcome = json.loads(done.stdout)
    assert outcome["outcome"] == "succeeded", done.stderr
    assert requests == 1
    assert outcome["elapsed_seconds"] >= 1.0
    opened = waitbound.SQLiteStore(store)
    try:
        created = opened.audit("op-f")[0].event
    finally:
        opened.close()
    assert created.data["delay_source"] == "first_poll_after"
    assert created.data["next_poll_at"] == (created.at + timedelta(seconds=1)).isoformat()


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--first-poll-after", "10m"), ("--first-poll-after (600s)", "--deadline (600s)")),
        (
            ("--first-poll-after", "2m", "--business-deadline", "1m"),
            ("--first-poll-after (120s)", "--business-deadline (60s)"),
        ),
        (("--first-poll-after", "soon"), ("--first-poll-after", "not a duration")),
    ],
    ids=["at-the-deadline", "past-the-business-deadline", "not-a-duration"],
)
def test_a_first_poll_after_not_before_the_deadline_is_refused(
    tmp_path: Path, flags: tuple[str, ...], words: tuple[str, ...]
) -> None:
    """--first-poll-after at or past the deadline: exit 2, one line naming both flags."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    line = assert_refused(run_cli(tmp_path, "wait", url, *INLINE, *flags), tmp_path)
    for word in words:
        assert word in line, f"{word!r} not named in: {line}"


def test_first_poll_after_without_a_status_url_is_refused(tmp_path: Path) -> None:
    """Resuming by --operation-id alone with --first-poll-after: exit 2, one line."""
    line = assert_refused(
        run_cli(tmp_path, "wait", "--operation-id", "op-1", "--first-poll-after", "5s"), tmp_path
    )
    assert "--first-poll-after is set when an operation is created" in line


def test_origin_pacing_flag_is_stored_in_the_policy(tmp_path: Path, running: Simulator) -> None:
    """``--origin-pacing`` sets ``Policy.origin_pacing``; without it the policy stores no
    such field (a record written before it encodes as it did)."""
    store = tmp_path / "s.db"
    _detached(tmp_path, f"{running.base_url}/status", store, "paced", "--origin-pacing")
    _detached(tmp_path, f"{running.base_url}/status", store, "plain")
    opened = waitbound.SQLiteStore(store)
    try:
        paced, plain = opened.get("paced"), opened.get("plain")
        assert paced is not None
        assert plain is not None
        assert paced.policy.origin_pacing is True
        assert plain.policy.origin_pacing is False
        assert "origin_pacing" not in policy_json(plain.policy)
    finally:
        opened.close()
