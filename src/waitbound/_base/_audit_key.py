"""The audit key: where it is read from, and what makes one usable.

The key authenticates every chain head (``Record.audit_mac``, an HMAC-SHA256), so it
must be kept **outside** the store: whoever can rewrite the store's rows must not be
able to read it. It is read in one place, :func:`load_audit_key`, from
``$WAITBOUND_AUDIT_KEY_FILE`` (a file holding the key) or ``$WAITBOUND_AUDIT_KEY`` (the
key itself); :func:`waitbound.open_store` calls it, so every writer that opens its
store by spec (the CLI, the worker, the MCP server, ``waitbound.wait`` without a
store) signs heads with the same key without any code of its own. The key is kept in
the store object's memory only: never stored, logged or shown in a message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from waitbound._base._errors import UsageError

__all__ = ["AUDIT_KEY_ENV", "AUDIT_KEY_FILE_ENV", "MIN_AUDIT_KEY_BYTES", "load_audit_key"]

AUDIT_KEY_ENV: Final = "WAITBOUND_AUDIT_KEY"
AUDIT_KEY_FILE_ENV: Final = "WAITBOUND_AUDIT_KEY_FILE"
MIN_AUDIT_KEY_BYTES: Final = 16
"""A shorter key is refused: it could be guessed."""

_MAX_KEY_FILE_BYTES: Final = 64 * 1024


def load_audit_key(
    key_file: str | Path | None = None, *, environ: Mapping[str, str] | None = None
) -> bytes | None:
    """Read the audit key: from *key_file*, else ``$WAITBOUND_AUDIT_KEY_FILE``, else
    ``$WAITBOUND_AUDIT_KEY`` (its UTF-8 bytes).

    A key file holds the key's bytes; one trailing newline (``\\n`` or ``\\r\\n``) is not
    part of the key. Either way the key must be at least :data:`MIN_AUDIT_KEY_BYTES`
    bytes (e.g. ``openssl rand -hex 32 > audit.key``).

    Args:
        key_file: a file named on the command line (``--audit-key-file``); it wins
            over the environment.
        environ: the environment to read; ``None`` means ``os.environ``.

    Returns:
        The key, or ``None`` when none is configured (heads are then not signed).

    Raises:
        UsageError: both variables are set, the file cannot be read or is not a
            regular file, or the key is shorter than 16 bytes. The message never
            contains the key.
    """
    env = os.environ if environ is None else environ
    if key_file is not None:
        return _from_file(Path(key_file), "--audit-key-file")
    named_file, inline = env.get(AUDIT_KEY_FILE_ENV), env.get(AUDIT_KEY_ENV)
    if named_file and inline:
        raise UsageError(
            f"both {AUDIT_KEY_FILE_ENV} and {AUDIT_KEY_ENV} are set; set only one of them"
        )
    if named_file:
        return _from_file(Path(named_file), AUDIT_KEY_FILE_ENV)
    if inline:
        return _checked(inline.encode("utf-8", "surrogateescape"), AUDIT_KEY_ENV)
    return None


def _from_file(path: Path, source: str) -> bytes:
    try:
        if not path.is_file():
            why = "is a folder" if path.is_dir() else "does not exist"
            raise UsageError(
                f"audit key file {path} ({source}) {why}; name the file holding the key"
            )
        with path.open("rb") as handle:
            raw = handle.read(_MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise UsageError(
            f"audit key file {path} ({source}) cannot be read ({exc.strerror or exc}); "
            "check its permissions"
        ) from None
    if len(raw) > _MAX_KEY_FILE_BYTES:
        raise UsageError(
            f"audit key file {path} ({source}) is larger than {_MAX_KEY_FILE_BYTES} bytes; "
            "it should hold only the key"
        )
    if raw.endswith(b"\r\n"):
        raw = raw[:-2]
    elif raw.endswith(b"\n"):
        raw = raw[:-1]
    return _checked(raw, f"audit key file {path}")


def _checked(key: bytes, source: str) -> bytes:
    if len(key) < MIN_AUDIT_KEY_BYTES:
        raise UsageError(
            f"the audit key from {source} is {len(key)} bytes; it must be at least "
            f"{MIN_AUDIT_KEY_BYTES} (make one with: openssl rand -hex 32)"
        )
    return key
