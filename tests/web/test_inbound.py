"""``POST /webhooks/{provider}`` on a tiny Starlette app with a MemoryStore: a verified
delivery is stored once and acknowledged; every rejection stores nothing; never a 5xx
but the store's own failure (503). Also the pure reading of a delivery."""

from __future__ import annotations

import base64
import hashlib
import json
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import jmespath
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.testclient import TestClient

import waitbound
import waitbound.web._inbound
from tests.fakes import FakeClock
from tests.hypothesis_profiles import examples
from tests.stores import pg
from tests.web.signing import (
    GH_A,
    SECRET_A,
    SECRET_B,
    ST_A,
    T0,
    body_of,
    github_headers,
    standard_headers,
    stripe_headers,
)
from waitbound import MemoryStore, Policy, Record, StoreError
from waitbound._base._secrets import credential_values
from waitbound._engine._inbox import sweep_inbox
from waitbound._model._push import InboundDelivery
from waitbound._model._record import (
    Contract,
    Push,
    Schedule,
    Submission,
)
from waitbound._profile._webhooks import Scheme, Verified, WebhookRejected
from waitbound.profiles import builtin_profile
from waitbound.web._config import Receiver, ServeConfig
from waitbound.web._inbound import (
    KEPT_HEAD_CHARS,
    MAX_KEPT_PAYLOAD_CHARS,
    read_body,
    read_delivery,
    receive_webhook,
)
from waitbound.web._inbound_commit import InboundCommit
from waitbound.web._service import Service as RealService


@dataclass
class Service:
    """A stand-in for ``waitbound.web._service.Service`` (the fields the receiver reads)."""

    store: Any
    config: ServeConfig
    clock: FakeClock
    token: str = "test-token"
    delivered: Callable[[InboundDelivery], None] = field(default=lambda _: None)
    secrets: tuple[str, ...] = ()
    inbound: InboundCommit = field(default_factory=InboundCommit)


def _receiver(name: str, scheme: Scheme, secrets: tuple[str, ...], **changes: Any) -> Receiver:
    job_id = changes.pop("job_id", "data.id")
    return Receiver(
        name=name,
        scheme=scheme,
        secrets=secrets,
        job_id=jmespath.compile(job_id),
        job_id_text=job_id,
        **changes,
    )


RECEIVERS = {
    "reports": _receiver("reports", Scheme.STANDARD, (SECRET_A, SECRET_B)),
    "gh": _receiver("gh", Scheme.GITHUB, (GH_A,), job_id="workflow_run.id"),
    "pay": _receiver("pay", Scheme.STRIPE, (ST_A,), job_id="data.object.id"),
    "small": _receiver("small", Scheme.STANDARD, (SECRET_A,), max_body_bytes=1024),
}
PAYLOAD = {"type": "batch.completed", "data": {"id": "batch_abc"}}
BODY = body_of(PAYLOAD)


@dataclass
class Harness:
    client: TestClient
    store: Any
    clock: FakeClock
    nudged: list[InboundDelivery]

    def post(
        self, provider: str, headers: dict[str, str], body: bytes | Iterator[bytes] = BODY
    ) -> Any:
        return self.client.post(f"/webhooks/{provider}", headers=headers, content=body)

    def stored(self) -> list[InboundDelivery]:
        return list(self.store.inbox(limit=1000))


def _harness(store: Any | None = None) -> Harness:
    store = MemoryStore() if store is None else store
    clock = FakeClock(T0)
    nudged: list[InboundDelivery] = []
    app = Starlette(routes=[Route("/webhooks/{provider}", receive_webhook, methods=["POST"])])
    app.state.service = Service(
        store=store,
        config=ServeConfig(receivers=RECEIVERS),
        clock=clock,
        delivered=nudged.append,
    )
    return Harness(TestClient(app, raise_server_exceptions=False), store, clock, nudged)


@pytest.fixture
def harness() -> Iterator[Harness]:
    made = _harness()
    with made.client:
        yield made


# -- accepted -----------------------------------------------------------------------------


