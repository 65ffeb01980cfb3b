"""The application of ``waitbound serve``: the token on every endpoint but the receiver
and ``/healthz``, JSON errors, ``GET /operations/{id}``, and the SSE streams with
``Last-Event-ID`` resume (in process, over Starlette's streaming ``TestClient``)."""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import anyio
import httpx
import pytest
from click.testing import CliRunner
from httpx_sse import ServerSentEvent, connect_sse
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

import waitbound
from tests.fakes import START, FakeClock, ScriptedProvider
from tests.hypothesis_profiles import examples
from waitbound import AuditEvent, MemoryStore, Operation, Policy, SQLiteStore
from waitbound._story import chain_status, operation_document
from waitbound.cli import cli
from waitbound.cli._watch import StreamLost, follow
from waitbound.stores._protocol import cursor_of
from waitbound.web._app import create_app
from waitbound.web._auth import bearer_token, token_matches
from waitbound.web._bounded import listen
from waitbound.web._config import ServeConfig
from waitbound.web._events import many_events, many_id, operation_events, parse_many_id
from waitbound.web._service import Nudge, Service

TOKEN = "tok_" + "s3cr3t" * 6
AUTH = {"Authorization": f"Bearer {TOKEN}"}
URL = "http://provider.test/status"
PROFILE = {"state": "status", "pending": ["running"], "succeeded": ["done"], "failed": ["failed"]}


def _operation(label: str | None = None) -> Operation:
    return Operation(
        status_url=URL,
        profile=waitbound.parse_profile(PROFILE),
        policy=Policy(base_delay_s=1.0, max_delay_s=2.0, deadline_s=600),
        label=label,
    )


def _finish(store: waitbound.Store, operation_id: str, polls: int = 2, end: str = "done") -> None:
    """Drive *operation_id* (new or started) to its outcome on virtual time."""
    clock = FakeClock()
    answers: list[Any] = [(200, {"status": "running"})] * polls + [(200, {"status": end})]
    provider = ScriptedProvider(clock, {"/status": answers})
    existing = store.get(operation_id)
    waitbound.wait(
        None if existing else _operation(),
        operation_id=operation_id,
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(7),
    )


def _start(store: waitbound.Store, operation_id: str, label: str | None = None) -> None:
    waitbound.start(_operation(label), operation_id=operation_id, store=store, clock=FakeClock())


def _app(store: waitbound.Store, **kwargs: Any) -> Starlette:
    service = Service(store=store, config=ServeConfig(), clock=FakeClock(), token=TOKEN)
    return create_app(service, poll_s=0.005, ping_s=0, **kwargs)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def client(store: MemoryStore) -> Iterator[TestClient]:
    with TestClient(_app(store), raise_server_exceptions=False) as test_client:
        yield test_client


def _httpx(client: TestClient) -> httpx.Client:
    """Starlette's TestClient (an httpx2 client) as the httpx client it stands in for."""
    return cast(httpx.Client, client)


def _read(client: TestClient, path: str, headers: dict[str, str] | None = None) -> list[Any]:
    """Every message of a stream that ends by itself."""
    with connect_sse(_httpx(client), "GET", path, headers={**AUTH, **(headers or {})}) as source:
        assert source.response.status_code == 200
        return list(source.iter_sse())


def _seqs(messages: list[ServerSentEvent]) -> list[int]:
    return [json.loads(m.data)["seq"] for m in messages if m.event != "end"]


# --- the token ------------------------------------------------------------------------

PROTECTED = [
    ("GET", "/operations/op-1"),
    ("GET", "/operations/op-1/events"),
    ("GET", "/events"),
    ("GET", "/no-such-page"),
]


@pytest.mark.parametrize(("method", "path"), PROTECTED)
@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer ü"],
)
def test_every_endpoint_but_two_needs_the_token(
    client: TestClient, method: str, path: str, authorization: str | None
) -> None:
    """Without the right bearer token: 401 JSON with WWW-Authenticate, never the endpoint."""
    _finish(client.app.state.service.store, "op-1")  # type: ignore[attr-defined]
    headers = {} if authorization is None else {b"Authorization": authorization.encode()}
    response = client.request(method, path, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] in {"unauthorized", "invalid_token"}
    assert TOKEN not in response.text


