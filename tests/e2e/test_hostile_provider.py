"""Hostile providers against the real CLI and worker on loopback: every bound holds.

A server that trickles its headers, URLs httpx cannot use, NaN in a status body, and
one bad operation among many: each ends as one clear outcome on that operation, in
bounded time, without a traceback, and the other operations go on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.runner import cli
from tests.stores.pg import fresh_database
from tests.transports.hostile import HostileServer
from waitbound import SQLiteStore

STATE = ["--state-path", "status", "--pending", "running", "--succeeded", "done"]
# A policy whose budget covers its deadline (400 requests at most 0.2 s apart, 60 s): the
# plan never spreads them.
FAST = [
    "--base-delay",
    "0.1s",
    "--max-delay",
    "0.2s",
    "--deadline",
    "60s",
    "--max-requests",
    "400",
    "--json",
]


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr
    assert "Error:" not in stderr.replace("integration_failure", "")


@pytest.mark.e2e
def test_trickled_headers_cannot_outlast_the_deadline(tmp_path: Path) -> None:
    """One header byte every 0.5 s, forever: the wait ends by its 5 s deadline (measured
    by the waiting process itself, so a slow interpreter start-up is not counted)."""
    with HostileServer("trickle-headers", interval_s=0.5, lifetime_s=40) as server:
        done = cli("wait", f"{server.base_url}/status", *STATE, *FAST, "--deadline", "5s",
                   "--request-timeout", "2s", "--store", str(tmp_path / "s.db"),
                   timeout=30)  # fmt: skip
    outcome = json.loads(done.stdout)
    assert outcome["elapsed_seconds"] < 9, outcome
    assert outcome["outcome"] in ("timed_out", "escalated"), outcome
    assert outcome["transport_failures_used"] >= 1
    _no_traceback(done.stderr)


@pytest.mark.e2e
def test_a_worker_request_to_a_trickling_server_ends_before_its_lease(tmp_path: Path) -> None:
    """The worker's request to a trickling server ends at its request timeout, so the
    lease (request timeout + lease) is never outlived by the request."""
    store = str(tmp_path / "s.db")
    with HostileServer("trickle-headers", interval_s=0.3, lifetime_s=40) as server:
        detached = cli("wait", f"{server.base_url}/status", *STATE, *FAST, "--deadline", "4s",
                       "--request-timeout", "1s", "--store", store, "--detach",
                       "--operation-id", "op-slow")  # fmt: skip
        assert detached.returncode == 4, detached.stderr
        worked = cli("worker", "--store", store, "--until-idle", timeout=30)
    assert worked.returncode == 0, worked.stderr
    opened = SQLiteStore(store)
    record = opened.get("op-slow")
    story = [stored.event for stored in opened.audit("op-slow")]
    opened.close()
    assert record is not None
    assert record.outcome is not None
    # The worker's own times: from its first reservation to the outcome it stored.
    first = next((e.at for e in story if e.kind == "reserved"), story[-1].at)
    assert (story[-1].at - first).total_seconds() < 9, [(e.kind, e.at) for e in story]
    assert record.transport_failures_used >= 1


@pytest.mark.e2e
@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1/a\r\nb", "http://\u2460\u2461\u2466.0.0.1/status", "http://\u2603.net/s"],
    ids=["crlf", "non-ascii-digits", "idna"],
)
def test_a_command_line_url_httpx_rejects_is_one_line_exit_2_and_stores_nothing(
    tmp_path: Path, url: str
) -> None:
    """A bad URL from the user: exit 2, one line naming it, no store row."""
    store = tmp_path / "s.db"
    done = cli("wait", url, *STATE, *FAST, "--store", str(store), "--operation-id", "op-bad")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "URL" in done.stderr
    _no_traceback(done.stderr)
    if store.exists():
        opened = SQLiteStore(store)
        assert opened.get("op-bad") is None
        opened.close()


@pytest.mark.e2e
def test_a_provider_naming_a_url_httpx_rejects_escalates_and_costs_nothing_more(
    tmp_path: Path,
) -> None:
    """A receipt naming http://☃.net/status: integration_failure, exit 3, one request."""
    body = b'{"id": "j1", "status_url": "http://\xe2\x98\x83.net/status"}'
    profile = tmp_path / "p.json"
    profile.write_text(
        json.dumps({"state": "status", "pending": ["running"], "succeeded": ["done"],
                    "submit": {"status_url": "status_url"}})
    )  # fmt: skip
    with HostileServer("answer", status=202, body=body) as server:
        done = cli("run", "POST", f"{server.base_url}/jobs", "--profile", str(profile), *FAST,
                   "--store", str(tmp_path / "s.db"))  # fmt: skip
        requests = len(server.requests)
    outcome = json.loads(done.stdout)
    assert done.returncode == 3
    assert outcome["reason"] == "integration_failure"
    assert "cannot be used" in outcome["error"]["detail"]
    assert requests == 1
    _no_traceback(done.stderr)


