"""The package's version (``waitbound.__version__``), in a module that imports nothing,
so a front can name it without importing the whole package."""

from __future__ import annotations

from typing import Final

__all__ = ["VERSION"]

VERSION: Final = "0.1.0"
"""The release, as in ``pyproject.toml``."""
