"""Traces: one span per run, a client span per provider request, the caller's trace."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from tests.core.harness import PROFILE, SEED
from tests.fakes import FakeClock, ScriptedProvider, work_virtually
from tests.telemetry.conftest import Telemetry, without_sdk
from waitbound import (
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    decide,
    parse_profile,
    start,
    wait,
)

STATUS = "https://provider.test/jobs/7/status?sig=SECRET-QUERY"
RESULT = "https://provider.test/jobs/7/result?token=SECRET-QUERY-2"
TOKEN = "Bearer SECRET-TOKEN-123"
SECRETS = ("SECRET-QUERY", "SECRET-QUERY-2", "SECRET-TOKEN-123", "sig=", "token=")


HOST = "https://provider.test"
RUNNING = (200, {"status": "running"})
DONE = (200, {"status": "done"})


class Crash(Exception):
    """Stands for the process being killed during a sleep."""


def _script() -> dict[str, list[Any]]:
    return {
        "/jobs/7/status": [
            (429, {"error": "slow down"}, {"Retry-After": "3"}),
            (200, {"status": "running", "id": "job-7"}),
            (200, {"status": "done", "id": "job-7"}),
        ],
        "/jobs/7/result": [(409, {"error": "not_ready"}), (200, {"output": {"rows": 3}})],
    }


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    parent_id = parent.context.span_id
    found = [s for s in spans if s.parent is not None and s.parent.span_id == parent_id]
    return sorted(found, key=lambda s: s.start_time or 0)


def _every_attribute(spans: list[ReadableSpan]) -> list[tuple[str, object]]:
    pairs: list[tuple[str, object]] = []
    for span in spans:
        pairs.append(("name", span.name))
        pairs.extend((span.attributes or {}).items())
        for event in span.events:
            pairs.append(("event", event.name))
            pairs.extend((event.attributes or {}).items())
        for link in span.links:
            pairs.extend((link.attributes or {}).items())
        if span.status.description:
            pairs.append(("status", span.status.description))
    return pairs


def _wait_killed_then_resumed(trace_context: bool = False) -> tuple[FakeClock, ScriptedProvider]:
    clock = FakeClock()
    store = MemoryStore()
    provider = ScriptedProvider(clock, _script())
    profile = parse_profile({**PROFILE, "trace_context": trace_context}, name="jobs")
    operation = Operation(
        status_url=STATUS,
        result_url=RESULT,
        profile=profile,
        policy=Policy(max_requests=10, base_delay_s=1, max_delay_s=4),
    )
    naps = 0

    def dying_sleep(seconds: float) -> None:
        nonlocal naps
        naps += 1
        if naps == 1:
            raise Crash
        clock.sleep(seconds)

    agent = trace.get_tracer("agent")
    with agent.start_as_current_span("agent.tool_call"), pytest.raises(Crash):
        wait(
            operation,
            operation_id="op-7",
            store=store,
            headers={"Authorization": TOKEN},
            client=provider.client(),
            clock=clock,
            sleep=dying_sleep,
            rng=random.Random(SEED),
        )
    # Resumed later, outside the agent's span (another process would do the same).
    outcome = wait(
        operation_id="op-7",
        store=store,
        headers={"Authorization": TOKEN},
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(SEED),
    )
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    return clock, provider


def test_span_tree_of_a_throttled_wait_with_a_result_409_resumed_after_a_kill(
    otel: Telemetry,
) -> None:
    """Both runs are children of the agent's span (the second through the trace context
    recorded at creation); each request is a CLIENT child of its run with the HTTP
    attributes; the 429 and the 409 are errors; the hint is an event."""
    _wait_killed_then_resumed()
    spans = otel.spans()
    (agent,) = [s for s in spans if s.name == "agent.tool_call"]
    runs = _children(spans, agent)
    assert [s.name for s in runs] == ["waitbound.operation", "waitbound.operation"]
    assert {s.context.trace_id for s in spans} == {agent.context.trace_id}
    first, second = runs
    assert first.attributes is not None
    assert second.attributes is not None
    assert first.attributes["waitbound.operation_id"] == "op-7"
    assert second.attributes["waitbound.operation_id"] == "op-7"
    assert first.attributes["waitbound.profile"] == "jobs"
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes["error.type"] == "interrupted"
    assert second.attributes["waitbound.outcome"] == "succeeded"
    assert second.status.status_code is StatusCode.UNSET

    (throttled,) = _children(spans, first)
    assert throttled.kind is SpanKind.CLIENT
    assert throttled.name == "GET"
    assert dict(throttled.attributes or {}) | {} == {
        "http.request.method": "GET",
        "url.full": "https://provider.test/jobs/7/status",
        "server.address": "provider.test",
        "server.port": 443,
        "url.scheme": "https",
        "waitbound.request_kind": "status",
        "waitbound.operation_id": "op-7",
        "waitbound.profile": "jobs",
        "waitbound.phase": "waiting",
        "waitbound.requests_used": 1,
        "http.response.status_code": 429,
        "error.type": "429",
        "waitbound.delay_source": "provider_retry_after",
    }
    assert throttled.status.status_code is StatusCode.ERROR
    scheduled = [e for e in throttled.events if e.name == "waitbound.scheduled"]
    assert scheduled
    assert scheduled[0].attributes is not None
    assert scheduled[0].attributes["waitbound.hint.origin"] == "Retry-After header"
    assert scheduled[0].attributes["waitbound.hint.delay_s"] == 3
    assert scheduled[0].attributes["waitbound.delay_source"] == "provider_retry_after"

    requests = _children(spans, second)
    shown = [
        (
            (s.attributes or {})["waitbound.request_kind"],
            (s.attributes or {})["http.response.status_code"],
            (s.attributes or {}).get("waitbound.state"),
            (s.attributes or {})["waitbound.requests_used"],
        )
        for s in requests
    ]
    assert shown == [
        ("status", 200, "running", 2),
        ("status", 200, "done", 3),
        ("result", 409, "done", 4),
        ("result", 200, "done", 5),
    ]
    assert requests[2].attributes is not None
    assert requests[2].attributes["error.type"] == "409"
    assert requests[2].attributes["url.full"] == "https://provider.test/jobs/7/result"
    finished = [e for s in spans for e in s.events if e.name == "waitbound.finished"]
    assert [e.attributes["waitbound.outcome"] for e in finished if e.attributes] == ["succeeded"]


def test_no_secret_no_query_and_no_user_info_in_any_attribute(otel: Telemetry) -> None:
    """Every exported span attribute, event attribute, link attribute, span name, status
    text and metric attribute of a wait with credentials and secret-bearing queries is
    free of them."""
    _wait_killed_then_resumed(trace_context=True)
    pairs = _every_attribute(otel.spans())
    assert len(pairs) > 50
    metric_pairs = [
        (f"{name}:{key}", value)
        for name, points in otel.metrics().items()
        for attributes, _ in points
        for key, value in attributes.items()
    ]
    assert len(metric_pairs) > 10
    pairs += metric_pairs
    for key, value in pairs:
        text = f"{key}={value}"
        for secret in SECRETS:
            assert secret not in text, text
        assert "?" not in str(value), text


def test_traceparent_goes_to_the_provider_only_where_the_profile_allows(otel: Telemetry) -> None:
    """With ``trace_context: true`` each request carries the W3C traceparent of its own
    client span; without it, none."""
    _, provider = _wait_killed_then_resumed(trace_context=True)
    sent = [h.get("traceparent") for h in provider.seen_headers]
    assert all(sent), sent
    clients = {s.context.span_id for s in otel.spans() if s.kind is SpanKind.CLIENT}
    assert {int(t.split("-")[2], 16) for t in sent if t} == clients
    otel.exporter.clear()
    _, provider = _wait_killed_then_resumed(trace_context=False)
    assert not any("traceparent" in h for h in provider.seen_headers)


def test_worker_steps_of_one_operation_are_one_trace(otel: Telemetry) -> None:
    """A worker's steps (one run span each, driver ``worker``) of an operation created in
    an agent's span are children of that span; those of one created outside any span
    are children of its ``waitbound.create`` span: one trace per operation either way."""
    clock = FakeClock()
    store = MemoryStore()
    profile = parse_profile(PROFILE, name="jobs")
    policy = Policy(max_requests=10, base_delay_s=1, max_delay_s=2)
    answers = {"/a": [RUNNING, DONE], "/b": [RUNNING, RUNNING, DONE]}
    agent = trace.get_tracer("agent")
    with agent.start_as_current_span("agent.tool_call"):
        start(Operation(status_url=f"{HOST}/a", profile=profile, policy=policy),
              operation_id="op-a", store=store, clock=clock)  # fmt: skip
    start(Operation(status_url=f"{HOST}/b", profile=profile, policy=policy),
          operation_id="op-b", store=store, clock=clock)  # fmt: skip
    provider = ScriptedProvider(clock, answers)
    work_virtually(store, clock, provider)
    spans = otel.spans()
    (tool_call,) = [s for s in spans if s.name == "agent.tool_call"]
    (created,) = [s for s in spans if s.name == "waitbound.create"]
    assert created.parent is None
    assert (created.attributes or {})["waitbound.operation_id"] == "op-b"
    for operation_id, root, steps in (("op-a", tool_call, 2), ("op-b", created, 3)):
        runs = [
            s
            for s in spans
            if s.name == "waitbound.operation"
            and (s.attributes or {})["waitbound.operation_id"] == operation_id
        ]
        assert len(runs) == steps
        assert {(s.attributes or {})["waitbound.driver"] for s in runs} == {"worker"}
        assert {s.parent.span_id for s in runs if s.parent} == {root.context.span_id}
        assert {s.context.trace_id for s in runs} == {root.context.trace_id}
        assert all(len(_children(spans, run)) == 1 for run in runs)
        outcomes = [(s.attributes or {}).get("waitbound.outcome") for s in runs]
        assert outcomes == [None] * (steps - 1) + ["succeeded"]


def test_an_operation_created_without_an_sdk_gets_a_trace_derived_from_its_id(
    otel: Telemetry,
) -> None:
    """Created with no trace context recorded (no SDK then): its runs share the trace
    whose id is derived from the operation id, whatever process runs them."""
    clock = FakeClock()
    store = MemoryStore()
    profile = parse_profile(PROFILE, name="jobs")
    operation = Operation(status_url=f"{HOST}/c", profile=profile, policy=Policy(base_delay_s=1))
    with without_sdk():
        start(operation, operation_id="op-c", store=store, clock=clock)
    created = store.audit("op-c")[0].event
    assert "trace_context" not in created.data
    provider = ScriptedProvider(clock, {"/c": [RUNNING, DONE]})
    naps = 0

    def dying_sleep(seconds: float) -> None:
        nonlocal naps
        naps += 1
        if naps == 1:
            raise Crash
        clock.sleep(seconds)

    for sleep in (dying_sleep, clock.sleep):  # two processes, each one run
        with contextlib.suppress(Crash):
            wait(operation_id="op-c", store=store, client=provider.client(),
                 clock=clock, sleep=sleep, rng=random.Random(SEED))  # fmt: skip
    runs = [s for s in otel.spans() if s.name == "waitbound.operation"]
    assert len(runs) == 2
    assert len({s.context.trace_id for s in runs}) == 1
    assert len({s.parent.span_id for s in runs if s.parent}) == 1


def test_a_decision_is_a_span_in_the_operations_trace(otel: Telemetry) -> None:
    """An escalated wait (its budget spent), then a person's ``extend`` and a resume:
    the decision is a ``waitbound.decision`` span with a ``waitbound.decided`` event
    (its option), in the trace of the agent that created the operation; the outcome
    counted once per outcome recorded."""
    clock = FakeClock()
    store = MemoryStore()
    profile = parse_profile(PROFILE, name="jobs")
    provider = ScriptedProvider(clock, {"/d": [RUNNING, RUNNING, DONE]})
    agent = trace.get_tracer("agent")
    with agent.start_as_current_span("agent.tool_call"):
        first = wait(
            Operation(status_url=f"{HOST}/d", profile=profile, policy=Policy(max_requests=2)),
            operation_id="op-d", store=store, client=provider.client(), clock=clock,
            sleep=clock.sleep, rng=random.Random(SEED),
        )  # fmt: skip
    assert first.outcome is OutcomeKind.ESCALATED
    decide("op-d", "extend", why="one more look", by="ops@example", store=store, clock=clock)
    again = wait(operation_id="op-d", store=store, client=provider.client(), clock=clock,
                 sleep=clock.sleep, rng=random.Random(SEED))  # fmt: skip
    assert again.outcome is OutcomeKind.SUCCEEDED
    spans = otel.spans()
    (tool_call,) = [s for s in spans if s.name == "agent.tool_call"]
    (decision,) = [s for s in spans if s.name == "waitbound.decision"]
    assert decision.parent is not None
    assert decision.parent.span_id == tool_call.context.span_id
    (decided,) = decision.events
    assert decided.name == "waitbound.decided"
    assert (decided.attributes or {})["waitbound.option"] == "extend"
    runs = [s for s in spans if s.name == "waitbound.operation"]
    assert [(s.attributes or {})["waitbound.outcome"] for s in runs] == ["escalated", "succeeded"]
    assert {s.context.trace_id for s in [*runs, decision]} == {tool_call.context.trace_id}
    outcomes = {
        (a["waitbound.outcome"], a["waitbound.reason"]): p.value
        for a, p in otel.metrics()["waitbound.outcomes"]
    }
    assert outcomes == {("escalated", "request_budget_exhausted"): 1, ("succeeded", "none"): 1}


def test_a_webhook_delivery_applied_is_a_span_in_the_operations_trace(otel: Telemetry) -> None:
    """A delivery matched to an operation an agent created, applied by the inbox sweep:
    a ``waitbound.webhook`` span (receiver named) with the ``webhook_received`` event,
    a child of the agent's span."""
    from tests.core.test_inbox import NOW, delivery, stored
    from waitbound._engine._inbox import sweep_inbox

    store = MemoryStore()
    agent = trace.get_tracer("agent")
    with agent.start_as_current_span("agent.tool_call"):
        record = stored(store, job_id="job-w")
    assert store.put_delivery(delivery(webhook_id="m1", job_id="job-w")) is not None
    assert sweep_inbox(store, clock=FakeClock(NOW), rng=random.Random(SEED)) == 1
    spans = otel.spans()
    (tool_call,) = [s for s in spans if s.name == "agent.tool_call"]
    (webhook,) = [s for s in spans if s.name == "waitbound.webhook"]
    assert webhook.parent is not None
    assert webhook.parent.span_id == tool_call.context.span_id
    attributes = webhook.attributes or {}
    assert attributes["waitbound.receiver"] == "reports"
    assert attributes["waitbound.operation_id"] == record.operation_id
    assert [e.name for e in webhook.events][:1] == ["waitbound.webhook_received"]
