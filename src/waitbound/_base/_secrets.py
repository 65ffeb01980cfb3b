"""Credentials kept out of everything waitbound stores or shows.

The values of the caller's credential headers (:func:`is_credential`: ``Authorization``,
``Cookie``, ``X-Api-Key`` and the like) are secrets; other headers (``Api-Version``,
``Accept-Language``) are not, so an echo of them is kept as it is and a URL that carries
one is polled as the provider gave it. Whatever a provider says that waitbound
keeps (a body, a kept header such as ``Retry-After`` or ``X-Request-Id``, a request
id) has each of them replaced by ``[redacted]`` before an observation is built, so an
echo never reaches a record, the audit log or a tool answer. One rule, three shapes:
:func:`redact_text` for text, :func:`redact_bytes` for a raw body, and
:func:`waitbound._base._json.redact_json` for a decoded JSON value (every string and key).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

__all__ = [
    "MIN_SECRET_CHARS",
    "REDACTED",
    "credential_values",
    "is_credential",
    "redact_bytes",
    "redact_headers",
    "redact_text",
    "secret_parts",
]

MIN_SECRET_CHARS: Final = 8
"""Shorter values are not redacted: they would match ordinary text."""

REDACTED: Final = "[redacted]"

_CREDENTIAL_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie"}
)
_CREDENTIAL_WORDS: Final = re.compile(
    r"key|token|secret|auth|signature|password|session|credential|private", re.IGNORECASE
)
_NOT_CREDENTIALS: Final = frozenset({"idempotency-key"})
"""Names with a credential word that name no credential (a request's own identity)."""


def is_credential(name: str) -> bool:
    """Whether a header named *name* carries a credential: ``Authorization``,
    ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie``, or any name containing
    ``key``, ``token``, ``secret``, ``auth``, ``signature``, ``password``, ``session``,
    ``credential`` or ``private`` (case-insensitive) — but not ``Idempotency-Key``."""
    lowered = name.lower()
    return lowered in _CREDENTIAL_HEADERS or (
        bool(_CREDENTIAL_WORDS.search(name)) and lowered not in _NOT_CREDENTIALS
    )


def credential_values(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The secrets among the caller's *headers*: :func:`secret_parts` of the values of
    its credential headers only."""
    return secret_parts(value for name, value in headers.items() if is_credential(name))


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
