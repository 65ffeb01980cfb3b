"""Origin pacing: a fleet that got the same answer does not come back as one wave.

Operations that share a store and an origin (``scheme://host:port`` of the status URL)
are paced through the store's calendar: per origin, the count of polls planned in each
one-second bucket of the near future. When the next poll time is planned (after every
other rule: hints, backoff, floor, cap, deadline), the store's ``pace`` moves it to the
first bucket at or after it that still has room (:func:`choose`), never earlier than
planned and never later than ``latest_at``.

The room is learned from the calendar itself: ``allowed = max(1, ceil(SPREAD_FACTOR *
mean))``, ``mean`` the average count per bucket from now to ``planned_at + window``
(``window`` the planned delay, at least :data:`MIN_WINDOW_S`), the new poll counted. A
fleet that arrives as one wave learns its own mean rate and is spread to near it; a
lone operation is never delayed (``allowed >= 1``, and the mean includes itself).

Where no bucket up to ``latest_at`` has room, the planned time stands: a bounded lag
beats a perfect spread. The caller's ``latest_at`` (``_next_poll.next_poll_time``) is the
planned time plus the policy's ``max_delay_s``, never past the deadline, so pacing
never breaks a bound; it never changes how many requests are sent.

The decision costs work in the buckets that hold polls, never a step per second
between now and the planned time: the mean is one sum over the window's counts, and
the first bucket with room is found by walking only the full buckets from the planned
one (:func:`first_room`: the first gap among them). A poll planned a year ahead is
paced as fast as one planned a minute ahead, so a store's write transaction (and
PostgreSQL's advisory lock on the origin) is held for no longer.

:func:`span`, :func:`room`, :func:`first_room`, :func:`settle` and :func:`choose` are
pure (no clock, no store, no global random): the stores hold the calendar and call
them under their own lock or transaction, so every store decides alike.
:func:`pacer_for` is the one adapter: the :class:`Pacer` the drivers and the worker
hand the controller (as they hand it the learned schedules' look-up), which calls the
store's ``pace`` and keeps the planned time when the store has none or fails.
"""

from __future__ import annotations

import math
import random
import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Protocol

from waitbound._base._errors import StoreError
from waitbound._base._urls import origin

__all__ = [
    "BUCKET_S",
    "MIN_WINDOW_S",
    "SPREAD_FACTOR",
    "Pacer",
    "Span",
    "choose",
    "first_room",
    "origin_key",
    "pacer_for",
    "room",
    "settle",
    "span",
]

BUCKET_S: Final = 1.0
"""The calendar's bucket width (seconds); a bucket is ``floor(unix time)``."""

SPREAD_FACTOR: Final = 2.0
"""A bucket may hold this many times the window's mean count. Chosen with the fleet
benchmark (``benchmarks/fleet_waves.py``, ``docs/benchmarks.md`` §13): 1.5 spread
the default schedule's fleet further but added 4 s of mean lag; 2.0 keeps the
steady state under Poisson's peak-to-mean for both mixes at +0.2 s for the default
schedule; 3 and more leave waves that reach 1.2-1.5x Poisson."""

MIN_WINDOW_S: Final = 5.0
"""The shortest window (seconds past the planned time) the mean is taken over."""


def _bucket(at: datetime) -> int:
    return math.floor(at.timestamp() / BUCKET_S)


@dataclass(frozen=True, slots=True, kw_only=True)
class Span:
    """The buckets a pacing decision reads (whole bucket numbers, inclusive).

    ``first``: now's bucket (older ones are pruned); ``planned``: the planned time's;
    ``mean_last``: the mean's window ends here; ``latest``: the last bucket the poll
    may move to. A store reads the counts of ``first`` to ``last``.
    """

    first: int
    planned: int
    mean_last: int
    latest: int

    @property
    def last(self) -> int:
        """The last bucket whose count the decision reads."""
        return max(self.mean_last, self.latest, self.planned)


def span(planned_at: datetime, *, latest_at: datetime, now: datetime) -> Span:
    """The buckets :func:`choose` reads for a poll planned at *planned_at* (aware
    instants; *latest_at* before *planned_at* is read as *planned_at*)."""
    first = _bucket(now)
    planned = max(first, _bucket(planned_at))
    reach_s = max(MIN_WINDOW_S, (planned_at - now).total_seconds())
    return Span(
        first=first,
        planned=planned,
        mean_last=max(planned, math.floor(planned_at.timestamp() / BUCKET_S + reach_s)),
        latest=max(planned, _bucket(max(latest_at, planned_at))),
    )


def room(total: int, where: Span, *, spread: float = SPREAD_FACTOR) -> int:
    """How many polls a bucket may hold: ``max(1, ceil(spread * mean))``, the mean taken
    over the buckets ``where.first`` to ``where.mean_last`` of their *total* count plus
    the new poll."""
    buckets = where.mean_last - where.first + 1
    return max(1, math.ceil(spread * (total + 1) / buckets))


