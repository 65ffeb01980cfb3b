"""When to look again: backoff with jitter, and provider hints.

Backoff (local): ``raw = min(max_delay, base_delay * 2**attempt)``, the delay drawn
uniformly from ``[0.5 * raw, raw]``. The exponent is clamped, so attempt 10,000 gives
the cap and never overflows.

Hints (provider): read from every response in this precedence, the first valid one
winning:

1. ``retry-after-ms``, then ``x-ms-retry-after-ms`` (milliseconds);
2. ``Retry-After`` (RFC 9110 §10.2.3: delay-seconds, or an HTTP-date per §5.6.7);
3. the profile's ``hint_headers`` (seconds or milliseconds, as declared);
4. the body's ``poll_hint`` / ``poll_hint_ms`` (seconds / milliseconds);
5. the body's ``next_check_at`` (RFC 3339).

A valid hint is a minimum: the next request waits at least that long, with only an
upward jitter of at most ``hint_jitter`` (10 %) so a fleet told "120" does not come
back in one wave. An unparsable or negative hint is ignored and reported as an
:class:`InvalidHint`; the next one in precedence (or local backoff) applies.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from functools import partial
from typing import Final

from waitbound._contract import Profile, Reading, parse_rfc3339

__all__ = [
    "DelaySource",
    "Hint",
    "InvalidHint",
    "backoff_delay_s",
    "backoff_raw_s",
    "hinted_delay_s",
    "parse_retry_after",
    "read_hints",
]

_DELAY_SECONDS: Final = re.compile(r"[0-9]+")
_DECIMAL: Final = re.compile(r"[0-9]+(?:\.[0-9]+)?")
MAX_HINT_S: Final = 366 * 24 * 3600.0
"""A hint longer than a year is read as a year: past any deadline, never an overflow."""
_MS_HEADERS: Final = ("retry-after-ms", "x-ms-retry-after-ms")


class DelaySource(StrEnum):
    """Why the next request is when it is."""

    PROVIDER_RETRY_AFTER = "provider_retry_after"
    PROVIDER_POLL_HINT = "provider_poll_hint"
    LOCAL_BACKOFF = "local_backoff"
    MANUAL_EXTENSION = "manual_extension"


@dataclass(frozen=True, slots=True, kw_only=True)
class Hint:
    """A valid provider hint: wait at least ``delay_s`` seconds (``>= 0``)."""

    delay_s: float
    source: DelaySource
    origin: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidHint:
    """A hint that could not be used; recorded, then ignored."""

    origin: str
    value: str
    problem: str


def backoff_raw_s(attempt: int, *, base_delay_s: float, max_delay_s: float) -> float:
    """Return the un-jittered backoff in seconds: ``min(max_delay, base * 2**attempt)``.

    Never overflows: a large *attempt* gives *max_delay_s*.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    if base_delay_s <= 0:
        return 0.0
    if max_delay_s <= base_delay_s or attempt >= math.log2(max_delay_s / base_delay_s):
        return max_delay_s
    return min(max_delay_s, base_delay_s * 2.0**attempt)


def backoff_delay_s(
    attempt: int, *, base_delay_s: float, max_delay_s: float, rng: random.Random
) -> float:
    """Return a jittered backoff in seconds, uniform in ``[0.5 * raw, raw]``."""
    raw = backoff_raw_s(attempt, base_delay_s=base_delay_s, max_delay_s=max_delay_s)
    return rng.uniform(0.5 * raw, raw)


def hinted_delay_s(hint_s: float, *, jitter: float, rng: random.Random) -> float:
    """Return a hint's delay with upward-only jitter: uniform in ``[hint, hint * (1 + jitter)]``."""
    return hint_s * (1.0 + rng.uniform(0.0, jitter))