def test_a_verified_delivery_is_stored_then_acknowledged(harness: Harness) -> None:
    """200 ``received``; the inbox holds it with its job id and event type; one nudge."""
    answer = harness.post("reports", standard_headers(SECRET_A, BODY))
    assert answer.status_code == 200
    assert answer.json() == {"received": True, "duplicate": False, "matched": False}
    [stored] = harness.stored()
    assert (stored.provider, stored.webhook_id, stored.job_id) == ("reports", "msg_1", "batch_abc")
    assert (stored.event_type, stored.received_at, stored.payload) == (
        "batch.completed",
        T0,
        PAYLOAD,
    )
    assert harness.nudged == [stored]


@pytest.mark.parametrize("secret", [SECRET_A, SECRET_B])
def test_a_rotated_secret_is_accepted(harness: Harness, secret: str) -> None:
    """Either of the receiver's secrets verifies a delivery."""
    assert harness.post("reports", standard_headers(secret, BODY)).status_code == 200


def test_a_duplicate_is_acknowledged_and_stored_once(harness: Harness) -> None:
    """The provider's retry (same id, valid signature): 200 ``duplicate``, nothing new,
    no second nudge."""
    headers = standard_headers(SECRET_A, BODY)
    first = harness.post("reports", headers)
    harness.clock.advance(30)
    again = harness.post("reports", standard_headers(SECRET_A, BODY, at=T0 + timedelta(seconds=30)))
    assert first.json()["duplicate"] is False
    assert again.status_code == 200
    assert again.json() == {"received": True, "duplicate": True, "matched": False}
    assert len(harness.stored()) == 1
    assert len(harness.nudged) == 1


def test_a_delivery_for_a_recorded_job_is_matched(harness: Harness) -> None:
    """A record expecting ``reports`` deliveries for job batch_abc: ``matched`` true."""
    record = Record(
        contract=Contract(
            operation_id="op-1",
            profile=builtin_profile("openai-batch"),
            policy=Policy(),
            created_at=T0,
        ),
        submission=Submission(
            status_url="https://api.openai.com/v1/batches/batch_abc", job_id="batch_abc"
        ),
        schedule=Schedule(
            deadline_at=T0 + timedelta(hours=1), next_poll_at=T0 + timedelta(minutes=5)
        ),
        push=Push(webhook="reports"),
    )
    harness.store.create(record, [])
    answer = harness.post("reports", standard_headers(SECRET_A, BODY))
    assert answer.json() == {"received": True, "duplicate": False, "matched": True}
    assert harness.stored()[0].operation_id == "op-1"


def test_github_and_stripe_deliveries_are_stored(harness: Harness) -> None:
    """The other schemes, through the same endpoint; a numeric job id reads as text."""
    gh_body = body_of({"action": "completed", "workflow_run": {"id": 123, "status": "completed"}})
    assert (
        harness.post("gh", github_headers(GH_A, gh_body, delivery="d-1"), gh_body).status_code
        == 200
    )
    st_body = body_of(
        {"id": "evt_9", "type": "charge.succeeded", "data": {"object": {"id": "ch_1"}}}
    )
    assert harness.post("pay", stripe_headers(ST_A, st_body), st_body).status_code == 200
    by_provider = {d.provider: d for d in harness.stored()}
    gh_id = "sha256:" + hashlib.sha256(gh_body).hexdigest()
    assert (by_provider["gh"].webhook_id, by_provider["gh"].job_id) == (gh_id, "123")
    assert by_provider["gh"].event_type == "completed"
    assert (by_provider["pay"].webhook_id, by_provider["pay"].job_id) == ("evt_9", "ch_1")


def test_a_replayed_github_delivery_under_fresh_delivery_ids_is_a_duplicate(
    harness: Harness,
) -> None:
    """A captured GitHub body and signature resent with a fresh (unsigned)
    ``X-GitHub-Delivery`` each time: stored once, every resend acknowledged as a
    duplicate, one nudge (the operation's poll is brought forward once, not each time)."""
    body = body_of({"action": "completed", "workflow_run": {"id": 7}})
    answers = [
        harness.post("gh", github_headers(GH_A, body, delivery=f"replayed-{n}"), body).json()
        for n in range(15)
    ]
    assert answers[0] == {"received": True, "duplicate": False, "matched": False}
    assert all(a == {"received": True, "duplicate": True, "matched": False} for a in answers[1:])
    [stored] = harness.stored()
    assert stored.webhook_id == "sha256:" + hashlib.sha256(body).hexdigest()
    assert len(harness.nudged) == 1


