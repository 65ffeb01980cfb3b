"""The limits and pacing of one wait (:class:`Policy`), checked when it is made."""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Final

from waitbound._base._errors import UsageError
from waitbound._base._json import JSON
from waitbound._profile._schedule import (
    DEFAULT_BACKOFF_GROWTH,
    DEFAULT_BACKOFF_JITTER_FLOOR,
    DEFAULT_BASE_DELAY_S,
    DEFAULT_HINT_JITTER,
    DEFAULT_HINT_JITTER_MAX_S,
    DEFAULT_MAX_DELAY_S,
)

__all__ = [
    "MAX_COUNT",
    "MAX_DURATION_S",
    "MAX_SCHEDULE_KEY",
    "SCHEDULES",
    "BudgetWarning",
    "Policy",
    "budget_disagreement",
    "policy_json",
    "quiet_budget_warning",
]

SCHEDULES: Final = ("formula", "learned")
"""The schedules a :class:`Policy` may name (``Policy.schedule``)."""

MAX_SCHEDULE_KEY: Final = 200
"""The longest ``Policy.schedule_key``, in characters."""

MAX_COUNT: Final = 100_000
"""No budget may exceed this many requests or answers (a larger one is a typo, not a plan)."""

MAX_DURATION_S: Final = 366 * 24 * 3600.0
"""No duration may exceed a year (a deadline further away is a scheduling job, not a wait)."""


TAIL: Final = 0.2
"""The plan's last status request lands this fraction of one spacing before the stop (a
request at the stop itself is never sent); see ``waitbound._rules._plan``."""


class BudgetWarning(UserWarning):
    """A :class:`Policy` whose request budget cannot cover its deadline even at the
    backoff's cap: after the first request (sent at once), the other ``max_requests - 1``
    at most ``max_delay_s`` apart, the last :data:`TAIL` of a spacing before the stop,
    fall short of it (``(max_requests - 2 + TAIL) * max_delay_s`` is shorter than the
    deadline). Its status requests will be spread over the time left, further apart than
    ``max_delay_s`` (delay source ``budget_spread``): exactly when the plan spreads them
    from the first answer on, with no result URL or other pending action to reserve a
    request for. A one-request policy never warns (its one look is sent at once). Given
    once, when the policy is made."""


_QUIET: ContextVar[bool] = ContextVar("waitbound_quiet_budget_warning", default=False)


@contextlib.contextmanager
def quiet_budget_warning() -> Iterator[None]:
    """Make policies without a :class:`BudgetWarning` inside (a stored policy read back:
    it was warned about when it was made)."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def budget_disagreement(policy: Policy) -> str | None:
    """One line saying how *policy*'s budget and deadline disagree, or ``None`` when its
    requests at the backoff's cap cover the deadline (and the business deadline)."""
    stop_s = policy.deadline_s
    if policy.business_deadline_s is not None:
        stop_s = min(stop_s, policy.business_deadline_s)
    covered_s = (policy.max_requests - 2 + TAIL) * policy.max_delay_s
    if policy.max_requests <= 1 or covered_s >= stop_s:
        return None
    return (
        f"the budget and the deadline disagree: {policy.max_requests} requests at most "
        f"{policy.max_delay_s:g}s apart (the first at once, the last a fifth of a spacing "
        f"before the stop) cover {covered_s:.3g}s of the {stop_s:g}s deadline; the status "
        f"requests will be spread over the time left (about "
        f"{stop_s / (policy.max_requests - 1 + TAIL):.3g}s apart, delay source "
        "budget_spread); raise max_requests or max_delay_s, or shorten the deadline, to "
        "wait on the backoff"
    )


def _check_number(name: str, value: object, *, positive: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):  # type: ignore[operator]
        need = "a positive" if positive else "a non-negative"
        raise UsageError(f"{name} must be {need} number of seconds, got {value!r}")
    if name.endswith("_s") and value > MAX_DURATION_S:  # type: ignore[operator]
        raise UsageError(f"{name} must be at most a year ({MAX_DURATION_S:g} s), got {value!r}")