def test_the_token_opens_the_endpoints(client: TestClient, store: MemoryStore) -> None:
    """With the token (scheme in any case), the endpoint answers."""
    _finish(store, "op-1")
    assert client.get("/operations/op-1", headers=AUTH).status_code == 200
    lower = {"Authorization": f"bearer {TOKEN}"}
    assert client.get("/operations/op-1", headers=lower).status_code == 200


def test_healthz_and_the_receiver_need_no_token(client: TestClient) -> None:
    """/healthz says only {"ok": true}; the receiver authenticates by signature instead."""
    health = client.get("/healthz")
    assert health.status_code == 200
    assert health.json() == {"ok": True}
    received = client.post("/webhooks/reports", content=b"{}")
    assert received.status_code != 401


def test_the_token_is_compared_in_constant_time_on_bytes() -> None:
    """Any text compares (no TypeError on non-ASCII); only the exact token matches."""
    assert token_matches(TOKEN, TOKEN)
    assert not token_matches(TOKEN[:-1], TOKEN)
    assert not token_matches("ü" * 10, TOKEN)
    assert bearer_token(f"  BEARER   {TOKEN} ") == TOKEN
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


# --- errors ---------------------------------------------------------------------------


def test_an_unknown_operation_is_404(client: TestClient) -> None:
    """No such operation: 404 JSON, on the record and on its stream."""
    for path in ("/operations/nope", "/operations/nope/events"):
        response = client.get(path, headers=AUTH)
        assert response.status_code == 404
        assert response.json()["error"] == "not_found"


@pytest.mark.parametrize("garbage", ["x", "-1", "1.5", "9" * 40, "1;2", "٣"])
def test_a_garbage_last_event_id_is_400(
    client: TestClient, store: MemoryStore, garbage: str
) -> None:
    """A Last-Event-ID that is no seq: 400 JSON, no stream."""
    _finish(store, "op-1")
    response = client.get(
        "/operations/op-1/events",
        headers={b"Authorization": f"Bearer {TOKEN}".encode(), b"Last-Event-ID": garbage.encode()},
    )
    assert response.status_code == 400
    assert response.json()["error"] == "bad_last_event_id"


@pytest.mark.parametrize(
    "garbage",
    [
        "x",
        "5",
        "not-a-time|op|1",
        "2026-01-01T12:00:00|op|1",
        "2026-01-01T12:00:00+00:00||1",
        "2026-01-01T12:00:00+00:00|op|x",
        "2026-01-01T12:00:00+00:00|op",
        "2026-01-01T12:00:00+00:00|op|" + "1" * 600,
    ],
)
def test_a_garbage_last_event_id_of_many_is_400(client: TestClient, garbage: str) -> None:
    """/events: a Last-Event-ID that is not '{at}|{operation_id}|{seq}' is 400."""
    response = client.get("/events", headers={**AUTH, "Last-Event-ID": garbage})
    assert response.status_code == 400
    assert response.json()["error"] == "bad_last_event_id"


EXTREME_IDS = [
    "9999-12-31T23:59:59-23:59|op|1",  # after 9999 in UTC
    "0001-01-01T00:00:00+23:59|op|1",  # before year 1 in UTC
    "0001-01-01T00:00:00+00:00:01|op|1",
    "2026-01-01T12:00:00+00:00|op\x01|1",
]


@pytest.mark.parametrize("garbage", EXTREME_IDS)
def test_a_last_event_id_outside_the_years_a_time_holds_is_400(
    client: TestClient, garbage: str
) -> None:
    """A time that is no instant once in UTC (year 0, year 10000), or an operation id
    that is not printable: 400 ``bad_last_event_id``, not a 500."""
    response = client.get("/events", headers={**AUTH, "Last-Event-ID": garbage})
    assert response.status_code == 400
    assert response.json()["error"] == "bad_last_event_id"


@pytest.mark.parametrize(
    "since", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "1" * 100, "now"]
)
def test_a_since_outside_the_years_a_time_holds_is_400(client: TestClient, since: str) -> None:
    """``?since=`` is read by the same rule: 400 ``bad_since``."""
    response = client.get("/events", params={"since": since}, headers=AUTH)
    assert response.status_code == 400
    assert response.json()["error"] == "bad_since"


