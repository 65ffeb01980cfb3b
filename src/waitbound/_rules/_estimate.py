"""The provider's own estimate of when a job ends, kept from its answers (the grant a
decision suggests from it is ``_options.estimate_grant``).

A pure module (see the rules atop ``_controller.py``). A status answer may state when
the job should end: an estimated duration (the profile's ``estimated_duration``, e.g.
the provider kit's ``estimated_duration_seconds``, counted from the job's start), its
own expiry time (``expires_at``: it ends by then, one way or the other), or a hint on
a pending answer at least as long as the backoff's cap (``Retry-After``, a body poll
hint: "look again then"). The newest
one is kept on the record (``estimated_end_at``, and ``estimate_from`` in words) and
a person's decision is suggested a grant that covers it (``docs/decisions.md``,
"The suggested grant").
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Final

from waitbound._base._numbers import rough_duration
from waitbound._model._observation import Observation
from waitbound._model._record import Record
from waitbound._profile._contract import Classification, Reading
from waitbound._profile._schedule import read_hints

__all__ = ["provider_estimate"]

_LONGEST_S: Final = 366 * 24 * 3600.0
"""An estimate further out than this (seconds) is no estimate (a year and a day)."""


def provider_estimate(
    record: Record, observation: Observation, reading: Reading | None
) -> tuple[datetime | None, str | None]:
    """When the job should end by this answer, and where that comes from in words:
    ``(estimated_end_at, estimate_from)``; the record's own pair when the answer states
    none (or is no pending answer: an end needs no estimate).

    In order: the estimated duration (from the operation's creation, the job's start as
    we know it), the job's expiry time, a hint on a pending 2xx answer at least as long
    as the backoff's cap (``max_delay_s``: a shorter one says how fast to look, not
    when the job ends). A value that is not a finite non-negative number, or further
    than a year out, is not an estimate.
    """
    kept = record.answer.estimated_end_at, record.answer.estimate_from
    pending = reading is not None and reading.classification is Classification.PENDING
    code = observation.http_status
    if reading is None or not pending or code is None or not 200 <= code < 300:
        return kept
    now = observation.at
    seconds = reading.estimated_duration_s
    if (
        isinstance(seconds, int | float)
        and not isinstance(seconds, bool)
        and math.isfinite(seconds)
        and 0 <= seconds <= _LONGEST_S
    ):
        end = record.contract.created_at + timedelta(seconds=float(seconds))
        return end, f"the provider's estimated duration of {rough_duration(float(seconds))}"
    expires = reading.expires_at
    if expires is not None and now < expires <= now + timedelta(seconds=_LONGEST_S):
        return expires, "the job's own expiry time (expires_at)"
    hint, _ = read_hints(observation.headers, reading, record.contract.profile, now=now)
    if hint is not None and record.contract.policy.max_delay_s <= hint.delay_s <= _LONGEST_S:
        end = now + timedelta(seconds=hint.delay_s)
        again = rough_duration(hint.delay_s)
        return end, f"the provider's hint ({hint.origin}: look again in {again})"
    return kept
