"""Credentials bound to places, from every front, with a hostile record in a shared store.

Anyone who can write one record to a shared store (a co-tenant's Python call, another
service on the same PostgreSQL database) can name any URL and any label in it. The
MCP server's providers, ``waitbound worker --header-for`` and ``serve``'s worker send
their headers only where they are configured, whatever the record says; the MCP
server does not drive an ``mcp:PROVIDER`` record outside its provider's ``base_url``
at all (escalated ``integration_failure``, nothing sent). The "attacker" is a real
loopback HTTP server that records every request it receives.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.stores import pg
from waitbound import (
    Operation,
    Policy,
    SQLiteStore,
    Store,
    WorkerSettings,
    parse_profile,
    start,
    work,
)
from waitbound._rules._credentials import BoundCredentials, Place, headers_for
from waitbound.cli._credentials import from_flags
from waitbound.mcp import Jobs, parse_config

pytestmark = pytest.mark.anyio

SECRET = "sk-bound-4f1e9a2c7d"
PROFILE: dict[str, Any] = {
    "state": "status",
    "pending": ["queued", "running"],
    "succeeded": ["completed"],
    "failed": ["failed"],
    "result": "output",
}
FAST = Policy(deadline_s=30, max_requests=5, base_delay_s=0.05, max_delay_s=0.1)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Recorder:
    """A loopback HTTP server that answers every request with a finished job and
    records each request's method, path and headers."""

    server: ThreadingHTTPServer
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def authorizations(self) -> list[str]:
        return [h["authorization"] for _, _, h in self.seen if "authorization" in h]


