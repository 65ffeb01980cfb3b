"""The small values a record's parts hold: the phase, request kinds, grants, decisions.

They live below :mod:`waitbound._model._record_parts` (which re-exports them) so that
what reads only their types (the record's read-only flat names,
:mod:`waitbound._model._record_fields`) needs no part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal

from waitbound._base._json import JSON, JSONScalar

__all__ = ["Decision", "DecisionRequest", "Grants", "Phase", "RequestKind"]

RequestKind = Literal["submit", "status", "result", "errors", "cancel"]
"""The kinds of request an operation sends."""


class Phase(StrEnum):
    """Where an operation is in its life."""

    SUBMITTING = "submitting"
    """The job request is recorded; its receipt is not (yet)."""
    WAITING = "waiting"
    """Polling the status endpoint."""
    FETCHING_RESULT = "fetching_result"
    """Terminal success seen; fetching the result endpoint (once)."""
    FETCHING_ERRORS = "fetching_errors"
    """Completed with errors; fetching the first page of the errors (once)."""
    DONE = "done"
    """An outcome is recorded; nothing more is sent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Grants:
    """What people's decisions added to the policy's limits (never a reset: the
    counters keep counting, the limits grow by these).

    Attributes:
        requests, transport_failures, rate_limited: added to ``max_requests``,
            ``max_transport_failures`` and ``max_rate_limited``.
        extensions: how many grants were made (bounded by ``policy.max_extensions``).
        pending_states: provider states a person said to read as pending for this
            operation only (``treat_as_pending``).
    """

    requests: int = 0
    transport_failures: int = 0
    rate_limited: int = 0
    extensions: int = 0
    pending_states: tuple[JSONScalar, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRequest:
    """A decision a person is asked for: an escalation, a timeout, or an agent's request.

    Attributes:
        opened_at: when it was opened.
        due_at: when it is closed as ``decision_timeout`` if nobody answers.
        requested_by: ``waitbound`` (the operation stopped) or who asked (an agent's
            label, e.g. ``agent:mcp:transcode``).
        minutes, checks, why: an agent's proposed extension and its reason (``None``
            for an escalation).
        options: the options open when it was opened (checked again at the decision).
    """

    opened_at: datetime
    due_at: datetime
    options: tuple[str, ...] = ()
    requested_by: str = "waitbound"
    minutes: float | None = None
    checks: int | None = None
    why: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """One decision a person made, as recorded (also an audit event ``decided``).

    Attributes:
        option: what was decided (``extend``, ``cancel``, ``abandon``, …, or
            ``decision_timeout`` when nobody decided in time).
        by: who decided; ``why``: their reason; ``at``: when.
        detail: what the decision changed: the limits before and after, the grant, the
            new profile's version, the credential label, the evidence (never a secret).
    """

    option: str
    by: str
    why: str
    at: datetime
    detail: dict[str, JSON] = field(default_factory=dict)
