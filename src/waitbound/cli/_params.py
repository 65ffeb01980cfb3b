"""Command-line values: durations, headers, inline profile tables, and text the store
keeps or looks up."""

from __future__ import annotations

import re
from typing import Final, cast

import click

from waitbound._base._json import JSON
from waitbound._base._numbers import DURATION_SYNTAX, parse_duration, parse_integer, parse_number

__all__ = [
    "DURATION_HELP",
    "MAX_RESPONSE_BYTES",
    "MIN_RESPONSE_BYTES",
    "STORED_TEXT",
    "StoredText",
    "WholeRange",
    "NumberRange",
    "duration",
    "header_problem",
    "parse_duration",
    "parse_header",
    "positive_duration",
    "split_values",
]

"""The most requests, transport failures or rate-limited answers one operation may allow."""
MIN_RESPONSE_BYTES: Final = 1024
MAX_RESPONSE_BYTES: Final = 1024**3

_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_FRAMING: Final = frozenset(
    ("content-length", "transfer-encoding", "host", "connection", "upgrade", "te", "trailer")
)
_CONTROL: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

DURATION_HELP: Final = DURATION_SYNTAX
"""The duration syntax, as the help of every command that takes a duration states it."""


class WholeRange(click.IntRange):
    """A whole number within bounds, read by :func:`waitbound._base._numbers.parse_integer`:
    ``1_0``, ``1.0`` and ``1e3`` are refused (``int()`` would read ``1_0`` as 10)."""

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        """*value* as an int within the range; one line naming the problem otherwise."""
        if isinstance(value, str):
            try:
                value = parse_integer(value)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        return super().convert(cast("int", value), param, ctx)

    def _describe_range(self) -> str:
        """Nothing for an unbounded range (click would print ``x<=None``)."""
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()


class NumberRange(click.FloatRange):
    """A decimal number within bounds, read by :func:`waitbound._base._numbers.parse_number`:
    underscores, ``nan``, ``inf``, ``1e400`` and subnormals (``1e-320``) are refused."""

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """*value* as a float within the range; one line naming the problem otherwise."""
        if isinstance(value, str):
            try:
                value = parse_number(value)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        return super().convert(cast("float", value), param, ctx)

    def _describe_range(self) -> str:
        """Nothing for an unbounded range (click would print ``x<=None``)."""
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()


def duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A click callback that turns a duration option into seconds (``None`` stays ``None``)."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def positive_duration(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> float | None:
    """Like :func:`duration`, and the duration must be more than zero (a zero delay floor
    would allow a tight loop; a zero lease would cover no request)."""
    seconds = duration(ctx, param, value)
    if seconds is not None and not seconds > 0:
        raise click.BadParameter(
            f"{value!r} must be more than 0",
            ctx=ctx,
            param=param,
        )
    return seconds


def header_problem(name: str, value: str) -> str | None:
    """Why the header *name*: *value* cannot be sent, or ``None``; never quotes the value."""
    if not _TOKEN.fullmatch(name):
        return "the name is not a valid HTTP field name"
    if _CONTROL.search(value) or not value.isascii():
        return (
            f"the value of header {name!r} must be printable ASCII without line breaks "
            "(RFC 9110 §5.5)"
        )
    if name.lower() in _FRAMING:
        return f"header {name!r} is set by the HTTP client itself; leave it out"
    return None


def parse_header(text: str, flag: str = "--header") -> tuple[str, str]:
    """Split ``'Name: value'``; the value is never echoed back in an error.

    Raises:
        click.BadParameter: no colon, or a header that cannot be sent (named by *flag*).
    """
    name, colon, value = text.partition(":")
    name = name.strip()
    if not colon:
        raise click.BadParameter("expected 'Name: value' (no ':' found)", param_hint=f"'{flag}'")
    problem = header_problem(name, value)
    if problem is not None:
        if problem.startswith("the name"):
            problem = f"expected 'Name: value'; {problem}"
        raise click.BadParameter(problem, param_hint=f"'{flag}'")
    return name, value.strip()


def split_values(text: str | None) -> list[JSON] | None:
    """Split a comma-separated list of state values (strings); ``None`` stays ``None``."""
    if text is None:
        return None
    return [item.strip() for item in text.split(",") if item.strip()]


class StoredText(click.types.StringParamType):
    """Text the store keeps or looks up — an operation's or a delivery's id, a label
    prefix, a state value, an audit note — which must be UTF-8.

    A command-line argument whose bytes are not UTF-8 (``$'\\xff'``) reaches Python as
    lone surrogates, which no store, JSON document or audit hash can hold: it is refused
    here, a usage error (exit 2) naming the parameter and the bytes, instead of failing
    in the store as if a stored value were damaged.
    """

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> str:
        """*value* as text, checked to be UTF-8."""
        text = super().convert(value, param, ctx)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            self.fail(f"{_bytes_of(text)[:40]!r} is not UTF-8 text", param, ctx)
        return text


def _bytes_of(text: str) -> bytes:
    """The bytes a command-line argument was (its undecodable ones kept as surrogates)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that no undecodable byte made
        return text.encode("utf-8", "backslashreplace")


STORED_TEXT: Final = StoredText()
"""The :class:`StoredText` type, for ``type=`` of an argument or option."""
