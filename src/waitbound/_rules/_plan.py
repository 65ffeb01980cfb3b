"""The plan for the whole authority: requests left, time left, and the reserve.

Pure functions (no clock, no store): what the pending actions of an operation still
need (:func:`reserve_requests`), how many status requests the pace may count on
(:func:`status_requests_left`), the shortest delay of the next status request that
keeps the rest able to cover the time left (:func:`budget_min_delay_s`), and whether
a provider's hints have earned being followed sooner than the plan
(:func:`hints_trusted`). ``_next_poll.py`` (the formula and the
learned schedule alike) and a person's grant (``_decisions.py``) ask these; the rule is
stated in ``docs/waiting.md`` (*The plan*) and checked by the honesty oracle.

**The budget invariant.** With ``n`` status requests left (the next one included,
the reserve kept out) and ``T`` seconds left before the stop (the deadline, or the
business deadline when earlier), the next status request waits at least
``T - (n - 1 + TAIL) * s``, where ``s = max(cap, T / (n + TAIL))`` (``cap`` is the
backoff's cap; after a person's grant, ``s = T / (n + TAIL)``: the grant's checks are
spread over its window). So the requests after the next one, spaced ``s`` apart, still
reach the stop, the last a fraction :data:`TAIL` of a spacing before it: a budget that
cannot cover the time left even at the cap is spread evenly over it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from waitbound._model._record import Phase, Record
from waitbound._profile._policy import TAIL
from waitbound._profile._schedule import DelaySource

__all__ = [
    "HINT_SOURCES",
    "TAIL",
    "budget_min_delay_s",
    "budget_spacing_s",
    "grant_paced",
    "hints_trusted",
    "reserve_requests",
    "result_reserve",
    "status_requests_left",
]


HINT_SOURCES: Final = frozenset({DelaySource.PROVIDER_RETRY_AFTER, DelaySource.PROVIDER_POLL_HINT})
"""The delay sources that mean "the provider's hint set this look"."""


def reserve_requests(record: Record) -> int:
    """Requests the operation's pending actions still need, kept out of the status
    requests' pace (never refused to a status request: the budget's stop is unchanged).

    - the one result request, when a result URL is known (``record.result_url``) and
      the result is not fetched yet;
    - a confirmation re-check's requests, while a success without its required fields
      is being confirmed (``confirm_max_requests`` less those used);
    - a cancel and its follow-up status look (2), until the cancel is sent: one due
      (a person's decision, ``waitbound cancel``) or ``--cancel-on-deadline``'s;
    - while submitting, the resends the submission may still need.
    """
    if record.is_finished:
        return 0
    reserve = 0
    if record.ending.phase is Phase.SUBMITTING:
        reserve += max(0, record.contract.max_submit_attempts - record.counters.submit_attempts)
    reserve += result_reserve(record)
    if record.answer.success_seen_at is not None:
        reserve += max(
            0, record.contract.policy.confirm_max_requests - record.counters.confirm_requests_used
        )
    if (
        (record.oversight.cancel_due or record.contract.cancel_on_deadline)
        and not record.counters.cancel_requests_used
        and record.cancel_target() is not None
    ):
        reserve += 2
    return reserve


def result_reserve(record: Record) -> int:
    """The one result request an operation will still need (0 or 1): its result URL
    is known (``record.result_url``) and not fetched, or, while waiting on the job, its
    profile names where a result URL is read (a ``result_url`` expression or
    ``result_url_template``) and none was fetched. A person's grant carries it on
    top of its checks (``_decisions.py``): a cancel refused because the job just
    succeeded still fetches the result."""
    if record.ending.result_fetched_at is not None:
        return 0
    if record.submission.result_url is not None:
        return 1
    profile = record.contract.profile
    names = "result_url" in profile.expressions or profile.result_url_template is not None
    return int(names and record.ending.phase is Phase.WAITING)


def status_requests_left(record: Record) -> int:
    """Status requests the pace counts on: the budget left less :func:`reserve_requests`,
    at least 1 while any request is left (0 when the budget is spent)."""
    left = record.max_requests - record.requests_used
    if left <= 0:
        return 0
    return max(1, left - reserve_requests(record))


def _time_left_s(record: Record, now: datetime) -> float:
    """Seconds to the stop, or to the end of a person's grant window when that is
    earlier and still ahead (``grant_ends_at``)."""
    stop = record.stop_at
    if record.schedule.grant_ends_at is not None and now < record.schedule.grant_ends_at < stop:
        stop = record.schedule.grant_ends_at
    return (stop - now).total_seconds()


def budget_spacing_s(record: Record, now: datetime, *, cap_s: float) -> float | None:
    """The spacing ``s`` of the budget invariant (seconds; see the module docstring), or
    ``None`` when no status request is left or the stop is reached."""
    n = status_requests_left(record)
    time_left_s = _time_left_s(record, now)
    if n <= 0 or time_left_s <= 0:
        return None
    even = time_left_s / (n + TAIL)
    return even if record.oversight.grants.extensions > 0 else max(cap_s, even)


def budget_min_delay_s(record: Record, now: datetime, *, cap_s: float) -> float:
    """The shortest delay (seconds, ``>= 0``) of the next status request that keeps
    the requests after it able to cover the time left: ``T - (n - 1 + TAIL) * s``
    (see the module docstring). 0 when nothing binds (the budget is ample, or spent:
    the controller's own stop applies then).

    >>> from waitbound._rules._plan import TAIL
    >>> round(180 - (1 - 1 + TAIL) * 180 / (1 + TAIL), 3)  # one check over 3 minutes
    150.0
    """
    spacing = budget_spacing_s(record, now, cap_s=cap_s)
    if spacing is None:
        return 0.0
    n = status_requests_left(record)
    time_left_s = _time_left_s(record, now)
    return max(0.0, time_left_s - (n - 1 + TAIL) * spacing)


def hints_trusted(record: Record) -> bool:
    """Whether this operation's provider hints have come true often enough to be
    followed sooner than the plan: at least one followed hint brought news, and at
    least half of them did (``hints_true``, ``hints_followed``)."""
    return (
        record.schedule.hints_true >= 1
        and 2 * record.schedule.hints_true >= record.schedule.hints_followed
    )


def grant_paced(record: Record, now: datetime, *, minutes: float) -> Record:
    """*record* just reopened by a person's grant of checks (``extend``,
    ``treat_as_pending``), its first check placed by the plan instead of at once: the
    grant's checks are spread over its window (``s = T / (n + TAIL)``), so one check
    over 3 minutes is sent 2.5 minutes after the decision, two over 30 s about 13.6 s
    and 27.3 s after it: the plan's time left is the grant's window (``grant_ends_at``,
    *minutes* after now, never past the stop) while it runs. Earlier only when the job
    ends (a webhook) or a hint the operation has learned to trust says so. A record not
    waiting on the job is returned as it is."""
    if record.is_finished or record.ending.phase is not Phase.WAITING:
        return record
    record = record.evolve(
        schedule=record.schedule.evolve(
            grant_ends_at=min(now + timedelta(minutes=minutes), record.stop_at)
        )
    )
    if record.schedule.next_poll_at > now:
        return record
    delay_s = budget_min_delay_s(record, now, cap_s=record.contract.policy.max_delay_s)
    return record.evolve(
        schedule=record.schedule.evolve(
            next_poll_at=now + timedelta(seconds=delay_s),
            delay_source=DelaySource.MANUAL_EXTENSION,
            last_delay_s=None,
        )
    )
