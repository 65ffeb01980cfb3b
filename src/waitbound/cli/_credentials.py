"""A worker's credentials, each bound to one origin: ``--header-for`` and ``--credentials``.

A worker drives operations that others added to a shared store. A header given for
every origin would go to whoever added an operation, so a worker's headers are named
per origin (scheme, host, port; RFC 6454) and a request carries only those of the
origin it goes to, whatever the record names or trusts: the one rule of
``waitbound._rules._credentials`` (its ``BoundCredentials``), which the MCP server's
providers follow too.

The credentials file is TOML, in the MCP config's style::

    [[credentials]]
    origin = "https://api.example.com"
    headers = { Authorization = "Bearer ${EXAMPLE_TOKEN}" }

``${NAME}`` takes the variable from the environment when the file is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from waitbound._base._config_file import expand_env, load_toml
from waitbound._base._errors import UsageError
from waitbound._model._record import Record
from waitbound._rules._credentials import BoundCredentials, Origin, origin_of
from waitbound.cli._params import header_problem, parse_header

__all__ = ["Origin", "OriginCredentials", "load_credentials", "origin_of", "parse_origin"]

_ENTRY_KEYS: Final = frozenset({"origin", "headers"})


def parse_origin(text: str, where: str) -> Origin:
    """Check and normalise an origin ``scheme://host[:port]`` (http or https).

    Raises:
        UsageError: not an origin; the message names *where* it came from.
    """
    wrong = (
        f"{where}: {text[:80]!r} is not an origin; expected scheme://host[:port] (http or https)"
    )
    try:
        parts = urlsplit(text.strip())
    except ValueError:
        raise UsageError(wrong) from None
    if parts.username is not None or parts.password is not None:
        raise UsageError(f"{wrong}, without user info")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UsageError(f"{wrong}, without a path or query")
    found = origin_of(text.strip())
    if found is None:
        raise UsageError(wrong)
    return found


def show_origin(origin: Origin) -> str:
    """*origin* as text: ``https://api.example.com:443``."""
    scheme, host, port = origin
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


@dataclass(frozen=True, slots=True)
class OriginCredentials:
    """Headers per origin; called with a record, it gives that operation's headers.

    Attributes:
        table: the headers of each origin.
    """

    table: Mapping[Origin, Mapping[str, str]] = field(default_factory=dict)

    def __call__(self, record: Record) -> Mapping[str, str]:
        """The headers of the origin the operation named (its submit URL, else its
        status URL); none when no credentials are configured for it."""
        return self.bound()(record)

    def bound(self) -> BoundCredentials:
        """These headers as the drivers take them: each sent to its origin only."""
        return BoundCredentials.by_origin(self.table)

    def merged(self, other: OriginCredentials, where: str) -> OriginCredentials:
        """Both tables; a header given twice for one origin is refused.

        Raises:
            UsageError: the same header for the same origin in both.
        """
        table = {origin: dict(headers) for origin, headers in self.table.items()}
        for origin, headers in other.table.items():
            mine = table.setdefault(origin, {})
            for name, value in headers.items():
                if name.lower() in {n.lower() for n in mine}:
                    raise UsageError(
                        f"{where}: header {name!r} for {show_origin(origin)} is given twice"
                    )
                mine[name] = value
        return OriginCredentials(table)


def from_flags(pairs: Sequence[tuple[str, str]]) -> OriginCredentials:
    """The credentials of ``--header-for ORIGIN 'Name: value'`` flags.

    Raises:
        UsageError: an origin that is not one, or a header given twice for one origin.
        click.BadParameter: a header that cannot be sent.
    """
    result = OriginCredentials()
    for text, header in pairs:
        origin = parse_origin(text, "--header-for")
        name, value = parse_header(header, "--header-for")
        result = result.merged(OriginCredentials({origin: {name: value}}), "--header-for")
    return result


def load_credentials(
    path: str | Path, environ: Mapping[str, str] | None = None
) -> OriginCredentials:
    """Read a credentials file (see the module docstring).

    Args:
        path: the TOML file.
        environ: where ``${NAME}`` is looked up (``os.environ``).

    Raises:
        UsageError: the file cannot be read, is not TOML, or holds a bad value; one line
            naming the file and the key, never a header value.
    """
    env = os.environ if environ is None else environ
    return load_toml(path, "credentials file", lambda data: _parse(data, env))


def _parse(data: Mapping[str, Any], env: Mapping[str, str]) -> OriginCredentials:
    unknown = sorted(set(data) - {"credentials"})
    if unknown:
        raise UsageError(f"unknown key {unknown[0]!r} at the top level (known: credentials)")
    entries = data.get("credentials")
    if not isinstance(entries, list) or not entries:
        raise UsageError("no [[credentials]] entry: give at least one, with origin and headers")
    result = OriginCredentials()
    for index, entry in enumerate(entries):
        where = f"credentials[{index}]"
        if not isinstance(entry, dict):
            raise UsageError(f"{where} must be a table with origin and headers")
        extra = sorted(set(entry) - _ENTRY_KEYS)
        if extra:
            raise UsageError(f"{where}: unknown key {extra[0]!r} (known: headers, origin)")
        text = entry.get("origin")
        if not isinstance(text, str) or not text:
            raise UsageError(f"{where}.origin must be text: scheme://host[:port]")
        origin = parse_origin(text, f"{where}.origin")
        headers = entry.get("headers")
        if not isinstance(headers, dict) or not headers:
            raise UsageError(f"{where}.headers must be a table of one or more headers")
        checked = {
            name: _value(name, raw, f"{where}.headers", env) for name, raw in headers.items()
        }
        result = result.merged(OriginCredentials({origin: checked}), where)
    return result


def _value(name: str, raw: object, where: str, env: Mapping[str, str]) -> str:
    """A header's value with ``${NAME}`` expanded, checked; errors never quote it."""
    if not isinstance(raw, str):
        raise UsageError(f"{where}.{name[:40]} must be text")

    value = expand_env(raw, f"{where}.{name[:40]}", env).strip()
    problem = header_problem(name, value) or (None if value else "the value is empty")
    if problem is not None:
        raise UsageError(f"{where}.{name[:40]}: {problem}")
    return value
