"""The JSON value type and canonical encoding used for records and the audit chain."""

from __future__ import annotations

import json
from typing import TypeAlias

__all__ = ["JSON", "JSONScalar", "canonical_json", "show"]

JSONScalar: TypeAlias = str | int | float | bool | None
JSON: TypeAlias = JSONScalar | list["JSON"] | dict[str, "JSON"]


def canonical_json(value: object) -> str:
    """Encode *value* as compact JSON with sorted keys (stable for hashing)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def show(value: object, limit: int = 80) -> str:
    """Render a provider's value for a message: JSON (``null``, ``"running"``), bounded."""
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