class _Looks(MemoryStore):
    """A store that stops the service after a few looks of the many-operation stream,
    so the stream ends by itself."""

    def __init__(self) -> None:
        super().__init__()
        self.stopping = threading.Event()
        self.looks = 0

    def audit_after(self, *args: Any, **kwargs: Any) -> list[Any]:
        self.looks += 1
        if self.looks >= 3:
            self.stopping.set()
        return super().audit_after(*args, **kwargs)


EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def _extreme_store() -> _Looks:
    """Events stamped in the first and in the last second a ``datetime`` holds, and now."""
    store = _Looks()
    _start(store, "op-1", "t")
    record = store.get("op-1")
    assert record is not None
    store.save(
        record,
        [
            AuditEvent(at=EARLIEST + timedelta(seconds=1), kind="note", summary="first"),
            AuditEvent(at=LATEST - timedelta(seconds=1), kind="note", summary="last"),
        ],
    )
    return store


@pytest.mark.parametrize("label", ["nomatch", "t"])
def test_a_cursor_in_the_first_second_never_breaks_the_stream(label: str) -> None:
    """Resumed after ``0001-01-01T00:00:01+00:00``, with no event after it or with some:
    the look-back window is clamped at the earliest time (no OverflowError mid-stream);
    every later event is sent once."""
    store = _extreme_store()
    after = parse_many_id("0001-01-01T00:00:01+00:00|op|1")

    async def main() -> list[str]:
        stream = many_events(
            store, after=after, label_prefix=label, poll_s=0.001, stopping=store.stopping
        )
        return [message.id or "" async for message in stream]

    got = anyio.run(main)
    expected = len(store.audit("op-1")) if label == "t" else 0
    assert len(got) == len(set(got)) == expected
    assert label != "t" or got[-1].startswith("9999-12-31T23:59:58")


_OFFSETS = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
_TIMES = st.one_of(
    st.builds(lambda at, tz: at.replace(tzinfo=tz).isoformat(), st.datetimes(), _OFFSETS),
    st.sampled_from(["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "2026-01-01"]),
)
_ASCII = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60)
_IDS = st.one_of(
    st.none(),
    st.builds(
        lambda at, op, seq: f"{at}|{op}|{seq}",
        _TIMES,
        st.sampled_from(["op-1", "op", "a|b", " "]),
        st.integers(0, 10**18).map(str),
    ),
    _ASCII,
)


@settings(max_examples=examples(150), deadline=None, derandomize=True)
@given(last_event_id=_IDS, since=st.one_of(st.none(), _TIMES, _ASCII))
def test_no_last_event_id_or_since_gives_a_5xx_or_breaks_the_stream(
    last_event_id: str | None, since: str | None
) -> None:
    """Any ``Last-Event-ID``, any ``since``: a 400 JSON, or a stream that runs (over
    events in the first and last second a time holds) until the service stops —
    never a 5xx, never an exception (the test client re-raises the server's)."""
    store = _extreme_store()
    service = Service(store=store, config=ServeConfig(), clock=FakeClock(), token=TOKEN)
    store.stopping = service.stopping
    headers = {**AUTH, **({"Last-Event-ID": last_event_id} if last_event_id else {})}
    with TestClient(create_app(service, poll_s=0.001, ping_s=0)) as http:
        response = http.get("/events", params={"since": since} if since else {}, headers=headers)
    assert response.status_code in {200, 400}, response.text
    if response.status_code == 400:
        assert response.json()["error"] in {"bad_last_event_id", "bad_since"}


class _Untouchable(MemoryStore):
    """A store any read of which fails the test (the answer would be a 500)."""

    def get(self, operation_id: str) -> waitbound.Record | None:
        raise AssertionError(f"the store was asked for {operation_id!r}")

    def audit_after(self, *args: Any, **kwargs: Any) -> list[Any]:
        raise AssertionError("the store was asked for events")


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("/operations/%00", 404, "not_found"),
        ("/operations/op%0a1", 404, "not_found"),
        ("/operations/%1b%5b2J/events", 404, "not_found"),
        ("/events?label=team%00", 400, "bad_label"),
    ],
)
def test_an_id_or_label_that_is_not_printable_never_reaches_the_store(
    path: str, status: int, error: str
) -> None:
    """No operation id or label holds a control character (and PostgreSQL's text
    columns refuse NUL: 503 forever): 404 or 400 without asking the store."""
    with TestClient(_app(_Untouchable()), raise_server_exceptions=False) as untouched:
        response = untouched.get(path, headers=AUTH)
    assert response.status_code == status, response.text
    assert response.json()["error"] == error
    assert "\n" not in response.text


