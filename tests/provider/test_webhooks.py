"""Signed completion webhooks: Standard Webhooks, verified by the standardwebhooks library."""

from __future__ import annotations

import base64
import json

import anyio
import httpx
import pytest
from standardwebhooks import Webhook

from waitbound.provider import JobFailed, ProviderApp, ProviderSettings

pytestmark = pytest.mark.anyio
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


async def test_a_job_with_a_notify_url_gets_one_signed_completion() -> None:
    """The ending is POSTed once, signed; the receiver's library verifies it; a 500 is retried."""
    got: list[httpx.Request] = []

    def receive(request: httpx.Request) -> httpx.Response:
        got.append(request)
        return httpx.Response(500 if len(got) == 1 else 204)

    sender = httpx.AsyncClient(transport=httpx.MockTransport(receive))
    settings = ProviderSettings(webhook_secret=SECRET, webhook_retry_delays_s=(0.0, 0.0))
    kit = ProviderApp(settings=settings, http_client=sender)
    transport = httpx.ASGITransport(app=kit)
    async with kit.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://s") as h:
        job = (await h.post("/jobs", json={"notify_url": "http://hook/in"})).json()["job_id"]
        await kit.finish(job, JobFailed(error={"code": "x"}))
        with anyio.fail_after(2):
            while len(got) < 2:
                await anyio.sleep(0.01)
    assert [str(r.url) for r in got] == ["http://hook/in", "http://hook/in"]
    last = got[-1]
    payload = Webhook(SECRET).verify(last.content, dict(last.headers))
    assert payload["type"] == "job.completed"
    assert payload["data"]["status"] == "failed"
    assert payload["data"]["status_url"] == f"http://s/jobs/{job}"
    assert last.headers["webhook-id"] == got[0].headers["webhook-id"] == f"msg_{job}"
    assert json.loads(last.content)["data"]["error"] == {"code": "x"}


async def test_a_bad_notify_url_is_refused() -> None:
    """notify_url must be an http(s) URL."""
    kit = ProviderApp()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=kit), base_url="http://s") as h:
        answer = await h.post("/jobs", json={"notify_url": "file:///etc/passwd"})
    assert (answer.status_code, answer.json()["error"]) == (422, "invalid_notify_url")
