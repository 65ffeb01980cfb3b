"""When to look again: backoff with jitter, and provider hints.

Backoff (local): ``raw = min(max_delay, base_delay * growth**attempt)``, the delay drawn
uniformly from ``[jitter_floor * raw, raw]`` (defaults: growth 1.5, jitter floor 0.8,
base 5 s, cap 60 s; see the ``DEFAULT_*`` constants). The exponent is clamped, so attempt
10,000 gives the cap and never overflows. While webhooks are expected (``Record.push.webhook``), the
status polls' base and cap are both multiplied by ``policy.backup_factor`` (the backup
schedule, :attr:`DelaySource.BACKUP_POLLING`); see :func:`backoff_bounds_s`.

Hints (provider): read from every response in this precedence, the first valid one
winning:

1. ``retry-after-ms``, then ``x-ms-retry-after-ms`` (milliseconds);
2. ``Retry-After`` (RFC 9110 §10.2.3: delay-seconds, decimals accepted, or an
   HTTP-date in any §5.6.7 form; a header sent twice, joined as ``"2, 30"``, gives
   its largest valid value);
3. the profile's ``hint_headers`` (seconds, milliseconds or a Unix time, as declared);
4. on a throttled answer only, the profile's ``throttle.reset_headers`` (same units);
5. the body's ``poll_hint`` / ``poll_hint_ms`` (seconds / milliseconds);
6. the body's ``next_check_at`` (in the profile's ``time_format``);
7. on a throttled answer with none of them, the profile's ``throttle.default_delay_s``.

A valid hint at or above the floor is a minimum: the next request waits at least that
long, with only an upward jitter of at most ``hint_jitter`` (10 %) of the hint and at
most ``hint_jitter_max_s`` (1 s), see :func:`hinted_delay_s`. A hint below the floor
(zero included) imposes no minimum beyond itself: local backoff applies, its attempt
counter going on. An unparsable or negative hint is ignored and reported as an
:class:`InvalidHint`; the next one in precedence (or local backoff) applies.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from functools import partial
from typing import Final, Protocol

from waitbound._base._json_types import JSON
from waitbound._profile._times import parse_time

__all__ = [
    "DEFAULT_BACKOFF_GROWTH",
    "DEFAULT_BACKOFF_JITTER_FLOOR",
    "DEFAULT_BASE_DELAY_S",
    "DEFAULT_HINT_JITTER",
    "DEFAULT_HINT_JITTER_MAX_S",
    "DEFAULT_MAX_DELAY_S",
    "BodyHints",
    "DelaySource",
    "Hint",
    "HintRules",
    "ThrottleHints",
    "InvalidHint",
    "backoff_bounds_s",
    "backoff_delay_s",
    "backoff_raw_s",
    "hinted_delay_s",
    "parse_retry_after",
    "read_hints",
    "read_retry_after",
]


class ThrottleHints(Protocol):
    """What :func:`read_hints` reads of a profile's throttle (``_throttle.Throttle``)."""

    @property
    def reset_headers(self) -> tuple[tuple[str, str], ...]:
        """``(header, unit)`` hints read only on a throttled answer."""

    @property
    def default_delay_s(self) -> float | None:
        """Seconds to wait on a throttled answer that names none, or ``None``."""


class HintRules(Protocol):
    """What :func:`read_hints` reads of a profile (``_contract.Profile``): where its
    provider puts hints, and how its times are written."""

    @property
    def hint_headers(self) -> tuple[tuple[str, str], ...]:
        """``(header, unit)`` hints read from every answer."""

    @property
    def throttle(self) -> ThrottleHints | None:
        """The throttle rule, or ``None``."""

    @property
    def time_format(self) -> str:
        """``rfc3339`` or ``epoch_s``."""


class BodyHints(Protocol):
    """What :func:`read_hints` reads of a body (``_contract.Reading``): the hints as
    given, unvalidated."""

    @property
    def poll_hint_s(self) -> JSON:
        """The body's poll hint in seconds, or ``None``."""

    @property
    def poll_hint_ms(self) -> JSON:
        """The body's poll hint in milliseconds, or ``None``."""

    @property
    def next_check_at(self) -> JSON:
        """The body's next-check time in the profile's ``time_format``, or ``None``."""


