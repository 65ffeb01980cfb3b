"""The profile format is described three times — the loader, the JSON Schema, the page — and
the three agree.

- Every key the loader knows is in the schema and in ``docs/profile-format.md``, and every
  key in either is known to the loader.
- Every built-in profile and every profile on the page passes the schema and loads.
- A table of invalid profiles is refused by both, the loader with one line naming the key.
- Random JSON values in key positions are accepted by the schema iff by the loader (the
  loader's own checks, compiling expressions, are the one allowed difference).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import waitbound
from tests.hypothesis_profiles import examples
from waitbound import ProfileError, parse_profile
from waitbound._profile._actions import CANCEL_KEYS, SUBMIT_KEYS
from waitbound._profile._contract_parse import COUNT_KEYS, KNOWN_KEYS
from waitbound._profile._decided_by import DECIDED_BY_KEYS
from waitbound._profile._webhooks import WEBHOOK_KEYS
from waitbound.cli import run as run_cli
from waitbound.profiles import SCHEMA_FILE, builtin_names, profile_schema

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "profile-format.md"
SCHEMA: dict[str, Any] = profile_schema()
CHECK = jsonschema.Draft202012Validator(SCHEMA)
BASE: dict[str, Any] = {"state": "status", "succeeded": ["done"]}
COMPANIONS: dict[str, dict[str, Any]] = {
    "result_id": {"result_url_template": "/files/{result_id}"},
    "result_url_template": {"result_id": "file_id"},
}
CONSTANTS: dict[str, frozenset[str]] = {
    "": KNOWN_KEYS,
    "submit": SUBMIT_KEYS,
    "cancel": CANCEL_KEYS,
    "counts": COUNT_KEYS,
    "webhook": WEBHOOK_KEYS,
    "decided_by": DECIDED_BY_KEYS,
}
"""The loader's key sets that exist in the code today, by section."""

PROBE = "zz_probe"
CONTAINERS: dict[str, dict[str, Any]] = {
    "submit.polling_url[]": {"kind": "status"},
    "throttle.when_headers[]": {"header": "x-ratelimit-remaining"},
    "webhook": {"scheme": "standard", "job_id": "data.id"},
    "decided_by": {"field": "next_action", "terminal": ["none"]},
}
"""The least a section's object needs besides the key under test."""


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rpartition("/")[2]]
    return node


def _schema_sections() -> dict[str, dict[str, dict[str, Any]]]:
    """Section → key → the schema's property (``url_kinds.KIND`` is either URL kind)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}

    def walk(node: dict[str, Any], section: str) -> None:
        node = _resolve(node)
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            walk(node["items"], f"{section}[]")
            return
        properties = node.get("properties")
        if not isinstance(properties, dict):
            return
        assert found.setdefault(section, properties) == properties, section
        for key, child in properties.items():
            inner = "url_kinds.KIND" if section == "url_kinds" else f"{section}.{key}".lstrip(".")
            walk(child, inner)

    walk(SCHEMA, "")
    return found


SECTIONS = _schema_sections()


def _split(path: str) -> tuple[str, str]:
    section, _, key = path.rpartition(".")
    return section, key


def _profile_with(path: str, value: object) -> dict[str, Any]:
    """A valid base profile with *value* at *path* (a page path such as ``submit.job_id``)."""
    section, key = _split(path)
    if section == "":
        return {**BASE, **COMPANIONS.get(key, {}), key: value}
    inner = {**CONTAINERS.get(section, {}), key: value}
    if (section, key) == ("submit.polling_url[]", "kind"):
        inner = {"header": "Location", "kind": value}
    wrapped: object
    if section == "url_kinds.KIND":
        wrapped = {"url_kinds": {"location": inner}}
    elif section == "submit.polling_url[]":
        wrapped = {"submit": {"polling_url": [inner]}}
    elif section == "throttle.when_headers[]":
        wrapped = {"throttle": {"when_headers": [inner]}}
    else:
        wrapped = {section: inner}
    assert isinstance(wrapped, dict)
    return {**BASE, **wrapped}


def _loader_problem(profile: object) -> str | None:
    """The loader's one-line refusal, or ``None`` when it accepts *profile*."""
    try:
        parse_profile(profile, name="p")
    except ProfileError as exc:
        return str(exc)
    return None


