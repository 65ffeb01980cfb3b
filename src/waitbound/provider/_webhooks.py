"""Signed completion webhooks (Standard Webhooks, https://www.standardwebhooks.com/).

When a job with a ``notify_url`` ends, one ``POST`` is sent there: the JSON payload
``{"type": "job.completed", "timestamp": RFC 3339, "data": <the job's status body>}``
with the headers ``webhook-id`` (``msg_`` and the job id: the same for every attempt, so
the receiver can drop duplicates), ``webhook-timestamp`` and ``webhook-signature``
(``v1,`` and the base64 HMAC-SHA256 of ``id.timestamp.body``, made by the
``standardwebhooks`` library). A 2xx answer ends the attempts; otherwise they are
repeated after ``webhook_retry_delays_s``. A delivery is a hint: the status endpoint
stays the truth.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime

import anyio
import httpx

from waitbound._base._json import JSON
from waitbound._engine._outbox import webhook_signer
from waitbound.provider._settings import ProviderSettings

__all__ = ["deliver_completion"]

_LOG = logging.getLogger("waitbound.provider")


async def deliver_completion(
    url: str,
    secret: str,
    body: dict[str, JSON],
    *,
    settings: ProviderSettings,
    client: httpx.AsyncClient | None,
    now: Callable[[], datetime],
) -> bool:
    """Send the signed completion webhook for the job *body* describes to *url*.

    Returns whether a 2xx answer came back (after at most
    ``1 + len(settings.webhook_retry_delays_s)`` attempts).

    Raises:
        UsageError: *secret* is not a Standard Webhooks secret, or the library is missing.
    """
    signer = webhook_signer(secret)
    message_id = f"msg_{body['job_id']}"
    sent_at = now()
    payload = json.dumps(
        {"type": "job.completed", "timestamp": sent_at.isoformat(), "data": body},
        separators=(",", ":"),
        ensure_ascii=False,
    )
    headers = {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": signer.sign(message_id, sent_at, payload),
    }
    own = client is None
    http = client or httpx.AsyncClient(timeout=settings.webhook_timeout_s)
    try:
        for attempt, delay in enumerate((0.0, *settings.webhook_retry_delays_s)):
            await anyio.sleep(delay)
            try:
                answer = await http.post(
                    url, content=payload, headers=headers, timeout=settings.webhook_timeout_s
                )
            except httpx.HTTPError as error:
                _LOG.warning("webhook %s attempt %d: %s", message_id, attempt + 1, error)
                continue
            if answer.is_success:
                return True
            _LOG.warning(
                "webhook %s attempt %d: HTTP %d", message_id, attempt + 1, answer.status_code
            )
        return False
    finally:
        if own:
            await http.aclose()