# The default pacing, in one place: Policy, the CLI flags and the docs follow these.
DEFAULT_BASE_DELAY_S: Final = 5.0
"""The first backoff step, in seconds (``Policy.base_delay_s``)."""
DEFAULT_MAX_DELAY_S: Final = 60.0
"""The backoff cap, in seconds (``Policy.max_delay_s``)."""
DEFAULT_BACKOFF_GROWTH: Final = 1.5
"""How much each backoff step grows (``Policy.backoff_growth``; 1 is a fixed interval)."""
DEFAULT_BACKOFF_JITTER_FLOOR: Final = 0.8
"""The backoff is drawn from ``[floor * raw, raw]`` (``Policy.backoff_jitter_floor``)."""
DEFAULT_HINT_JITTER: Final = 0.1
"""The upward jitter on a hint, as a fraction of it (``Policy.hint_jitter``)."""
DEFAULT_HINT_JITTER_MAX_S: Final = 1.0
"""The upward jitter on a hint, at most this many seconds (``Policy.hint_jitter_max_s``)."""

_DECIMAL: Final = re.compile(r"[0-9]+(?:\.[0-9]+)?")
MAX_HINT_S: Final = 366 * 24 * 3600.0
"""A hint longer than a year is read as a year: past any deadline, never an overflow."""
_MS_HEADERS: Final = ("retry-after-ms", "x-ms-retry-after-ms")
_ASCTIME: Final = "%a %b %d %H:%M:%S %Y"
"""asctime-date (RFC 9110 §5.6.7), e.g. ``Sun Nov  6 08:49:37 1994``."""
_GMT: Final = frozenset({"GMT", "UTC", "+0000", "-0000"})
"""How an HTTP-date may name its zone (RFC 9110 asks for ``GMT``)."""


class DelaySource(StrEnum):
    """Why the next request is when it is."""

    PROVIDER_RETRY_AFTER = "provider_retry_after"
    PROVIDER_POLL_HINT = "provider_poll_hint"
    LOCAL_BACKOFF = "local_backoff"
    BACKUP_POLLING = "backup_polling"
    """Local backoff slowed by ``policy.backup_factor``: webhooks are expected, and
    polling is the backup that finds the endings no webhook announces."""
    LEARNED_SCHEDULE = "learned_schedule"
    """``Policy.schedule = "learned"``: the delay planned from the store's history of
    this kind of job (the audit event names the model's version and sample)."""
    MANUAL_EXTENSION = "manual_extension"
    BUDGET_SPREAD = "budget_spread"
    """The plan for the whole authority set it (``waitbound._rules._plan``): the requests
    left, less the reserve of pending actions, must still cover the time left, so
    the wait is longer than the backoff (or the hint) would make it, beyond
    ``max_delay_s`` when the budget cannot cover the time left even at the cap."""
    FIRST_POLL_AFTER = "first_poll_after"
    """The caller held a fresh answer when it started waiting: the first request waits
    ``first_poll_after_s`` (``wait --first-poll-after``)."""


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


