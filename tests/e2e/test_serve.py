"""`waitbound serve` end to end: the real service on a loopback port with a SQLite store,
real `submit`/`wait` against the simulator, `waitbound watch`, a stream dropped and
resumed with Last-Event-ID, and SIGTERM."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import ServerSentEvent, connect_sse

from tests.e2e.runner import cli
from waitbound import SQLiteStore
from waitbound.sim import Simulator, parse_scenario

STATE = ["--state-path", "status", "--pending", "running", "--succeeded", "done"]
PACE = ["--base-delay", "0.1s", "--max-delay", "0.2s", "--deadline", "60s"]
LISTENING = re.compile(r"^waitbound serve: listening on (http://[0-9.]+:[0-9]+) \(")


def _scenario(running: int, delay_s: float = 0.0) -> dict[str, object]:
    return {
        "id": "serve",
        "endpoints": {
            "submit": [{"code": 202, "headers": {"Location": "/status"}}],
            "status": [
                {"code": 200, "body": {"status": "running"}, "repeat": running,
                 "delay_s": delay_s},
                {"code": 200, "body": {"status": "done"}},
            ],
        },
    }  # fmt: skip


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    token_file: Path
    first_lines: list[str]
    more_lines: queue.Queue[str | None]

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def _lines(stream: object, into: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))
    into.put(None)


@contextmanager
def serving(store: Path, token_file: Path, *extra: str) -> Iterator[Served]:
    """Start `waitbound serve --port 0`; yield once it says where it listens."""
    process = subprocess.Popen(
        [sys.executable, "-m", "waitbound", "serve", "--port", "0", "--store", str(store),
         "--token-file", str(token_file), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )  # fmt: skip
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_lines, args=(process.stdout, lines), daemon=True).start()
    first: list[str] = []
    try:
        while True:
            line = lines.get(timeout=30)
            assert line is not None, f"serve exited: {process.stderr.read()}"  # type: ignore[union-attr]
            first.append(line)
            if match := LISTENING.match(line):
                break
        yield Served(
            process=process,
            url=match.group(1),
            token_file=token_file,
            first_lines=first,
            more_lines=lines,
        )
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def _stored_seqs(store: Path, operation_id: str) -> list[tuple[int, str]]:
    opened = SQLiteStore(store)
    try:
        return [(s.seq, s.event.kind) for s in opened.audit(operation_id)]
    finally:
        opened.close()


@pytest.mark.e2e
def test_watch_sees_every_event_of_a_wait_in_order(tmp_path: Path) -> None:
    """submit, then `watch --json` and `watch` (text) while `wait` drives the operation:
    each watcher prints every audit event once, in order, and exits with wait's code."""
    store, token_file = tmp_path / "s.db", tmp_path / "token"
    with Simulator(parse_scenario(_scenario(running=4))) as sim:
        submitted = cli("submit", "POST", f"{sim.base_url}/jobs", *STATE, *PACE,
                        "--store", str(store), "--operation-id", "op-w", "--json")  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        with serving(store, token_file, "--no-worker") as served:
            first, last = served.first_lines[0], served.first_lines[-1]
            waited, watched, story = _watch_a_wait(served, store)
    assert first == f"a new token was written to {token_file}: {served.token}"
    assert "worker off; receivers: none" in last
    assert waited.returncode == 0, waited.stderr
    stored = _stored_seqs(store, "op-w")
    assert len(stored) > 6
    assert watched.returncode == 0, watched.stderr
    lines = [json.loads(line) for line in watched.stdout.splitlines()]
    assert [(e["seq"], e["kind"]) for e in lines[:-1]] == stored
    assert lines[-1] == json.loads(waited.stdout)
    assert story.returncode == 0, story.stderr
    text = story.stdout.splitlines()
    assert [int(line.split()[0]) for line in text[: len(stored)]] == [s for s, _ in stored]
    assert all(kind in line for (_, kind), line in zip(stored, text, strict=False))
    assert text[len(stored)] == "op-w: succeeded"


def _watch_a_wait(served: Served, store: Path) -> tuple[subprocess.CompletedProcess[str], ...]:
    """Start `watch --json` and `watch`, then `wait` op-w to its end: the three runs."""
    watch = [sys.executable, "-m", "waitbound", "watch", "op-w", "--url", served.url,
             "--token-file", str(served.token_file)]  # fmt: skip
    started = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for args in ([*watch, "--json"], watch)
    ]
    try:
        waited = cli("wait", "--operation-id", "op-w", "--store", str(store), "--json")
        done = []
        for process in started:
            out, err = process.communicate(timeout=60)
            done.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    finally:
        for process in started:
            process.kill()
    return waited, *done


@pytest.mark.e2e
def test_a_dropped_stream_resumed_with_last_event_id_loses_nothing(tmp_path: Path) -> None:
    """The serve's worker drives a detached wait; a client reads 3 events, drops the
    connection, reconnects with Last-Event-ID: every event exactly once, in order."""
    store, token_file = tmp_path / "s.db", tmp_path / "token"
    with Simulator(parse_scenario(_scenario(running=6))) as sim:
        detached = cli("wait", f"{sim.base_url}/status", *STATE, *PACE, "--detach", "--json",
                       "--store", str(store), "--operation-id", "op-d")  # fmt: skip
        assert detached.returncode == 4, detached.stderr
        with serving(store, token_file) as served:
            seen, messages, shown, polled = _drop_and_resume(served, sim)
    assert polled < 7, "the wait finished before the drop"
    assert messages[-1].event == "end"
    assert json.loads(messages[-1].data)["outcome"] == "succeeded"
    assert seen == _stored_seqs(store, "op-d")
    assert shown["outcome"]["outcome"] == "succeeded"
    assert [a["seq"] for a in shown["audit"]] == [s for s, _ in seen]


