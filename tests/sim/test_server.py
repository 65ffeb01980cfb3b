"""The simulator on real loopback HTTP: serving order, templates, drops, delays and the log."""

from __future__ import annotations

import email.utils
import json
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from waitbound._base._errors import UsageError
from waitbound.sim import Simulator, parse_scenario
from waitbound.testing import FakeClock, ScenarioBuilder


@contextmanager
def serving(
    endpoints: Mapping[str, object], log_path: Path | None = None, **more: object
) -> Iterator[tuple[Simulator, httpx.Client]]:
    """Serve ``endpoints`` (and top-level keys *more*) and yield the simulator and a client."""
    scenario = parse_scenario({"id": "t", "endpoints": endpoints, **more})
    with (
        Simulator(scenario, log_path=log_path) as sim,
        httpx.Client(base_url=sim.base_url, timeout=5) as client,
    ):
        yield sim, client


def _ms(at: datetime) -> datetime:
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def test_entries_in_order_with_repeat_and_last_forever() -> None:
    """Entries are served in order, each ``repeat`` times, and the last one forever."""
    status = [
        {"code": 200, "body": "a", "repeat": 2},
        {"code": 201, "body": "b"},
        {"code": 202, "body": "c"},
    ]
    with serving({"status": status}) as (sim, client):
        answers = [client.get("/status") for _ in range(6)]
    assert [r.json() for r in answers] == ["a", "a", "b", "c", "c", "c"]
    assert [r.status_code for r in answers] == [200, 200, 201, 202, 202, 202]
    assert [e.index for e in sim.log()] == [0, 0, 1, 2, 2, 2]


def test_after_s_holds_the_previous_entry() -> None:
    """An entry with after_s is served only once that long after the first request (on
    the simulator's own clock, so a slow client cannot run past it)."""
    clock = FakeClock()
    status = [{"code": 200, "body": "early"}, {"code": 200, "body": "late", "after_s": 0.5}]
    scenario = parse_scenario({"id": "t", "endpoints": {"status": status}})
    with (
        Simulator(scenario, clock=clock) as sim,
        httpx.Client(base_url=sim.base_url, timeout=5) as client,
    ):
        held = [client.get("/status").json() for _ in range(2)]
        clock.advance(0.25)
        held.append(client.get("/status").json())
        clock.advance(0.25)
        late = [client.get("/status").json() for _ in range(2)]
    assert held == ["early", "early", "early"]
    assert late == ["late", "late"]
    assert [e.index for e in sim.log()] == [0, 0, 0, 1, 1]
    assert sim.log()[3].at_s == 0.5


def test_an_entry_after_another_endpoint_waits_for_its_first_request() -> None:
    """An entry with ``"after": "cancel"`` becomes current only once a cancel request has
    arrived, however long that takes; the previous entry is served until then."""
    clock = FakeClock()
    status = [
        {"code": 200, "body": "running", "repeat": 2},
        {"code": 200, "body": "cancelling", "after": "cancel"},
        {"code": 200, "body": "cancelled"},
    ]
    endpoints = {"status": status, "cancel": [{"code": 202, "body": "ok"}]}
    scenario = parse_scenario({"id": "t", "endpoints": endpoints})
    with (
        Simulator(scenario, clock=clock) as sim,
        httpx.Client(base_url=sim.base_url, timeout=5) as client,
    ):
        before = [client.get("/status").json() for _ in range(3)]
        clock.advance(3600)
        before.append(client.get("/status").json())
        client.post("/cancel")
        after = [client.get("/status").json() for _ in range(3)]
    assert before == ["running"] * 4
    assert after == ["cancelling", "cancelled", "cancelled"]
    assert [e.endpoint for e in sim.log()] == ["status"] * 4 + ["cancel"] + ["status"] * 3


def test_cursors_are_per_endpoint() -> None:
    """Each endpoint has its own cursor; /jobs serves ``submit``."""
    endpoints = {
        "status": [{"code": 200, "body": "s0"}, {"code": 200, "body": "s1"}],
        "result": [{"code": 409, "body": "r0"}, {"code": 200, "body": "r1"}],
        "submit": [{"code": 202, "body": "j0"}],
    }
    with serving(endpoints) as (sim, client):
        bodies = [client.post(p).json() for p in ("/status", "/result", "/jobs", "/status")]
        bodies.append(client.get("/result").json())
    assert bodies == ["s0", "r0", "j0", "s1", "r1"]
    assert [sim.count(name) for name in ("status", "result", "submit", "cancel")] == [2, 2, 1, 0]


