"""Verifying deliveries: each scheme's valid, rotated, forged, stale, future and garbled
deliveries, decided against an injected clock (``waitbound._profile._webhooks.verify``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook

from tests.hypothesis_profiles import examples
from tests.web.signing import (
    GH_A,
    GH_B,
    SECRET_A,
    SECRET_B,
    SECRET_OTHER,
    ST_A,
    ST_B,
    T0,
    body_of,
    github_headers,
    standard_headers,
    stripe_headers,
)
from waitbound._profile._webhooks import (
    Scheme,
    WebhookRejected,
    standard_secret_key,
    verify,
)

PAYLOAD = {"id": "evt_1", "type": "batch.completed", "data": {"id": "batch_abc"}}
BODY = body_of(PAYLOAD)
TOLERANCE_S = 300.0


def _verify(
    scheme: Scheme,
    secrets: list[str],
    headers: dict[str, str],
    body: bytes = BODY,
    *,
    now: datetime = T0,
) -> Any:
    return verify(scheme, secrets, headers, body, now=now, tolerance_s=TOLERANCE_S)


def _rejected(
    scheme: Scheme,
    secrets: list[str],
    headers: dict[str, str],
    body: bytes = BODY,
    *,
    now: datetime = T0,
) -> WebhookRejected:
    with pytest.raises(WebhookRejected) as caught:
        _verify(scheme, secrets, headers, body, now=now)
    rejected = caught.value
    assert "\n" not in rejected.detail
    for secret in secrets:
        assert secret not in rejected.detail
        assert secret.removeprefix("whsec_") not in rejected.detail
    assert body.decode("utf-8", "replace")[:40] not in rejected.detail or len(body) < 3
    return rejected


# -- valid deliveries ---------------------------------------------------------------------


def test_standard_delivery_signed_by_the_library_is_verified() -> None:
    """The id, the signed time and the parsed payload come back."""
    verified = _verify(Scheme.STANDARD, [SECRET_A], standard_headers(SECRET_A, BODY))
    assert verified.webhook_id == "msg_1"
    assert verified.sent_at == T0
    assert verified.payload == PAYLOAD


def test_github_delivery_is_verified_without_a_time() -> None:
    """GitHub signs no timestamp: ``sent_at`` is None and any clock accepts it."""
    headers = github_headers(GH_A, BODY, delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    verified = _verify(Scheme.GITHUB, [GH_A], headers, now=T0 + timedelta(days=400))
    assert verified.sent_at is None
    assert verified.payload == PAYLOAD


def test_a_github_delivery_is_named_by_its_signed_body_not_its_unsigned_header() -> None:
    """``X-GitHub-Delivery`` is not signed: the webhook id is ``sha256:`` and the body's
    digest, so the same captured body and signature under fresh delivery ids is one
    webhook id (a duplicate in the inbox); another body is another id."""
    ids = {
        _verify(
            Scheme.GITHUB, [GH_A], github_headers(GH_A, BODY, delivery=f"replayed-{n}")
        ).webhook_id
        for n in range(5)
    }
    assert ids == {"sha256:" + hashlib.sha256(BODY).hexdigest()}
    other = body_of({**PAYLOAD, "n": 2})
    assert _verify(Scheme.GITHUB, [GH_A], github_headers(GH_A, other), other).webhook_id == (
        "sha256:" + hashlib.sha256(other).hexdigest()
    )


def test_standard_and_stripe_ids_stay_the_signed_ones() -> None:
    """Standard Webhooks signs its ``webhook-id`` (another id breaks the signature);
    Stripe's id is inside the signed body: both stay the webhook id as given."""
    headers = standard_headers(SECRET_A, BODY, msg_id="msg_signed")
    assert _verify(Scheme.STANDARD, [SECRET_A], headers).webhook_id == "msg_signed"
    rejected = _rejected(Scheme.STANDARD, [SECRET_A], {**headers, "webhook-id": "msg_fresh"})
    assert rejected.code == "bad_signature"
    assert _verify(Scheme.STRIPE, [ST_A], stripe_headers(ST_A, BODY)).webhook_id == "evt_1"