def test_a_chunked_body_within_the_cap_is_read(harness: Harness) -> None:
    """A body sent in chunks, without Content-Length, is read whole."""
    chunks = iter([BODY[:10], BODY[10:]])
    assert harness.post("reports", standard_headers(SECRET_A, BODY), chunks).status_code == 200


@contextmanager
def _store_of(kind: str, tmp_path: Path) -> Iterator[Any]:
    """A fresh store of *kind* (PostgreSQL: a schema of its own on the test server)."""
    if kind == "memory":
        yield MemoryStore()
    elif kind == "sqlite":
        sqlite = waitbound.SQLiteStore(tmp_path / "s.db")
        yield sqlite
        sqlite.close()
    else:
        from waitbound.stores.postgres import PostgresStore

        with pg.fresh_schema() as schema:
            postgres = PostgresStore(pg.DSN, schema=schema, max_size=2)
            yield postgres
            postgres.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_job_id_or_event_type_that_is_not_printable_is_stored_unmatched(
    kind: str, tmp_path: Path
) -> None:
    """A signed delivery whose job id and type hold ``\u0000`` or a control character:
    200, stored with job id and event type ``None`` (no job id holds them; PostgreSQL's
    text columns refuse NUL) and the payload whole (its JSON escapes are fine in a
    ``json`` column) — never a 503 the provider would retry forever."""
    payload = {"type": "batch.\u0000completed", "data": {"id": "batch\u0000abc"},
               "note": "log line\u0000\n\x1b[2J"}  # fmt: skip
    body = body_of(payload)
    with _store_of(kind, tmp_path) as store:
        made = _harness(store)
        with made.client:
            answer = made.post("reports", standard_headers(SECRET_A, body), body)
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"received": True, "duplicate": False, "matched": False}
            [stored] = made.stored()
    assert (stored.job_id, stored.event_type) == (None, None)
    assert stored.payload == payload


# -- refused: nothing stored ----------------------------------------------------------------

_STD = standard_headers(SECRET_A, BODY)
_FORGED_SECRET = "whsec_Zm9yZ2VkLXNlY3JldC1ieXRlcw=="
_SIX_MINUTES = timedelta(minutes=6)
REJECTIONS: dict[str, tuple[str, dict[str, str], bytes, int, str]] = {
    "forged": ("reports", standard_headers(_FORGED_SECRET, BODY), BODY, 401, "bad_signature"),
    "stale": (
        "reports", standard_headers(SECRET_A, BODY, at=T0 - _SIX_MINUTES), BODY, 401, "stale"
    ),
    "future": (
        "reports", standard_headers(SECRET_A, BODY, at=T0 + _SIX_MINUTES), BODY, 401, "future"
    ),
    "no headers": ("reports", {}, BODY, 400, "missing_headers"),
    "garbage signature": (
        "reports", {**_STD, "webhook-signature": "v1,%%%"}, BODY, 400, "malformed_signature"
    ),
    "garbage timestamp": (
        "reports", {**_STD, "webhook-timestamp": "later"}, BODY, 400, "malformed_timestamp"
    ),
    "bad id": ("reports", {**_STD, "webhook-id": "a b"}, BODY, 400, "bad_id"),
    "body changed": ("reports", _STD, BODY + b" ", 401, "bad_signature"),
    "not JSON": ("gh", github_headers(GH_A, b"nope"), b"nope", 400, "not_json"),
    "not UTF-8": ("gh", github_headers(GH_A, b"\xff\xfe{}"), b"\xff\xfe{}", 400, "not_utf8"),
    "github forged": ("gh", github_headers("not-the-secret", BODY), BODY, 401, "bad_signature"),
    "stripe without event id": ("pay", stripe_headers(ST_A, BODY), BODY, 400, "bad_id"),
    "bad content length": (
        "reports", {**_STD, "Content-Length": "lots"}, BODY, 400, "bad_content_length"
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REJECTIONS))
def test_a_refused_delivery_is_a_4xx_json_and_stores_nothing(harness: Harness, name: str) -> None:
    """Forged, stale, future, garbled, not JSON: the code and a one-line detail; the inbox
    stays empty and nobody is nudged."""
    provider, headers, body, status, code = REJECTIONS[name]
    answer = harness.post(provider, headers, body)
    assert answer.status_code == status
    assert answer.json()["error"] == code
    assert "\n" not in answer.json()["detail"]
    for secret in (SECRET_A, SECRET_B, GH_A, ST_A):
        assert secret not in answer.text
    assert harness.stored() == []
    assert harness.nudged == []