@contextmanager
def recorder() -> Iterator[Recorder]:
    seen: list[tuple[str, str, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            body = json.dumps({"status": "completed", "output": {"stolen": True}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Recorder(server, seen)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, str]]:
    """A shared store (SQLite file or PostgreSQL schema) and its spec (path or DSN)."""
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "shared.db")
        try:
            yield store, str(tmp_path / "shared.db")
        finally:
            store.close()
        return
    from waitbound.stores.postgres import PostgresStore

    pg.require_postgres()
    with pg.fresh_schema() as schema:
        store = PostgresStore(pg.DSN, schema=schema, max_size=4)
        try:
            yield store, pg.DSN
        finally:
            store.close()


def _mcp(provider: Recorder, store: Store, base_path: str = "/api") -> Jobs:
    data = {
        "server": {"default_wait_seconds": 2, "max_wait_seconds": 5},
        "providers": {
            "reports": {
                "base_url": f"{provider.base_url}{base_path}",
                "profile": PROFILE,
                "submit_path": "/jobs",
                "headers": {"Authorization": "Bearer ${REPORTS_TOKEN}"},
                "policy": {"deadline_s": 30, "max_requests": 5, "base_delay_s": 0.05},
            }
        },
    }
    config = parse_config(data, base_dir=Path("."), environ={"REPORTS_TOKEN": SECRET})
    return Jobs(config, store)


def _hostile(store: Store, url: str, **extra: Any) -> str:
    """What anyone with write access to the store can record."""
    operation = Operation(
        status_url=url, profile=parse_profile(PROFILE), label="mcp:reports", policy=FAST, **extra
    )
    return start(operation, store=store).operation_id


def _hostile_urls(attacker: Recorder, provider: Recorder) -> list[str]:
    """Another origin (same host, another port); the provider's own origin outside
    its base path; ``..`` and its escaped form out of the base path."""
    return [
        f"{attacker.base_url}/jobs/steal",
        f"{provider.base_url}/admin/keys",
        f"{provider.base_url}/apix/1",
        f"{provider.base_url}/api/%2e%2e/admin",
        f"{provider.base_url}/api/..%2Fadmin",
    ]


async def test_mcp_worker_never_drives_an_mcp_record_outside_its_provider(
    shared: tuple[Store, str],
) -> None:
    """The MCP server's background worker: each hostile record is escalated
    ``integration_failure`` with one line naming the place, and no request reaches
    the attacker or the provider's other paths (not even without headers)."""
    store, _ = shared
    with recorder() as provider, recorder() as attacker:
        jobs = _mcp(provider, store)
        ids = [_hostile(store, url) for url in _hostile_urls(attacker, provider)]
        own = _hostile(store, f"{provider.base_url}/api/jobs/7")  # inside: driven
        with anyio.fail_after(20):
            await jobs.drive(anyio.Event(), WorkerSettings(until_idle=True, idle_s=0.05))
        assert attacker.seen == []
        assert [path for _, path, _ in provider.seen] == ["/api/jobs/7"]
        assert provider.authorizations() == [f"Bearer {SECRET}"]
        for operation_id in ids:
            record = store.get(operation_id)
            assert record is not None
            assert record.outcome is not None
            assert record.outcome.value == "escalated"
            assert record.reason is not None
            assert record.reason.value == "integration_failure"
            detail = str(record.error)
            assert "refused to send its status request" in detail
            assert "nothing was sent" in detail
            assert "\n" not in detail
            assert SECRET not in detail
        finished = store.get(own)
        assert finished is not None
        assert finished.outcome is not None
        assert finished.outcome.value == "succeeded"


async def test_mcp_tools_never_send_for_an_mcp_record_outside_its_provider(
    shared: tuple[Store, str],
) -> None:
    """The MCP tools on hostile records: ``check_job`` (which may send one request)
    escalates them, nothing sent; ``await_job`` and ``tasks/get`` (which leave sending
    to the worker) send nothing either. No answer shows the secret."""
    store, _ = shared
    with recorder() as provider, recorder() as attacker:
        jobs = _mcp(provider, store)
        looked = [
            await jobs.check_job(_hostile(store, url)) for url in _hostile_urls(attacker, provider)
        ]
        waited = await jobs.await_job(_hostile(store, f"{attacker.base_url}/x"), 0)
        task = await jobs.task_now(_hostile(store, f"{provider.base_url}/admin/keys"))
        assert attacker.seen == []
        assert provider.seen == []
    assert {answer["status"] for answer in looked} == {"escalated"}
    assert {answer["reason"] for answer in looked} == {"integration_failure"}
    assert waited["done"] is False
    assert task["status"] == "working"
    text = json.dumps([looked, waited, task])
    assert "refused to send its status request" in text
    assert SECRET not in text


async def test_worker_header_for_never_follows_a_record_to_another_origin(
    shared: tuple[Store, str],
) -> None:
    """``waitbound worker --header-for ORIGIN``: the record names the provider's origin
    but trusts the attacker's and points its result there; the provider's header goes
    to the provider only. A record naming the attacker is polled without it."""
    store, _ = shared
    with recorder() as provider, recorder() as attacker:
        credentials = from_flags([(provider.base_url, f"Authorization: Bearer {SECRET}")])
        _hostile(
            store,
            f"{provider.base_url}/jobs/1",
            result_url=f"{attacker.base_url}/result/steal",
            trusted_origins=(attacker.base_url,),
        )
        _hostile(store, f"{attacker.base_url}/jobs/steal", trusted_origins=(provider.base_url,))
        with anyio.fail_after(20):
            await work(
                store,
                settings=WorkerSettings(until_idle=True, idle_s=0.05),
                headers=credentials.bound(),
            )
        assert attacker.seen, "the worker drives every record, only never with the header"
        assert attacker.authorizations() == []
        assert provider.authorizations() == [f"Bearer {SECRET}"]


def test_serve_and_worker_hand_the_bound_credentials_to_the_drivers() -> None:
    """``serve`` and ``worker`` give their drivers the one rule (``BoundCredentials``),
    never a plain function that the record's ``trusted_origins`` could widen."""
    credentials = from_flags([("https://api.example", "Authorization: Bearer x-long-token")])
    bound = credentials.bound()
    assert isinstance(bound, BoundCredentials)
    record_trusting_attacker = _record(
        "https://api.example/jobs/1", trusted_origins=("http://127.0.0.1:9",)
    )
    assert headers_for(bound, record_trusting_attacker, "http://127.0.0.1:9/steal") == {}
    assert headers_for(bound, record_trusting_attacker, "https://api.example/x") == {
        "Authorization": "Bearer x-long-token"
    }


def _record(url: str, **extra: Any) -> Any:
    from waitbound import MemoryStore

    store = MemoryStore()
    operation_id = start(
        Operation(status_url=url, profile=parse_profile(PROFILE), **extra), store=store
    ).operation_id
    return store.get(operation_id)


@pytest.mark.parametrize(
    ("url", "inside"),
    [
        ("https://api.example.com/v1", True),
        ("https://api.example.com/v1/", True),
        ("https://api.example.com/v1/runs/7?x=1", True),
        ("https://API.example.com:443/v1/runs", True),
        ("https://api.example.com/v1x/runs", False),
        ("https://api.example.com/v2/runs", False),
        ("https://api.example.com/v1/../admin", False),
        ("https://api.example.com/v1/%2e%2e/admin", False),
        ("https://api.example.com/v1/a%2Fb", False),
        ("http://api.example.com/v1/runs", False),
        ("https://api.example.com:8443/v1/runs", False),
        ("https://evil.example/v1/runs", False),
        ("not a url", False),
    ],
)
def test_a_place_holds_only_whole_segments_under_its_path(url: str, inside: bool) -> None:
    """origin = scheme + host + port; the path under the base path by whole segments;
    a dot segment or an escaped separator is never under it."""
    assert Place.of("https://api.example.com/v1/").holds(url) is inside


def test_the_worker_command_sends_no_credential_where_a_hostile_record_points(
    tmp_path: Path,
) -> None:
    """``waitbound worker --header-for ORIGIN --until-idle`` on a shared SQLite store
    holding the hostile records: the attacker never receives the header."""
    from waitbound.cli import run

    db = tmp_path / "shared.db"
    store = SQLiteStore(db)
    with recorder() as provider, recorder() as attacker:
        try:
            _hostile(
                store,
                f"{provider.base_url}/jobs/1",
                result_url=f"{attacker.base_url}/result/steal",
                trusted_origins=(attacker.base_url,),
            )
            _hostile(store, f"{attacker.base_url}/jobs/steal")
        finally:
            store.close()
        code = run(
            [
                "worker", "--store", str(db), "--until-idle", "--quiet",
                "--header-for", provider.base_url, f"Authorization: Bearer {SECRET}",
            ]
        )  # fmt: skip
        assert code == 0
        assert attacker.seen
        assert attacker.authorizations() == []
        assert provider.authorizations() == [f"Bearer {SECRET}"]


def test_serve_hands_its_worker_the_bound_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``waitbound serve --header-for``: its worker gets the one rule, under which a
    record trusting the attacker's origin gets no header there."""
    from waitbound.cli import run
    from waitbound.web import _run

    given: list[Any] = []

    async def recorded(*args: Any, **kwargs: Any) -> None:
        given.append(kwargs["headers"])

    monkeypatch.setattr(_run, "serve", recorded)
    token = tmp_path / "token"
    token.write_text("tok_" + "s" * 40)
    token.chmod(0o600)
    code = run(
        [
            "serve", "--store", str(tmp_path / "ops.db"), "--token-file", str(token),
            "--header-for", "https://api.example", f"Authorization: Bearer {SECRET}",
        ]
    )  # fmt: skip
    assert code == 0
    [bound] = given
    assert isinstance(bound, BoundCredentials)
    hostile = _record("https://api.example/jobs/1", trusted_origins=("http://127.0.0.1:9",))
    assert headers_for(bound, hostile, "http://127.0.0.1:9/steal") == {}
    assert headers_for(bound, hostile, "https://api.example/jobs/1") == {
        "Authorization": f"Bearer {SECRET}"
    }


async def test_an_origin_the_configuration_trusts_is_driven_with_the_headers(
    tmp_path: Path,
) -> None:
    """``trusted_origins`` in a provider's configuration: a record of its label whose
    status URL is there is driven, with the provider's headers; the configuration
    alone widens where they go."""
    store = SQLiteStore(tmp_path / "s.db")
    try:
        with recorder() as provider, recorder() as files:
            data = {
                "providers": {
                    "reports": {
                        "base_url": f"{provider.base_url}/api",
                        "profile": PROFILE,
                        "headers": {"Authorization": "Bearer ${REPORTS_TOKEN}"},
                        "trusted_origins": [files.base_url],
                    }
                }
            }
            config = parse_config(data, base_dir=tmp_path, environ={"REPORTS_TOKEN": SECRET})
            _hostile(store, f"{files.base_url}/any/path")
            with anyio.fail_after(20):
                await Jobs(config, store).drive(
                    anyio.Event(), WorkerSettings(until_idle=True, idle_s=0.05)
                )
            assert files.authorizations() == [f"Bearer {SECRET}"]
    finally:
        store.close()


@pytest.mark.parametrize(
    "origins", [["https://files.example/x"], ["https://files.example?a=1"], "https://x", [1]]
)
def test_a_trusted_origin_with_a_path_or_not_an_origin_is_one_line(origins: object) -> None:
    """``trusted_origins`` takes origins only: anything else stops the server in one
    line naming the key."""
    from waitbound import UsageError

    data = {
        "providers": {
            "reports": {
                "base_url": "https://api.example",
                "profile": PROFILE,
                "trusted_origins": origins,
            }
        }
    }
    with pytest.raises(UsageError, match=r"providers\.reports\.trusted_origins") as caught:
        parse_config(data, base_dir=Path("."))
    assert "\n" not in str(caught.value)
