"""The service's token file (``serve``, ``mcp --transport http``, ``watch``): where it
lives, reading it, making one, and the host check that goes with it. Imports nothing of
the other commands, so each command that needs the token takes it from here.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Final

import click
import platformdirs

from waitbound._base._config_file import read_bounded
from waitbound._base._errors import UsageError
from waitbound._base._private_dirs import make_private_dirs

if TYPE_CHECKING:
    from waitbound.web._tokens import Holder

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "TOKEN_FILE_HELP",
    "default_token_file",
    "is_loopback",
    "read_holders",
    "read_or_create_token",
    "read_token",
    "tokens_of",
    "warn_if_readable",
]

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
TOKEN_FILE_HELP: Final = (
    "File holding the service's bearer token [default: the user config directory's "
    "waitbound/serve-token]."
)
_MAX_TOKEN_FILE_BYTES: Final = 4096
_MIN_TOKEN_CHARS: Final = 16
_TOKEN: Final = re.compile(r"[A-Za-z0-9._~+/-]+=*")
"""RFC 6750 §2.1 ``b64token``: what an ``Authorization: Bearer`` value may be."""


def default_token_file() -> Path:
    """Where the token lives unless ``--token-file`` says: the user config directory's
    ``waitbound/serve-token`` (``platformdirs``)."""
    return platformdirs.user_config_path("waitbound") / "serve-token"


def read_token(path: Path) -> str:
    """The token in *path*: its text without surrounding whitespace.

    Raises:
        UsageError: the file is missing, unreadable, not a regular file (a FIFO would
            block), too large, empty, or holds something that is not one bearer token
            (never quoted).
    """
    try:
        raw = read_bounded(path, _MAX_TOKEN_FILE_BYTES)
    except FileNotFoundError:
        raise UsageError(
            f"token file {path} does not exist; start `waitbound serve` once to create it, "
            "or give --token-file"
        ) from None
    except OSError as exc:
        raise UsageError(f"token file {path} cannot be read ({exc.strerror or exc})") from None
    if len(raw) > _MAX_TOKEN_FILE_BYTES:
        raise UsageError(f"token file {path} is larger than {_MAX_TOKEN_FILE_BYTES} bytes")
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        token = "\x00"
    if not token:
        raise UsageError(f"token file {path} is empty; put a token in it or delete it")
    if not _TOKEN.fullmatch(token) or len(token) < _MIN_TOKEN_CHARS:
        raise UsageError(
            f"token file {path} does not hold one bearer token (at least {_MIN_TOKEN_CHARS} "
            "of A-Z a-z 0-9 - . _ ~ + /, on one line): give a file holding only your own "
            "token, not a file of named tokens"
        )
    return token


def read_or_create_token(path: Path) -> tuple[str, bool]:
    """The token in *path*; when there is no such file, a new one
    (``secrets.token_urlsafe(32)``) written there with mode 0600 (its folder 0700).

    Returns:
        The token, and whether it was created now.

    Raises:
        UsageError: as :func:`read_token`, or the file cannot be created.
    """
    if path.exists() or path.is_symlink():
        return read_token(path), False
    token = secrets.token_urlsafe(32)
    try:
        make_private_dirs(path.parent)
    except OSError as exc:
        raise UsageError(f"token file {path} cannot be created ({exc.strerror or exc})") from None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return read_token(path), False
    except OSError as exc:
        raise UsageError(f"token file {path} cannot be created ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(token + "\n")
            file.flush()
            os.fsync(file.fileno())
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise UsageError(f"token file {path} cannot be written ({exc.strerror or exc})") from None
    return token, True


def _loose_mode(path: Path) -> int | None:
    """The file's mode when group or others may read it, else ``None``."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None
    return mode if mode & 0o077 else None


def is_loopback(host: str) -> bool:
    """Whether *host* names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_holders(path: Path) -> tuple[Holder, ...]:
    """The tokens of a token file: one token (the shared one, an ``admin``), or lines of
    ``NAME ROLE TOKEN`` (see ``waitbound.web._tokens`` and ``docs/serve.md``).

    Raises:
        UsageError: as :func:`read_token`; or a line that is not a token nor
            ``NAME ROLE TOKEN`` (one line naming the file and line, never a token).
    """
    from waitbound.web._tokens import parse_tokens

    try:
        raw = read_bounded(path, _MAX_TOKEN_FILE_BYTES * 16)
    except FileNotFoundError:
        raise UsageError(f"token file {path} does not exist") from None
    except OSError as exc:
        raise UsageError(f"token file {path} cannot be read ({exc.strerror or exc})") from None
    if len(raw) > _MAX_TOKEN_FILE_BYTES * 16:
        raise UsageError(f"token file {path} is larger than {_MAX_TOKEN_FILE_BYTES * 16} bytes")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise UsageError(f"token file {path} is not ASCII text") from None
    return parse_tokens(text, f"token file {path}")


def warn_if_readable(path: Path, what: str) -> None:
    """Warn (stderr) when *path* may be read by group or others: it holds secrets."""
    if (mode := _loose_mode(path)) is not None:
        click.echo(
            f"waitbound: warning: {what} {path} can be read by other users "
            f"(mode {mode:04o}); chmod 600 it",
            err=True,
        )


def tokens_of(path: Path) -> tuple[str, tuple[Holder, ...]]:
    """The service's tokens (and the shared one, or the first): a new shared token is
    made and printed once when the file does not exist; a token file others may read is
    warned about."""
    from waitbound.web._tokens import ADMIN, Holder

    if not path.exists() and not path.is_symlink():
        token, created = read_or_create_token(path)
        if created:
            click.echo(f"a new token was written to {path}: {token}")
            return token, (Holder(name=None, role=ADMIN, token=token),)
    holders = read_holders(path)
    warn_if_readable(path, "token file")
    shared = next((h for h in holders if h.shared), holders[0])
    return shared.token, holders