def _drop_and_resume(
    served: Served, sim: Simulator
) -> tuple[list[tuple[int, str]], list[ServerSentEvent], dict[str, Any], int]:
    """Read op-d's stream: 3 events, drop the connection, resume with Last-Event-ID."""
    target = f"{served.url}/operations/op-d/events"
    seen: list[tuple[int, str]] = []
    with httpx.Client(timeout=30) as http:
        with connect_sse(http, "GET", target, headers=served.auth()) as source:
            for message in source.iter_sse():
                seen.append((int(message.id), message.event))
                if len(seen) == 3:
                    break  # the connection is closed mid-stream
        polled = sim.count("status")
        resume = {**served.auth(), "Last-Event-ID": str(seen[-1][0])}
        with connect_sse(http, "GET", target, headers=resume) as source:
            messages = list(source.iter_sse())
        shown = http.get(f"{served.url}/operations/op-d", headers=served.auth()).json()
    seen += [(int(m.id), m.event) for m in messages if m.event != "end"]
    return seen, messages, shown, polled


@pytest.mark.e2e
def test_serve_says_where_the_inbox_is_and_warns_with_allow_remote(tmp_path: Path) -> None:
    """`serve --host 0.0.0.0 --allow-remote`: a warning on stderr, `inbox: URL` after the
    listening line; the inbox there sends a browser to sign in, and signs it in."""
    store, token_file = tmp_path / "s.db", tmp_path / "token"
    SQLiteStore(store).close()  # serve never creates a store
    with serving(store, token_file, "--host", "0.0.0.0", "--allow-remote", "--no-worker") as s:
        inbox = s.more_lines.get(timeout=30)
        port = s.url.rsplit(":", 1)[1]
        assert inbox == f"inbox: http://0.0.0.0:{port}/"
        local = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=local, timeout=30) as http:
            first = http.get("/")
            signed = http.post("/sign-in", data={"name": "Ada", "token": s.token})
            base = signed.headers["location"].removesuffix("/")  # the session's /s/KEY
            page = http.get(f"{base}/in-flight")
        s.process.send_signal(signal.SIGTERM)
        s.process.wait(timeout=30)
        err = s.process.stderr.read()  # type: ignore[union-attr]
    assert first.status_code == 303
    assert first.headers["location"] == "/sign-in"
    assert signed.status_code == 303
    assert "HttpOnly" in signed.headers["set-cookie"]
    assert page.status_code == 200
    assert 'data-testid="in-flight"' not in page.text
    assert "Nothing in flight." in page.text
    assert "warning: --host 0.0.0.0 is not a loopback address" in err
    assert s.token not in err


@pytest.mark.e2e
def test_sigterm_stops_serve_cleanly(tmp_path: Path) -> None:
    """SIGTERM with a step in flight and a stream open: the step is persisted, the
    lease released, the stream ends, the store is closed, exit 0, no traceback."""
    store, token_file = tmp_path / "s.db", tmp_path / "token"
    token_file.write_text("tok_" + "x" * 40 + "\n")
    token_file.chmod(0o600)
    with Simulator(parse_scenario(_scenario(running=1000, delay_s=0.3))) as sim:
        detached = cli("wait", f"{sim.base_url}/status", *STATE, *PACE, "--detach",
                       "--store", str(store), "--operation-id", "op-t")  # fmt: skip
        assert detached.returncode == 4, detached.stderr
        with serving(store, token_file) as served:
            first = served.first_lines[0]
            rest = _sigterm_with_a_stream_open(served, sim)
            code = served.process.wait(timeout=30)
            err = served.process.stderr.read()  # type: ignore[union-attr]
    assert not first.startswith("a new token")
    assert code == 0, err
    assert "Traceback" not in err
    assert all(m.event != "end" for m in rest)
    opened = SQLiteStore(store)
    record = opened.get("op-t")
    opened.close()
    assert record is not None
    assert record.lease_owner is None
    assert record.in_flight is None
    assert record.status_requests_used == sim.count("status")


def _sigterm_with_a_stream_open(served: Served, sim: Simulator) -> list[ServerSentEvent]:
    """Once the worker polled twice, open op-t's stream, SIGTERM, read what is left."""
    end = time.monotonic() + 30
    while sim.count("status") < 2:
        assert time.monotonic() < end, "the worker never polled"
        time.sleep(0.02)
    with httpx.Client(timeout=30) as http:
        target = f"{served.url}/operations/op-t/events"
        with connect_sse(http, "GET", target, headers=served.auth()) as source:
            messages = source.iter_sse()
            next(messages)
            served.process.send_signal(signal.SIGTERM)
            return list(messages)  # ends when the service stops


def test_serve_creates_a_missing_store_and_says_completions_wait_for_a_secret(
    tmp_path: Path,
) -> None:
    """A first start on a new machine: the SQLite store (and its folder) is created, and
    the start line says completion webhooks stay pending without a notify secret."""
    store = tmp_path / "new" / "store.db"
    env_secret = os.environ.pop("WAITBOUND_NOTIFY_SECRET", None)
    try:
        with serving(store, tmp_path / "token") as served:
            assert "completion webhooks left pending: no [notify] secret" in served.first_lines[-1]
            served.process.send_signal(signal.SIGTERM)
            assert served.process.wait(timeout=30) == 0
    finally:
        if env_secret is not None:
            os.environ["WAITBOUND_NOTIFY_SECRET"] = env_secret
    opened = SQLiteStore(store, create=False)
    assert opened.recent() == []
    opened.close()