def first_room(full: Iterable[int], where: Span) -> int | None:
    """The first bucket from ``where.planned`` to ``where.latest`` that is not in
    *full* (the buckets without room, ascending), or ``None`` when there is none.

    It reads *full* only up to the first gap: a step per bucket without room before it,
    never a step per second, so a poll planned a year ahead costs what one planned a
    minute ahead does (a store may hand it a lazy iterable that reads its rows in
    batches)."""
    candidate = where.planned
    for bucket in full:
        if bucket < candidate:
            continue
        if bucket > candidate:
            break  # a gap: *candidate* has room
        candidate += 1
        if candidate > where.latest:
            return None
    return candidate if candidate <= where.latest else None


def settle(
    bucket: int | None,
    where: Span,
    planned_at: datetime,
    *,
    latest_at: datetime,
    rng_offset: float,
) -> tuple[int, datetime]:
    """The bucket and time of a poll whose first bucket with room is *bucket*
    (``None``: none up to *latest_at*, so the planned time stands)."""
    if bucket is None or bucket == where.planned:
        return where.planned, planned_at
    at = datetime.fromtimestamp((bucket + min(max(rng_offset, 0.0), 0.999)) * BUCKET_S, UTC)
    return bucket, min(latest_at, max(planned_at, at))


def choose(
    counts: Mapping[int, int],
    planned_at: datetime,
    *,
    latest_at: datetime,
    now: datetime,
    rng_offset: float,
    spread: float = SPREAD_FACTOR,
) -> tuple[int, datetime]:
    """Pick the poll time for one poll planned at *planned_at* (module docstring).

    Args:
        counts: the origin's planned polls per bucket (missing: 0), at least for the
            buckets of :func:`span`; the new poll is not in it yet. Only its entries
            are read (no step per second between them): the work grows with the
            buckets that hold polls, not with how far ahead the poll is.
        planned_at: the time every other rule chose (aware).
        latest_at: the latest the poll may move to (aware; the cap and deadline).
        now: the current time (aware).
        rng_offset: where in its bucket a moved poll lands, in ``[0, 1)`` of
            :data:`BUCKET_S` (drawn by the caller from its injected rng).
        spread: :data:`SPREAD_FACTOR`.

    Returns:
        The bucket the poll is counted in and its time: *planned_at* itself when its
        own bucket has room or no bucket up to *latest_at* has (a bounded lag beats a
        perfect spread); else the start of the first bucket with room plus
        ``rng_offset`` of a bucket, never earlier than *planned_at* nor later than
        *latest_at*.
    """
    where = span(planned_at, latest_at=latest_at, now=now)
    if latest_at <= planned_at:
        return where.planned, planned_at
    total = sum(n for b, n in counts.items() if where.first <= b <= where.mean_last)
    allowed = room(total, where, spread=spread)
    full = sorted(
        b for b, n in counts.items() if where.planned <= b <= where.latest and n >= allowed
    )
    return settle(
        first_room(full, where), where, planned_at, latest_at=latest_at, rng_offset=rng_offset
    )


def origin_key(url: str | None) -> str | None:
    """``scheme://host:port`` of an http(s) URL, or ``None`` (no URL, or not one)."""
    if not url:
        return None
    try:
        scheme, host, port = origin(url)
    except ValueError:
        return None
    if host is None or scheme not in ("http", "https"):
        return None
    return f"{scheme}://{host}:{port}"


class Pacer(Protocol):
    """What the controller is handed to pace a poll (see :func:`pacer_for`)."""

    def __call__(
        self,
        origin: str,
        planned_at: datetime,
        *,
        latest_at: datetime,
        now: datetime,
        rng: random.Random,
    ) -> datetime:
        """The poll time for a poll of *origin* planned at *planned_at*: at or after it,
        at or before *latest_at* (aware instants; *rng* draws where in its bucket)."""
        ...


class _StorePacer:
    """A :class:`Pacer` over one store's ``pace``; a store without one, or that fails
    to answer (a :class:`~waitbound.StoreError`), paces nothing: the planned time."""

    def __init__(self, store: object) -> None:
        self._pace = getattr(store, "pace", None)

    def __call__(
        self,
        origin: str,
        planned_at: datetime,
        *,
        latest_at: datetime,
        now: datetime,
        rng: random.Random,
    ) -> datetime:
        if self._pace is None or latest_at <= planned_at:
            return planned_at
        offset = rng.random()
        try:
            paced = self._pace(origin, planned_at, latest_at=latest_at, now=now, rng_offset=offset)
        except StoreError:
            return planned_at
        if not isinstance(paced, datetime):
            return planned_at
        return min(latest_at, max(planned_at, paced))


_BY_STORE: weakref.WeakKeyDictionary[object, _StorePacer] = weakref.WeakKeyDictionary()
_BY_STORE_LOCK: Final = threading.Lock()


def pacer_for(store: object) -> Pacer:
    """The :class:`Pacer` of *store* (one per store in this process)."""
    with _BY_STORE_LOCK:
        try:
            found = _BY_STORE.get(store)
        except TypeError:  # a store that cannot be weakly referenced
            return _StorePacer(store)
        if found is None:
            found = _StorePacer(store)
            _BY_STORE[store] = found
        return found
