# ruff: noqa: E501  (the table keeps each rule text on one line, as the scenario files do)
"""The Azure long-running-operation scenario matrix, as a compact table.

Run ``python -m tests.scenarios.azure.generate`` from the repository root to rewrite the JSON
files next to this script; ``tests/e2e/test_azure_matrix.py`` checks they are current.

Each scenario cites the rule it checks. The rules come from two public contracts:

- ARM: the Azure Resource Manager resource provider contract, "Asynchronous API reference"
  (the same rules as the "Track asynchronous Azure operations" page): PUT answers 200/201
  with a non-terminal ``provisioningState`` and may name ``Azure-AsyncOperation``; PATCH,
  DELETE and POST answer 202 with a ``Location`` (and optionally ``Azure-AsyncOperation``);
  a Location URL answers 202 while running and, when done, the response the operation would
  have given synchronously (DELETE: 200 or 204; POST: 200/204); provisioningState has three
  terminal values (Succeeded, Failed, Canceled), any other value is non-terminal, and no
  provisioningState means Succeeded; the operation resource's ``status`` likewise (any value
  but the three terminal ones means still running); when both headers come, use
  Azure-AsyncOperation; a 4xx/5xx from the operation resource is a failure to read the
  status, not of the operation.
- AZ: the Azure REST API guidelines (``azure/Guidelines.md``, "Long-running operations",
  and ``azure/ConsiderationsForServiceDesign.md``): the status monitor is named by
  ``Operation-Location``; its ``status`` is NotStarted / Running / Succeeded / Failed /
  Canceled; a POST action's monitor carries the outcome in ``result``; a resource's
  create-or-replace ends with the resource at its own URL; Azure services MUST take the
  ``api-version`` query parameter, while the guidelines have told services not to put it in
  the Operation-Location URL (so the client must carry it).
- RFC 9110 section 9.2.2: PUT and DELETE are idempotent (may be resent after a 5xx); POST is
  not (resent only with an idempotency key).

Every endpoint insists on ``api-version=2024-01-01`` (``require_query``): a client that
drops it is answered 400. ``expect.requests`` is the exact total the simulator receives,
submission included; ``expect.result`` the exact ``result`` of ``waitbound run --json``.
``reference`` names the Microsoft poller the differential test runs (``arm`` =
azure-mgmt-core's ARMPolling, ``base`` = azure-core's LROBasePolling) and how a generated
SDK reads the final answer (``body``: the whole JSON; ``result``: its ``result`` member;
``none``: nothing, as for DELETE).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
API = "2024-01-01"
Q = f"?api-version={API}"
RESOURCE = "/subscriptions/sub1/resourceGroups/rg1/providers/Microsoft.Contoso/widgets/w1"
ACTION = f"{RESOURCE}/restart"
ROUTES = {
    "resource": [f"GET {RESOURCE}"],
    "monitor": ["/ops/1"],
    "location": ["/results/1"],
    "location2": ["/results/2"],
    "location3": ["/results/3"],
    "final": [f"GET {RESOURCE}/output"],
}
AAO = {"Azure-AsyncOperation": "{base_url}/ops/1" + Q}
OL = {"Operation-Location": "{base_url}/ops/1" + Q}
LOC = {"Location": "{base_url}/results/1" + Q}
R0 = {"Retry-After": "0"}
ERROR = {
    "code": "WidgetQuotaExceeded",
    "message": "The widget quota of the subscription is used up.",
}
WAIT = {"deadline_s": 10, "max_requests": 20, "base_delay_s": 0.02, "max_delay_s": 0.1}
_ABSENT = object()


def res(state: object = _ABSENT) -> dict[str, Any]:
    """The widget resource, with ``properties.provisioningState`` = *state* (or none)."""
    props: dict[str, Any] = {"size": 3}
    if state is not _ABSENT:
        props = {"provisioningState": state, **props}
    return {"id": RESOURCE, "name": "w1", "type": "Microsoft.Contoso/widgets", "properties": props}


def mon(status: str, **extra: Any) -> dict[str, Any]:
    """An operation status resource (ARM) / status monitor (AZ) with *status*."""
    body = {"id": "/subscriptions/sub1/providers/Microsoft.Contoso/operationStatuses/op1"}
    return {**body, "name": "op1", "status": status, **extra}


def ans(
    code: int, body: Any = None, headers: dict[str, str] | None = None, **more: Any
) -> dict[str, Any]:
    """One scripted answer."""
    entry: dict[str, Any] = {"code": code}
    if headers:
        entry["headers"] = headers
    if body is not None:
        entry["body"] = body
    return entry | more


RESTART = {"restarted": True, "bootTime": "2024-01-01T00:00:00Z"}
OUTPUT = {"rows": 42, "format": "parquet"}
FAILED = mon("Failed", error=ERROR)
CANCELED = mon("Canceled", error={"code": "OperationCanceled", "message": "Canceled by a user."})


def scenario(
    ident: str,
    rule: str,
    method: str,
    submit: list[dict[str, Any]],
    *,
    outcome: str,
    requests: int,
    result: Any = None,
    reason: str | None = None,
    fsv: str | None = None,
    reference: str = "arm",
    callback: str | None = None,
    grace_s: float | None = None,
    **endpoints: list[dict[str, Any]],
) -> dict[str, Any]:
    """Build one scenario file's object (*grace_s*: its ``not_found_grace_s``)."""
    path = ACTION if method == "POST" else RESOURCE
    names = ["submit", *endpoints]
    wait: dict[str, Any] = {
        "profile": "azure",
        "submit_method": method,
        "submit_path": path + Q,
        **WAIT,
    }
    if method in ("PUT", "PATCH"):
        wait["submit_body"] = {"properties": {"size": 3}}
    if fsv:
        wait["final_state_via"] = fsv
    if grace_s is not None:
        wait["not_found_grace_s"] = grace_s
    expect: dict[str, Any] = {"outcome": outcome}
    if reason:
        expect["reason"] = reason
    expect |= {"result": result, "requests": requests}
    ref: dict[str, Any] = {
        "poller": reference,
        "callback": callback or ("none" if method == "DELETE" else "body"),
    }
    return {
        "id": f"azure-{ident}",
        "description": rule,
        "endpoints": {"submit": submit, **endpoints},
        "paths": {"submit": [f"{method} {path}"], **{name: ROUTES[name] for name in endpoints}},
        "require_query": {name: {"api-version": API} for name in names},
        "reference": ref,
        "wait": wait,
        "expect": expect,
    }


