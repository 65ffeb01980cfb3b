"""The push path end to end, through the real service on loopback: webhook deliveries
signed by the ``standardwebhooks`` library into ``waitbound serve`` (in process, for a
downstream Python callable, or as a ``waitbound serve`` subprocess), the simulator as
the provider, completions out to a verifying receiver, ``waitbound worker`` killed by
SIGKILL between an outcome and its delivery, and ``/events?label=`` across operations.

Every rule is checked on counts — the store's inbox, outbox and audit log, the
simulator's request log, the receiver's deliveries — reached by bounded polling loops;
no test sleeps to check one.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import httpx
import pytest
from httpx_sse import connect_sse

from tests.core.completion_receiver import SECRET as NOTIFY_SECRET
from tests.core.completion_receiver import Receiver as CompletionReceiver
from tests.core.completion_receiver import receiving
from tests.e2e.runner import cli
from tests.e2e.test_serve import Served, serving
from tests.web.signing import SECRET_A, SECRET_B, SECRET_OTHER, standard_headers
from waitbound import (
    Channel,
    Completion,
    Operation,
    OutboxStatus,
    OutcomeKind,
    Policy,
    Record,
    SQLiteStore,
    SystemClock,
    parse_profile,
    start,
)
from waitbound._model._audit import StoredAuditEvent
from waitbound._model._push import InboundDelivery, completion_delivery_id
from waitbound.sim import Simulator, parse_scenario
from waitbound.web._config import load_serve_config
from waitbound.web._run import serve
from waitbound.web._service import Service

PROFILE = parse_profile(
    {"state": "status", "pending": ["running"], "succeeded": ["done"], "failed": ["error"],
     "result_url": "result_url", "job_id": "id"}
)  # fmt: skip
STATE = ["--state-path", "status", "--pending", "running", "--succeeded", "done"]
RECEIVER = "reports"
SECRET_ENV = "REPORTS_WEBHOOK_SECRET"
NEXT_SECRET_ENV = "REPORTS_WEBHOOK_SECRET_NEXT"
MAX_BODY = 2048
TOKEN = "tok_" + "e" * 40
WAIT_S = 30.0
"""The longest any condition is waited for (seconds); reached only when a test fails."""


# --- helpers ------------------------------------------------------------------------


def until(what: str, condition: Callable[[], object], timeout_s: float = WAIT_S) -> None:
    """Poll *condition* every 20 ms until it holds; fail naming *what* after *timeout_s*."""
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, f"timed out waiting until {what}"
        time.sleep(0.02)


def write_config(path: Path, *secret_envs: str) -> Path:
    """``serve.toml`` with the ``reports`` receiver (secrets from *secret_envs*) and the
    notify secret from the environment."""
    secrets = ", ".join(f'"${{{name}}}"' for name in secret_envs or (SECRET_ENV,))
    path.write_text(
        f"[webhooks.{RECEIVER}]\n"
        'scheme = "standard"\n'
        f"secrets = [{secrets}]\n"
        'job_id = "data.id"\n'
        f"max_body_bytes = {MAX_BODY}\n"
        "[notify]\n"
        'secret = "${WAITBOUND_NOTIFY_SECRET}"\n'
    )
    return path


def payload(job_id: str, event: str = "report.completed") -> bytes:
    return json.dumps({"type": event, "data": {"id": job_id}}).encode()


def signed(
    body: bytes, msg_id: str, secret: str | list[str] = SECRET_A, at: datetime | None = None
) -> dict[str, str]:
    """Standard Webhooks headers made by the ``standardwebhooks`` library."""
    when = at or datetime.now(UTC)
    return {"content-type": "application/json"} | standard_headers(
        secret, body, msg_id=msg_id, at=when
    )


def deliver_many(url: str, deliveries: list[tuple[bytes, dict[str, str]]]) -> list[httpx.Response]:
    """POST every delivery at once (one connection each), from an event loop of our own."""

    async def main() -> list[httpx.Response]:
        answers: list[httpx.Response | None] = [None] * len(deliveries)
        limits = httpx.Limits(max_connections=len(deliveries))
        async with httpx.AsyncClient(timeout=WAIT_S, limits=limits) as http:

            async def one(i: int, body: bytes, headers: dict[str, str]) -> None:
                answers[i] = await http.post(url, content=body, headers=headers)

            async with anyio.create_task_group() as group:
                for i, (body, headers) in enumerate(deliveries):
                    group.start_soon(one, i, body, headers)
        return [a for a in answers if a is not None]

    return anyio.run(main)


def kinds(events: list[StoredAuditEvent]) -> list[str]:
    return [stored.event.kind for stored in events]


def outcomes(events: list[StoredAuditEvent]) -> int:
    """How many audit events recorded an outcome (``finished``)."""
    return kinds(events).count("finished")


@dataclass
class Downstream:
    """The downstream Python callable: every completion it was called with."""

    calls: list[Completion] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, completion: Completion) -> None:
        with self.lock:
            self.calls.append(completion)

    def ids(self) -> list[str]:
        with self.lock:
            return [c.delivery_id for c in self.calls]


@dataclass
class InProcess:
    """``waitbound.web._run.serve`` running in a thread of its own, on a loopback port."""

    url: str
    path: Path
    store: SQLiteStore
    downstream: Downstream

    def hook(self) -> str:
        return f"{self.url}/webhooks/{RECEIVER}"


@contextmanager
def serving_in_process(tmp_path: Path) -> Iterator[InProcess]:
    """The real service (HTTP server, worker, inbox sweep) in a background event loop,
    with ``on_complete`` and the notify secret; stopped and its store closed after."""
    store = SQLiteStore(tmp_path / "store.db")
    config = load_serve_config(
        write_config(tmp_path / "serve.toml"),
        env={SECRET_ENV: SECRET_A, "WAITBOUND_NOTIFY_SECRET": NOTIFY_SECRET},
    )
    service = Service(store=store, config=config, clock=SystemClock(), token=TOKEN)
    downstream = Downstream()
    started: queue.Queue[tuple[str, anyio.Event, anyio.lowlevel.EventLoopToken]] = queue.Queue()
    failures: list[BaseException] = []

    async def main() -> None:
        stop = anyio.Event()
        token = anyio.lowlevel.current_token()
        await serve(
            service,
            "127.0.0.1",
            0,
            notify_secret=config.notify_secret,
            on_complete=downstream,
            on_listening=lambda url: started.put((url, stop, token)),
            stop=stop,
            handle_signals=False,
        )

    def run() -> None:
        try:
            anyio.run(main)
        except BaseException as exc:  # reported by the test
            failures.append(exc)
            started.put(("", anyio.Event(), None))  # type: ignore[arg-type]

    thread = threading.Thread(target=run, name="waitbound-serve", daemon=True)
    thread.start()
    url, stop, token = started.get(timeout=WAIT_S)
    assert url, f"serve did not start: {failures}"
    try:
        yield InProcess(url=url, path=store.path, store=store, downstream=downstream)
    finally:
        anyio.from_thread.run_sync(stop.set, token=token)
        thread.join(timeout=WAIT_S)
        store.close()
    assert not thread.is_alive(), "serve did not stop"
    assert not failures, failures


@contextmanager
def serving_subprocess(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str, secrets: tuple[str, ...] = ()
) -> Iterator[Served]:
    """``waitbound serve --port 0 --config serve.toml`` on ``tmp_path/store.db`` (created
    when missing), the secrets in its environment."""
    monkeypatch.setenv(SECRET_ENV, SECRET_A)
    monkeypatch.setenv(NEXT_SECRET_ENV, SECRET_B)
    monkeypatch.setenv("WAITBOUND_NOTIFY_SECRET", NOTIFY_SECRET)
    store = tmp_path / "store.db"
    if not store.exists():
        SQLiteStore(store).close()
    config = write_config(tmp_path / f"serve-{len(secrets)}.toml", *secrets)
    with serving(store, tmp_path / "token", "--config", str(config), *extra) as served:
        yield served


def finished_in(store: SQLiteStore, operation_id: str) -> Record:
    until(f"{operation_id} has its outcome", lambda: record_of(store, operation_id).outcome)
    return record_of(store, operation_id)


@contextmanager
def reading(path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(path)
    try:
        yield store
    finally:
        store.close()


def record_of(store: SQLiteStore, operation_id: str) -> Record:
    record = store.get(operation_id)
    assert record is not None
    return record


def running_then_done(running: int = 1, delay_s: float = 0.0) -> dict[str, object]:
    """A job that is ``running`` *running* times (the last one answered after *delay_s*),
    then ``done``."""
    entries: list[dict[str, object]] = []
    if running > 1:
        entries.append({"code": 200, "body": {"status": "running"}, "repeat": running - 1})
    entries.append({"code": 200, "body": {"status": "running"}, "delay_s": delay_s})
    entries.append({"code": 200, "body": {"status": "done"}})
    return {"id": "push", "endpoints": {"status": entries}}


SLOW_BACKUP = Policy(base_delay_s=2, max_delay_s=4, deadline_s=120, max_requests=5)
"""Backup polls 4-8 s after the first answer (base 2 s x backup_factor 4): a poll
sooner than that was brought forward by a webhook."""


def expecting(
    served: InProcess,
    sim: Simulator,
    hooked: CompletionReceiver,
    job_id: str,
    *,
    policy: Policy = SLOW_BACKUP,
    operation_id: str = "op-push",
) -> str:
    """Record an operation expecting ``reports`` webhooks about *job_id*, with both
    completion channels (the downstream callable, a signed webhook to *hooked*); return
    once its first poll (``running``) is recorded."""
    operation = Operation(
        status_url=f"{sim.base_url}/status", profile=PROFILE, policy=policy, job_id=job_id,
        webhook=RECEIVER, notify_url=hooked.url,
    )  # fmt: skip
    # The callback channel: serve's on_complete delivers it.
    start(operation, operation_id=operation_id, store=served.store, callback=True)
    until("the first poll is recorded", lambda: polled(served.store, operation_id, 1))
    return operation_id


def polled(store: SQLiteStore, operation_id: str, n: int) -> bool:
    """Whether *n* status answers of *operation_id* are recorded (none in flight)."""
    record = record_of(store, operation_id)
    return record.status_requests_used == n and record.in_flight is None


def completed(served: InProcess, operation_id: str) -> None:
    """Wait until the outcome is stored and both completions are delivered."""

    def done() -> bool:
        entries = served.store.outbox(operation_id=operation_id)
        return (
            record_of(served.store, operation_id).outcome is not None
            and len(entries) == 2
            and all(e.status is OutboxStatus.DELIVERED for e in entries)
        )

    until("both completions are delivered", done)


@dataclass
class Stopped:
    """What the store holds of one operation once the service has stopped."""

    record: Record
    events: list[StoredAuditEvent]
    inbox: list[InboundDelivery]


def assert_delivered_once(
    served: InProcess, hooked: CompletionReceiver, sim: Simulator, operation_id: str
) -> Stopped:
    """After the service stopped (nothing more can be delivered): one outcome,
    succeeded; the downstream callable and the outgoing webhook each saw it once, under
    its stable delivery id; the status polls within the budget."""
    with reading(served.path) as store:
        record = record_of(store, operation_id)
        stopped = Stopped(
            record=record, events=store.audit(operation_id), inbox=store.inbox(limit=1000)
        )
        entries = store.outbox(operation_id=operation_id)
    assert record.outcome is OutcomeKind.SUCCEEDED
    assert outcomes(stopped.events) == 1
    assert served.downstream.ids() == [completion_delivery_id(operation_id, Channel.CALLBACK)]
    assert served.downstream.calls[0].outcome == record.to_outcome()
    assert hooked.rejected == []
    assert hooked.ids() == [completion_delivery_id(operation_id, Channel.WEBHOOK)]
    assert hooked.received[0].payload["data"]["outcome"] == "succeeded"
    assert sorted((e.channel, e.status, e.attempts) for e in entries) == [
        (Channel.CALLBACK, OutboxStatus.DELIVERED, 1),
        (Channel.WEBHOOK, OutboxStatus.DELIVERED, 1),
    ]
    assert sim.count("status") == record.status_requests_used <= record.max_requests
    return stopped


# --- 1. many copies, many deliveries ------------------------------------------------


@pytest.mark.e2e
def test_a_hundred_copies_of_one_delivery_are_stored_once_and_complete_once(
    tmp_path: Path,
) -> None:
    """100 concurrent copies of one delivery: one stored, one outcome, each completion once."""
    with (
        Simulator(parse_scenario(running_then_done())) as sim,
        receiving() as hooked,
        serving_in_process(tmp_path) as served,
    ):
        operation_id = expecting(served, sim, hooked, "job-1")
        body = payload("job-1")
        answers = deliver_many(served.hook(), [(body, signed(body, "msg_same"))] * 100)
        completed(served, operation_id)
    stopped = assert_delivered_once(served, hooked, sim, operation_id)
    assert [a.status_code for a in answers] == [200] * 100
    firsts = [a.json() for a in answers if not a.json()["duplicate"]]
    assert firsts == [{"received": True, "duplicate": False, "matched": True}]
    (kept,) = stopped.inbox
    assert (kept.webhook_id, kept.operation_id) == ("msg_same", operation_id)
    assert kept.applied_at is not None
    assert stopped.record.push.deliveries == 1
    assert kinds(stopped.events).count("webhook_received") == 1
    assert sim.count("status") == 2  # the first poll, and the one the webhook brought forward


@pytest.mark.e2e
def test_a_hundred_distinct_deliveries_for_one_job_complete_it_once(tmp_path: Path) -> None:
    """100 concurrent deliveries with distinct ids, one job: all stored, one outcome, once out."""
    with (
        Simulator(parse_scenario(running_then_done())) as sim,
        receiving() as hooked,
        serving_in_process(tmp_path) as served,
    ):
        operation_id = expecting(served, sim, hooked, "job-1")
        body = payload("job-1")
        answers = deliver_many(
            served.hook(), [(body, signed(body, f"msg_{i:03}")) for i in range(100)]
        )
        completed(served, operation_id)
        until("every delivery is applied", lambda: not served.store.pending_deliveries(limit=1))
    stopped = assert_delivered_once(served, hooked, sim, operation_id)
    assert [a.json() for a in answers] == [
        {"received": True, "duplicate": False, "matched": True}
    ] * 100
    assert sorted(d.webhook_id for d in stopped.inbox) == [f"msg_{i:03}" for i in range(100)]
    assert {d.operation_id for d in stopped.inbox} == {operation_id}
    assert all(d.applied_at is not None for d in stopped.inbox)
    hints = kinds(stopped.events).count("webhook_received")
    assert 1 <= hints == stopped.record.push.deliveries <= 100  # those applied before the end
    assert sim.count("status") == 2


# --- 2. a webhook racing a poll -----------------------------------------------------


def seconds_until(at: datetime) -> float:
    return max(0.0, (at - datetime.now(UTC)).total_seconds())


@pytest.mark.e2e
def test_a_webhook_sent_as_its_poll_falls_due_completes_once(tmp_path: Path) -> None:
    """A delivery sent the moment the scheduled poll is due: one outcome, two polls, once out."""
    # at a cap of ten times the deadline the plan leaves the 3 polls at backoff (0.05 s)
    quick = Policy(base_delay_s=0.05, max_delay_s=600, deadline_s=60, max_requests=3)
    with (
        Simulator(parse_scenario(running_then_done())) as sim,
        receiving() as hooked,
        serving_in_process(tmp_path) as served,
    ):
        operation_id = expecting(served, sim, hooked, "job-1", policy=quick)
        due = record_of(served.store, operation_id).next_poll_at
        time.sleep(seconds_until(due))  # to provoke the race, not to check a rule
        body = payload("job-1")
        (answer,) = deliver_many(served.hook(), [(body, signed(body, "msg_race"))])
        completed(served, operation_id)
        until("the delivery is applied", lambda: not served.store.pending_deliveries(limit=1))
    stopped = assert_delivered_once(served, hooked, sim, operation_id)
    assert answer.json()["duplicate"] is False
    assert stopped.record.push.deliveries <= 1  # none when it came after the outcome
    assert sim.count("status") == 2 <= quick.max_requests


@pytest.mark.e2e
def test_a_webhook_during_the_poll_in_flight_brings_the_next_one_forward_once(
    tmp_path: Path,
) -> None:
    """A delivery while the poll is in flight: its stale answer is followed by one poll at once."""
    with (
        Simulator(parse_scenario(running_then_done(running=2, delay_s=2.0))) as sim,
        receiving() as hooked,
        serving_in_process(tmp_path) as served,
    ):
        operation_id = expecting(served, sim, hooked, "job-1")
        body = payload("job-1")
        deliver_many(served.hook(), [(body, signed(body, "msg_1"))])  # brings poll 2 forward

        def in_flight() -> bool:
            record = record_of(served.store, operation_id)
            return record.in_flight == "status" and record.status_requests_used == 2

        until("poll 2 is in flight", in_flight)
        deliver_many(served.hook(), [(body, signed(body, "msg_2"))])
        completed(served, operation_id)
    stopped = assert_delivered_once(served, hooked, sim, operation_id)
    assert stopped.record.push.deliveries == 2
    assert sim.count("status") == 3 <= SLOW_BACKUP.max_requests
    (after_poll_2,) = [
        e.event
        for e in stopped.events
        if (e.event.kind, e.event.data["requests_used"]) == ("scheduled", 2)
    ]
    assert "a webhook arrived while this request was in flight" in after_poll_2.summary
    assert after_poll_2.data["delay_source"] is None
    assert after_poll_2.data["next_poll_at"] == after_poll_2.at.isoformat()


def _worker_process(store: Path) -> subprocess.Popen[str]:
    """``waitbound worker`` on *store*, delivering completion webhooks."""
    return subprocess.Popen(
        [sys.executable, "-m", "waitbound", "worker", "--store", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "WAITBOUND_NOTIFY_SECRET": NOTIFY_SECRET},
    )  # fmt: skip


def delivered(store: SQLiteStore) -> int:
    """How many outbox entries are delivered."""
    return len(store.outbox(status=OutboxStatus.DELIVERED, limit=1000))


def _stop(*processes: subprocess.Popen[str]) -> None:
    """SIGTERM each: the steps and deliveries in flight finish; then wait for them."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        process.communicate(timeout=WAIT_S)


