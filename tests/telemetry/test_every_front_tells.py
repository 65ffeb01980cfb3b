"""Every persisted audit event reaches the ``waitbound.events`` log and the metrics, from
each front: ``wait``, ``wait_all``, ``wait_any``, ``as_completed`` (sync and async), the
worker, and a person's decision; and ``worker --log-format json`` prints JSON only.

All on virtual time against a scripted provider (no socket, no real sleep)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from opentelemetry.trace import SpanKind

from tests.core.harness import PROFILE
from tests.fakes import FakeClock, ScriptedProvider, work_virtually
from tests.telemetry.conftest import Telemetry
from waitbound import (
    MemoryStore,
    Operation,
    Policy,
    SQLiteStore,
    Store,
    as_completed,
    decide,
    parse_profile,
    start,
    wait,
    wait_all,
    wait_all_async,
    wait_any,
)
from waitbound._observe._logs import EVENTS

HOST = "http://provider.test"
IDS = ("op-0", "op-1")
SCRIPT: dict[str, list[Any]] = {
    "/s0": [(200, {"status": "running"}), (200, {"status": "done", "output": 0})],
    "/s1": [(200, {"status": "done", "output": 1})],
}


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def events_log() -> Iterator[_Kept]:
    """What ``waitbound.events`` logs at INFO during the test."""
    kept = _Kept()
    level = EVENTS.level
    EVENTS.addHandler(kept)
    EVENTS.setLevel(logging.INFO)
    try:
        yield kept
    finally:
        EVENTS.removeHandler(kept)
        EVENTS.setLevel(level)


def _operation(i: int) -> Operation:
    return Operation(
        status_url=f"{HOST}/s{i}",
        profile=parse_profile(PROFILE, name="jobs"),
        policy=Policy(base_delay_s=1, max_delay_s=1),
    )


def _started(store: Store, clock: FakeClock, provider: ScriptedProvider) -> list[int]:
    for i, op_id in enumerate(IDS):
        start(_operation(i), operation_id=op_id, store=store, clock=clock, sleep=clock.sleep,
              client=provider.client())  # fmt: skip
    return [len(store.audit(op_id)) for op_id in IDS]


def _check_told(store: Store, before: list[int], log: _Kept, otel: Telemetry) -> None:
    """Every event persisted since *before* was logged, in order, and each operation's
    outcome counted once."""
    for op_id, seen in zip(IDS, before, strict=True):
        stored = [(s.event.kind, s.event.summary) for s in store.audit(op_id)[seen:]]
        logged = [
            (getattr(r, "event", None), r.getMessage())
            for r in log.records
            if getattr(r, "operation_id", None) == op_id
        ]
        assert stored, f"{op_id}: nothing persisted"
        assert logged == stored, op_id
    outcomes = otel.metrics().get("waitbound.outcomes", [])
    counted = sum(point.value for attributes, point in outcomes if attributes)
    assert counted == len(IDS), outcomes


Front = Callable[[Store, FakeClock, ScriptedProvider], object]


def _sync_kwargs(clock: FakeClock, provider: ScriptedProvider) -> dict[str, Any]:
    return {"clock": clock, "sleep": clock.sleep, "client": provider.client(),
            "rng": random.Random(1)}  # fmt: skip


def _wait(store: Store, clock: FakeClock, provider: ScriptedProvider) -> None:
    for op_id in IDS:
        wait(None, operation_id=op_id, store=store, **_sync_kwargs(clock, provider))


def _wait_all(store: Store, clock: FakeClock, provider: ScriptedProvider) -> None:
    wait_all(list(IDS), store=store, **_sync_kwargs(clock, provider))


def _wait_any(store: Store, clock: FakeClock, provider: ScriptedProvider) -> None:
    wait_any(list(IDS), store=store, **_sync_kwargs(clock, provider))
    wait_any(["op-0"], store=store, **_sync_kwargs(clock, provider))


def _as_completed(store: Store, clock: FakeClock, provider: ScriptedProvider) -> None:
    for _ in as_completed(list(IDS), store=store, **_sync_kwargs(clock, provider)):
        pass


def _wait_all_async(store: Store, clock: FakeClock, provider: ScriptedProvider) -> None:
    async def main() -> None:
        await wait_all_async(list(IDS), store=store, clock=clock, sleep=clock.async_sleep,
                             client=provider.async_client(), rng=random.Random(1))  # fmt: skip

    anyio.run(main)


def _worker(store: Store, clock: FakeClock, provider: ScriptedProvider) -> None:
    work_virtually(store, clock, provider)


FRONTS: dict[str, Front] = {
    "wait": _wait,
    "wait_all": _wait_all,
    "wait_any": _wait_any,
    "as_completed": _as_completed,
    "wait_all_async": _wait_all_async,
    "worker": _worker,
}


@pytest.mark.parametrize("front", sorted(FRONTS))
def test_every_persisted_event_is_logged_and_every_outcome_counted(
    front: str, events_log: _Kept, otel: Telemetry
) -> None:
    """Two operations started, then driven to their outcome by one front: each event the
    store holds is one ``waitbound.events`` line (same kind, same summary, same order),
    and ``waitbound.outcomes`` counts both outcomes."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {k: list(v) for k, v in SCRIPT.items()})
    store = MemoryStore()
    events_log.records.clear()
    _started(store, clock, provider)  # its "created" events are told too
    FRONTS[front](store, clock, provider)
    before = [0] * len(IDS)
    assert {store.get(op_id).outcome for op_id in IDS} != {None}  # type: ignore[union-attr]
    _check_told(store, before, events_log, otel)