def _store_down(request: Any) -> Any:
    raise waitbound.StoreError("database is locked\nFORGED: from the store")


def test_the_store_error_line_escapes_the_path(caplog: pytest.LogCaptureFixture) -> None:
    """A path with a line separator or a control character (or a store message with a
    line break) cannot forge a log line: the store error's line shows the path
    escaped, repr-style, on one line."""
    app = _app(MemoryStore(), routes=[Route("/down/{rest}", _store_down)])
    with (
        caplog.at_level(logging.ERROR, logger="waitbound.serve"),
        TestClient(app, raise_server_exceptions=False) as client,
    ):
        response = client.get("/down/x%e2%80%a8FORGED: admin%c2%85signed in%1b[2J%00", headers=AUTH)
    assert response.status_code == 503
    [line] = [r.getMessage() for r in caplog.records if "the store failed" in r.getMessage()]
    assert line.isprintable()
    assert line == (
        "GET '/down/x\\u2028FORGED: admin\\x85signed in\\x1b[2J\\x00': the store failed: "
        "database is locked\\nFORGED: from the store"
    )


class _Broken(MemoryStore):
    def get(self, operation_id: str) -> waitbound.Record | None:
        raise RuntimeError("a bug with a secret in it: " + TOKEN)


def test_an_unexpected_error_is_a_one_line_500_without_traceback() -> None:
    """A handler's bug: 500 {"error", "detail"}, no traceback and no exception text."""
    with TestClient(_app(_Broken()), raise_server_exceptions=False) as broken:
        response = broken.get("/operations/op-1", headers=AUTH)
    assert response.status_code == 500
    assert response.json()["error"] == "internal"
    assert "Traceback" not in response.text
    assert TOKEN not in response.text
    assert "\n" not in response.text


class _Down(MemoryStore):
    def get(self, operation_id: str) -> waitbound.Record | None:
        raise waitbound.StoreError("database is locked")


def test_a_store_failure_is_503() -> None:
    """The store failed: 503 store_unavailable, said without the store's message."""
    with TestClient(_app(_Down()), raise_server_exceptions=False) as down:
        response = down.get("/operations/op-1/events", headers=AUTH)
    assert response.status_code == 503
    assert response.json()["error"] == "store_unavailable"


def test_an_unknown_path_is_a_json_404(client: TestClient) -> None:
    """A path with no endpoint: 404 JSON (with the token), 405 JSON for a wrong method."""
    assert client.get("/nothing", headers=AUTH).json()["error"] == "not_found"
    wrong = client.delete("/operations/op-1", headers=AUTH)
    assert wrong.status_code == 405
    assert wrong.json()["error"] == "method_not_allowed"


# --- GET /operations/{id} -------------------------------------------------------------


def test_the_operation_is_what_show_json_prints(tmp_path: Any) -> None:
    """GET /operations/{id} is the document `waitbound show --json` prints."""
    path = tmp_path / "s.db"
    sqlite = SQLiteStore(path, create=True)
    _finish(sqlite, "op-1")
    with TestClient(_app(sqlite)) as http:
        served = http.get("/operations/op-1", headers=AUTH).json()
    sqlite.close()
    shown = CliRunner().invoke(cli, ["show", "op-1", "--json", "--store", str(path)])
    assert shown.exit_code == 0, shown.output
    assert served == json.loads(shown.output)
    assert served["outcome"]["outcome"] == "succeeded"


def test_show_json_and_get_operation_are_built_by_one_function(tmp_path: Any) -> None:
    """One builder (``_story.operation_document``) serves both fronts: for a record
    that is a group's member, each front's document is what it builds."""
    path = tmp_path / "s.db"
    sqlite = SQLiteStore(path, create=True)
    clock = FakeClock()
    answers: list[Any] = [(200, {"status": "running"}), (200, {"status": "done"})]
    provider = ScriptedProvider(clock, {"/status": answers})
    grouped = waitbound.wait_all(
        [_operation()], store=sqlite, client=provider.client(), clock=clock,
        sleep=clock.sleep, rng=random.Random(7),
    )  # fmt: skip
    operation_id = grouped.outcomes[0].operation_id
    record = sqlite.get(operation_id)
    assert record is not None
    events = sqlite.audit(operation_id)
    built = operation_document(
        record, events, chain_status(record, events, None), [grouped.group_id]
    )
    with TestClient(_app(sqlite)) as http:
        served = http.get(f"/operations/{operation_id}", headers=AUTH).json()
    sqlite.close()
    shown = CliRunner().invoke(cli, ["show", operation_id, "--json", "--store", str(path)])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == served == json.loads(json.dumps(built))
    assert served["groups"] == [grouped.group_id]