def test_an_unknown_provider_is_404(harness: Harness) -> None:
    """No ``[webhooks.NAME]`` of that name: 404 JSON, the name not echoed."""
    answer = harness.post("nobody<script>", standard_headers(SECRET_A, BODY))
    assert answer.status_code == 404
    assert answer.json()["error"] == "unknown_provider"
    assert "script" not in answer.text
    assert harness.stored() == []


def test_a_body_over_the_cap_is_413(harness: Harness) -> None:
    """Content-Length over ``max_body_bytes``: 413, nothing stored."""
    big = body_of({"data": {"id": "x"}, "pad": "x" * 2000})
    answer = harness.post("small", standard_headers(SECRET_A, big), big)
    assert answer.status_code == 413
    assert answer.json()["error"] == "too_large"
    assert harness.stored() == []


def test_a_chunked_body_over_the_cap_is_413(harness: Harness) -> None:
    """No Content-Length, chunks that pass the cap: 413 while streaming."""
    big = body_of({"data": {"id": "x"}, "pad": "x" * 2000})
    chunks = iter([big[i : i + 100] for i in range(0, len(big), 100)])
    answer = harness.post("small", standard_headers(SECRET_A, big), chunks)
    assert answer.status_code == 413
    assert harness.stored() == []


def test_a_failing_store_is_503_not_500() -> None:
    """The store refuses: 503 JSON (the provider retries), no traceback, no nudge."""

    class BrokenStore(MemoryStore):
        def put_delivery(self, delivery: InboundDelivery) -> InboundDelivery | None:
            raise StoreError("database is locked")

        def put_deliveries(self, deliveries: Any) -> list[InboundDelivery | None]:
            raise StoreError("database is locked")

    made = _harness(BrokenStore())
    with made.client:
        answer = made.post("reports", standard_headers(SECRET_A, BODY))
    assert answer.status_code == 503
    assert answer.json()["error"] == "store_unavailable"
    assert "locked" not in answer.text
    assert made.nudged == []


def test_a_failing_nudge_still_acknowledges(harness: Harness) -> None:
    """The delivery is stored: a nudge that raises does not turn it into an error."""

    def broken(_: InboundDelivery) -> None:
        raise RuntimeError("worker gone")

    harness.client.app.state.service.delivered = broken  # type: ignore[attr-defined]
    assert harness.post("reports", standard_headers(SECRET_A, BODY)).status_code == 200
    assert len(harness.stored()) == 1


# -- the body is read under its cap ----------------------------------------------------------


def _request(headers: list[tuple[bytes, bytes]], chunks: list[bytes], served: list[int]) -> Request:
    async def receive() -> dict[str, Any]:
        index = len(served)
        served.append(index)
        if index >= len(chunks):
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": chunks[index], "more_body": index < len(chunks) - 1}

    scope = {"type": "http", "method": "POST", "path": "/webhooks/x", "headers": headers}
    return Request(scope, receive)


def test_content_length_over_the_cap_is_refused_before_reading() -> None:
    """Nothing of the body is received when Content-Length already says too much."""
    served: list[int] = []
    request = _request([(b"content-length", b"999999")], [b"x" * 10], served)
    with pytest.raises(WebhookRejected) as caught:
        anyio.run(read_body, request, 1024)
    assert (caught.value.code, caught.value.status) == ("too_large", 413)
    assert served == []


def test_a_streamed_body_stops_being_read_at_the_cap() -> None:
    """Without Content-Length, reading stops at the first chunk past the cap."""
    served: list[int] = []
    request = _request([], [b"x" * 600] * 50, served)
    with pytest.raises(WebhookRejected) as caught:
        anyio.run(read_body, request, 1024)
    assert caught.value.status == 413
    assert len(served) == 2


