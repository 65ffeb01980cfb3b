"""The sharded transport: small pools, opened only when the ones there are full, a
request counted until its response is closed."""

from __future__ import annotations

import anyio
import httpx
import pytest

from waitbound.transports import ShardedTransport


class Shards:
    """Builds mock shards and records which shard served each request."""

    def __init__(self) -> None:
        self.built: list[httpx.Limits] = []
        self.served: list[int] = []
        self.closed: list[int] = []
        self.fail = False

    def make(self, limits: httpx.Limits) -> httpx.AsyncBaseTransport:
        index = len(self.built)
        self.built.append(limits)
        shards = self

        class Shard(httpx.MockTransport):
            async def aclose(self) -> None:
                shards.closed.append(index)

        def handler(request: httpx.Request) -> httpx.Response:
            if self.fail:
                raise httpx.ConnectError("refused", request=request)
            self.served.append(index)
            return httpx.Response(200, json={"shard": index})

        return Shard(handler)


def _request() -> httpx.Request:
    return httpx.Request("GET", "http://provider.test/status")


def _transport(shards: Shards, max_connections: int = 8, size: int = 2) -> ShardedTransport:
    return ShardedTransport(
        max_connections=max_connections,
        keepalive_expiry_s=5.0,
        shard_size=size,
        make_shard=shards.make,
    )


def test_a_shard_opens_only_when_the_others_are_full() -> None:
    """Five requests in flight with shards of 2 use three shards, filled in order."""
    shards = Shards()
    transport = _transport(shards)

    async def main() -> list[httpx.Response]:
        return [await transport.handle_async_request(_request()) for _ in range(5)]

    responses = anyio.run(main)
    assert shards.served == [0, 0, 1, 1, 2]
    assert transport.busy == [2, 2, 1]
    assert all(limits.max_keepalive_connections == 4 for limits in shards.built)
    assert [r.status_code for r in responses] == [200] * 5


def test_a_closed_response_frees_its_place_and_sequential_requests_reuse_one_shard() -> None:
    """A request is in flight until its response is closed; one at a time, every request
    goes to the first shard (its kept-alive connection)."""
    shards = Shards()
    transport = _transport(shards)

    async def main() -> None:
        for _ in range(4):
            response = await transport.handle_async_request(_request())
            assert transport.busy == [1]
            await response.aread()
            await response.aclose()
            await response.aclose()  # a second close releases nothing more
            assert transport.busy == [0]

    anyio.run(main)
    assert shards.served == [0, 0, 0, 0]
    assert len(shards.built) == 1


def test_shards_stop_at_max_connections_then_share_the_least_busy() -> None:
    """With every allowed shard full, a request joins the least busy shard's pool."""
    shards = Shards()
    transport = _transport(shards, max_connections=4, size=2)

    async def main() -> None:
        held = [await transport.handle_async_request(_request()) for _ in range(4)]
        await held[2].aclose()
        await transport.handle_async_request(_request())
        await transport.handle_async_request(_request())

    anyio.run(main)
    assert len(shards.built) == 2
    assert shards.served == [0, 0, 1, 1, 1, 0]
    assert transport.busy == [3, 2]


def test_a_failed_request_is_not_left_counted() -> None:
    """A shard that raises (a refused connection) does not keep the request counted."""
    shards = Shards()
    transport = _transport(shards)
    shards.fail = True

    async def main() -> None:
        with pytest.raises(httpx.ConnectError):
            await transport.handle_async_request(_request())

    anyio.run(main)
    assert transport.busy == [0]


def test_close_closes_every_shard() -> None:
    """Closing the transport closes each shard it opened."""
    shards = Shards()
    transport = _transport(shards)

    async def main() -> None:
        for _ in range(3):
            await transport.handle_async_request(_request())
        await transport.aclose()

    anyio.run(main)
    assert sorted(shards.closed) == [0, 1]


def test_bad_sizes_are_refused() -> None:
    """A pool with no room for a request is a mistake, named."""
    with pytest.raises(ValueError, match="at least 1"):
        ShardedTransport(max_connections=0, keepalive_expiry_s=5.0)


def test_through_a_client_against_real_sockets() -> None:
    """An ``httpx.AsyncClient`` on the transport talks to the simulator over loopback."""
    from waitbound.sim import Simulator, parse_scenario

    scenario = {"id": "pool", "endpoints": {"status": [{"code": 200, "body": {"ok": True}}]}}

    async def main(url: str) -> list[int]:
        transport = ShardedTransport(max_connections=6, keepalive_expiry_s=5.0, shard_size=2)
        async with httpx.AsyncClient(transport=transport) as client:
            codes: list[int] = []

            async def one() -> None:
                for _ in range(3):
                    codes.append((await client.get(url)).status_code)

            async with anyio.create_task_group() as group:
                for _ in range(6):
                    group.start_soon(one)
            assert sum(transport.busy) == 0
            assert len(transport.shards) <= 3
        return codes

    with Simulator(parse_scenario(scenario)) as sim:
        codes = anyio.run(main, f"{sim.base_url}/status")
        assert sim.count("status") == 18
    assert codes == [200] * 18