# --- GET /operations/{id}/events ------------------------------------------------------


def test_a_finished_operation_streams_every_event_then_end(
    client: TestClient, store: MemoryStore
) -> None:
    """Every audit event, in seq order, as id/event/data; then `end` with the outcome."""
    _finish(store, "op-1")
    stored = store.audit("op-1")
    messages = _read(client, "/operations/op-1/events")
    events, end = messages[:-1], messages[-1]
    assert [int(m.id) for m in events] == [s.seq for s in stored]
    assert [m.event for m in events] == [s.event.kind for s in stored]
    assert [json.loads(m.data) for m in events] == [s.event.payload("op-1", s.seq) for s in stored]
    assert set(json.loads(events[0].data)) == {
        "operation_id", "seq", "at", "kind", "summary", "data"
    }  # fmt: skip
    assert end.event == "end"
    assert json.loads(end.data) == store.get("op-1").to_outcome().as_json()  # type: ignore[union-attr]


@pytest.mark.parametrize("after", [0, 1, 3, 4])
def test_last_event_id_resumes_without_loss_or_duplicates(
    client: TestClient, store: MemoryStore, after: int
) -> None:
    """Resuming after seq k yields exactly seqs k+1.. (then end)."""
    _finish(store, "op-1")
    seqs = [s.seq for s in store.audit("op-1")]
    first = _seqs(_read(client, "/operations/op-1/events"))[:after]
    rest = _seqs(_read(client, "/operations/op-1/events", {"Last-Event-ID": str(after)}))
    assert first + rest == seqs


def test_resuming_after_the_last_event_yields_only_end(
    client: TestClient, store: MemoryStore
) -> None:
    """A client that has everything gets `end` at once."""
    _finish(store, "op-1")
    last = store.audit("op-1")[-1].seq
    messages = _read(client, "/operations/op-1/events", {"Last-Event-ID": str(last)})
    assert [m.event for m in messages] == ["end"]


def test_a_live_stream_sees_a_wait_in_order_and_a_reconnect_loses_nothing(
    client: TestClient, store: MemoryStore
) -> None:
    """Opened before the wait runs; read 3 events, drop, resume: every event once, in order."""
    _start(store, "op-1")
    seen: list[int] = []
    with connect_sse(_httpx(client), "GET", "/operations/op-1/events", headers=AUTH) as source:
        messages = source.iter_sse()
        seen.append(json.loads(next(messages).data)["seq"])  # created
        driver = threading.Thread(target=_finish, args=(store, "op-1", 4))
        driver.start()
        seen += [json.loads(next(messages).data)["seq"] for _ in range(2)]
    driver.join()
    resumed = _read(client, "/operations/op-1/events", {"Last-Event-ID": str(seen[-1])})
    seen += _seqs(resumed)
    assert seen == [s.seq for s in store.audit("op-1")]
    assert resumed[-1].event == "end"


def test_an_open_decision_request_keeps_the_stream_open(store: MemoryStore) -> None:
    """An outcome with a decision request open is not final: the stream sends no `end`
    (a decision may resume the operation); it ends when the service stops."""
    _finish(store, "op-1")
    record = store.get("op-1")
    assert record is not None
    request = waitbound.DecisionRequest(
        opened_at=START, due_at=START + timedelta(hours=1), options=("extend", "abandon")
    )
    stored = store.save(
        record.evolve(oversight=record.oversight.evolve(decision_request=request)), []
    )
    assert stored.is_finished
    assert not stored.is_final
    stopping = threading.Event()

    async def main() -> list[str]:
        got: list[str] = []
        async for message in operation_events(store, "op-1", poll_s=0.001, stopping=stopping):
            got.append(message.event or "")
            if len(got) == stored.audit_seq:
                stopping.set()
        return got

    got = anyio.run(main)
    assert "end" not in got
    assert len(got) == stored.audit_seq