def matrix() -> list[dict[str, Any]]:
    """Every scenario of the matrix, in a stable order."""
    s = scenario
    done = res("Succeeded")
    return [
        # ---- PUT: create or replace (ARM "Creating/Updating using PUT") ----
        s(
            "put-200-succeeded",
            "ARM PUT: a 200 whose provisioningState is already terminal (Succeeded) is a synchronous create: done in the first answer, zero polls, the body is the result.",
            "PUT",
            [ans(200, done)],
            outcome="succeeded",
            result=done,
            requests=1,
        ),
        s(
            "put-201-succeeded",
            "ARM PUT: a 201 Created with provisioningState Succeeded is terminal in the first answer: zero polls.",
            "PUT",
            [ans(201, done)],
            outcome="succeeded",
            result=done,
            requests=1,
        ),
        s(
            "put-200-no-state",
            "ARM ProvisioningState property: 'If the resource returns no provisioningState, it is assumed to be Succeeded': a PUT 200 without one is done, zero polls.",
            "PUT",
            [ans(200, res())],
            outcome="succeeded",
            result=res(),
            requests=1,
        ),
        s(
            "put-201-creating-original-uri",
            "ARM PUT: 201 with a non-terminal provisioningState (Creating) and no header: poll GET on the resource's own URL (the original URI) until the state is terminal; the last GET is the result.",
            "PUT",
            [ans(201, res("Creating"))],
            outcome="succeeded",
            result=done,
            requests=3,
            resource=[ans(200, res("Creating")), ans(200, done)],
        ),
        s(
            "put-200-updating-unlisted",
            "ARM ProvisioningState: 'Any state other than [Succeeded, Failed, Canceled] is a non-terminal state': Updating (in no list) means still in progress.",
            "PUT",
            [ans(200, res("Updating"))],
            outcome="succeeded",
            result=done,
            requests=3,
            resource=[ans(200, res("Updating")), ans(200, done)],
        ),
        s(
            "put-201-aao",
            "ARM PUT with Azure-AsyncOperation: poll the operation resource (status InProgress, then Succeeded), then one GET on the resource (PUT: the request URL) for the result.",
            "PUT",
            [ans(201, res("Creating"), AAO)],
            outcome="succeeded",
            result=done,
            requests=4,
            monitor=[ans(200, mon("InProgress")), ans(200, mon("Succeeded"))],
            resource=[ans(200, done)],
        ),
        s(
            "put-200-updating-aao",
            "ARM PUT answering 200 (an update) with provisioningState Updating and Azure-AsyncOperation: the operation resource decides; the resource GET gives the result.",
            "PUT",
            [ans(200, res("Updating"), AAO)],
            outcome="succeeded",
            result=done,
            requests=3,
            monitor=[ans(200, mon("Succeeded"))],
            resource=[ans(200, done)],
        ),
        s(
            "put-201-aao-failed",
            "ARM operation resource: status Failed is terminal with its error; no final GET on the resource.",
            "PUT",
            [ans(201, res("Creating"), AAO)],
            outcome="failed",
            requests=3,
            monitor=[ans(200, mon("InProgress")), ans(200, FAILED)],
            resource=[ans(200, res("Failed"))],
        ),
        s(
            "put-201-aao-canceled",
            "ARM operation resource: status Canceled is terminal (canceled); no final GET.",
            "PUT",
            [ans(201, res("Creating"), AAO)],
            outcome="canceled",
            requests=2,
            monitor=[ans(200, CANCELED)],
            resource=[ans(200, res("Canceled"))],
        ),
        s(
            "put-201-aao-custom-status",
            "ARM operation resource: 'the transient / intermediate values can be service specific ... All other values imply that the operation is still running': status Provisioning is in progress.",
            "PUT",
            [ans(201, res("Creating"), AAO)],
            outcome="succeeded",
            result=done,
            requests=4,
            monitor=[ans(200, mon("Provisioning")), ans(200, mon("Succeeded"))],
            resource=[ans(200, done)],
        ),
        s(
            "put-201-aao-lowercase",
            "AZ/ARM status values are compared case-insensitively (extensible enums): 'inProgress' then lower-case 'succeeded' ends the operation.",
            "PUT",
            [ans(201, res("Creating"), AAO)],
            outcome="succeeded",
            result=done,
            requests=4,
            monitor=[ans(200, mon("inProgress")), ans(200, mon("succeeded"))],
            resource=[ans(200, done)],
        ),
        s(
            "put-202-aao-and-location",
            "ARM Track asynchronous operations: 'If your operation returns both values, use the Azure-AsyncOperation value': the Location URL is never polled; PUT ends with a GET on the request URL.",
            "PUT",
            [ans(202, None, AAO | LOC)],
            outcome="succeeded",
            result=done,
            requests=3,
            monitor=[ans(200, mon("Succeeded"))],
            location=[ans(500, {"error": ERROR})],
            resource=[ans(200, done)],
        ),
        s(
            "put-202-location",
            "ARM 202 Accepted and Location headers (the old PUT model): the Location URL answers 202 while running, then the response the PUT would have given: 200 with the resource, which is the result (no further GET).",
            "PUT",
            [ans(202, None, LOC)],
            outcome="succeeded",
            result=done,
            requests=3,
            location=[ans(202, None, LOC), ans(200, done)],
        ),
        s(
            "put-201-resource-failed",
            "ARM PUT: the resource's provisioningState turning Failed while polling the original URI ends the operation as failed.",
            "PUT",
            [ans(201, res("Creating"))],
            outcome="failed",
            requests=2,
            resource=[ans(200, res("Failed"))],
        ),
        s(
            "put-200-failed",
            "ARM ProvisioningState: Failed is terminal, also in the first answer: failed with zero polls.",
            "PUT",
            [ans(200, res("Failed"))],
            outcome="failed",
            requests=1,
        ),
        s(
            "put-201-canceled",
            "ARM ProvisioningState: Canceled is terminal, also in the first answer: canceled with zero polls.",
            "PUT",
            [ans(201, res("Canceled"))],
            outcome="canceled",
            requests=1,
        ),
        s(
            "put-201-ol",
            "AZ create-or-replace with Operation-Location: poll the status monitor, then GET the resource at its own URL (the request URL) for the result.",
            "PUT",
            [ans(201, res("Creating"), OL)],
            outcome="succeeded",
            result=done,
            requests=4,
            reference="base",
            monitor=[ans(200, mon("NotStarted")), ans(200, mon("Succeeded"))],
            resource=[ans(200, done)],
        ),
        s(
            "put-201-aao-resource-location",
            "ARM/AZ status monitor with resourceLocation on success: the final GET goes there (it wins over the request URL).",
            "PUT",
            [ans(201, res("Creating"), AAO)],
            outcome="succeeded",
            result=OUTPUT,
            requests=3,
            monitor=[
                ans(200, mon("Succeeded", resourceLocation="{base_url}" + RESOURCE + "/output" + Q))
            ],
            final=[ans(200, OUTPUT)],
            resource=[ans(200, done)],
        ),
        s(
            "put-retry-after-0",
            "Retry-After: 0 (ARM: the wait before polling again) imposes no wait; polling the original URI three times still ends as soon as the state is terminal.",
            "PUT",
            [ans(201, res("Creating"), R0)],
            outcome="succeeded",
            result=done,
            requests=4,
            resource=[ans(200, res("Creating"), R0, repeat=2), ans(200, done)],
        ),
        s(
            "put-500-then-201",
            "RFC 9110 9.2.2: PUT is idempotent, so a submission answered 500 is sent again; the second answer (201 Creating) starts the operation.",
            "PUT",
            [
                ans(500, {"error": {"code": "InternalServerError", "message": "Try again."}}),
                ans(201, res("Creating")),
            ],
            outcome="succeeded",
            result=done,
            requests=3,
            resource=[ans(200, done)],
        ),
        # ---- PATCH (ARM "Updating using PATCH") ----
        s(
            "patch-202-location",
            "ARM PATCH: 202 with Location; once done 'the URL that was returned in the Location header MUST now return what would have been a successful response': 200 with the resource is the result.",
            "PATCH",
            [ans(202, None, LOC)],
            outcome="succeeded",
            result=done,
            requests=3,
            location=[ans(202, None, LOC), ans(200, done)],
        ),
        s(
            "patch-202-aao-location",
            "ARM PATCH with Azure-AsyncOperation and Location: the operation resource decides; PATCH ends with a GET on the request URL.",
            "PATCH",
            [ans(202, None, AAO | LOC)],
            outcome="succeeded",
            result=done,
            requests=4,
            monitor=[ans(200, mon("Running")), ans(200, mon("Succeeded"))],
            resource=[ans(200, done)],
        ),
        s(
            "patch-200-updating-original-uri",
            "ARM PATCH answering 200 with provisioningState Updating (non-terminal) and no header: poll the resource URL until terminal.",
            "PATCH",
            [ans(200, res("Updating"))],
            outcome="succeeded",
            result=done,
            requests=3,
            resource=[ans(200, res("Updating")), ans(200, done)],
        ),
        s(
            "patch-200-resource-canceled",
            "ARM ProvisioningState: Canceled seen while polling the resource is terminal: canceled.",
            "PATCH",
            [ans(200, res("Updating"))],
            outcome="canceled",
            requests=2,
            resource=[ans(200, res("Canceled"))],
        ),
        s(
            "patch-202-ol-original-uri",
            "AZ final-state-via original-uri: after the Operation-Location monitor says Succeeded, the result is a GET on the request URL.",
            "PATCH",
            [ans(202, None, OL)],
            outcome="succeeded",
            result=done,
            requests=4,
            fsv="original-uri",
            reference="base",
            monitor=[ans(200, mon("Running")), ans(200, mon("Succeeded"))],
            resource=[ans(200, done)],
        ),
        # ---- POST actions (ARM "Call Action POST Asynchronously", AZ action LROs) ----
        s(
            "post-202-location-200",
            "ARM POST action: 202 with Location; Location answers 202 while running, then 200 with the action's response, which is the result.",
            "POST",
            [ans(202, None, LOC)],
            outcome="succeeded",
            result=RESTART,
            requests=3,
            location=[ans(202, None, LOC), ans(200, RESTART)],
        ),
        s(
            "post-202-location-204",
            "ARM POST action: 'It is acceptable for this to be a 200/204 NoContent if the action does not require a response': 204 from Location is success, no result.",
            "POST",
            [ans(202, None, LOC)],
            outcome="succeeded",
            result=None,
            requests=3,
            location=[ans(202, None, LOC), ans(204)],
        ),
        s(
            "post-202-location-200-empty",
            "ARM POST action: Location answering 200 with an empty body is success with no result.",
            "POST",
            [ans(202, None, LOC)],
            outcome="succeeded",
            result=None,
            requests=3,
            location=[ans(202, None, LOC), ans(200)],
        ),
        s(
            "post-202-location-400",
            "ARM Location polling: a 4xx with an error body ('If the operation failed, the response will be formatted as per the Error Response Content') is the operation's failure.",
            "POST",
            [ans(202, None, LOC)],
            outcome="failed",
            requests=3,
            location=[ans(202, None, LOC), ans(400, {"error": ERROR})],
        ),
        s(
            "post-202-new-location-each-poll",
            "ARM 202 Accepted and Location: 'If the operation is not complete, return 202 (Accepted) again with Location header': each 202 names a new Location, and the next poll goes there.",
            "POST",
            [ans(202, None, LOC)],
            outcome="succeeded",
            result=RESTART,
            requests=4,
            location=[ans(202, None, {"Location": "{base_url}/results/2" + Q})],
            location2=[ans(202, None, {"Location": "{base_url}/results/3" + Q})],
            location3=[ans(200, RESTART)],
        ),
        s(
            "post-200-sync",
            "ARM/AZ: an operation that finished synchronously answers 200 with its response and no polling header: done, the body is the result.",
            "POST",
            [ans(200, RESTART)],
            outcome="succeeded",
            result=RESTART,
            requests=1,
        ),
        s(
            "post-204-sync",
            "ARM/AZ: a 204 No Content first answer is done with no result.",
            "POST",
            [ans(204)],
            outcome="succeeded",
            result=None,
            requests=1,
        ),
        s(
            "post-202-no-header",
            "ARM POST action: the 202 'MUST include a Location header'; a 202 naming no status resource is an integration failure, not success (nothing says the action ran).",
            "POST",
            [ans(202)],
            outcome="escalated",
            reason="integration_failure",
            requests=1,
        ),
        s(
            "post-400",
            "A first answer with a 4xx error body is the operation's failure: no job was started, nothing to poll.",
            "POST",
            [ans(400, {"error": ERROR})],
            outcome="failed",
            requests=1,
        ),
        s(
            "post-500-not-resent",
            "RFC 9110 9.2.2: POST is not idempotent; a submission answered 500 without an idempotency key is not sent again (it may have started the action): escalated.",
            "POST",
            [
                ans(500, {"error": {"code": "InternalServerError", "message": "Try again."}}),
                ans(202, None, LOC),
            ],
            outcome="escalated",
            reason="provider_failure",
            requests=1,
            location=[ans(200, RESTART)],
        ),
        s(
            "post-aao-location-default",
            "ARM POST with Azure-AsyncOperation and Location, no final-state-via: after Succeeded, a POST's result is at the Location URL (one GET).",
            "POST",
            [ans(202, None, AAO | LOC)],
            outcome="succeeded",
            result=RESTART,
            requests=3,
            monitor=[ans(200, mon("Succeeded"))],
            location=[ans(200, RESTART)],
        ),
        s(
            "post-aao-location-fsv-location",
            "final-state-via location: after the operation resource says Succeeded, GET the first answer's Location for the result.",
            "POST",
            [ans(202, None, AAO | LOC)],
            outcome="succeeded",
            result=RESTART,
            requests=4,
            fsv="location",
            monitor=[ans(200, mon("Running")), ans(200, mon("Succeeded"))],
            location=[ans(200, RESTART)],
        ),
        s(
            "post-aao-fsv-aao",
            "final-state-via azure-async-operation: the operation resource is the final state; its final body (with its result member) is the result, no further GET.",
            "POST",
            [ans(202, None, AAO | LOC)],
            outcome="succeeded",
            result=mon("Succeeded", result=RESTART),
            requests=3,
            fsv="azure-async-operation",
            monitor=[ans(200, mon("Running")), ans(200, mon("Succeeded", result=RESTART))],
            location=[ans(500, {"error": ERROR})],
        ),
        s(
            "post-ol-fsv-operation-location",
            "AZ action LRO: 202 with Operation-Location and the status monitor in the body (NotStarted); poll until Succeeded; final-state-via operation-location: the monitor's final body (with its result member) is the result.",
            "POST",
            [ans(202, mon("NotStarted"), OL)],
            outcome="succeeded",
            result=mon("Succeeded", result=RESTART),
            requests=3,
            fsv="operation-location",
            reference="base",
            monitor=[ans(200, mon("Running")), ans(200, mon("Succeeded", result=RESTART))],
        ),
        s(
            "post-ol-succeeded-first",
            "AZ action LRO: the status monitor in the first answer already says Succeeded (with its result): terminal in the first answer, zero polls.",
            "POST",
            [ans(202, mon("Succeeded", result=RESTART), OL)],
            outcome="succeeded",
            result=mon("Succeeded", result=RESTART),
            requests=1,
            fsv="operation-location",
            reference="base",
            monitor=[ans(200, mon("Succeeded", result=RESTART))],
        ),
        s(
            "post-ol-failed-first",
            "AZ action LRO: the status monitor in the first answer says Failed with an error: failed, zero polls.",
            "POST",
            [ans(202, FAILED, OL)],
            outcome="failed",
            requests=1,
            fsv="operation-location",
            reference="base",
            callback="result",
            monitor=[ans(200, FAILED)],
        ),
        s(
            "post-ol-canceled",
            "AZ status monitor: Canceled is terminal: canceled, no final GET.",
            "POST",
            [ans(202, mon("NotStarted"), OL)],
            outcome="canceled",
            requests=3,
            fsv="operation-location",
            reference="base",
            callback="result",
            monitor=[ans(200, mon("Running")), ans(200, CANCELED)],
        ),
        s(
            "post-ol-resource-location",
            "AZ/ARM status monitor with resourceLocation: with no final-state-via the final GET goes to resourceLocation.",
            "POST",
            [ans(202, None, OL)],
            outcome="succeeded",
            result=OUTPUT,
            requests=3,
            reference="base",
            monitor=[
                ans(200, mon("Succeeded", resourceLocation="{base_url}" + RESOURCE + "/output" + Q))
            ],
            final=[ans(200, OUTPUT)],
        ),
        s(
            "post-ol-location-fsv-location",
            "AZ final-state-via location with Operation-Location: after Succeeded, GET the first answer's Location.",
            "POST",
            [ans(202, None, OL | LOC)],
            outcome="succeeded",
            result=RESTART,
            requests=3,
            fsv="location",
            reference="base",
            monitor=[ans(200, mon("Succeeded"))],
            location=[ans(200, RESTART)],
        ),
        s(
            "post-ol-no-api-version",
            "AZ versioning: services MUST take api-version, and the guidelines told services to name the Operation-Location without it; the monitor here requires it, so the client carries api-version from the request URL.",
            "POST",
            [ans(202, None, {"Operation-Location": "{base_url}/ops/1"})],
            outcome="succeeded",
            result=mon("Succeeded", result=RESTART),
            requests=3,
            fsv="operation-location",
            reference="base",
            monitor=[ans(200, mon("Running")), ans(200, mon("Succeeded", result=RESTART))],
        ),
        s(
            "post-aao-fsv-aao-no-result",
            "final-state-via azure-async-operation: the operation resource is the final state; without a result member its final body is still the result (never thrown away).",
            "POST",
            [ans(202, None, AAO | LOC)],
            outcome="succeeded",
            result=mon("Succeeded"),
            requests=2,
            fsv="azure-async-operation",
            monitor=[ans(200, mon("Succeeded"))],
            location=[ans(500, {"error": ERROR})],
        ),
        s(
            "post-ol-monitor-final",
            "AZ action LRO with Operation-Location and no Location: by method (POST: the Location, absent) nothing is fetched, so the monitor's final body is the result.",
            "POST",
            [ans(202, None, OL)],
            outcome="succeeded",
            result=mon("Succeeded"),
            requests=2,
            reference="base",
            monitor=[ans(200, mon("Succeeded"))],
        ),
        s(
            "post-ol-monitor-no-status",
            "AZ status monitor: 'status' is required; a monitor answering 200 with a body that has no status can never become a valid answer: integration failure at once, not polled again. (With no not-found grace: a body without a state before the job was ever seen is 'not visible yet' within the grace, as a 404 is, so the grace is 0 here to state the at-once rule.)",
            "POST",
            [ans(202, None, OL)],
            outcome="escalated",
            reason="integration_failure",
            requests=2,
            reference="base",
            grace_s=0,
            monitor=[ans(200, {"id": "op1", "name": "op1"})],
        ),
        s(
            "post-ol-header-not-a-url",
            "AZ: Operation-Location is a URL; a value that is not a URI reference (RFC 3986: no spaces) names nowhere to poll: integration failure with the first answer.",
            "POST",
            [ans(202, None, {"Operation-Location": "not a url"})],
            outcome="escalated",
            reason="integration_failure",
            requests=1,
            reference="base",
        ),
        s(
            "put-aao-header-no-host",
            "ARM: Azure-AsyncOperation is an absolute URL; 'http://' has no host and names nowhere: integration failure with the first answer (never the request URL polled in its place).",
            "PUT",
            [ans(201, res("Creating"), {"Azure-AsyncOperation": "http://"})],
            outcome="escalated",
            reason="integration_failure",
            requests=1,
        ),
        s(
            "put-201-empty-then-200-empty",
            "ARM PUT: the final state is the resource; a 201 with no body is still creating, and a 200 from the resource with an empty body is no resource at all: integration failure, never succeeded with a null result.",
            "PUT",
            [ans(201)],
            outcome="escalated",
            reason="integration_failure",
            requests=2,
            resource=[ans(200)],
        ),
        s(
            "put-204",
            "ARM PUT answers 200 or 201 with the resource; a 204 No Content has no resource to be the final state: integration failure, never succeeded.",
            "PUT",
            [ans(204)],
            outcome="escalated",
            reason="integration_failure",
            requests=1,
        ),
        s(
            "put-202-location-200-empty",
            "ARM PUT via Location: once done the Location URL returns what the PUT would have returned, the resource; a 200 with an empty body is no resource: integration failure.",
            "PUT",
            [ans(202, None, LOC)],
            outcome="escalated",
            reason="integration_failure",
            requests=2,
            location=[ans(200)],
        ),
        s(
            "put-201-aao-final-empty",
            "ARM PUT with Azure-AsyncOperation: after Succeeded the final GET on the resource must return the resource; a 200 with an empty body is no evidence of success: integration failure.",
            "PUT",
            [ans(201, res("Creating"), AAO)],
            outcome="escalated",
            reason="integration_failure",
            requests=3,
            monitor=[ans(200, mon("Succeeded"))],
            resource=[ans(200)],
        ),
        # ---- DELETE (ARM "Delete Resource Asynchronously") ----
        s(
            "delete-204",
            "ARM DELETE: 204 No Content first answer: deleted (or never existed), done, no result.",
            "DELETE",
            [ans(204)],
            outcome="succeeded",
            result=None,
            requests=1,
        ),
        s(
            "delete-200",
            "ARM DELETE: 200 OK with no body first answer: deleted synchronously, no result.",
            "DELETE",
            [ans(200)],
            outcome="succeeded",
            result=None,
            requests=1,
        ),
        s(
            "delete-202-location-204",
            "ARM DELETE: 202 with Location; 'the URL that was returned in the Location header MUST now return a 200 OK or 204 NoContent': 204 after a 202.",
            "DELETE",
            [ans(202, None, LOC | R0)],
            outcome="succeeded",
            result=None,
            requests=3,
            location=[ans(202, None, LOC | R0), ans(204)],
        ),
        s(
            "delete-202-location-200",
            "ARM DELETE: the Location URL's 200 OK (empty) means deleted.",
            "DELETE",
            [ans(202, None, LOC)],
            outcome="succeeded",
            result=None,
            requests=2,
            location=[ans(200)],
        ),
        s(
            "delete-202-location-409",
            "ARM Location polling: a 4xx (409 Conflict with an error) from the Location URL is the delete's failure.",
            "DELETE",
            [ans(202, None, LOC)],
            outcome="failed",
            requests=3,
            location=[ans(202, None, LOC), ans(409, {"error": ERROR})],
        ),
        s(
            "delete-202-aao-location",
            "ARM DELETE with Azure-AsyncOperation and Location: the operation resource decides; a DELETE has no final GET, so the operation resource's final body is the result (as azure-core's poller returns it).",
            "DELETE",
            [ans(202, None, AAO | LOC)],
            outcome="succeeded",
            result=mon("Succeeded"),
            requests=3,
            callback="body",
            monitor=[ans(200, mon("Running")), ans(200, mon("Succeeded"))],
            location=[ans(500, {"error": ERROR})],
        ),
        s(
            "delete-202-aao-canceled",
            "ARM operation resource: Canceled during a delete is terminal: canceled.",
            "DELETE",
            [ans(202, None, AAO | LOC)],
            outcome="canceled",
            requests=2,
            monitor=[ans(200, CANCELED)],
            location=[ans(500, {"error": ERROR})],
        ),
        s(
            "delete-202-ol",
            "AZ DELETE LRO: 202 with Operation-Location; poll the monitor to Succeeded; no final GET: the monitor's final body is the result.",
            "DELETE",
            [ans(202, None, OL)],
            outcome="succeeded",
            result=mon("Succeeded"),
            requests=3,
            reference="base",
            callback="body",
            monitor=[ans(200, mon("Running")), ans(200, mon("Succeeded"))],
        ),
        s(
            "delete-monitor-500-once",
            "ARM operation resource: 'If the response status code is a 4xx or 5xx value, it indicates a failure in reading the status but not in the underlying operation': a 500 is retried, then Running, Succeeded (the operation resource's final body the result).",
            "DELETE",
            [ans(202, None, AAO)],
            outcome="succeeded",
            result=mon("Succeeded"),
            requests=4,
            callback="body",
            monitor=[
                ans(500, {"error": {"code": "InternalServerError", "message": "Try again."}}),
                ans(200, mon("Running")),
                ans(200, mon("Succeeded")),
            ],
        ),
        s(
            "delete-500-then-202",
            "RFC 9110 9.2.2: DELETE is idempotent, so a submission answered 500 is sent again; the second answer (202 Location) is polled to 204.",
            "DELETE",
            [
                ans(500, {"error": {"code": "InternalServerError", "message": "Try again."}}),
                ans(202, None, LOC),
            ],
            outcome="succeeded",
            result=None,
            requests=3,
            location=[ans(204)],
        ),
    ]


def render(data: dict[str, Any]) -> str:
    """The file text for one scenario."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def files() -> dict[Path, str]:
    """Every scenario file's path and text."""
    return {HERE / f"{data['id']}.json": render(data) for data in matrix()}


def main() -> int:
    """Rewrite the JSON files; remove ones no longer in the table."""
    wanted = files()
    for stale in set(HERE.glob("*.json")) - set(wanted):
        stale.unlink()
    for path, text in wanted.items():
        path.write_text(text, encoding="utf-8")
    print(f"wrote {len(wanted)} scenarios to {HERE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
