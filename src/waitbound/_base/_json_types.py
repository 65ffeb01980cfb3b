"""The JSON value type, in a module that imports nothing: what a module needs that only
names JSON values in its signatures, without the parsing and redaction of
:mod:`waitbound._base._json` (which re-exports both names)."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSON", "JSONScalar"]

JSONScalar: TypeAlias = str | int | float | bool | None
JSON: TypeAlias = JSONScalar | list["JSON"] | dict[str, "JSON"]
