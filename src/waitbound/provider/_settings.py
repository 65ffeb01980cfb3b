"""How the provider kit's endpoints answer (:class:`ProviderSettings`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from waitbound._base._json import JSON

__all__ = ["ProviderSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderSettings:
    """How the endpoints answer.

    Attributes:
        poll_after_s: the minimum wait agents are told before the next status call
            (``poll_after_seconds``, ``Retry-After``), in seconds.
        estimate_s: the expected duration of a job from its request body, in seconds
            (``estimated_duration_seconds``); ``None`` when unknown.
        cancelable: whether a job of this request body accepts a cancel from its start
            (``None``: every job does, until its work says otherwise with
            ``progress(cancelable=False)``). A job whose work refuses cancels at once
            must say so here: its receipt says ``cancelable`` only while a cancel would
            be accepted.
        inline_result_max_bytes: a result whose JSON is larger is served only at
            ``result_url``.
        errors_limit: the page size ``errors_url`` names (at most 1000).
        webhook_secret: the Standard Webhooks secret (``whsec_…``) that signs completion
            webhooks; ``None`` sends none.
        notify_url_field: the start body's key naming a job's webhook URL.
        webhook_timeout_s: the whole timeout of one webhook POST, in seconds.
        webhook_retry_delays_s: the waits before the 2nd, 3rd… delivery attempt, in
            seconds (a 2xx answer ends them).
        events_interval_s: how often the SSE stream looks at the job, in seconds.
    """

    poll_after_s: float = 2.0
    estimate_s: Callable[[JSON], float | None] | None = None
    cancelable: Callable[[JSON], bool] | None = None
    inline_result_max_bytes: int = 16_384
    errors_limit: int = 100
    webhook_secret: str | None = None
    notify_url_field: str = "notify_url"
    webhook_timeout_s: float = 10.0
    webhook_retry_delays_s: tuple[float, ...] = (1.0, 5.0, 30.0)
    events_interval_s: float = 0.5
