"""Differential: Microsoft's own pollers on the Azure matrix, against the scenarios' expectations.

For each scenario of ``tests/scenarios/azure/`` the simulator serves it afresh, azure-core
sends the first request (``PipelineClient.send_request``), and ``LROPoller`` polls with the
scenario's reference poller: azure-mgmt-core's ``ARMPolling`` (ARM scenarios) or
azure-core's ``LROBasePolling`` (Azure.Core Operation-Location scenarios), ``timeout=0``
and the scenario's final-state-via. The reference must reach the scenario's outcome and
result, with at least as many requests as the scenario allows waitbound (waitbound may use
no more than Microsoft's client) — except the cases in ``ARGUED``, where the Azure
contracts say the reference is wrong; for those the test checks that it really does differ,
so an argument that no longer holds is noticed.

azure-core and azure-mgmt-core are test-only dependencies. Unmarked: it runs in-process
against loopback with zero delays (about a second for all of it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.scenarios.azure import generate
from waitbound.sim import Scenario, Simulator, load_scenario

azure_core = pytest.importorskip("azure.core")
pytest.importorskip("azure.mgmt.core")

from azure.core import PipelineClient  # noqa: E402
from azure.core.exceptions import (  # noqa: E402
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.pipeline import PipelineResponse  # noqa: E402
from azure.core.pipeline.policies import HeadersPolicy, RequestIdPolicy, RetryPolicy  # noqa: E402
from azure.core.polling import LROPoller  # noqa: E402
from azure.core.polling.base_polling import (  # noqa: E402
    BadResponse,
    BadStatus,
    LROBasePolling,
    OperationFailed,
)
from azure.core.rest import HttpRequest  # noqa: E402
from azure.mgmt.core.polling.arm_polling import ARMPolling  # noqa: E402

MATRIX = sorted(generate.HERE.glob("*.json"))

ARGUED: dict[str, str] = {
    # ARM "Call Action POST Asynchronously": the 202 "MUST include a Location header"
    # pointing to where the operation can be monitored. A 202 without Location,
    # Azure-AsyncOperation or Operation-Location says only "accepted", not "done"; azure-core
    # falls back to StatusCheckPolling and reports success with no result at once.
    # waitbound escalates (integration_failure) instead of claiming an action ran.
    "azure-post-202-no-header": "a 202 naming no polling URL is taken as success",
    # RFC 9110 section 9.2.2: POST is not idempotent; the Azure guidelines make a POST safe
    # to resend only with Repeatability-Request-ID (repeatable requests). azure-core's
    # RetryPolicy resends any POST answered 500/503/504, which may start the action twice;
    # waitbound sends an unkeyed POST once and escalates (provider_failure).
    "azure-post-500-not-resent": "an unkeyed POST answered 500 is resent (POST is not idempotent)",
    # Azure services MUST take the api-version query parameter ("Versioning"), and the
    # guidelines told services to name the Operation-Location "but do not include an
    # api-version query parameter": the client has to carry it. LROBasePolling GETs the
    # header's URL as given, the service answers 400 MissingApiVersionParameter, and
    # azure-core reports the operation failed though it succeeded. waitbound carries
    # api-version from the request URL (same origin) and succeeds.
    "azure-post-ol-no-api-version": "api-version is not carried onto the Operation-Location URL",
    # ARM "ProvisioningState property": Succeeded, Failed and Canceled are the three terminal
    # states; the AZ status monitor likewise. When the first answer already holds a terminal
    # state, azure-core's LROPoller sees finished() and never calls run(), where the only
    # "Failed/Canceled -> HttpResponseError" check lives: .result() hands back the Failed (or
    # Canceled) resource or monitor as if it succeeded, and only poller.status() tells.
    # waitbound reports failed / canceled with zero polls, as for a terminal state seen later.
    "azure-put-200-failed": "a Failed state in the first answer is returned as success",
    "azure-put-201-canceled": "a Canceled state in the first answer is returned as success",
    "azure-post-ol-failed-first": "a Failed monitor in the first answer is returned as success",
    # ARM "Creating/Updating using PUT": a PUT answers 200 OK or 201 Created with the
    # resource, and its final state is the resource (the Location URL, once done, "MUST now
    # return what would have been a successful response"; after the operation resource says
    # Succeeded, the GET on the resource returns it). An empty body, or a 204, is no
    # resource: azure-core raises BadResponse when the original URI answers empty while
    # polling, but hands back None as the PUT's result in these three places. waitbound
    # treats them alike: an empty or absent final resource is never succeeded
    # (integration_failure).
    "azure-put-204": "a PUT answered 204 (no resource) is returned as success",
    "azure-put-202-location-200-empty": "a PUT's Location answering 200 empty is success",
    "azure-put-201-aao-final-empty": "a PUT's final GET answering 200 empty is success",
}

#: Pipeline retries of at most 50 ms (the default backoff is 0.8 s, doubling).
RETRY = {"retry_backoff_factor": 0.01, "retry_backoff_max": 0.05}


def _callback(kind: str) -> Any:
    """The deserialization a generated SDK applies to the final answer."""

    def read(response: PipelineResponse[Any, Any]) -> Any:
        text = response.http_response.text()
        body = json.loads(text) if text else None
        if kind == "none":
            return None
        if kind == "result":
            return body.get("result") if isinstance(body, dict) else None
        return body

    return read


def reference_run(scenario: Scenario) -> tuple[str, str | None, Any, int]:
    """Run the scenario with Microsoft's poller: (outcome, reason, result, requests)."""
    wait, ref = scenario.wait, scenario.reference
    options = {"final-state-via": wait["final_state_via"]} if "final_state_via" in wait else None
    with Simulator(scenario) as sim:
        client: PipelineClient[Any, Any] = PipelineClient(
            sim.base_url,
            policies=[RequestIdPolicy(), HeadersPolicy(), RetryPolicy(**RETRY)],
        )
        body = wait.get("submit_body")
        request = HttpRequest(
            str(wait["submit_method"]),
            f"{sim.base_url}{wait['submit_path']}",
            json=body if body is not None else None,
        )
        polling: LROBasePolling[Any, Any, Any] = (
            ARMPolling if ref["poller"] == "arm" else LROBasePolling
        )(timeout=0, lro_options=options)
        outcome, reason, result = "succeeded", None, None
        try:
            initial = client.send_request(request, _return_pipeline_response=True)
            poller = LROPoller(client, initial, _callback(str(ref["callback"])), polling)
            result = poller.result()
        except HttpResponseError as err:
            outcome, reason = _failure(err, polling)
        except (ServiceRequestError, ServiceResponseError) as err:
            # No HTTP answer: a URL the transport cannot even parse is the contract's
            # fault (integration_failure); any other is the provider's (provider_failure).
            unusable = "parse" in str(err).lower() or "invalid" in str(err).lower()
            outcome, reason = (
                "escalated",
                ("integration_failure" if unusable else "provider_failure"),
            )
        finally:
            client.close()
        return outcome, reason, result, len(sim.log())


