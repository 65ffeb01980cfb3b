"""Credentials kept out of everything waitbound stores or shows.

The caller's header values are credentials. Whatever a provider says that waitbound
keeps (a body, a kept header such as ``Retry-After`` or ``X-Request-Id``, a request
id) has each of them replaced by ``[redacted]`` before an observation is built, so an
echo never reaches a record, the audit log or a tool answer. One rule, three shapes:
:func:`redact_text` for text, :func:`redact_bytes` for a raw body, and
:func:`waitbound._json.redact_json` for a decoded JSON value (every string and key).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

__all__ = [
    "MIN_SECRET_CHARS",
    "REDACTED",
    "redact_bytes",
    "redact_headers",
    "redact_text",
    "secret_parts",
]

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


def redact_text(text: str, secrets: Sequence[str]) -> str:
    """*text* with every occurrence of each secret replaced by ``[redacted]``.

    Args:
        text: anything a provider said (a header value, a decoded string).
        secrets: the strings to hide, longest first (see :func:`secret_parts`).
    """
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_bytes(body: bytes, secrets: Sequence[str]) -> bytes:
    """*body* with every occurrence of each secret (UTF-8) replaced by ``[redacted]``."""
    for secret in secrets:
        body = body.replace(secret.encode("utf-8", "surrogatepass"), REDACTED.encode())
    return body


def redact_headers(headers: Mapping[str, str], secrets: Sequence[str]) -> dict[str, str]:
    """*headers* with each value redacted by :func:`redact_text` (names unchanged)."""
    return {name: redact_text(value, secrets) for name, value in headers.items()}
