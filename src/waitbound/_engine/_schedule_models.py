"""Learned schedules of one store, computed at most once per key per interval.

The controller stays pure: it is handed a :data:`ModelLookup` (a function of the record
and the time), and this module's :class:`ScheduleModels` is the one drivers and the
worker hand it. It reads a key's history version from the store at most once every
:data:`CHECK_INTERVAL_S` seconds (by the time of the answer being decided, so a fake
clock decides it in tests), reads the history again only when that version changed,
and plans again only for a history or bounds it has not planned for: a poll costs a
dictionary look-up and one step of the plan (``LearnedSchedule.next_delay_s``).

A store that keeps no history (a third-party :class:`~waitbound.stores.Store` without
``history_version``), or that fails to answer, gives no model: the formula applies.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from waitbound._base._errors import StoreError
from waitbound._model._history import Evidence, schedule_key
from waitbound._model._record import Policy, Record
from waitbound._rules._learned import (
    MIN_JOBS,
    LearnedSchedule,
    ModelLookup,
    estimate,
    formula_lag_s,
    plan,
)

__all__ = ["CHECK_INTERVAL_S", "ModelLookup", "ScheduleModels", "models_for"]

CHECK_INTERVAL_S: Final = 60.0
"""A key's history version is read from the store at most this often (seconds)."""

_KEPT: Final = 256
"""Keys (and plans) kept per store; the least recently used go first."""


@dataclass(slots=True)
class _Entry:
    checked_at: datetime
    version: int
    evidence: list[Evidence]


def _bounds(policy: Policy) -> tuple[float, float, float | None, float, float, float]:
    """What a plan depends on besides the history."""
    return (
        policy.floor_s,
        policy.max_delay_s,
        policy.lag_target_s,
        policy.base_delay_s,
        policy.backoff_growth,
        policy.backoff_jitter_floor,
    )


class ScheduleModels:
    """The learned schedules of one store (thread-safe; see the module docstring).

    Args:
        store: the store whose history is read (``history_version``,
            ``schedule_history``).
        interval_s: how often a key's version is read at most (seconds).
    """

    def __init__(self, store: object, *, interval_s: float = CHECK_INTERVAL_S) -> None:
        self._store = store
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._plans: OrderedDict[tuple[object, ...], LearnedSchedule | None] = OrderedDict()
        self.computed = 0
        """Plans computed so far (a measure of the cache, for tests and benchmarks)."""

    def __call__(self, record: Record, now: datetime) -> LearnedSchedule | None:
        """The learned schedule for *record* at *now*, or ``None``: the policy names
        the formula, the record has no schedule key, its key has fewer than
        :data:`~waitbound._rules._learned.MIN_JOBS` ended jobs, or the store keeps no history."""
        policy = record.contract.policy
        if policy.schedule != "learned":
            return None
        key = schedule_key(record)
        if key is None:
            return None
        entry = self._entry(key, now)
        if entry is None:
            return None
        wanted = (key, entry.version, *_bounds(policy))
        with self._lock:
            if wanted in self._plans:
                self._plans.move_to_end(wanted)
                return self._plans[wanted]
        model = _planned(key, entry, policy)
        with self._lock:
            self.computed += 1
            self._plans[wanted] = model
            while len(self._plans) > _KEPT:
                self._plans.popitem(last=False)
        return model

    def _entry(self, key: str, now: datetime) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                age_s = (now - entry.checked_at).total_seconds()
                if 0 <= age_s < self._interval_s:
                    return entry
        version_of = getattr(self._store, "history_version", None)
        history_of = getattr(self._store, "schedule_history", None)
        if version_of is None or history_of is None:
            return None
        try:
            version = int(version_of(key))
            if entry is not None and entry.version == version:
                evidence = entry.evidence
            else:
                evidence = list(history_of(key))
        except StoreError:
            return None
        fresh = _Entry(checked_at=now, version=version, evidence=evidence)
        with self._lock:
            self._entries[key] = fresh
            while len(self._entries) > _KEPT:
                self._entries.popitem(last=False)
        return fresh


def _planned(key: str, entry: _Entry, policy: Policy) -> LearnedSchedule | None:
    """The plan for one history and one policy's bounds (``None``: too little history)."""
    floor_s, cap_s = policy.floor_s, policy.max_delay_s
    survival = estimate(
        entry.evidence, resolution_s=max(0.25, floor_s / 2.0), max_step_s=cap_s / 4.0
    )
    if survival.ended < MIN_JOBS:
        return None
    target = policy.lag_target_s
    if target is None:
        target = formula_lag_s(
            survival,
            base_delay_s=policy.base_delay_s,
            max_delay_s=cap_s,
            growth=policy.backoff_growth,
            jitter_floor=policy.backoff_jitter_floor,
            floor_s=floor_s,
        )
    return plan(
        survival,
        key=key,
        history_version=entry.version,
        floor_s=floor_s,
        cap_s=cap_s,
        lag_target_s=target,
    )


_BY_STORE: weakref.WeakKeyDictionary[object, ScheduleModels] = weakref.WeakKeyDictionary()
_BY_STORE_LOCK: Final = threading.Lock()


def models_for(store: object) -> ScheduleModels:
    """The one :class:`ScheduleModels` of *store* in this process (made on first use),
    so every driver and worker on a store shares its plans."""
    with _BY_STORE_LOCK:
        try:
            found = _BY_STORE.get(store)
        except TypeError:  # a store that cannot be weakly referenced: its own cache
            return ScheduleModels(store)
        if found is None:
            found = ScheduleModels(store)
            _BY_STORE[store] = found
        return found
