"""Throttling a provider says with headers: which answers mean "slow down", and for how long.

A profile's ``throttle`` object names the HTTP statuses a provider throttles with
(GitHub: 403 and 429), the headers that make such an answer a throttle rather than a
refusal (``x-ratelimit-remaining: 0``, a ``retry-after``), the headers that say when
the limit resets (read as hints only on a throttled answer) and the documented wait
when no header says one. It is checked before the 401/403 rule, so a rate limit is
never taken for a credentials problem. The rules are stated in ``docs/waiting.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from waitbound._base._errors import ProfileError
from waitbound._profile._sections import checked_section

__all__ = ["HINT_UNITS", "Throttle", "parse_throttle"]

HINT_UNITS: Final = ("s", "ms", "epoch_s")
"""How a hint header's number is read: seconds, milliseconds, or a Unix time (seconds)."""
_KEYS: Final = ("statuses", "when_headers", "reset_headers", "default_delay_s")
_HEADER_KEYS: Final = ("header", "equals")
_MAX_DEFAULT_S: Final = 86400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Throttle:
    """When an answer is a throttle, and which headers then say how long to wait.

    Attributes:
        statuses: the HTTP statuses the provider throttles with (429 unless given).
        when_headers: ``(header, value or None)``: an answer with one of *statuses*
            is throttled when it carries one of these headers (with exactly that value,
            when one is given). Empty: the status alone is a throttle.
        reset_headers: ``(header, unit)`` hints read only on a throttled answer.
        default_delay_s: seconds to wait when a throttled answer names no wait, or
            ``None`` (local throttle backoff).
    """

    statuses: frozenset[int]
    when_headers: tuple[tuple[str, str | None], ...] = ()
    reset_headers: tuple[tuple[str, str], ...] = ()
    default_delay_s: float | None = None

    def matches(
        self, status: int, headers: Mapping[str, str], *, body_throttled: bool = False
    ) -> bool:
        """Tell whether an answer is throttled by this rule.

        Args:
            status: the HTTP status.
            headers: the kept response headers, names lower-case.
            body_throttled: the body matched the profile's ``throttled`` expression
                (GitHub's secondary limits say so only in the message).
        """
        if status not in self.statuses:
            return False
        if not self.when_headers or body_throttled:
            return True
        return any(
            name in headers and (value is None or headers[name].strip() == value)
            for name, value in self.when_headers
        )

    @property
    def header_names(self) -> tuple[str, ...]:
        """Every header this rule reads (lower-case): an observation must keep them."""
        return (*(name for name, _ in self.when_headers), *(n for n, _ in self.reset_headers))


def parse_throttle(where: str, data: object) -> Throttle | None:
    """Validate a profile's ``throttle`` object (``None`` when absent).

    Raises:
        ProfileError: one line naming the key that is wrong.
    """
    if data is None:
        return None
    data = checked_section(where, "throttle", data, _KEYS)
    statuses = data.get("statuses", [429])
    if (
        not isinstance(statuses, list)
        or not statuses
        or not all(type(s) is int and 400 <= s <= 599 for s in statuses)
    ):
        raise ProfileError(
            f"{where}: throttle.statuses must be a non-empty list of HTTP statuses 400-599"
        )
    default = data.get("default_delay_s")
    if default is not None and (
        isinstance(default, bool)
        or not isinstance(default, int | float)
        or not math.isfinite(default)
        or not 0 < default <= _MAX_DEFAULT_S
    ):
        raise ProfileError(
            f"{where}: throttle.default_delay_s must be seconds, above 0 and at most 86400"
        )
    return Throttle(
        statuses=frozenset(statuses),
        when_headers=_when_headers(where, data.get("when_headers")),
        reset_headers=parse_hint_headers(
            where, data.get("reset_headers"), "throttle.reset_headers"
        ),
        default_delay_s=float(default) if default is not None else None,
    )


def _when_headers(where: str, items: object) -> tuple[tuple[str, str | None], ...]:
    if items is None:
        return ()
    what = f"{where}: throttle.when_headers"
    if not isinstance(items, list):
        raise ProfileError(f"{what} must be a list of {{'header': NAME, 'equals': VALUE}}")
    parsed: list[tuple[str, str | None]] = []
    for index, raw in enumerate(items):
        item = checked_section(where, f"throttle.when_headers[{index}]", raw, _HEADER_KEYS)
        name, value = item.get("header"), item.get("equals")
        if not isinstance(name, str) or not name:
            raise ProfileError(f"{what}[{index}] needs a header (a header name)")
        if value is not None and not isinstance(value, str):
            raise ProfileError(f"{what}[{name!r}].equals must be a string (a header's text)")
        parsed.append((name.lower(), value))
    return tuple(parsed)


def parse_hint_headers(where: str, table: object, key: str) -> tuple[tuple[str, str], ...]:
    """Validate a map of header name to unit (``hint_headers``, ``throttle.reset_headers``).

    Raises:
        ProfileError: not an object, or a unit that is none of :data:`HINT_UNITS`.
    """
    if table is None:
        return ()
    units = ", ".join(repr(u) for u in HINT_UNITS[:-1]) + f" or {HINT_UNITS[-1]!r}"
    if not isinstance(table, Mapping):
        raise ProfileError(f"{where}: {key} must map header names to {units}")
    parsed = []
    for header, unit in table.items():
        if not str(header):
            raise ProfileError(f"{where}: {key} has an empty header name")
        if not isinstance(unit, str) or unit not in HINT_UNITS:
            raise ProfileError(f"{where}: {key}[{header!r}] = {unit!r}; expected {units}")
        parsed.append((str(header).lower(), unit))
    return tuple(parsed)