@pytest.mark.e2e
def test_two_services_racing_on_many_deliveries_complete_each_operation_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve and a `waitbound worker` on one store, 40 deliveries per job: each completes once."""
    store_path = tmp_path / "store.db"
    simulators = [Simulator(parse_scenario(running_then_done())).start() for _ in range(5)]
    ids = [f"op-{i}" for i in range(len(simulators))]
    deliveries = [
        (body, signed(body, f"msg_{i}_{k}"))
        for i in range(len(ids))
        for body in [payload(f"job-{i}")]
        for k in range(40)
    ]
    try:
        with receiving() as hooked:
            with reading(store_path) as store:
                for i, sim in enumerate(simulators):
                    start(Operation(status_url=f"{sim.base_url}/status", profile=PROFILE,
                                    policy=SLOW_BACKUP, job_id=f"job-{i}", webhook=RECEIVER,
                                    notify_url=hooked.url),
                          operation_id=ids[i], store=store)  # fmt: skip
            with serving_subprocess(tmp_path, monkeypatch) as served, reading(store_path) as store:
                worker = _worker_process(store_path)
                try:
                    until("every first poll", lambda: all(polled(store, i, 1) for i in ids))
                    answers = deliver_many(f"{served.url}/webhooks/{RECEIVER}", deliveries)
                    until("every completion is delivered", lambda: delivered(store) == len(ids))
                finally:
                    _stop(worker, served.process)
                records = [record_of(store, i) for i in ids]
                events = [store.audit(i) for i in ids]
                entries = store.outbox(limit=100)
    finally:
        for sim in simulators:
            sim.stop()
    assert (worker.returncode, served.process.returncode) == (0, 0)
    assert {a.status_code for a in answers} == {200}
    assert all(r.outcome is OutcomeKind.SUCCEEDED for r in records)
    assert [outcomes(e) for e in events] == [1] * len(ids)
    assert sorted(hooked.ids()) == sorted(completion_delivery_id(i, Channel.WEBHOOK) for i in ids)
    assert [(e.status, e.attempts) for e in entries] == [(OutboxStatus.DELIVERED, 1)] * len(ids)
    assert [sim.count("status") for sim in simulators] == [2] * len(ids)


# --- 3. a lost webhook; 4. a delivery before its job --------------------------------


@pytest.mark.e2e
def test_a_lost_webhook_is_found_by_the_backup_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No delivery ever comes: polls on the backup schedule (base and cap x 4) find the end."""
    store = tmp_path / "store.db"
    base, cap, factor = 0.1, 0.15, 4  # off the backup schedule every delay is <= 0.15 s
    with Simulator(parse_scenario(running_then_done(running=3))) as sim, receiving() as hooked:
        detached = cli(
            "wait", f"{sim.base_url}/status", *STATE, "--base-delay", f"{base}s",
            "--max-delay", f"{cap}s", "--deadline", "60s", "--webhook", RECEIVER, "--detach",
            "--max-requests", "120",  # at the backup cap (0.6 s) they cover the deadline: no spread
            "--job-id-path", "id",
            "--notify", hooked.url, "--json", "--store", str(store), "--operation-id", "op-lost",
        )  # fmt: skip
        assert detached.returncode == 4, detached.stderr
        with serving_subprocess(tmp_path, monkeypatch), reading(store) as opened:
            record = finished_in(opened, "op-lost")
            # serve's worker sends the completion, signed with serve.toml's [notify] secret
            until("the completion is delivered", lambda: opened.outbox()[0].delivered_at)
            events = opened.audit("op-lost")
            inbox = opened.inbox(limit=10)
        log = sim.log()
    assert hooked.ids() == [completion_delivery_id("op-lost", Channel.WEBHOOK)]
    assert record.outcome is OutcomeKind.SUCCEEDED
    assert record.push.deliveries == 0
    assert inbox == []
    assert "webhook_received" not in kinds(events)
    scheduled = [e.event for e in events if e.event.kind == "scheduled"]
    assert len(scheduled) == 3 == sim.count("status") - 1
    for attempt, event in enumerate(scheduled):
        assert event.data["delay_source"] == "backup_polling"
        delay = (datetime.fromisoformat(str(event.data["next_poll_at"])) - event.at).total_seconds()
        raw = min(cap * factor, base * factor * 2**attempt)
        assert 0.5 * raw <= delay <= raw, (attempt, delay)
    statuses = [entry.at for entry in log if entry.endpoint == "status"]
    gaps = [later - earlier for earlier, later in itertools.pairwise(statuses)]
    assert min(gaps) >= timedelta(seconds=0.5 * base * factor)


