"""Running the real ``waitbound`` command in tests, and judging its refusals."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import waitbound

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


def run_cli(
    tmp_path: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real command in *tmp_path*, with the store environment pointing into it."""
    return subprocess.run(
        [sys.executable, "-m", "waitbound", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env) if env is not None else cli_env(tmp_path),
        check=False,
        cwd=tmp_path,
    )


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