def _schema_problem(profile: object) -> str | None:
    error = jsonschema.exceptions.best_match(CHECK.iter_errors(profile))
    return None if error is None else f"{error.json_path}: {error.message}"


def _loader_keys(section: str) -> frozenset[str] | None:
    """The loader's keys for *section*: its constant, else read from its unknown-key message.

    ``None`` when the loader does not know the section at all.
    """
    if section in CONSTANTS:
        return CONSTANTS[section]
    message = _loader_problem(_profile_with(f"{section}.{PROBE}", 1)) or ""
    listed = re.search(rf"unknown key '{PROBE}' \(known(?: keys)?: ([^)]*)\)", message)
    return frozenset(listed.group(1).split(", ")) if listed else None


# --- the schema itself ---------------------------------------------------------------


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    """The shipped schema is itself valid JSON Schema 2020-12."""
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_schema_is_shipped_with_the_package_and_returned_fresh() -> None:
    """The accessor returns the package's file, a new copy each call; it is no built-in."""
    text = resources.files("waitbound.profiles").joinpath(SCHEMA_FILE).read_text("utf-8")
    assert waitbound.profile_schema() == json.loads(text)
    waitbound.profile_schema()["title"] = "changed"
    assert waitbound.profile_schema()["title"] == "waitbound profile"
    assert SCHEMA_FILE.removesuffix(".json") not in builtin_names()


