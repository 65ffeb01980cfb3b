"""Provider bodies read once and safely: non-finite numbers, duplicate keys, echoes, depth."""

from __future__ import annotations

import copy
import json
import math
import pickle

import pytest

from waitbound._base._json import (
    JSON,
    Ambiguous,
    NestingError,
    canonical_json,
    contains_ambiguous,
    parse_provider_json,
    redact_json,
    show,
)
from waitbound._base._secrets import REDACTED, redact_headers, redact_text, secret_parts

SECRET = "SECRET-XYZ123"


def _floats(value: JSON) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, list):
        return [f for item in value for f in _floats(item)]
    if isinstance(value, dict):
        return [f for item in value.values() for f in _floats(item)]
    return []


@pytest.mark.parametrize(
    ("body", "state"),
    [
        (b'{"status": NaN}', "NaN"),
        (b'{"status": Infinity}', "Infinity"),
        (b'{"status": -Infinity}', "-Infinity"),
        (b'{"status": 1e400}', "1e400"),
        (b'{"status": -1e400}', "-1e400"),
    ],
)
def test_non_finite_numbers_read_as_the_strings_they_were_written_as(
    body: bytes, state: str
) -> None:
    """NaN, Infinity and overflowing numbers become strings: an unknown state, not a float."""
    parsed = parse_provider_json(body)
    assert parsed == {"status": state}
    assert isinstance(parsed, dict)
    assert isinstance(parsed["status"], str)


def test_no_non_finite_float_survives_anywhere_in_a_body() -> None:
    """Nested non-finite values are strings too; finite floats and huge integers stay numbers."""
    parsed = parse_provider_json(b'{"a": [NaN, {"b": 1e999}], "c": 1.5, "d": ' + b"9" * 400 + b"}")
    assert all(math.isfinite(f) for f in _floats(parsed))
    assert isinstance(parsed, dict)
    assert parsed["a"] == ["NaN", {"b": "1e999"}]
    assert parsed["c"] == 1.5
    assert parsed["d"] == int("9" * 400)


def test_canonical_json_refuses_a_non_finite_float_clearly() -> None:
    """A NaN reaching canonical_json is a bug: a ValueError saying so, never 'NaN' in a hash."""
    with pytest.raises(ValueError, match="non-finite float"):
        canonical_json({"state": float("nan")})
    with pytest.raises(ValueError, match="non-finite float"):
        canonical_json([float("inf")])


def test_show_renders_non_finite_floats_by_name_without_raising() -> None:
    """show() never raises; a non-finite float shows as its name."""
    assert show(float("nan")) == '"NaN"'
    assert show({"a": [float("-inf")]}) == '{"a": ["-Infinity"]}'


def test_a_key_repeated_with_different_values_is_ambiguous() -> None:
    """{"status":"failed","status":"completed"} no longer silently reads "completed"."""
    parsed = parse_provider_json(b'{"status":"failed","status":"completed"}')
    assert isinstance(parsed, dict)
    marker = parsed["status"]
    assert isinstance(marker, Ambiguous)
    assert marker == "<ambiguous: duplicate key 'status'>"
    assert (marker.key, marker.values) == ("status", 2)
    assert contains_ambiguous(parsed) == "status"


def test_identical_repeats_are_harmless_and_kept_once() -> None:
    """A key repeated with the same value reads as that value."""
    parsed = parse_provider_json(b'{"status":"done","status":"done","n":{"k":[1],"k":[1]}}')
    assert parsed == {"status": "done", "n": {"k": [1]}}
    assert contains_ambiguous(parsed) is None


@pytest.mark.parametrize(
    ("body", "count"),
    [
        (b'{"k": 1, "k": true}', 2),
        (b'{"k": 1, "k": 1.0}', 2),
        (b'{"k": 1, "k": 2, "k": 1}', 2),
        (b'{"k": "a", "k": "b", "k": "c"}', 3),
    ],
)
def test_values_that_python_calls_equal_are_still_distinct(body: bytes, count: int) -> None:
    """1, 1.0 and true are different JSON values; the marker counts distinct values."""
    parsed = parse_provider_json(body)
    assert isinstance(parsed, dict)
    marker = parsed["k"]
    assert isinstance(marker, Ambiguous)
    assert marker.values == count


def test_contains_ambiguous_finds_a_marker_deep_inside() -> None:
    """The first ambiguous key anywhere in a value is named; a clean value gives None."""
    parsed = parse_provider_json(b'{"job": {"items": [{"id": 1, "id": 2}]}, "ok": 1}')
    assert isinstance(parsed, dict)
    assert contains_ambiguous(parsed) == "id"
    assert contains_ambiguous(parsed["ok"]) is None
    assert contains_ambiguous(None) is None


def test_the_ambiguous_marker_survives_copy_and_pickle() -> None:
    """Copies of a marker are markers, with their key and count."""
    marker = Ambiguous("status", 2)
    for copied in (copy.deepcopy(marker), pickle.loads(pickle.dumps(marker))):
        assert isinstance(copied, Ambiguous)
        assert (copied.key, copied.values, str(copied)) == ("status", 2, str(marker))


