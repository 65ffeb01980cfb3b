"""The OpenAPI description is valid OpenAPI 3.1 in structure, names every route, and
describes the answers the app really gives."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import httpx
import jsonschema
import pytest
from starlette.routing import Route

from waitbound.provider import JobSucceeded, ProviderApp, openapi_document

pytestmark = pytest.mark.anyio
DOC: dict[str, Any] = openapi_document()
_OPERATION = {
    "type": "object",
    "required": ["responses"],
    "properties": {
        "responses": {
            "type": "object",
            "minProperties": 1,
            "patternProperties": {
                "^[1-5][0-9][0-9]$": {"type": "object", "required": ["description"]}
            },
            "additionalProperties": False,
        },
        "parameters": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "in"],
                "properties": {"in": {"enum": ["path", "query", "header", "cookie"]}},
            },
        },
    },
}
OPENAPI_31 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["openapi", "info", "paths"],
    "properties": {
        "openapi": {"type": "string", "pattern": "^3\\.1\\.[0-9]+$"},
        "info": {"type": "object", "required": ["title", "version"]},
        "paths": {
            "type": "object",
            "propertyNames": {"pattern": "^/"},
            "additionalProperties": {
                "type": "object",
                "propertyNames": {"enum": ["get", "post", "put", "patch", "delete"]},
                "additionalProperties": _OPERATION,
            },
        },
        "components": {"type": "object"},
    },
}
"""The parts of the OpenAPI 3.1 schema (spec.openapis.org/oas/3.1/schema) the document uses."""


def test_the_document_is_openapi_3_1_in_structure() -> None:
    """The document passes the structural schema; every component schema is a valid
    JSON Schema 2020-12 (OpenAPI 3.1's dialect); every $ref resolves."""
    jsonschema.Draft202012Validator(OPENAPI_31).validate(DOC)
    for schema in DOC["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)

    def refs(node: object) -> list[str]:
        if isinstance(node, dict):
            own = [node["$ref"]] if "$ref" in node else []
            return own + [r for v in node.values() for r in refs(v)]
        return [r for v in node for r in refs(v)] if isinstance(node, list) else []

    for ref in refs(DOC):
        assert ref.rpartition("/")[2] in DOC["components"]["schemas"], ref


def test_every_route_is_described_and_nothing_else() -> None:
    """Each route of the app and its methods is in paths, and paths holds no other."""
    routes = {
        (r.path, m.lower())
        for r in ProviderApp().routes
        if isinstance(r, Route)
        for m in set(r.methods or ()) - {"HEAD"}
    }
    described = {(path, method) for path, item in DOC["paths"].items() for method in item}
    assert routes == described


def test_the_shipped_file_is_what_is_served() -> None:
    """openapi.json ships in the package and GET /openapi.json serves it."""
    assert resources.files("waitbound.provider").joinpath("openapi.json").is_file()


def _check(answer: httpx.Response, path: str, method: str) -> None:
    described = DOC["paths"][path][method]["responses"][str(answer.status_code)]
    schema = described["content"]["application/json"]["schema"]
    full = {**schema, "$defs": DOC["components"]["schemas"]}
    resolved = json.loads(json.dumps(full).replace("#/components/schemas/", "#/$defs/"))
    jsonschema.Draft202012Validator(resolved).validate(answer.json())


async def test_the_real_answers_match_their_description() -> None:
    """Start, status, result (409 and 200), errors, cancel (200 and 409), 404 and 422
    answers validate against the response schemas the document gives them."""
    kit = ProviderApp()
    transport = httpx.ASGITransport(app=kit)
    async with kit.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://s") as h:
        start = await h.post("/jobs", json={}, headers={"Idempotency-Key": "k"})
        _check(start, "/jobs", "post")
        job = start.json()["job_id"]
        _check(
            await h.post("/jobs", json={"x": 1}, headers={"Idempotency-Key": "k"}), "/jobs", "post"
        )
        _check(await h.get(f"/jobs/{job}"), "/jobs/{job_id}", "get")
        _check(await h.get(f"/jobs/{job}/operation"), "/jobs/{job_id}/operation", "get")
        _check(await h.get(f"/jobs/{job}/result"), "/jobs/{job_id}/result", "get")
        _check(await h.get(f"/jobs/{job}/errors"), "/jobs/{job_id}/errors", "get")
        _check(await h.get("/jobs/nope"), "/jobs/{job_id}", "get")
        await kit.finish(job, JobSucceeded(result={"a": 1}))
        _check(await h.get(f"/jobs/{job}"), "/jobs/{job_id}", "get")
        _check(await h.get(f"/jobs/{job}/result"), "/jobs/{job_id}/result", "get")
        _check(await h.get(f"/jobs/{job}/operation"), "/jobs/{job_id}/operation", "get")
        _check(await h.post(f"/jobs/{job}/cancel"), "/jobs/{job_id}/cancel", "post")
        other = (await h.post("/jobs", json={})).json()["job_id"]
        _check(await h.post(f"/jobs/{other}/cancel"), "/jobs/{job_id}/cancel", "post")
        served = await h.get("/openapi.json")
        assert served.json() == DOC