def test_a_client_that_goes_away_mid_body_is_a_400() -> None:
    """A disconnect while streaming: a rejection, not an exception."""
    served: list[int] = []
    chunks = [b"x" * 10]

    async def receive() -> dict[str, Any]:
        served.append(1)
        if len(served) == 1:
            return {"type": "http.request", "body": chunks[0], "more_body": True}
        return {"type": "http.disconnect"}

    request = Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)
    with pytest.raises(WebhookRejected) as caught:
        anyio.run(read_body, request, 1024)
    assert caught.value.code == "disconnected"


def _trickled() -> Callable[[], Any]:
    """An ASGI ``receive`` giving one chunk of a body, then nothing more, ever."""
    served: list[int] = []

    async def receive() -> dict[str, Any]:
        served.append(1)
        if len(served) == 1:
            return {"type": "http.request", "body": b"{", "more_body": True}
        await anyio.sleep_forever()
        raise AssertionError("never")

    return receive


def test_a_body_that_trickles_past_its_time_is_a_408() -> None:
    """One chunk, then nothing: once the body's time is up (0.2 s here, 10 s by
    default), a 408 ``body_timeout`` rejection instead of a request held open."""
    request = Request({"type": "http", "method": "POST", "path": "/", "headers": []}, _trickled())
    with pytest.raises(WebhookRejected) as caught:
        anyio.run(read_body, request, 1024, 0.2)
    assert (caught.value.code, caught.value.status) == ("body_timeout", 408)
    assert caught.value.detail == "the body did not arrive within 0.2 s"


