"""The agent tools through the official MCP client, in-process, against the simulator.

Every test runs in both client modes: ``auto`` (direct dispatch, no JSON-RPC) and
``legacy`` (the initialize handshake over in-memory JSON-RPC streams). The provider
is the real simulator on loopback; the store is a real SQLite file.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from waitbound import Operation, Phase, SQLiteStore, escalations, parse_profile, start
from waitbound.mcp import Jobs, create_server, parse_config
from waitbound.sim import Simulator, parse_scenario

pytestmark = pytest.mark.anyio

SECRET = "sk-test-7d1f0c"
TOKEN = f"Bearer {SECRET}"

PROFILE: dict[str, Any] = {
    "state": "status",
    "pending": ["queued", "running"],
    "succeeded": ["completed"],
    "failed": ["failed"],
    "canceled": ["canceled"],
    "cancelable": "cancelable",
    "result": "output",
    "error": "error",
    "job_id": "id",
    "submit": {"job_id": "id", "status_url": "status_url"},
    "cancel": {"method": "POST", "url_template": "/cancel"},
}

RECEIPT = {"code": 202, "body": {"id": "job-7", "status_url": "{base_url}/status"}}


@pytest.fixture(params=["auto", "legacy"])
def mode(request: pytest.FixtureRequest) -> str:
    """The MCP client's connection mode."""
    return str(request.param)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Harness:
    client: Client
    sim: Simulator
    store: SQLiteStore

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call *tool*; its structured answer (the test fails on a tool error)."""
        result = await self.client.call_tool(tool, arguments)
        assert not result.is_error, result.content
        assert result.structured_content is not None
        text = json.dumps(result.structured_content)
        assert "sk-test" not in text
        return dict(result.structured_content)

    async def refused(self, tool: str, **arguments: Any) -> str:
        """Call *tool* expecting a tool error; its text."""
        result = await self.client.call_tool(tool, arguments)
        assert result.is_error, result.structured_content
        text = " ".join(getattr(block, "text", "") for block in result.content)
        assert "sk-test" not in text
        return text


def scenario(status: list[dict[str, Any]], **endpoints: list[dict[str, Any]]) -> Any:
    return parse_scenario(
        {"id": "mcp", "endpoints": {"submit": [RECEIPT], "status": status, **endpoints}},
        source="mcp test",
    )


def config(base_url: str, **provider: Any) -> dict[str, Any]:
    return {
        "server": {"default_wait_seconds": 10, "max_wait_seconds": 20, "max_answer_chars": 400},
        "providers": {
            "reports": {
                "base_url": base_url,
                "profile": PROFILE,
                "submit_path": "/jobs",
                "allowed_paths": ["/jobs"],
                "headers": {"Authorization": "Bearer ${REPORTS_TOKEN}", "X-Version": "2"},
                "policy": {  # 120 requests at the 0.3 s cap cover 30 s: no spread
                    "deadline_s": 30,
                    "max_requests": 120,
                    "base_delay_s": 0.1,
                    "max_delay_s": 0.3,
                },
                **provider,
            }
        },
    }


@asynccontextmanager
async def serving(
    mode: str, sim: Simulator, db: Path, list_limit: int = 20, **provider: Any
) -> AsyncIterator[Harness]:
    data = config(sim.base_url, **provider)
    data["server"]["list_limit"] = list_limit
    parsed = parse_config(data, base_dir=db.parent, environ={"REPORTS_TOKEN": SECRET})
    store = SQLiteStore(db)
    try:
        async with Client(create_server(Jobs(parsed, store)), mode=mode) as client:
            yield Harness(client, sim, store)
    finally:
        store.close()


async def until(condition: Callable[[], bool], timeout_s: float = 15) -> None:
    """Wait, without calling any tool, until *condition* holds."""
    with anyio.fail_after(timeout_s):
        while not condition():
            await anyio.sleep(0.05)


RUNNING = {"code": 200, "body": {"status": "running", "cancelable": True}}


async def test_slow_job_started_then_awaited_to_one_answer(mode: str, tmp_path: Path) -> None:
    done = {"code": 200, "body": {"status": "completed", "output": {"rows": 3}}, "after_s": 1.5}
    with Simulator(scenario([{**RUNNING, "repeat": 2}, done])) as sim:
        async with serving(mode, sim, tmp_path / "s.db") as h:
            started = await h.call("start_job", provider="reports", body={"report": "q3"})
            assert started["done"] is False
            assert started["status"] == "processing"
            assert started["job_id"] == "job-7"
            assert started["next_tool"] == "await_job"
            assert started["poll_after_seconds"] == started["next_check_after_seconds"] >= 1
            assert "STARTED and is NOT complete" in started["message"]
            finished = await h.call("await_job", operation_id=started["operation_id"])
    assert finished["done"] is True
    assert finished["status"] == "succeeded"
    assert finished["result"] == {"rows": 3}
    assert sim.count("submit") == 1
    sent = [e for e in sim.log() if e.endpoint in ("submit", "status")]
    # The simulator's log names the credential header but never keeps its value.
    assert all({k.lower(): v for k, v in e.headers.items()}["authorization"] == "[redacted]"
               for e in sent)  # fmt: skip


async def test_late_failure_reports_the_provider_error(mode: str, tmp_path: Path) -> None:
    failed = {
        "code": 200,
        "body": {"status": "failed", "error": {"code": "E_QUOTA"}},
        "after_s": 0.5,
    }
    with Simulator(scenario([RUNNING, failed])) as sim:
        async with serving(mode, sim, tmp_path / "s.db") as h:
            started = await h.call("start_job", provider="reports")
            answer = await h.call("await_job", operation_id=started["operation_id"])
    assert answer["done"] is True
    assert answer["status"] == "failed"
    assert answer["error"] == {"code": "E_QUOTA"}
    assert "FAILED" in answer["message"]
    assert "Do not report success" in answer["message"]


async def test_ceiling_returns_the_job_then_the_background_worker_finishes_it(
    mode: str, tmp_path: Path
) -> None:
    done = {"code": 200, "body": {"status": "completed", "output": "ok"}}
    # Running for 8 answers, counted, not timed: the backoff (at least 0.08 s, 0.12 s,
    # 0.18 s, 0.24 s) leaves room for at most 5 status requests in the 0.5 s await, however
    # slow the machine, so the await always ends first and the worker sees the rest.
    with Simulator(scenario([{**RUNNING, "repeat": 8}, done])) as sim:
        async with serving(mode, sim, tmp_path / "s.db") as h:
            started = await h.call("start_job", provider="reports")
            operation_id = started["operation_id"]
            waited = await h.call("await_job", operation_id=operation_id, max_wait_seconds=0.5)
            assert sim.count("status") <= 5
            assert waited["done"] is False
            assert waited["status"] == "processing"
            assert waited["job_id"] == "job-7"
            assert waited["waited_seconds"] >= 0.5
            assert "NOT complete" in waited["message"]
            assert waited["next_check_after_seconds"] >= 1

            def finished() -> bool:
                record = h.store.get(operation_id)
                return record is not None and record.is_finished

            await until(finished)  # no tool call drives it: the server's worker does
            requests = len(sim.log())
            checked = await h.call("check_job", operation_id=operation_id)
            assert len(sim.log()) == requests  # the look sent nothing
    assert checked["done"] is True
    assert checked["status"] == "succeeded"
    assert checked["result"] == "ok"


async def test_duplicate_completion_fetches_the_result_once(mode: str, tmp_path: Path) -> None:
    completed = {"code": 200, "body": {"status": "completed", "result_url": "{base_url}/result"}}
    status = [RUNNING, {**completed, "repeat": 50}]
    profile = {**PROFILE, "result": None, "result_url": "result_url"}
    del profile["result"]
    with Simulator(scenario(status, result=[{"code": 200, "body": {"file": "r.csv"}}])) as sim:
        async with serving(mode, sim, tmp_path / "s.db", profile=profile) as h:
            started = await h.call("start_job", provider="reports")
            operation_id = started["operation_id"]
            first = await h.call("await_job", operation_id=operation_id)
            second = await h.call("await_job", operation_id=operation_id)
            looked = await h.call("check_job", operation_id=operation_id)
            fetched = await h.call("get_result", operation_id=operation_id)
    assert first["result"] == second["result"] == looked["result"] == {"file": "r.csv"}
    assert json.loads(fetched["text"]) == {"file": "r.csv"}
    assert sim.count("result") == 1


async def test_list_jobs_after_a_restart_shows_the_operations_and_they_resume(
    mode: str, tmp_path: Path
) -> None:
    # The jobs complete once the test asks /release (after list_jobs), not after a time
    # a slow restart could outlast.
    done = {"code": 200, "body": {"status": "completed", "output": 1}, "after": "release"}
    db = tmp_path / "s.db"
    gated = parse_scenario(
        {
            "id": "mcp",
            "endpoints": {
                "submit": [RECEIPT],
                "status": [RUNNING, done],
                "release": [{"code": 204}],
            },
            "paths": {"release": ["/release"]},
        },
        source="mcp test",
    )
    with Simulator(gated) as sim:
        async with serving(mode, sim, db) as h:
            first = await h.call("start_job", provider="reports", idempotency_key="a-1")
            second = await h.call("start_job", provider="reports", idempotency_key="a-2")
            again = await h.call("start_job", provider="reports", idempotency_key="a-1")
            assert again["operation_id"] == first["operation_id"]
        assert sim.count("submit") == 2
        async with serving(mode, sim, db) as h:  # a new server on the same store
            listed = await h.call("list_jobs")
            ids = [line["operation_id"] for line in listed["operations"]]
            assert set(ids) == {first["operation_id"], second["operation_id"]}
            assert listed["in_flight"] == 2
            assert "NOT complete" in listed["message"]
            async with httpx.AsyncClient() as http:
                await http.post(f"{sim.base_url}/release")
            answer = await h.call("await_job", operation_id=first["operation_id"])
    assert answer["status"] == "succeeded"


async def test_bad_tool_input_is_a_clear_tool_error_and_stores_nothing(
    mode: str, tmp_path: Path
) -> None:
    with Simulator(scenario([RUNNING])) as sim:
        async with serving(mode, sim, tmp_path / "s.db") as h:
            assert "unknown provider 'nope'" in await h.refused("start_job", provider="nope")
            outside = await h.refused("start_job", provider="reports", path="/admin/drop")
            assert "outside the allowed paths" in outside
            for path in ("/jobs/%2e%2e/admin", "//evil.example/jobs", "/jobs/@evil", "/jobs?x=1"):
                assert "must start with '/'" in await h.refused(
                    "start_job", provider="reports", path=path
                )
            method = await h.refused("start_job", provider="reports", method="DELETE")
            assert "not allowed" in method
            missing = await h.refused("await_job", operation_id="op_missing")
            assert "no operation with id 'op_missing'" in missing
            assert h.store.recent() == []
            started = await h.call("start_job", provider="reports")
            negative = await h.refused(
                "await_job", operation_id=started["operation_id"], max_wait_seconds=-1
            )
            assert "must not be negative" in negative
            part = await h.refused("get_result", operation_id=started["operation_id"], offset=-3)
            assert "offset" in part
            typed = await h.refused("await_job", operation_id="x", max_wait_seconds="soon")
            assert "invalid arguments (max_wait_seconds:" in typed
            assert "\n" not in typed
    assert sim.count("submit") == 1


async def test_answers_stay_within_their_size_bound_and_never_show_a_secret(
    mode: str, tmp_path: Path
) -> None:
    big = {"rows": ["x" * 90] * 60, "echo": SECRET}
    echoed = {**RUNNING, "body": {"status": "running", "debug": {"authorization": TOKEN}}}
    done = {"code": 200, "body": {"status": "completed", "output": big}}
    with Simulator(scenario([echoed, done])) as sim:
        async with serving(mode, sim, tmp_path / "s.db") as h:
            started = await h.call("start_job", provider="reports")
            answer = await h.call("await_job", operation_id=started["operation_id"])
            assert "result" not in answer
            assert answer["result_ref"]["tool"] == "get_result"
            assert len(json.dumps(answer)) < 400 + 2000
            parts, offset = [], 0
            while offset is not None:
                part = await h.call(
                    "get_result", operation_id=started["operation_id"], offset=offset
                )
                assert len(part["text"]) <= 400
                parts.append(part["text"])
                offset = part["next_offset"]
    whole = "".join(parts)
    assert "[redacted]" in whole
    assert json.loads(whole.replace("[redacted]", SECRET)) == big
    for stored in tmp_path.glob("s.db*"):  # redacted before it was stored, too
        assert SECRET.encode() not in stored.read_bytes()


async def test_secrets_echoed_in_headers_and_escaped_bodies_reach_no_answer(
    mode: str, tmp_path: Path
) -> None:
    """A provider echoing the credential in request-id and Retry-After headers, JSON-
    escaped in bodies and in its error text: no tool answer and no stored byte has it."""
    escaped = "".join(f"\\u{ord(c):04x}" if i % 2 else c for i, c in enumerate(SECRET))
    echo_headers = {"X-Request-Id": TOKEN, "Request-Id": SECRET, "Retry-After": TOKEN}
    running = {
        "code": 200,
        "headers": echo_headers,
        "raw": '{"status": "running", "cancelable": true, "debug": "' + escaped + '"}',
    }
    failed = {
        "code": 200,
        "headers": echo_headers,
        "body": {"status": "failed", "error": {"message": f"key {SECRET} was revoked"}},
    }
    with Simulator(scenario([running, failed])) as sim:
        async with serving(mode, sim, tmp_path / "s.db") as h:
            started = await h.call("start_job", provider="reports")
            answers = [
                started,
                await h.call("check_job", operation_id=started["operation_id"]),
                await h.call("await_job", operation_id=started["operation_id"]),
                await h.call("list_jobs"),
                await h.call("get_result", operation_id=started["operation_id"], part="error"),
            ]
    assert answers[2]["status"] == "failed"
    text = json.dumps(answers)
    for form in (SECRET, escaped):
        assert form not in text
    for stored in tmp_path.glob("s.db*"):
        assert SECRET.encode() not in stored.read_bytes()


async def test_cancel_only_where_allowed_and_cancelable(mode: str, tmp_path: Path) -> None:
    canceled = {"code": 200, "body": {"status": "canceled"}}
    cancel = [{"code": 202, "body": {"status": "canceling"}}]
    with Simulator(scenario([{**RUNNING, "repeat": 100}], cancel=cancel)) as sim:
        async with serving(mode, sim, tmp_path / "a.db") as h:
            started = await h.call("start_job", provider="reports")
            refused = await h.refused("cancel_job", operation_id=started["operation_id"])
            assert "allow_cancel is off" in refused
    assert sim.count("cancel") == 0
    status = [{**RUNNING, "repeat": 2}, {**canceled, "repeat": 50}]
    with Simulator(scenario(status, cancel=cancel)) as sim:
        async with serving(mode, sim, tmp_path / "b.db", allow_cancel=True) as h:
            started = await h.call("start_job", provider="reports")
            operation_id = started["operation_id"]

            def seen() -> bool:
                record = h.store.get(operation_id)
                return record is not None and record.cancelable is True

            await until(seen)
            asked = await h.call("cancel_job", operation_id=operation_id, reason="not needed")
            assert asked["done"] is False
            assert "NOT yet confirmed" in asked["message"]
            again = await h.call("cancel_job", operation_id=operation_id)
            assert "already requested" in again["message"]
            answer = await h.call("await_job", operation_id=operation_id)
    assert answer["status"] == "canceled"
    assert sim.count("cancel") == 1


async def test_an_escalation_shows_its_reason_and_the_options_for_a_person(
    mode: str, tmp_path: Path
) -> None:
    odd = {"code": 200, "body": {"status": "paused_for_review"}}
    with Simulator(scenario([odd])) as sim:
        async with serving(mode, sim, tmp_path / "s.db") as h:
            started = await h.call("start_job", provider="reports")
            await h.call("await_job", operation_id=started["operation_id"])
            looked = await h.call("check_job", operation_id=started["operation_id"])
    assert looked["done"] is True
    assert looked["status"] == "escalated"
    assert looked["escalation"]["reason"] == "unknown_state"
    assert "treat_as_pending" in looked["escalation"]["options"]
    assert "A person must decide" in looked["message"]


async def test_list_jobs_of_in_flight_work_is_not_hidden_by_finished_jobs(
    mode: str, tmp_path: Path
) -> None:
    slow = {"code": 200, "body": {"status": "completed", "output": 1}, "after_s": 30}
    quick = {"code": 200, "body": {"status": "completed", "output": 2}}
    with Simulator(scenario([{**RUNNING, "repeat": 2}, slow])) as sim:
        async with serving(mode, sim, tmp_path / "s.db", list_limit=2) as h:
            running = await h.call("start_job", provider="reports")
        first = sim.base_url  # still this provider's: the configuration trusts it
        with Simulator(scenario([quick])) as other:
            async with serving(
                mode, other, tmp_path / "s.db", list_limit=2, trusted_origins=[first]
            ) as h:
                for _ in range(2):
                    started = await h.call("start_job", provider="reports")
                    await h.call("await_job", operation_id=started["operation_id"])
                everything = await h.call("list_jobs")
                in_flight = await h.call("list_jobs", include_finished=False)
    assert everything["more"] is True
    assert running["operation_id"] not in [o["operation_id"] for o in everything["operations"]]
    assert [o["operation_id"] for o in in_flight["operations"]] == [running["operation_id"]]
    assert "1 of these operations is NOT complete" in in_flight["message"]


async def test_a_submission_cut_off_by_a_crash_is_settled_not_left_waiting(
    mode: str, tmp_path: Path
) -> None:
    with Simulator(scenario([RUNNING])) as sim:
        async with serving(mode, sim, tmp_path / "s.db") as h:
            started = await h.call("start_job", provider="reports")
            keyed = await h.call("start_job", provider="reports", idempotency_key="k-1")
            for answer in (started, keyed):  # as a server killed mid-submit leaves them
                record = h.store.get(answer["operation_id"])
                assert record is not None
                h.store.save(
                    record.evolve(
                        ending=record.ending.evolve(phase=Phase.SUBMITTING),
                        counters=record.counters.evolve(submit_attempts=1),
                        lease=record.lease.held(
                            f"{socket.gethostname()}:999999999:dead",
                            record.created_at + timedelta(hours=1),
                        ),
                    ),
                    [],
                )
            requests = len(sim.log())
            settled = await h.call("await_job", operation_id=started["operation_id"])
            waiting = await h.call("check_job", operation_id=keyed["operation_id"])
            assert len(sim.log()) == requests
    assert settled["done"] is True
    assert settled["status"] == "escalated"
    assert settled["reason"] == "provider_failure"
    assert "may have created a job" in json.dumps(settled["error"])
    assert waiting["status"] == "submitting"
    assert "same idempotency_key" in waiting["message"]


async def test_the_server_drives_only_its_own_operations_in_a_shared_store(
    mode: str, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    with Simulator(scenario([{"code": 200, "body": {"status": "completed", "output": 1}}])) as sim:
        shared = SQLiteStore(db)
        try:  # an operation recorded for a `waitbound worker` that holds its credentials
            foreign = start(
                Operation(status_url=f"{sim.base_url}/status", profile=parse_profile(PROFILE)),
                store=shared,
            )
        finally:
            shared.close()
        async with serving(mode, sim, db) as h:
            started = await h.call("start_job", provider="reports")
            answer = await h.call("await_job", operation_id=started["operation_id"])
            untouched = h.store.get(foreign.operation_id)
    assert answer["status"] == "succeeded"
    assert untouched is not None
    assert untouched.requests_used == 0
    assert sim.count("status") == 1


async def test_request_extension_files_a_request_a_person_answers_and_extends_nothing(
    mode: str, tmp_path: Path
) -> None:
    """An agent's request_extension opens a decision request filed by agent:LABEL; the
    deadline and the request budget are unchanged until a person decides, and there is
    no tool to decide."""
    with Simulator(scenario([{**RUNNING, "repeat": 1000}])) as sim:
        async with serving(mode, sim, tmp_path / "s.db") as h:
            tools = {tool.name for tool in (await h.client.list_tools()).tools}
            assert "request_extension" in tools
            assert not any("decide" in name for name in tools)
            started = await h.call("start_job", provider="reports")
            operation_id = started["operation_id"]
            before = h.store.get(operation_id)
            assert before is not None
            asked = await h.call(
                "request_extension",
                operation_id=operation_id,
                minutes=0.5,
                checks=4,
                why="the export is large this quarter",
            )
            after = h.store.get(operation_id)
            assert after is not None
            listed = escalations(store=h.store)
    assert asked["extended"] is False
    assert asked["done"] is False
    assert "a PERSON decides" in asked["message"]
    assert "Nothing was extended" in asked["message"]
    assert asked["escalation"]["requested_by"] == "agent:mcp:reports"
    assert asked["escalation"]["proposed_minutes"] == 0.5
    assert asked["escalation"]["proposed_checks"] == 4
    assert [o["option"] for o in asked["escalation"]["options"]] == [
        "extend",
        "as_requested",
        "decline",
    ]
    assert "Requested by: agent:mcp:reports" in asked["escalation"]["message"]
    assert (after.deadline_at, after.max_requests) == (before.deadline_at, before.max_requests)
    assert after.decisions == ()
    assert [e.operation_id for e in listed] == [operation_id]
    assert listed[0].requested_by == "agent:mcp:reports"


async def test_request_extension_refuses_bad_input_and_changes_nothing(
    mode: str, tmp_path: Path
) -> None:
    """A blank why, a proposal beyond the ceilings, an unknown operation, a finished job:
    one-line tool errors, no decision request opened."""
    done = {"code": 200, "body": {"status": "completed", "output": "ok"}}
    with Simulator(scenario([{**RUNNING, "repeat": 1000}])) as sim:
        async with serving(mode, sim, tmp_path / "s.db") as h:
            started = await h.call("start_job", provider="reports")
            operation_id = started["operation_id"]
            for arguments, says in (
                ({"minutes": 0.5, "checks": 2, "why": "  "}, "reason ('why') is required"),
                ({"minutes": 10_000, "checks": 2, "why": "w"}, "beyond the ceiling"),
                ({"minutes": 0.5, "checks": 10_000, "why": "w"}, "checks must be"),
                ({"minutes": -1, "checks": 2, "why": "w"}, "minutes must be"),
            ):
                text = await h.refused("request_extension", operation_id=operation_id, **arguments)
                assert says in text, text
            unknown = await h.refused(
                "request_extension", operation_id="op_nope", minutes=1, checks=1, why="w"
            )
            assert "no operation" in unknown
            record = h.store.get(operation_id)
            assert record is not None
            assert record.decision_request is None
    with Simulator(scenario([done])) as sim:
        async with serving(mode, sim, tmp_path / "t.db") as h:
            started = await h.call("start_job", provider="reports")
            await h.call("await_job", operation_id=started["operation_id"])
            finished = await h.refused(
                "request_extension",
                operation_id=started["operation_id"],
                minutes=0.5,
                checks=1,
                why="w",
            )
    assert "nothing to extend" in finished