@pytest.mark.e2e
def test_nan_in_a_status_body_is_an_unknown_state_on_postgresql(tmp_path: Path) -> None:
    """{"status": NaN} on PostgreSQL: unknown_state after one request, and every JSON
    output (--json, show --json) is strict JSON."""
    with fresh_database() as dsn, HostileServer("answer", body=b'{"status": NaN}') as server:
        done = cli("wait", f"{server.base_url}/status", *STATE, *FAST, "--store", dsn,
                   "--operation-id", "op-nan")  # fmt: skip
        shown = cli("show", "op-nan", "--store", dsn, "--json")
        requests = len(server.requests)

    def strict(text: str) -> object:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))

    outcome = strict(done.stdout)
    assert outcome["reason"] == "unknown_state", outcome  # type: ignore[index]
    assert outcome["provider_state"] == "NaN"  # type: ignore[index]
    assert requests == 1
    assert shown.returncode == 0, shown.stderr
    strict(shown.stdout)


@pytest.mark.e2e
def test_one_bad_operation_among_many_never_stops_the_worker(tmp_path: Path) -> None:
    """Five detached operations, one naming a broken result URL and one answering NaN:
    the worker finishes all five; the two bad ones escalate, the three others succeed."""
    store = str(tmp_path / "s.db")
    profile = tmp_path / "p.json"
    profile.write_text(
        json.dumps({"state": "status", "pending": ["running"], "succeeded": ["done"],
                    "result_url": "result_url"})
    )  # fmt: skip
    good = b'{"status": "done"}'
    bodies = {
        "op-0": good,
        "op-1": b'{"status": "done", "result_url": "http://p.test/r\\u0001x"}',
        "op-2": good,
        "op-3": b'{"status": NaN}',
        "op-4": good,
    }
    servers = {
        op: HostileServer("answer", body=body, lifetime_s=240.0).start()
        for op, body in bodies.items()
    }
    try:
        for op, server in servers.items():
            detached = cli("wait", f"{server.base_url}/status", "--profile", str(profile),
                           *FAST, "--store", store, "--detach", "--operation-id", op)  # fmt: skip
            assert detached.returncode == 4, detached.stderr
        worked = cli("worker", "--store", store, "--until-idle", timeout=60)
    finally:
        for server in servers.values():
            server.stop()
    assert worked.returncode == 0, worked.stderr
    _no_traceback(worked.stderr)
    opened = SQLiteStore(store)
    records = {op: opened.get(op) for op in bodies}
    opened.close()
    reasons = {
        op: (r.outcome.value, r.reason.value if r.reason else None)
        for op, r in records.items()
        if r is not None and r.outcome is not None
    }
    assert reasons == {
        "op-0": ("succeeded", None),
        "op-1": ("escalated", "integration_failure"),
        "op-2": ("succeeded", None),
        "op-3": ("escalated", "unknown_state"),
        "op-4": ("succeeded", None),
    }