def backoff_raw_s(
    attempt: int,
    *,
    base_delay_s: float,
    max_delay_s: float,
    growth: float = DEFAULT_BACKOFF_GROWTH,
) -> float:
    """Return the un-jittered backoff in seconds: ``min(max_delay, base * growth**attempt)``.

    Never overflows: a large *attempt* gives *max_delay_s*. A *growth* of 1 (or less)
    gives *base_delay_s* at every attempt (never more than the cap).

    Raises:
        ValueError: *attempt* is negative.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    if base_delay_s <= 0:
        return 0.0
    if max_delay_s <= base_delay_s:
        return max_delay_s
    if growth <= 1.0:
        return base_delay_s
    if attempt >= math.log(max_delay_s / base_delay_s, growth):
        return max_delay_s
    return min(max_delay_s, base_delay_s * growth**attempt)


def backoff_bounds_s(
    base_delay_s: float, max_delay_s: float, *, backup_factor: float | None
) -> tuple[float, float]:
    """Return the backoff's ``(base, cap)`` in seconds: as given, or both multiplied by
    *backup_factor* on the backup schedule (``None``: not on it).

    >>> backoff_bounds_s(5.0, 120.0, backup_factor=4.0)
    (20.0, 480.0)
    """
    if backup_factor is None:
        return base_delay_s, max_delay_s
    return base_delay_s * backup_factor, max_delay_s * backup_factor


def backoff_delay_s(
    attempt: int,
    *,
    base_delay_s: float,
    max_delay_s: float,
    rng: random.Random,
    growth: float = DEFAULT_BACKOFF_GROWTH,
    jitter_floor: float = DEFAULT_BACKOFF_JITTER_FLOOR,
) -> float:
    """Return a jittered backoff in seconds, uniform in ``[jitter_floor * raw, raw]``
    (*raw* from :func:`backoff_raw_s`; one draw from *rng*)."""
    raw = backoff_raw_s(attempt, base_delay_s=base_delay_s, max_delay_s=max_delay_s, growth=growth)
    return rng.uniform(jitter_floor * raw, raw)


def hinted_delay_s(
    hint_s: float,
    *,
    jitter: float,
    rng: random.Random,
    max_jitter_s: float = DEFAULT_HINT_JITTER_MAX_S,
) -> float:
    """Return a hint's delay in seconds with upward-only jitter bounded in percent and in
    seconds: ``hint + uniform(0, min(hint * jitter, max_jitter_s))`` (one draw from *rng*).

    A hint of 300 s with the defaults (10 %, 1 s) is waited 300 to 301 s, not up to 330 s:
    an exact hint costs at most a second. Spreading a fleet told the same hint is the
    worker's per-origin pacing (its token bucket), not every operation's lag.

    >>> hinted_delay_s(300.0, jitter=0.1, rng=random.Random(0), max_jitter_s=1.0) <= 301.0
    True
    """
    return hint_s + rng.uniform(0.0, min(hint_s * jitter, max_jitter_s))


def _http_date_s(text: str, *, now: datetime) -> float:
    """Seconds from *now* until the HTTP-date *text* (RFC 9110 §5.6.7), 0 when past.

    Accepts IMF-fixdate (``Sun, 06 Nov 1994 08:49:37 GMT``), the obsolete RFC 850 form
    (``Sunday, 06-Nov-94 08:49:37 GMT``) and asctime (``Sun Nov  6 08:49:37 1994``,
    which has no zone and is GMT by definition).

    Raises:
        ValueError: *text* is none of them, or names no zone where one is required.
    """
    if text.count(",") > 1:
        raise ValueError("not an HTTP-date")
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        raise ValueError("not an HTTP-date") from None
    if when.tzinfo is None:
        try:
            time.strptime(text, _ASCTIME)
        except ValueError:
            raise ValueError("an HTTP-date must be in GMT") from None
        when = when.replace(tzinfo=UTC)
    elif text.rsplit(maxsplit=1)[-1] not in _GMT or when.utcoffset():
        raise ValueError("an HTTP-date must be in GMT")
    return max(0.0, (when - now).total_seconds())


def _retry_after_value_s(text: str, *, now: datetime) -> float:
    """One Retry-After value: delay-seconds (decimals allowed) or an HTTP-date.

    Raises:
        ValueError: it is neither.
    """
    if _DECIMAL.fullmatch(text):
        return min(float(text), MAX_HINT_S)
    return _http_date_s(text, now=now)


def read_retry_after(value: str, *, now: datetime) -> tuple[float, str | None]:
    """Read a ``Retry-After`` value into seconds from *now*, saying how when it matters.

    The rules of :func:`parse_retry_after`. A header sent twice arrives joined with
    ``", "`` (``"2, 30"``): every value is read and the largest valid one wins, so the
    client never polls sooner than any of them asked.

    Returns:
        ``(seconds, note)``; the note is ``None`` for one plain value, else e.g.
        ``"largest of 2 values"`` or ``"largest of 2 values; ignored 'soon'"``.

    Raises:
        ValueError: no value in it is valid (e.g. ``"1000abc"``, ``"soon"``, ``"-5"``).
    """
    text = value.strip()
    try:
        return _retry_after_value_s(text, now=now), None
    except ValueError:
        if "," not in text:
            raise ValueError("neither delay-seconds nor an HTTP-date") from None
    parts = [part.strip() for part in text.split(",")]
    valid: list[float] = []
    ignored: list[str] = []
    index = 0
    while index < len(parts):
        if index + 1 < len(parts):  # an IMF-fixdate or RFC 850 date holds one comma
            try:
                valid.append(_http_date_s(f"{parts[index]}, {parts[index + 1]}", now=now))
            except ValueError:
                pass
            else:
                index += 2
                continue
        try:
            valid.append(_retry_after_value_s(parts[index], now=now))
        except ValueError:
            ignored.append(parts[index])
        index += 1
    if not valid:
        raise ValueError("neither delay-seconds nor an HTTP-date")
    note = f"largest of {len(valid)} value{'s' if len(valid) > 1 else ''}"
    if ignored:
        note += "; ignored " + ", ".join(ascii(part[:40]) for part in ignored[:3])
    return max(valid), note


def parse_retry_after(value: str, *, now: datetime) -> float:
    """Parse a ``Retry-After`` value into seconds from *now* (RFC 9110 §10.2.3).

    Accepts delay-seconds, decimal seconds too (``1.5`` is 1.5 s: providers that send
    them mean them), or an HTTP-date in any of the three forms of RFC 9110 §5.6.7
    (IMF-fixdate, RFC 850, asctime). A date in the past gives 0; a delay beyond a year
    reads as a year. Several values joined by commas (a header sent twice, ``"2, 30"``)
    give the largest valid one.

    Args:
        value: the header value.
        now: the observation time, aware UTC, that an HTTP-date is measured from.

    Returns:
        The delay in seconds, ``>= 0``.

    Raises:
        ValueError: no value in it is valid (e.g. ``"1000abc"``, ``"soon"``, ``"-5"``).
    """
    return read_retry_after(value, now=now)[0]


def _seconds(value: object, *, scale: float) -> float:
    """A hint's number times *scale*, in seconds; beyond a year reads as a year.

    Raises:
        ValueError: not a non-negative number (a string must be plain digits).
    """
    number = _number(value)
    if number >= MAX_HINT_S / scale:  # exact for huge integers; no float overflow
        return MAX_HINT_S
    return number * scale


def _number(value: object) -> int | float:
    """A hint's plain non-negative number (a string must be plain digits).

    Raises:
        ValueError: it is not one.
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
    return number


