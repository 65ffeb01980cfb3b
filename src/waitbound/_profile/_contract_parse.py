"""Reading the profile format into a :class:`~waitbound._profile._contract.Profile`: every key
checked (no unknown key, no value in two lists, a state source present, every
expression compiled), so a bad profile fails when it is loaded, before any request is
sent (``docs/profile-format.md``).

:func:`parse_profile` reads a mapping and :func:`load_profile` a JSON or TOML file;
both are public as ``waitbound.parse_profile`` and ``waitbound.load_profile``. The
model they build, and how it reads answers, is :mod:`waitbound._profile._contract`.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from waitbound._base._config_file import read_bounded
from waitbound._base._errors import ProfileError
from waitbound._base._jmes import Expression, compile_expression
from waitbound._profile._actions import parse_cancel, parse_submit
from waitbound._profile._contract import (
    Classification,
    Profile,
    StateTable,
    ValueKey,
    value_key,
)
from waitbound._profile._decided_by import parse_decided_by
from waitbound._profile._protocol import UrlKind
from waitbound._profile._sections import checked_section
from waitbound._profile._throttle import parse_hint_headers, parse_throttle
from waitbound._profile._webhooks import parse_webhook_contract

__all__ = [
    "COUNT_KEYS",
    "KNOWN_KEYS",
    "MAX_PROFILE_BYTES",
    "load_profile",
    "parse_profile",
]


STATE_LISTS: Final = (
    "pending",
    "succeeded",
    "partial",
    "failed",
    "canceled",
    "expired",
    "skipped",
)
EXPRESSION_KEYS: Final = (
    "state",
    "done",
    "job_id",
    "result",
    "error",
    "progress",
    "poll_hint",
    "poll_hint_ms",
    "next_check_at",
    "expires_at",
    "estimated_duration",
    "cancelable",
    "throttled",
    "result_url",
    "result_id",
    "cancel_url",
    "output_error",
    "usage",
    "errors_url",
    "result_document",
    "request_id",
    "result_job_id",
)
OTHER_KEYS: Final = (
    "$schema",
    "name",
    "description",
    "docs",
    "require_on_success",
    "http_status_states",
    "counts",
    "hint_headers",
    "result_url_template",
    "request_id_headers",
    "submit",
    "cancel",
    "url_kinds",
    "case_insensitive_states",
    "unlisted_state",
    "$schema",
    "throttle",
    "time_format",
    "webhook",
    "trace_context",
    "decided_by",
    "result_for_every_ending",
    "errors_url_query_safe",
)
URL_KIND_KEYS: Final = frozenset(("state", "http_status_states", "when_no_state", "unlisted_state"))
UNLISTED_STATES: Final = ("unknown", "pending")
_KINDS: Final = frozenset(("location", "resource"))
LOCATION_DEFAULTS: Final = {
    "http_status_states": {"202": "pending", "200": "succeeded", "201": "succeeded",
                           "204": "succeeded"},
}  # fmt: skip
"""How a ``location`` URL is read when the profile does not say: by status code (the
Azure REST API guidelines' Location pattern); its terminal body is the result document."""
KNOWN_KEYS: Final = frozenset((*STATE_LISTS, *EXPRESSION_KEYS, *OTHER_KEYS))
COUNT_KEYS: Final = frozenset(("succeeded", "failed", "total", "canceled", "expired"))
SCHEMA_KEY: Final = "$schema"
"""Names the JSON Schema for editors; accepted (a string) and ignored: not kept in ``source``."""
MAX_PROFILE_BYTES: Final = 1024 * 1024
"""A profile file larger than this (1 MiB) is refused unread: a profile is a small table."""
DEFAULT_REQUEST_ID_HEADERS: Final = ("x-request-id", "request-id", "x-ms-request-id")
TIME_FORMATS: Final = ("rfc3339", "epoch_s")
"""How a body's times (``expires_at``, ``next_check_at``) are written: RFC 3339 text or
a Unix time in seconds (a JSON number)."""


def _refuse_nulls(where: str, data: Mapping[str, object]) -> None:
    """A key given as ``null`` is a mistake, never "absent": say which (top level, and in
    the ``submit`` and ``cancel`` sections)."""
    sections = [("", data)] + [
        (f"{name}.", section)
        for name in ("submit", "cancel")
        if isinstance(section := data.get(name), Mapping)
    ]
    for prefix, section in sections:
        nulls = sorted(str(key) for key, value in section.items() if value is None)
        if nulls:
            raise ProfileError(f"{where}: {prefix}{nulls[0]} is null; leave the key out instead")


def parse_profile(data: object, *, name: str = "inline") -> Profile:
    """Validate and compile a profile from a mapping in the profile format.

    Args:
        data: the profile's keys (the format: ``docs/profile-format.md``; a
            ``$schema`` string is accepted for editors and left out of ``source``).
        name: what error messages and records call the profile.

    Raises:
        ProfileError: an unknown key, a value in two lists, no state source
            (``state``, ``done`` or ``http_status_states``), a list state without any
            value list, an expression that does not compile, or a wrong type.
    """
    where = f"profile {name}"
    if not isinstance(data, Mapping):
        raise ProfileError(
            f"{where}: expected an object of profile keys, got {type(data).__name__}"
        )
    unknown = sorted(set(data) - KNOWN_KEYS)
    if unknown:
        raise ProfileError(
            f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(sorted(KNOWN_KEYS))})"
        )
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{where}: every value must be plain JSON ({exc})") from None
    except RecursionError:
        raise ProfileError(f"{where}: nested too deeply to be a profile") from None
    _refuse_nulls(where, data)
    if "name" in data and not isinstance(data["name"], str):
        raise ProfileError(f"{where}: name must be a string")
    if "description" in data and not isinstance(data["description"], str):
        raise ProfileError(f"{where}: description must be a string")
    docs = data.get("docs", [])
    if not all(isinstance(d, str) and d for d in (docs if isinstance(docs, list) else [docs])):
        raise ProfileError(f"{where}: docs must be a URL or a list of URLs (non-empty strings)")
    if SCHEMA_KEY in data and not isinstance(data[SCHEMA_KEY], str):
        raise ProfileError(f"{where}: $schema must be a string (the schema's path or URL)")
    if not any(key in data for key in ("state", "done", "http_status_states")):
        raise ProfileError(
            f"{where}: no state source; give 'state', 'done' or 'http_status_states'"
        )

    submit_data = data.get("submit")
    first = submit_data.get("http_status_states") if isinstance(submit_data, Mapping) else None
    fold = data.get("case_insensitive_states", False)
    if not isinstance(fold, bool):
        raise ProfileError(f"{where}: case_insensitive_states must be true or false")
    for flag in ("trace_context", "result_for_every_ending", "errors_url_query_safe"):
        if not isinstance(data.get(flag, False), bool):
            raise ProfileError(f"{where}: {flag} must be true or false")
    states: dict[ValueKey, Classification] = {}
    listed: dict[ValueKey, tuple[str, object]] = {}
    for list_name in STATE_LISTS:
        values = data.get(list_name, [])
        if not isinstance(values, list):
            raise ProfileError(f"{where}: {list_name} must be a list of state values")
        for value in values:
            key = value_key(value, fold=fold)
            if key is None:
                raise ProfileError(
                    f"{where}: {list_name} holds {value!r}; state values are strings, "
                    "finite numbers or booleans"
                )
            if key in listed:
                other, earlier = listed[key]
                if earlier != value:
                    raise ProfileError(
                        f"{where}: state values {earlier!r} ({other}) and {value!r} "
                        f"({list_name}) are the same ignoring case"
                    )
                where_else = (
                    f"twice in {list_name}"
                    if other == list_name
                    else f"in both {other} and {list_name}"
                )
                raise ProfileError(f"{where}: state value {value!r} is {where_else}")
            listed[key] = (list_name, value)
            states[key] = Classification(list_name)
    if "state" in data and not states:
        raise ProfileError(
            f"{where}: 'state' is given but no value list "
            f"({', '.join(STATE_LISTS)}); every value would be unknown"
        )

    expressions = {
        key: compile_expression(where, key, data[key]) for key in EXPRESSION_KEYS if key in data
    }
    required = data.get("require_on_success", [])
    if not isinstance(required, list):
        raise ProfileError(f"{where}: require_on_success must be a list of expressions")
    require_on_success = tuple(
        (str(text), compile_expression(where, "require_on_success", text)) for text in required
    )
    codes, classes = _parse_codes(where, "http_status_states", data.get("http_status_states"))
    status = StateTable(
        state=expressions.get("state"),
        codes=codes,
        code_classes=classes,
        unlisted=_parse_unlisted(where, "unlisted_state", data.get("unlisted_state")),
    )
    codes, classes = _parse_codes(where, "submit.http_status_states", first)
    first_answer = StateTable(codes=codes, code_classes=classes)
    tables = {UrlKind.STATUS: status} | _parse_url_kinds(where, data.get("url_kinds"))
    submit = parse_submit(where, data.get("submit"), job_id=expressions.get("job_id"))
    for source in submit.polling:
        if source.kind not in tables:
            raise ProfileError(
                f"{where}: submit.polling_url names kind {source.kind.value!r} but "
                f"url_kinds has no {source.kind.value!r} entry"
            )
    return Profile(
        name=name,
        source={key: value for key, value in data.items() if key != SCHEMA_KEY},
        states=states,
        expressions=expressions,
        require_on_success=require_on_success,
        count_expressions=_parse_counts(where, data.get("counts")),
        tables=tables,
        first_answer=first_answer,
        case_insensitive=fold,
        hint_headers=parse_hint_headers(where, data.get("hint_headers"), "hint_headers"),
        request_id_headers=_parse_header_names(where, data.get("request_id_headers")),
        result_url_template=_parse_template(where, data),
        submit=submit,
        cancel=parse_cancel(where, data.get("cancel")),
        throttle=parse_throttle(where, data.get("throttle")),
        time_format=_parse_time_format(where, data.get("time_format")),
        webhook=None if "webhook" not in data else parse_webhook_contract(where, data["webhook"]),
        trace_context=bool(data.get("trace_context", False)),
        decided_by=parse_decided_by(where, data.get("decided_by")),
        result_for_every_ending=bool(data.get("result_for_every_ending", False)),
        errors_url_query_safe=bool(data.get("errors_url_query_safe", False)),
    )


