"""Scenario loading: the format is validated strictly, with one-line messages naming the spot."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

import waitbound.sim
from waitbound._base._errors import ScenarioError
from waitbound.sim import Scenario, load_scenario, parse_scenario

# The handed cases, as copied into the project's tests.
CASES = sorted((Path(__file__).parents[1] / "cases").glob("*.json"))

BASE: dict[str, object] = {
    "id": "base",
    "endpoints": {
        "status": [
            {"code": 200, "body": {"status": "running"}},
            {"code": 200, "body": {"status": "done"}},
        ]
    },
}


def _with(path: str, value: object) -> dict[str, object]:
    """Return a copy of BASE with the dotted ``path`` set to ``value`` (``-`` deletes).

    A missing object on the way is created empty.
    """
    data = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node: object = data
    for part in parents:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[int(part)]  # type: ignore[index]
    if value == "-":
        del node[last]  # type: ignore[attr-defined]
    else:
        node[int(last) if isinstance(node, list) else last] = value  # type: ignore[index]
    return data


def test_exports_are_sorted_and_real() -> None:
    """The package re-exports exactly its sorted ``__all__``."""
    assert waitbound.sim.__all__ == sorted(waitbound.sim.__all__)
    assert all(hasattr(waitbound.sim, name) for name in waitbound.sim.__all__)


def test_handed_cases_are_all_present() -> None:
    """All 14 handed scenario files are found."""
    assert len(CASES) >= 14


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_handed_case_loads(path: Path) -> None:
    """Every handed scenario file loads and keeps its id, wait and expect."""
    scenario = load_scenario(path)
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert scenario.id == raw["id"] == path.stem
    assert dict(scenario.wait) == raw["wait"]
    assert dict(scenario.expect) == raw["expect"]
    assert scenario.endpoints["status"]


def test_parse_fills_defaults_and_is_frozen() -> None:
    """Absent keys get defaults, all four endpoints exist, and the scenario is immutable."""
    scenario = parse_scenario(BASE)
    assert set(scenario.endpoints) == {"status", "result", "cancel", "submit"}
    assert scenario.endpoints["result"] == ()
    first = scenario.endpoints["status"][0]
    assert (first.code, first.body, first.raw, first.repeat) == (
        200,
        {"status": "running"},
        None,
        1,
    )
    assert (first.after_s, first.delay_s, first.drop, dict(first.headers)) == (0.0, 0.0, False, {})
    assert (scenario.description, scenario.source, dict(scenario.wait)) == ("", "", {})
    assert scenario.raw == BASE
    with pytest.raises(dataclasses.FrozenInstanceError):
        scenario.id = "other"  # type: ignore[misc]


def test_parse_keeps_every_entry_field() -> None:
    """Every entry key is read: raw, headers, repeat, after_s, after, delay_s and drop."""
    data = {
        "id": "full",
        "description": "d",
        "source": "owner/repo#1",
        "endpoints": {
            "submit": [
                {"code": 202, "raw": "ok", "headers": {"Location": "{base_url}/status"}},
                {"drop": True, "repeat": 2, "after_s": 1.5, "after": "cancel", "delay_s": 0.25},
            ]
        },
    }
    scenario = parse_scenario(data)
    accepted, dropped = scenario.endpoints["submit"]
    assert (accepted.raw, dict(accepted.headers)) == ("ok", {"Location": "{base_url}/status"})
    assert (dropped.code, dropped.drop, dropped.repeat) == (None, True, 2)
    assert (dropped.after_s, dropped.after, dropped.delay_s) == (1.5, "cancel", 0.25)
    assert accepted.after is None
    assert (scenario.description, scenario.source) == ("d", "owner/repo#1")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("extra", 1, "top level: unknown key 'extra' (expected one of: description, endpoints"),
        ("id", "-", "id: required: a non-empty string"),
        ("id", 7, "id: expected string, got integer"),
        ("description", None, "description: expected string, got null"),
        ("endpoints", "-", "top level: missing required key 'endpoints'"),
        ("endpoints", [], "endpoints: expected object, got array"),
        (
            "endpoints.statuses",
            [],
            "endpoints.statuses: an extra endpoint needs its routes in paths",
        ),
        ("endpoints.status", {}, "endpoints.status: expected array, got object"),
        ("endpoints.status.1", "x", "endpoints.status[1]: expected object, got string"),
        ("endpoints.status.1.cod", 1, "endpoints.status[1]: unknown key 'cod' (expected one of:"),
        ("endpoints.status.0.code", "200", "endpoints.status[0].code: expected integer, got str"),
        ("endpoints.status.0.code", True, "endpoints.status[0].code: expected integer, got bool"),
        ("endpoints.status.0.code", 600, "endpoints.status[0].code: expected an HTTP status code"),
        ("endpoints.status.0.code", 99, "endpoints.status[0].code: expected an HTTP status code"),
        ("endpoints.status.0.code", "-", "endpoints.status[0]: missing required key 'code'"),
        ("endpoints.status.1.repeat", 0, "endpoints.status[1].repeat: expected an integer >= 1"),
        ("endpoints.status.1.repeat", 1.5, "endpoints.status[1].repeat: expected integer, got n"),
        ("endpoints.status.1.raw", "x", "endpoints.status[1]: 'body' and 'raw' are exclusive"),
        ("endpoints.status.1.body", float("nan"), "endpoints.status[1].body: expected a JSON val"),
        ("endpoints.status.1.body", {"a": {1: 2}}, "endpoints.status[1].body.a: expected a JSON"),
        ("endpoints.status.1.after_s", "1", "endpoints.status[1].after_s: expected number, got"),
        ("endpoints.status.1.delay_s", -1, "endpoints.status[1].delay_s: expected seconds >= 0"),
        ("endpoints.status.0.after_s", 1, "endpoints.status[0].after_s: the first entry has no"),
        ("endpoints.status.0.after", "cancel", "endpoints.status[0].after: the first entry has"),
        ("endpoints.status.1.after", 1, "endpoints.status[1].after: expected string, got integ"),
        ("endpoints.status.1.after", "canceled", "endpoints.status[1].after: expected another en"),
        ("endpoints.status.1.after", "status", "endpoints.status[1].after: expected another endp"),
        ("endpoints.status.1.drop", "yes", "endpoints.status[1].drop: expected boolean, got str"),
        ("endpoints.status.1.drop", True, "endpoints.status[1].code: a drop sends no response"),
        ("endpoints.status.1.code", 204, "endpoints.status[1]: a 204 response has no content"),
        ("endpoints.status.1.headers", [], "endpoints.status[1].headers: expected object, got a"),
        ("endpoints.status.1.headers", {"A": 1}, "endpoints.status[1].headers.A: expected a one-"),
        ("endpoints.status.1.headers", {"A": "x\r\nB: y"}, "endpoints.status[1].headers.A: exp"),
        ("endpoints.status.1.headers", {"A B": "x"}, "endpoints.status[1].headers: bad header"),
        ("endpoints.status.1.headers", {"content-length": "9"}, "endpoints.status[1].headers: r"),
        ("paths", [], "paths: expected object, got array"),
        ("paths.nope", ["/x"], "paths: unknown key 'nope' (expected one of: status, result,"),
        ("paths.status", "/x", "paths.status: expected a non-empty array of routes"),
        ("paths.status", [], "paths.status: expected a non-empty array of routes"),
        ("paths.status", [1], "paths.status[0]: expected a route string, got integer"),
        ("paths.status", ["x"], "paths.status[0]: bad route 'x' (expected '/path' or 'METHOD"),
        ("paths.status", ["get /x"], "paths.status[0]: bad route 'get /x'"),
        ("paths.status", ["/x?a=1"], "paths.status[0]: a route matches the path only; remove"),
        ("paths.status", ["/x", "/x"], "paths.status[1]: route '/x' is already 'status'"),
        ("endpoints.Mon", [], "endpoints.Mon: bad name (expected lower-case letters"),
        ("require_query", [], "require_query: expected object, got array"),
        ("require_query.nope", {}, "require_query: unknown key 'nope' (expected one of: st"),
        ("require_query.status", {"api-version": 1}, "require_query.status.api-version: exp"),
        ("require_query.status", {"api-version": ""}, "require_query.status.api-version: ex"),
        ("reference", 1, "reference: expected object, got integer"),
        ("wait", [], "wait: expected object, got array"),
        ("expect", "x", "expect: expected object, got string"),
    ],
)
def test_invalid_scenario_names_the_spot(path: str, value: object, message: str) -> None:
    """Each invalid key, type or value raises ScenarioError with a one-line message naming it."""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_with(path, value), source="cases/x.json")
    text = str(info.value)
    assert text.startswith(f"scenario cases/x.json: {message}"), text
    assert "\n" not in text
    assert isinstance(info.value, ValueError)


def test_non_object_scenario_is_refused() -> None:
    """A scenario that is not a JSON object is refused."""
    with pytest.raises(ScenarioError, match=r"^scenario <scenario>: top level: expected object"):
        parse_scenario([BASE])


def test_missing_file_is_refused(tmp_path: Path) -> None:
    """A missing file raises ScenarioError naming the path."""
    path = tmp_path / "absent.json"
    with pytest.raises(ScenarioError, match=r"absent\.json: cannot read: No such file"):
        load_scenario(path)


def test_not_json_file_gives_the_position(tmp_path: Path) -> None:
    """A file that is not JSON raises ScenarioError with the path, line and column."""
    path = tmp_path / "bad.json"
    path.write_text('{\n  "id": "x",\n  "endpoints": {]\n}\n', encoding="utf-8")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"scenario {path}: not valid JSON: ")
    assert str(info.value).endswith("at line 3 column 17")


def test_not_utf8_file_is_refused(tmp_path: Path) -> None:
    """A file that is not UTF-8 text raises ScenarioError."""
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"id": "caf\xe9"}')
    with pytest.raises(ScenarioError, match="not UTF-8 text"):
        load_scenario(path)


def test_load_validates_with_the_file_name(tmp_path: Path) -> None:
    """A file with a scenario error names the file in the message."""
    path = tmp_path / "x.json"
    path.write_text(json.dumps(_with("endpoints.status.1.repeat", 0)), encoding="utf-8")
    with pytest.raises(ScenarioError, match=rf"^scenario {path}: endpoints\.status\[1\]\.repeat"):
        load_scenario(path)


def test_scenario_is_a_keyword_only_dataclass() -> None:
    """Scenario is built with keywords only."""
    with pytest.raises(TypeError):
        Scenario("x", endpoints={})  # type: ignore[call-arg]


def test_extra_endpoints_routes_and_required_query_are_kept() -> None:
    """Extra endpoints join the built-in four; routes and required query are kept as given."""
    data = copy.deepcopy(BASE)
    data["endpoints"] = {"resource": [{"code": 200}], "monitor": []}
    data["paths"] = {
        "submit": ["PUT /resource"],
        "resource": ["GET /resource"],
        "monitor": ["/ops/1"],
    }
    data["require_query"] = {"monitor": {"api-version": "2024-01-01"}}
    data["reference"] = {"poller": "arm"}
    scenario = parse_scenario(data)
    assert list(scenario.endpoints) == [
        "status",
        "result",
        "cancel",
        "submit",
        "resource",
        "monitor",
    ]
    assert scenario.endpoints["monitor"] == ()
    assert scenario.paths["resource"] == ("GET /resource",)
    assert dict(scenario.require_query["monitor"]) == {"api-version": "2024-01-01"}
    assert dict(scenario.reference) == {"poller": "arm"}


def test_the_same_path_under_two_methods_is_two_routes() -> None:
    """``PUT /r`` and ``GET /r`` may name different endpoints; ``/r`` alone may name a third."""
    data = copy.deepcopy(BASE)
    data["endpoints"] = {"resource": [], "other": []}
    data["paths"] = {"submit": ["PUT /r"], "resource": ["GET /r"], "other": ["/r"]}
    assert parse_scenario(data).paths["other"] == ("/r",)
    data["paths"] = {"submit": ["PUT /r"], "resource": ["PUT /r"], "other": ["/r"]}
    with pytest.raises(ScenarioError, match=r"paths\.resource\[0\]: route 'PUT /r' is already"):
        parse_scenario(data)