def test_a_trickled_delivery_is_answered_a_408_json_and_stores_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the receiver: the 408 is the JSON error of every refusal."""
    monkeypatch.setattr(waitbound.web._inbound, "read_body", partial(read_body, timeout_s=0.2))
    made = _harness()
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    scope: dict[str, Any] = {
        "type": "http", "method": "POST", "path": "/webhooks/reports",
        "raw_path": b"/webhooks/reports", "root_path": "", "query_string": b"",
        "headers": [(b"content-type", b"application/json")], "http_version": "1.1",
        "scheme": "http", "server": ("127.0.0.1", 8765), "client": ("127.0.0.1", 5000),
    }  # fmt: skip
    anyio.run(made.client.app, scope, _trickled(), send)
    assert sent[0]["status"] == 408
    assert json.loads(sent[1]["body"]) == {
        "error": "body_timeout",
        "detail": "the body did not arrive within 0.2 s",
    }
    assert made.stored() == []


# -- reading a delivery (pure) ---------------------------------------------------------------


def _verified(payload: dict[str, Any], webhook_id: str = "msg_1") -> Verified:
    return Verified(webhook_id=webhook_id, sent_at=T0, payload=payload)


@pytest.mark.parametrize(
    ("payload", "job_id"),
    [
        ({"data": {"id": "batch_1"}}, "batch_1"),
        ({"data": {"id": 123}}, "123"),
        ({"data": {"id": 12.5}}, "12.5"),
        ({"data": {"id": True}}, None),
        ({"data": {"id": None}}, None),
        ({"data": {"id": ""}}, None),
        ({"data": {"id": ["a"]}}, None),
        ({"data": {"id": {"a": 1}}}, None),
        ({"data": {"id": "j" * 1025}}, None),
        ({"data": {"id": "batch\u0000abc"}}, None),
        ({"data": {"id": "batch\nabc"}}, None),
        ({"data": {"id": "\x1b[31mred"}}, None),
        ({"data": {"id": "naïve-✓ id"}}, "naïve-✓ id"),
        ({"data": {}}, None),
        ({"other": 1}, None),
    ],
)
def test_the_job_id_is_read_by_the_receivers_expression(
    payload: dict[str, Any], job_id: str | None
) -> None:
    """Text as it is, a number as its JSON text, anything else none (stored, unmatched)."""
    delivery = read_delivery(RECEIVERS["reports"], _verified(payload), T0)
    assert delivery.job_id == job_id


def test_a_repeated_key_names_no_job() -> None:
    """A job id the payload repeats with different values is never chosen."""
    payload = waitbound._base._json.parse_provider_json(b'{"data": {"id": "a", "id": "b"}}')
    assert isinstance(payload, dict)
    assert read_delivery(RECEIVERS["reports"], _verified(payload), T0).job_id is None


@pytest.mark.parametrize(
    ("payload", "event_type"),
    [
        ({"type": "batch.completed", "action": "x"}, "batch.completed"),
        ({"action": "completed", "event": "y"}, "completed"),
        ({"event": "run.finished"}, "run.finished"),
        ({"type": 5, "action": "requested"}, "requested"),
        ({"type": "", "event": "e"}, "e"),
        ({"type": {"name": "x"}}, None),
        ({"type": "t" * 500}, "t" * 200),
        ({"type": "batch.\u0000completed"}, None),
        ({"type": "forged\nline", "action": "completed"}, None),
        ({}, None),
    ],
)
def test_the_event_type_is_the_first_string_of_type_action_event(
    payload: dict[str, Any], event_type: str | None
) -> None:
    """``type``, then ``action``, then ``event``; non-strings skipped; bounded."""
    assert read_delivery(RECEIVERS["reports"], _verified(payload), T0).event_type == event_type


def test_the_receivers_secrets_are_redacted_from_the_payload() -> None:
    """A payload echoing a secret (whole, or its base64 part) keeps neither."""
    raw = SECRET_A.removeprefix("whsec_")
    payload = {"data": {"id": "j"}, "echo": f"key={SECRET_A}", "raw": raw, SECRET_B: 1}
    kept = json.dumps(read_delivery(RECEIVERS["reports"], _verified(payload), T0).payload)
    assert SECRET_A not in kept
    assert raw not in kept
    assert SECRET_B not in kept
    assert "[redacted]" in kept


def test_a_large_payload_is_kept_bounded_and_not_authoritative() -> None:
    """Over 64 KiB of JSON: its first 2,000 characters as text, read as a hint only; the
    job id is still read from the whole payload."""
    receiver = _receiver("r", Scheme.STANDARD, (SECRET_A,), authoritative=True)
    payload = {"data": {"id": "j-1"}, "pad": "x" * MAX_KEPT_PAYLOAD_CHARS}
    delivery = read_delivery(receiver, _verified(payload), T0)
    assert isinstance(delivery.payload, str)
    assert len(delivery.payload) == KEPT_HEAD_CHARS + 1
    assert delivery.authoritative is False
    assert delivery.job_id == "j-1"
    small = read_delivery(receiver, _verified({"data": {"id": "j-1"}}), T0)
    assert small.authoritative is True
    assert small.payload == {"data": {"id": "j-1"}}


# -- the built-in profiles' contracts -------------------------------------------------------


def _from_profile(name: str) -> Receiver:
    contract = builtin_profile(name).webhook
    assert contract is not None
    return Receiver(
        name=name,
        scheme=contract.scheme,
        secrets=(SECRET_A,),
        job_id=contract.job_id,
        job_id_text=contract.job_id_text,
        authoritative=contract.authoritative,
    )


@pytest.mark.parametrize(
    "event", ["batch.completed", "batch.failed", "batch.cancelled", "batch.expired"]
)
def test_openai_batch_events_name_the_batch(event: str) -> None:
    """OpenAI's batch events: ``data.id`` is the batch id, the record's job id."""
    payload = {"id": "evt_1", "object": "event", "created_at": 1, "type": event,
               "data": {"id": "batch_abc"}}  # fmt: skip
    delivery = read_delivery(_from_profile("openai-batch"), _verified(payload), T0)
    assert (delivery.job_id, delivery.event_type, delivery.authoritative) == (
        "batch_abc",
        event,
        False,
    )
    profile = builtin_profile("openai-batch")
    assert profile.read({"id": "batch_abc", "status": "in_progress"}).job_id == delivery.job_id


def test_openai_events_about_other_things_name_no_batch() -> None:
    """A ``response.completed`` event at the same endpoint is kept, never matched."""
    payload = {"id": "evt_2", "type": "response.completed", "data": {"id": "resp_1"}}
    assert read_delivery(_from_profile("openai-batch"), _verified(payload), T0).job_id is None


def test_github_workflow_run_names_the_run_as_the_status_body_does() -> None:
    """``workflow_run.id`` (a number) reads as the same text the run's status body gives."""
    run = {"id": 30433642, "status": "completed", "conclusion": "success"}
    payload = {"action": "completed", "workflow_run": run}
    delivery = read_delivery(_from_profile("github-actions-run"), _verified(payload), T0)
    status = builtin_profile("github-actions-run").read({"id": 30433642, "status": "queued"})
    assert delivery.job_id == status.job_id == "30433642"
    job_event = {"action": "completed", "workflow_job": {"id": 1, "run_id": 30433642}}
    assert (
        read_delivery(_from_profile("github-actions-run"), _verified(job_event), T0).job_id is None
    )


