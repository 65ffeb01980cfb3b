"""Verifying webhook deliveries: Standard Webhooks, GitHub's and Stripe's schemes.

Pure functions of (secrets, headers, body, now): no clock is read here. Every way a
delivery can be wrong — a missing or garbled header, a forged signature, a timestamp
out of tolerance, a body that is not a UTF-8 JSON object — is one
:class:`WebhookRejected` with a short ``code``, a one-line ``detail`` (never a secret,
never the body) and the HTTP ``status`` to answer. See ``docs/webhooks.md``.

Also here: a profile's ``webhook`` key (:class:`WebhookContract`), how its provider's
deliveries are signed and which job they name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final

from waitbound._base._errors import ProfileError, WaitboundError
from waitbound._base._jmes import Expression, compile_expression
from waitbound._base._json import JSON, Ambiguous, NestingError, parse_provider_json
from waitbound._profile._sections import checked_section

__all__ = [
    "MAX_SIGNATURE_HEADER_CHARS",
    "MAX_WEBHOOK_ID_CHARS",
    "MIN_SHARED_SECRET_CHARS",
    "MIN_STANDARD_KEY_BYTES",
    "STANDARD_SECRET_PREFIX",
    "WEBHOOK_KEYS",
    "Scheme",
    "Verified",
    "WebhookContract",
    "WebhookRejected",
    "body_digest_id",
    "parse_webhook_contract",
    "standard_secret_key",
    "verify",
]

STANDARD_SECRET_PREFIX: Final = "whsec_"
MIN_STANDARD_KEY_BYTES: Final = 16
"""The shortest HMAC key a ``whsec_`` secret may decode to (providers issue 24-64 bytes;
a 1-byte key is forged in 256 guesses)."""
MIN_SHARED_SECRET_CHARS: Final = 16
"""The shortest GitHub or Stripe secret (used as written, as the HMAC key)."""
MAX_WEBHOOK_ID_CHARS: Final = 255
MAX_SIGNATURE_HEADER_CHARS: Final = 4096
"""A signature header longer than this is refused unread (a few signatures fit easily)."""
MAX_UNIX_TIME: Final = 253_402_300_799
"""9999-12-31T23:59:59Z: the last instant a ``datetime`` holds."""
WEBHOOK_KEYS: Final = frozenset(("scheme", "job_id", "authoritative", "documentation", "notes"))
"""The keys of a profile's ``webhook`` object."""

_WEBHOOK_ID: Final = re.compile(rf"[\x21-\x7e]{{1,{MAX_WEBHOOK_ID_CHARS}}}")
_UNIX_TIME: Final = re.compile(r"0|[1-9][0-9]{0,11}")
_PRINTABLE: Final = re.compile(r"[\x20-\x7e]*")
_BASE64: Final = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_HEX_SHA256: Final = re.compile(r"[0-9a-fA-F]{64}")
_URL: Final = re.compile(r"https?://\S+")


class Scheme(StrEnum):
    """How a provider signs its deliveries."""

    STANDARD = "standard"
    """Standard Webhooks: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``
    (``v1,`` base64 HMAC-SHA256 of ``id.timestamp.body``), ``whsec_`` secrets."""
    GITHUB = "github"
    """GitHub: ``X-Hub-Signature-256: sha256=`` hex HMAC-SHA256 of the body; the
    delivery is named by the digest of that signed body (``X-GitHub-Delivery`` is not
    signed)."""
    STRIPE = "stripe"
    """Stripe: ``Stripe-Signature: t=…,v1=…`` (hex HMAC-SHA256 of ``t.body``); the
    event's ``id`` names the delivery."""


