"""A provider that echoes the caller's credentials everywhere leaks them nowhere.

The simulator echoes the token in response bodies (raw and JSON-escaped), in request-id
headers, in a Retry-After hint and in the provider's error text. After a real
``waitbound run`` (SQLite and PostgreSQL stores), ``show``, ``show --json``, stdout,
stderr with progress, every stored row and the simulator's own log contain no trace of
it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.runner import cli
from tests.stores.pg import fresh_database
from waitbound.sim import Simulator, parse_scenario

TOKEN = "SECRET-T0KEN/abc-987"
AUTH = f"Bearer {TOKEN}"


def escaped(text: str) -> str:
    """*text* with every other character as a JSON \\u escape, and '/' as '\\/'."""
    return "".join(
        "\\/" if c == "/" else f"\\u{ord(c):04x}" if i % 2 else c for i, c in enumerate(text)
    )


def forms() -> list[str]:
    """Every form in which the token could be found again."""
    return [TOKEN, escaped(TOKEN), TOKEN.replace("/", "\\/"), json.dumps(TOKEN)[1:-1]]


ECHO_HEADERS = {"X-Request-Id": AUTH, "Request-Id": TOKEN, "Retry-After": AUTH}
RUNNING_RAW = (
    '{"status": "running", "debug": "' + escaped(AUTH) + '", "echo": "' + AUTH + '",'
    ' "note": "' + TOKEN.replace("/", "\\/") + '"}'
)
SCENARIO: dict[str, Any] = {
    "id": "echoes",
    "endpoints": {
        "submit": [
            {
                "code": 202,
                "headers": {"Location": "/status", **ECHO_HEADERS},
                "raw": '{"id": "job-1", "received": "' + escaped(AUTH) + '"}',
            }
        ],
        "status": [
            {"code": 200, "headers": ECHO_HEADERS, "raw": RUNNING_RAW},
            {"code": 503, "headers": {"x-ms-request-id": AUTH, "Retry-After": "0"}},
            {
                "code": 200,
                "headers": ECHO_HEADERS,
                "body": {"status": "failed", "error": {"message": f"token {AUTH} rejected"}},
            },
        ],
    },
}
FLAGS = [
    "--state-path", "status", "--pending", "running", "--failed", "failed",
    "--error-path", "error", "--job-id-path", "id", "--base-delay", "0.1s",
    "--max-delay", "0.2s", "--deadline", "20s", "--header", f"Authorization: {AUTH}",
    "--operation-id", "op-echo", "--progress",
]  # fmt: skip


def _run_and_scan(store: str, log: Path) -> list[str]:
    """Run the echoing job on *store*; every text that could hold the token."""
    with Simulator(parse_scenario(SCENARIO), log_path=log) as sim:
        done = cli("run", "POST", f"{sim.base_url}/jobs", *FLAGS, "--store", store, "--json")
        served_log = json.dumps([entry.headers for entry in sim.log()])
    assert json.loads(done.stdout)["outcome"] == "failed", done.stderr
    shown = cli("show", "op-echo", "--store", store)
    shown_json = cli("show", "op-echo", "--store", store, "--json")
    assert shown.returncode == 0, shown.stderr
    return [
        done.stdout, done.stderr, shown.stdout, shown.stderr, shown_json.stdout,
        log.read_text(), served_log,
    ]  # fmt: skip


def _assert_clean(texts: list[str]) -> None:
    for text in texts:
        for form in forms():
            assert form not in text


@pytest.mark.e2e
def test_echoed_credentials_reach_no_sqlite_store_output_or_log(tmp_path: Path) -> None:
    """SQLite: the store file, outputs, stderr and the simulator log hold no credential."""
    db = tmp_path / "s.db"
    texts = _run_and_scan(str(db), tmp_path / "sim.log")
    texts.append(db.read_bytes().decode("utf-8", errors="replace"))
    _assert_clean(texts)


@pytest.mark.e2e
def test_echoed_credentials_reach_no_postgres_row(tmp_path: Path) -> None:
    """PostgreSQL: no stored row (record or audit event) and no output holds a credential."""
    import psycopg

    with fresh_database() as dsn:
        texts = _run_and_scan(dsn, tmp_path / "sim.log")
        with psycopg.connect(dsn) as conn:
            for table in ("operations", "audit_events"):
                rows = conn.execute(f"SELECT t::text FROM waitbound.{table} t".encode()).fetchall()
                assert rows
                texts.extend(str(row[0]) for row in rows)
    _assert_clean(texts)
