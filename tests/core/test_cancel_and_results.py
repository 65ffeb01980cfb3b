"""Cancel only when cancelable; partial results with an errors page; output errors; usage."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.core.harness import URL, run
from tests.fakes import START, FakeClock, ScriptedProvider
from waitbound import (
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    Reason,
    UsageError,
    cancel,
    parse_profile,
    wait,
)

TABLE: dict[str, Any] = {
    "state": "status",
    "pending": ["running"],
    "succeeded": ["done"],
    "canceled": ["canceled"],
    "skipped": ["skipped"],
    "cancelable": "can_cancel",
    "cancel": {"url_template": "{status_url}/cancel"},
}


def _started(
    script: dict[str, list[Any]], table: dict[str, Any] | None = None, **policy: Any
) -> tuple[MemoryStore, ScriptedProvider, FakeClock]:
    """An operation that has seen one status answer and stopped (its budget is 1 request)."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, script)
    store = MemoryStore()
    wait(
        Operation(
            status_url=URL,
            profile=parse_profile(table or TABLE),
            policy=Policy(max_requests=1, base_delay_s=1, **policy),
        ),
        operation_id="op-c",
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(3),
    )
    return store, provider, clock


def _cancel(store: MemoryStore, provider: ScriptedProvider, clock: FakeClock) -> object:
    return cancel(
        "op-c",
        reason="wrong input file",
        requested_by="ana@example",
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(3),
    )


def test_cancel_when_finished_is_refused() -> None:
    """A finished operation has nothing to cancel: one clear refusal, nothing sent."""
    store, provider, clock = _started({"/status": [(200, {"status": "running"})]})
    with pytest.raises(UsageError, match="finished"):
        _cancel(store, provider, clock)
    assert provider.count("/status/cancel") == 0


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"status": "running"}, "did not say it is"),
        ({"status": "running", "can_cancel": False}, "said it is not"),
    ],
)
def test_cancel_is_refused_unless_the_last_answer_said_cancelable(
    body: dict[str, Any], said: str
) -> None:
    """Without cancelable=true in the last answer (and no 'always'), cancel is refused."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/status": [(200, body)]})
    store = MemoryStore()
    op = Operation(status_url=URL, profile=parse_profile(TABLE), policy=Policy(max_requests=5))
    _drive_one(store, provider, clock, op)
    with pytest.raises(UsageError, match=said):
        _cancel(store, provider, clock)
    assert provider.count("/status/cancel") == 0


def _drive_one(
    store: MemoryStore, provider: ScriptedProvider, clock: FakeClock, op: Operation
) -> None:
    """Run the wait until its first sleep, as a worker would between polls."""

    class Pause(Exception):
        pass

    def sleep(seconds: float) -> None:
        raise Pause

    with pytest.raises(Pause):
        wait(op, operation_id="op-c", store=store, client=provider.client(), clock=clock,
             sleep=sleep, rng=random.Random(3))  # fmt: skip


def test_cancel_is_sent_audited_and_followed_to_canceled() -> None:
    """A cancelable job: POST to the cancel URL, who and why audited, then polled to canceled."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {
            "/status": [
                (200, {"status": "running", "can_cancel": True}),
                (200, {"status": "canceled"}),
            ],
            "/status/cancel": [(202, {"ok": True})],
        },
    )
    store = MemoryStore()
    op = Operation(status_url=URL, profile=parse_profile(TABLE), policy=Policy(max_requests=5))
    _drive_one(store, provider, clock, op)
    outcome = _cancel(store, provider, clock)
    assert outcome.outcome is OutcomeKind.CANCELED  # type: ignore[attr-defined]
    assert ("POST", "/status/cancel") in [(m, p) for m, p, _ in provider.sent]
    events = [e.event for e in store.audit("op-c")]
    requested = next(e for e in events if e.kind == "cancel_requested")
    assert requested.data["requested_by"] == "ana@example"
    assert requested.data["cancel_reason"] == "wrong input file"
    assert "cancel_answered" in [e.kind for e in events]


def test_deadline_never_cancels_by_itself() -> None:
    """Without cancel_on_deadline, a deadline ends timed_out and sends no cancel."""
    result = run(
        {"/status": [(200, {"status": "running", "can_cancel": True})]},
        profile=TABLE,
        deadline_s=5,
        base_delay_s=1,
    )
    assert result.outcome.outcome is OutcomeKind.TIMED_OUT
    assert result.provider.count("/status/cancel") == 0


