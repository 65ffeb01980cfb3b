"""Completions out, the policy: what a completion is, when each entry is attempted
again, what counts as delivered, and the one line kept when it is not (see
``docs/completions.md``).

Pure: :func:`next_attempt` (the retry schedule: backoff base 5 s, cap 300 s, 50-100 %
jitter, :data:`MAX_ATTEMPTS` attempts), :func:`attempt_of_status` (any 2xx delivers) and
:func:`attempt_of_error` (an exception's class and first line, at most 200 characters,
with the values it is told to hide — the notify secret, the target and its query —
redacted). Beside it, what signs a webhook
(:func:`webhook_signer`, Standard Webhooks, https://www.standardwebhooks.com/), the
secret's look-up (:func:`resolve_notify_secret`) and a replay
(:func:`replay_delivery`). The delivery pass that applies this policy is
``waitbound._engine._delivery``.
"""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

from waitbound._base._errors import UsageError
from waitbound._model._outcome import Outcome
from waitbound._model._push import DELIVERY_ID_PREFIX, OutboxEntry, OutboxStatus
from waitbound._profile._schedule import backoff_delay_s
from waitbound.stores import Store

if TYPE_CHECKING:
    from standardwebhooks import Webhook

__all__ = [
    "MAX_ATTEMPTS",
    "NOTIFY_SECRET_ENV",
    "RETRY_BASE_S",
    "RETRY_CAP_S",
    "WEBHOOK_TIMEOUT_S",
    "Attempt",
    "Completion",
    "OnComplete",
    "Unsendable",
    "attempt_of_error",
    "attempt_of_status",
    "next_attempt",
    "replay_delivery",
    "resolve_notify_secret",
    "webhook_signer",
]

MAX_ATTEMPTS: Final = 10
"""Attempts per entry; the last failed one marks it ``failed``."""
RETRY_BASE_S: Final = 5.0
"""Backoff base between attempts (seconds)."""
RETRY_CAP_S: Final = 300.0
"""Backoff cap between attempts (seconds)."""
WEBHOOK_TIMEOUT_S: Final = 10.0
"""The whole timeout of one webhook POST (connect, write, read; seconds)."""
NOTIFY_SECRET_ENV: Final = "WAITBOUND_NOTIFY_SECRET"
"""The environment variable holding the secret that signs completion webhooks."""