def test_stripe_delivery_is_named_by_its_event_id() -> None:
    """The webhook id of a Stripe delivery is the event's ``id``."""
    verified = _verify(Scheme.STRIPE, [ST_A], stripe_headers(ST_A, BODY))
    assert verified.webhook_id == "evt_1"
    assert verified.sent_at == T0


def test_header_names_are_compared_ignoring_case() -> None:
    """``Webhook-Id`` and ``webhook-id`` are one header."""
    headers = {k.title(): v for k, v in standard_headers(SECRET_A, BODY).items()}
    assert _verify(Scheme.STANDARD, [SECRET_A], headers).webhook_id == "msg_1"


def test_the_library_and_verify_agree_at_the_real_time() -> None:
    """What ``standardwebhooks``' own verify accepts now, verify accepts with now injected."""
    now = datetime.now(UTC).replace(microsecond=0)
    headers = standard_headers(SECRET_A, BODY, at=now)
    assert Webhook(SECRET_A).verify(BODY, headers) == PAYLOAD
    assert _verify(Scheme.STANDARD, [SECRET_A], headers, now=now).payload == PAYLOAD


@pytest.mark.parametrize(
    "secret",
    [SECRET_A, SECRET_B, "whsec_" + base64.b64encode(b"x" * 31).decode().rstrip("=")],
)
def test_secret_key_is_the_libraries_key(secret: str) -> None:
    """The strict decoder reads the same key as the library (unpadded base64 too)."""
    assert standard_secret_key(secret) == Webhook(secret)._whsecret


@pytest.mark.parametrize("secret", ["whsec_AA", "whsec_" + base64.b64encode(b"x" * 15).decode()])
def test_a_standard_secret_of_a_short_key_never_verifies(secret: str) -> None:
    """A key under 16 bytes (1 byte is forged in 256 guesses) is not a secret: the
    strict decoder refuses it, and a delivery signed with it matches nothing."""
    with pytest.raises(ValueError, match="at least 16 bytes"):
        standard_secret_key(secret)
    rejected = _rejected(Scheme.STANDARD, [secret], standard_headers(secret, BODY))
    assert rejected.code == "bad_signature"


# -- rotation -----------------------------------------------------------------------------

ROTATIONS: dict[str, tuple[Scheme, list[str], Callable[[str], dict[str, str]]]] = {
    "standard": (Scheme.STANDARD, [SECRET_A, SECRET_B], lambda s: standard_headers(s, BODY)),
    "github": (Scheme.GITHUB, [GH_A, GH_B], lambda s: github_headers(s, BODY)),
    "stripe": (Scheme.STRIPE, [ST_A, ST_B], lambda s: stripe_headers(s, BODY)),
}


@pytest.mark.parametrize("name", sorted(ROTATIONS))
def test_during_a_rotation_both_secrets_are_accepted(name: str) -> None:
    """A receiver with the old and the new secret accepts deliveries signed by either."""
    scheme, secrets, sign = ROTATIONS[name]
    for secret in secrets:
        assert _verify(scheme, secrets, sign(secret)).payload == PAYLOAD


def test_a_sender_signing_with_both_secrets_is_accepted_by_either_receiver() -> None:
    """Standard Webhooks: several ``v1,`` signatures; one match is enough."""
    headers = standard_headers([SECRET_OTHER, SECRET_B], BODY)
    assert _verify(Scheme.STANDARD, [SECRET_B], headers).payload == PAYLOAD
    stripe = stripe_headers([ST_B, ST_A], BODY)
    assert _verify(Scheme.STRIPE, [ST_A], stripe).payload == PAYLOAD


# -- forged -------------------------------------------------------------------------------

