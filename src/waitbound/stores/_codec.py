"""How values reach a database column and come back identical, whatever bytes a
provider sent (see ``docs/stores.md``, "Bytes a database cannot hold").

PostgreSQL cannot hold every string: a ``text`` column refuses NUL, and a ``json``
column keeps ``\\u0000`` and lone-surrogate escapes but then fails every query that
reads it with ``->>`` (``unsupported Unicode escape sequence``), for every row of the
table. No encoding to UTF-8 holds a lone surrogate at all. So every JSON text a store
writes goes through :func:`dump_json` and is read by :func:`load_json`:

- a value without NUL, U+0010, surrogates or non-finite floats is written as its compact
  JSON text with sorted keys, exactly as before;
- any other value is written as ONE space followed by the JSON of the value with, in
  every string and key, each NUL, U+0010 and surrogate code point replaced by U+0010
  and its four lower-case hex digits (``"x\\u0000y"`` is stored as
  ``"x\\u00100000y"``), and each non-finite float by the string U+0010 ``nan`` /
  ``inf`` / ``-inf``. JSON permits the leading space and no JSON text waitbound wrote
  before has one, so older rows are read as they always were.

:func:`to_text` / :func:`from_text` do the same for PostgreSQL ``text`` columns a
provider's strings reach (an audit event's summary, a delivery's job id): a string
holding NUL or a surrogate, or starting with U+0010, is stored as U+0010 followed by
the escaped string.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, Final

from waitbound._base._json import JSON

__all__ = [
    "Execute",
    "ESCAPE",
    "MARK",
    "brief",
    "dump_json",
    "from_text",
    "load_json",
    "load_object",
    "to_text",
]

Execute = Callable[[str, tuple[Any, ...]], Any]
"""Run one statement with its parameters in the caller's transaction; answer with a
DB-API cursor (``rowcount``, ``fetchone``, ``fetchall``)."""

ESCAPE: Final = "\x10"
"""U+0010 (DATA LINK ESCAPE): starts every escape."""
MARK: Final = " "
"""The first character of a JSON text whose strings are escaped."""

_HOSTILE: Final = re.compile("[\x00\x10\ud800-\udfff]")
_HOSTILE_TEXT: Final = re.compile("[\x00\ud800-\udfff]")
_ESCAPED: Final = re.compile("\x10([0-9a-f]{4})")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_NUL_OR_ESCAPE: Final = re.compile(r"\\u00[01]0")
"""A JSON text's ``\\u0000`` or ``\\u0010`` (or an escaped backslash before one: a false
positive only costs the slower path)."""
_NON_FINITE: Final = {"\x10nan": math.nan, "\x10inf": math.inf, "\x10-inf": -math.inf}


def _escape(text: str) -> str:
    if _HOSTILE.search(text) is None:
        return text
    return _HOSTILE.sub(lambda m: f"{ESCAPE}{ord(m[0]):04x}", text)


def _unescape(text: str) -> str:
    if ESCAPE not in text:
        return text
    return _ESCAPED.sub(lambda m: chr(int(m[1], 16)), text)


def _escaped_value(value: object) -> object:
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "\x10nan" if math.isnan(value) else ("\x10inf" if value > 0 else "\x10-inf")
    if isinstance(value, list | tuple):
        return [_escaped_value(item) for item in value]
    if isinstance(value, dict):
        return {_escape(str(key)): _escaped_value(item) for key, item in value.items()}
    return value


def _unescaped_value(value: JSON) -> JSON:
    if isinstance(value, str):
        found = _NON_FINITE.get(value)
        return found if found is not None else _unescape(value)
    if isinstance(value, list):
        return [_unescaped_value(item) for item in value]
    if isinstance(value, dict):
        return {_unescape(key): _unescaped_value(item) for key, item in value.items()}
    return value


_ENCODERS: Final = {
    allow_nan: json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan
    )
    for allow_nan in (False, True)
}
"""The two encoders :func:`_dumps` uses, made once (``json.dumps`` with these options
builds one per call; the text is the same)."""


def _dumps(value: object, *, allow_nan: bool) -> str:
    return _ENCODERS[allow_nan].encode(value)


def _needs_escapes(text: str) -> bool:
    """Whether a JSON text may hold a NUL, U+0010 or surrogate (cheap checks first)."""
    if "\\u00" in text and _NUL_OR_ESCAPE.search(text) is not None:
        return True
    return not text.isascii() and _SURROGATE.search(text) is not None


def dump_json(value: object) -> str:
    """*value* as the JSON text a store writes (see the module's docstring).

    Raises:
        ValueError: *value* is not JSON (an object that is no JSON type), or nests too
            deeply to encode.
    """
    try:
        try:
            text = _dumps(value, allow_nan=False)
        except ValueError:  # a non-finite float
            return MARK + _dumps(_escaped_value(value), allow_nan=False)
        if not _needs_escapes(text):
            return text
        return MARK + _dumps(_escaped_value(value), allow_nan=False)
    except RecursionError:
        raise ValueError("a value nested too deeply to store") from None


def load_json(text: str) -> JSON:
    """The value of a JSON text a store wrote (:func:`dump_json`), or an older one.

    Raises:
        ValueError: *text* is not JSON (or nests too deeply to read).
    """
    try:
        value: JSON = json.loads(text)
        return _unescaped_value(value) if text.startswith(MARK) else value
    except RecursionError:
        raise ValueError("a stored value nested too deeply to read") from None


def to_text(text: str) -> str:
    """*text* as a PostgreSQL ``text`` column holds it (no NUL, no surrogate)."""
    if _HOSTILE_TEXT.search(text) is None and not text.startswith(ESCAPE):
        return text
    return ESCAPE + _escape(text)


def load_object(text: str) -> dict[str, JSON]:
    """:func:`load_json` of a text that must hold a JSON object (an event's data).

    Raises:
        ValueError: it is not JSON, or not an object.
    """
    value = load_json(text)
    if not isinstance(value, dict):
        raise ValueError("a stored value is not a JSON object")
    return value


def from_text(text: str) -> str:
    """The string :func:`to_text` stored as *text*."""
    return _unescape(text[1:]) if text.startswith(ESCAPE) else text


def to_sqlite(text: str | None) -> str | bytes | None:
    """*text* as a SQLite ``TEXT`` column holds it: as it is (NUL included), or, when it
    holds a surrogate (which UTF-8 cannot encode), as a BLOB of its bytes with each
    surrogate as three bytes (``surrogatepass``). No text waitbound stored before is a
    BLOB, so older rows read as written."""
    if text is None or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-8", "surrogatepass")


def from_sqlite(value: str | bytes) -> str:
    """The string :func:`to_sqlite` stored as *value*."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


def brief(exc: BaseException, limit: int = 200) -> str:
    """*exc* for a message about one stored value: its type and text, ASCII, bounded
    (a damaged row's text may be a provider's megabyte)."""
    text = ascii(str(exc))[1:-1]
    text = text if len(text) <= limit else text[:limit] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
