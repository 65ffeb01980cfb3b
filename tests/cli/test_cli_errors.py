"""Bad input to the real ``waitbound`` command: exit 2, one clear line, nothing stored.

Every test runs ``python -m waitbound`` in a subprocess with ``WAITBOUND_STORE``
pointing into ``tmp_path``. Status URLs point at a closed port on 127.0.0.1: each
case must be refused before any request is sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

import waitbound
from tests.cli.helpers import INLINE, assert_refused, closed_port, run_cli

# Bounds a regression: if a case is not refused up front, one refused connection ends it.
NO_RETRY = ("--max-transport-failures", "0")
SECRET = "secret-token-123"


# name -> (files to write into tmp_path, arguments after the command, words the error names)
# In arguments, {url} is a status URL on a closed port and {tmp} is tmp_path.
PROFILE_OK = json.dumps({"state": "status", "pending": ["running"], "succeeded": ["done"]})
SCENARIO_OK: dict[str, object] = {"id": "x", "endpoints": {"status": [{"code": 200}]}}

CASES: dict[str, tuple[Mapping[str, str | bytes], list[str], tuple[str, ...]]] = {
    "profile-file-missing": (
        {},
        ["wait", "{url}", "--profile", "{tmp}/absent.json", *NO_RETRY],
        ("absent.json", "cannot read"),
    ),
    "profile-not-json": (
        {"p.json": '{"state": "status", "pending": [running]}'},
        ["wait", "{url}", "--profile", "{tmp}/p.json", *NO_RETRY],
        ("p.json", "not valid JSON"),
    ),
    "profile-not-utf8": (
        {"p.json": b'\xff\xfe{"state": "status"}'},
        ["wait", "{url}", "--profile", "{tmp}/p.json", *NO_RETRY],
        ("p.json",),
    ),
    "profile-toml-invalid": (
        {"p.toml": 'state = "status"\npending = [running\n'},
        ["wait", "{url}", "--profile", "{tmp}/p.toml", *NO_RETRY],
        ("p.toml", "not valid TOML"),
    ),
    "profile-unknown-key": (
        {"p.json": json.dumps({"state": "status", "pending": ["running"], "colour": "red"})},
        ["wait", "{url}", "--profile", "{tmp}/p.json", *NO_RETRY],
        ("unknown key", "colour"),
    ),
    "profile-value-in-two-lists": (
        {"p.json": json.dumps({"state": "status", "pending": ["done"], "succeeded": ["done"]})},
        ["wait", "{url}", "--profile", "{tmp}/p.json", *NO_RETRY],
        ("'done'", "both", "pending", "succeeded"),
    ),
    "profile-no-state-source": (
        {"p.json": json.dumps({"pending": ["running"], "succeeded": ["done"]})},
        ["wait", "{url}", "--profile", "{tmp}/p.json", *NO_RETRY],
        ("no state source",),
    ),
    "profile-bad-jmespath": (
        {"p.json": json.dumps({"state": "status[", "pending": ["running"]})},
        ["wait", "{url}", "--profile", "{tmp}/p.json", *NO_RETRY],
        ("JMESPath", "status["),
    ),
    "deadline-bad-unit": (
        {},
        ["wait", "{url}", *INLINE, "--deadline", "10x", *NO_RETRY],
        ("--deadline", "10x"),
    ),
    "base-delay-negative": (
        {},
        ["wait", "{url}", *INLINE, "--base-delay", "-1s", *NO_RETRY],
        ("--base-delay", "-1s"),
    ),
    "max-delay-below-base-delay": (
        {},
        ["wait", "{url}", *INLINE, "--base-delay", "10s", "--max-delay", "5s", *NO_RETRY],
        ("--max-delay", "below", "--base-delay"),
    ),
    "status-url-ftp": (
        {},
        ["wait", "ftp://x/status", *INLINE, "--store", "{tmp}/flag-store.db", *NO_RETRY],
        ("ftp://x/status", "http"),
    ),
    "status-url-not-a-url": (
        {},
        ["wait", "not a url", *INLINE, "--store", "{tmp}/flag-store.db", *NO_RETRY],
        ("not a url", "URL"),
    ),
    "status-url-broken-ipv6": (
        {},
        ["wait", "http://[::1/status", *INLINE, "--store", "{tmp}/flag-store.db", *NO_RETRY],
        ("URL",),
    ),
    "status-url-port-out-of-range": (
        {},
        [
            "wait",
            "http://127.0.0.1:99999/status",
            *INLINE,
            "--store",
            "{tmp}/flag-store.db",
            *NO_RETRY,
        ],
        ("URL", "99999"),
    ),
    "result-url-ftp": (
        {},
        ["wait", "{url}", *INLINE, "--result-url", "ftp://x/result", *NO_RETRY],
        ("result URL", "ftp://x/result"),
    ),
    "header-without-colon": (
        {},
        ["wait", "{url}", *INLINE, "--header", "NoColon", *NO_RETRY],
        ("--header", "Name: value"),
    ),
    "header-value-with-line-break": (
        {},
        [
            "wait",
            "{url}",
            *INLINE,
            "--header",
            "X-Token: abc\r\nX-Injected: 1",
            "--store",
            "{tmp}/flag-store.db",
            *NO_RETRY,
        ],
        ("--header",),
    ),
    "operation-id-bad-characters": (
        {},
        [
            "wait",
            "{url}",
            *INLINE,
            "--operation-id",
            "bad id!",
            "--store",
            "{tmp}/flag-store.db",
            *NO_RETRY,
        ],
        ("operation id", "bad id!"),
    ),
    "operation-id-empty-wait": (
        {},
        ["wait", "{url}", *INLINE, "--operation-id", "", "--store", "{tmp}/flag-store.db"],
        ("operation id", "''"),
    ),
    "operation-id-empty-run": (
        {},
        [
            "run",
            "POST",
            "{url}",
            *INLINE,
            "--operation-id",
            "",
            "--detach",
            "--store",
            "{tmp}/flag-store.db",
        ],
        ("operation id", "''"),
    ),
    "show-store-missing": (
        {},
        ["show", "op-never-made", "--store", "{tmp}/flag-store.db"],
        ("flag-store.db", "does not exist"),
    ),
    "show-env-store-missing": (
        {},
        ["show", "op-never-made"],
        ("env-store.db", "does not exist"),
    ),
    "wait-without-url-or-id": (
        {},
        ["wait", *INLINE, "--store", "{tmp}/flag-store.db"],
        ("STATUS_URL", "--operation-id"),
    ),
    "resume-store-missing": (
        {},
        ["wait", "--operation-id", "op-never-made", "--store", "{tmp}/flag-store.db"],
        ("flag-store.db", "does not exist"),
    ),
    "inline-state-path-without-lists": (
        {},
        ["wait", "{url}", "--state-path", "status", *NO_RETRY],
        ("value list",),
    ),
    "store-is-a-directory": (
        {"d/keep": ""},
        ["wait", "{url}", *INLINE, "--store", "{tmp}/d", *NO_RETRY],
        ("store",),
    ),
    "sim-scenario-missing": (
        {},
        ["sim", "{tmp}/absent-scenario.json"],
        ("absent-scenario.json", "cannot read"),
    ),
    "sim-scenario-unknown-key": (
        {"s.json": json.dumps({**SCENARIO_OK, "colour": "red"})},
        ["sim", "{tmp}/s.json"],
        ("unknown key", "colour"),
    ),
}


@pytest.mark.parametrize(("files", "args", "words"), list(CASES.values()), ids=list(CASES))
def test_bad_input_is_refused_in_one_line(
    tmp_path: Path,
    files: Mapping[str, str | bytes],
    args: list[str],
    words: tuple[str, ...],
) -> None:
    """Each bad input exits 2 with one 'waitbound: error:' line naming it; nothing stored."""
    for name, content in files.items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    url = f"http://127.0.0.1:{closed_port()}/status"
    argv = [a.replace("{url}", url).replace("{tmp}", str(tmp_path)) for a in args]
    line = assert_refused(run_cli(tmp_path, *argv), tmp_path)
    for word in words:
        assert word in line, f"{word!r} not named in: {line}"


@pytest.mark.parametrize(
    "header",
    [
        f"Authorization {SECRET}",
        f"Authorization={SECRET}",
        f"Authorization Bearer {SECRET}",
        f"Authorization;{SECRET}",
        SECRET,
    ],
    ids=["space", "equals", "bearer-space", "semicolon", "bare-token"],
)
def test_malformed_header_never_echoes_the_secret(tmp_path: Path, header: str) -> None:
    """A --header without a colon is refused without echoing its value (a credential)."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    done = run_cli(tmp_path, "wait", url, *INLINE, "--header", header, *NO_RETRY)
    line = assert_refused(done, tmp_path)
    assert "--header" in line
    assert SECRET not in done.stderr + done.stdout


