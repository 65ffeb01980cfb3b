"""Verifying webhook deliveries: Standard Webhooks, GitHub's and Stripe's schemes.

Pure functions of (secrets, headers, body, now): no clock is read here. See
``docs/webhooks.md``.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Scheme"]


class Scheme(StrEnum):
    """How a provider signs its deliveries."""

    STANDARD = "standard"
    """Standard Webhooks: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``
    (``v1,`` base64 HMAC-SHA256 of ``id.timestamp.body``), ``whsec_`` secrets."""
    GITHUB = "github"
    """GitHub: ``X-Hub-Signature-256: sha256=`` hex HMAC-SHA256 of the body;
    ``X-GitHub-Delivery`` names the delivery."""
    STRIPE = "stripe"
    """Stripe: ``Stripe-Signature: t=…,v1=…`` (hex HMAC-SHA256 of ``t.body``); the
    event's ``id`` names the delivery."""
