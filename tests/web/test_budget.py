"""The connection budget: a reserve kept for the webhook receiver and ``/healthz``, and
a cap of its own for SSE streams (the application with a given count, and the real
server on loopback with idle sockets holding every general slot)."""

from __future__ import annotations

import anyio
import httpx
from starlette.testclient import TestClient

from tests.fakes import FakeClock
from tests.web.test_protocol import PARTIAL_HEAD, TOKEN, serving
from waitbound import MemoryStore
from waitbound.web._app import create_app
from waitbound.web._budget import ConnectionBudget, reserve_of
from waitbound.web._config import ServeConfig
from waitbound.web._protocol import Limits
from waitbound.web._service import Service

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def client(budget: ConnectionBudget) -> TestClient:
    service = Service(store=MemoryStore(), config=ServeConfig(), clock=FakeClock(), token=TOKEN)
    return TestClient(create_app(service, poll_s=0.005, ping_s=0, budget=budget))


def test_past_the_general_share_only_webhooks_and_healthz_are_served():
    """More connections open than the general share: /healthz answers, a delivery
    reaches the receiver (404: no such receiver, not 503), everything else is 503 busy
    with Retry-After."""
    made = client(ConnectionBudget(general=10, count=lambda: 11))
    assert made.get("/healthz").status_code == 200
    assert made.post("/webhooks/nobody", content=b"{}").status_code == 404
    busy = made.get("/operations/op-1", headers=AUTH)
    assert busy.status_code == 503
    assert busy.json()["error"] == "busy"
    assert busy.headers["retry-after"] == "1"
    assert made.get("/sign-in").status_code == 503


def test_within_the_general_share_everything_is_served():
    """At the general share (not past it) a request is served as usual."""
    made = client(ConnectionBudget(general=10, count=lambda: 10))
    assert made.get("/operations/op-1", headers=AUTH).status_code == 404


def test_sse_streams_past_their_cap_are_503_and_a_closed_one_frees_its_place():
    """With one stream allowed, a second is 503 too_many_streams while the first is open;
    once it closes, a stream opens again."""
    budget = ConnectionBudget(general=1 << 30, max_streams=1)
    made = client(budget)
    with made:
        with made.stream("GET", "/events", headers=AUTH) as first:
            assert first.status_code == 200
            second = made.get("/events", headers=AUTH)
            assert second.status_code == 503
            assert second.json()["error"] == "too_many_streams"
        assert budget.streams == 0
        with made.stream("GET", "/events", headers=AUTH) as third:
            assert third.status_code == 200


def test_the_reserve_is_a_quarter_of_the_cap_at_most():
    """16 of 256 by default; a quarter of a small cap."""
    assert reserve_of(256) == 16
    assert reserve_of(8) == 2
    assert reserve_of(2) == 0


def test_idle_sockets_holding_every_general_slot_do_not_keep_webhooks_or_healthz_out():
    """A real server with 8 connections (2 reserved): 6 idle half-sent requests hold the
    general share; then /healthz still answers 200 and a delivery reaches the receiver,
    while other requests are 503 busy."""
    limits = Limits(head_timeout_s=30.0, body_timeout_s=30.0, max_connections=8)

    async def main() -> tuple[int, int, int]:
        async with serving(limits) as (host, port):
            held = [await anyio.connect_tcp(host, port) for _ in range(6)]
            for stream in held:
                await stream.send(PARTIAL_HEAD)
            base = f"http://{host}:{port}"
            limits_one = httpx.Limits(max_connections=1, max_keepalive_connections=0)
            async with httpx.AsyncClient(base_url=base, limits=limits_one) as http:
                with anyio.fail_after(10):  # until the server has taken all six
                    while (await http.get("/operations/x", headers=AUTH)).status_code != 503:
                        await anyio.sleep(0.02)
                health = (await http.get("/healthz")).status_code
                delivery = (await http.post("/webhooks/nobody", content=b"{}")).status_code
                other = (await http.get("/operations/x", headers=AUTH)).status_code
            for stream in held:
                await stream.aclose()
            return health, delivery, other

    health, delivery, other = anyio.run(main)
    assert health == 200
    assert delivery == 404
    assert other == 503