# -- never a 5xx -----------------------------------------------------------------------------

_HEADER_NAMES = st.sampled_from(
    ["webhook-id", "webhook-timestamp", "webhook-signature", "x-hub-signature-256",
     "x-github-delivery", "stripe-signature", "content-type", "content-length"]
)  # fmt: skip
_HEADER_VALUES = st.one_of(
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=60),
    st.sampled_from([*_STD.values(), "v1,AAAA", "t=1,v1=00", "sha256=00", "-1", "0"]),
)


@settings(
    max_examples=examples(150),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    provider=st.sampled_from(["reports", "gh", "pay", "small", "nope", "%2e%2e"]),
    headers=st.dictionaries(_HEADER_NAMES, _HEADER_VALUES, max_size=5),
    body=st.one_of(st.binary(max_size=300), st.just(BODY)),
)
def test_no_garbage_ever_gives_a_5xx(
    harness: Harness, provider: str, headers: dict[str, str], body: bytes
) -> None:
    """Any headers, any body, any provider name: a 4xx JSON (or a 200), never a 5xx."""
    try:
        answer = harness.post(provider, headers, body)
    except (UnicodeError, ValueError):  # the test client itself refuses to send it
        reject()
    assert answer.status_code < 500, answer.text
    assert "error" in answer.json() or answer.json()["received"] is True


# -- no secret the service holds is kept -------------------------------------------------

CREDENTIAL = "PROVIDERSECRET0123456789"
"""The worker's credential for the provider (``--header-for … 'Authorization: Bearer …'``)."""
NOTIFY = "whsec_" + base64.b64encode(b"notify-secret-of-the-service!").decode()
TOKEN = "tok_" + "t0ken" * 8


def _held_service(store: MemoryStore, authoritative: bool = False) -> RealService:
    """A real service holding every kind of secret: two receivers', the notify secret, the
    token and the worker's credential header value."""
    receivers = {
        "reports": _receiver("reports", Scheme.STANDARD, (SECRET_A,), authoritative=authoritative),
        "gh": RECEIVERS["gh"],
    }
    return RealService(
        store=store,
        config=ServeConfig(receivers=receivers, notify_secret=NOTIFY),
        clock=FakeClock(T0),
        token=TOKEN,
        secrets=credential_values({"Authorization": f"Bearer {CREDENTIAL}"}),
    )


def test_the_service_knows_every_secret_it_holds() -> None:
    """``Service.secrets``: the token, each receiver's secrets (and a ``whsec_`` one's
    base64 part), the notify secret, and the credential values given; longest first."""
    held = _held_service(MemoryStore()).secrets
    for secret in (TOKEN, SECRET_A, SECRET_A[6:], GH_A, NOTIFY, NOTIFY[6:], CREDENTIAL):
        assert secret in held
    assert list(held) == sorted(held, key=lambda s: (-len(s), s))
    assert "Bearer" not in held
    assert CREDENTIAL not in repr(_held_service(MemoryStore()))


def _echo(secrets: list[str]) -> dict[str, Any]:
    joined = " ".join(secrets)
    return {
        "type": f"echo {joined}",
        "data": {"id": f"job-{secrets[0]}"},
        "headers": {"Authorization": f"Bearer {CREDENTIAL}"},
        "notify": NOTIFY,
        "token": TOKEN,
        GH_A: SECRET_A,
    }