def test_templates_expand_in_body_headers_and_raw() -> None:
    """{base_url}, {now±Ns}, {http_date±Ns} and {start+Ns} expand; other braces stay."""
    body = {
        "url": "{base_url}/result",
        "eta": "{now+3s}",
        "past": ["{now-1.5s}", {"t": "{now}"}],
        "fixed": "{start+10s}",
        "keep": '{not_a_template} {now+3} {"a": 1}',
        "n": 5,
    }
    endpoints = {
        "status": [{"code": 200, "body": body, "headers": {"Retry-After": "{http_date+60s}"}}],
        "result": [{"code": 200, "raw": "at {base_url} {now+0.5s}"}],
    }
    with serving(endpoints) as (sim, client):
        before = datetime.now(UTC)
        first = client.get("/status")
        second = client.get("/status")
        raw = client.get("/result")
        after = datetime.now(UTC)
    got = first.json()
    assert got["url"] == f"{sim.base_url}/result"
    assert _ms(before) + timedelta(seconds=3) <= datetime.fromisoformat(got["eta"])
    assert datetime.fromisoformat(got["eta"]) <= after + timedelta(seconds=3)
    assert got["eta"].endswith("Z")
    past = datetime.fromisoformat(got["past"][0])
    assert _ms(before) - timedelta(seconds=1.5) <= past <= after - timedelta(seconds=1.5)
    assert _ms(before) <= datetime.fromisoformat(got["past"][1]["t"]) <= after
    start = sim.log()[0].at
    assert datetime.fromisoformat(got["fixed"]) == _ms(start) + timedelta(seconds=10)
    assert second.json()["fixed"] == got["fixed"]
    assert got["keep"] == '{not_a_template} {now+3} {"a": 1}'
    assert got["n"] == 5
    retry_at = email.utils.parsedate_to_datetime(first.headers["Retry-After"])
    assert before.replace(microsecond=0) + timedelta(seconds=60) <= retry_at
    assert retry_at <= after + timedelta(seconds=60)
    text, stamp = raw.text.rsplit(" ", 1)
    assert text == f"at {sim.base_url}"
    assert datetime.fromisoformat(stamp) >= _ms(before) + timedelta(seconds=0.5)


def test_drop_closes_the_connection_without_a_response() -> None:
    """A drop closes the connection unanswered; it is logged with code None and counted."""
    status = [{"code": 200, "body": "ok"}, {"drop": True}]
    with serving({"status": status}) as (sim, client):
        assert client.get("/status").json() == "ok"
        for _ in range(2):
            with pytest.raises(httpx.RemoteProtocolError):
                client.get("/status")
        assert client.get("/_sim/log").status_code == 200
    assert [e.code for e in sim.log()] == [200, None, None]
    assert sim.count("status") == 3


def test_delay_s_waits_before_answering() -> None:
    """delay_s makes the server wait that long before answering."""
    with serving({"status": [{"code": 200, "body": "slow", "delay_s": 0.2}]}) as (sim, client):
        started = time.monotonic()
        assert client.get("/status").json() == "slow"
        assert time.monotonic() - started >= 0.2
    entry = sim.log()[0]
    assert entry.answered_at_s - entry.at_s >= 0.2


def test_null_body_is_an_empty_response() -> None:
    """A null body sends no content and no Content-Type; 204 carries no Content-Length."""
    endpoints = {"status": [{"code": 204, "body": None}], "result": [{"code": 200}]}
    with serving(endpoints) as (_, client):
        empty = client.get("/status")
        also_empty = client.get("/result")
    assert (empty.status_code, empty.content) == (204, b"")
    assert "content-type" not in empty.headers
    assert "content-length" not in empty.headers
    assert (also_empty.content, also_empty.headers["content-length"]) == (b"", "0")


def test_raw_is_served_as_text_and_headers_are_sent() -> None:
    """raw is sent as-is as text/plain; custom headers are sent and may set Content-Type."""
    endpoints = {
        "status": [{"code": 200, "raw": "{not json", "headers": {"X-Id": "j-1"}}],
        "result": [{"code": 200, "raw": "<a/>", "headers": {"content-type": "application/xml"}}],
    }
    with serving(endpoints) as (_, client):
        text = client.get("/status")
        xml = client.get("/result")
    assert (text.text, text.headers["content-type"]) == ("{not json", "text/plain; charset=utf-8")
    assert text.headers["x-id"] == "j-1"
    assert text.headers["content-length"] == "9"
    assert (xml.text, xml.headers["content-type"]) == ("<a/>", "application/xml")


