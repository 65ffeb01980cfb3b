"""The inbox's form bodies, read under a cap before anything parses them.

Every form of the inbox is ``application/x-www-form-urlencoded`` (an HTML form's
default; WHATWG URL §5). :func:`read_form` takes nothing else (a body without a
content type is read as one): a ``multipart/form-data``
body (the only kind with file parts, which Starlette's parser would spool to disk) is a
415 unread; a body whose ``Content-Length`` is over the cap is a 413 unread; a body
streamed without a length is read only up to the cap (one chunk past it is a 413, and
the rest is never read). The bytes kept are then parsed with :func:`urllib.parse.parse_qsl`
under a field count (:data:`MAX_FORM_FIELDS`); a field given twice keeps its first value.
So an unauthenticated ``POST /sign-in`` costs at most :data:`SIGN_IN_MAX_BYTES` of memory,
and nothing touches the disk. See ``docs/serve.md``, "Limits".
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import parse_qsl

from starlette.requests import ClientDisconnect, Request

__all__ = [
    "DECIDE_MAX_BYTES",
    "MAX_FORM_FIELDS",
    "SIGN_IN_MAX_BYTES",
    "SIGN_OUT_MAX_BYTES",
    "FormRefused",
    "read_form",
]

SIGN_IN_MAX_BYTES: Final = 8_192
"""The largest ``POST /sign-in`` body read (bytes): a token, a name and a ``next`` path."""
DECIDE_MAX_BYTES: Final = 16_384
"""The largest decision form read (bytes): the reason is at most 500 characters."""
SIGN_OUT_MAX_BYTES: Final = 2_048
"""The largest ``POST /sign-out`` body read (bytes): only the CSRF token."""
MAX_FORM_FIELDS: Final = 32
"""The most fields one form may have (the decision form has about ten)."""
_FORM_TYPE: Final = "application/x-www-form-urlencoded"
_CONTENT_LENGTH: Final = re.compile(r"[0-9]{1,20}")


class FormRefused(Exception):
    """A form body that is not read: ``status`` (400, 413 or 415) and one line saying why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


async def read_form(request: Request, max_bytes: int) -> dict[str, str]:
    """The fields of *request*'s urlencoded body of at most *max_bytes* bytes.

    Raises:
        FormRefused: 415 for another content type (``multipart/form-data`` included,
            never read), 413 for a body over *max_bytes* (never read past the cap), 400
            for a body that is not UTF-8, has more than :data:`MAX_FORM_FIELDS` fields,
            or ended early.
    """
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind not in (_FORM_TYPE, ""):  # none: an empty form (a script's POST without fields)
        raise FormRefused(415, f"a form is sent as {_FORM_TYPE} (this was {kind[:60] or 'none'})")
    length = request.headers.get("content-length")
    if length is not None and (not _CONTENT_LENGTH.fullmatch(length) or int(length) > max_bytes):
        raise FormRefused(413, f"this form is at most {max_bytes} bytes")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_bytes:
                raise FormRefused(413, f"this form is at most {max_bytes} bytes")
    except ClientDisconnect:
        raise FormRefused(400, "the form's body ended early") from None
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            max_num_fields=MAX_FORM_FIELDS,
            errors="strict",  # a %-escape that is not UTF-8 (%ff) too, not U+FFFD
        )
    except (UnicodeDecodeError, ValueError):
        raise FormRefused(
            400, f"a form is UTF-8 text of at most {MAX_FORM_FIELDS} fields"
        ) from None
    fields: dict[str, str] = {}
    for key, value in pairs:
        fields.setdefault(key, value)
    return fields