def parse_retry_after(value: str, *, now: datetime) -> float:
    """Parse a ``Retry-After`` value into seconds from *now* (RFC 9110 §10.2.3).

    Accepts delay-seconds (``1*DIGIT``) or an HTTP-date (IMF-fixdate, or the obsolete
    forms RFC 9110 §5.6.7 asks recipients to accept). A date in the past gives 0.

    Raises:
        ValueError: the value is neither form (e.g. ``"1000abc"``, ``"soon"``, ``"-5"``).
    """
    text = value.strip()
    if _DELAY_SECONDS.fullmatch(text):
        return min(float(text), MAX_HINT_S)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        raise ValueError("neither delay-seconds nor an HTTP-date") from None
    if when.tzinfo is None:
        raise ValueError("an HTTP-date must be in GMT")
    return max(0.0, (when - now).total_seconds())


def _seconds(value: object, *, scale: float) -> float:
    """A hint's number times *scale*, in seconds; beyond a year reads as a year.

    Raises:
        ValueError: not a non-negative number (a string must be plain digits).
    """
    number: int | float
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number of seconds")
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value.strip()):
            raise ValueError("not a plain non-negative number")
        number = float(value.strip())
    elif isinstance(value, int | float):
        number = value
    else:
        raise ValueError("not a number")
    if isinstance(number, float) and math.isnan(number):
        raise ValueError("not a number")
    if number < 0:
        raise ValueError("negative")
    if number >= MAX_HINT_S / scale:  # exact for huge integers; no float overflow
        return MAX_HINT_S
    return number * scale


def read_hints(
    headers: Mapping[str, str],
    reading: Reading | None,
    profile: Profile,
    *,
    now: datetime,
) -> tuple[Hint | None, tuple[InvalidHint, ...]]:
    """Pick the first valid hint in precedence order; report every invalid one seen before it.

    Args:
        headers: response headers, names lower-cased.
        reading: what the profile read from the body, or ``None`` without a JSON body.
        profile: supplies ``hint_headers``.
        now: the observation time, for HTTP-date and ``next_check_at`` hints.

    Returns:
        ``(hint or None, invalid hints)``.
    """
    ms = partial(_seconds, scale=0.001)
    candidates: list[tuple[str, object, DelaySource, Callable[[object], float]]] = [
        (f"{name} header", headers[name], DelaySource.PROVIDER_RETRY_AFTER, ms)
        for name in _MS_HEADERS
        if name in headers
    ]
    if "retry-after" in headers:
        candidates.append(
            (
                "Retry-After header",
                headers["retry-after"],
                DelaySource.PROVIDER_RETRY_AFTER,
                lambda v: parse_retry_after(str(v), now=now),
            )
        )
    candidates.extend(
        (
            f"{name} header",
            headers[name],
            DelaySource.PROVIDER_POLL_HINT,
            partial(_seconds, scale=scale),
        )
        for name, scale in profile.hint_headers
        if name in headers
    )
    if reading is not None and reading.poll_hint_s is not None:
        candidates.append(
            (
                "body poll_hint",
                reading.poll_hint_s,
                DelaySource.PROVIDER_POLL_HINT,
                partial(_seconds, scale=1.0),
            )
        )
    elif reading is not None and reading.poll_hint_ms is not None:
        candidates.append(
            ("body poll_hint_ms", reading.poll_hint_ms, DelaySource.PROVIDER_POLL_HINT, ms)
        )
    if reading is not None and reading.next_check_at is not None:
        candidates.append(
            (
                "body next_check_at",
                reading.next_check_at,
                DelaySource.PROVIDER_POLL_HINT,
                partial(_until, now=now),
            )
        )
    invalid: list[InvalidHint] = []
    for origin, raw, source, parse in candidates:
        try:
            delay = parse(raw)
        except (ValueError, OverflowError) as exc:
            invalid.append(InvalidHint(origin=origin, value=str(raw)[:80], problem=str(exc)))
            continue
        delay = min(delay, MAX_HINT_S)
        return Hint(delay_s=delay, source=source, origin=origin), tuple(invalid)
    return None, tuple(invalid)


def _until(value: object, *, now: datetime) -> float:
    when = parse_rfc3339(value)
    if when is None:
        raise ValueError("not an RFC 3339 time with a zone")
    return max(0.0, (when - now).total_seconds())
