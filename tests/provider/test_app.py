"""The provider kit's endpoints: every answer's shape, idempotent starts, 409s, cancel rules."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from waitbound._base._json import JSON
from waitbound.provider import (
    Job,
    JobCompletedWithErrors,
    JobFailed,
    JobSucceeded,
    JobSummary,
    Progress,
    ProviderApp,
    ProviderSettings,
)

from .conftest import Clock

pytestmark = pytest.mark.anyio
BASE = "http://svc/jobs/job_1"


async def test_start_answers_202_with_the_status_url_and_a_plain_message(
    client: httpx.AsyncClient,
) -> None:
    """POST /jobs: 202, Location names the status URL and Operation-Location the Azure-style
    monitor, Retry-After is the poll hint rounded up; the body says STARTED and NOT
    complete and names the next call."""
    answer = await client.post("/jobs", json={"source": "a.mov"})
    assert answer.status_code == 202
    assert answer.headers["location"] == BASE
    assert answer.headers["operation-location"] == f"{BASE}/operation"
    assert answer.headers["retry-after"] == "3"
    body = answer.json()
    assert body == {
        "job_id": "job_1",
        "status": "processing",
        "done": False,
        "cancelable": True,
        "progress_percent": None,
        "elapsed_seconds": 0.0,
        "poll_after_seconds": 2.5,
        "estimated_duration_seconds": 30.0,
        "status_url": BASE,
        "result_url": f"{BASE}/result",
        "cancel_url": f"{BASE}/cancel",
        "events_url": f"{BASE}/events",
        "message": body["message"],
    }
    assert "STARTED" in body["message"]
    assert "NOT complete" in body["message"]
    assert f"GET {BASE}" in body["message"]
    assert "2.5 seconds" in body["message"]


async def test_an_empty_body_is_an_empty_object(
    client: httpx.AsyncClient, kit: ProviderApp
) -> None:
    """No body at all starts a job whose request is {}."""
    assert (await client.post("/jobs")).status_code == 202
    job = kit.store.get("job_1")
    assert job is not None
    assert job.request == {}


@pytest.mark.parametrize(
    ("content", "code", "error"),
    [(b"{nope", 400, "invalid_json"), (b"[1]", 422, "invalid_body")],
)
async def test_a_bad_body_is_refused(
    client: httpx.AsyncClient, content: bytes, code: int, error: str
) -> None:
    """A body that is not JSON is 400; JSON that is not an object is 422."""
    answer = await client.post("/jobs", content=content)
    assert answer.status_code == code
    assert answer.json()["error"] == error


async def test_status_while_processing_reports_progress_and_elapsed_time(
    client: httpx.AsyncClient, kit: ProviderApp, clock: Clock
) -> None:
    """GET /jobs/{id}: progress_percent, elapsed_seconds, poll_after_seconds, NOT complete."""
    await client.post("/jobs", json={})
    await kit.report_progress("job_1", 42)
    clock.advance(7.25)
    answer = await client.get("/jobs/job_1")
    body = answer.json()
    assert answer.status_code == 200
    assert answer.headers["retry-after"] == "3"
    assert "location" not in answer.headers
    assert (body["done"], body["status"], body["progress_percent"]) == (False, "processing", 42)
    assert body["elapsed_seconds"] == 7.25
    assert body["poll_after_seconds"] == 2.5
    assert "NOT complete" in body["message"]
    assert "42% done" in body["message"]


async def test_a_success_has_its_result_inline(
    client: httpx.AsyncClient, kit: ProviderApp, clock: Clock
) -> None:
    """A small result is in the status body; no poll hint once done; elapsed stops at the end."""
    await client.post("/jobs", json={})
    clock.advance(3)
    await kit.finish("job_1", JobSucceeded(result={"url": "u"}))
    clock.advance(100)
    answer = await client.get("/jobs/job_1")
    body = answer.json()
    assert "retry-after" not in answer.headers
    assert body["done"] is True
    assert body["status"] == "succeeded"
    assert body["result"] == {"url": "u"}
    assert body["result_inline"] is True
    assert body["progress_percent"] == 100
    assert body["elapsed_seconds"] == 3
    assert body["cancelable"] is False
    assert "poll_after_seconds" not in body
    assert "succeeded" in body["message"]
    result = await client.get("/jobs/job_1/result")
    assert result.json() == {"job_id": "job_1", "status": "succeeded", "result": {"url": "u"}}


async def test_a_large_result_is_left_to_the_result_url(clock: Clock) -> None:
    """A result past inline_result_max_bytes is not in the status body, which says where."""
    kit = ProviderApp(settings=ProviderSettings(inline_result_max_bytes=10), now=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=kit), base_url="http://s") as h:
        job_id = (await h.post("/jobs", json={})).json()["job_id"]
        await kit.finish(job_id, "x" * 100)
        body = (await h.get(f"/jobs/{job_id}")).json()
        assert "result" not in body
        assert body["result_inline"] is False
        assert f"GET {body['result_url']}" in body["message"]
        assert (await h.get(f"/jobs/{job_id}/result")).json()["result"] == "x" * 100


async def test_a_partial_result_has_a_summary_and_an_errors_url(
    client: httpx.AsyncClient, kit: ProviderApp
) -> None:
    """completed_with_errors: summary counts, errors_url with a limit, review the errors."""
    await client.post("/jobs", json={})
    errors: tuple[JSON, ...] = tuple({"item": n} for n in range(150))
    summary = JobSummary(processed=200, succeeded=50, failed=150)
    await kit.finish("job_1", JobCompletedWithErrors(summary=summary, errors=errors, result=[1]))
    body = (await client.get("/jobs/job_1")).json()
    assert body["status"] == "completed_with_errors"
    assert body["done"] is True
    assert body["summary"] == {"processed": 200, "succeeded": 50, "failed": 150}
    assert body["errors_url"] == f"{BASE}/errors?limit=100"
    assert body["result"] == [1]
    assert "Review the errors" in body["message"]
    assert body["errors_url"] in body["message"]
    page = (await client.get(body["errors_url"])).json()
    assert page["total"] == 150
    assert page["errors"] == [{"item": n} for n in range(100)]
    assert page["next_url"] == f"{BASE}/errors?limit=100&offset=100"
    last = (await client.get(page["next_url"])).json()
    assert len(last["errors"]) == 50
    assert last["next_url"] is None
    assert (await client.get(f"{BASE}/errors?limit=0")).status_code == 400


async def test_a_failure_has_its_error(client: httpx.AsyncClient, kit: ProviderApp) -> None:
    """failed: the error as given, FAILED in the message, and the result endpoint's 409
    says there will never be a result."""
    await client.post("/jobs", json={})
    await kit.finish("job_1", JobFailed(error={"code": "bad_codec", "message": "no"}))
    body = (await client.get("/jobs/job_1")).json()
    assert (body["status"], body["done"]) == ("failed", True)
    assert body["error"] == {"code": "bad_codec", "message": "no"}
    assert "FAILED" in body["message"]
    result = await client.get("/jobs/job_1/result")
    assert result.status_code == 409
    assert result.json()["error"] == "no_result"
    assert result.json()["status"] == "failed"


async def test_the_result_is_409_run_not_completed_until_the_job_is_terminal(
    client: httpx.AsyncClient, kit: ProviderApp
) -> None:
    """GET result while processing: 409 run_not_completed with the current status."""
    await client.post("/jobs", json={})
    answer = await client.get("/jobs/job_1/result")
    assert answer.status_code == 409
    assert answer.json()["error"] == "run_not_completed"
    assert answer.json()["status"] == "processing"
    assert answer.headers["retry-after"] == "3"
    await kit.finish("job_1", 7)
    assert (await client.get("/jobs/job_1/result")).json()["result"] == 7


async def test_the_first_ending_wins(client: httpx.AsyncClient, kit: ProviderApp) -> None:
    """A second finish, a progress report or a cancel after the end changes nothing."""
    await client.post("/jobs", json={})
    await kit.finish("job_1", 1)
    again = await kit.finish("job_1", JobFailed(error={"code": "late"}))
    assert again.status == "succeeded"
    assert (await kit.report_progress("job_1", 5)).progress_percent == 100
    assert (await client.post("/jobs/job_1/cancel")).status_code == 409


async def test_cancel_while_cancelable_ends_the_job_canceled(
    client: httpx.AsyncClient,
) -> None:
    """POST cancel on a processing job: 200, status canceled, done, no result."""
    await client.post("/jobs", json={})
    answer = await client.post("/jobs/job_1/cancel")
    body = answer.json()
    assert answer.status_code == 200
    assert (body["status"], body["done"], body["cancelable"]) == ("canceled", True, False)
    assert body["cancel_reason"] == "canceled on request"
    assert "CANCELED" in body["message"]
    assert (await client.get("/jobs/job_1/result")).json()["error"] == "no_result"


async def test_cancel_is_refused_after_the_end_saying_why(
    client: httpx.AsyncClient, kit: ProviderApp
) -> None:
    """409 not_cancelable with the status and "already ended"."""
    await client.post("/jobs", json={})
    await kit.finish("job_1", None)
    answer = await client.post("/jobs/job_1/cancel")
    assert answer.status_code == 409
    assert answer.json()["error"] == "not_cancelable"
    assert answer.json()["status"] == "succeeded"
    assert "already ended with status succeeded" in answer.json()["message"]


async def test_cancel_is_refused_in_an_uninterruptible_phase(
    client: httpx.AsyncClient, kit: ProviderApp
) -> None:
    """A job marked not cancelable refuses cancels while still processing."""
    await client.post("/jobs", json={})
    await kit.report_progress("job_1", 90, cancelable=False)
    assert (await client.get("/jobs/job_1")).json()["cancelable"] is False
    answer = await client.post("/jobs/job_1/cancel")
    assert answer.status_code == 409
    assert answer.json()["status"] == "processing"
    assert "cannot be interrupted" in answer.json()["message"]


async def test_unknown_jobs_are_404(client: httpx.AsyncClient) -> None:
    """Every per-job endpoint answers 404 job_not_found for an unknown id."""
    for method, path in [
        ("GET", "/jobs/nope"),
        ("GET", "/jobs/nope/result"),
        ("GET", "/jobs/nope/errors"),
        ("POST", "/jobs/nope/cancel"),
        ("GET", "/jobs/nope/events"),
    ]:
        answer = await client.request(method, path)
        assert (answer.status_code, answer.json()["error"]) == (404, "job_not_found"), path


async def test_the_same_key_and_body_give_the_same_job(
    client: httpx.AsyncClient, kit: ProviderApp
) -> None:
    """A replayed Idempotency-Key with the same body (key order aside) is the same job:
    202 while processing, 200 once ended, marked Idempotent-Replayed."""
    first = await client.post("/jobs", json={"a": 1, "b": 2}, headers={"Idempotency-Key": "k"})
    again = await client.post(
        "/jobs", content=b'{"b": 2, "a": 1}', headers={"Idempotency-Key": "k"}
    )
    assert again.status_code == 202
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["operation-location"] == first.headers["operation-location"]
    assert again.json()["job_id"] == first.json()["job_id"] == "job_1"
    await kit.finish("job_1", "r")
    ended = await client.post("/jobs", json={"a": 1, "b": 2}, headers={"Idempotency-Key": "k"})
    assert ended.status_code == 200
    assert ended.json()["status"] == "succeeded"
    assert ended.json()["job_id"] == "job_1"
    assert (await client.post("/jobs", json={"a": 1, "b": 2})).json()["job_id"] != "job_1"


async def test_the_same_key_with_another_body_is_422(client: httpx.AsyncClient) -> None:
    """A key reused with a different body is refused with a message saying so."""
    await client.post("/jobs", json={"a": 1}, headers={"Idempotency-Key": "k"})
    answer = await client.post("/jobs", json={"a": 2}, headers={"Idempotency-Key": "k"})
    assert answer.status_code == 422
    assert answer.json()["error"] == "idempotency_key_reused"
    assert answer.json()["job_id"] == "job_1"
    assert "different request body" in answer.json()["message"]


async def test_a_run_callable_does_the_work_in_the_task_group(clock: Clock) -> None:
    """With run: progress reports show in the status; its return value ends the job;
    an exception fails it with internal_error and no exception text."""
    gate = anyio.Event()

    async def run(job: Job, progress: Progress) -> JSON:
        await progress(50)
        await gate.wait()
        if job.request == {"boom": True}:
            raise RuntimeError("secret detail")
        return {"ok": True}

    kit = ProviderApp(run, now=clock)
    transport = httpx.ASGITransport(app=kit)
    async with kit.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://s") as h:
        good = (await h.post("/jobs", json={})).json()["job_id"]
        bad = (await h.post("/jobs", json={"boom": True})).json()["job_id"]
        await anyio.wait_all_tasks_blocked()
        assert (await h.get(f"/jobs/{good}")).json()["progress_percent"] == 50
        gate.set()
        await anyio.wait_all_tasks_blocked()
        assert (await h.get(f"/jobs/{good}")).json()["result"] == {"ok": True}
        failed = (await h.get(f"/jobs/{bad}")).json()
        assert failed["error"]["code"] == "internal_error"
        assert "secret" not in json.dumps(failed)


async def test_cancel_cancels_the_run_callable(clock: Clock) -> None:
    """A cancel stops the job's run; it ends canceled, never succeeded."""
    stopped = anyio.Event()

    async def run(job: Job, progress: Progress) -> JSON:
        try:
            await anyio.sleep_forever()
        finally:
            stopped.set()
        return None  # pragma: no cover

    kit = ProviderApp(run, now=clock)
    transport = httpx.ASGITransport(app=kit)
    async with kit.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://s") as h:
        job_id = (await h.post("/jobs", json={})).json()["job_id"]
        await anyio.wait_all_tasks_blocked()
        assert (await h.post(f"/jobs/{job_id}/cancel")).json()["status"] == "canceled"
        with anyio.fail_after(2):
            await stopped.wait()
        assert (await h.get(f"/jobs/{job_id}")).json()["status"] == "canceled"