def _parse_url_kinds(where: str, data: object) -> dict[UrlKind, StateTable]:
    """``url_kinds``: how ``location`` and ``resource`` URLs are read.

    A ``location`` URL is read by :data:`LOCATION_DEFAULTS` unless the profile says
    otherwise; a ``resource`` URL must name its ``state``.
    """
    kinds = checked_section(where, "url_kinds", {} if data is None else data, _KINDS)
    tables = {}
    for kind in (UrlKind.LOCATION, UrlKind.RESOURCE):
        at = f"url_kinds.{kind.value}"
        section = kinds.get(kind.value, LOCATION_DEFAULTS if kind is UrlKind.LOCATION else None)
        if section is None:
            continue
        section = checked_section(where, at, section, URL_KIND_KEYS)
        if kind is UrlKind.RESOURCE and "state" not in section:
            raise ProfileError(f"{where}: {at} needs 'state' (where the resource keeps it)")
        codes, classes = _parse_codes(
            where, f"{at}.http_status_states", section.get("http_status_states")
        )
        tables[kind] = StateTable(
            state=_compiled(where, f"{at}.state", section.get("state")),
            codes=codes,
            code_classes=classes,
            when_no_state=_parse_when_no_state(where, f"{at}.when_no_state", section),
            unlisted=_parse_unlisted(where, f"{at}.unlisted_state", section.get("unlisted_state")),
        )
    return tables