FORGED: dict[str, tuple[Scheme, list[str], dict[str, str], bytes]] = {
    "standard other secret": (
        Scheme.STANDARD, [SECRET_A], standard_headers(SECRET_OTHER, BODY), BODY
    ),
    "standard body changed": (
        Scheme.STANDARD, [SECRET_A], standard_headers(SECRET_A, BODY), BODY + b" "
    ),
    "standard id changed": (
        Scheme.STANDARD,
        [SECRET_A],
        {**standard_headers(SECRET_A, BODY), "webhook-id": "msg_2"},
        BODY,
    ),
    "standard time changed": (
        Scheme.STANDARD,
        [SECRET_A],
        {**standard_headers(SECRET_A, BODY), "webhook-timestamp": str(int(T0.timestamp()) + 1)},
        BODY,
    ),
    "standard signature of the wrong length": (
        Scheme.STANDARD,
        [SECRET_A],
        {**standard_headers(SECRET_A, BODY), "webhook-signature": "v1,AAAA"},
        BODY,
    ),
    "github other secret": (Scheme.GITHUB, [GH_A], github_headers("another-secret", BODY), BODY),
    "github body changed": (Scheme.GITHUB, [GH_A], github_headers(GH_A, BODY), BODY + b"\n"),
    "stripe other secret": (Scheme.STRIPE, [ST_A], stripe_headers("whsec_other_one", BODY), BODY),
    "stripe body changed": (Scheme.STRIPE, [ST_A], stripe_headers(ST_A, BODY), BODY[:-1] + b" }"),
    "stripe time changed": (
        Scheme.STRIPE,
        [ST_A],
        {
            "Stripe-Signature": stripe_headers(ST_A, BODY)["Stripe-Signature"].replace(
                f"t={int(T0.timestamp())}", f"t={int(T0.timestamp()) - 1}"
            )
        },
        BODY,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FORGED))
def test_forged_delivery_is_refused_as_bad_signature(name: str) -> None:
    """A signature no secret of the receiver made: 401 ``bad_signature``."""
    scheme, secrets, headers, body = FORGED[name]
    rejected = _rejected(scheme, secrets, headers, body)
    assert (rejected.code, rejected.status) == ("bad_signature", 401)


def test_a_stripe_secret_is_used_as_written_not_base64_decoded() -> None:
    """Stripe keys its HMAC with the ``whsec_`` text itself: a signature keyed by the
    base64-decoded bytes (the Standard Webhooks reading) is forged."""
    secret = "whsec_" + base64.b64encode(b"stripe-like-key-bytes").decode()
    assert _verify(Scheme.STRIPE, [secret], stripe_headers(secret, BODY)).payload == PAYLOAD
    t = str(int(T0.timestamp()))
    decoded = hmac.new(standard_secret_key(secret), t.encode() + b"." + BODY, hashlib.sha256)
    headers = {"Stripe-Signature": f"t={t},v1={decoded.hexdigest()}"}
    assert _rejected(Scheme.STRIPE, [secret], headers).code == "bad_signature"


# -- stale and future ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset_s", "code"),
    [
        (-TOLERANCE_S - 1, "stale"),
        (-86_400 * 365, "stale"),
        (TOLERANCE_S + 1, "future"),
        (86_400 * 365, "future"),
    ],
)
@pytest.mark.parametrize("scheme", [Scheme.STANDARD, Scheme.STRIPE])
def test_signed_time_out_of_tolerance_is_refused(
    scheme: Scheme, offset_s: float, code: str
) -> None:
    """A genuine signature over a time more than the tolerance away: 401, either way."""
    at = T0 + timedelta(seconds=offset_s)
    if scheme is Scheme.STANDARD:
        secrets, headers = [SECRET_A], standard_headers(SECRET_A, BODY, at=at)
    else:
        secrets, headers = [ST_A], stripe_headers(ST_A, BODY, at=at)
    rejected = _rejected(scheme, secrets, headers)
    assert (rejected.code, rejected.status) == (code, 401)


@pytest.mark.parametrize("offset_s", [-TOLERANCE_S, 0.0, TOLERANCE_S])
def test_signed_time_at_the_tolerance_is_accepted(offset_s: float) -> None:
    """The bound is inclusive, measured from the injected now."""
    at = T0 + timedelta(seconds=offset_s)
    assert _verify(Scheme.STANDARD, [SECRET_A], standard_headers(SECRET_A, BODY, at=at))


