"""The JSON value type, provider bodies read once and safely, and the canonical encoding.

A provider's body is read by :func:`parse_provider_json` and nothing else, so every
value the core sees obeys three rules:

- no non-finite float: ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow
  to infinity (``1e400``) stay the strings they were written as;
- no silently chosen duplicate: a key repeated with different values reads as an
  :class:`Ambiguous` marker (identical repeats are harmless and kept once);
- no echoed credential: each secret inside every string and every object key is
  replaced by ``[redacted]``, after JSON escapes are decoded (``\\u002d``, ``\\/``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Final

from waitbound._base._json_types import JSON, JSONScalar
from waitbound._base._secrets import redact_bytes, redact_text

__all__ = [
    "JSON",
    "Ambiguous",
    "JSONScalar",
    "MAX_DEPTH",
    "NestingError",
    "canonical_json",
    "contains_ambiguous",
    "parse_provider_json",
    "redact_json",
    "show",
]

MAX_DEPTH: Final = 128
"""How deeply a provider's body may nest arrays and objects (``[[1]]`` is 2 levels):
deeper is refused as :class:`NestingError`, whatever the caller's stack, so every value
read can be stored, hashed and read back inside a record."""

_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_NON_FINITE: Final = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}


class Ambiguous(str):
    """The value of a key a provider's object holds more than once, with different values.

    A ``str`` (so it stores, hashes and prints like one) whose text says what happened,
    e.g. ``<ambiguous: duplicate key 'status'>``. A reader that finds one (see
    :func:`contains_ambiguous`) knows the provider's answer cannot be trusted either way.

    Attributes:
        key: the repeated key (already redacted).
        values: how many distinct values the key had (at least 2).
    """

    key: str
    values: int

    def __new__(cls, key: str, values: int) -> Ambiguous:
        """Mark *key* as repeated with *values* distinct values."""
        marker = super().__new__(cls, f"<ambiguous: duplicate key {_quoted(key)}>")
        marker.key = key
        marker.values = values
        return marker

    def __reduce__(self) -> tuple[type[Ambiguous], tuple[str, int]]:
        """Copy and pickle as the marker, not as plain text."""
        return Ambiguous, (self.key, self.values)


class NestingError(ValueError):
    """A provider's body nests deeper than it can be read."""


def _quoted(text: str, limit: int = 60) -> str:
    """*text* quoted for a message: ASCII only, control characters escaped, bounded."""
    quoted = ascii(text[:limit])
    return quoted if len(text) <= limit else quoted + "..."


def _distinct(values: list[JSON]) -> list[JSON]:
    """*values* without repeats, first occurrence first (``1``, ``1.0`` and ``true`` differ)."""
    seen: dict[str, JSON] = {}
    for value in values:
        seen.setdefault(canonical_json(value), value)
    return list(seen.values())