_ERROR_CHARS: Final = 200
_SERVE_EXTRA: Final = (
    "signed completion webhooks need the standardwebhooks library; "
    "install it with: pip install 'waitbound[serve]'"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """One completion, as an ``on_complete`` callable is given it.

    Delivered at least once: a crash after the callable returned but before the outbox
    recorded it calls it again with the same ``delivery_id``, so a callable with effects
    dedupes on it.

    Attributes:
        delivery_id: stable across retries (``dlv_`` and hex digits).
        operation_id: the operation that finished.
        outcome: its final outcome, read from the store when the completion is delivered.
        replay_of: the delivery this one replays (``waitbound deliveries replay``), or
            ``None``.
    """

    delivery_id: str
    operation_id: str
    outcome: Outcome
    replay_of: str | None = None


OnComplete = Callable[[Completion], object]
"""A callable given each :class:`Completion`: plain, or async (its awaitable is
awaited; the blocking API runs it with ``anyio.run``). Raising is a failed attempt."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """What one delivery attempt came to.

    Attributes:
        error: ``None`` when delivered; otherwise one line saying why not (a status
            code, or an exception's class and short message), never a secret or a body.
    """

    error: str | None = None

    @property
    def delivered(self) -> bool:
        """Whether the attempt delivered the completion."""
        return self.error is None


class Unsendable(Exception):
    """An entry that cannot be attempted (no target, its operation gone): a failed
    attempt, its message the whole error line (see :func:`attempt_of_error`)."""


def attempt_of_status(status_code: int) -> Attempt:
    """A webhook answer: any 2xx delivers; anything else (3xx included: redirects are
    never followed) is a failed attempt named by its status code."""
    if 200 <= status_code < 300:
        return Attempt()
    return Attempt(error=f"HTTP {status_code}")


def attempt_of_error(exc: BaseException, hidden: Sequence[str] = ()) -> Attempt:
    """A failed attempt from an exception: its class and first line, at most 200
    characters, every string in *hidden* (the secret, the target URL, its query)
    replaced by ``[redacted]``."""
    text = _scrubbed(str(exc), hidden)
    if isinstance(exc, Unsendable):
        return Attempt(error=_cut(text))
    return Attempt(error=_cut(f"{type(exc).__name__}: {text}" if text else type(exc).__name__))


def _scrubbed(text: str, hidden: Sequence[str]) -> str:
    """*text* on one printable line, each of *hidden* replaced by ``[redacted]``."""
    for value in sorted((h for h in hidden if h), key=len, reverse=True):
        text = text.replace(value, "[redacted]")
    text = " ".join(text.split())
    return "".join(c if c.isprintable() else "?" for c in text)


def _cut(line: str) -> str:
    return line if len(line) <= _ERROR_CHARS else line[: _ERROR_CHARS - 3] + "..."


def next_attempt(
    entry: OutboxEntry, result: Attempt, now: datetime, rng: random.Random
) -> OutboxEntry:
    """The entry after one attempt: delivered; or pending until the next attempt; or,
    after :data:`MAX_ATTEMPTS`, failed.

    The wait after the n-th failed attempt (n from 1) is uniform in
    ``[0.5 * raw, raw]`` seconds, ``raw = min(RETRY_CAP_S, RETRY_BASE_S * 2**(n - 1))``:
    5, 10, 20, …, 300 s. The lease fields are kept: ``Store.settle_outbox`` checks them
    and releases the lease.
    """
    attempts = entry.attempts + 1
    if result.delivered:
        return replace(entry, status=OutboxStatus.DELIVERED, attempts=attempts, delivered_at=now)
    if attempts >= MAX_ATTEMPTS:
        return replace(
            entry, status=OutboxStatus.FAILED, attempts=attempts, last_error=result.error
        )
    delay_s = backoff_delay_s(  # its own shape: doubling, 50-100 % (not the polls' defaults)
        attempts - 1,
        base_delay_s=RETRY_BASE_S,
        max_delay_s=RETRY_CAP_S,
        rng=rng,
        growth=2.0,
        jitter_floor=0.5,
    )
    return replace(
        entry,
        attempts=attempts,
        last_error=result.error,
        next_attempt_at=now + timedelta(seconds=delay_s),
    )


def webhook_signer(secret: str) -> Webhook:
    """The Standard Webhooks signer of *secret* (``whsec_`` and base64, as
    ``standardwebhooks.Webhook`` takes it), held to the receivers' rule: its key decodes
    to at least 16 bytes (``waitbound._profile._webhooks.standard_secret_key``).

    Raises:
        UsageError: the ``standardwebhooks`` library is missing (the message names
            ``pip install 'waitbound[serve]'``), or *secret* is not a usable secret (the
            message never shows it).
    """
    try:
        from standardwebhooks import Webhook

        from waitbound._profile._webhooks import MIN_STANDARD_KEY_BYTES, standard_secret_key
    except ImportError:
        raise UsageError(_SERVE_EXTRA) from None
    try:
        standard_secret_key(secret)
        return Webhook(secret)
    except Exception:
        raise UsageError(
            f"the notify secret (${NOTIFY_SECRET_ENV}) is not a Standard Webhooks secret: "
            f"expected whsec_ followed by the base64 of a key of at least "
            f"{MIN_STANDARD_KEY_BYTES} bytes (its value is not shown)"
        ) from None


def resolve_notify_secret(notify_url: str | None, given: str | None) -> str | None:
    """The secret that signs completion webhooks: *given*, else
    ``$WAITBOUND_NOTIFY_SECRET`` (``None`` when neither is set).

    Raises:
        UsageError: *notify_url* is set and no secret is known (the message names the
            variable), or the secret cannot sign (see :func:`webhook_signer`).
    """
    secret = given if given is not None else (os.environ.get(NOTIFY_SECRET_ENV) or None)
    if notify_url is not None:
        if secret is None:
            raise UsageError(
                f"a notify URL needs the secret that signs completion webhooks: set "
                f"${NOTIFY_SECRET_ENV} (whsec_…; in Python also notify_secret=); nothing was stored"
            )
        webhook_signer(secret)
    return secret


def replay_delivery(store: Store, delivery_id: str, *, now: datetime) -> OutboxEntry:
    """Send a stored delivery again, as a new delivery (``waitbound deliveries replay``).

    The new entry has a new random id (``dlv_`` and 32 hex digits; receivers that dedupe
    on ``webhook-id`` take it as new), ``replay_of`` = *delivery_id*, the same channel,
    target and payload, and is pending now. The original is left as it is.

    Raises:
        UsageError: no delivery with this id.
    """
    original = store.get_outbox(delivery_id)
    if original is None:
        raise UsageError(
            f"no delivery {delivery_id[:80]!r} in the store; list them with waitbound deliveries"
        )
    replay = OutboxEntry(
        delivery_id=DELIVERY_ID_PREFIX + secrets.token_hex(16),
        operation_id=original.operation_id,
        channel=original.channel,
        target=original.target,
        payload=original.payload,
        created_at=now,
        next_attempt_at=now,
        replay_of=original.delivery_id,
    )
    return store.add_outbox(replay)