@pytest.mark.e2e
def test_a_delivery_before_its_job_is_recorded_is_matched_once_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery beats the receipt: kept unmatched, matched by `submit --webhook`, poll sooner."""
    store = tmp_path / "store.db"
    scenario = {
        "id": "early",
        "endpoints": {
            "submit": [{"code": 202, "body": {"id": "job-42"}, "headers": {"Location": "/status"}}],
            "status": [{"code": 200, "body": {"status": "done", "id": "job-42"}}],
        },
    }
    body = payload("job-42")
    with (
        Simulator(parse_scenario(scenario)) as sim,
        receiving() as hooked,
        serving_subprocess(tmp_path, monkeypatch, "--no-worker") as served,
        reading(store) as opened,
    ):
        early = httpx.post(
            f"{served.url}/webhooks/{RECEIVER}", content=body, headers=signed(body, "msg_early")
        )
        (kept,) = opened.inbox(provider=RECEIVER)
        submitted = cli(
            "submit", "POST", f"{sim.base_url}/jobs", *STATE, "--job-id-path", "id",
            "--base-delay", "5s", "--max-delay", "10s", "--deadline", "60s",
            "--webhook", RECEIVER, "--notify", hooked.url, "--store", str(store),
            "--operation-id", "op-early", "--json",
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        # serve runs no worker: this wait polls, woken by the hint; then sends the completion
        waited = cli("wait", "--operation-id", "op-early", "--store", str(store), "--json")
        (matched,) = opened.inbox(provider=RECEIVER)
        events = opened.audit("op-early")
        record = record_of(opened, "op-early")
    assert early.json() == {"received": True, "duplicate": False, "matched": False}
    assert (kept.webhook_id, kept.job_id, kept.operation_id) == ("msg_early", "job-42", None)
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["outcome"] == "succeeded"
    assert hooked.ids() == [completion_delivery_id("op-early", Channel.WEBHOOK)]
    assert (matched.operation_id, matched.applied_at is not None) == ("op-early", True)
    assert record.push.deliveries == 1
    story = [(e.event.kind, e.event.data.get("request")) for e in events]
    receipt_at = story.index(("scheduled", None))  # the receipt's: the first backup poll
    hint_at = story.index(("webhook_received", None))
    assert receipt_at < hint_at < story.index(("reserved", "status"))
    receipt, hint = events[receipt_at].event, events[hint_at].event
    assert (hint.data["webhook_id"], hint.data["job_id"]) == ("msg_early", "job-42")
    assert receipt.data["delay_source"] == "backup_polling"
    backup_poll_at = datetime.fromisoformat(str(receipt.data["next_poll_at"]))
    assert datetime.fromisoformat(str(hint.data["next_poll_at"])) == hint.at < backup_poll_at
    (status,) = [entry for entry in sim.log() if entry.endpoint == "status"]
    assert status.at < backup_poll_at  # brought forward: the backup poll would be then


# --- 5. bad deliveries and bad tokens; 6. a rotated secret --------------------------


@dataclass
class Guarded:
    """A ``waitbound serve --no-worker`` with one operation expecting ``reports``
    deliveries about ``job-7``, and one delivery stored and applied already."""

    served: Served
    store: SQLiteStore
    captured: tuple[bytes, dict[str, str]]

    def snapshot(self) -> tuple[object, ...]:
        """What a refused request must leave as it was: the inbox and the record."""
        record = record_of(self.store, "op-guard")
        inbox = self.store.inbox(limit=1000)
        events = self.store.audit("op-guard")
        return len(inbox), [d.applied_at for d in inbox], record.version, record.push, len(events)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    tmp_path = tmp_path_factory.mktemp("guarded")
    store = SQLiteStore(tmp_path / "store.db")
    start(
        Operation(status_url="http://127.0.0.1:9/status", profile=PROFILE, job_id="job-7",
                  webhook=RECEIVER),
        operation_id="op-guard", store=store,
    )  # fmt: skip
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        serving_subprocess(tmp_path, monkeypatch, "--no-worker") as served,
    ):
        body = payload("job-7")
        captured = (body, signed(body, "msg_captured"))
        first = httpx.post(f"{served.url}/webhooks/{RECEIVER}", content=body, headers=captured[1])
        assert first.json() == {"received": True, "duplicate": False, "matched": True}
        until(
            "the captured delivery is applied",
            lambda: record_of(store, "op-guard").push.deliveries == 1,
        )
        yield Guarded(served=served, store=store, captured=captured)
    store.close()


def _hook(
    guarded: Guarded, body: bytes | Iterator[bytes], headers: dict[str, str]
) -> httpx.Response:
    return httpx.post(
        f"{guarded.served.url}/webhooks/{RECEIVER}", content=body, headers=headers, timeout=WAIT_S
    )


def _signed_then(change: Callable[[dict[str, str]], None], body: bytes | None = None) -> Any:
    def send(guarded: Guarded) -> httpx.Response:
        sent = body if body is not None else payload("job-7")
        headers = signed(sent, "msg_bad")
        change(headers)
        return _hook(guarded, sent, headers)

    return send


def _at(offset_s: float) -> Any:
    def send(guarded: Guarded) -> httpx.Response:
        body = payload("job-7")
        when = datetime.now(UTC) + timedelta(seconds=offset_s)
        return _hook(guarded, body, signed(body, "msg_late", at=when))

    return send


def _forged(guarded: Guarded) -> httpx.Response:
    body = payload("job-7")
    return _hook(guarded, body, signed(body, "msg_forged", SECRET_OTHER))


def _body_swapped(guarded: Guarded) -> httpx.Response:
    _, headers = guarded.captured
    return _hook(guarded, payload("job-8"), headers)


def _unknown_provider(guarded: Guarded) -> httpx.Response:
    body = payload("job-7")
    return httpx.post(
        f"{guarded.served.url}/webhooks/nobody", content=body, headers=signed(body, "msg_x")
    )


def _too_large(guarded: Guarded) -> httpx.Response:
    body = json.dumps({"type": "x", "data": {"id": "job-7"}, "pad": "p" * MAX_BODY}).encode()
    return _hook(guarded, body, signed(body, "msg_big"))


def _too_large_in_chunks(guarded: Guarded) -> httpx.Response:
    body = json.dumps({"type": "x", "data": {"id": "job-7"}, "pad": "p" * MAX_BODY}).encode()
    chunks = iter([body[i : i + 256] for i in range(0, len(body), 256)])  # no Content-Length
    return _hook(guarded, chunks, signed(body, "msg_big_chunked"))


def _token(header: dict[str, str], path: str) -> Any:
    def send(guarded: Guarded) -> httpx.Response:
        return httpx.get(f"{guarded.served.url}{path}", headers=header, timeout=WAIT_S)

    return send


def _drop_signature(headers: dict[str, str]) -> None:
    del headers["webhook-signature"]


REFUSED = {
    "forged (another secret)": (_forged, 401, "bad_signature"),
    "forged (a captured signature on another body)": (_body_swapped, 401, "bad_signature"),
    "replayed (a delivery captured 6 minutes ago)": (_at(-360), 401, "stale"),
    "stale (signed an hour ago)": (_at(-3600), 401, "stale"),
    "future-dated (an hour ahead)": (_at(3600), 401, "future"),
    "garbage signature": (
        _signed_then(lambda h: h.update({"webhook-signature": "v1,%%% not base64 %%%"})),
        400, "malformed_signature",
    ),
    "signature without a version": (
        _signed_then(lambda h: h.update({"webhook-signature": "garbage"})),
        400, "malformed_signature",
    ),
    "no signature header": (_signed_then(_drop_signature), 400, "missing_headers"),
    "garbage timestamp": (
        _signed_then(lambda h: h.update({"webhook-timestamp": "soon"})),
        400, "malformed_timestamp",
    ),
    "a signed body that is not JSON": (
        _signed_then(lambda h: None, body=b"[1, 2"), 400, "not_json",
    ),
    "unknown provider": (_unknown_provider, 404, "unknown_provider"),
    "a body over the cap": (_too_large, 413, "too_large"),
    "a body over the cap, sent in chunks": (_too_large_in_chunks, 413, "too_large"),
    "no token": (_token({}, "/operations/op-guard"), 401, "unauthorized"),
    "a wrong token": (
        _token({"Authorization": "Bearer " + "w" * 43}, "/operations/op-guard"),
        401, "invalid_token",
    ),
    "no token on the event stream": (_token({}, "/events"), 401, "unauthorized"),
    "a token that is not a bearer token": (
        _token({"Authorization": "Basic dXNlcjpwYXNz"}, "/operations/op-guard/events"),
        401, "unauthorized",
    ),
}  # fmt: skip


@pytest.mark.e2e
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_bad_delivery_or_token_is_refused_and_changes_nothing(
    guarded: Guarded, case: str
) -> None:
    """Forged, replayed, stale, future, garbage, unknown, oversized, unauthenticated: a 4xx."""
    send, status, code = REFUSED[case]
    before = guarded.snapshot()
    answer = send(guarded)
    after = guarded.snapshot()
    assert (answer.status_code, answer.json()["error"]) == (status, code), answer.text
    detail = answer.json()["detail"]
    assert detail
    assert "\n" not in detail
    for secret in (SECRET_A, SECRET_A.removeprefix("whsec_"), guarded.served.token):
        assert secret not in answer.text
    if code in ("unauthorized", "invalid_token"):
        assert answer.headers["www-authenticate"].startswith('Bearer realm="waitbound"')
    assert after == before, "a refused request changed the store"


@pytest.mark.e2e
def test_a_replayed_delivery_is_acknowledged_as_a_duplicate_and_changes_nothing(
    guarded: Guarded,
) -> None:
    """A stored delivery sent again byte for byte (a replay, a retry): 200 duplicate, no change."""
    before = guarded.snapshot()
    answer = _hook(guarded, *guarded.captured)
    assert answer.json() == {"received": True, "duplicate": True, "matched": False}
    assert guarded.snapshot() == before


@pytest.mark.e2e
def test_during_a_rotation_both_secrets_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """secrets = [old, new]: either signs (or both); after the rotation only the new one does."""
    store = tmp_path / "store.db"
    body = payload("job-9")
    hook = f"/webhooks/{RECEIVER}"
    with (
        serving_subprocess(tmp_path, monkeypatch, "--no-worker",
                           secrets=(SECRET_ENV, NEXT_SECRET_ENV)) as served,
        httpx.Client(base_url=served.url, timeout=WAIT_S) as http,
    ):  # fmt: skip
        during = {
            name: http.post(hook, content=body, headers=signed(body, f"msg_{name}", secret))
            for name, secret in (("old", SECRET_A), ("new", SECRET_B),
                                 ("both", [SECRET_A, SECRET_B]), ("other", SECRET_OTHER))
        }  # fmt: skip
    with (
        serving_subprocess(
            tmp_path, monkeypatch, "--no-worker", secrets=(NEXT_SECRET_ENV,)
        ) as served,
        httpx.Client(base_url=served.url, timeout=WAIT_S) as http,
    ):
        after = {
            name: http.post(hook, content=body, headers=signed(body, f"msg_after_{name}", secret))
            for name, secret in (("old", SECRET_A), ("new", SECRET_B))
        }
    with reading(store) as opened:
        stored = sorted(d.webhook_id for d in opened.inbox(limit=100))
    assert {name: a.status_code for name, a in during.items()} == {
        "old": 200, "new": 200, "both": 200, "other": 401,
    }  # fmt: skip
    assert during["other"].json()["error"] == "bad_signature"
    assert {name: a.status_code for name, a in after.items()} == {"old": 401, "new": 200}
    assert stored == ["msg_after_new", "msg_both", "msg_new", "msg_old"]


# --- 7. kill -9 between the outcome and its delivery --------------------------------

ENDINGS = {
    "succeeded": ([{"code": 200, "body": {"status": "done", "output": 1}}], {}),
    "failed": ([{"code": 200, "body": {"status": "error", "error": {"code": "boom"}}}], {}),
    "succeeded after a result fetch": (
        [{"code": 200, "body": {"status": "done", "result_url": "{base_url}/result"}}],
        {"result": [{"code": 200, "body": {"rows": 1}}]},
    ),
}


def _ending(name: str, running: int) -> dict[str, object]:
    status, more = ENDINGS[name]
    pending = [{"code": 200, "body": {"status": "running"}, "repeat": running}] if running else []
    return {"id": "crash-final", "endpoints": {"status": [*pending, *status], **more}}


def _worker(store: Path, failpoint: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "WAITBOUND_FAILPOINT"}
    env["WAITBOUND_NOTIFY_SECRET"] = NOTIFY_SECRET
    if failpoint:
        env["WAITBOUND_FAILPOINT"] = failpoint
    command = [sys.executable, "-m", "waitbound", "worker", "--until-idle", "--lease", "2s"]
    return subprocess.run(
        [*command, "--store", str(store)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.e2e
@pytest.mark.parametrize("seed", range(4))
def test_a_worker_killed_between_an_outcome_and_its_delivery_delivers_once_after_restart(
    seed: int, tmp_path: Path
) -> None:
    """kill -9 right after the first final outcome is stored; the restart delivers it once."""
    rng = random.Random(seed)
    names = [rng.choice(list(ENDINGS)) for _ in range(3)]
    store_path = tmp_path / "store.db"
    # 30 requests at the 3 s cap cover the 60 s deadline: the plan does not spread them
    policy = Policy(base_delay_s=0.05, max_delay_s=3, deadline_s=60, request_timeout_s=2, lease_s=1)
    simulators = [
        Simulator(parse_scenario(_ending(name, rng.randint(0, 2)))).start() for name in names
    ]
    try:
        with receiving() as hooked:
            with reading(store_path) as store:
                ids = [
                    start(Operation(status_url=f"{sim.base_url}/status", profile=PROFILE,
                                    policy=policy, notify_url=hooked.url),
                          operation_id=f"op-{i}", store=store).operation_id
                    for i, sim in enumerate(simulators)
                ]  # fmt: skip
            crashed = _worker(store_path, "final:1")
            assert crashed.returncode == -signal.SIGKILL, crashed.stderr
            with reading(store_path) as store:
                final_at_crash = [i for i in ids if record_of(store, i).is_final]
                pending = store.outbox()
            assert hooked.ids() == [], "delivered before the crash"
            # The first commit that stored a final outcome: one, or several when the
            # worker's group commit carried more than one answer (save_many).
            assert final_at_crash, "the worker died before any outcome was stored"
            assert sorted((e.operation_id, e.status, e.attempts) for e in pending) == [
                (i, OutboxStatus.PENDING, 0) for i in sorted(final_at_crash)
            ]
            restarted = _worker(store_path, None)
            assert restarted.returncode == 0, restarted.stderr
            with reading(store_path) as store:
                records = [record_of(store, i) for i in ids]
                entries = store.outbox()
    finally:
        for sim in simulators:
            sim.stop()
    assert all(r.outcome is not None for r in records)
    finals = [r.operation_id for r in records if r.is_final]
    assert set(final_at_crash) <= set(finals)
    # Each final operation's completion arrived once, under its stable id; an operation
    # that is not final (an answer lost to the kill, escalated) owes none.
    wanted = sorted(completion_delivery_id(i, Channel.WEBHOOK) for i in finals)
    assert sorted(hooked.ids()) == wanted
    assert hooked.rejected == []
    assert sorted((e.delivery_id, e.status) for e in entries) == [
        (delivery_id, OutboxStatus.DELIVERED) for delivery_id in wanted
    ]
    for record, sim in zip(records, simulators, strict=True):
        assert sim.count("status") + sim.count("result") <= record.requests_used


# --- 8. /events?label= across operations, dropped and resumed -----------------------


def _label_stream(
    served: Served, store: SQLiteStore, wanted: list[str], drop_after: int
) -> tuple[list[Any], list[Any]]:
    """Read ``/events?label=team-a/`` until every event of *wanted* (finished) arrived:
    *drop_after* messages, a dropped connection, then a resume with Last-Event-ID."""

    def complete(seen: list[Any]) -> bool:
        if not all(record_of(store, i).outcome for i in wanted):
            return False
        stored = {(i, s.seq) for i in wanted for s in store.audit(i)}
        return {(json.loads(m.data)["operation_id"], int(json.loads(m.data)["seq"]))
                for m in seen} >= stored  # fmt: skip

    target = f"{served.url}/events"
    params = {"label": "team-a/"}
    # Shorter than the stream's 15 s keep-alive: a stream that stops sending fails the test.
    timeout = httpx.Timeout(10.0)
    with httpx.Client(timeout=timeout, params=params) as http:
        first: list[Any] = []
        with connect_sse(http, "GET", target, headers=served.auth()) as source:
            for message in source.iter_sse():
                first.append(message)
                if len(first) == drop_after:
                    break  # the connection is closed mid-stream
        resumed: list[Any] = []
        headers = {**served.auth(), "Last-Event-ID": first[-1].id}
        with connect_sse(http, "GET", target, headers=headers) as source:
            for message in source.iter_sse():
                resumed.append(message)
                if complete(first + resumed):
                    break
    return first, resumed


@pytest.mark.e2e
def test_the_label_stream_sends_every_event_of_its_operations_once_across_a_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`/events?label=`: two operations' events, none of another label, none lost or twice."""
    quick = Policy(base_delay_s=0.1, max_delay_s=3, deadline_s=60)  # covers 60 s: no spread
    scenario = parse_scenario(running_then_done(running=6))
    simulators = [Simulator(scenario).start() for _ in range(3)]
    labels = ["team-a/x", "team-a/y", "team-b/z"]
    try:
        with reading(tmp_path / "store.db") as store:
            for sim, label in zip(simulators, labels, strict=True):
                start(Operation(status_url=f"{sim.base_url}/status", profile=PROFILE,
                                policy=quick, label=label),
                      operation_id=f"op-{label[-1]}", store=store)  # fmt: skip
            with serving_subprocess(tmp_path, monkeypatch) as served:
                first, resumed = _label_stream(served, store, ["op-x", "op-y"], drop_after=5)
            stored = {i: [(s.seq, s.event.kind) for s in store.audit(i)] for i in ("op-x", "op-y")}
    finally:
        for sim in simulators:
            sim.stop()
    messages = first + resumed
    data = [json.loads(m.data) for m in messages]
    assert [m.id for m in messages] == [f"{d['at']}|{d['operation_id']}|{d['seq']}" for d in data]
    assert len({m.id for m in messages}) == len(messages), "an event was sent twice"
    assert all(m.event == d["kind"] for m, d in zip(messages, data, strict=True))
    for operation_id, events in stored.items():
        got = [(d["seq"], d["kind"]) for d in data if d["operation_id"] == operation_id]
        assert got == events, f"{operation_id}: lost, doubled or out of order"
    assert {d["operation_id"] for d in data} == {"op-x", "op-y"}  # never team-b's
    assert len(first) == 5
    assert resumed
