"""When to look again after an answer that does not end the operation.

Pure functions (see the rules atop ``_controller.py``) used by the answer modules
(``_status_answer.py`` and the others, ``_settle.py``, ``_trouble.py``): the next poll
time from hints, backoff and jitter (:func:`schedule`), and the backup schedule of an
operation that expects webhooks. Whether a throttle or a 5xx is still tolerable is
decided in ``_trouble.py``. The rules are stated in
``docs/waiting.md`` (hints, backoff, budgets).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from waitbound._base._json import JSON
from waitbound._model._audit import EventKind
from waitbound._model._observation import Observation
from waitbound._model._pacing import Pacer, origin_key
from waitbound._model._record import Phase, Record
from waitbound._profile._contract import Reading
from waitbound._profile._schedule import (
    DelaySource,
    Hint,
    backoff_bounds_s,
    backoff_delay_s,
    backoff_raw_s,
    hinted_delay_s,
    read_hints,
)
from waitbound._rules import _sentences as sentences
from waitbound._rules._finish import Step, seconds_between
from waitbound._rules._learned import LearnedSchedule, ModelLookup, learned_jitter_s
from waitbound._rules._plan import (
    HINT_SOURCES,
    TAIL,
    budget_min_delay_s,
    budget_spacing_s,
    hints_trusted,
    reserve_requests,
    status_requests_left,
)
from waitbound._rules._stop import Look, deadline_cancel_at, stop_reason

__all__ = [
    "THROTTLE_FACTOR",
    "NextPoll",
    "Timing",
    "next_poll_time",
    "schedule",
    "wait_demanded",
]

THROTTLE_FACTOR = 4.0
"""A throttle without a hint backs off at least this many times the current delay."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """What picking the next poll time needs beyond the record and the answer."""

    rng: random.Random
    """Draws the jitter (and origin pacing's choice among equal buckets)."""
    models: ModelLookup | None = None
    """The learned schedules a ``Policy.schedule = "learned"`` operation's next status
    poll is planned from (``None``: the formula); see ``_learned.py``."""
    pacer: Pacer | None = None
    """The store's origin calendar a ``Policy.origin_pacing`` operation's next status
    poll is paced through, after every other rule (``None``: not paced); see
    ``_pacing.py``."""
    refused_cancel: Callable[[Step, Observation], Step] | None = None
    """When the answer is the one status look after a cancel the provider did not
    accept: that look's decision (``_canceling.after_refused_cancel``, handed in by
    ``_controller.observe``); ``None`` for any other answer. A look it schedules while
    the job still runs is never sent (the operation stops), so it is neither brought
    forward nor paced."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NextPoll:
    """The next poll time :func:`next_poll_time` picked, and what the record keeps of
    how (the delay source, the backoff's attempt, the delay and the hint)."""

    at: datetime
    """When the next request is due (``next_poll_at``), never past the stop."""
    source: DelaySource | None
    """The rule that set it (``delay_source``); ``None``: due at once (a webhook)."""
    attempt: int
    """The backoff's attempt counter after this look (``attempt``)."""
    last_delay_s: float
    """The planned delay (seconds; a throttle's without its factor), before a webhook
    or pacing moved it: the next backoff step goes on from it."""
    last_hint_s: float | None
    """The provider's hint on this answer (seconds), or ``None``."""
    hints_followed: int
    """The operation's followed hints, this look's counted."""
    hints_true: int
    """Of those, the hints that came true, this look's counted."""
    look: Look
    """The soonest the next look may be sent, for ``_stop.stop_reason``."""
    said: str
    """The ``scheduled`` sentence (``_sentences.scheduled``)."""
    more: str
    """What a webhook in flight and origin pacing add to it (``""``: nothing)."""
    extra: dict[str, JSON]
    """The ``scheduled`` event's data (hints, the learned plan, the budget's pace)."""
    more_extra: dict[str, JSON]
    """What origin pacing adds to it (``paced_by_origin``)."""

    def counted(self, record: Record) -> Record:
        """*record* with this look's hint evidence and backoff attempt counted."""
        return record.evolve(
            schedule=record.schedule.evolve(
                attempt=self.attempt, hints_followed=self.hints_followed, hints_true=self.hints_true
            )
        )

    def kept(self, record: Record) -> Record:
        """*record* with the next poll time and how it was picked (:meth:`counted` too)."""
        counted = self.counted(record)
        return counted.evolve(
            schedule=counted.schedule.evolve(
                next_poll_at=self.at,
                delay_source=self.source,
                last_delay_s=self.last_delay_s,
                last_hint_s=self.last_hint_s,
            )
        )


def schedule(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    timing: Timing,
    *,
    note: str = "",
    throttle: bool = False,
    demanded: bool = False,
    confirming: bool = False,
    unseen: bool = False,
    extra: Mapping[str, JSON] | None = None,
) -> Step:
    """Look again later: the ``scheduled`` step at :func:`next_poll_time`'s time, or
    the stop ``_stop.stop_reason`` decides when that look would be past the deadline.

    The arguments are :func:`next_poll_time`'s; *extra* is added to the step's data
    (a moved polling URL). The status look after a refused cancel is decided by
    :attr:`Timing.refused_cancel` before a webhook's or pacing's words are added.
    """
    poll = next_poll_time(
        record, observation, reading, timing, note=note, throttle=throttle,
        demanded=demanded, confirming=confirming, unseen=unseen,
    )  # fmt: skip
    added = dict(extra or {})
    stop = stop_reason(poll.counted(record), observation.at, look=poll.look)
    if stop is not None:
        return replace(stop, extra=poll.extra | stop.extra).adding(added)
    step = Step(poll.kept(record), EventKind.SCHEDULED, poll.said, poll.extra | added)
    if timing.refused_cancel is not None:
        step = timing.refused_cancel(step, observation)
    if step.kind is not EventKind.SCHEDULED:
        return step
    return step.said(poll.more).adding(poll.more_extra)


def next_poll_time(
    record: Record,
    observation: Observation,
    reading: Reading | None,
    timing: Timing,
    *,
    note: str = "",
    throttle: bool = False,
    demanded: bool = False,
    confirming: bool = False,
    unseen: bool = False,
) -> NextPoll:
    """When to look again after *observation*: the one function that picks the next
    poll time (hints, backoff, jitter, the budget's pace, a webhook that arrived while
    the request was in flight, origin pacing). It only picks the time: whether the
    operation stops instead (the look would land past the deadline) is
    ``_stop.stop_reason``'s, asked with :attr:`NextPoll.look`.

    A valid hint at or above the floor is a minimum, jittered upward only (at most
    ``hint_jitter`` of it and ``hint_jitter_max_s``). Without one, or with a hint below
    the floor (zero included: no minimum beyond itself, audited as such): local backoff,
    its attempt counter going on, so an overdue job told "0" again and again costs what
    backoff costs, never the floor over and over; a throttle multiplies it by
    :data:`THROTTLE_FACTOR`; a confirmation re-check fits its requests inside the
    confirmation window; every delay is at least the floor. On the backup schedule
    (webhooks expected, see :func:`_on_backup_schedule`) the backoff's base and cap are
    multiplied by ``policy.backup_factor``, and a hint is a minimum of that backoff: the
    later of the two applies (its source recorded).

    *timing.models*: the learned schedules (``Policy.schedule = "learned"``, see
    ``_learned.py``). Asked only where the formula's plain backoff would apply (no
    valid hint, no throttle or demanded wait, no confirmation, not the backup
    schedule, while waiting on the job): a planned delay replaces the backoff's,
    jittered the same way (drawn from ``[jitter_floor * d, d]`` with ``d`` such that
    the draw's mean is the plan, never above the cap) and never below the floor; the
    deadline, the request budget and the worker's pacing apply to it as to any delay.

    *unseen*: the answer did not show the job (a throttle, a 5xx, no answer): the look
    the plan meant is still owed. While waiting on the job, when its retry would land at
    or past the stop but the provider's minimum (a ``Retry-After``) fits before it, the
    retry is kept inside: at the plan's last look (a fraction :data:`~waitbound._rules._plan.TAIL`
    of a spacing before the stop), never sooner than the minimum. Without it, a throttle
    near the deadline would clip the retry to the deadline and the wait would end
    ``timed_out`` with a job that ended in time unseen.

    A status answer to a request sent before a webhook delivery was applied may
    predate what the webhook announced: the next look is due at once (delay source
    ``None``), unless the wait was demanded (:func:`wait_demanded`). Then origin
    pacing (:attr:`Timing.pacer`) may move a status poll later (:func:`_paced`).

    Returns:
        The time, its source and attempt, the words and data of the ``scheduled``
        event, and :attr:`NextPoll.look` for the stop rule. Raises nothing.
    """
    now = observation.at
    policy = record.contract.policy
    floor = policy.floor_s
    told, invalid = read_hints(
        observation.headers, reading, record.contract.profile, now=now, throttled=throttle
    )
    record = _hint_evidence(record, told)
    hint = told if told is not None and told.delay_s >= floor else None
    if told is not None and hint is None:
        said = "0" if told.delay_s == 0 else f"{told.delay_s:.3g}s, below the {floor:g}s floor"
        note = f"{note + '; ' if note else ''}hint {said} ({told.origin}): no minimum"
    code = observation.http_status
    told_to_wait = (  # a non-2xx answer's Retry-After is a demand (see wait_demanded)
        hint is not None
        and hint.source is DelaySource.PROVIDER_RETRY_AFTER
        and not (code is not None and 200 <= code < 300)
    )
    rejected = None
    if (
        hint is not None
        and not (throttle or demanded or told_to_wait)  # guidance, not a demand
        and now + timedelta(seconds=hint.delay_s) >= record.stop_at
    ):
        rejected, hint = hint, None
        note = (
            f"{note + '; ' if note else ''}hint {rejected.delay_s:g}s ({rejected.origin}) "
            "reaches past the deadline: rejected as guidance"
        )
    backup = _on_backup_schedule(
        record, demanded=throttle or demanded or told_to_wait, confirming=confirming
    )
    base_s, cap_s = backoff_bounds_s(
        policy.base_delay_s,
        policy.max_delay_s,
        backup_factor=policy.backup_factor if backup else None,
    )
    shape = {"growth": policy.backoff_growth, "jitter_floor": policy.backoff_jitter_floor}
    extra_learned: dict[str, JSON] | None = None
    factor = 1.0  # a throttle's multiple of the backoff's step (the step goes on, not it)
    planned = _learned_delay_s(
        record, now, timing.models, plain=not (throttle or demanded or confirming or backup)
    )
    raw_s = _continued_raw_s(record, base_s, cap_s) if planned is None else planned[1]
    followed = hint is not None and (
        confirming or backup or hint.delay_s >= raw_s or hints_trusted(record)
    )
    unfollowed = None if followed else hint
    if hint is not None and followed:
        minimum = hint.delay_s
        delay = hinted_delay_s(
            minimum,
            jitter=policy.hint_jitter,
            max_jitter_s=policy.hint_jitter_max_s,
            rng=timing.rng,
        )
        source = hint.source
        demanded = demanded or throttle
        if backup:  # the hint is a minimum under the backup schedule, not a shortcut
            slower = backoff_delay_s(
                record.schedule.attempt,
                base_delay_s=base_s,
                max_delay_s=cap_s,
                rng=timing.rng,
                **shape,
            )
            if slower > delay:
                delay, source = slower, DelaySource.BACKUP_POLLING
    elif planned is not None:
        minimum = max(floor, unfollowed.delay_s if unfollowed else 0.0)
        model, planned_s = planned
        delay = max(minimum, learned_jitter_s(planned_s, policy, timing.rng))
        source = DelaySource.LEARNED_SCHEDULE
        extra_learned = {"planned_s": round(planned_s, 3), **model.describe()}
    else:
        minimum = max(floor, unfollowed.delay_s if unfollowed else 0.0)
        low = policy.backoff_jitter_floor * raw_s
        if (
            record.schedule.attempt
            and record.schedule.last_delay_s
            and record.schedule.delay_source in HINT_SOURCES
        ):
            low = max(low, min(record.schedule.last_delay_s, raw_s))  # never shorter than the hint
        if unfollowed is not None:  # the hint stays a minimum
            low = max(low, min(unfollowed.delay_s, raw_s))
        delay = timing.rng.uniform(low, raw_s)
        if throttle and unfollowed is None:
            delay *= THROTTLE_FACTOR
            minimum = delay
            factor = THROTTLE_FACTOR
        demanded = demanded or throttle
        if confirming:
            delay = min(delay, policy.confirm_window_s / (policy.confirm_max_requests + 1))
        delay = max(delay, minimum)
        source = DelaySource.BACKUP_POLLING if backup else DelaySource.LOCAL_BACKOFF
        if unfollowed is not None and (demanded or told_to_wait):
            source = unfollowed.source  # a demand lengthened by the plan: still a demand
    spread_s = (
        budget_min_delay_s(record, now, cap_s=cap_s)
        if record.ending.phase is Phase.WAITING and not confirming
        else 0.0
    )
    if spread_s > delay:  # the budget's pace: the rest must still cover the time left
        delay = spread_s
        if not (hint is not None and (demanded or told_to_wait)):  # a demand stays one (no webhook
            source = DelaySource.BUDGET_SPREAD  # brings it forward); the extra says why
        extra_budget = True
    else:
        extra_budget = False
    extra: dict[str, JSON] = {
        "invalid_hints": [
            {"origin": bad.origin, "value": bad.value, "problem": bad.problem} for bad in invalid
        ]
    }
    if extra_learned is not None:
        extra["learned"] = extra_learned
    if unfollowed is not None:
        extra["hint"] = {
            "origin": unfollowed.origin,
            "delay_s": unfollowed.delay_s,
            "followed": False,
            "came_true": [record.schedule.hints_true, record.schedule.hints_followed],
        }
        note = (
            f"{note + '; ' if note else ''}hint {unfollowed.delay_s:g}s ({unfollowed.origin}) "
            f"is a minimum, not followed sooner than the plan ({raw_s:.3g}s): this job's "
            f"hints came true {record.schedule.hints_true} of {record.schedule.hints_followed} "
            "times"
        )
    elif hint is not None:
        extra["hint"] = {"origin": hint.origin, "delay_s": hint.delay_s}
    elif rejected is not None:
        extra["hint"] = {
            "origin": rejected.origin,
            "delay_s": rejected.delay_s,
            "rejected": "past the deadline",
        }
    elif told is not None:
        extra["hint"] = {"origin": told.origin, "delay_s": told.delay_s, "minimum": False}
    if extra_budget:
        extra["budget"] = {
            "status_requests_left": status_requests_left(record),
            "reserve": reserve_requests(record),
            "time_left_s": round(seconds_between(now, record.stop_at), 3),
        }
    earliest = now + timedelta(seconds=minimum)
    if (
        unseen
        and record.ending.phase is Phase.WAITING
        and not confirming
        and earliest < record.stop_at <= now + timedelta(seconds=delay)
    ):  # the look still owed stays inside the deadline (see the docstring)
        spacing_s = budget_spacing_s(record, now, cap_s=cap_s) or 0.0
        delay = max(minimum, seconds_between(now, record.stop_at) - TAIL * spacing_s)
        note = f"{note + '; ' if note else ''}the look still owed is retried before the deadline"
    # --cancel-on-deadline: its one cancel still goes out before the deadline
    cancel_at = None if demanded else deadline_cancel_at(record)
    if earliest >= record.stop_at and cancel_at is not None:
        note = (
            f"{note + '; ' if note else ''}no status request fits before the deadline: "
            f"the cancel is sent at {cancel_at.isoformat()}, before it"
        )
    wait = f"told to wait {minimum:g}s ({hint.origin})" if hint else f"backing off {minimum:.3g}s"
    due = min(now + timedelta(seconds=delay), record.stop_at)
    if record.requests_used >= record.max_requests and not demanded:
        # Every request is used: nothing is left to wait for, and the stop is the
        # budget's now (the controller's), never a backoff that runs into the deadline.
        due = now
    ignored = [(b.origin, b.value) for b in invalid]
    at, more = due, ""
    more_extra: dict[str, JSON] = {}
    final_source: DelaySource | None = source
    if not (timing.refused_cancel is not None and record.answer.success_seen_at is None):
        if _hinted_in_flight(record, observation) and not _demanded(
            observation.http_status, source
        ):  # the answer may predate what the webhook announced: look again at once
            at, final_source = min(due, now), None
            more = (
                "; a webhook arrived while this request was in flight, so its answer may "
                "predate it: the next check is due now"
            )
        at, paced_said, more_extra = _paced(record, now, at, timing)
        more += paced_said
    return NextPoll(
        at=at,
        source=final_source,
        attempt=record.schedule.attempt + 1,
        last_delay_s=round(seconds_between(now, due) / factor, 6),
        last_hint_s=told.delay_s if told is not None else None,
        hints_followed=record.schedule.hints_followed,
        hints_true=record.schedule.hints_true,
        look=Look(at=earliest, demanded=demanded, wait=wait, note=note),
        said=sentences.scheduled(note, seconds_between(now, due), source, ignored),
        more=more,
        extra=extra,
        more_extra=more_extra,
    )


def _paced(
    record: Record, now: datetime, planned: datetime, timing: Timing
) -> tuple[datetime, str, dict[str, JSON]]:
    """Origin pacing (``Policy.origin_pacing``, see ``_pacing.py``), after every other
    rule: a status poll planned at *planned* may move later, to where its origin's
    calendar has room, by at most the policy's ``max_delay_s`` and never past the
    deadline; a hint stays a minimum (the time only moves later), the delay source
    stays the rule that planned it, and the audit names what pacing added
    (``paced_by_origin``).

    Returns ``(time, words added to the sentence, data added to the event)``: the
    planned time, ``""`` and ``{}`` for any poll not paced (no pacer or pacing off,
    not waiting on the job, a poll due now, a confirmation re-check, which must fit its
    ``confirm_window_s``, a doubt's re-check).
    """
    pacer = timing.pacer
    unchanged: tuple[datetime, str, dict[str, JSON]] = (planned, "", {})
    if (
        pacer is None
        or not record.contract.policy.origin_pacing
        or record.ending.phase is not Phase.WAITING
        or record.answer.success_seen_at is not None  # a confirmation re-check fits its window
        or record.answer.doubted_at is not None
        or planned <= now
    ):
        return unchanged
    where = origin_key(record.submission.status_url)
    if where is None:
        return unchanged
    latest = min(planned + timedelta(seconds=record.contract.policy.max_delay_s), record.stop_at)
    if latest <= planned:
        return unchanged
    at = pacer(where, planned, latest_at=latest, now=now, rng=timing.rng)
    at = min(latest, max(planned, at))
    added_s = seconds_between(planned, at)
    if added_s <= 0:
        return unchanged
    said = sentences.paced(where, added_s, seconds_between(now, at))
    return at, said, {"paced_by_origin": {"origin": where, "added_s": round(added_s, 3)}}


def _hinted_in_flight(record: Record, observation: Observation) -> bool:
    """Whether a webhook delivery was applied to the operation after this status request
    was sent (``waitbound._engine._inbox``: a hint that lands while a request is in
    flight only brings the poll forward)."""
    delivered_at = record.push.last_delivery_at
    if observation.kind != "status" or delivered_at is None:
        return False
    sent_at = observation.at - timedelta(seconds=max(0.0, observation.elapsed_s))
    return delivered_at > sent_at


def wait_demanded(record: Record) -> bool:
    """Whether the scheduled next request waits because the provider demanded it, so a
    webhook hint must not bring it forward: the last answer was a 429, or another
    answer that is not a 2xx (a 503, a throttle by the profile's rule) whose hint set the
    time (``provider_retry_after``: a ``Retry-After``, a reset header, a throttle's
    default delay).

    A pacing hint on an ordinary answer (``Retry-After`` on a 202, a body poll hint) is
    not a demand: a webhook is newer news about the job than that pacing.
    """
    return _demanded(record.answer.last_http_status, record.schedule.delay_source)


def _demanded(code: int | None, source: DelaySource | None) -> bool:
    """:func:`wait_demanded` for the last answer's HTTP status *code* and the next
    request's delay *source*."""
    if code == 429:
        return True
    ordinary = code is not None and 200 <= code < 300
    return source is DelaySource.PROVIDER_RETRY_AFTER and not ordinary


def _learned_delay_s(
    record: Record, now: datetime, models: ModelLookup | None, *, plain: bool
) -> tuple[LearnedSchedule, float] | None:
    """The learned schedule's planned delay (seconds) and its model, or ``None``: no
    model (the formula applies), not a plain wait on the job (*plain* false, or not
    waiting), or the job has outlived the model's horizon."""
    if models is None or not plain or record.ending.phase is not Phase.WAITING:
        return None
    model = models(record, now)
    if model is None:
        return None
    planned = model.next_delay_s(seconds_between(record.contract.created_at, now))
    return None if planned is None else (model, planned)


def _on_backup_schedule(record: Record, *, demanded: bool, confirming: bool) -> bool:
    """Whether the next status poll's local backoff is the backup schedule: webhooks
    are expected (``push.webhook``), so polling only has to find the endings no webhook
    announces; base and cap are multiplied by ``policy.backup_factor``.

    Only while polling the status (phase ``waiting``): a submission resent, a result or
    errors page not ready, are not what a webhook announces. Never after an answer that
    demands a wait (a throttle, a 503, a ``Retry-After`` on an answer that is not a
    2xx: their own rules, e.g. :data:`THROTTLE_FACTOR`
    times the ordinary backoff, so expecting webhooks never makes a throttle end
    ``rate_limited`` sooner, and their hint stays the recorded source that no webhook
    cuts short) or for a confirmation re-check (it fits its window). Any other hint
    stays a minimum of the backup schedule.
    """
    return (
        record.push.webhook is not None
        and record.ending.phase is Phase.WAITING
        and not demanded
        and not confirming
    )


def _continued_raw_s(record: Record, base_s: float, cap_s: float) -> float:
    """The backoff's un-jittered step (seconds), going on from the last delay: the
    formula's ``min(cap, base * growth**attempt)``, or the last delay times the growth
    when that is longer (a hinted wait of 2 s is followed by about 3 s, never by the
    formula's restart from its base), never above the cap. A new phase (``attempt``
    0) starts from the base."""
    policy = record.contract.policy
    raw = backoff_raw_s(
        record.schedule.attempt,
        base_delay_s=base_s,
        max_delay_s=cap_s,
        growth=policy.backoff_growth,
    )
    last = record.schedule.last_delay_s
    if record.schedule.attempt and last:
        raw = max(raw, min(cap_s, last * policy.backoff_growth))
    return raw


def _hint_evidence(record: Record, told: Hint | None) -> Record:
    """Count the evidence of the look just answered, when a provider hint set it
    (``delay_source``): the hint was followed, and it came true when the answer brought
    news: a hint that differs from the last one (an estimate that moved). A hint that
    says the same on every answer (a constant ``Retry-After: 1``) carries none. (A
    look that ended the job is not scheduled from, so it needs no count.)"""
    if record.schedule.delay_source not in HINT_SOURCES or record.ending.phase is not Phase.WAITING:
        return record
    last = record.schedule.last_hint_s
    news = told is not None and last is not None and abs(told.delay_s - last) > max(0.5, 0.1 * last)
    return record.evolve(
        schedule=record.schedule.evolve(
            hints_followed=record.schedule.hints_followed + 1,
            hints_true=record.schedule.hints_true + int(news),
        )
    )
