"""A fan-in group driven by several processes at once, on every store (memory, SQLite,
real PostgreSQL): each process is a store object of its own on the same database and
a scheduler of its own; their turns are interleaved by hand, one at a time, so every
race is played out deterministically (no threads, no sleeps, a virtual clock).

- the group's counter charges only requests that were sent: a process whose member's
  reservation lost the race gives back what it counted;
- ``cancel_rest`` from two processes sends each member's cancel once;
- the group's budget counts every request to its members, whoever sends it (a worker,
  another process's ``wait``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from tests.core.harness import PROFILE
from tests.core.test_worker import _run_worker
from tests.fakes import FakeClock, ScriptedProvider
from tests.stores.test_store_contract import Backend, backend
from waitbound import (
    Operation,
    OutcomeKind,
    Policy,
    Reason,
    Store,
    parse_profile,
    wait,
    wait_all,
)
from waitbound._engine._driver import exchange
from waitbound._engine._driver import tools as make_tools
from waitbound._engine._group import Ended, Go, Nap, Scheduler, Stop
from waitbound._engine._interpreters import run_exchange_sync
from waitbound._engine._operation import open_operation
from waitbound._engine._schedule_models import models_for
from waitbound._engine._worker import WorkerSettings
from waitbound._model._pacing import pacer_for
from waitbound.stores._groups import GroupKind, GroupRow, groups_of, new_group_id
from waitbound.transports import HttpSettings

__all__ = ["backend"]  # the fixture, imported for pytest

HOST = "http://provider.test"
CANCELABLE = {
    **PROFILE,
    "cancelable": "cancelable",
    "cancel": {"url_template": "{status_url}/cancel"},
}


def _running(n: int) -> tuple[int, dict[str, object]]:
    return (200, {"status": "running", "id": f"j{n}", "cancelable": True})


def _done(n: int) -> tuple[int, dict[str, object]]:
    return (200, {"status": "done", "id": f"j{n}", "output": n})


def _members(store: Store, clock: FakeClock, count: int, profile: Mapping[str, object]) -> None:
    for i in range(count):
        open_operation(
            store,
            Operation(
                status_url=f"{HOST}/s{i}",
                profile=parse_profile(profile),
                policy=Policy(base_delay_s=1),
            ),
            operation_id=f"op-{i}",
            clock=clock,
        )


def _group(
    store: Store, clock: FakeClock, count: int, kind: GroupKind, max_requests: int
) -> GroupRow:
    row = GroupRow(
        group_id=new_group_id(),
        kind=kind,
        members=tuple(f"op-{i}" for i in range(count)),
        created_at=clock.now(),
        max_requests=max_requests,
    )
    return groups_of(store).create_group(row)


class _Process:
    """One process driving a group: its own store object, its own scheduler."""

    def __init__(
        self,
        store: Store,
        clock: FakeClock,
        group_id: str,
        client: httpx.Client,
        *,
        seed: int,
        cancel_rest: bool = False,
    ) -> None:
        self.kit = make_tools(store, clock, random.Random(seed), None, None)
        groups = groups_of(store)
        row = groups.get_group(group_id)
        assert row is not None
        self.scheduler = Scheduler(
            self.kit, groups, row, pacing=WorkerSettings(), cancel_rest=cancel_rest
        )
        self.client = client
        self.stopped = False

    def turn(self) -> str:
        """One of the scheduler's turns, carried out as ``wait_all`` does; what it was."""
        if self.stopped:
            return "stopped"
        match self.scheduler.next():
            case Nap():
                return "nap"
            case Go(reserved=reserved, request=request, lease=lease):
                kit = self.kit
                steps = exchange(
                    reserved, request, lease=lease, clock=kit.clock, rng=kit.rng,
                    headers=kit.headers, models=models_for(kit.store),
                    pacer=pacer_for(kit.store),
                )  # fmt: skip
                ended = run_exchange_sync(
                    steps, kit, reserved.profile, client=self.client, http=HttpSettings(),
                    sleep=kit.clock.sleep,  # type: ignore[attr-defined]
                )  # fmt: skip
                self.scheduler.answered(reserved.operation_id, ended)
                return "sent"
            case Ended():
                return "ended"
            case Stop():
                self.stopped = True
                return "stopped"
        raise AssertionError("unreachable")  # pragma: no cover


def _sent(provider: ScriptedProvider) -> int:
    return len(provider.requests)