def read_hints(
    headers: Mapping[str, str],
    reading: BodyHints | None,
    profile: HintRules,
    *,
    now: datetime,
    throttled: bool = False,
) -> tuple[Hint | None, tuple[InvalidHint, ...]]:
    """Pick the first valid hint in precedence order; report every invalid one seen before it.

    Args:
        headers: response headers, names lower-cased.
        reading: what the profile read from the body, or ``None`` without a JSON body.
        profile: supplies ``hint_headers``, ``throttle`` and ``time_format``.
        now: the observation time, for HTTP-date, Unix-time and ``next_check_at`` hints.
        throttled: the answer is a throttle: the profile's ``throttle.reset_headers``
            are read, and its ``default_delay_s`` applies when nothing else is valid
            (a reset time on an ordinary answer is not a reason to wait).

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
                _retry_after_origin(headers["retry-after"], now=now),
                headers["retry-after"],
                DelaySource.PROVIDER_RETRY_AFTER,
                lambda v: parse_retry_after(str(v), now=now),
            )
        )
    candidates.extend(
        (f"{name} header", headers[name], DelaySource.PROVIDER_POLL_HINT, _unit(unit, now=now))
        for name, unit in profile.hint_headers
        if name in headers
    )
    throttle = profile.throttle if throttled else None
    if throttle is not None:
        candidates.extend(
            (
                f"{name} header",
                headers[name],
                DelaySource.PROVIDER_RETRY_AFTER,
                _unit(unit, now=now),
            )
            for name, unit in throttle.reset_headers
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
                partial(_until, now=now, time_format=profile.time_format),
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
    if throttle is not None and throttle.default_delay_s is not None:
        default = Hint(
            delay_s=throttle.default_delay_s,
            source=DelaySource.PROVIDER_RETRY_AFTER,
            origin="the profile's throttle.default_delay_s",
        )
        return default, tuple(invalid)
    return None, tuple(invalid)


def _unit(unit: str, *, now: datetime) -> Callable[[object], float]:
    """How a header hint in *unit* (``s``, ``ms``, ``epoch_s``) becomes seconds from *now*."""
    if unit == "epoch_s":
        return partial(_until_epoch, now=now)
    return partial(_seconds, scale=0.001 if unit == "ms" else 1.0)


def _until_epoch(value: object, *, now: datetime) -> float:
    """Seconds from *now* until the Unix time *value* (seconds), 0 when past.

    Raises:
        ValueError: not a plain non-negative number.
    """
    when, start = _number(value), now.timestamp()
    if when >= start + MAX_HINT_S:  # exact for huge integers; no float overflow
        return MAX_HINT_S
    return max(0.0, when - start)


def _retry_after_origin(value: str, *, now: datetime) -> str:
    """Where a Retry-After hint came from; with several values, which one was taken.

    E.g. ``Retry-After header '2, 30' (largest of 2 values)``.
    """
    try:
        _, note = read_retry_after(value, now=now)
    except ValueError:
        note = None
    return f"Retry-After header {value[:80]!a} ({note})" if note else "Retry-After header"


def _until(value: object, *, now: datetime, time_format: str) -> float:
    when = parse_time(value, time_format)
    if when is None:
        raise ValueError(
            "not a Unix time in seconds"
            if time_format == "epoch_s"
            else "not an RFC 3339 time with a zone"
        )
    return max(0.0, (when - now).total_seconds())
