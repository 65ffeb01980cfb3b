"""The first page of a partial success's per-item errors, kept bounded and whole.

A provider's errors page (``errors_url``) may be long: a JSON list, an object holding
a list (``{"errors": [...], "total": 150, "next_url": ...}``) or JSON Lines text (one
error per line, as batch error files are). What the outcome keeps is structured data
with at most :data:`ERRORS_PAGE_ITEMS` items and at most :data:`ERRORS_PAGE_CHARS`
characters of JSON, and a count of what was left out; an item is kept whole or left
out (counted), never cut in the middle. A small page is kept as it was answered.
"""

from __future__ import annotations

import json
from typing import Final

from waitbound._base._json import JSON

__all__ = ["ERRORS_PAGE_CHARS", "ERRORS_PAGE_ITEMS", "errors_page"]

ERRORS_PAGE_ITEMS: Final = 20
"""At most this many per-item errors are kept from the first page."""

ERRORS_PAGE_CHARS: Final = 8000
"""At most this many characters of JSON are kept from the first page."""

_SMALL_CHARS: Final = 2000
"""A page this small (as JSON) is kept exactly as it was answered."""


def _size(value: JSON) -> int:
    return len(json.dumps(value, ensure_ascii=False))


def _items(items: list[JSON], budget: int) -> tuple[list[JSON], int]:
    """The first items that fit (at most :data:`ERRORS_PAGE_ITEMS`, *budget* characters
    in all): ``(kept, omitted)``; an item too large for what is left is omitted whole,
    and so is every item after it (the page's order is kept)."""
    kept: list[JSON] = []
    used = 2
    for item in items[:ERRORS_PAGE_ITEMS]:
        size = _size(item) + 1
        if used + size > budget:
            break
        kept.append(item)
        used += size
    return kept, len(items) - len(kept)


def _lines(text: str) -> list[JSON]:
    """JSON Lines text as items: each line parsed as JSON, or kept as its text."""
    found: list[JSON] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            found.append(json.loads(line))
        except ValueError:
            found.append(line)
    return found


def errors_page(body: JSON) -> JSON:
    """The first errors page *body* as the outcome keeps it.

    Returns:
        *body* itself when its JSON is at most 2,000 characters; else
        ``{"items": [...], "omitted_items": n}`` for a list or JSON Lines text, or the
        object with its longest list member cut to whole items and
        ``"omitted_items": n`` beside it (its other members kept while they fit, the
        rest counted in ``"omitted_keys"``).
    """
    if _size(body) <= _SMALL_CHARS:
        return body
    if isinstance(body, str):
        body = _lines(body)
    if isinstance(body, list):
        kept, omitted = _items(body, ERRORS_PAGE_CHARS)
        return {"items": kept, "omitted_items": omitted}
    if isinstance(body, dict):
        lists = [(k, v) for k, v in body.items() if isinstance(v, list)]
        key, items = max(lists, key=lambda kv: len(kv[1])) if lists else (None, [])
        page: dict[str, JSON] = {}
        omitted_keys = 0
        used = _SMALL_CHARS // 4  # room for the counts
        for name, value in body.items():
            if name == key:
                continue
            size = len(name) + _size(value) + 4
            if used + size > ERRORS_PAGE_CHARS // 4:
                omitted_keys += 1
                continue
            page[name] = value
            used += size
        if key is not None:
            kept, omitted = _items(items, ERRORS_PAGE_CHARS - used)
            page[key] = kept
            page["omitted_items"] = omitted
        if omitted_keys:
            page["omitted_keys"] = omitted_keys
        return page
    return body
