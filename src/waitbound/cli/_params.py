"""Command-line values: durations, headers and inline profile tables."""

from __future__ import annotations

import re
from typing import Final

import click

from waitbound._json import JSON

__all__ = ["duration", "parse_duration", "parse_header", "split_values"]

_DURATION: Final = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|s|m|h)?\s*", re.IGNORECASE)
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_FRAMING: Final = frozenset(
    ("content-length", "transfer-encoding", "host", "connection", "upgrade", "te", "trailer")
)
_CONTROL: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def parse_duration(text: str) -> float:
    """Parse ``250ms``, ``0.5s``, ``90s``, ``10m``, ``1h`` or a bare number of seconds.

    Raises:
        ValueError: not a duration.
    """
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration (use e.g. 0.5s, 90s, 10m, 1h)")
    number, unit = match.groups()
    return float(number) * _UNITS[(unit or "s").lower()]


def duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A click callback that turns a duration option into seconds (``None`` stays ``None``)."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def parse_header(text: str) -> tuple[str, str]:
    """Split ``'Name: value'``; the value is never echoed back in an error.

    Raises:
        click.BadParameter: no colon, or a name that is not an HTTP token.
    """
    name, colon, value = text.partition(":")
    name = name.strip()
    if not colon:
        raise click.BadParameter("expected 'Name: value' (no ':' found)", param_hint="'--header'")
    if not _TOKEN.fullmatch(name):
        raise click.BadParameter(
            "expected 'Name: value'; the name is not a valid HTTP field name",
            param_hint="'--header'",
        )
    if _CONTROL.search(value) or not value.isascii():
        raise click.BadParameter(
            f"the value of header {name!r} must be printable ASCII without line breaks "
            "(RFC 9110 §5.5)",
            param_hint="'--header'",
        )
    if name.lower() in _FRAMING:
        raise click.BadParameter(
            f"header {name!r} is set by the HTTP client itself; leave it out",
            param_hint="'--header'",
        )
    return name, value.strip()


def split_values(text: str | None) -> list[JSON] | None:
    """Split a comma-separated list of state values (strings); ``None`` stays ``None``."""
    if text is None:
        return None
    return [item.strip() for item in text.split(",") if item.strip()]