def _check_ratio(name: str, value: object, low: float, high: float) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not low <= value <= high:  # type: ignore[operator]
        raise UsageError(f"{name} must be a number from {low:g} to {high:g}, got {value!r}")


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    if value > MAX_COUNT:
        raise UsageError(f"{name} must be at most {MAX_COUNT}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """The limits and pacing of one wait. Durations are in seconds.

    Attributes:
        deadline_s: from creation to the deadline (``deadline_at``).
        max_requests: requests the operation may send in total: submit attempts,
            status requests, result and errors pages and cancels all spend it.
        max_transport_failures: 5xx answers, timeouts and connection errors tolerated;
            one more escalates ``provider_failure``.
        max_rate_limited: throttled answers (429, a throttling body) tolerated; one
            more escalates ``rate_limited``.
        base_delay_s: backoff base; ``max_delay_s``: backoff cap.
        backoff_growth: each backoff step is this many times the last (from 1, a fixed
            interval, to 10): ``raw = min(max_delay_s, base_delay_s * growth**attempt)``.
        backoff_jitter_floor: the backoff is drawn uniformly from
            ``[backoff_jitter_floor * raw, raw]`` (a fraction from 0 to 1; 1 is no jitter).
        min_delay_s: the floor for every delay (more than 0); ``None`` means
            ``min(1, base_delay_s)``. A provider hint below it is not a minimum: local
            backoff applies.
        not_found_grace_s: how long a 404 or 410, or a 2xx body without a state, is
            read as "not visible yet" before the job was ever seen (once a state was
            seen, a body without one stops at once).
        request_timeout_s: the timeout of one request (never more than the time left).
        confirm_window_s: how long a success without its required fields is re-checked.
        confirm_max_requests: how many more status requests that re-check may send.
        hint_jitter: the upward jitter added to provider hints (a fraction, 0.1 = 10 %).
        hint_jitter_max_s: that jitter is also at most this many seconds: a hint ``h``
            (at or above the floor) is waited
            ``h + uniform(0, min(h * hint_jitter, hint_jitter_max_s))``. Spreading a
            fleet told the same hint is the worker's per-origin pacing, not every
            operation's lag.
        lease_s: how long a worker's lease outlives the request it holds it for.
        business_deadline_s: from creation to the business deadline, after which the
            result would no longer be useful (``None``: none); waiting stops there with
            reason ``business_deadline_exceeded`` even when ``deadline_s`` is later.
        max_extensions: how many grants (``extend``, ``treat_as_pending``, ``cancel``,
            ``fetch_result_again``) people's decisions may give one operation.
        max_extension_s: the longest one grant may extend the deadline by; ``None``
            means ``deadline_s``.
        decision_timeout_s: how long an open decision request waits for a person before
            it is closed as ``decision_timeout``.
        backup_factor: when webhooks are expected (``Record.push.webhook``), local
            backoff's base and cap are multiplied by this: polling becomes the backup
            that still finds endings no webhook announces (at least 1).
        schedule: ``"formula"`` (the backoff above) or ``"learned"``: the next poll
            time chosen from the store's history of this kind of job (see
            ``docs/waiting.md``); with too little history, the formula.
        schedule_key: which history a learned schedule reads and this operation adds
            to (``None``: the profile plus the status URL's origin and path template).
        lag_target_s: the learned schedule's target mean detection lag in seconds
            (``None``: the formula's own lag on the same history, so the learned
            schedule only saves requests).
        origin_pacing: pace this operation's status polls through the store's
            per-origin calendar (``waitbound._model._pacing``): when many operations on one
            store and origin become due in the same second, their polls are spread
            to near the origin's own mean rate, each moved later only, by at most
            ``max_delay_s`` and never past the deadline (see ``docs/waiting.md``).

    Raises:
        UsageError: a value out of range (durations must be finite and positive, at most
            a year; counts whole and at most :data:`MAX_COUNT`).
    """

    deadline_s: float = 600.0
    max_requests: int = 30
    max_transport_failures: int = 3
    max_rate_limited: int = 5
    base_delay_s: float = DEFAULT_BASE_DELAY_S
    max_delay_s: float = DEFAULT_MAX_DELAY_S
    backoff_growth: float = DEFAULT_BACKOFF_GROWTH
    backoff_jitter_floor: float = DEFAULT_BACKOFF_JITTER_FLOOR
    min_delay_s: float | None = None
    not_found_grace_s: float = 30.0
    request_timeout_s: float = 30.0
    confirm_window_s: float = 5.0
    confirm_max_requests: int = 2
    hint_jitter: float = DEFAULT_HINT_JITTER
    hint_jitter_max_s: float = DEFAULT_HINT_JITTER_MAX_S
    lease_s: float = 10.0
    business_deadline_s: float | None = None
    max_extensions: int = 3
    max_extension_s: float | None = None
    decision_timeout_s: float = 7 * 24 * 3600.0
    backup_factor: float = 4.0
    schedule: str = "formula"
    schedule_key: str | None = None
    lag_target_s: float | None = None
    origin_pacing: bool = False

    def __post_init__(self) -> None:
        for name in (
            "deadline_s",
            "base_delay_s",
            "max_delay_s",
            "request_timeout_s",
            "lease_s",
            "decision_timeout_s",
        ):
            _check_number(name, getattr(self, name), positive=True)
        for name in ("business_deadline_s", "max_extension_s", "lag_target_s"):
            if getattr(self, name) is not None:
                _check_number(name, getattr(self, name), positive=True)
        for name in ("not_found_grace_s", "confirm_window_s", "hint_jitter", "hint_jitter_max_s"):
            _check_number(name, getattr(self, name), positive=False)
        if self.min_delay_s is not None:  # a zero floor would allow a tight loop
            _check_number("min_delay_s", self.min_delay_s, positive=True)
            if self.min_delay_s > self.max_delay_s:
                raise UsageError(
                    f"min_delay_s ({self.min_delay_s:g}) is above max_delay_s "
                    f"({self.max_delay_s:g}); the floor must not exceed the cap"
                )
        for name in ("max_requests",):
            _check_int(name, getattr(self, name), minimum=1)
        for name in (
            "max_transport_failures",
            "max_rate_limited",
            "confirm_max_requests",
            "max_extensions",
        ):
            _check_int(name, getattr(self, name), minimum=0)
        _check_ratio("backoff_growth", self.backoff_growth, 1.0, 10.0)
        _check_ratio("backoff_jitter_floor", self.backoff_jitter_floor, 0.0, 1.0)
        if not (isinstance(self.backup_factor, int | float) and 1 <= self.backup_factor <= 100):
            raise UsageError(
                f"backup_factor must be a number from 1 to 100, got {self.backup_factor!r}"
            )
        if not isinstance(self.origin_pacing, bool):
            raise UsageError(f"origin_pacing must be true or false, got {self.origin_pacing!r}")
        if self.schedule not in SCHEDULES:
            raise UsageError(
                f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}"
            )
        key = self.schedule_key
        if key is not None and not (
            isinstance(key, str) and 0 < len(key) <= MAX_SCHEDULE_KEY and key.isprintable()
        ):
            raise UsageError(
                f"schedule_key must be printable text of 1 to {MAX_SCHEDULE_KEY} characters, "
                f"got {str(key)[:40]!r}"
            )
        if self.max_delay_s < self.base_delay_s:
            raise UsageError(
                f"max_delay_s ({self.max_delay_s:g}) is below base_delay_s "
                f"({self.base_delay_s:g}); raise the cap or lower the base"
            )
        if not _QUIET.get() and (disagreement := budget_disagreement(self)) is not None:
            warnings.warn(disagreement, BudgetWarning, stacklevel=3)

    @property
    def floor_s(self) -> float:
        """The smallest delay ever scheduled, in seconds."""
        return self.min_delay_s if self.min_delay_s is not None else min(1.0, self.base_delay_s)

    @property
    def extension_ceiling_s(self) -> float:
        """The longest one grant may extend the deadline by, in seconds."""
        return self.max_extension_s if self.max_extension_s is not None else self.deadline_s


_LATER_FIELDS: Final[dict[str, JSON]] = {
    "schedule": "formula",
    "schedule_key": None,
    "lag_target_s": None,
    "origin_pacing": False,
}
"""Fields added after records were first signed, with their defaults: stored only when
set, so a record written before them encodes (and its MAC's digest of the asserted
fields, the policy among them, verifies) exactly as it did."""


@functools.lru_cache(maxsize=64)
def policy_json(policy: Policy) -> dict[str, JSON]:
    """A policy as stored (the same few policies are written again and again; the
    callers only read the dict): every field, less those of :data:`_LATER_FIELDS` that
    hold their default."""
    data: dict[str, JSON] = asdict(policy)
    for name, default in _LATER_FIELDS.items():
        if data[name] == default:
            del data[name]
    return data