def test_tolerance_is_the_callers() -> None:
    """A 10 s tolerance refuses what 5 minutes would accept."""
    headers = standard_headers(SECRET_A, BODY, at=T0 - timedelta(seconds=11))
    with pytest.raises(WebhookRejected, match="stale"):
        verify(Scheme.STANDARD, [SECRET_A], headers, BODY, now=T0, tolerance_s=10)


# -- garbage headers ----------------------------------------------------------------------

_STD = standard_headers(SECRET_A, BODY)


def _std(**changes: str | None) -> dict[str, str]:
    headers = dict(_STD)
    for name, value in changes.items():
        key = name.replace("_", "-")
        if value is None:
            headers.pop(key)
        else:
            headers[key] = value
    return headers


_GOOD_SIG = _STD["webhook-signature"]
STANDARD_GARBAGE: dict[str, tuple[dict[str, str], str]] = {
    "no headers": ({}, "missing_headers"),
    "no id": (_std(webhook_id=None), "missing_headers"),
    "no timestamp": (_std(webhook_timestamp=None), "missing_headers"),
    "no signature": (_std(webhook_signature=None), "missing_headers"),
    "empty signature": (_std(webhook_signature=""), "missing_headers"),
    "blank id": (_std(webhook_id="   "), "missing_headers"),
    "signature without comma": (_std(webhook_signature=_GOOD_SIG[3:]), "malformed_signature"),
    "signature only a comma": (_std(webhook_signature=","), "malformed_signature"),
    "signature bad base64": (_std(webhook_signature="v1,@@@@"), "malformed_signature"),
    "signature unpadded base64": (_std(webhook_signature="v1,AAA"), "malformed_signature"),
    "signature only v2": (_std(webhook_signature="v2,AAAA v1a,AAAA"), "malformed_signature"),
    "signature huge": (_std(webhook_signature="v1," + "A" * 10_000), "malformed_signature"),
    "signature non-ASCII": (_std(webhook_signature="v1,ÄÄÄÄ"), "malformed_header"),
    "signature with a tab": (_std(webhook_signature=_GOOD_SIG + "\tv1,AAAA"), "malformed_header"),
    "timestamp not a number": (_std(webhook_timestamp="soon"), "malformed_timestamp"),
    "timestamp negative": (_std(webhook_timestamp="-1700000000"), "malformed_timestamp"),
    "timestamp fraction": (_std(webhook_timestamp="1772366400.5"), "malformed_timestamp"),
    "timestamp huge": (_std(webhook_timestamp="9" * 400), "malformed_timestamp"),
    "timestamp past year 9999": (_std(webhook_timestamp="999999999999"), "malformed_timestamp"),
    "timestamp leading zero": (_std(webhook_timestamp="01772366400"), "malformed_timestamp"),
    "timestamp unicode digits": (_std(webhook_timestamp="١٧٧٢٣٦٦٤٠٠"), "malformed_header"),
    "timestamp exponent": (_std(webhook_timestamp="1.7e9"), "malformed_timestamp"),
    "id with a space": (_std(webhook_id="msg 1"), "bad_id"),
    "id too long": (_std(webhook_id="m" * 256), "bad_id"),
    "id non-ASCII": (_std(webhook_id="msg_é"), "malformed_header"),
    "id with a newline": (_std(webhook_id="msg\n1"), "malformed_header"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(STANDARD_GARBAGE))
def test_garbled_standard_headers_are_refused_with_a_400(name: str) -> None:
    """Every malformed Standard Webhooks header: 400 with its code, never an exception
    of another kind."""
    headers, code = STANDARD_GARBAGE[name]
    rejected = _rejected(Scheme.STANDARD, [SECRET_A], headers)
    assert (rejected.code, rejected.status) == (code, 400)


_GH = github_headers(GH_A, BODY)
GITHUB_GARBAGE: dict[str, tuple[dict[str, str], str]] = {
    "no signature": ({"X-GitHub-Delivery": "d-1"}, "missing_headers"),
    "no delivery id": ({"X-Hub-Signature-256": _GH["X-Hub-Signature-256"]}, "missing_headers"),
    "sha1 only": ({**_GH, "X-Hub-Signature-256": "sha1=" + "a" * 40}, "malformed_signature"),
    "no prefix": ({**_GH, "X-Hub-Signature-256": "a" * 64}, "malformed_signature"),
    "short hex": ({**_GH, "X-Hub-Signature-256": "sha256=abc"}, "malformed_signature"),
    "not hex": ({**_GH, "X-Hub-Signature-256": "sha256=" + "z" * 64}, "malformed_signature"),
    "two digests": (
        {**_GH, "X-Hub-Signature-256": _GH["X-Hub-Signature-256"] + ",sha256=" + "a" * 64},
        "malformed_signature",
    ),
    "delivery id too long": ({**_GH, "X-GitHub-Delivery": "d" * 300}, "bad_id"),
}


@pytest.mark.parametrize("name", sorted(GITHUB_GARBAGE))
def test_garbled_github_headers_are_refused_with_a_400(name: str) -> None:
    """Every malformed GitHub header: 400 with its code."""
    headers, code = GITHUB_GARBAGE[name]
    rejected = _rejected(Scheme.GITHUB, [GH_A], headers)
    assert (rejected.code, rejected.status) == (code, 400)


_ST = stripe_headers(ST_A, BODY)["Stripe-Signature"]
_T = f"t={int(T0.timestamp())}"
STRIPE_GARBAGE: dict[str, tuple[dict[str, str], str]] = {
    "no header": ({}, "missing_headers"),
    "no t": ({"Stripe-Signature": _ST.replace(_T + ",", "")}, "malformed_signature"),
    "two t": ({"Stripe-Signature": _T + "," + _ST}, "malformed_signature"),
    "no v1": ({"Stripe-Signature": _T + ",v0=" + "a" * 64}, "malformed_signature"),
    "element without =": ({"Stripe-Signature": _ST + ",garbage"}, "malformed_signature"),
    "v1 not hex": ({"Stripe-Signature": _T + ",v1=" + "g" * 64}, "malformed_signature"),
    "t not a number": ({"Stripe-Signature": _ST.replace(_T, "t=now")}, "malformed_timestamp"),
    "t huge": ({"Stripe-Signature": _ST.replace(_T, "t=" + "9" * 30)}, "malformed_timestamp"),
    "only commas": ({"Stripe-Signature": ",,,"}, "malformed_signature"),
}


@pytest.mark.parametrize("name", sorted(STRIPE_GARBAGE))
def test_garbled_stripe_headers_are_refused_with_a_400(name: str) -> None:
    """Every malformed Stripe-Signature: 400 with its code."""
    headers, code = STRIPE_GARBAGE[name]
    rejected = _rejected(Scheme.STRIPE, [ST_A], headers)
    assert (rejected.code, rejected.status) == (code, 400)


def test_a_header_given_twice_with_different_values_is_refused() -> None:
    """Two ``webhook-id`` values (names differing only in case): which is meant is unclear."""
    headers = {**_STD, "Webhook-Id": "msg_other"}
    rejected = _rejected(Scheme.STANDARD, [SECRET_A], headers)
    assert (rejected.code, rejected.status) == ("duplicate_header", 400)


# -- wrong ids and bodies -----------------------------------------------------------------


@pytest.mark.parametrize(
    "event_id",
    [None, 42, "", "evt 1", "e" * 256, ["evt_1"]],
)
def test_stripe_event_without_a_usable_id_is_refused(event_id: object) -> None:
    """A Stripe event's ``id`` names the delivery: absent or unusable, 400 ``bad_id``."""
    payload: dict[str, object] = {"type": "x"}
    if event_id is not None:
        payload["id"] = event_id
    body = body_of(payload)
    rejected = _rejected(Scheme.STRIPE, [ST_A], stripe_headers(ST_A, body), body)
    assert (rejected.code, rejected.status) == ("bad_id", 400)


BAD_BODIES: dict[str, tuple[bytes, str]] = {
    "not JSON": (b"hello", "not_json"),
    "empty": (b"", "not_json"),
    "a JSON array": (b"[1, 2]", "not_json"),
    "a JSON string": (b'"text"', "not_json"),
    "truncated": (BODY[:-1], "not_json"),
    "deeply nested": (b"[" * 100_000 + b"]" * 100_000, "not_json"),
    "UTF-16": ('{"a": 1}'.encode("utf-16"), "not_utf8"),
    "Latin-1": ('{"a": "é"}'.encode("latin-1"), "not_utf8"),
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
@pytest.mark.parametrize("scheme", [Scheme.GITHUB, Scheme.STRIPE, Scheme.STANDARD])
def test_a_validly_signed_body_that_is_not_a_utf8_json_object_is_refused(
    scheme: Scheme, name: str
) -> None:
    """Signature fine, body unusable: 400 ``not_json`` or ``not_utf8``, nothing leaks."""
    body, code = BAD_BODIES[name]
    if scheme is Scheme.GITHUB:
        secrets, headers = [GH_A], github_headers(GH_A, body)
    elif scheme is Scheme.STRIPE:
        secrets, headers = [ST_A], stripe_headers(ST_A, body)
    else:
        secrets = [SECRET_A]
        text = body.decode("utf-8", "replace")
        headers = {
            "webhook-id": "msg_1",
            "webhook-timestamp": str(int(T0.timestamp())),
            "webhook-signature": Webhook(SECRET_A).sign("msg_1", T0, text),
        }
    rejected = _rejected(scheme, secrets, headers, body)
    assert (rejected.code, rejected.status) == (code, 400)


def test_duplicate_keys_in_a_payload_are_marked_not_chosen() -> None:
    """A key repeated with different values is read as an Ambiguous marker."""
    body = b'{"data": {"id": "a", "id": "b"}}'
    verified = _verify(Scheme.GITHUB, [GH_A], github_headers(GH_A, body), body)
    assert str(verified.payload["data"]["id"]).startswith("<ambiguous")


# -- never anything but a rejection --------------------------------------------------------

_NAMES = st.sampled_from(
    [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "Webhook-Signature",
        "x-hub-signature-256",
        "x-github-delivery",
        "stripe-signature",
        "content-type",
    ]
)
_VALUES = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["v1,", "v1,AAAA", "t=1,v1=", "sha256=", "1772366400", _GOOD_SIG, _ST]),
    st.builds(
        lambda parts: " ".join(parts) if parts else "",
        st.lists(st.sampled_from(["v1,AAAA", ",", "v1,", "t=1", "v1=ab"]), max_size=4),
    ),
)


