"""Configuration files (the MCP server's config, a worker's credentials): TOML read in
one place, ``${NAME}`` taken from the environment, every problem one line naming the
file and the key, never a value."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from waitbound._errors import UsageError

__all__ = ["expand_env", "load_toml"]

_T = TypeVar("_T")
_ENV: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def load_toml(path: str | Path, what: str, parse: Callable[[dict[str, Any]], _T]) -> _T:
    """Read the TOML file *path* and hand its table to *parse*.

    Args:
        path: the file.
        what: what messages call it (``"config file"``).
        parse: builds the value; raises ``UsageError`` naming the key.

    Raises:
        UsageError: the file cannot be read, is not UTF-8 or TOML, or *parse* refused a
            value; the message starts with ``{what} {path}:``.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
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