def test_a_hostile_duplicate_key_is_quoted_ascii_safe_and_bounded() -> None:
    """The marker's text quotes the key with escapes and a length bound."""
    key = "\x1b[31m" + "k" * 500
    quoted = json.dumps(key).encode()
    parsed = parse_provider_json(b"{" + quoted + b": 1, " + quoted + b": 2}")
    assert isinstance(parsed, dict)
    text = str(parsed[key])
    assert "\x1b" not in text
    assert len(text) < 120


@pytest.mark.parametrize(
    "body",
    [
        b'{"echo": "SECRET\\u002dXYZ123"}',
        b'{"echo": "\\u0053ECRET-XYZ123 and more"}',
        b'{"echo": ["x", {"deep": "SECRET-XYZ\\u0031\\u00323"}]}',
    ],
    ids=["escaped-dash", "escaped-first-letter", "nested-in-a-list"],
)
def test_json_escaped_echoes_of_a_secret_are_redacted(body: bytes) -> None:
    """Escapes that hide an echo from the raw-bytes redaction are caught after parsing."""
    parsed = parse_provider_json(body, secrets=(SECRET,))
    assert SECRET not in json.dumps(parsed)
    assert REDACTED in json.dumps(parsed)


def test_an_escaped_slash_echo_is_redacted() -> None:
    r"""abc\/def decodes to abc/def, which is then redacted."""
    parsed = parse_provider_json(b'{"note": "abc\\/defghij"}', secrets=("abc/defghij",))
    assert parsed == {"note": REDACTED}


def test_a_secret_used_as_an_object_key_is_redacted() -> None:
    """Keys are redacted too; keys that become equal are merged like duplicates."""
    parsed = parse_provider_json(b'{"SECRET\\u002dXYZ123": 1, "[redacted]": 2}', secrets=(SECRET,))
    assert isinstance(parsed, dict)
    assert list(parsed) == [REDACTED]
    assert isinstance(parsed[REDACTED], Ambiguous)
    assert SECRET not in str(parsed)


def test_raw_bytes_are_redacted_before_parsing() -> None:
    """An echo is gone even when the body is not JSON (the text a result may keep)."""
    with pytest.raises(ValueError, match="not JSON") as caught:
        parse_provider_json(b"token SECRET-XYZ123 {", secrets=(SECRET,))
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("body", "error", "words"),
    [
        (b"[" * 100_000 + b"]" * 100_000, NestingError, "nested too deeply"),
        (b'{"status": "\xff\xfe"}', ValueError, "not JSON"),
        (b"\xc3\x28", ValueError, "not JSON"),
        (b"<html>", ValueError, "not JSON"),
        (b'{"status": "running"', ValueError, "not JSON"),
    ],
    ids=["deep", "invalid-utf8-in-string", "invalid-utf8", "html", "truncated"],
)
def test_unreadable_bodies_raise_a_value_error_saying_why(
    body: bytes, error: type[Exception], words: str
) -> None:
    """Deep nesting and invalid UTF-8 are ValueErrors naming the problem, never a crash."""
    with pytest.raises(error, match=words):
        parse_provider_json(body)


def test_lone_surrogates_become_replacement_characters() -> None:
    """ "\ud800" cannot be stored as UTF-8: it reads as U+FFFD; escaped pairs still combine."""
    parsed = parse_provider_json(b'{"s": "\\ud800x\\ud83d\\ude00"}')
    assert parsed == {"s": "\ufffdx\U0001f600"}
    canonical_json(parsed).encode("utf-8")


def test_redact_json_walks_strings_and_keys_and_leaves_numbers() -> None:
    """redact_json replaces secrets in every string and key; other values are unchanged."""
    value: JSON = {"a": [SECRET, 1, None, True], f"k-{SECRET}": {"n": 2.5}}
    assert redact_json(value, (SECRET,)) == {
        "a": [REDACTED, 1, None, True],
        f"k-{REDACTED}": {"n": 2.5},
    }
    assert redact_json(value, ()) is value


def test_redact_text_and_headers_use_the_same_rule() -> None:
    """Header values and text are redacted longest secret first, every occurrence."""
    secrets = secret_parts([f"Bearer {SECRET}"])
    assert redact_text(f"Bearer {SECRET} / {SECRET}", secrets) == f"{REDACTED} / {REDACTED}"
    assert redact_headers({"x-request-id": f"req-{SECRET}"}, secrets) == {
        "x-request-id": f"req-{REDACTED}"
    }


def test_a_body_nested_past_max_depth_is_refused_whatever_the_stack() -> None:
    """128 levels of arrays and objects are read; 129 are a NestingError, also when the
    caller's stack is shallow (the limit is a number, not the recursion limit)."""
    from waitbound._base._json import MAX_DEPTH

    assert MAX_DEPTH == 128
    assert parse_provider_json(b"[" * 128 + b"]" * 128) is not None
    assert parse_provider_json(b'{"a":' * 128 + b"1" + b"}" * 128) is not None
    with pytest.raises(NestingError, match="more than 128 levels"):
        parse_provider_json(b"[" * 129 + b"]" * 129)
    with pytest.raises(NestingError, match="more than 128 levels"):
        parse_provider_json(b'{"a":' * 129 + b"1" + b"}" * 129)