class WebhookRejected(WaitboundError):
    """A delivery that is not verified: nothing of it may be stored.

    Attributes:
        code: short snake_case reason (``missing_headers``, ``malformed_signature``,
            ``bad_signature``, ``stale``, ``future``, ``not_json``, ``not_utf8``,
            ``bad_id``, …); the table is in ``docs/webhooks.md``.
        detail: one line for the sender; never a secret, never the body.
        status: the HTTP status to answer: 400 (malformed), 401 (not authentic or not
            fresh), 413 (too large).
    """

    def __init__(self, code: str, detail: str, *, status: int = 400) -> None:
        self.code = code
        self.detail = detail
        self.status = status
        super().__init__(f"{code}: {detail}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Verified:
    """A delivery whose signature matched one of the receiver's secrets.

    Attributes:
        webhook_id: the delivery's id, always one the signature covers: the signed
            ``webhook-id`` (standard), the Stripe event's ``id`` (inside the signed
            body), or for GitHub, whose ``X-GitHub-Delivery`` is not signed,
            ``sha256:`` and the hex SHA-256 of the raw body (:func:`body_digest_id`);
            1-255 printable ASCII characters, no spaces.
        sent_at: the signed timestamp, aware UTC (``None`` for GitHub, which signs none).
        payload: the body, a JSON object read by
            :func:`waitbound._base._json.parse_provider_json` (not redacted yet).
    """

    webhook_id: str
    sent_at: datetime | None
    payload: dict[str, JSON]


def verify(
    scheme: Scheme,
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: datetime,
    tolerance_s: float,
) -> Verified:
    """Verify one delivery by *scheme* with any of *secrets* (several during a rotation).

    The signature is checked first, then the signed timestamp, then the body is read;
    so ``stale`` and ``future`` mean "authentic but out of time", and a forged body is
    never parsed.

    - ``standard`` (Standard Webhooks 1.0): ``webhook-id``, ``webhook-timestamp`` (Unix
      seconds) and ``webhook-signature`` (space-separated ``v1,<base64>``; other
      versions are ignored). The expected signature is made by the ``standardwebhooks``
      library (``Webhook(secret).sign(id, timestamp, body)``) and compared with each
      ``v1`` signature by :func:`hmac.compare_digest`. The library's own ``verify`` is
      not called: it reads the system clock and fixes the tolerance at 5 minutes,
      where here *now* is injected and *tolerance_s* configured. Secrets are
      ``whsec_`` + base64 (see :func:`standard_secret_key`).
    - ``github``: ``X-Hub-Signature-256: sha256=<hex>``, HMAC-SHA256 of the raw body
      keyed by the secret's UTF-8 bytes. GitHub signs no timestamp, so no freshness is
      checked, and does not sign ``X-GitHub-Delivery`` either (it is required, 1-255
      printable characters, and then dropped): anyone holding one captured delivery
      could resend it under fresh ids. So the webhook id is the digest of the signed
      body (:func:`body_digest_id`), and a replay, whatever its ``X-GitHub-Delivery``,
      is caught by the inbox's unique (provider, webhook id): acknowledged as a
      duplicate, changing nothing. (GitHub's own redelivery of a delivery is the same
      body: a duplicate too.)
    - ``stripe``: ``Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`` (other keys, such
      as ``v0``, are ignored), HMAC-SHA256 of ``f"{t}.{body}"`` keyed by the secret's
      UTF-8 bytes (Stripe's ``whsec_`` value as it is, not decoded); the event's ``id``
      (inside the signed body) is the webhook id.

    Args:
        scheme: how the provider signs.
        secrets: the receiver's secrets; any one may match.
        headers: the request's headers (names compared ignoring case; a header the
            scheme reads given twice with different values is refused).
        body: the raw body, exactly as received.
        now: the current time, aware UTC.
        tolerance_s: how far the signed timestamp may be from *now*, either way (seconds).

    Returns:
        The delivery's id, signed time and payload.

    Raises:
        WebhookRejected: the delivery is malformed (400), not authentic or not fresh
            (401). Nothing else: garbage of any kind in headers or body is one of these.
    """
    if scheme is Scheme.STANDARD:
        return _verify_standard(secrets, headers, body, now=now, tolerance_s=tolerance_s)
    if scheme is Scheme.GITHUB:
        return _verify_github(secrets, headers, body)
    return _verify_stripe(secrets, headers, body, now=now, tolerance_s=tolerance_s)


def standard_secret_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: ``whsec_`` then base64 (padding
    optional), decoded strictly, of at least :data:`MIN_STANDARD_KEY_BYTES` bytes.

    Raises:
        ValueError: no ``whsec_`` prefix, not base64, or shorter than 16 bytes once
            decoded (the message never holds the secret).
    """
    if not secret.startswith(STANDARD_SECRET_PREFIX):
        raise ValueError("a Standard Webhooks secret starts with whsec_")
    encoded = secret[len(STANDARD_SECRET_PREFIX) :]
    if not _BASE64.fullmatch(encoded):
        raise ValueError("a Standard Webhooks secret is whsec_ followed by base64")
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a Standard Webhooks secret is whsec_ followed by base64") from None
    if len(key) < MIN_STANDARD_KEY_BYTES:
        raise ValueError(
            f"a Standard Webhooks secret's key (the base64 after whsec_) must decode to at "
            f"least {MIN_STANDARD_KEY_BYTES} bytes"
        )
    return key


def body_digest_id(body: bytes) -> str:
    """The webhook id of a delivery whose own id is not signed (GitHub's): ``sha256:``
    and the 64 hex digits of the SHA-256 of the raw *body*, which the signature covers."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


# -- the schemes ------------------------------------------------------------------------


def _verify_standard(
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: datetime,
    tolerance_s: float,
) -> Verified:
    found = _headers(headers, ("webhook-id", "webhook-timestamp", "webhook-signature"))
    webhook_id = _webhook_id(found["webhook-id"], "webhook-id")
    sent_at = _unix_time(found["webhook-timestamp"], "webhook-timestamp")
    signatures = _standard_signatures(found["webhook-signature"])
    text = _utf8(body)
    for secret in secrets:
        expected = _standard_signature(secret, webhook_id, sent_at, text)
        if expected and any(hmac.compare_digest(expected, given) for given in signatures):
            break
    else:
        raise _forged("webhook-signature")
    _check_time(sent_at, now=now, tolerance_s=tolerance_s)
    return Verified(webhook_id=webhook_id, sent_at=sent_at, payload=_payload(body))


def _standard_signature(secret: str, webhook_id: str, sent_at: datetime, text: str) -> bytes:
    """The ``v1`` signature the library makes for *secret*, decoded from base64.

    A secret that is not ``whsec_`` base64 (``waitbound.web._config`` never loads one)
    matches nothing: the sender is told only that the signature did not match.
    """
    try:
        standard_secret_key(secret)
    except ValueError:
        return b""
    # Imported here: verifying runs only in `waitbound serve` (the serve extra), while
    # this module is also read by every profile loader.
    from standardwebhooks.webhooks import Webhook

    signed = Webhook(secret).sign(webhook_id, sent_at, text)
    return base64.b64decode(signed.partition(",")[2])


def _standard_signatures(header: str) -> list[bytes]:
    """The decoded ``v1`` signatures of a ``webhook-signature`` header."""
    _bounded_header(header, "webhook-signature")
    signatures: list[bytes] = []
    for part in header.split():
        version, comma, encoded = part.partition(",")
        if not comma or not version:
            raise _malformed("webhook-signature", "each signature is version,base64")
        if version != "v1":
            continue  # Standard Webhooks: unknown versions are ignored (v1a is asymmetric)
        if not _BASE64.fullmatch(encoded) or len(encoded) % 4:
            raise _malformed("webhook-signature", "a v1 signature is not base64")
        signatures.append(base64.b64decode(encoded))
    if not signatures:
        raise _malformed("webhook-signature", "no v1 signature")
    return signatures


def _verify_github(secrets: Sequence[str], headers: Mapping[str, str], body: bytes) -> Verified:
    found = _headers(headers, ("x-hub-signature-256", "x-github-delivery"))
    _webhook_id(found["x-github-delivery"], "X-GitHub-Delivery")  # checked, not signed
    header = found["x-hub-signature-256"]
    _bounded_header(header, "X-Hub-Signature-256")
    algorithm, equals, digest = header.partition("=")
    if not equals or algorithm != "sha256" or not _HEX_SHA256.fullmatch(digest):
        raise _malformed("X-Hub-Signature-256", "expected sha256= and 64 hex digits")
    given = bytes.fromhex(digest)
    if not any(hmac.compare_digest(_hmac_sha256(secret, body), given) for secret in secrets):
        raise _forged("X-Hub-Signature-256")
    return Verified(webhook_id=body_digest_id(body), sent_at=None, payload=_payload(body))


def _verify_stripe(
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: datetime,
    tolerance_s: float,
) -> Verified:
    header = _headers(headers, ("stripe-signature",))["stripe-signature"]
    _bounded_header(header, "Stripe-Signature")
    times: list[str] = []
    signatures: list[bytes] = []
    for item in header.split(","):
        key, equals, value = item.strip().partition("=")
        if not equals or not key:
            raise _malformed("Stripe-Signature", "each element is key=value")
        if key == "t":
            times.append(value)
        elif key == "v1":
            if not _HEX_SHA256.fullmatch(value):
                raise _malformed("Stripe-Signature", "a v1 signature is 64 hex digits")
            signatures.append(bytes.fromhex(value))
    if len(times) != 1:
        raise _malformed("Stripe-Signature", "expected exactly one t=")
    if not signatures:
        raise _malformed("Stripe-Signature", "no v1 signature")
    sent_at = _unix_time(times[0], "Stripe-Signature t")
    signed = times[0].encode("ascii") + b"." + body
    expected = [_hmac_sha256(secret, signed) for secret in secrets]
    if not any(hmac.compare_digest(e, given) for e in expected for given in signatures):
        raise _forged("Stripe-Signature")
    _check_time(sent_at, now=now, tolerance_s=tolerance_s)
    payload = _payload(body)
    event_id = payload.get("id")
    if not isinstance(event_id, str) or isinstance(event_id, Ambiguous):
        raise WebhookRejected("bad_id", "the event has no id string")
    return Verified(
        webhook_id=_webhook_id(event_id, "the event's id"), sent_at=sent_at, payload=payload
    )


# -- shared checks ----------------------------------------------------------------------


def _headers(headers: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """The values of the headers *names* (lower case) from *headers*.

    Raises:
        WebhookRejected: ``missing_headers`` (any absent or empty; all of them named),
            ``duplicate_header`` (one given twice with different values),
            ``malformed_header`` (a value that is not printable ASCII).
    """
    wanted = set(names)
    found: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if key not in wanted:
            continue
        if key in found and found[key] != value:
            raise WebhookRejected("duplicate_header", f"{key} is given more than once")
        found[key] = value
    missing = [name for name in names if not found.get(name, "").strip()]
    if missing:
        raise WebhookRejected("missing_headers", f"missing {', '.join(missing)}")
    for key, value in found.items():
        if not _PRINTABLE.fullmatch(value):
            raise WebhookRejected("malformed_header", f"{key} is not printable ASCII")
    return {key: value.strip() for key, value in found.items()}


def _bounded_header(value: str, name: str) -> None:
    if len(value) > MAX_SIGNATURE_HEADER_CHARS:
        raise _malformed(name, f"longer than {MAX_SIGNATURE_HEADER_CHARS} characters")


def _webhook_id(value: str, name: str) -> str:
    """*value* when it is a webhook id: 1-255 printable ASCII characters, no spaces."""
    if not _WEBHOOK_ID.fullmatch(value):
        raise WebhookRejected(
            "bad_id",
            f"{name} must be 1-{MAX_WEBHOOK_ID_CHARS} printable ASCII characters without spaces",
        )
    return value


def _unix_time(value: str, name: str) -> datetime:
    """*value* read as Unix seconds (decimal digits, no sign, no fraction), aware UTC."""
    if not _UNIX_TIME.fullmatch(value) or int(value) > MAX_UNIX_TIME:
        raise WebhookRejected("malformed_timestamp", f"{name} is not a Unix time in seconds")
    return datetime.fromtimestamp(int(value), UTC)


def _check_time(sent_at: datetime, *, now: datetime, tolerance_s: float) -> None:
    """Refuse a signed time more than *tolerance_s* seconds before or after *now*."""
    offset_s = (sent_at - now).total_seconds()
    if offset_s < -tolerance_s:
        raise WebhookRejected("stale", f"signed more than {tolerance_s:g} s before now", status=401)
    if offset_s > tolerance_s:
        raise WebhookRejected("future", f"signed more than {tolerance_s:g} s after now", status=401)


def _utf8(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise WebhookRejected("not_utf8", "the body is not UTF-8") from None


def _payload(body: bytes) -> dict[str, JSON]:
    """The body as a JSON object (UTF-8, no non-finite numbers, duplicates marked)."""
    _utf8(body)
    try:
        payload = parse_provider_json(body)
    except NestingError:
        raise WebhookRejected("not_json", "the body nests too deeply to read") from None
    except ValueError:
        raise WebhookRejected("not_json", "the body is not JSON") from None
    if not isinstance(payload, dict):
        raise WebhookRejected("not_json", "the body is not a JSON object")
    return payload


def _hmac_sha256(secret: str, data: bytes) -> bytes:
    return hmac.new(secret.encode("utf-8", "surrogatepass"), data, hashlib.sha256).digest()


def _malformed(header: str, why: str) -> WebhookRejected:
    return WebhookRejected("malformed_signature", f"{header}: {why}")


def _forged(header: str) -> WebhookRejected:
    return WebhookRejected(
        "bad_signature", f"{header} matches none of the receiver's secrets", status=401
    )


# -- a profile's webhook contract -------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookContract:
    """A profile's ``webhook`` key: how its provider's deliveries are signed and which
    job each names (``docs/profile-format.md``).

    Attributes:
        scheme: how deliveries are signed.
        job_id: JMESPath over the payload giving the job id (as the status body's
            ``job_id`` names it).
        job_id_text: the expression as written.
        authoritative: the payload may be classified like a status body (only when the
            provider sends the job's whole state in it).
        documentation: where the provider documents its webhooks (a URL), or ``None``.
        notes: what the profile could not confirm, or anything else worth knowing.
    """

    scheme: Scheme
    job_id: Expression
    job_id_text: str
    authoritative: bool = False
    documentation: str | None = None
    notes: str | None = None


def parse_webhook_contract(where: str, data: object) -> WebhookContract:
    """Validate and compile a profile's ``webhook`` object.

    Args:
        where: names the profile in messages (``profile openai-batch``).
        data: the value of the ``webhook`` key.

    Raises:
        ProfileError: one line naming the key: not an object, an unknown key, no
            ``scheme`` or ``job_id``, a scheme not known, an expression that does not
            compile, or a value of the wrong type.
    """
    section = checked_section(where, "webhook", data, WEBHOOK_KEYS)
    scheme = section.get("scheme")
    if scheme not in tuple(Scheme):
        raise ProfileError(
            f"{where}: webhook.scheme must be one of {', '.join(s.value for s in Scheme)}"
        )
    if "job_id" not in section:
        raise ProfileError(f"{where}: webhook.job_id is required (the job id in a payload)")
    job_id = section["job_id"]
    compiled = compile_expression(where, "webhook.job_id", job_id)
    authoritative = section.get("authoritative", False)
    if not isinstance(authoritative, bool):
        raise ProfileError(f"{where}: webhook.authoritative must be true or false")
    documentation = section.get("documentation")
    if "documentation" in section and not (
        isinstance(documentation, str) and _URL.fullmatch(documentation)
    ):
        raise ProfileError(f"{where}: webhook.documentation must be an http(s) URL")
    notes = section.get("notes")
    if "notes" in section and not (isinstance(notes, str) and notes.strip()):
        raise ProfileError(f"{where}: webhook.notes must be a non-empty string")
    return WebhookContract(
        scheme=Scheme(str(scheme)),
        job_id=compiled,
        job_id_text=str(job_id),
        authoritative=authoritative,
        documentation=documentation if isinstance(documentation, str) else None,
        notes=notes if isinstance(notes, str) else None,
    )
