"""Built-in profiles: providers' documented contracts, shipped as data files.

Each ``NAME.json`` here is a profile in the ordinary format; ``docs/profiles/NAME.md``
cites the public documentation it follows, and ``scenarios/NAME.json`` reproduces the
documented lifecycle on the simulator (the tests run it).

``profile.schema.json`` here is the JSON Schema of the profile format
(``docs/profile-format.md``); :func:`profile_schema` returns it.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Final

from waitbound._base._errors import ProfileError
from waitbound._base._json import JSON
from waitbound._profile._contract import Profile
from waitbound._profile._contract_parse import load_profile, parse_profile

__all__ = ["SCHEMA_FILE", "builtin_names", "builtin_profile", "profile_schema", "resolve_profile"]

SCHEMA_FILE: Final = "profile.schema.json"
"""The JSON Schema's file name in this package (not a profile)."""


def profile_schema() -> dict[str, JSON]:
    """Return the JSON Schema (draft 2020-12) of the profile format, parsed.

    It is the ``profile.schema.json`` file shipped in the ``waitbound.profiles``
    package; each call returns a fresh copy. :func:`waitbound.parse_profile` accepts
    everything the schema accepts and checks more (no value in two state lists,
    every expression compiles). See ``docs/profile-format.md``.
    """
    text = resources.files(__name__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, JSON] = json.loads(text)
    return schema


def builtin_names() -> list[str]:
    """The names of the built-in profiles, sorted."""
    folder = resources.files(__name__)
    return sorted(
        entry.name.removesuffix(".json")
        for entry in folder.iterdir()
        if entry.name.endswith(".json") and entry.name != SCHEMA_FILE
    )


def builtin_profile(name: str) -> Profile:
    """Load the built-in profile *name*.

    Raises:
        ProfileError: there is no built-in profile of that name (the message lists them).
    """
    if name not in builtin_names():
        raise ProfileError(
            f"no built-in profile named {name!r} (built-in: {', '.join(builtin_names())})"
        )
    text = resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8")
    return parse_profile(json.loads(text), name=name)


def resolve_profile(spec: str | Path) -> Profile:
    """A profile from a file path (JSON or TOML) or a built-in name.

    Raises:
        ProfileError: neither a readable profile file nor a built-in name.
    """
    path = Path(spec)
    if path.suffix.lower() in (".json", ".toml") or path.exists():
        return load_profile(path)
    return builtin_profile(str(spec))