def _parse_when_no_state(
    where: str, key: str, section: Mapping[str, object]
) -> dict[int, Classification]:
    """``when_no_state``: what a 2xx body without a state means, by its status code."""
    table = _parse_http_status_states(where, key, section.get("when_no_state"))
    outside = sorted(code for code in table if not 200 <= code < 300)
    if outside:
        raise ProfileError(f"{where}: {key} key {outside[0]} is not a 2xx status")
    return table


def _compiled(where: str, key: str, text: object) -> Expression | None:
    return None if text is None else compile_expression(where, key, text)


def _parse_unlisted(where: str, key: str, value: object) -> Classification:
    if value is None:
        return Classification.UNKNOWN
    if value not in UNLISTED_STATES:
        raise ProfileError(f"{where}: {key} = {value!r}; expected 'unknown' or 'pending'")
    return Classification(value)


def _parse_codes(
    where: str, key: str, table: object
) -> tuple[dict[int, Classification], dict[int, Classification]]:
    """An ``http_status_states`` table split into exact codes and ``"4xx"``-style rows
    (keyed by the status class: 2, 4 or 5)."""
    exact: object = table
    classes: dict[int, Classification] = {}
    if isinstance(table, Mapping):
        exact = {k: v for k, v in table.items() if not re.fullmatch(r"[245]xx", str(k))}
        for row, value in table.items():
            if row not in exact:
                classes[int(str(row)[0])] = _class(where, f"{key}[{row}]", value)
    return _parse_http_status_states(where, key, exact), classes


