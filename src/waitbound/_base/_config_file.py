"""Configuration files (the MCP server's config, a worker's credentials, ``serve.toml``):
TOML read in one place, ``${NAME}`` taken from the environment, every problem one line
naming the file and the key, never a value. And :func:`read_bounded`, how every small
file waitbound is given (a config, a profile, a token) is read: a regular file only
(a FIFO would block, ``/dev/zero`` never ends), at most a known number of bytes."""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from waitbound._base._errors import UsageError

__all__ = ["MAX_CONFIG_BYTES", "NotARegularFile", "expand_env", "load_toml", "read_bounded"]

MAX_CONFIG_BYTES: Final = 1024 * 1024
"""The largest TOML configuration file read (a few tables)."""

_T = TypeVar("_T")
_ENV: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_OPEN_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
"""Opening a FIFO does not wait for a writer, nor a terminal become ours."""


class NotARegularFile(OSError):
    """The path names a folder, a FIFO, a device or a socket: nothing a file is read from
    (an ``OSError`` whose ``strerror`` says which)."""


def read_bounded(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file *path*: at most ``limit + 1`` of them, so a caller
    that gets more than *limit* knows the file is too large without reading it all.

    The file is opened without blocking and checked on the open descriptor, so a FIFO
    (which would wait for a writer), a device (``/dev/zero`` never ends) or a folder is
    refused before anything is read.

    Raises:
        NotARegularFile: it is not a regular file (``strerror``: "a FIFO, not a regular
            file", …).
        OSError: it cannot be opened or read (``FileNotFoundError`` included).
    """
    fd = os.open(path, _OPEN_FLAGS)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else None
        raise NotARegularFile(0, f"{kind or 'a device or socket'}, not a regular file", str(path))
    with os.fdopen(fd, "rb") as file:
        return file.read(limit + 1)


def load_toml(path: str | Path, what: str, parse: Callable[[dict[str, Any]], _T]) -> _T:
    """Read the TOML file *path* and hand its table to *parse*.

    Args:
        path: the file.
        what: what messages call it (``"config file"``).
        parse: builds the value; raises ``UsageError`` naming the key.

    Raises:
        UsageError: the file cannot be read (it is not a regular file, or larger than
            :data:`MAX_CONFIG_BYTES`), is not UTF-8 or TOML, or *parse* refused a value;
            the message starts with ``{what} {path}:``.
    """
    path = Path(path)
    try:
        raw = read_bounded(path, MAX_CONFIG_BYTES)
        if len(raw) > MAX_CONFIG_BYTES:
            raise UsageError(
                f"{what} {path}: larger than {MAX_CONFIG_BYTES // 1024} KiB; a configuration "
                "file is a few tables"
            )
        data = tomllib.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{what} {path}: not valid TOML ({exc})") from None
    try:
        return parse(data)
    except UsageError as exc:
        raise UsageError(f"{what} {path}: {exc}") from None


def expand_env(text: str, where: str, env: Mapping[str, str]) -> str:
    """*text* with each ``${NAME}`` replaced by the environment variable NAME.

    Raises:
        UsageError: a variable is not set (the message names *where* and the variable,
            never the value).
    """

    def expand(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable not in env:
            raise UsageError(f"{where} needs the environment variable {variable}, which is not set")
        return env[variable]

    return _ENV.sub(expand, text)