# --- GET /events ----------------------------------------------------------------------


def _stop_when(stopping: threading.Event, store: MemoryStore, count: int, label: str) -> None:
    """Set *stopping* once the store has *count* events under *label*."""
    while len(store.audit_after(None, label_prefix=label)) < count:
        threading.Event().wait(0.001)
    stopping.set()


def _many(store: MemoryStore, headers: dict[str, str], label: str, total: int) -> list[Any]:
    service = Service(store=store, config=ServeConfig(), clock=FakeClock(), token=TOKEN)
    app = create_app(service, poll_s=0.005, ping_s=0)
    messages = []
    with (
        TestClient(app) as http,
        connect_sse(
            _httpx(http), "GET", f"/events?label={label}", headers={**AUTH, **headers}
        ) as source,
    ):
        for message in source.iter_sse():
            messages.append(message)
            if len(messages) == total:
                break
    return messages


def test_events_streams_many_operations_by_label(store: MemoryStore) -> None:
    """/events?label=team-a: both team-a operations' events in (at, id, seq) order, ids
    '{at}|{op}|{seq}', and none of team-b's."""
    _start(store, "op-a1", "team-a/x")
    _start(store, "op-b", "team-b/x")
    _start(store, "op-a2", "team-a/y")
    _finish(store, "op-a1")
    _finish(store, "op-b")
    _finish(store, "op-a2")
    expected = store.audit_after(None, label_prefix="team-a")
    assert {s.operation_id for s in expected} == {"op-a1", "op-a2"}
    messages = _many(store, {}, "team-a", len(expected))
    assert [m.id for m in messages] == [many_id(s) for s in expected]
    assert [json.loads(m.data) for m in messages] == [
        s.event.payload(s.operation_id, s.seq) for s in expected
    ]
    resumed = _many(store, {"Last-Event-ID": messages[4].id}, "team-a", len(expected) - 5)
    assert [m.id for m in messages[:5] + resumed] == [many_id(s) for s in expected]


def test_a_many_id_parses_back_to_its_cursor(store: MemoryStore) -> None:
    """many_id and parse_many_id agree (times in any offset are read as UTC)."""
    _finish(store, "op-1")
    for stored in store.audit("op-1"):
        assert parse_many_id(many_id(stored)) == cursor_of(stored)
    assert parse_many_id(None) is None
    assert parse_many_id("  ") is None
    shifted = parse_many_id("2026-01-01T13:00:00+01:00|op-1|2")
    assert shifted == (START, "op-1", 2)


def test_an_event_committed_late_with_an_earlier_stamp_is_still_sent_once(
    store: MemoryStore,
) -> None:
    """Writer B commits an event stamped before writer A's, after the stream sent A's:
    the look-back sends B's too, and nothing twice."""
    _start(store, "op-a", "t")
    _start(store, "op-b", "t")
    record_a, record_b = store.get("op-a"), store.get("op-b")
    assert record_a is not None
    assert record_b is not None
    later = START + timedelta(seconds=10)
    stopping = threading.Event()

    async def main() -> list[str]:
        got: list[str] = []
        stream = many_events(store, label_prefix="t", poll_s=0.001, stopping=stopping)
        async for message in stream:
            got.append(message.id or "")
            if len(got) == 2:  # both `created` events: now A writes, then B, stamped earlier
                store.save(record_a, [AuditEvent(at=later, kind="note", summary="a")])
            if len(got) == 3:
                store.save(
                    record_b,
                    [AuditEvent(at=later - timedelta(seconds=1), kind="note", summary="b")],
                )
            if len(got) == 4:
                stopping.set()
        return got

    got = anyio.run(main)
    assert len(got) == len(set(got)) == 4
    assert {i.split("|")[1] for i in got[2:]} == {"op-a", "op-b"}


# --- the nudge --------------------------------------------------------------------------


def test_a_nudge_before_the_wait_is_not_lost() -> None:
    """Nudged while nobody waits: the next wait returns at once, True; then it times out."""
    seen: list[object] = []
    nudge = Nudge(then=seen.append)

    async def main() -> tuple[bool, bool]:
        nudge(None)
        first = await nudge.wait(5.0)
        second = await nudge.wait(0.001)
        return first, second

    assert anyio.run(main) == (True, False)
    assert seen == []