def test_cli_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    """`waitbound profiles schema` prints the same schema as JSON."""
    assert run_cli(["profiles", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == SCHEMA


def test_every_schema_property_says_its_default() -> None:
    """Each key's description ends with its default; a JSON default is also ``default``."""
    missing = [
        f"{section}.{key}"
        for section, properties in SECTIONS.items()
        for key, prop in properties.items()
        if not re.search(r" Default: .+\.$", prop.get("description", ""))
        or len(prop.get("examples", ())) != 1
    ]
    assert missing == []


def test_objects_refuse_unknown_keys() -> None:
    """``additionalProperties: false`` on every object with fixed keys, as the loader does."""
    open_objects = [
        section
        for section in SECTIONS
        if _resolve_section(section).get("additionalProperties") is not False
    ]
    assert open_objects == []


def _resolve_section(section: str) -> dict[str, Any]:
    node: dict[str, Any] = SCHEMA
    for part in [p for p in section.replace("[]", ".[]").split(".") if p]:
        node = _resolve(node)
        if part == "[]":
            node = node["items"]
        elif part == "KIND":
            node = node["properties"]["location"]
        else:
            node = node["properties"][part]
    return _resolve(node)


# --- the keys: loader, schema and page ------------------------------------------------


@pytest.mark.parametrize("section", sorted(SECTIONS), ids=lambda s: s or "top")
def test_loader_and_schema_know_the_same_keys(section: str) -> None:
    """Every key the loader knows is in the schema; every schema key is known to it."""
    loader = _loader_keys(section)
    assert loader is not None, f"the loader has no section {section!r}"
    schema = set(SECTIONS[section])
    assert sorted(loader - schema) == [], f"the schema lacks these {section or 'top'} keys"
    assert sorted(schema - loader) == [], f"the loader lacks these {section or 'top'} keys"


def _page_rows() -> Iterator[tuple[str, list[str]]]:
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            yield cells[0].strip("`"), cells


PAGE_ROWS = dict(_page_rows())
SCHEMA_PATHS = {
    f"{section}.{key}".lstrip(".") for section, keys in SECTIONS.items() for key in keys
}


def test_page_and_schema_list_the_same_keys() -> None:
    """docs/profile-format.md has one row per schema key, and no row for another key."""
    assert sorted(SCHEMA_PATHS - set(PAGE_ROWS)) == [], "the page lacks these keys"
    assert sorted(set(PAGE_ROWS) - SCHEMA_PATHS) == [], "the schema lacks these keys"
    assert len(list(_page_rows())) == len(PAGE_ROWS), "a key has two rows"


def _prop(path: str) -> dict[str, Any]:
    section, key = _split(path)
    return SECTIONS[section][key]


@pytest.mark.parametrize("path", sorted(PAGE_ROWS))
def test_page_row_agrees_with_the_schema(path: str) -> None:
    """The row's example is the schema's example; its default is the schema's default."""
    _, _, default, _, example = PAGE_ROWS[path]
    prop = _prop(path)
    assert json.loads(example.strip("`")) == prop["examples"][0]
    if "default" in prop:
        shown = re.match(r"`([^`]*)`", default)
        assert shown is not None, f"{path}: the default cell shows no JSON value"
        assert json.loads(shown.group(1)) == prop["default"]


@pytest.mark.parametrize(
    "path",
    sorted(PAGE_ROWS),
)
def test_page_example_passes_schema_and_loader(path: str) -> None:
    """Each key's documented example, in a valid profile, passes both the schema and the loader."""
    profile = _profile_with(path, json.loads(PAGE_ROWS[path][4].strip("`")))
    assert _schema_problem(profile) is None
    assert _loader_problem(profile) is None


# --- whole profiles ------------------------------------------------------------------------


@pytest.mark.parametrize("name", builtin_names())
def test_builtin_profile_passes_schema_and_loader(name: str) -> None:
    """Every shipped profile is valid by the schema and loads."""
    text = resources.files("waitbound.profiles").joinpath(f"{name}.json").read_text("utf-8")
    data = json.loads(text)
    assert _schema_problem(data) is None
    assert _loader_problem(data) is None


def _page_profiles() -> list[tuple[str, Any]]:
    text = PAGE.read_text(encoding="utf-8")
    found: list[tuple[str, Any]] = []
    for kind, body in re.findall(r"<!-- profile( toml)? -->\n```\w+\n(.*?)```", text, re.S):
        data = tomllib.loads(body) if kind else json.loads(body)
        found.append((f"{data['name']}{kind.replace(' ', '-')}#{len(found)}", data))
    return found


PAGE_PROFILES = _page_profiles()


@pytest.mark.parametrize(
    "data",
    [pytest.param(d, id=i) for i, d in PAGE_PROFILES],
)
def test_page_profile_passes_schema_and_loader(data: dict[str, Any]) -> None:
    """Every worked example on the page is valid by the schema and loads."""
    assert _schema_problem(data) is None
    assert _loader_problem(data) is None


def test_page_has_the_worked_examples() -> None:
    """A flat table, an AIP-151 ``done`` profile and the Azure protocol, among others."""
    names = {data["name"] for _, data in PAGE_PROFILES}
    assert {"exports", "aip151", "azure-lro"} <= names
    assert len(PAGE_PROFILES) >= 5


def test_page_links_stay_in_the_repository() -> None:
    """Links go to pages in the repository, JMESPath's specification or a provider's docs."""
    text = PAGE.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)]+)\)", text):
        if target.startswith("http"):
            assert target == "https://jmespath.org/specification.html", target
        else:
            assert (PAGE.parent / target.partition("#")[0]).exists(), target
    provider_docs = {url for name in builtin_names() for url in _docs(name)}
    pasted = set(re.findall(r'"(https://[^"]+)"', text))
    assert sorted(pasted - provider_docs) == []


def _docs(name: str) -> list[str]:
    data = json.loads(
        resources.files("waitbound.profiles").joinpath(f"{name}.json").read_text("utf-8")
    )
    docs = data.get("docs", [])
    return [docs] if isinstance(docs, str) else list(docs)


# --- invalid profiles: refused by both, one line naming the key ------------------------


def _case(profile: dict[str, Any], words: str, *, base: bool = True) -> tuple[Any, str]:
    return ({**BASE, **profile} if base else profile), words