def test_two_processes_driving_one_group_count_only_the_requests_sent(
    backend: Backend,
) -> None:
    """Two processes take turns on one group of three members (budget 6): each plans the
    member that is due on its own copy, so one of them loses the member's reservation
    to the other. The loser gave back what it had counted: the group's counter always
    equals the requests the provider saw, and the group spends all 6 of its budget on
    requests sent (it counted 6 for 3-4 sent and stopped early)."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {f"/s{i}": [_running(i)] for i in range(3)})
    client = provider.client()
    first = backend.open()
    _members(first, clock, 3, PROFILE)
    row = _group(first, clock, 3, "all", max_requests=6)
    second = backend.open()
    processes = [
        _Process(first, clock, row.group_id, client, seed=1),
        _Process(second, clock, row.group_id, client, seed=2),
    ]
    lost = 0
    for _ in range(200):
        if all(p.stopped for p in processes):
            break
        turns = [p.turn() for p in processes]
        stored = groups_of(first).get_group(row.group_id)
        assert stored is not None
        assert stored.requests_used == _sent(provider), turns
        lost += turns.count("nap")
        if turns == ["nap", "nap"]:
            clock.advance(1.0)
    stored = groups_of(first).get_group(row.group_id)
    assert stored is not None
    assert (stored.state, stored.reason) == ("stopped", "request_budget_exhausted")
    assert stored.requests_used == _sent(provider) == 6
    assert lost > 0  # the race was played: a process lost a reservation at least once


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_cancel_rest_from_two_processes_sends_one_cancel_per_member(
    backend: Backend, order: tuple[int, int]
) -> None:
    """Two ``wait-any --cancel-rest`` over the same members, one per process: the first
    member ends, both groups see it and ask for the cancel of the other two; each job
    gets exactly one cancel request, whichever process acts first (two were sent to one
    job in 1 run of 3): the request is claimed by a compare-and-swap in the store."""
    clock = FakeClock()
    script: dict[str, list[Any]] = {
        "/s0": [_running(0), _done(0)],
        "/s1": [_running(1)],
        "/s2": [_running(2)],
        "/s1/cancel": [(202, {})],
        "/s2/cancel": [(202, {})],
    }
    provider = ScriptedProvider(clock, script)
    client = provider.client()
    first = backend.open()
    _members(first, clock, 3, CANCELABLE)
    second = backend.open()
    rows = [_group(first, clock, 3, "any", max_requests=20) for _ in range(2)]
    processes = [
        _Process(first, clock, rows[0].group_id, client, seed=1, cancel_rest=True),
        _Process(second, clock, rows[1].group_id, client, seed=2, cancel_rest=True),
    ]
    for _ in range(200):
        if all(p.stopped for p in processes):
            break
        turns = [processes[i].turn() for i in order]
        if all(t in ("nap", "stopped") for t in turns):
            clock.advance(1.0)
    assert all(p.stopped for p in processes)
    assert provider.count("/s1/cancel") == 1
    assert provider.count("/s2/cancel") == 1
    for name in ("op-1", "op-2"):
        record = first.get(name)
        assert record is not None
        assert not record.cancel_due
        requested = [e for e in first.audit(name) if e.event.kind == "cancel_requested"]
        assert len(requested) == 1


def test_the_group_budget_counts_the_requests_another_process_sends_to_its_members(
    backend: Backend,
) -> None:
    """A group of two members (budget 6) is waiting; another process's ``wait`` drives
    the first member to its end (4 requests). The group counted them: resumed, it has 2
    requests left, sends them to the second member and stops
    ``request_budget_exhausted`` — the provider saw 6 requests to the group's members
    while it waited (it counted none of the 4, sent 5 more and the provider saw 9)."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {"/s0": [_running(0), _running(0), _running(0), _done(0)], "/s1": [_running(1)]},
    )
    client = provider.client()
    first = backend.open()
    _members(first, clock, 2, PROFILE)
    row = _group(first, clock, 2, "all", max_requests=6)
    other = backend.open()
    outcome = wait(operation_id="op-0", store=other, client=client, clock=clock, sleep=clock.sleep)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert provider.count("/s0") == 4
    counted = groups_of(first).get_group(row.group_id)
    assert counted is not None
    assert counted.requests_used == 4
    result = wait_all(
        group_id=row.group_id, store=first, client=client, clock=clock, sleep=clock.sleep
    )
    assert result.stopped is Reason.REQUEST_BUDGET_EXHAUSTED
    assert result.requests_used == len(provider.requests) == 6
    assert provider.count("/s1") == 2


def test_the_group_budget_counts_the_requests_a_worker_sends_to_its_members(
    backend: Backend,
) -> None:
    """A worker drives a waiting group's members (and an operation outside it): every
    request it sent to a member is on the group's counter, none of the others; a group
    that ended counts nothing more."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {
            "/s0": [_running(0), _done(0)],
            "/s1": [_running(1), _running(1), _done(1)],
            "/s2": [_running(2), _done(2)],
        },
    )
    first = backend.open()
    _members(first, clock, 3, PROFILE)
    row = _group(first, clock, 2, "all", max_requests=50)
    ended = _group(first, clock, 2, "all", max_requests=50)
    groups_of(first).end_group(ended.group_id, state="stopped", reason="x", at=clock.now())
    worker_store = backend.open()
    _run_worker(worker_store, provider, clock)  # type: ignore[arg-type]
    assert provider.count("/s0") + provider.count("/s1") == 5
    assert provider.count("/s2") == 2
    counted = groups_of(first).get_group(row.group_id)
    assert counted is not None
    assert counted.requests_used == 5
    untouched = groups_of(first).get_group(ended.group_id)
    assert untouched is not None
    assert untouched.requests_used == 0
