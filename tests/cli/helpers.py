"""Running the real ``waitbound`` command in tests, and judging its refusals."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path

import waitbound
from waitbound.cli import run as cli_run

SRC = str(Path(waitbound.__file__).resolve().parents[1])
INLINE = ("--state-path", "status", "--pending", "running", "--succeeded", "done")


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI run: the store in *tmp_path*, this checkout's sources."""
    env = dict(os.environ)
    env["WAITBOUND_STORE"] = str(tmp_path / "env-store.db")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    env.pop("COLUMNS", None)
    env.update(extra)
    return env


SUBPROCESS = os.environ.get("WAITBOUND_TEST_SUBPROCESS") == "1"
"""Set ``WAITBOUND_TEST_SUBPROCESS=1`` to run every :func:`run_cli` in a real process."""


def run_cli(
    tmp_path: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    subprocess_: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the real command in *tmp_path*, with the store environment pointing into it.

    In-process by default (:func:`waitbound.cli.run`, as ``python -m waitbound`` calls
    it, with the environment, the working directory, the signal handlers and the logging
    set up as the process would have them and put back after); *subprocess_* (or
    ``$WAITBOUND_TEST_SUBPROCESS=1``): in a real ``python -m waitbound`` process, for
    what only a process shows (the entry point, signals, a second process).
    """
    environment = dict(env) if env is not None else cli_env(tmp_path)
    if subprocess_ or SUBPROCESS:
        return subprocess.run(
            [sys.executable, "-m", "waitbound", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environment,
            check=False,
            cwd=tmp_path,
        )
    code, out, err = in_process(list(args), environment, tmp_path)
    return subprocess.CompletedProcess(["waitbound", *args], code, out, err)


def in_process(args: list[str], env: Mapping[str, str], cwd: Path) -> tuple[int, str, str]:
    """Run ``waitbound ARGS`` through :func:`waitbound.cli.run` in this process with *env*
    as the whole environment and *cwd* as the working directory; return the exit code,
    stdout and stderr. An exception that escapes is printed as the interpreter would
    print it (exit 1), so a test that forbids tracebacks sees it."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    signals = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli_run(args)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for sig, handler in signals.items():
            signal.signal(sig, handler)
        root.handlers[:] = handlers
        root.setLevel(level)
    return code, out.getvalue(), err.getvalue()


def operations_stored(path: Path) -> int:
    """How many operations a store file holds (0 when the file or table is absent)."""
    if not path.exists():
        return 0
    db = sqlite3.connect(path)
    try:
        (tables,) = db.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'operations'"
        ).fetchone()
        if not tables:
            return 0
        (count,) = db.execute("SELECT count(*) FROM operations").fetchone()
        return int(count)
    finally:
        db.close()


def assert_refused(done: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    """Exit 2, exactly one ``waitbound: error:`` line, no traceback, empty stdout, no store.

    Returns:
        The error line.
    """
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-2000:]
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stderr.endswith("\n")
    assert lines[0].startswith("waitbound: error: "), lines[0]
    for store in (tmp_path / "env-store.db", tmp_path / "flag-store.db"):
        assert operations_stored(store) == 0, f"{store.name} holds an operation"
    return lines[0]