INVALID: dict[str, tuple[Any, str]] = {
    "unknown top key": _case({"colour": 1}, "'colour'"),
    "unknown submit key": _case({"submit": {"status_header": "x"}}, "'status_header'"),
    "unknown cancel key": _case({"cancel": {"when": "x"}}, "'when'"),
    "unknown counts key": _case({"counts": {"ok": "a"}}, "'ok'"),
    "name not text": _case({"name": 1}, "name"),
    "$schema not text": _case({"$schema": 1}, "$schema"),
    "no state source": _case({"pending": ["a"]}, "'state'", base=False),
    "state without lists": _case({"state": "status"}, "'state'", base=False),
    "state list not a list": _case({"pending": "running"}, "pending"),
    "state value an object": _case({"pending": [{"a": 1}]}, "pending"),
    "state value twice": _case({"pending": ["a", "a"]}, "twice in pending"),
    "expression not text": _case({"error": 1}, "error"),
    "expression blank": _case({"error": " "}, "error"),
    "require_on_success not a list": _case({"require_on_success": "out"}, "require_on_success"),
    "http_status_states code": _case({"http_status_states": {"600": "pending"}}, "http_status"),
    "http_status_states class": _case({"http_status_states": {"6xx": "failed"}}, "http_status"),
    "http_status_states value": _case({"http_status_states": {"204": "done"}}, "http_status"),
    "http_status_states unknown": _case(
        {"http_status_states": {"204": "unknown"}}, "http_status_states"
    ),
    "hint_headers unit": _case({"hint_headers": {"X-Poll": "minutes"}}, "hint_headers"),
    "request_id_headers blank": _case({"request_id_headers": [""]}, "request_id_headers"),
    "result_id alone": _case({"result_id": "x"}, "result_id"),
    "result_url_template alone": _case({"result_url_template": "/f/{result_id}"}, "result_id"),
    "result_url_template placeholder": _case(
        {"result_id": "x", "result_url_template": "/f"}, "result_url_template"
    ),
    "counts value": _case({"counts": {"total": 1}}, "counts.total"),
    "counts list value": _case({"counts": {"total": ["a", 2]}}, "counts.total"),
    "submit not an object": _case({"submit": []}, "submit"),
    "submit.status_url_headers": _case(
        {"submit": {"status_url_headers": "Location"}}, "submit.status_url_headers"
    ),
    "submit.status_url_template": _case(
        {"submit": {"status_url_template": "/jobs"}}, "submit.status_url_template"
    ),
    "submit.final_get": _case({"submit": {"final_get": {"PUT": "resource"}}}, "submit.final_get"),
    "submit.idempotency_header": _case(
        {"submit": {"idempotency_header": ""}}, "submit.idempotency_header"
    ),
    "submit.job_id": _case({"submit": {"job_id": 1}}, "submit.job_id"),
    "cancel not an object": _case({"cancel": "POST"}, "cancel"),
    "cancel.method": _case({"cancel": {"method": "GET"}}, "cancel.method"),
    "cancel.always": _case({"cancel": {"always": "yes"}}, "cancel.always"),
    "cancel.url_template": _case({"cancel": {"url_template": ""}}, "cancel.url_template"),
}
INVALID |= {
    "case_insensitive_states": _case({"case_insensitive_states": "yes"}, "case_insensitive"),
    "unlisted_state": _case({"unlisted_state": "maybe"}, "unlisted_state"),
    "result_document": _case({"result_document": 1}, "result_document"),
    "time_format": _case({"time_format": "iso"}, "time_format"),
    "url_kinds not an object": _case({"url_kinds": []}, "url_kinds"),
    "url_kinds unknown kind": _case({"url_kinds": {"status": {}}}, "'status'"),
    "url_kinds.location unknown key": _case({"url_kinds": {"location": {"colour": 1}}}, "colour"),
    "url_kinds.location.state": _case({"url_kinds": {"location": {"state": 1}}}, "state"),
    "url_kinds.location.unlisted_state": _case(
        {"url_kinds": {"location": {"unlisted_state": "maybe"}}}, "unlisted_state"
    ),
    "url_kinds.resource.when_no_state": _case(
        {"url_kinds": {"resource": {"state": "s", "when_no_state": {"404": "failed"}}}},
        "when_no_state",
    ),
    "url_kinds.resource.http_status_states": _case(
        {"url_kinds": {"resource": {"state": "s", "http_status_states": {"3xx": "pending"}}}},
        "http_status_states",
    ),
    "submit.polling_url not a list": _case(
        {"submit": {"polling_url": {"header": "Location"}}}, "polling_url"
    ),
    "polling_url entry unknown key": _case(
        {"submit": {"polling_url": [{"header": "L", "kind": "status", "colour": 1}]}}, "colour"
    ),
    "polling_url entry kind": _case(
        {"submit": {"polling_url": [{"header": "L", "kind": "monitor"}]}}, "kind"
    ),
    "polling_url entry without kind": _case({"submit": {"polling_url": [{"header": "L"}]}}, "kind"),
    "polling_url entry two places": _case(
        {"submit": {"polling_url": [{"header": "L", "field": "x", "kind": "status"}]}},
        "polling_url",
    ),
    "polling_url entry request_url method": _case(
        {"submit": {"polling_url": [{"request_url": ["GET"], "kind": "resource"}]}},
        "request_url",
    ),
    "submit.http_status_states": _case(
        {"submit": {"http_status_states": {"200": "done"}}}, "http_status_states"
    ),
    "submit.final_state_via": _case({"submit": {"final_state_via": "resource"}}, "final_state_via"),
    "submit.carry_query": _case({"submit": {"carry_query": "api-version"}}, "carry_query"),
    "submit.idempotency_scheme": _case(
        {"submit": {"idempotency_scheme": "key"}}, "idempotency_scheme"
    ),
    "throttle not an object": _case({"throttle": [429]}, "throttle"),
    "throttle unknown key": _case({"throttle": {"colour": 1}}, "colour"),
    "throttle.statuses": _case({"throttle": {"statuses": ["429"]}}, "statuses"),
    "throttle.when_headers without header": _case(
        {"throttle": {"when_headers": [{"equals": "0"}]}}, "header"
    ),
    "throttle.when_headers unknown key": _case(
        {"throttle": {"when_headers": [{"header": "x", "colour": 1}]}}, "colour"
    ),
    "throttle.reset_headers": _case(
        {"throttle": {"reset_headers": {"x-ratelimit-reset": "minutes"}}}, "reset_headers"
    ),
    "throttle.default_delay_s": _case({"throttle": {"default_delay_s": "60"}}, "default_delay_s"),
}
_HOOK = {"scheme": "standard", "job_id": "data.id"}
INVALID |= {
    "webhook not an object": _case({"webhook": "standard"}, "webhook"),
    "webhook unknown key": _case({"webhook": {**_HOOK, "colour": 1}}, "colour"),
    "webhook without scheme": _case({"webhook": {"job_id": "data.id"}}, "webhook.scheme"),
    "webhook without job_id": _case({"webhook": {"scheme": "github"}}, "webhook.job_id"),
    "webhook.scheme": _case({"webhook": {**_HOOK, "scheme": "svix"}}, "webhook.scheme"),
    "webhook.job_id": _case({"webhook": {**_HOOK, "job_id": 1}}, "webhook.job_id"),
    "webhook.authoritative": _case(
        {"webhook": {**_HOOK, "authoritative": "yes"}}, "webhook.authoritative"
    ),
    "webhook.documentation": _case(
        {"webhook": {**_HOOK, "documentation": "docs.example"}}, "webhook.documentation"
    ),
    "webhook.notes": _case({"webhook": {**_HOOK, "notes": " "}}, "webhook.notes"),
}