async def test_a_run_app_without_its_lifespan_answers_503(clock: Clock) -> None:
    """Mounted without entering lifespan(), a start is refused (not_running), not lost."""

    async def run(job: Job, progress: Progress) -> JSON:
        return None

    kit = ProviderApp(run, now=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=kit), base_url="http://s") as h:
        answer = await h.post("/jobs", json={})
    assert answer.status_code == 503
    assert answer.json()["error"] == "not_running"


async def test_mounted_under_a_prefix_the_urls_carry_it(clock: Clock) -> None:
    """Mounted at /v1 in another Starlette (as in FastAPI), every URL names /v1."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    kit = ProviderApp(now=clock, new_id=lambda: "j")
    outer = Starlette(routes=[Mount("/v1", app=kit)])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=outer), base_url="http://s"
    ) as h:
        answer = await h.post("/v1/jobs", json={})
        assert answer.headers["operation-location"] == "http://s/v1/jobs/j/operation"
        assert answer.json()["cancel_url"] == "http://s/v1/jobs/j/cancel"
        assert (await h.get("/v1/jobs/j")).json()["status"] == "processing"


async def test_the_events_stream_sends_status_then_end(
    client: httpx.AsyncClient, kit: ProviderApp
) -> None:
    """GET events: event status with the job's body on each change, then event end once
    terminal (httpx's ASGI transport reads the whole stream, so the job moves meanwhile)."""
    kit.settings = ProviderSettings(events_interval_s=0.01)
    await client.post("/jobs", json={})
    sent: list[object] = []  # each event's body, as the stream builds it
    body_of = kit.body_of

    def counted(job: Any, urls: Any) -> Any:
        sent.append(body := body_of(job, urls))
        return body

    kit.body_of = counted  # type: ignore[method-assign]

    async def sent_at_least(n: int) -> None:
        """Until the stream has sent *n* events (a ceiling only, never a pace)."""
        with anyio.fail_after(30):
            while len(sent) < n:
                await anyio.sleep(0.005)

    async def move() -> None:
        await sent_at_least(1)  # the stream saw the job processing
        await kit.report_progress("job_1", 60)
        await sent_at_least(2)  # ... and at 60 %
        await kit.finish("job_1", "done")

    async with anyio.create_task_group() as group:
        group.start_soon(move)
        with anyio.fail_after(5):
            answer = await client.get("/jobs/job_1/events")
    assert answer.headers["content-type"].startswith("text/event-stream")
    events: list[tuple[str, dict[str, object]]] = []
    name = ""
    for line in answer.text.splitlines():
        if line.startswith("event:"):
            name = line.partition(":")[2].strip()
        elif line.startswith("data:"):
            events.append((name, json.loads(line.partition(":")[2])))
    assert [name for name, _ in events] == ["status", "status", "end"]
    assert events[1][1]["progress_percent"] == 60
    assert events[2][1]["status"] == "succeeded"


async def test_the_operation_monitor_speaks_azures_terminal_set(
    client: httpx.AsyncClient, kit: ProviderApp
) -> None:
    """GET /jobs/{id}/operation: Running with Retry-After, then Succeeded (a partial success
    too, with its counts and errors link), Failed with the error, Canceled: only values
    in Azure's OperationStatus enum, so an Azure client's poller ends on each."""
    for _ in range(4):
        await client.post("/jobs", json={})
    running = await client.get("/jobs/job_1/operation")
    assert running.headers["retry-after"] == "3"
    assert running.json() == {"id": "job_1", "status": "Running", "job_status": "processing",
                              "job_url": BASE}  # fmt: skip
    summary = JobSummary(processed=3, succeeded=2, failed=1)
    await kit.finish("job_1", JobSucceeded(result={"a": 1}))
    await kit.finish(
        "job_2", JobCompletedWithErrors(summary=summary, errors=({"i": 3},), result=[1])
    )
    await kit.finish("job_3", JobFailed(error={"code": "bad", "message": "no"}))
    await kit.cancel("job_4", "a person canceled it")
    bodies = [(await client.get(f"/jobs/job_{n}/operation")).json() for n in range(1, 5)]
    assert [b["status"] for b in bodies] == ["Succeeded", "Succeeded", "Failed", "Canceled"]
    assert bodies[0]["result"] == {"a": 1}
    assert bodies[1]["job_status"] == "completed_with_errors"
    assert bodies[1]["summary"] == {"processed": 3, "succeeded": 2, "failed": 1}
    assert bodies[1]["errors_url"] == "http://svc/jobs/job_2/errors?limit=100"
    assert bodies[2]["error"] == {"code": "bad", "message": "no"}
    assert bodies[3]["error"]["message"] == "a person canceled it"
    assert (await client.get("/jobs/nope/operation")).status_code == 404


async def test_a_job_that_refuses_cancels_from_its_start_never_says_cancelable(
    clock: Clock,
) -> None:
    """Regression: with `settings.cancelable` false for its body, the receipt and every
    status answer say cancelable false and a cancel is refused (the receipt once said
    true for a job whose work made it uncancelable a moment later)."""
    kit = ProviderApp(
        settings=ProviderSettings(cancelable=lambda body: not (isinstance(body, dict)
                                                               and body.get("fixed"))),
        now=clock,
    )  # fmt: skip
    transport = httpx.ASGITransport(app=kit)
    async with kit.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://s") as h:
        fixed = (await h.post("/jobs", json={"fixed": True})).json()
        free = (await h.post("/jobs", json={})).json()
        assert (fixed["cancelable"], free["cancelable"]) == (False, True)
        assert (await h.get(f"/jobs/{fixed['job_id']}")).json()["cancelable"] is False
        assert (await h.post(f"/jobs/{fixed['job_id']}/cancel")).status_code == 409
        assert (await h.post(f"/jobs/{free['job_id']}/cancel")).status_code == 200