def test_worker_log_format_json_prints_json_only(tmp_path: object) -> None:
    """`worker --until-idle --log-format json`: its closing summary on stdout is one JSON
    object (as with --json), not text lines."""
    from pathlib import Path

    from waitbound.cli import run

    store = Path(str(tmp_path)) / "s.db"
    SQLiteStore(store).close()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(["worker", "--store", str(store), "--until-idle", "--log-format", "json"])
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert code == 0, err.getvalue()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    summary = json.loads(lines[0])
    assert summary["stopped"] == "idle"
    assert summary["operations_finished"] == 0


def test_a_persons_decision_is_logged_as_every_other_event(
    events_log: _Kept, otel: Telemetry
) -> None:
    """A wait escalated on a state the profile does not know, then a person abandons it
    (`waitbound decide`, serve's decide route): every event of its story is logged,
    the decision's included, and the outcome is counted once."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/s0": [(200, {"status": "mystery"})]})
    store = MemoryStore()
    escalated = wait(
        _operation(0), operation_id="op-0", store=store, **_sync_kwargs(clock, provider)
    )
    assert escalated.outcome == "escalated"
    decided = decide("op-0", "abandon", why="the job is gone", by="ops", store=store, clock=clock)
    assert decided.options == ()  # the request is closed
    stored = [(s.event.kind, s.event.summary) for s in store.audit("op-0")]
    logged = [(getattr(r, "event", None), r.getMessage()) for r in events_log.records]
    assert logged == stored
    assert logged[-1][0] == "decided"
    outcomes = otel.metrics().get("waitbound.outcomes", [])
    assert sum(point.value for _, point in outcomes) == 1, outcomes


def test_the_sync_group_path_sends_each_request_in_a_client_span(otel: Telemetry) -> None:
    """`wait_all` (blocking) sends every provider request inside its own CLIENT span, as
    `wait` and the async group path do."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {k: list(v) for k, v in SCRIPT.items()})
    store = MemoryStore()
    _started(store, clock, provider)
    otel.exporter.clear()
    sent = len(provider.requests)
    _wait_all(store, clock, provider)
    clients = [s for s in otel.spans() if s.kind is SpanKind.CLIENT]
    assert len(provider.requests) - sent == 3
    assert len(clients) == 3