def test_unknown_path_and_empty_endpoint_answer_404() -> None:
    """An unknown path or an endpoint without entries answers 404 and is logged."""
    with serving({"status": [{"code": 200, "body": "ok"}], "cancel": []}) as (sim, client):
        unknown = client.delete("/nope?x=1")
        cancel = client.post("/cancel", json={"reason": "test"})
        assert client.get("/status").json() == "ok"
    for answer in (unknown, cancel):
        assert (answer.status_code, answer.json()) == (404, {"error": "no such endpoint"})
    logged = [(e.method, e.path, e.endpoint, e.index, e.code) for e in sim.log()]
    assert logged[:2] == [
        ("DELETE", "/nope?x=1", None, None, 404),
        ("POST", "/cancel", "cancel", None, 404),
    ]
    assert sim.count("cancel") == 1


def test_any_method_is_accepted() -> None:
    """Any HTTP method is served on an endpoint path; HEAD gets headers only."""
    with serving({"submit": [{"code": 201, "body": {"id": "j"}}]}) as (sim, client):
        codes = [client.request(m, "/jobs").status_code for m in ("PUT", "PATCH", "FROB")]
        head = client.head("/jobs")
    assert codes == [201, 201, 201]
    assert (head.status_code, head.content, head.headers["content-length"]) == (201, b"", "11")
    assert [e.method for e in sim.log()] == ["PUT", "PATCH", "FROB", "HEAD"]


def test_log_entries_measure_from_the_first_request() -> None:
    """at_s starts at 0.0 on the first request of any path and only grows; at is aware UTC."""
    with serving({"status": [{"code": 200}]}) as (sim, client):
        before = datetime.now(UTC)
        client.get("/elsewhere")
        for _ in range(3):
            client.get("/status")
    log = sim.log()
    assert log[0].at_s == 0.0
    assert [e.at_s for e in log] == sorted(e.at_s for e in log)
    assert all(e.answered_at_s >= e.at_s for e in log)
    assert all(e.at.tzinfo is UTC and e.at >= before for e in log)
    assert abs((log[-1].at - log[0].at).total_seconds() - log[-1].at_s) < 0.05


def test_sim_log_endpoint_lists_entries_unlogged() -> None:
    """GET /_sim/log answers the log as JSON and is neither logged nor counted."""
    with serving({"status": [{"code": 200, "body": "ok"}]}) as (sim, client):
        client.get("/status")
        client.get("/status")
        listing = client.get("/_sim/log").json()
        assert client.get("/_sim/log").json() == listing
    assert listing == [entry.to_json() for entry in sim.log()]
    assert [item["code"] for item in listing] == [200, 200]
    assert listing[0]["at"].endswith("Z")
    assert sim.count("status") == 2


def test_log_path_gets_one_json_line_per_request(tmp_path: Path) -> None:
    """With log_path, each request is appended as one JSON line and flushed at once."""
    path = tmp_path / "requests.jsonl"
    with serving({"status": [{"code": 200}, {"drop": True}]}, log_path=path) as (sim, client):
        client.get("/status")
        first_line = path.read_text(encoding="utf-8")
        with pytest.raises(httpx.RemoteProtocolError):
            client.get("/status")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert json.loads(first_line) == lines[0]
    assert lines == [entry.to_json() for entry in sim.log()]
    assert set(lines[0]) == {
        *("method", "path", "endpoint", "index", "code", "at_s", "at", "answered_at_s", "headers")
    }
    assert lines[1]["code"] is None


def test_concurrent_requests_follow_the_order() -> None:
    """Concurrent requests still see each entry exactly ``repeat`` times."""
    status = [{"code": 200, "body": 0, "repeat": 5}, {"code": 200, "body": 1, "repeat": 5}]
    status.append({"code": 200, "body": 2})
    bodies: list[int] = []
    with serving({"status": status}) as (sim, _):

        def fetch() -> None:
            with urllib.request.urlopen(f"{sim.base_url}/status") as answer:
                bodies.append(json.load(answer))

        threads = [threading.Thread(target=fetch) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(bodies) == [0] * 5 + [1] * 5 + [2] * 10


def test_serve_forever_returns_when_stopped() -> None:
    """serve_forever() blocks until stop() is called, then the port is closed."""
    sim = Simulator(parse_scenario({"id": "t", "endpoints": {"status": [{"code": 200}]}}))
    threading.Timer(0.1, sim.stop).start()
    sim.serve_forever()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.base_url}/status")


