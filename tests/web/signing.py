"""Deliveries signed as each provider signs them, for the receiver's tests.

Standard Webhooks signatures are made by the ``standardwebhooks`` library itself;
GitHub's and Stripe's by their documented recipe (HMAC-SHA256, hex).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SECRET_A = "whsec_" + base64.b64encode(b"A" * 24 + b"first-secret").decode()
SECRET_B = "whsec_" + base64.b64encode(b"B" * 24 + b"second-secret").decode()
SECRET_OTHER = "whsec_" + base64.b64encode(b"attacker-chosen-secret-bytes").decode()
GH_A = "github-secret-number-one"
GH_B = "github-secret-number-two"
ST_A = "whsec_stripe_secret_number_one"
ST_B = "whsec_stripe_secret_number_two"


def body_of(payload: object) -> bytes:
    return json.dumps(payload).encode()


def standard_headers(
    secret: str | list[str], body: bytes, *, msg_id: str = "msg_1", at: datetime = T0
) -> dict[str, str]:
    """``webhook-id``, ``webhook-timestamp``, ``webhook-signature`` (one ``v1,`` per secret)."""
    secrets = [secret] if isinstance(secret, str) else secret
    text = body.decode()
    signatures = " ".join(Webhook(s).sign(msg_id, at, text) for s in secrets)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signatures,
    }


def github_headers(
    secret: str, body: bytes, *, delivery: str = "72d3162e-cc78-11e3"
) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Event": "workflow_run",
    }


def stripe_headers(secret: str | list[str], body: bytes, *, at: datetime = T0) -> dict[str, str]:
    secrets = [secret] if isinstance(secret, str) else secret
    t = str(int(at.timestamp()))
    signed = t.encode() + b"." + body
    parts = [f"t={t}"] + [
        "v1=" + hmac.new(s.encode(), signed, hashlib.sha256).hexdigest() for s in secrets
    ]
    return {"Stripe-Signature": ",".join(parts)}