def merge_pairs(pairs: Sequence[tuple[str, JSON]]) -> dict[str, JSON]:
    """An object from *pairs*: a key repeated with different values becomes :class:`Ambiguous`.

    Identical repeats are kept once. The key keeps its first position.
    """
    grouped: dict[str, list[JSON]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    merged: dict[str, JSON] = {}
    for key, values in grouped.items():
        distinct = _distinct(values) if len(values) > 1 else values
        merged[key] = distinct[0] if len(distinct) == 1 else Ambiguous(key, len(distinct))
    return merged


def _finite_or_text(text: str) -> float | str:
    """A JSON number with a fraction or exponent; one that overflows stays its text."""
    number = float(text)
    return number if math.isfinite(number) else text


def _clean_text(text: str, secrets: Sequence[str]) -> str:
    """*text* with secrets redacted and lone surrogates (``"\\ud800"``) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _SURROGATE.sub("\ufffd", text)
    return redact_text(text, secrets) if secrets else text


def _map_strings(value: JSON, clean: Callable[[str], str], depth: int = 0) -> JSON:
    """*value* with *clean* applied to every string and every key; markers are kept.

    Keys that become equal are merged by :func:`merge_pairs`.

    Raises:
        NestingError: *value* nests deeper than :data:`MAX_DEPTH`.
    """
    if isinstance(value, Ambiguous):
        return value if clean(value.key) == value.key else Ambiguous(clean(value.key), value.values)
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list | dict) and depth >= MAX_DEPTH:
        raise NestingError(f"a body nested too deeply to read (more than {MAX_DEPTH} levels)")
    if isinstance(value, list):
        return [_map_strings(item, clean, depth + 1) for item in value]
    if isinstance(value, dict):
        return merge_pairs(
            [(clean(k), _map_strings(v, clean, depth + 1)) for k, v in value.items()]
        )
    return value


def redact_json(value: JSON, secrets: Sequence[str]) -> JSON:
    """*value* with each secret replaced by ``[redacted]`` in every string and object key.

    Two keys that become equal once redacted are merged like duplicate keys (different
    values become :class:`Ambiguous`). Numbers, booleans and ``null`` are unchanged.

    Args:
        value: a decoded JSON value.
        secrets: the strings to hide, longest first (see
            :func:`waitbound._base._secrets.secret_parts`).
    """
    if not secrets:
        return value
    return _map_strings(value, lambda text: redact_text(text, secrets))


def parse_provider_json(data: bytes, *, secrets: Sequence[str] = ()) -> JSON:
    """Read a provider's body as JSON (RFC 8259), once and safely.

    ``NaN``, ``Infinity``, ``-Infinity`` and numbers beyond float range (``1e400``)
    stay strings as written; a key repeated with different values reads as
    :class:`Ambiguous`; lone surrogates become U+FFFD; nesting deeper than
    :data:`MAX_DEPTH` (128) levels is refused; each of *secrets* is replaced
    by ``[redacted]`` in the raw bytes first and again in every decoded string and key
    (JSON escapes cannot hide an echo). Integers are exact at any size up to
    Python's 4,300-digit limit.

    Args:
        data: the body, UTF-8 (or UTF-16/32 with its BOM-less detection, as RFC 8259
            permits json's reader).
        secrets: credentials to hide (see :func:`waitbound._base._secrets.secret_parts`).

    Returns:
        The decoded value.

    Raises:
        NestingError: the body nests more than :data:`MAX_DEPTH` levels deep (a
            ``ValueError``).
        ValueError: the body is not JSON (invalid UTF-8 included).
    """
    data = redact_bytes(data, secrets)
    try:
        value: JSON = json.loads(
            data,
            parse_constant=_NON_FINITE.__getitem__,
            parse_float=_finite_or_text,
            object_pairs_hook=merge_pairs,
        )
        return _map_strings(value, lambda text: _clean_text(text, secrets))
    except NestingError:
        raise
    except RecursionError:
        raise NestingError("a body nested too deeply to read") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
        raise ValueError(f"a body that is not JSON ({type(exc).__name__})") from None


def contains_ambiguous(value: JSON) -> str | None:
    """The key of the first :class:`Ambiguous` marker anywhere inside *value*, else ``None``.

    Depth first, in document order; *value* itself may be the marker.
    """
    if isinstance(value, Ambiguous):
        return value.key
    if isinstance(value, list):
        items: list[JSON] = value
    elif isinstance(value, dict):
        items = list(value.values())
    else:
        return None
    for item in items:
        found = contains_ambiguous(item)
        if found is not None:
            return found
    return None


_CANONICAL: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
"""The canonical encoder, made once (``json.dumps`` with these options builds one per
call; the text is the same)."""


def canonical_json(value: object) -> str:
    """Encode *value* as compact JSON with sorted keys (stable for hashing).

    Raises:
        ValueError: *value* holds a non-finite float (``nan``, ``inf``): not JSON, and
            a bug here, since provider values are read by :func:`parse_provider_json`.
    """
    try:
        return _CANONICAL.encode(value)
    except ValueError as exc:
        raise ValueError(
            f"canonical_json: a non-finite float (NaN or Infinity) is not JSON ({exc})"
        ) from None


def _finite(value: object) -> object:
    """*value* with each non-finite float replaced by its name (``"NaN"``, ``"Infinity"``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return value


def show(value: object, limit: int = 80) -> str:
    """Render a provider's value for a message: JSON (``null``, ``"running"``), bounded.

    Never raises: a non-finite float shows as its name, anything else not JSON as its
    ``str()``.
    """
    try:
        text = json.dumps(value, ensure_ascii=True, default=str, allow_nan=False)
    except (ValueError, RecursionError):
        try:
            text = json.dumps(_finite(value), ensure_ascii=True, default=str, allow_nan=False)
        except (ValueError, RecursionError):
            text = ascii(str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"
