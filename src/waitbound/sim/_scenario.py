"""Scenario files: a scripted provider for the simulator and the end-to-end tests.

The format is ARCHITECTURE.md, "Scenario files". Loading validates strictly: every refusal
is a :class:`~waitbound.ScenarioError` whose one-line message names the spot in the file,
e.g. ``scenario cases/x.json: endpoints.status[1].repeat: expected an integer >= 1, got 0``.
``wait``, ``expect`` and ``reference`` are kept as raw mappings; the modules that use them
validate them.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from waitbound._base._errors import ScenarioError
from waitbound._base._json import JSON

#: Endpoint name -> the path the simulator serves it at.
ENDPOINT_PATHS: Mapping[str, str] = MappingProxyType(
    {"status": "/status", "result": "/result", "cancel": "/cancel", "submit": "/jobs"}
)
_TOP_KEYS = (
    "description",
    "endpoints",
    "expect",
    "id",
    "paths",
    "reference",
    "require_query",
    "source",
    "wait",
)
_ENTRY_KEYS = ("after", "after_s", "body", "code", "delay_s", "drop", "headers", "raw", "repeat")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 §5.6.2 field name
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")  # an extra endpoint's name
_METHOD = re.compile(r"[A-Z]{1,20}")
_BUILT_IN = ", ".join(ENDPOINT_PATHS)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseEntry:
    """One scripted answer of an endpoint.

    Attributes:
        code: HTTP status code (100-599); ``None`` only when ``drop`` is true.
        body: JSON value served as ``application/json``; ``None`` means no body.
        raw: text served as-is as ``text/plain`` instead of ``body``; ``None`` if unused.
        headers: extra response headers; values may hold templates.
        repeat: how many times the entry is served before the next one becomes current.
        after_s: seconds after the scenario's first request before this entry may become
            current (0 = no wait).
        after: another endpoint's name: this entry may become current only once that
            endpoint has been asked at least once (e.g. ``"cancel"``: the job stays
            pending until a cancel request arrives, however late); ``None``: no such wait.
        delay_s: seconds the server waits before answering (or before dropping).
        drop: close the connection without sending any response.
    """

    code: int | None = None
    body: JSON = None
    raw: str | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    repeat: int = 1
    after_s: float = 0.0
    after: str | None = None
    delay_s: float = 0.0
    drop: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A validated scenario: what each endpoint answers, plus the run settings and expectations.

    Attributes:
        id: the scenario's name.
        description: what the provider does and what must follow, in plain words.
        source: the public bug report the case was rebuilt from (``""`` if none).
        endpoints: ``status``, ``result``, ``cancel`` and ``submit``, plus any named extra
            endpoint (e.g. ``resource``, ``monitor``), each mapped to its entries in serving
            order (the four built-in ones always present; an empty tuple answers 404).
        wait: the ``waitbound wait`` settings, unvalidated.
        expect: the expected outcome, unvalidated.
        paths: extra routes per endpoint (e.g. a provider's own status path
            ``/v1/batches/batch_1`` served as ``status``), besides the fixed ones. A route is
            a path (any method) or ``"METHOD /path"`` (that method only; it wins over a
            path-only route). Extra endpoints are served only at their routes here.
        require_query: endpoint -> query parameters (name -> value) every request to it
            must carry; one that lacks one is answered 400 with an Azure-style error body.
        reference: how a reference client runs the scenario (for differential tests),
            unvalidated.
        raw: the original JSON object.
    """

    id: str
    description: str = ""
    source: str = ""
    endpoints: Mapping[str, tuple[ResponseEntry, ...]]
    wait: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    expect: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    paths: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    require_query: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    reference: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    raw: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))


