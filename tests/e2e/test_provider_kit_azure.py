"""The provider kit speaks the Operation-Location protocol the way Azure's own client reads it.

``examples/provider_app.py`` runs under real uvicorn on a free loopback port; azure-core's
generic poller (``LROPoller`` + ``LROBasePolling``, whose ``OperationResourcePolling`` follows
``Operation-Location``) drives each job over its default requests transport, for every
ending: succeeded, failed, canceled and a partial success. Azure's terminal set is
Succeeded, Failed and Canceled; before the kit had its own status monitor, the poller
polled a ``completed_with_errors`` job forever.

azure-core is a test-only dependency.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.test_provider_kit import ROOT, _free_port

pytest.importorskip("azure.core")

from azure.core import PipelineClient
from azure.core.exceptions import HttpResponseError
from azure.core.pipeline import PipelineResponse
from azure.core.polling import LROPoller
from azure.core.polling.base_polling import LROBasePolling, OperationFailed
from azure.core.rest import HttpRequest

pytestmark = pytest.mark.e2e
POLL_S = 0.05
"""azure-core's own wait between polls (the kit's ``Retry-After: 0`` imposes none)."""
BOUND_S = 30.0
"""A poller still running after this long is the "polls forever" fault (a job takes 0.2 s)."""


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    """The example app under uvicorn with a zero poll hint; its base URL."""
    port = _free_port()
    env = {**os.environ, "PROVIDER_POLL_AFTER_S": "0"}
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(ROOT / "examples"),
         "provider_app:app", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 60  # a loaded machine starts uvicorn slowly
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


def _body(response: PipelineResponse[Any, Any]) -> Any:
    text = response.http_response.text()
    return json.loads(text) if text else None


def _poll(
    service: str, body: dict[str, object]
) -> tuple[LROPoller[Any], LROBasePolling[Any, Any, Any]]:
    """Start a job and let azure-core's generic poller follow it to its end."""
    client: PipelineClient[Any, Any] = PipelineClient(service)
    initial = client.send_request(
        HttpRequest("POST", f"{service}/jobs", json=body), _return_pipeline_response=True
    )
    assert "/operation" in initial.http_response.headers["Operation-Location"]
    polling: LROBasePolling[Any, Any, Any] = LROBasePolling(timeout=POLL_S)
    poller = LROPoller(client, initial, _body, polling)
    return poller, polling


def _monitor(service: str, job_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{service}/jobs/{job_id}/operation", timeout=5)
    assert answer.status_code == 200
    return dict(answer.json())


def test_azure_core_follows_a_succeeded_job_to_its_result(service: str) -> None:
    """Succeeded: the poller ends and hands back the kit's final job body with the result."""
    poller, _ = _poll(service, {"duration_s": 0.2})
    result = poller.result(timeout=BOUND_S)
    assert poller.done()
    assert poller.status() == "Succeeded"
    assert result["status"] == "succeeded"
    assert result["result"] == {"output_url": "https://cdn.example/input.mov.mp4"}


def test_azure_core_ends_a_partial_success_as_succeeded_with_counts_and_errors(
    service: str,
) -> None:
    """A partial success is Azure's Succeeded: the poller ends (it polled forever on
    completed_with_errors); the monitor carries the counts and the errors link."""
    poller, _ = _poll(service, {"duration_s": 0.2, "outcome": "completed_with_errors"})
    result = poller.result(timeout=BOUND_S)
    assert poller.done()
    assert poller.status() == "Succeeded"
    assert result["status"] == "completed_with_errors"
    monitor = _monitor(service, str(result["job_id"]))
    assert monitor["status"] == "Succeeded"
    assert monitor["job_status"] == "completed_with_errors"
    assert monitor["summary"] == {"processed": 4, "succeeded": 2, "failed": 2}
    errors = httpx.get(monitor["errors_url"], timeout=5).json()
    assert errors["total"] == 2


@pytest.mark.parametrize(("ending", "status"), [("failed", "failed"), ("canceled", "canceled")])
def test_azure_core_reports_a_failed_or_canceled_job_as_its_failure(
    service: str, ending: str, status: str
) -> None:
    """Failed and Canceled are terminal for the poller: it raises OperationFailed at once."""
    poller, polling = _poll(service, {"duration_s": 0.2, "outcome": ending})
    with pytest.raises(HttpResponseError) as raised:
        poller.result(timeout=BOUND_S)
    assert isinstance(raised.value.__cause__, OperationFailed)
    assert poller.done()
    assert str(poller.status()).lower() == status
    assert str(getattr(polling, "_status", "")).lower() == status
