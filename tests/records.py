"""A test's shorthand for changing a record by its flat field names.

Tests often set a few fields of a record in one call (``make_record(label="x",
created_at=t)``); :func:`with_fields` groups those names by the part each lives in and
makes the change the one way a record changes (:meth:`Record.evolve` with whole parts,
each part changed by its own :meth:`~waitbound._model._record_parts.Part.evolve`).
The library itself takes no flat name (see ``waitbound._model._record``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from waitbound import Record
from waitbound._model._record_parts import PARTS

_PART_OF: Final = {
    item.name: attr
    for attr, kind in PARTS
    if attr != "push"
    for item in dataclasses.fields(kind)  # type: ignore[arg-type]
}
"""Each field of each part (but ``push``'s): the attribute of its part."""


def with_fields(record: Record, **fields: Any) -> Record:
    """*record* with *fields* changed: flat field names, whole parts or ``version``.

    Raises:
        TypeError: a name is none of these.
    """
    grouped: dict[str, dict[str, Any]] = {}
    whole: dict[str, Any] = {}
    for name, value in fields.items():
        part = _PART_OF.get(name)
        if part is None:
            whole[name] = value
        else:
            grouped.setdefault(part, {})[name] = value
    parts = {part: getattr(record, part).evolve(**values) for part, values in grouped.items()}
    return record.evolve(**whole, **parts)
