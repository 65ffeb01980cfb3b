"""The schedule history: how long finished operations of one kind took.

Every finished operation leaves one piece of duration evidence (:class:`Evidence`) in
its store, written by the store in the same transaction that records its outcome
(:func:`evidence_of`, reading only the record's public attributes). The learned
schedule (``_learned.py``) reads a key's evidence back; nobody re-reads audit logs.

- ``accepted_at``: when the operation was created (the submit, or the start of
  ``wait``): every time of the evidence and of the schedule is measured from it;
- ``pending_seen_at``: the last answer that said the job was still running;
- ``ended_seen_at``: the first answer that said it had ended, in any terminal state at
  the provider (succeeded, failed, expired, ...): the job ended in
  ``(pending_seen_at, ended_seen_at]``;
- a job that timed out, was escalated before it ended, or was canceled (by us or at the
  provider) is *right-censored*: ``ended_seen_at`` is ``None``, and the evidence says
  only "it ran longer than ``pending_seen_at``", never a duration.

The schedule key (:func:`schedule_key`) names the kind of job: the caller's
``Policy.schedule_key``; else, for a job waitbound submitted (``run``, ``submit``), the
profile's name, the submit method and the submit URL's origin and path template
(``provider-kit POST http://127.0.0.1:8080/jobs``: a kind of job is what was submitted,
never where its status happens to live); else the profile's name, the status URL's
origin and the profile's ``submit.status_url_template`` when the URL matches it, or its
path template (every segment that looks like an id replaced by ``{id}``, see
:func:`path_template`), e.g. ``openai-batch https://api.openai.com/v1/batches/{id}``.
A store keeps the newest :data:`HISTORY_LIMIT` pieces per key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from urllib.parse import urlsplit

from waitbound._model._outcome import OutcomeKind
from waitbound._model._record import Record

__all__ = [
    "HISTORY_LIMIT",
    "Evidence",
    "ScheduleSummary",
    "evidence_of",
    "path_template",
    "schedule_key",
]

HISTORY_LIMIT: Final = 2000
"""A store keeps at most this many pieces of evidence per schedule key (the newest)."""

_HEX: Final = re.compile(r"[0-9a-fA-F-]{8,}")
_DIGITS: Final = re.compile(r"[0-9]+")
_MIXED: Final = re.compile(r"(?=.*[0-9])(?=.*[A-Za-z])[A-Za-z0-9_.~-]{8,}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """One finished operation's duration evidence (instants aware UTC).

    ``ended_seen_at`` ``None``: right-censored (timed out, canceled, stopped before the
    job ended): the job ran longer than ``pending_seen_at`` (or ``accepted_at``).
    """

    operation_id: str
    key: str
    accepted_at: datetime
    pending_seen_at: datetime | None
    ended_seen_at: datetime | None
    outcome: OutcomeKind
    finished_at: datetime

    @property
    def censored(self) -> bool:
        """Whether this says only "longer than" (no end was seen)."""
        return self.ended_seen_at is None

    @property
    def low_s(self) -> float:
        """Seconds from acceptance to the last answer that said running (0 without one)."""
        if self.pending_seen_at is None:
            return 0.0
        return max(0.0, (self.pending_seen_at - self.accepted_at).total_seconds())

    @property
    def high_s(self) -> float | None:
        """Seconds from acceptance to the first answer that said ended (``None``: censored);
        never below :attr:`low_s`."""
        if self.ended_seen_at is None:
            return None
        return max(self.low_s, (self.ended_seen_at - self.accepted_at).total_seconds())


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSummary:
    """One schedule key's history, as ``waitbound schedules`` lists it.

    ``version`` changes whenever the key's history does (a piece added or forgotten);
    ``jobs`` counts every piece, ``censored`` those that say only "longer than".
    """

    key: str
    jobs: int
    censored: int
    newest_at: datetime | None
    version: int


def path_template(path: str, job_id: str | None = None) -> str:
    """A URL path with every id-like segment replaced by ``{id}``.

    A segment is an id when it is the job's own id, all digits, 8 or more hex digits
    and dashes (a UUID), or 8 or more characters mixing letters and digits
    (``batch_abc123``). ``v1``, ``batches`` and ``2beta`` stay.

    >>> path_template("/v1/batches/batch_6f2a91c0/")
    '/v1/batches/{id}/'
    >>> path_template("/operations/job", job_id="job")
    '/operations/{id}'
    """
    parts = []
    for segment in path.split("/"):
        is_id = bool(segment) and (
            segment == job_id
            or _DIGITS.fullmatch(segment) is not None
            or _HEX.fullmatch(segment) is not None
            or _MIXED.fullmatch(segment) is not None
        )
        parts.append("{id}" if is_id else segment)
    return "/".join(parts)


def schedule_key(record: Record) -> str | None:
    """The schedule key of *record* (see the module's docstring): ``policy.schedule_key``;
    else ``"<profile> <METHOD> <origin><path template>"`` of the submit URL of a job
    waitbound submitted; else ``"<profile> <origin><template>"`` of the URL it was first
    told to poll, the template being the profile's ``submit.status_url_template`` when
    the URL matches it, else its path template (``None``: no URL yet). The query and
    fragment are never part of it (no secret reaches a key)."""
    if record.policy.schedule_key is not None:
        return record.policy.schedule_key
    name = record.profile.name
    if record.submit_url:
        found = _origin_and_path(record.submit_url)
        if found is None:
            return None
        origin, path = found
        method = (record.submit_method or "POST").upper()
        return f"{name} {method} {origin}{path_template(path)}"
    url = record.caller_url or record.status_url
    found = _origin_and_path(url) if url else None
    if found is None:
        return None
    origin, path = found
    template = _declared_template(record, path)
    return f"{name} {origin}{template or path_template(path, record.job_id)}"


def _origin_and_path(url: str) -> tuple[str, str] | None:
    """``(scheme://host[:port], path)`` of *url*, or ``None`` when it does not parse."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return None
    return f"{parts.scheme}://{parts.hostname or ''}{port}", parts.path


def _declared_template(record: Record, path: str) -> str | None:
    """The profile's ``submit.status_url_template`` as a key's path (``{job_id}`` read
    as ``{id}``) when *path* matches it, else ``None``."""
    template = record.profile.submit.status_url_template
    if not template or "{job_id}" not in template:
        return None
    found = _origin_and_path(template)
    declared = found[1] if found is not None else template
    pattern = "[^/]+".join(re.escape(piece) for piece in declared.split("{job_id}"))
    if re.fullmatch(pattern, path) is None:
        return None
    return declared.replace("{job_id}", "{id}")


def evidence_of(record: Record) -> Evidence | None:
    """The duration evidence a write of *record* owes its store's history: once its
    outcome is recorded, and it polled a job (``None`` otherwise, or when nothing was
    learned of the job's running time).

    Stores insert it in the same transaction as the record, ignoring a second one for
    the same operation (the first outcome's evidence stands).
    """
    if record.outcome is None or record.finished_at is None:
        return None
    key = schedule_key(record)
    if key is None:
        return None
    ended = record.ended_seen_at
    censored = (
        ended is None
        or record.cancel_requested_at is not None
        or record.outcome is OutcomeKind.CANCELED
    )
    if censored and record.pending_seen_at is None:
        return None  # nothing learned: neither an end nor a time it still ran
    return Evidence(
        operation_id=record.operation_id,
        key=key,
        accepted_at=record.created_at,
        pending_seen_at=record.pending_seen_at,
        ended_seen_at=None if censored else ended,
        outcome=record.outcome,
        finished_at=record.finished_at,
    )