def test_no_secret_of_the_service_reaches_the_inbox_or_the_audit_log() -> None:
    """A signed delivery echoing the worker's credential, the notify secret, the token,
    another receiver's secret and its own — in its event type, its job id, its id and
    anywhere in its payload — is stored and applied with each of them ``[redacted]``."""
    store = MemoryStore()
    service = _held_service(store)
    record = Record(
        contract=Contract(
            operation_id="op-echo",
            profile=builtin_profile("openai-batch"),
            policy=Policy(),
            created_at=T0,
        ),
        submission=Submission(
            status_url="https://api.openai.com/v1/batches/b", job_id="job-[redacted]"
        ),
        schedule=Schedule(
            deadline_at=T0 + timedelta(hours=1), next_poll_at=T0 + timedelta(minutes=5)
        ),
        push=Push(webhook="reports"),
    )
    store.create(record, [])
    app = Starlette(routes=[Route("/webhooks/{provider}", receive_webhook, methods=["POST"])])
    app.state.service = service
    secrets = [CREDENTIAL, NOTIFY, TOKEN, GH_A, SECRET_A]
    body = body_of(_echo(secrets))
    headers = standard_headers(SECRET_A, body, msg_id=f"echo-{CREDENTIAL}")
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.post("/webhooks/reports", headers=headers, content=body)
    assert answer.json() == {"received": True, "duplicate": False, "matched": True}
    sweep_inbox(store, clock=service.clock, rng=random.Random(1))
    [stored] = store.inbox(limit=10)
    assert stored.webhook_id == "echo-[redacted]"
    assert stored.job_id == "job-[redacted]"
    assert stored.event_type == "echo " + " ".join(["[redacted]"] * 5)
    kept = [
        json.dumps([stored.payload, stored.webhook_id, stored.job_id, stored.event_type]),
        *(json.dumps(e.event.payload(e.operation_id, e.seq)) for e in store.audit("op-echo")),
    ]
    assert any("webhook_received" in text for text in kept)
    for text in kept:
        for secret in (*secrets, SECRET_A[6:], NOTIFY[6:]):
            assert secret not in text


def test_an_authoritative_payload_is_classified_from_the_redacted_payload() -> None:
    """A terminal authoritative payload echoing the worker's credential and the notify
    secret ends the operation: its result, its outcome and the completion webhook in
    the outbox hold ``[redacted]``, never the secrets."""
    store = MemoryStore()
    service = _held_service(store, authoritative=True)
    profile = waitbound.parse_profile(
        {"state": "status", "pending": ["running"], "succeeded": ["done"], "result": "result"}
    )
    record = Record(
        contract=Contract(operation_id="op-auth", profile=profile, policy=Policy(), created_at=T0),
        submission=Submission(status_url="https://provider.test/jobs/j2", job_id="j2"),
        schedule=Schedule(
            deadline_at=T0 + timedelta(hours=1), next_poll_at=T0 + timedelta(minutes=5)
        ),
        push=Push(webhook="reports", notify_url="https://hooks.example/done"),
    )
    store.create(record, [])
    app = Starlette(routes=[Route("/webhooks/{provider}", receive_webhook, methods=["POST"])])
    app.state.service = service
    payload = {"data": {"id": "j2"}, "status": "done",
               "result": {"auth": f"Bearer {CREDENTIAL}", "notify": NOTIFY}}  # fmt: skip
    body = body_of(payload)
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.post(
            "/webhooks/reports", headers=standard_headers(SECRET_A, body), content=body
        )
    assert answer.json()["matched"] is True
    assert sweep_inbox(store, clock=service.clock, rng=random.Random(1)) == 1
    done = store.get("op-auth")
    assert done is not None
    assert done.outcome is waitbound.OutcomeKind.SUCCEEDED
    assert done.result == {"auth": "[redacted]", "notify": "[redacted]"}
    [entry] = store.outbox(operation_id="op-auth", limit=10)
    assert entry.payload["data"]["result"] == done.result  # type: ignore[index,call-overload]
    kept = [
        json.dumps(done.to_json()),
        json.dumps(done.to_outcome().as_json()),
        json.dumps(entry.payload),
        *(json.dumps(e.event.payload(e.operation_id, e.seq)) for e in store.audit("op-auth")),
    ]
    for text in kept:
        for secret in (CREDENTIAL, NOTIFY, NOTIFY[6:]):
            assert secret not in text
