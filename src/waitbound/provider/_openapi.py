"""The OpenAPI 3.1 description of the provider kit's endpoints, shipped as
``waitbound/provider/openapi.json`` and served at ``GET /openapi.json``."""

from __future__ import annotations

import json
from importlib import resources
from typing import Final

from waitbound._base._json import JSON

__all__ = ["OPENAPI_FILE", "openapi_document"]

OPENAPI_FILE: Final = "openapi.json"
"""The document's file name in the ``waitbound.provider`` package."""


def openapi_document() -> dict[str, JSON]:
    """Return the OpenAPI 3.1 document of the endpoints, parsed (a fresh copy each call)."""
    text = resources.files("waitbound.provider").joinpath(OPENAPI_FILE).read_text("utf-8")
    document: dict[str, JSON] = json.loads(text)
    return document
