"""Numbers and durations as people type them: one strict reading for every surface.

Python's ``int()`` and ``float()`` read more than a person means: ``int("1_0")`` is 10
(PEP 515 underscores), ``float("nan")``, ``float("inf")`` and ``float("1e-320")`` (a
subnormal, all but zero) are numbers, and ``float("1e-400")`` is silently 0. A flag, a
form field or a duration that reads like that is a typo or a probe, never a grant or a
budget, so the command line (``waitbound.cli``) and the inbox's decision form
(``waitbound.web``) read what people type here, and refuse the rest in one line.

Grammar (ASCII only; surrounding spaces ignored):

- a whole number: ``[+-]?[0-9]+``;
- a number: ``[+-]?(D+[.D*]|.D+)([eE][+-]?D+)?``, finite, and either zero or a normal
  float (``abs(x) >= sys.float_info.min``): no ``nan``, ``inf``, ``1e400``, ``1e-320``;
- a duration: a bare number of seconds (``90``, ``0.5``), or one or more
  ``NUMBER UNIT`` parts with units ``d`` (86400 s), ``h``, ``m``, ``s``, ``ms``, each at
  most once and largest first: ``2d``, ``1d2h``, ``1h30m``, ``1.5h``, ``90s``,
  ``250ms``, ``1m30.5s``. Parts add up; units are case-insensitive.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Final

__all__ = [
    "DURATION_SYNTAX",
    "DURATION_UNITS",
    "check_number",
    "parse_duration",
    "parse_integer",
    "parse_number",
    "rough_duration",
]

_MAX_CHARS: Final = 64
"""Longer text is no number a person typed (and a 5000-digit int() would be refused)."""

_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_NUMBER: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_PART: Final = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|d|h|m|s)\s*", re.IGNORECASE)
_BARE: Final = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")

DURATION_UNITS: Final = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
"""Seconds per duration unit, largest first (the order compound durations are written)."""

DURATION_SYNTAX: Final = (
    "Durations: a number with a unit d, h, m, s or ms, or several largest first "
    "(2d, 1h30m, 1.5h, 90s, 250ms); a bare number is seconds."
)
"""The duration syntax in one sentence, for ``--help`` and error messages."""


def _shown(text: str) -> str:
    return repr(text[:24] + "…" if len(text) > 24 else text)


def _refuse_odd(text: str, what: str) -> None:
    """One line for the tempting mistakes: underscores, nan/inf, non-ASCII digits."""
    if "_" in text:
        raise ValueError(f"{_shown(text)} is not {what}: write it without underscores")
    if not text.isascii():
        raise ValueError(f"{_shown(text)} is not {what}: use the digits 0-9")
    if len(text) > _MAX_CHARS:
        raise ValueError(f"{_shown(text)} is not {what}: it is longer than {_MAX_CHARS} characters")


def parse_integer(text: str) -> int:
    """Read a whole number a person typed: ``[+-]?[0-9]+``.

    Raises:
        ValueError: anything else (``1_0``, ``1.0``, ``1e3``, non-ASCII digits), in one line.
    """
    stripped = text.strip()
    _refuse_odd(stripped, "a whole number")
    if not _INTEGER.fullmatch(stripped):
        raise ValueError(f"{_shown(stripped)} is not a whole number (digits 0-9 only)")
    return int(stripped)


def check_number(value: float, what: str | None = None) -> float:
    """*value*, when it is finite and zero or a normal float; *what* names it in the
    message (default: its repr).

    Raises:
        ValueError: ``nan``, an infinity, or a subnormal (``0 < |x| < 2.2e-308``).
    """
    label = what if what is not None else repr(value)
    if math.isnan(value):
        raise ValueError(f"{label} is not a number")
    if math.isinf(value):
        raise ValueError(f"{label} is too large to be a number here")
    if value != 0 and abs(value) < sys.float_info.min:
        raise ValueError(f"{label} is too close to zero to mean anything")
    return value


def parse_number(text: str) -> float:
    """Read a decimal number a person typed (``3``, ``0.5``, ``-2``, ``1.5e3``).

    Raises:
        ValueError: not of the grammar above; ``nan``/``inf``; a magnitude too large
            for a float (``1e400``) or too small to be a normal one (``1e-320``,
            ``1e-400`` which ``float()`` would read as 0).
    """
    stripped = text.strip()
    _refuse_odd(stripped, "a number")
    if not _NUMBER.fullmatch(stripped):
        raise ValueError(f"{_shown(stripped)} is not a number (e.g. 3, 0.5, 1.5e3)")
    value = float(stripped)
    if value == 0 and re.search(r"[1-9]", stripped.partition("e")[0].partition("E")[0]):
        raise ValueError(f"{_shown(stripped)} is too close to zero to mean anything")
    return check_number(value, _shown(stripped))


def parse_duration(text: str) -> float:
    """Read a duration a person typed, in seconds (see the module's grammar).

    ``2d`` is 172800.0, ``1h30m`` 5400.0, ``1.5h`` 5400.0, ``250ms`` 0.25, ``90`` 90.0.

    Raises:
        ValueError: not a duration, a unit twice or out of order (``30m1h``), or a
            value that is not finite; the message states the syntax.
    """
    stripped = text.strip()
    _refuse_odd(stripped, "a duration")
    if _BARE.fullmatch(stripped):
        return _finite(float(stripped), stripped)
    parts = list(_PART.finditer(stripped))
    if not stripped or "".join(p.group(0) for p in parts) != stripped:
        raise ValueError(f"{_shown(stripped)} is not a duration. {DURATION_SYNTAX}")
    order = list(DURATION_UNITS)
    units = [part.group(2).lower() for part in parts]
    ranks = [order.index(unit) for unit in units]
    if ranks != sorted(set(ranks)):
        raise ValueError(
            f"{_shown(stripped)} is not a duration: give each unit once, largest first (e.g. 1h30m)"
        )
    seconds = sum(
        float(part.group(1)) * DURATION_UNITS[unit] for part, unit in zip(parts, units, strict=True)
    )
    return _finite(seconds, stripped)


def _finite(seconds: float, text: str) -> float:
    if not math.isfinite(seconds):
        raise ValueError(f"{_shown(text)} is too long a duration")
    if seconds != 0 and seconds < sys.float_info.min:
        raise ValueError(f"{_shown(text)} is too short a duration to mean anything")
    if seconds == 0 and re.search(r"[1-9]", text):
        raise ValueError(f"{_shown(text)} is too short a duration to mean anything")
    return seconds


def rough_duration(seconds: float) -> str:
    """A duration in words, to three significant digits in the largest fitting unit:
    ``"45 s"``, ``"9 minutes"``, ``"1.5 hours"`` (how an estimate is told)."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} minutes"
    return f"{seconds / 3600:.3g} hours"
