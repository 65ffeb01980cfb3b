"""Credentials kept out of everything waitbound stores or shows.

The caller's header values are credentials. A provider that echoes one back (a debug
field, an error quoting the request) has it replaced by ``[redacted]`` in the answer's
body before the body is read, so it never reaches a record, the audit log or a tool
answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

__all__ = ["MIN_SECRET_CHARS", "REDACTED", "redact_bytes", "secret_parts"]

MIN_SECRET_CHARS: Final = 8
"""Shorter values are not redacted: they would match ordinary text."""

REDACTED: Final = "[redacted]"


def secret_parts(values: Iterable[str]) -> tuple[str, ...]:
    """The secrets in header *values*: each value, and each space-separated part of it
    (the token after ``Bearer``), of at least :data:`MIN_SECRET_CHARS` characters;
    longest first, so a whole value is replaced before its parts."""
    found = {
        part
        for value in values
        for part in (value, *value.split())
        if len(part) >= MIN_SECRET_CHARS
    }
    return tuple(sorted(found, key=lambda part: (-len(part), part)))


def redact_bytes(body: bytes, secrets: Sequence[str]) -> bytes:
    """*body* with every occurrence of each secret replaced by ``[redacted]``."""
    for secret in secrets:
        body = body.replace(secret.encode(), REDACTED.encode())
    return body
