"""Fan out three transcodes, then fan in under one deadline and one request budget.

Runs on its own against the simulator (``waitbound.sim``) on loopback::

    python examples/fan_in.py

It shows the handle (``start`` returns one: ``status``, ``result(timeout=…)``, a
continuation token for another process) and the group waits (``wait_all``,
``wait_any``, ``as_completed``), blocking and async. ``mypy --strict`` checks this file
(``make test``), so it is also a typed tour of the API.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import waitbound
from waitbound import (
    AsyncOperationHandle,
    GroupResult,
    Operation,
    OperationHandle,
    OperationStatus,
    Outcome,
    Policy,
    TimedOutError,
)
from waitbound.sim import Simulator, parse_scenario

SCENARIO = {
    "id": "transcodes",
    "endpoints": {
        "status": [
            {"code": 200, "body": {"status": "processing", "progress": 0.5}, "repeat": 4},
            {"code": 200, "body": {"status": "completed", "output": {"url": "s3://out"}}},
        ]
    },
}
PROFILE = waitbound.parse_profile(
    {
        "state": "status",
        "pending": ["processing"],
        "succeeded": ["completed"],
        "failed": ["failed"],
        "progress": "progress",
        "result": "output",
    }
)
POLICY = Policy(deadline_s=60, max_requests=20, base_delay_s=0.1, max_delay_s=0.3)


def start_three(base_url: str, store: waitbound.Store) -> list[OperationHandle]:
    """Record three operations (nothing is sent yet) and return their handles."""
    return [
        waitbound.start(
            Operation(status_url=f"{base_url}/status", profile=PROFILE, policy=POLICY),
            operation_id=f"transcode-{n}",
            store=store,
        )
        for n in range(3)
    ]


def blocking(base_url: str, store: waitbound.Store) -> GroupResult:
    """The handle, then wait_all with the group's own deadline (30 s) and budget (12)."""
    handles = start_three(base_url, store)
    first = handles[0]
    status: OperationStatus = first.status()
    print(f"{first.operation_id}: {status.state}, next check {status.next_check_at}")
    try:
        first.result(timeout=0.01)
    except TimedOutError as exc:  # the caller's timeout: the operation still waits
        print(f"not yet: {exc}")
    token = first.continuation_token()  # names the operation and the store, no secret
    again = OperationHandle.from_token(token, store=store)
    assert again.operation_id == first.operation_id
    result = waitbound.wait_all(handles, deadline=30, max_requests=12)
    for outcome in result.outcomes:
        print(f"{outcome.operation_id}: {outcome.outcome} {outcome.result}")
    print(f"group {result.group_id}: stopped={result.stopped}, {result.requests_used} requests")
    return result


async def not_blocking(base_url: str, store: waitbound.Store) -> list[Outcome]:
    """The async handle, then as_completed_async: each outcome once, as it ends."""
    handles: list[AsyncOperationHandle] = [
        await waitbound.start_async(
            Operation(status_url=f"{base_url}/status", profile=PROFILE, policy=POLICY),
            store=store,
        )
        for _ in range(2)
    ]
    seen = [o async for o in waitbound.as_completed_async(handles, deadline=30, max_requests=12)]
    first: GroupResult = await waitbound.wait_any_async(handles)
    assert first.first is not None
    return seen


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, Simulator(parse_scenario(SCENARIO)) as sim:
        store = waitbound.open_store(Path(folder) / "store.db")
        try:
            blocking(sim.base_url, store)
            outcomes = asyncio.run(not_blocking(sim.base_url, store))
            print([o.outcome for o in outcomes])
        finally:
            store.close()


if __name__ == "__main__":
    main()
