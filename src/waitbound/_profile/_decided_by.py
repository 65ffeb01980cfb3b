"""``decided_by``: a profile's field that decides before the state does.

Some contracts say which field to branch on: the next-action receipt contract says to
branch on ``next_action`` (``poll_status`` keep waiting, ``retry_later`` the run was
skipped, ``none`` terminal), not on the status string. The profile key ``decided_by``
names that field and its values; the state lists then only say *how* a terminal answer
ended. The rules are stated in ``docs/profile-format.md`` ("decided_by").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from waitbound._base._errors import ProfileError
from waitbound._base._jmes import Expression, compile_expression, search
from waitbound._base._json import JSON
from waitbound._profile._sections import checked_section

__all__ = ["DECIDED_BY_KEYS", "DecidedBy", "Verdict", "parse_decided_by"]

DECIDED_BY_KEYS: Final = frozenset(("field", "pending", "skipped", "terminal"))


class Verdict(StrEnum):
    """What the deciding field says of one answer."""

    ABSENT = "absent"
    """The field is absent (null): the state decides alone."""
    PENDING = "pending"
    """Keep waiting, whatever the state says."""
    SKIPPED = "skipped"
    """The run was skipped (outcome ``canceled``, reason ``skipped``)."""
    TERMINAL = "terminal"
    """The run is over; the state says how it ended."""
    UNKNOWN = "unknown"
    """A value in none of the lists: not guessed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DecidedBy:
    """The deciding field and its values (each value in one list only).

    Attributes:
        field: the expression giving the deciding value.
        pending, skipped, terminal: the values meaning keep waiting, skipped, over.
    """

    field: Expression
    pending: frozenset[str]
    skipped: frozenset[str]
    terminal: frozenset[str]

    def value(self, body: JSON) -> JSON:
        """The deciding value in *body* (``None`` when absent)."""
        return search(self.field, body)

    def verdict(self, value: JSON) -> Verdict:
        """What *value* (from :meth:`value`) decides."""
        if value is None:
            return Verdict.ABSENT
        if not isinstance(value, str):
            return Verdict.UNKNOWN
        for verdict, values in (
            (Verdict.PENDING, self.pending),
            (Verdict.SKIPPED, self.skipped),
            (Verdict.TERMINAL, self.terminal),
        ):
            if value in values:
                return verdict
        return Verdict.UNKNOWN


def parse_decided_by(where: str, data: object) -> DecidedBy | None:
    """Validate ``decided_by``: ``{"field": expr, "pending": [...], "skipped": [...],
    "terminal": [...]}``; ``field`` and ``terminal`` are required, every value is a
    non-empty string in one list only.

    Raises:
        ProfileError: a missing or unknown key, a value of the wrong type, a value in
            two lists, or a field expression that does not compile.
    """
    if data is None:
        return None
    section: Mapping[str, object] = checked_section(where, "decided_by", data, DECIDED_BY_KEYS)
    for required in ("field", "terminal"):
        if required not in section:
            raise ProfileError(f"{where}: decided_by needs {required!r}")
    lists: dict[str, frozenset[str]] = {}
    seen: dict[str, str] = {}
    for name in ("pending", "skipped", "terminal"):
        values = section.get(name, [])
        if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
            raise ProfileError(f"{where}: decided_by.{name} must be a list of strings")
        for value in values:
            if value in seen:
                raise ProfileError(
                    f"{where}: decided_by value {value!r} is in both {seen[value]} and {name}"
                )
            seen[value] = name
        lists[name] = frozenset(values)
    return DecidedBy(
        field=compile_expression(where, "decided_by.field", section["field"]),
        pending=lists["pending"],
        skipped=lists["skipped"],
        terminal=lists["terminal"],
    )