def test_profile_file_and_store_flag_refusal_stores_nothing_in_either(tmp_path: Path) -> None:
    """A bad profile is refused before the --store file or the default store is written."""
    (tmp_path / "p.json").write_text(json.dumps({"state": "status"}), encoding="utf-8")
    url = f"http://127.0.0.1:{closed_port()}/status"
    done = run_cli(
        tmp_path, "wait", url, "--profile", "p.json", "--store", "flag-store.db", *NO_RETRY
    )
    assert "value list" in assert_refused(done, tmp_path)
    assert not (tmp_path / "flag-store.db").exists()
    assert not (tmp_path / "env-store.db").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--help"], "Usage: waitbound"),
        (["-h"], "Usage: waitbound"),
        (["wait", "--help"], "--deadline"),
        (["show", "--help"], "OPERATION_ID"),
        (["sim", "--help"], "SCENARIO_FILE"),
    ],
    ids=["help", "h", "wait-help", "show-help", "sim-help"],
)
def test_help_exits_zero(tmp_path: Path, args: list[str], expected: str) -> None:
    """--help prints usage on stdout and exits 0 without touching the store."""
    done = run_cli(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
    assert done.stderr == ""
    assert not (tmp_path / "env-store.db").exists()


def test_version_prints_the_version(tmp_path: Path) -> None:
    """--version prints 'waitbound' and the package version, and exits 0."""
    done = run_cli(tmp_path, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("waitbound")
    assert waitbound.__version__ in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize(
    "args",
    [["show", "op-never-made"], ["wait", "--operation-id", "op-never-made"]],
    ids=["show", "resume"],
)
def test_unknown_operation_in_an_existing_store_is_refused(tmp_path: Path, args: list[str]) -> None:
    """The store exists, the id does not: one line naming the id; the store stays empty."""
    waitbound.SQLiteStore(tmp_path / "flag-store.db").close()
    done = run_cli(tmp_path, *args, "--store", str(tmp_path / "flag-store.db"))
    line = assert_refused(done, tmp_path)
    assert "op-never-made" in line
    assert "no operation" in line