@pytest.mark.parametrize(
    ("profile", "words"),
    [pytest.param(*case, id=name) for name, case in INVALID.items()],
)
def test_invalid_profile_is_refused_by_both(profile: Any, words: str) -> None:
    """The schema refuses it; the loader refuses it with one line naming the key.

    A key refused as *unknown* does not count: it must be refused for being used wrongly.
    """
    assert _schema_problem(profile) is not None
    message = _loader_problem(profile)
    assert message is not None
    assert "\n" not in message
    assert words in message
    submit = profile.get("submit") if isinstance(profile, dict) else None
    used = set(profile) & KNOWN_KEYS if isinstance(profile, dict) else set()
    if isinstance(submit, dict):
        used |= set(submit) & SUBMIT_KEYS
    assert [k for k in sorted(used) if f"unknown key {k!r}" in message] == []


@pytest.mark.parametrize(
    "profile",
    [
        pytest.param({**BASE, "http_status_states": {"4xx": "failed"}}, id="status class key"),
        pytest.param({**BASE, "hint_headers": {"x-reset": "epoch_s"}}, id="hint unit epoch_s"),
    ],
)
def test_new_value_of_an_old_key_is_accepted_by_both(profile: dict[str, Any]) -> None:
    """Values the protocol layer adds to existing keys: both accept them."""
    assert _schema_problem(profile) is None
    assert _loader_problem(profile) is None