def test_misuse_raises_usage_error() -> None:
    """A non-loopback host, base_url before start, a second start, or an unknown count fail."""
    scenario = parse_scenario({"id": "t", "endpoints": {}})
    with pytest.raises(UsageError, match="loopback"):
        Simulator(scenario, host="0.0.0.0")
    sim = Simulator(scenario)
    with pytest.raises(UsageError, match="not started"):
        _ = sim.base_url
    with sim:
        with pytest.raises(UsageError, match="already started"):
            sim.start()
        with pytest.raises(UsageError, match="unknown endpoint 'jobs'"):
            sim.count("jobs")


CREDENTIALS = {
    "Authorization": "Bearer tok-A",
    "Proxy-Authorization": "Basic cHJveHk=",
    "Cookie": "session=s3",
    "Set-Cookie": "a=b",
    "X-Api-Key": "k-1",
    "X-Auth-Token": "t-1",
    "X-Client-Secret": "s-1",
    "X-Amz-Signature": "sig-1",
    "X-Password": "pw-1",
}


def test_sim_log_redacts_credentials_in_memory_the_log_file_and_the_log_endpoint(
    tmp_path: Path,
) -> None:
    """Credential headers and Idempotency-Key are logged by name with the value
    [redacted]; others as sent."""
    path = tmp_path / "requests.jsonl"
    with serving({"status": [{"code": 200}]}, log_path=path) as (sim, client):
        client.get(
            "/status",
            headers={**CREDENTIALS, "X-Request-Tag": "visible", "Idempotency-Key": "order-42"},
        )
        listing = client.get("/_sim/log").json()
    written = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for headers in (dict(sim.log()[0].headers), listing[0]["headers"], written[0]["headers"]):
        lowered = {name.lower(): value for name, value in headers.items()}
        for name in CREDENTIALS:
            assert lowered[name.lower()] == "[redacted]", name
        assert lowered["x-request-tag"] == "visible"
        assert lowered["idempotency-key"] == "[redacted]"  # docs/cli.md: a name with "key"
        assert lowered["user-agent"].startswith("python-httpx")
    everything = json.dumps(listing) + path.read_text(encoding="utf-8")
    assert not [value for value in CREDENTIALS.values() if value in everything]
    assert "order-42" not in everything


def test_extra_endpoints_are_served_at_their_routes_and_counted() -> None:
    """A named extra endpoint is served at its paths only, with its own cursor and count."""
    endpoints = {
        "monitor": [{"code": 200, "body": {"status": "Running"}}, {"code": 200, "body": "done"}],
        "location2": [{"code": 202}],
        "status": [{"code": 200, "body": "s"}],
    }
    paths = {"monitor": ["/ops/1", "/ops/1b"], "location2": ["/loc/2"]}
    with serving(endpoints, paths=paths) as (sim, client):
        first = client.get("/ops/1").json()
        second = client.get("/ops/1b?api-version=1").json()
        moved = client.get("/loc/2").status_code
        status = client.get("/status").json()
        unknown = client.get("/monitor").status_code
    assert (first, second, moved, status, unknown) == ({"status": "Running"}, "done", 202, "s", 404)
    assert (sim.count("monitor"), sim.count("location2"), sim.count("status")) == (2, 1, 1)
    assert [e.endpoint for e in sim.log()] == ["monitor", "monitor", "location2", "status", None]
    with pytest.raises(UsageError, match="expected one of: status, result, cancel, submit, moni"):
        sim.count("resource")