@settings(max_examples=examples(400), deadline=None, derandomize=True)
@given(
    scheme=st.sampled_from(list(Scheme)),
    headers=st.dictionaries(_NAMES, _VALUES, max_size=6),
    body=st.one_of(st.binary(max_size=200), st.just(BODY)),
    offset_s=st.floats(min_value=-1e6, max_value=1e6),
)
def test_no_garbage_raises_anything_but_a_rejection(
    scheme: Scheme, headers: dict[str, str], body: bytes, offset_s: float
) -> None:
    """Any headers, any body, any clock: a WebhookRejected (4xx) or a verified delivery."""
    secrets = [SECRET_A] if scheme is Scheme.STANDARD else ["some-long-secret"]
    now = T0 + timedelta(seconds=offset_s)
    outcome: object
    try:
        outcome = verify(scheme, secrets, headers, body, now=now, tolerance_s=TOLERANCE_S)
    except WebhookRejected as rejected:
        outcome = rejected
    if isinstance(outcome, WebhookRejected):
        assert outcome.status in (400, 401)
        assert "\n" not in outcome.detail


def test_a_secret_that_is_not_whsec_base64_matches_nothing() -> None:
    """Such a secret (the loader refuses it) never verifies; the sender learns only that
    the signature did not match."""
    headers = standard_headers(SECRET_A, BODY)
    rejected = _rejected(Scheme.STANDARD, ["not-a-whsec-secret", "whsec_%%%%"], headers)
    assert (rejected.code, rejected.status) == ("bad_signature", 401)
    assert _verify(Scheme.STANDARD, ["whsec_%%%%", SECRET_A], headers).payload == PAYLOAD