def test_case_insensitive_lists_refuse_values_equal_ignoring_case() -> None:
    """Only the loader can see it: "Done" and "done" in two lists, compared ignoring case."""
    profile = {**BASE, "case_insensitive_states": True, "pending": ["Done"]}
    assert _schema_problem(profile) is None
    message = _loader_problem(profile)
    assert message is not None
    assert "\n" not in message
    assert "unknown key" not in message
    assert "Done" in message


ONCE_DISAGREEMENTS: dict[str, dict[str, Any]] = {
    "description not text": {"description": 5},
    "docs not text": {"docs": {"url": 1}},
    "docs blank": {"docs": ""},
    "hint_headers blank header": {"hint_headers": {"": "s"}},
    **{
        f"{key} null": {key: None}
        for key in ("counts", "http_status_states", "hint_headers", "request_id_headers")
    },
    "submit null": {"submit": None},
    "cancel null": {"cancel": None},
    "result_url_template null": {"result_url_template": None},
    "submit.status_url_template null": {"submit": {"status_url_template": None}},
    "submit.idempotency_header null": {"submit": {"idempotency_header": None}},
    "cancel.url_template null": {"cancel": {"url_template": None}},
}
"""What the schema refused and the loader once accepted: a loader bug each, fixed."""


@pytest.mark.parametrize(
    "fragment", [pytest.param(f, id=name) for name, f in ONCE_DISAGREEMENTS.items()]
)
def test_loader_refuses_what_the_schema_refuses(fragment: dict[str, Any]) -> None:
    """The documented type holds in the loader too (a null is never read as absent)."""
    profile = {**BASE, **fragment}
    assert _schema_problem(profile) is not None
    message = _loader_problem(profile)
    assert message is not None
    assert "\n" not in message


# --- random values: the schema accepts iff the loader does ------------------------------

_TEXT = st.sampled_from(
    [
        "",
        " ",
        "x",
        "status",
        "a.b",
        "POST",
        "PUT",
        "GET",
        "s",
        "ms",
        "minutes",
        "pending",
        "succeeded",
        "unknown",
        "request_url",
        "location",
        "/v/{job_id}",
        "{status_url}/cancel",
        "/f/{result_id}",
        "[?",
        "lenght(@)",
    ]
)
_KEYS = st.sampled_from(
    [
        "200",
        "204",
        "2x",
        "600",
        "PUT",
        "post",
        "x",
        "X-Poll",
        "succeeded",
        "failed",
        "total",
        "method",
        "always",
        "url_template",
        "job_id",
        "status_url",
        "status_url_template",
        "final_get",
        "1",
    ]
)
_LEAVES = st.none() | st.booleans() | st.sampled_from([0, 1, -1, 200, 204, 600, 1.0, 1.5]) | _TEXT
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=6,
)
_COMPILE_PROBLEMS = re.compile(
    r"is not a valid JMESPath expression|: unknown function |argument\(s\), got"
)
PROPERTY_PATHS = sorted(
    p for p in PAGE_ROWS if p not in ("description", "docs") and _split(p)[0] in CONSTANTS
)


@pytest.mark.parametrize("path", PROPERTY_PATHS)
@settings(
    max_examples=examples(60),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.filter_too_much],
)
@given(value=_VALUES)
def test_schema_accepts_iff_loader_accepts(path: str, value: object) -> None:
    """Any JSON value at a key: the schema and the loader agree on accepting it.

    The loader may refuse what the schema accepts only for an expression that does not
    compile (the schema cannot check JMESPath).
    """
    profile = _profile_with(path, value)
    by_schema, by_loader = _schema_problem(profile), _loader_problem(profile)
    if by_schema is None and by_loader is not None:
        assume(not _COMPILE_PROBLEMS.search(by_loader))
    assert (by_schema is None) == (by_loader is None), (by_schema, by_loader)
