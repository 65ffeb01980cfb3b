"""Fan-in under one deadline and one budget: wait_all, wait_any and as_completed (sync
and async) on virtual time against a scripted provider; the group's bounds as
properties (hypothesis), a kill and resume in the middle, and the typed result."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import timedelta

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.harness import PROFILE
from tests.fakes import START, Answer, Autojump, FakeClock, ScriptedProvider, autojump
from tests.hypothesis_profiles import examples
from waitbound import (
    GroupResult,
    MemoryStore,
    Operation,
    OperationHandle,
    OutcomeKind,
    Policy,
    Reason,
    UsageError,
    as_completed,
    as_completed_async,
    parse_profile,
    start,
    wait_all,
    wait_all_async,
    wait_any,
    wait_any_async,
)
from waitbound.stores._groups import groups_of

HOST = "http://provider.test"
CANCELABLE = {
    **PROFILE,
    "cancelable": "cancelable",
    "cancel": {"url_template": "{status_url}/cancel"},
}


def running(n: int, retry_after: int | None = None) -> Answer:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return (200, {"status": "running", "id": f"j{n}", "cancelable": True}, headers)


def done(n: int) -> Answer:
    return (200, {"status": "done", "id": f"j{n}", "output": n})


def _members(
    store: MemoryStore,
    clock: FakeClock,
    client: httpx.Client,
    pendings: Sequence[int],
    *,
    policy: Policy | None = None,
    profile: Mapping[str, object] | None = None,
) -> list[OperationHandle]:
    chosen = parse_profile(profile or PROFILE)
    return [
        start(
            Operation(
                status_url=f"{HOST}/s{i}", profile=chosen, policy=policy or Policy(base_delay_s=1)
            ),
            operation_id=f"op-{i}",
            store=store,
            clock=clock,
            client=client,
            sleep=clock.sleep,
        )
        for i in range(len(pendings))
    ]


def _script(pendings: Sequence[int], hint: int | None = None) -> dict[str, list[Answer]]:
    return {
        f"/s{i}": [*(running(i, hint) for _ in range(k)), done(i)] for i, k in enumerate(pendings)
    }


def _run_all(
    pendings: Sequence[int], *, deadline: float | None = None, max_requests: int | None = None
) -> tuple[GroupResult, ScriptedProvider, FakeClock]:
    clock = FakeClock()
    provider = ScriptedProvider(clock, _script(pendings))
    store = MemoryStore()
    client = provider.client()
    handles = _members(store, clock, client, pendings)
    result = wait_all(
        handles, client=client, clock=clock, sleep=clock.sleep, rng=random.Random(1),
        deadline=deadline, max_requests=max_requests,
    )  # fmt: skip
    return result, provider, clock


def test_wait_all_returns_every_outcome_done_in_the_order_they_ended() -> None:
    """Three members ending after 0, 1 and 2 pending answers: all succeed; ``done``
    lists them in the order they ended, ``outcomes`` in the group's order; the group
    counted exactly the requests sent and records itself ``done``."""
    result, provider, _ = _run_all([2, 0, 1], deadline=120, max_requests=20)
    assert [o.outcome for o in result.outcomes] == [OutcomeKind.SUCCEEDED] * 3
    assert [o.operation_id for o in result.outcomes] == ["op-0", "op-1", "op-2"]
    assert [o.operation_id for o in result.done] == ["op-1", "op-2", "op-0"]
    assert result.pending == ()
    assert result.stopped is None
    assert result.requests_used == len(provider.requests) == 6
    assert result.exit_code() == 0
    assert [o.result for o in result.outcomes] == [0, 1, 2]


def test_the_group_budget_stops_the_group_and_leaves_the_rest_waiting() -> None:
    """max_requests=4 over members needing 6: exactly 4 requests sent, the group stops
    ``request_budget_exhausted`` (exit 3), the unfinished members stay pending within
    their own bounds (outcome None), and the group row says so."""
    result, provider, _ = _run_all([3, 3], max_requests=4)
    assert len(provider.requests) == 4
    assert result.stopped is Reason.REQUEST_BUDGET_EXHAUSTED
    assert result.requests_used == 4
    assert [o.outcome for o in result.pending] == [None, None]
    assert result.exit_code() == 3
    store_row = result.group_id
    assert store_row.startswith("grp_")


def test_the_group_deadline_stops_before_any_request_at_or_after_it() -> None:
    """deadline=10 s with members told to come back every 4 s: no request is sent at or
    after the group's deadline; the group stops ``deadline_exceeded``; the members' own
    deadlines (600 s) are untouched."""
    clock = FakeClock()
    pendings = [50, 50]
    provider = ScriptedProvider(clock, _script(pendings, hint=4))
    store = MemoryStore()
    client = provider.client()
    handles = _members(store, clock, client, pendings)
    result = wait_all(
        handles, deadline=10, client=client, clock=clock, sleep=clock.sleep, rng=random.Random(2)
    )
    assert result.stopped is Reason.DEADLINE_EXCEEDED
    assert result.deadline_at is not None
    assert all(when < result.deadline_at for _, when in provider.requests)
    assert clock.now() <= result.deadline_at + timedelta(seconds=0.01)
    assert [o.outcome for o in result.outcomes] == [None, None]
    row = groups_of(store).get_group(result.group_id)
    assert row is not None
    assert (row.state, row.reason) == ("stopped", "deadline_exceeded")


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pendings=st.lists(st.integers(0, 6), min_size=1, max_size=4),
    hint=st.one_of(st.none(), st.integers(0, 20)),
    budget=st.one_of(st.none(), st.integers(1, 12)),
    deadline_s=st.one_of(st.none(), st.floats(1, 90)),
    member_max=st.integers(1, 8),
    member_deadline_s=st.floats(5, 120),
    seed=st.integers(0, 2**16),
)
def test_the_group_never_passes_its_budget_or_deadline_and_members_keep_theirs(
    *,
    pendings: list[int],
    hint: int | None,
    budget: int | None,
    deadline_s: float | None,
    member_max: int,
    member_deadline_s: float,
    seed: int,
) -> None:
    """For any members, answers, hints and bounds: the group sends at most its budget
    (and counted every request it sent), no request at or after its deadline, each
    member at most its own budget and none after its own deadline; a group that did
    not stop has every member done; one that stopped on its budget spent all of it."""
    clock = FakeClock(limit_s=10_000)
    provider = ScriptedProvider(clock, _script(pendings, hint))
    store = MemoryStore()
    client = provider.client()
    policy = Policy(base_delay_s=1, max_requests=member_max, deadline_s=member_deadline_s)
    handles = _members(store, clock, client, pendings, policy=policy)
    result = wait_all(
        handles,
        deadline=deadline_s,
        max_requests=budget,
        client=client,
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(seed),
    )
    sent = len(provider.requests)
    assert result.requests_used == sent
    if budget is not None:
        assert sent <= budget
    if result.deadline_at is not None:
        assert all(when < result.deadline_at for _, when in provider.requests)
    for i, _ in enumerate(pendings):
        mine = [when for path, when in provider.requests if path == f"/s{i}"]
        assert len(mine) <= member_max
        assert all(when < START + timedelta(seconds=member_deadline_s) for when in mine)
    if result.stopped is None:
        assert result.pending == ()
        assert all(o.done for o in result.outcomes)
    elif result.stopped is Reason.REQUEST_BUDGET_EXHAUSTED:
        assert sent == budget


class Killed(BaseException):
    """The process dies here (not an Exception: nothing records it)."""


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pendings=st.lists(st.integers(1, 5), min_size=2, max_size=3),
    budget=st.integers(2, 10),
    kill_at=st.integers(1, 6),
)
def test_a_kill_in_the_middle_of_wait_all_and_a_resume_keep_the_group_counters(
    pendings: list[int], budget: int, kill_at: int
) -> None:
    """The process dies while the kill_at-th request is in flight (counted by the group
    and its member, never answered); wait_all(group_id=…) resumes the group with its
    stored spending: across both runs at most the budget is counted and sent, and the
    resumed group's counter goes on from the stored one, never from zero."""
    clock = FakeClock(limit_s=10_000)
    script = _script(pendings)
    provider = ScriptedProvider(clock, script)
    calls = 0

    def dying(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == kill_at:
            provider.requests.append((request.url.path, clock.now()))
            raise Killed
        return provider(request)

    store = MemoryStore()
    client = httpx.Client(transport=httpx.MockTransport(dying))
    handles = _members(store, clock, client, pendings)
    group_id = "grp_" + "a" * 20
    try:
        first = wait_all(handles, max_requests=budget, group_id=group_id, client=client,
                         clock=clock, sleep=clock.sleep, rng=random.Random(3))  # fmt: skip
    except Killed:
        row = groups_of(store).get_group(group_id)
        assert row is not None
        assert row.state == "waiting"
        assert row.requests_used == kill_at  # the one in flight is counted
        resumed = wait_all(group_id=group_id, store=store, client=client, clock=clock,
                           sleep=clock.sleep, rng=random.Random(4))  # fmt: skip
        assert resumed.requests_used >= row.requests_used
        assert resumed.requests_used <= budget
        assert len(provider.requests) <= budget
        assert resumed.max_requests == budget
    else:
        assert first.requests_used < kill_at  # it ended before the kill came
        assert len(provider.requests) <= budget


def test_resuming_an_ended_group_sends_nothing_and_reads_the_same_result() -> None:
    """wait_all(group_id=…) of a group that ended: no request, same members, same end."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, _script([1, 1]))
    store = MemoryStore()
    client = provider.client()
    handles = _members(store, clock, client, [1, 1])
    first = wait_all(handles, max_requests=2, client=client, clock=clock, sleep=clock.sleep)
    sent = len(provider.requests)
    again = wait_all(
        group_id=first.group_id, store=store, client=client, clock=clock, sleep=clock.sleep
    )
    assert len(provider.requests) == sent
    assert (again.stopped, again.requests_used) == (first.stopped, first.requests_used)
    assert [o.operation_id for o in again.outcomes] == ["op-0", "op-1"]


def test_wait_any_returns_when_the_first_ends_and_leaves_the_rest_untouched() -> None:
    """The first member to end is ``done[0]`` (``first``); wait_any returns at once: no
    further request for the others, which still wait (outcome None, no cancel asked)."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, _script([5, 1, 5]))
    store = MemoryStore()
    client = provider.client()
    handles = _members(store, clock, client, [5, 1, 5])
    result = wait_any(handles, client=client, clock=clock, sleep=clock.sleep, rng=random.Random(1))
    assert result.first is not None
    assert result.first.operation_id == "op-1"
    assert [o.operation_id for o in result.done] == ["op-1"]
    assert [o.operation_id for o in result.pending] == ["op-0", "op-2"]
    assert provider.count("/s1") == 2
    assert provider.requests[-1][0] == "/s1"  # nothing was sent after the first end
    assert result.requests_used == len(provider.requests)
    for handle in (handles[0], handles[2]):
        assert handle.outcome() is None
        record = store.get(handle.operation_id)
        assert record is not None
        assert not record.cancel_due
    assert result.exit_code("any") == 0


def test_wait_any_with_cancel_rest_cancels_the_others_that_are_cancelable() -> None:
    """cancel_rest=True: once the first ends, each other member that is cancelable gets
    its cancel asked for (audited, by the group) and its one cancel request sent."""
    clock = FakeClock()
    script = _script([5, 0])
    script["/s0/cancel"] = [(202, {})]
    provider = ScriptedProvider(clock, script)
    store = MemoryStore()
    client = provider.client()
    handles = _members(store, clock, client, [5, 0], profile=CANCELABLE)
    result = wait_any(handles, cancel_rest=True, client=client, clock=clock, sleep=clock.sleep)
    assert result.first is not None
    assert result.first.operation_id == "op-1"
    assert provider.count("/s0/cancel") == 1
    kinds = [e.event.kind for e in store.audit("op-0")]
    assert "cancel_requested" in kinds
    assert result.requests_used == len(provider.requests)


def test_as_completed_yields_each_outcome_once_in_the_order_they_end() -> None:
    """as_completed: one Outcome per member, each once, as it ends."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, _script([3, 0, 1]))
    store = MemoryStore()
    client = provider.client()
    handles = _members(store, clock, client, [3, 0, 1])
    seen = [
        o.operation_id for o in as_completed(handles, client=client, clock=clock, sleep=clock.sleep)
    ]
    assert seen == ["op-1", "op-2", "op-0"]


def test_the_async_forms_drive_the_same_scheduler_on_virtual_time() -> None:
    """wait_all_async, wait_any_async and as_completed_async: the same results as the
    blocking forms, on Autojump time (no real sleep)."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, _script([2, 0, 1, 4]))
    store = MemoryStore()
    sync_client = provider.client()
    handles = _members(store, clock, sync_client, [2, 0, 1, 4])

    async def main() -> tuple[list[str], GroupResult, GroupResult]:
        jump = Autojump(clock)
        async with autojump(jump):
            client = provider.async_client()
            seen = [
                o.operation_id
                async for o in as_completed_async(
                    handles[:3], client=client, clock=clock, sleep=jump.sleep
                )
            ]
            anyone = await wait_any_async(
                [handles[3]], client=client, clock=clock, sleep=jump.sleep, max_requests=2
            )
            everyone = await wait_all_async(handles, client=client, clock=clock, sleep=jump.sleep)
            return seen, anyone, everyone

    seen, anyone, everyone = anyio.run(main)
    assert seen == ["op-1", "op-2", "op-0"]
    assert anyone.stopped is Reason.REQUEST_BUDGET_EXHAUSTED
    assert everyone.stopped is None
    assert all(o.succeeded for o in everyone.outcomes)


def test_members_may_be_operations_or_ids_and_bad_groups_are_refused() -> None:
    """An Operation is created in the store first; an id must exist; an empty group, a
    member twice, a bad budget or deadline is one UsageError (nothing created)."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, _script([0, 0]))
    store = MemoryStore()
    client = provider.client()
    profile = parse_profile(PROFILE)
    start(
        Operation(status_url=f"{HOST}/s0", profile=profile),
        operation_id="op-0",
        store=store,
        clock=clock,
    )
    result = wait_all(["op-0", Operation(status_url=f"{HOST}/s1", profile=profile)], store=store,
                      client=client, clock=clock, sleep=clock.sleep)  # fmt: skip
    assert [o.outcome for o in result.outcomes] == [OutcomeKind.SUCCEEDED] * 2
    for members, options, words in [
        ([], {}, "at least one operation"),
        (["op-0", "op-0"], {}, "named twice"),
        (["op-nope"], {}, "no operation with id"),
        (["op-0"], {"max_requests": 0}, "max_requests"),
        (["op-0"], {"deadline": -1}, "deadline"),
        (["op-0"], {"group_id": "nope"}, "grp_"),
    ]:
        with pytest.raises(UsageError, match=words):
            wait_all(members, store=store, client=client, clock=clock, sleep=clock.sleep, **options)  # type: ignore[arg-type]
    assert len(groups_of(store).list_groups()) == 1


def test_a_members_done_callback_fires_once_when_the_group_sees_it_end() -> None:
    """A handle's add_done_callback is called once, by the group wait that saw it end."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, _script([1]))
    store = MemoryStore()
    client = provider.client()
    (handle,) = _members(store, clock, client, [1])
    called: list[str] = []
    handle.add_done_callback(lambda h: called.append(h.operation_id))
    assert called == []
    wait_all([handle], client=client, clock=clock, sleep=clock.sleep)
    assert called == ["op-0"]
    handle.result()
    assert called == ["op-0"]