def test_method_and_path_wins_over_path_alone() -> None:
    """``PUT /resource`` submits and ``GET /resource`` reads the resource: the original URI."""
    endpoints = {
        "submit": [{"code": 201, "body": {"properties": {"provisioningState": "Creating"}}}],
        "resource": [{"code": 200, "body": {"properties": {"provisioningState": "Succeeded"}}}],
        "other": [{"code": 200, "body": "other"}],
    }
    paths = {"submit": ["PUT /resource"], "resource": ["GET /resource"], "other": ["/resource"]}
    with serving(endpoints, paths=paths) as (sim, client):
        put = client.put("/resource?api-version=2024-01-01", json={"location": "x"})
        get = client.get("/resource?api-version=2024-01-01")
        delete = client.delete("/resource")
        jobs = client.post("/jobs")
    assert put.status_code == 201
    assert put.json()["properties"]["provisioningState"] == "Creating"
    assert get.json()["properties"]["provisioningState"] == "Succeeded"
    assert (delete.json(), jobs.status_code) == ("other", 201)
    logged = [(e.method, e.path, e.endpoint) for e in sim.log()]
    assert logged == [
        ("PUT", "/resource?api-version=2024-01-01", "submit"),
        ("GET", "/resource?api-version=2024-01-01", "resource"),
        ("DELETE", "/resource", "other"),
        ("POST", "/jobs", "submit"),
    ]


def test_require_query_refuses_a_request_without_it() -> None:
    """A request lacking a required query parameter gets an Azure 400, logged, no entry served."""
    endpoints = {
        "monitor": [{"code": 200, "body": {"status": "Running"}}, {"code": 200, "body": "done"}],
        "status": [{"code": 200, "body": "free"}],
    }
    with serving(
        endpoints,
        paths={"monitor": ["/ops/1"]},
        require_query={"monitor": {"api-version": "2024-01-01"}, "status": {"tenant": "t1"}},
    ) as (sim, client):
        missing = client.get("/ops/1")
        wrong = client.get("/ops/1?api-version=2023-01-01")
        served = [client.get("/ops/1?x=1&api-version=2024-01-01").json() for _ in range(2)]
        other = client.get("/status?tenant=t2")
    assert missing.status_code == wrong.status_code == 400
    assert missing.json()["error"]["code"] == "MissingApiVersionParameter"
    assert "api-version=2024-01-01" in missing.json()["error"]["message"]
    assert served == [{"status": "Running"}, "done"]  # the refusals served no entry
    assert (other.status_code, other.json()["error"]["code"]) == (400, "MissingQueryParameter")
    logged = [(e.path, e.endpoint, e.index, e.code) for e in sim.log()]
    assert logged[:2] == [
        ("/ops/1", "monitor", None, 400),
        ("/ops/1?api-version=2023-01-01", "monitor", None, 400),
    ]
    assert sim.count("monitor") == 4


def test_log_keeps_the_method_and_the_query() -> None:
    """The log's ``path`` is the request target with its query; ``method`` is as sent."""
    with serving({"status": [{"code": 200}]}) as (sim, client):
        client.request("PATCH", "/status?api-version=2024-01-01&b=%20x")
    entry = sim.log()[0]
    assert (entry.method, entry.path) == ("PATCH", "/status?api-version=2024-01-01&b=%20x")
    assert entry.to_json()["path"] == "/status?api-version=2024-01-01&b=%20x"


def test_unix_time_templates_are_integers_in_a_body_and_text_in_a_header() -> None:
    """{epoch±Ns} and {start_epoch±Ns} give Unix seconds: a body string that is only the
    template becomes a JSON integer (OpenAI's times); in a header or text it stays text."""
    body = {"expires_at": "{start_epoch+86400s}", "now": "{epoch}", "text": "at {epoch+5s}"}
    headers = {"x-ratelimit-reset": "{epoch+60s}"}
    with serving({"status": [{"code": 200, "body": body, "headers": headers}]}) as (sim, client):
        before = int(datetime.now(UTC).timestamp())
        answer = client.get("/status")
        after = int(datetime.now(UTC).timestamp())
    got = answer.json()
    start = int(sim.log()[0].at.timestamp())
    assert got["expires_at"] == start + 86400
    assert isinstance(got["now"], int)
    assert before <= got["now"] <= after
    assert before + 5 <= int(got["text"].removeprefix("at ")) <= after + 5
    assert before + 60 <= int(answer.headers["x-ratelimit-reset"]) <= after + 60


def test_a_built_scenario_can_wait_for_the_cancel() -> None:
    """ScenarioBuilder's ``after=`` writes the entry's ``after`` key."""
    built = (
        ScenarioBuilder("b")
        .status(200, {"status": "running"})
        .status(200, {"status": "canceled"}, after="cancel")
        .build()
    )
    assert built.endpoints["status"][1].after == "cancel"
    assert ScenarioBuilder("b").status(200, "x").build().endpoints["status"][0].after is None