def test_a_nudge_from_another_thread_wakes_the_waiter() -> None:
    """The receiver may nudge from a worker thread: the waiter wakes well before its timeout."""
    nudge = Nudge()

    async def main() -> bool:
        result: list[bool] = []
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:

                async def waiter() -> None:
                    result.append(await nudge.wait(30.0))

                group.start_soon(waiter)
                await anyio.wait_all_tasks_blocked()
                await anyio.to_thread.run_sync(nudge)
        return result[0]

    assert anyio.run(main) is True


# --- waitbound watch's client ------------------------------------------------------------


def test_follow_prints_every_event_once_and_returns_the_outcome(
    client: TestClient, store: MemoryStore
) -> None:
    """follow() over the real app: each event once in order, then the outcome object."""
    _finish(store, "op-1")
    seen: list[int] = []
    outcome = follow(
        _httpx(client), "http://testserver", "op-1", TOKEN, on_event=lambda e, s: seen.append(s)
    )
    assert seen == [s.seq for s in store.audit("op-1")]
    assert outcome["outcome"] == "succeeded"


def test_follow_reports_a_wrong_token_and_an_unknown_operation(
    client: TestClient, store: MemoryStore
) -> None:
    """401 and 404 are final: one clear error, no retries."""
    _finish(store, "op-1")
    sleeps: list[float] = []
    with pytest.raises(waitbound.UsageError, match="refused the token"):
        follow(
            _httpx(client),
            "http://testserver",
            "op-1",
            "wrong" * 5,
            on_event=print,
            sleep=sleeps.append,
        )
    with pytest.raises(waitbound.OperationNotFoundError):
        follow(
            _httpx(client), "http://testserver", "nope", TOKEN, on_event=print, sleep=sleeps.append
        )
    assert sleeps == []


def _sse(seq: int) -> bytes:
    payload = {"operation_id": "op-1", "seq": seq, "at": START.isoformat(), "kind": "note",
               "summary": f"event {seq}", "data": {}}  # fmt: skip
    return f"id: {seq}\nevent: note\ndata: {json.dumps(payload)}\n\n".encode()


class _Dropping(httpx.SyncByteStream):
    """A stream body that sends *chunks*, then fails as a dropped connection does."""

    def __init__(self, chunks: list[bytes], then: Exception | None) -> None:
        self.chunks, self.then = chunks, then

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.then is not None:
            raise self.then


def test_follow_resumes_a_dropped_stream_with_last_event_id() -> None:
    """Dropped after seq 2: reconnect with Last-Event-ID 2 after 0.5 s; 3 follows, then end."""
    sent: list[str | None] = []
    end = f"event: end\ndata: {json.dumps({'operation_id': 'op-1', 'outcome': 'failed'})}\n\n"

    def provider(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("last-event-id"))
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        if len(sent) == 1:
            body = _Dropping([_sse(1), _sse(2)], httpx.ReadError("connection reset"))
        elif len(sent) == 2:
            body = _Dropping([_sse(2), _sse(3)], None)  # a repeat is dropped; ends early
        else:
            body = _Dropping([end.encode()], None)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    seen: list[int] = []
    sleeps: list[float] = []
    with httpx.Client(transport=httpx.MockTransport(provider)) as http:
        outcome = follow(http, "http://svc", "op-1", TOKEN,
                         on_event=lambda e, s: seen.append(s), sleep=sleeps.append)  # fmt: skip
    assert seen == [1, 2, 3]
    assert sent == [None, "2", "3"]
    assert sleeps == [0.5, 0.5]
    assert outcome["outcome"] == "failed"


def test_follow_gives_up_after_bounded_retries_with_backoff() -> None:
    """Nobody listens: 5 reconnects with pauses 0.5, 1, 2, 4, 8 s, then one clear error."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    sleeps: list[float] = []
    with (
        httpx.Client(transport=httpx.MockTransport(refuse)) as http,
        pytest.raises(StreamLost, match="gave up after 5 reconnects"),
    ):
        follow(http, "http://svc", "op-1", TOKEN, on_event=print, sleep=sleeps.append)
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]


def test_an_address_in_use_is_one_line() -> None:
    """serve cannot bind: a UsageError naming the address, before anything starts."""
    taken = listen("127.0.0.1", 0)
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(waitbound.UsageError, match=f"cannot listen on 127.0.0.1:{port}"):
            listen("127.0.0.1", port)
    finally:
        taken.close()
