"""Folders for private files (a token, a store), made readable by their owner only.

``Path.mkdir(mode=0o700, parents=True)`` gives the mode to the last folder only: the
parents it makes take ``0o777`` less the umask, which under ``umask 000`` is every
user's to list and write (anyone could then swap the token file's folder). Here every
folder made is ``0o700``, whatever the umask; folders that already exist are left as
they are.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["make_private_dirs"]


def make_private_dirs(folder: Path) -> None:
    """Make *folder* and each missing parent, every one ``0o700`` (owner only).

    Raises:
        OSError: a folder cannot be made (the caller names the file in one line).
    """
    missing: list[Path] = []
    current = folder
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # another process made it first: theirs is kept
            continue
        os.chmod(path, 0o700)  # the umask may have taken bits from 0o700 too