def _failure(
    err: HttpResponseError, polling: LROBasePolling[Any, Any, Any]
) -> tuple[str, str | None]:
    """Map azure-core's error onto waitbound's vocabulary."""
    cause = err.__cause__
    status = str(getattr(polling, "_status", "")).lower()
    if isinstance(cause, OperationFailed):
        return ("canceled" if status == "canceled" else "failed"), None
    if isinstance(cause, BadResponse):
        return "escalated", "integration_failure"
    if isinstance(cause, BadStatus) and (err.status_code or 0) >= 500:
        return "escalated", "provider_failure"
    return "failed", None


@pytest.mark.parametrize("path", MATRIX, ids=lambda p: p.stem)
def test_reference_agrees(path: Path) -> None:
    """Microsoft's poller reaches the scenario's outcome and result, with >= its requests."""
    scenario = load_scenario(path)
    expect = scenario.expect
    got = reference_run(scenario)
    outcome, reason, result, requests = got
    agrees = (
        outcome == expect["outcome"]
        and reason == expect.get("reason")
        and result == expect["result"]
        and requests >= int(expect["requests"])  # type: ignore[call-overload]
    )
    if scenario.id in ARGUED:
        assert not agrees, f"{scenario.id} is ARGUED but the reference now agrees: {got}"
        return
    assert agrees, f"reference got {got}, scenario expects {dict(expect)}"


def test_argued_cases_are_in_the_matrix() -> None:
    """Every ARGUED id names a scenario of the matrix."""
    ids = {json.loads(p.read_text(encoding="utf-8"))["id"] for p in MATRIX}
    assert set(ARGUED) <= ids