def test_cancel_on_deadline_is_sent_when_no_status_request_fits_before_the_deadline() -> None:
    """Regression: answers land late (0.5 s each), less than the 1 s floor apart from the
    cancel's time: the promised cancel still goes out, before the deadline with room for
    its one status look (it used to stop "before the deadline" without it, then to be
    sent at the deadline with no look after it)."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {
            "/status": [(200, {"status": "running", "can_cancel": True})],
            "/status/cancel": [(202, None)],
        },
        latency_s=0.5,
    )
    outcome = wait(
        Operation(
            status_url=URL,
            profile=parse_profile(TABLE),
            policy=Policy(deadline_s=10, base_delay_s=1, max_delay_s=1),
            cancel_on_deadline=True,
        ),
        store=MemoryStore(),
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(3),
    )
    sent = [(p, (t - START).total_seconds()) for p, t in provider.requests]
    cancel_at = next(t for p, t in sent if p == "/status/cancel")
    assert provider.count("/status/cancel") == 1
    assert cancel_at == pytest.approx(7.5)  # a quarter of the 10 s wait is kept for it
    assert [p for p, t in sent if t > cancel_at][:1] == ["/status"]  # a look after it
    assert all(t < 10 for _, t in sent)  # nothing at or after the deadline
    assert outcome.outcome is OutcomeKind.TIMED_OUT
    assert "was accepted by the provider" in str(outcome.error)


def test_cancel_on_deadline_sends_one_cancel_then_times_out() -> None:
    """With cancel_on_deadline, one cancel goes out before the deadline; a provider that
    does not confirm it leaves the outcome timed_out, the accepted cancel stated."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {
            "/status": [(200, {"status": "running", "can_cancel": True})],
            "/status/cancel": [(202, None)],
        },
    )
    outcome = wait(
        Operation(
            status_url=URL,
            profile=parse_profile(TABLE),
            policy=Policy(deadline_s=5, base_delay_s=1),
            cancel_on_deadline=True,
        ),
        store=MemoryStore(),
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(3),
    )
    assert outcome.outcome is OutcomeKind.TIMED_OUT
    assert provider.count("/status/cancel") == 1
    assert "was accepted by the provider" in str(outcome.error)


def test_skipped_is_canceled_with_reason_skipped() -> None:
    """A skipped run ends canceled with reason skipped."""
    result = run({"/status": [(200, {"status": "skipped"})]}, profile=TABLE)
    assert result.outcome.outcome is OutcomeKind.CANCELED
    assert result.outcome.reason is Reason.SKIPPED


RESULTS: dict[str, Any] = {
    "state": "status",
    "pending": ["running"],
    "succeeded": ["done"],
    "result": "output",
    "result_document": "output",
    "output_error": "output_error",
    "usage": "usage",
}


@pytest.mark.parametrize(
    ("document", "outcome", "usage"),
    [
        ({"output": "hi", "output_error": None, "usage": None}, OutcomeKind.SUCCEEDED, None),
        ({"output": "hi", "usage": {"tokens": 7}}, OutcomeKind.SUCCEEDED, {"tokens": 7}),
        ({"output": "hi", "output_error": {"code": "E"}, "usage": None}, OutcomeKind.FAILED, None),
    ],
)
def test_output_error_is_checked_before_the_output_and_null_usage_stays_null(
    document: dict[str, Any], outcome: str, usage: object
) -> None:
    """A set output_error fails the outcome; a null usage is reported null, never 0."""
    result = run(
        {"/status": [(200, {"status": "done"})], "/result": [(200, document)]},
        profile=RESULTS,
        result_url="http://provider.test/result",
    )
    assert result.outcome.outcome == outcome
    assert result.outcome.usage == usage
    if outcome is OutcomeKind.SUCCEEDED:
        assert result.outcome.result == "hi"


def test_partial_success_fetches_the_first_errors_page_once() -> None:
    """completed_with_errors with an errors URL: counts inline, one bounded errors fetch."""
    table = {
        **RESULTS,
        "counts": {"succeeded": "n.ok", "failed": "n.bad", "total": "n.all"},
        "errors_url": "errors_url",
    }
    body = {"status": "done", "n": {"ok": 9, "bad": 1, "all": 10}, "errors_url": "/errors"}
    result = run(
        {"/status": [(200, body)], "/errors": [(200, "line 4: bad row")]},
        profile=table,
    )
    assert result.outcome.outcome is OutcomeKind.COMPLETED_WITH_ERRORS
    assert result.outcome.counts == {"succeeded": 9, "failed": 1, "total": 10}
    assert result.outcome.errors == "line 4: bad row"
    assert result.provider.count("/errors") == 1


def test_cancel_survives_a_worker_writing_the_record_at_the_same_moment() -> None:
    """A worker's write between cancel's read and write is no error: cancel reads again."""
    from dataclasses import replace

    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {
            "/status": [(200, {"status": "running", "can_cancel": True}),
                        (200, {"status": "canceled"})],
            "/status/cancel": [(202, None)],
        },
    )  # fmt: skip
    inner = MemoryStore()
    op = Operation(status_url=URL, profile=parse_profile(TABLE), policy=Policy(max_requests=5))
    _drive_one(inner, provider, clock, op)

    class Racing:
        """Lets a 'worker' write the record right after cancel's first read."""

        def __init__(self) -> None:
            self.raced = False

        def get(self, operation_id: str) -> object:
            record = inner.get(operation_id)
            if not self.raced and record is not None:
                self.raced = True
                inner.save(replace(record), [])
            return record

        def __getattr__(self, name: str) -> object:
            return getattr(inner, name)

    outcome = cancel(
        "op-c",
        store=Racing(),  # type: ignore[arg-type]
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(3),
    )
    assert outcome.outcome is OutcomeKind.CANCELED
