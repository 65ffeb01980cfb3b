"""The provider kit end to end: ``examples/provider_app.py`` under real uvicorn on a free
loopback port, waited on by the real ``waitbound run ... --profile provider-kit`` CLI with
no other configuration, for every ending. (Issue 33's 45 s job with every default, through
the same CLI on virtual time: ``tests/provider/test_kit_cli.py``.)"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.runner import cli, wait_for_record
from waitbound import Record

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def _status_seen(record: Record) -> bool:
    """a status answer was stored (the job's cancelability is the kit's word on it)"""
    return record.status_requests_used >= 1 and record.in_flight is None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    """The example app under uvicorn; its base URL."""
    port = _free_port()
    env = {**os.environ, "PROVIDER_POLL_AFTER_S": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(ROOT / "examples"),
         "provider_app:app", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{base}/openapi.json", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < end, "the example app never started"
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(10)


def _run(service: str, tmp_path: Path, body: object, *extra: str) -> tuple[dict[str, object], int]:
    path = tmp_path / f"body-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(body))
    done = cli(
        "run", "POST", f"{service}/jobs", "--profile", "provider-kit", "--body", str(path),
        "--json", "--store", str(tmp_path / "store.db"), *extra,
    )  # fmt: skip
    assert done.returncode != 2, done.stderr
    return json.loads(done.stdout), done.returncode


def test_the_default_job_succeeds_after_a_few_seconds(service: str, tmp_path: Path) -> None:
    """``{}`` transcodes for about 4 s and waitbound reports succeeded with the result."""
    started = time.monotonic()
    outcome, code = _run(service, tmp_path, {})
    assert (outcome["outcome"], code) == ("succeeded", 0), outcome
    assert outcome["result"] == {"output_url": "https://cdn.example/input.mov.mp4"}
    assert time.monotonic() - started >= 3.5


@pytest.mark.parametrize(
    ("ending", "expected"),
    [("failed", "failed"), ("completed_with_errors", "completed_with_errors"),
     ("canceled", "canceled")],
)  # fmt: skip
def test_each_ending_is_reported_as_itself(
    service: str, tmp_path: Path, ending: str, expected: str
) -> None:
    """The body chooses the ending; waitbound's outcome is that ending, exit 1."""
    outcome, code = _run(service, tmp_path, {"outcome": ending, "duration_s": 1})
    assert (outcome["outcome"], code) == (expected, 1), outcome
    if expected == "failed":
        assert "unsupported_codec" in json.dumps(outcome)
    if expected == "completed_with_errors":
        assert "2" in json.dumps(outcome.get("counts", outcome))


def test_waitbound_cancel_cancels_a_running_job(service: str, tmp_path: Path) -> None:
    """``waitbound cancel`` on the operation sends the kit's cancel; both report canceled."""
    path = tmp_path / "body.json"
    path.write_text(json.dumps({"duration_s": 30}))
    store = str(tmp_path / "store.db")
    waiting = subprocess.Popen(
        [sys.executable, "-m", "waitbound", "run", "POST", f"{service}/jobs", "--profile",
         "provider-kit", "--body", str(path), "--json", "--store", store,
         "--operation-id", "op-cancel"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for_record(store, "op-cancel", _status_seen)
    canceled = cli("cancel", "op-cancel", "--reason", "e2e", "--store", store, "--json")
    out, err = waiting.communicate(timeout=60)
    assert canceled.returncode == 1, canceled.stderr
    assert json.loads(canceled.stdout)["outcome"] == "canceled"
    assert json.loads(out)["outcome"] == "canceled", err


def test_an_uncancelable_job_refuses_waitbound_cancel(service: str, tmp_path: Path) -> None:
    """While the kit says cancelable: false, ``waitbound cancel`` refuses (exit 2) because
    of that, and the job still succeeds (its 6 s leave the cancel's start-up room)."""
    path = tmp_path / "body.json"
    path.write_text(json.dumps({"duration_s": 6, "uncancelable": True}))
    store = str(tmp_path / "store.db")
    waiting = subprocess.Popen(
        [sys.executable, "-m", "waitbound", "run", "POST", f"{service}/jobs", "--profile",
         "provider-kit", "--body", str(path), "--json", "--store", store,
         "--operation-id", "op-keep"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for_record(store, "op-keep", _status_seen)
    refused = cli("cancel", "op-keep", "--store", store, "--json")
    out, err = waiting.communicate(timeout=60)
    assert refused.returncode == 2, refused.stdout
    assert "is not cancelable now" in refused.stdout + refused.stderr, refused.stderr
    assert json.loads(out)["outcome"] == "succeeded", err


def test_the_result_is_409_until_ready_and_waitbound_waits(service: str, tmp_path: Path) -> None:
    """While processing the result endpoint answers 409 run_not_completed; ``waitbound
    wait`` on the status URL still ends succeeded with the result, fetched once it is ready."""
    receipt = httpx.post(f"{service}/jobs", json={"duration_s": 2}).json()
    early = httpx.get(receipt["result_url"])
    assert early.status_code == 409
    assert early.json()["error"] == "run_not_completed"
    assert early.json()["status"] == "processing"
    done = cli(
        "wait", receipt["status_url"], "--profile", "provider-kit", "--result-url",
        receipt["result_url"], "--json", "--store", str(tmp_path / "store.db"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["outcome"] == "succeeded"
    assert outcome["result"] == {"output_url": "https://cdn.example/input.mov.mp4"}


def test_a_replayed_idempotency_key_waits_on_the_same_job(service: str, tmp_path: Path) -> None:
    """Two runs with one key and one body follow one job; another body with that key is
    refused (422) and reported failed, never started."""
    key = f"key-{time.monotonic_ns()}"
    body = {"duration_s": 1, "source": "k.mov"}
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    first, code1 = _run(service, tmp_path / "a", body, "--idempotency-key", key)
    second, code2 = _run(service, tmp_path / "b", body, "--idempotency-key", key)
    assert (first["outcome"], second["outcome"], code1, code2) == ("succeeded", "succeeded", 0, 0)
    assert first["job_id"] == second["job_id"]
    other_body = {"duration_s": 1, "source": "other.mov"}
    other, code3 = _run(service, tmp_path / "c", other_body, "--idempotency-key", key)
    assert (other["outcome"], code3) == ("failed", 1), other
    assert "idempotency_key_reused" in json.dumps(other)
