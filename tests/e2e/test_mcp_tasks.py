"""`waitbound mcp` and the MCP Tasks extension, driven by the official TypeScript
requester (``@modelcontextprotocol/ext-tasks``) over stdio and streamable HTTP.

Every path the extension has: working → completed; completed with ``isError``;
input_required answered through ``tasks/update`` (``decide_via_elicitation`` on) or
decided by a person with ``waitbound decide`` (off); ``tasks/cancel`` accepted and
refused; the server killed and restarted between ``tools/call`` and ``tasks/get``;
a client without the extension; a client declaring it on one request and not the
next; two servers on one PostgreSQL store; bad input through the task methods. The
provider is the real simulator on loopback; nothing waits on a timer to check a rule
(a job ends when the test asks the simulator's ``/release``), and every wait is
bounded.

What differs between the transports runs on both (:func:`transport`): the happy path,
who an answer is recorded as (the operator on stdio, the token's holder over HTTP), a
restart (the requester's child on stdio, a server of ours over HTTP), the extension
declared per request. A path whose handling is the same task method behind either
transport runs on one (:func:`one`), the two transports taking turns: ``isError``,
a person's decision, a cancel accepted or refused, a client without the extension.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.mcp_tasks import (
    WAIT_S,
    HttpServer,
    Requester,
    RequesterError,
    release,
    server_argv,
)
from tests.e2e.runner import cli
from tests.stores.pg import fresh_database
from waitbound import Operation, Record, open_store, parse_profile, start
from waitbound.sim import Simulator, parse_scenario

pytestmark = pytest.mark.e2e

SECRET = "sk-tasks-5e0b1c77"

PROFILE = """
[providers.{name}.profile]
state = "status"
pending = ["queued", "running"]
succeeded = ["completed"]
failed = ["failed"]
canceled = ["canceled"]
cancelable = "cancelable"
result = "output"
error = "error"
job_id = "id"
submit = {{ job_id = "id", status_url = "status_url" }}
cancel = {{ method = "POST", url_template = "/cancel" }}
"""

PROVIDER = """
[providers.{name}]
base_url = "{base_url}"
submit_path = "/jobs"
allow_cancel = {allow_cancel}
decide_via_elicitation = {decide}
headers = {{ Authorization = "Bearer ${{TASKS_TOKEN}}" }}
policy = {{ deadline_s = {deadline_s}, max_requests = {max_requests}, base_delay_s = 0.2, \
max_delay_s = {max_delay_s}, max_extension_s = 600 }}
"""

RUNNING = {"code": 200, "body": {"status": "running", "cancelable": True}}
DONE = {"code": 200, "body": {"status": "completed", "output": {"rows": 3}}, "after": "release"}


def scenario(*status: dict[str, Any], cancel: bool = False) -> Any:
    endpoints: dict[str, Any] = {
        "submit": [{"code": 202, "body": {"id": "job-7", "status_url": "{base_url}/status"}}],
        "status": list(status),
        "release": [{"code": 204}],
    }
    if cancel:
        endpoints["cancel"] = [{"code": 202}]
    return parse_scenario(
        {"id": "tasks", "endpoints": endpoints, "paths": {"release": ["/release"]}},
        source="mcp tasks test",
    )


def write_config(
    folder: Path, base_url: str, *, max_requests: int = 1500, inbox: bool = True
) -> Path:
    """``reports``: agents may cancel, an answer decides; ``exports``: neither. By default
    1,500 requests at the 0.4 s cap cover the 600 s deadline: the plan does not spread
    them, and the job is looked at about every 0.4 s."""
    text = "[server]\ntask_retention_seconds = 3600\n"
    if inbox:
        text += 'inbox_url = "http://127.0.0.1:8080/inbox"\n'
    for name, allow_cancel, decide in (("reports", "true", "true"), ("exports", "false", "false")):
        text += PROVIDER.format(
            name=name,
            base_url=base_url,
            allow_cancel=allow_cancel,
            decide=decide,
            max_requests=max_requests,
            # The plan keeps a budget's last request late in the deadline unless the cap
            # is five times the deadline (docs/waiting.md): at a 60 s cap a small budget's
            # looks go at the backoff, and it is spent well before its 12 s deadline.
            deadline_s=12 if max_requests <= 3 else 600,
            max_delay_s=60 if max_requests <= 3 else 0.4,
        )
        text += PROFILE.format(name=name)
    path = folder / "waitbound-mcp.toml"
    path.write_text(text)
    return path


@dataclass
class Session:
    """One requester connected to `waitbound mcp` (its transport's own way)."""

    requester: Requester
    transport: str
    config: Path
    store: str
    http: HttpServer | None = None

    def connect(self) -> None:
        if self.transport == "stdio":
            argv = server_argv(self.config, self.store)
            self.requester("connect", transport="stdio", argv=argv, env=ENV)
        else:
            # a named decider's token: its answers are recorded as ann's, whatever the
            # client calls itself
            self.http = HttpServer(self.config, self.store, ENV, holder="ann decider")
            self.http.start()
            self.requester(
                "connect", transport="http", url=self.http.url, headers=self.http.headers
            )

    def restart(self) -> None:
        """Kill the server process (stdio: the requester's child; http: ours) and
        start a new one on the same store (http: on the port it binds itself)."""
        self.requester("disconnect")
        if self.http is not None:
            self.http.kill()
        self.connect()

    def close(self) -> None:
        self.requester("disconnect")
        if self.http is not None:
            self.http.kill()

    def start(self, provider: str = "reports") -> str:
        created = self.requester("call", name="start_job", arguments={"provider": provider})
        assert created["kind"] == "task", created
        return str(created["taskId"])

    def snapshot(self, task_id: str) -> dict[str, Any]:
        return dict(self.requester("snapshot", taskId=task_id))

    def until(self, task_id: str, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Poll ``tasks/get`` until *condition* holds (for at most WAIT_S)."""
        seen: dict[str, Any] = {}
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            seen = self.snapshot(task_id)
            if condition(seen):
                return seen
            time.sleep(0.1)
        raise AssertionError(f"task never reached the wanted state: {seen}")

    def raw(self, method: str, params: dict[str, Any], declare: bool | None = True) -> Any:
        return self.requester("raw", method=method, params=params, declare=declare)


ENV = {"TASKS_TOKEN": SECRET}


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    """Both transports."""
    return str(request.param)


def one(name: str) -> pytest.MarkDecorator:
    """Run a test on the transport *name* only (it overrides :func:`transport`)."""
    return pytest.mark.parametrize("transport", [name])


@contextmanager
def served(
    transport: str, folder: Path, sim: Simulator, store: str | None = None, **config: Any
) -> Iterator[Session]:
    path = write_config(folder, sim.base_url, **config)
    with Requester() as requester:
        session = Session(requester, transport, path, store or str(folder / "mcp.db"))
        session.connect()
        try:
            yield session
        finally:
            transcript = json.dumps(requester("transcript"))
            (folder / "transcript.json").write_text(transcript)
            session.close()
            assert SECRET not in transcript


def stored(session: Session, operation_id: str) -> Record:
    store = open_store(session.store)
    try:
        record = store.get(operation_id)
        assert record is not None
        return record
    finally:
        store.close()


def test_working_then_completed(transport: str, tmp_path: Path) -> None:
    with Simulator(scenario(RUNNING, DONE)) as sim, served(transport, tmp_path, sim) as s:
        task_id = s.start()
        working = s.snapshot(task_id)
        assert working["status"] == "working"
        assert "NOT complete" in working["statusMessage"]
        assert working["pollIntervalMs"] >= 1000
        # ttlMs: the deadline (600 s) plus the configured retention (3600 s)
        assert working["ttlMs"] == (600 + 3600) * 1000
        release(sim.base_url)
        settled = s.requester("settle", taskId=task_id)
        assert settled["status"] == "completed"
        result = settled["result"]
        assert result["isError"] is False
        assert result["structuredContent"]["status"] == "succeeded"
        assert result["structuredContent"]["result"] == {"rows": 3}
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    assert sim.count("submit") == 1


@one("stdio")
def test_a_failed_job_is_a_completed_task_with_is_error(transport: str, tmp_path: Path) -> None:
    failed = {"code": 200, "body": {"status": "failed", "error": "disk full"}, "after": "release"}
    with Simulator(scenario(RUNNING, failed)) as sim, served(transport, tmp_path, sim) as s:
        task_id = s.start()
        release(sim.base_url)
        settled = s.requester("settle", taskId=task_id)
    assert settled["status"] == "completed"  # never "failed": that is for JSON-RPC errors
    assert settled["result"]["isError"] is True
    assert settled["result"]["structuredContent"]["status"] == "failed"
    assert settled["result"]["structuredContent"]["error"] == "disk full"


def test_input_required_decided_through_tasks_update(transport: str, tmp_path: Path) -> None:
    answer = {
        "action": "accept",
        "content": {"option": "extend", "why": "the export is large", "checks": 3, "minutes": 0.2},
    }
    with (
        Simulator(scenario(RUNNING, DONE)) as sim,
        served(transport, tmp_path, sim, max_requests=3) as s,
    ):
        task_id = s.start()
        asked = s.until(task_id, lambda t: t["status"] == "input_required")
        (key,) = asked["inputRequests"]
        request = asked["inputRequests"][key]
        assert request["method"] == "elicitation/create"
        schema = request["params"]["requestedSchema"]
        assert schema["required"] == ["option", "why"]
        choices = {c["const"]: c["title"] for c in schema["properties"]["option"]["oneOf"]}
        assert "more check" in choices["extend"]
        assert "request_budget_exhausted" in request["params"]["message"], request["params"][
            "message"
        ]
        release(sim.base_url)
        s.requester("configure", answer=answer)
        settled = s.requester("settle", taskId=task_id)
        again = s.snapshot(task_id)
    assert settled["status"] == "completed", settled
    assert settled["result"]["isError"] is False
    assert again["status"] == "completed"
    record = stored(s, task_id)
    (decision,) = record.decisions
    assert decision.option == "extend"
    assert decision.why == "the export is large"
    # the authenticated principal, never the name the client gives itself
    assert "ext-tasks-requester" not in decision.by
    assert decision.by == "ann" if transport == "http" else decision.by.startswith("os user ")
    assert decision.detail["grant"] == {"minutes": 0.2, "checks": 3}


@one("stdio")
def test_input_required_decided_by_a_person_when_answers_do_not_decide(
    transport: str, tmp_path: Path
) -> None:
    answer = {"action": "accept", "content": {"option": "extend", "why": "please, 2 more"}}
    with (
        Simulator(scenario(RUNNING, DONE)) as sim,
        served(transport, tmp_path, sim, max_requests=3) as s,
    ):
        task_id = s.start("exports")
        asked = s.until(task_id, lambda t: t["status"] == "input_required")
        assert "http://127.0.0.1:8080/inbox" in asked["statusMessage"]
        (key,) = asked["inputRequests"]
        s.requester("configure", answer=answer)
        settling = s.requester.send("settle", taskId=task_id)
        filed = s.until(
            task_id, lambda t: t["status"] == "input_required" and not t["inputRequests"]
        )
        assert "a PERSON decides" in filed["statusMessage"]
        request = stored(s, task_id).decision_request
        assert request is not None
        assert request.requested_by.startswith(f"elicitation {key} ")
        assert stored(s, task_id).decisions == ()
        # answering the same key again changes nothing: it is no longer outstanding
        s.raw("tasks/update", {"taskId": task_id, "inputResponses": {key: answer}})
        assert stored(s, task_id).decision_request == request
        release(sim.base_url)  # the job is stopped: nothing is asked until a person decides
        decided = cli("decide", task_id, "extend", "--why", "ok, go on", "--checks", "3",
                      "--minutes", "0.2", "--store", s.store)  # fmt: skip
        assert decided.returncode == 0, decided.stderr
        settled = s.requester.reply(settling)
    assert settled["status"] == "completed"
    assert settled["result"]["isError"] is False
    (decision,) = stored(s, task_id).decisions
    assert decision.why == "ok, go on"
    assert "mcp-client" not in decision.by


@one("http")
def test_cancel_accepted_ends_cancelled_once_the_provider_says_so(
    transport: str, tmp_path: Path
) -> None:
    canceled = {"code": 200, "body": {"status": "canceled"}, "after": "cancel"}
    with (
        Simulator(scenario(RUNNING, canceled, cancel=True)) as sim,
        served(transport, tmp_path, sim) as s,
    ):
        task_id = s.start()
        s.until(task_id, lambda t: stored(s, task_id).provider_state == "running")
        assert s.requester("cancel", taskId=task_id) is True
        settled = s.requester("settle", taskId=task_id)
    assert settled["status"] == "cancelled"
    assert sim.count("cancel") == 1


@one("stdio")
def test_cancel_refused_is_an_error_and_the_task_goes_on(transport: str, tmp_path: Path) -> None:
    with (
        Simulator(scenario(RUNNING, DONE, cancel=True)) as sim,
        served(transport, tmp_path, sim) as s,
    ):
        task_id = s.start("exports")
        with pytest.raises(RequesterError) as refused:
            s.requester("cancel", taskId=task_id)
        assert "allow_cancel is off" in refused.value.error["message"]
        assert refused.value.error["code"] == -32602
        assert s.snapshot(task_id)["status"] == "working"
        assert stored(s, task_id).cancel_requested_at is None
        release(sim.base_url)
        settled = s.requester("settle", taskId=task_id)
    assert settled["status"] == "completed"
    assert sim.count("cancel") == 0


def test_a_restarted_server_answers_for_the_task(transport: str, tmp_path: Path) -> None:
    with Simulator(scenario(RUNNING, DONE)) as sim, served(transport, tmp_path, sim) as s:
        task_id = s.start()
        s.restart()
        assert s.snapshot(task_id)["status"] == "working"
        release(sim.base_url)
        resumed = s.requester("resume", taskId=task_id)
    assert resumed["status"] == "completed"
    assert resumed["result"]["structuredContent"]["status"] == "succeeded"
    assert sim.count("submit") == 1


@one("http")
def test_a_client_without_the_extension_gets_todays_answers(transport: str, tmp_path: Path) -> None:
    with Simulator(scenario(RUNNING, DONE)) as sim, served(transport, tmp_path, sim) as s:
        started = s.raw("tools/call", {"name": "start_job", "arguments": {"provider": "reports"}},
                        declare=False)["result"]  # fmt: skip
        assert started["resultType"] == "complete"
        answer = started["structuredContent"]
        assert answer["done"] is False
        assert answer["next_tool"] == "await_job"
        assert "NOT complete" in answer["message"]
        release(sim.base_url)
        awaited = s.raw(
            "tools/call",
            {"name": "await_job", "arguments": {"operation_id": answer["operation_id"]}},
            declare=False,
        )["result"]
        assert awaited["structuredContent"]["status"] == "succeeded"
        refused = s.raw("tasks/get", {"taskId": answer["operation_id"]}, declare=False)
        assert refused["error"]["code"] == -32021


def test_declared_on_one_request_and_not_the_next(transport: str, tmp_path: Path) -> None:
    with Simulator(scenario(RUNNING, DONE)) as sim, served(transport, tmp_path, sim) as s:
        call = {"name": "start_job", "arguments": {"provider": "reports"}}
        first = s.raw("tools/call", call, declare=True)["result"]
        assert first["resultType"] == "task"
        assert first["status"] == "working"
        second = s.raw("tools/call", call, declare=False)["result"]
        assert second["resultType"] == "complete"
        assert second["structuredContent"]["done"] is False
        look = {"name": "await_job", "arguments": {"operation_id": first["taskId"],
                                                   "max_wait_seconds": 0}}  # fmt: skip
        assert s.raw("tools/call", look, declare=True)["result"]["resultType"] == "task"
        assert s.raw("tools/call", look, declare=False)["result"]["resultType"] == "complete"


def test_bad_input_through_the_task_methods_changes_nothing(tmp_path: Path) -> None:
    with (
        Simulator(scenario(RUNNING, DONE)) as sim,
        served("stdio", tmp_path, sim, max_requests=3) as s,
    ):
        task_id = s.start()
        asked = s.until(task_id, lambda t: t["status"] == "input_required")
        (key,) = asked["inputRequests"]
        other = open_store(s.store)
        try:
            profile = parse_profile({"state": "s", "pending": ["p"], "succeeded": ["d"]})
            plain = Operation(status_url=f"{sim.base_url}/status", profile=profile)
            labelled = replace(plain, label="mcp:billing")  # a provider this server lacks
            foreign = [start(op, store=other).operation_id for op in (plain, labelled)]
        finally:
            other.close()
        before = stored(s, task_id)
        bad_ids: list[Any] = ["op_doesnotexist00000000", *foreign, 42, None, "x" * 5000, ""]
        for bad in bad_ids:
            for method in ("tasks/get", "tasks/cancel"):
                error = s.raw(method, {"taskId": bad})["error"]
                assert error["code"] == -32602, (method, bad, error)
                assert len(error["message"]) <= 500
        good = {"action": "accept", "content": {"option": "extend", "why": "w"}}
        bad_updates: list[Any] = [
            None,
            [],
            "extend",
            {key: "extend"},
            {key: {"action": "accept"}},
            {key: {"action": "accept", "content": {"option": "extend"}}},
            {key: {"action": "accept", "content": {"option": "mark_succeeded", "why": "w"}}},
            {key: {"action": "accept", "content": {"option": "extend", "why": "w", "sudo": 1}}},
            {key: {"action": "accept", "content": {"option": "extend", "why": "w" * 100_000}}},
            {key: {"action": "accept", "content": {"option": "extend", "why": "two\nlines"}}},
            {
                key: {
                    "action": "accept",
                    "content": {"option": "extend", "why": "w", "minutes": 1e308},
                }
            },
            {key: {"action": "accept", "content": {"option": "extend", "why": "w", "checks": -1}}},
            {key: {"action": "decline"}},
            {key: good, "other": "x" * 100_000},
            {f"k{i}": {} for i in range(100)},
        ]
        for responses in bad_updates:
            error = s.raw("tasks/update", {"taskId": task_id, "inputResponses": responses})["error"]
            assert error["code"] == -32602, (responses, error)
            assert len(error["message"]) <= 500
        for bad in bad_ids:
            error = s.raw("tasks/update", {"taskId": bad, "inputResponses": {key: good}})["error"]
            assert error["code"] == -32602
        # keys that are not outstanding are ignored, as the specification asks
        ignored = s.raw("tasks/update", {"taskId": task_id, "inputResponses": {"decision-1": good}})
        assert ignored["result"]["resultType"] == "complete"
        after = stored(s, task_id)
        assert after == before
        assert s.snapshot(task_id)["inputRequests"].keys() == {key}


def test_two_servers_on_one_postgres_store_give_the_same_answer(tmp_path: Path) -> None:
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    with (
        fresh_database() as dsn,
        Simulator(scenario(RUNNING, DONE)) as sim,
        served("http", tmp_path, sim, store=dsn) as first,
        served("http", second_dir, sim, store=dsn) as second,
    ):
        task_id = first.start()
        assert second.snapshot(task_id)["taskId"] == task_id
        release(sim.base_url)
        settled = second.requester("resume", taskId=task_id)
        assert settled["status"] == "completed"
        seen_by_first = first.snapshot(task_id)
        assert seen_by_first["result"] == settled["result"]


def test_notifications_for_the_tasks_a_client_listens_to(tmp_path: Path) -> None:
    with Simulator(scenario(RUNNING, DONE)) as sim, served("http", tmp_path, sim) as s:
        task_id = s.start()
        other_id = s.start()  # not listened to: never notified
        refused = s.requester("listen", notifications={"taskIds": [task_id]}, declare=False)
        assert refused["response"]["error"]["code"] == -32021
        asked = [task_id, "op_doesnotexist00000000", task_id]
        assert s.requester("listen", notifications={"taskIds": asked}, declare=True) == {
            "streaming": True
        }
        release(sim.base_url)
        deadline = time.monotonic() + WAIT_S
        heard: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            heard = s.requester("heard")
            if any(n["params"].get("status") == "completed" for n in heard[1:]):
                break
            time.sleep(0.1)
        final = s.snapshot(task_id)
    ack, *updates = heard
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"taskIds": [task_id]}
    assert {n["method"] for n in updates} == {"notifications/tasks"}
    assert {n["params"]["taskId"] for n in updates} == {task_id}
    assert updates[0]["params"]["status"] == "working"
    last = updates[-1]["params"]
    assert last["status"] == "completed"
    subscription = ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
    assert last.pop("_meta") == {"io.modelcontextprotocol/subscriptionId": subscription}
    final.pop("_meta")
    final.pop("resultType")
    assert last == final  # what tasks/get answers
    assert other_id != task_id