def _parse_counts(where: str, counts: object) -> dict[str, tuple[Expression, ...]]:
    if counts is None:
        return {}
    counts = checked_section(where, "counts", counts, COUNT_KEYS)
    parsed: dict[str, tuple[Expression, ...]] = {}
    for key, value in counts.items():
        items = value if isinstance(value, list) else [value]
        parsed[key] = tuple(compile_expression(where, f"counts.{key}", item) for item in items)
    return parsed


def _parse_http_status_states(where: str, key: str, table: object) -> dict[int, Classification]:
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ProfileError(f"{where}: {key} must map HTTP status codes to classes")
    parsed: dict[int, Classification] = {}
    for code, value in table.items():
        if not re.fullmatch(r"[1-5][0-9][0-9]", str(code)):
            raise ProfileError(f"{where}: {key} key {code!r} is not an HTTP status")
        parsed[int(code)] = _class(where, f"{key}[{code}]", value)
    return parsed


def _class(where: str, at: str, value: object) -> Classification:
    allowed = [c.value for c in Classification if c is not Classification.UNKNOWN]
    if value not in allowed:
        raise ProfileError(f"{where}: {at} = {value!r}; expected one of {', '.join(allowed)}")
    return Classification(value)


def _parse_time_format(where: str, value: object) -> str:
    if value is None:
        return "rfc3339"
    if value not in TIME_FORMATS:
        raise ProfileError(
            f"{where}: time_format = {value!r}; expected {TIME_FORMATS[0]!r} or {TIME_FORMATS[1]!r}"
        )
    return str(value)


def _parse_header_names(where: str, names: object) -> tuple[str, ...]:
    if names is None:
        return DEFAULT_REQUEST_ID_HEADERS
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ProfileError(f"{where}: request_id_headers must be a list of header names")
    return tuple(n.lower() for n in names)


def _parse_template(where: str, data: Mapping[str, object]) -> str | None:
    template = data.get("result_url_template")
    if template is None:
        if "result_id" in data:
            raise ProfileError(f"{where}: result_id needs result_url_template to build the URL")
        return None
    if not isinstance(template, str) or "{result_id}" not in template:
        raise ProfileError(f"{where}: result_url_template must be a string with {{result_id}}")
    if "result_id" not in data:
        raise ProfileError(f"{where}: result_url_template needs result_id to fill it")
    return template


def load_profile(path: str | Path) -> Profile:
    """Load a profile from a JSON (``.json``) or TOML (``.toml``) file.

    Raises:
        ProfileError: the file cannot be read or parsed, or the table is invalid
            (see :func:`parse_profile`).
    """
    path = Path(path)
    try:
        raw = read_bounded(path, MAX_PROFILE_BYTES)
        text = raw.decode("utf-8")
    except OSError as exc:
        raise ProfileError(f"profile file {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ProfileError(f"profile file {path}: not UTF-8 text") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(
            f"profile file {path}: larger than {MAX_PROFILE_BYTES // 1024} KiB; a profile "
            "is a small table"
        )
    try:
        if path.suffix.lower() == ".toml":
            data: object = tomllib.loads(text)
        else:
            data = json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"profile file {path}: not valid {_kind(path)} ({exc})") from None
    except RecursionError:
        raise ProfileError(f"profile file {path}: nested too deeply to be a profile") from None
    name = data.get("name") if isinstance(data, dict) else None
    return parse_profile(data, name=name if isinstance(name, str) else path.stem)


def _kind(path: Path) -> str:
    return "TOML" if path.suffix.lower() == ".toml" else "JSON"
