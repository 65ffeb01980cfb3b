"""The times a provider's body gives (``expires_at``, ``next_check_at``), read in a
profile's ``time_format``; a module that imports nothing of the package, so the
schedule formula and the profile both read times the same way."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["parse_rfc3339", "parse_time"]


def parse_rfc3339(value: object) -> datetime | None:
    """Parse an RFC 3339 time with a zone offset (``Z`` allowed); ``None`` if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def parse_time(value: object, time_format: str) -> datetime | None:
    """Parse a body time in *time_format*; ``None`` if it is not one.

    ``rfc3339``: see :func:`parse_rfc3339`. ``epoch_s``: a non-negative JSON number of
    seconds since 1970-01-01T00:00:00Z (OpenAI's Batch times), aware UTC.
    """
    if time_format != "epoch_s":
        return parse_rfc3339(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None
