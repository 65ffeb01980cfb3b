"""``POST /webhooks/{provider}``: a verified delivery is stored in the inbox, then
acknowledged.

The receiver reads the body under its cap, verifies it (``waitbound._profile._webhooks.verify``),
reads the delivery (:func:`read_delivery`: every secret the service holds redacted
first, then the job id, the event type and the payload, bounded) and stores it
(unique on provider and webhook id) before it answers 2xx, so an acknowledged delivery
is never lost: the deliveries arriving together are stored many to a transaction by
the receiver's group commit (``web/_inbound_commit.py``, ``Store.put_deliveries``), and
each is answered once its transaction committed. Everything else is a 4xx JSON
``{"error": CODE, "detail": LINE}`` and stores nothing; a store that fails is a 503
(the provider retries). See ``docs/webhooks.md``.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final

import anyio.to_thread
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from waitbound._base._jmes import search
from waitbound._base._json import JSON, Ambiguous, redact_json
from waitbound._base._secrets import redact_text, secret_parts
from waitbound._model._push import InboundDelivery
from waitbound._observe._metrics import record_webhook_delivery
from waitbound._profile._webhooks import Verified, WebhookRejected, verify
from waitbound.web._config import Receiver, redaction_strings

if TYPE_CHECKING:
    from waitbound.web._service import Service

__all__ = [
    "EVENT_TYPE_KEYS",
    "MAX_JOB_ID_CHARS",
    "MAX_KEPT_PAYLOAD_CHARS",
    "read_body",
    "read_delivery",
    "receive_webhook",
]

MAX_KEPT_PAYLOAD_CHARS: Final = 65_536
"""A payload whose JSON is longer than this is kept as its first
:data:`KEPT_HEAD_CHARS` characters of text, and is not authoritative."""
KEPT_HEAD_CHARS: Final = 2_000
MAX_JOB_ID_CHARS: Final = 1_024
"""A longer job id names no job (it is kept as ``None``: stored, never matched)."""
MAX_EVENT_TYPE_CHARS: Final = 200
EVENT_TYPE_KEYS: Final = ("type", "action", "event")
"""Where a payload names its event type, first string wins."""

_LOG = logging.getLogger("waitbound.serve")
_CONTENT_LENGTH: Final = re.compile(r"[0-9]{1,20}")


def read_delivery(
    receiver: Receiver, verified: Verified, now: datetime, *, secrets: Sequence[str] = ()
) -> InboundDelivery:
    """The inbox entry a verified delivery makes (pure).

    First every secret — the receiver's own (and the base64 part of a ``whsec_`` one)
    and each of *secrets* — is replaced by ``[redacted]`` in the payload (every string
    and key) and in the webhook id; everything below is read from that redacted
    payload, so no secret reaches the job id, the event type, the inbox, the audit log,
    or (for an authoritative receiver) the outcome and the completions sent out.

    - ``job_id``: the receiver's expression over the payload; a string is kept as it
      is, a number as its JSON text (``123``, as a status body's job id is read);
      anything else — missing, null, a list, an empty, over-long or not printable
      string (a control character such as ``\u0000``, which no job id holds and a
      PostgreSQL text column refuses), a key the payload repeats with different
      values — is ``None`` (the delivery is stored, payload and all, but never
      matched).
    - ``event_type``: the first of ``type``, ``action``, ``event`` at the payload's top
      level that is a non-empty string (cut to 200 characters); ``None`` when it is not
      printable text.
    - ``payload``: kept whole up to 64 KiB of JSON, else as its first 2,000 characters
      of text, and then not authoritative (a cut payload cannot be classified).

    Args:
        receiver: the ``[webhooks.NAME]`` it came to.
        verified: what :func:`waitbound._profile._webhooks.verify` returned.
        now: when it was received (aware UTC).
        secrets: more strings to hide: every secret the service holds
            (``Service.secrets``).
    """
    hidden = _hidden(receiver.secrets, tuple(secrets))
    redacted = redact_json(verified.payload, hidden)
    payload: dict[str, JSON] = redacted if isinstance(redacted, dict) else {}
    text = json.dumps(payload, ensure_ascii=False)
    kept = len(text) <= MAX_KEPT_PAYLOAD_CHARS
    return InboundDelivery(
        provider=receiver.name,
        webhook_id=redact_text(verified.webhook_id, hidden),
        received_at=now,
        job_id=_job_id(search(receiver.job_id, payload)),
        event_type=_event_type(payload),
        payload=payload if kept else text[:KEPT_HEAD_CHARS] + "…",
        authoritative=receiver.authoritative and kept,
    )


@functools.lru_cache(maxsize=64)
def _hidden(receiver_secrets: tuple[str, ...], secrets: tuple[str, ...]) -> tuple[str, ...]:
    """The strings :func:`read_delivery` redacts, computed once per receiver and
    service (they are the configuration's, not the delivery's)."""
    return secret_parts([*redaction_strings(receiver_secrets), *secrets])


async def read_body(request: Request, limit: int, timeout_s: float = 10.0) -> bytes:
    """The request's body, at most *limit* bytes, read while it streams, all of it
    within *timeout_s* seconds.

    Raises:
        WebhookRejected: ``too_large`` (413) when ``Content-Length`` says more than
            *limit* (nothing is read) or the streamed body passes it;
            ``bad_content_length`` (400) for a ``Content-Length`` that is not a number;
            ``disconnected`` (400) when the client went away mid-body; ``body_timeout``
            (408) when the body has not all arrived within *timeout_s* seconds (a client
            trickling it).
    """
    length = request.headers.get("content-length")
    if length is not None:
        if not _CONTENT_LENGTH.fullmatch(length.strip()):
            raise WebhookRejected("bad_content_length", "Content-Length is not a number")
        if int(length) > limit:
            raise _too_large(limit)
    body = bytearray()
    with anyio.move_on_after(timeout_s):
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise _too_large(limit)
        except ClientDisconnect:
            raise WebhookRejected("disconnected", "the client went away mid-body") from None
        return bytes(body)
    raise WebhookRejected(
        "body_timeout", f"the body did not arrive within {timeout_s:g} s", status=408
    )


async def receive_webhook(request: Request) -> Response:
    """``POST /webhooks/{provider}``: verify, store, acknowledge.

    Answers:
        200 ``{"received": true, "duplicate": false, "matched": BOOL}``: stored now;
        ``matched`` says whether an operation expecting it was found.
        200 ``{"received": true, "duplicate": true, "matched": false}``: a valid
        delivery whose id is stored already (a retry): acknowledged, nothing written.
        404: no receiver of that name. 400/401/413: see :class:`WebhookRejected`.
        503: the store failed; nothing is acknowledged, so the provider retries.
    """
    service: Service = request.app.state.service
    name = request.path_params.get("provider", "")
    receiver = service.config.receivers.get(name)
    if receiver is None:
        record_webhook_delivery("(unknown)", "unknown_receiver")
        return _error(404, "unknown_provider", "no [webhooks.NAME] receiver has this name")
    with service.inbound.handling(service.store):
        return await _receive(request, service, receiver)


async def _receive(request: Request, service: Service, receiver: Receiver) -> Response:
    try:
        body = await read_body(request, receiver.max_body_bytes)
        now = service.clock.now()
        verified = verify(
            receiver.scheme,
            receiver.secrets,
            request.headers,
            body,
            now=now,
            tolerance_s=receiver.tolerance_s,
        )
    except WebhookRejected as rejected:
        record_webhook_delivery(receiver.name, rejected.code)
        return _error(rejected.status, rejected.code, rejected.detail)
    delivery = read_delivery(receiver, verified, now, secrets=service.secrets)
    try:
        stored = await service.inbound.put(service.store, delivery)
    except Exception as exc:  # any store failure: the provider must retry
        _LOG.warning(
            "webhook %s: storing delivery %s failed (%s)",
            receiver.name,
            delivery.webhook_id,
            type(exc).__name__,
        )
        record_webhook_delivery(receiver.name, "store_unavailable")
        return _error(503, "store_unavailable", "the delivery could not be stored; retry later")
    verdict = "duplicate" if stored is None else "matched" if stored.operation_id else "unmatched"
    record_webhook_delivery(receiver.name, verdict)
    if stored is not None:
        try:
            service.delivered(stored)
        except Exception as exc:  # a failed nudge: the sweep applies it within a second
            _LOG.warning("webhook %s: nudge failed (%s)", receiver.name, type(exc).__name__)
    return JSONResponse(
        {
            "received": True,
            "duplicate": stored is None,
            "matched": stored is not None and stored.operation_id is not None,
        }
    )


def _job_id(value: JSON) -> str | None:
    if isinstance(value, Ambiguous | bool):
        return None
    if isinstance(value, str):
        text = value
    elif isinstance(value, int | float):
        text = json.dumps(value)
    else:
        return None
    return text if 0 < len(text) <= MAX_JOB_ID_CHARS and text.isprintable() else None


def _event_type(payload: dict[str, JSON]) -> str | None:
    for key in EVENT_TYPE_KEYS:
        value = payload.get(key)
        if isinstance(value, str) and not isinstance(value, Ambiguous) and value:
            return value[:MAX_EVENT_TYPE_CHARS] if value.isprintable() else None
    return None


def _too_large(limit: int) -> WebhookRejected:
    return WebhookRejected("too_large", f"the body is larger than {limit} bytes", status=413)


def _error(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status)