class _Invalid(Exception):
    """A refusal at one spot; ``parse_scenario`` adds the file name."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")


def _kind(value: object) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    names |= {list: "array", dict: "object", type(None): "null"}
    return names.get(type(value), f"Python {type(value).__name__}")


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _get(obj: Mapping[str, object], key: str, kind: type[_T], where: str) -> _T | None:
    """Return ``obj[key]`` checked against ``kind`` (bool is not an int), or None if absent."""
    if key not in obj:
        return None
    value = obj[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        expected = {float: "number", int: "integer", bool: "boolean", str: "string"}[kind]
        raise _Invalid(_at(where, key), f"expected {expected}, got {_kind(value)}")
    return value


def _object(value: object, where: str, allowed: tuple[str, ...] | None = None) -> dict[str, object]:
    if not isinstance(value, dict):
        raise _Invalid(where, f"expected object, got {_kind(value)}")
    for key in value:
        if allowed is not None and key not in allowed:
            expected = ", ".join(allowed)
            raise _Invalid(where, f"unknown key {key!r} (expected one of: {expected})")
    return value


def _json(value: object, where: str) -> JSON:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, list):
        return [_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _json(item, f"{where}.{key}") for key, item in value.items()}
    raise _Invalid(where, f"expected a JSON value, got {value!r}")


def _seconds(obj: Mapping[str, object], key: str, where: str) -> float:
    value = _get(obj, key, float, where) or 0.0
    if not (math.isfinite(value) and value >= 0):
        raise _Invalid(f"{where}.{key}", f"expected seconds >= 0, got {value}")
    return value


def _headers(value: object, where: str) -> Mapping[str, str]:
    headers = _object(value, where)
    for name, text in headers.items():
        if not _TOKEN.fullmatch(name):
            raise _Invalid(where, f"bad header name {name!r} (expected an RFC 9110 token)")
        if name.lower() == "content-length":
            raise _Invalid(where, "remove 'Content-Length'; the simulator always sets it")
        if not isinstance(text, str) or "\r" in text or "\n" in text:
            raise _Invalid(f"{where}.{name}", f"expected a one-line string, got {text!r}")
    return MappingProxyType({name: str(text) for name, text in headers.items()})


def _after(obj: Mapping[str, object], where: str, others: tuple[str, ...]) -> str | None:
    """The ``after`` endpoint an entry waits for: one of *others* (not its own)."""
    after = _get(obj, "after", str, where)
    if after is not None and after not in others:
        expected = ", ".join(others)
        raise _Invalid(f"{where}.after", f"expected another endpoint ({expected}), got {after!r}")
    return after


def _entry(value: object, where: str, *, first: bool, others: tuple[str, ...]) -> ResponseEntry:
    obj = _object(value, where, _ENTRY_KEYS)
    drop = bool(_get(obj, "drop", bool, where))
    code = _get(obj, "code", int, where)
    if drop and (extra := [key for key in ("code", "body", "raw", "headers") if key in obj]):
        raise _Invalid(f"{where}.{extra[0]}", "a drop sends no response; remove this key")
    if not drop and code is None:
        raise _Invalid(where, "missing required key 'code' (or set \"drop\": true)")
    if code is not None and not 100 <= code <= 599:
        raise _Invalid(f"{where}.code", f"expected an HTTP status code 100-599, got {code}")
    if "body" in obj and "raw" in obj:
        raise _Invalid(where, "'body' and 'raw' are exclusive; keep one")
    raw, body = _get(obj, "raw", str, where), _json(obj.get("body"), f"{where}.body")
    if code is not None and (code < 200 or code == 204) and (raw or body is not None):
        raise _Invalid(where, f"a {code} response has no content; remove 'body'/'raw'")
    repeat = _get(obj, "repeat", int, where)
    if repeat is not None and repeat < 1:
        raise _Invalid(f"{where}.repeat", f"expected an integer >= 1, got {repeat}")
    after_s = _seconds(obj, "after_s", where)
    if first and after_s > 0:
        raise _Invalid(f"{where}.after_s", "the first entry has no entry before it to serve")
    after = _after(obj, where, others)
    if first and after is not None:
        raise _Invalid(f"{where}.after", "the first entry has no entry before it to serve")
    return ResponseEntry(
        code=code,
        body=body,
        raw=raw,
        headers=_headers(obj.get("headers", {}), f"{where}.headers"),
        repeat=repeat or 1,
        after_s=after_s,
        after=after,
        delay_s=_seconds(obj, "delay_s", where),
        drop=drop,
    )


def parse_route(route: str) -> tuple[str | None, str]:
    """Split a ``paths`` route into (method or None, path): ``"GET /r"`` -> ``("GET", "/r")``."""
    method, _, path = route.rpartition(" ")
    return method or None, path


def _route(value: object, where: str) -> tuple[str | None, str]:
    if not isinstance(value, str):
        raise _Invalid(where, f"expected a route string, got {_kind(value)}")
    method, path = parse_route(value)
    if method is not None and not _METHOD.fullmatch(method):
        raise _Invalid(where, f"bad route {value!r} (expected '/path' or 'METHOD /path')")
    if not path.startswith("/"):
        raise _Invalid(where, f"bad route {value!r} (expected '/path' or 'METHOD /path')")
    if "?" in path or "#" in path:
        raise _Invalid(where, f"a route matches the path only; remove the query from {value!r}")
    return method, path


def _paths(value: object, names: tuple[str, ...]) -> Mapping[str, tuple[str, ...]]:
    obj = _object(value, "paths", names)
    aliases: dict[str, tuple[str, ...]] = {}
    seen: dict[tuple[str | None, str], str] = {}
    for name, paths in obj.items():
        if not isinstance(paths, list) or not paths:
            raise _Invalid(f"paths.{name}", "expected a non-empty array of routes")
        for i, item in enumerate(paths):
            key = _route(item, f"paths.{name}[{i}]")
            if key in seen:
                raise _Invalid(f"paths.{name}[{i}]", f"route {item!r} is already {seen[key]!r}")
            seen[key] = name
        aliases[name] = tuple(paths)
    return MappingProxyType(aliases)


def _require_query(value: object, names: tuple[str, ...]) -> Mapping[str, Mapping[str, str]]:
    obj = _object(value, "require_query", names)
    required: dict[str, Mapping[str, str]] = {}
    for name, value_ in obj.items():
        where = f"require_query.{name}"
        params = _object(value_, where)
        for param, text in params.items():
            if not param or not isinstance(text, str) or not text:
                raise _Invalid(f"{where}.{param}", f"expected a non-empty string, got {text!r}")
        required[name] = MappingProxyType({k: str(v) for k, v in params.items()})
    return MappingProxyType(required)


def _endpoint_names(endpoints: Mapping[str, object], paths: object) -> tuple[str, ...]:
    """The built-in names, then each extra one (it must be named in ``paths``)."""
    routed = paths if isinstance(paths, dict) else {}
    extra = [name for name in endpoints if name not in ENDPOINT_PATHS]
    for name in extra:
        if not _NAME.fullmatch(name):
            raise _Invalid(
                f"endpoints.{name}", "bad name (expected lower-case letters, digits, '-', '_')"
            )
        if name not in routed:
            raise _Invalid(
                f"endpoints.{name}",
                f"an extra endpoint needs its routes in paths.{name} (built-in: {_BUILT_IN})",
            )
    return (*ENDPOINT_PATHS, *extra)


def parse_scenario(data: object, *, source: str = "<scenario>") -> Scenario:
    """Validate a decoded scenario object.

    Args:
        data: the decoded JSON object (see ARCHITECTURE.md, "Scenario files").
        source: where the data came from; names the scenario in error messages.

    Returns:
        The validated scenario; ``wait`` and ``expect`` are kept as given.

    Raises:
        ScenarioError: unknown key, wrong type or bad value; the one-line message names
            the spot, e.g. ``endpoints.status[1].repeat``.
    """
    try:
        top = _object(data, "top level", _TOP_KEYS)
        ident = _get(top, "id", str, "")
        if not ident:
            raise _Invalid("id", "required: a non-empty string naming the scenario")
        if "endpoints" not in top:
            raise _Invalid("top level", "missing required key 'endpoints'")
        endpoints = _object(top["endpoints"], "endpoints")
        names = _endpoint_names(endpoints, top.get("paths", {}))
        served: dict[str, tuple[ResponseEntry, ...]] = {}
        for name in names:
            where = f"endpoints.{name}"
            entries = endpoints.get(name, [])
            if not isinstance(entries, list):
                raise _Invalid(where, f"expected array, got {_kind(entries)}")
            others = tuple(other for other in names if other != name)
            served[name] = tuple(
                _entry(item, f"{where}[{i}]", first=i == 0, others=others)
                for i, item in enumerate(entries)
            )
        return Scenario(
            id=ident,
            description=_get(top, "description", str, "") or "",
            source=_get(top, "source", str, "") or "",
            endpoints=MappingProxyType(served),
            wait=MappingProxyType(_object(top.get("wait", {}), "wait")),
            paths=_paths(top.get("paths", {}), names),
            require_query=_require_query(top.get("require_query", {}), names),
            expect=MappingProxyType(_object(top.get("expect", {}), "expect")),
            reference=MappingProxyType(_object(top.get("reference", {}), "reference")),
            raw=MappingProxyType(top),
        )
    except _Invalid as err:
        raise ScenarioError(f"scenario {source}: {err}") from None


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate a scenario file.

    Args:
        path: a UTF-8 JSON file holding one scenario object.

    Returns:
        The validated scenario.

    Raises:
        ScenarioError: the file cannot be read, is not JSON (the message gives the line
            and column), or is not a valid scenario.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        raise ScenarioError(f"scenario {path}: cannot read: {reason}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno} column {err.colno}"
        raise ScenarioError(f"scenario {path}: not valid JSON: {err.msg} at {where}") from None
    return parse_scenario(data, source=str(path))
