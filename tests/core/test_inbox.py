"""Webhook deliveries as hints: applying one, and sweeping the inbox."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from tests.core.harness import PROFILE, SEED, URL
from tests.fakes import START, FakeClock
from tests.records import with_fields
from waitbound import MemoryStore, Operation, OutcomeKind, Policy, Reason, parse_profile, start
from waitbound._base._errors import ConflictError, StoreError
from waitbound._engine._inbox import SAVE_ATTEMPTS, apply_delivery, sweep_inbox
from waitbound._model._audit import AuditEvent
from waitbound._model._observation import Observation
from waitbound._model._push import InboundDelivery
from waitbound._model._record import Push, Record
from waitbound._profile._schedule import DelaySource
from waitbound._rules._controller import Finish, Send, Transition, observe, plan

POLICY = Policy(base_delay_s=5, max_delay_s=120, deadline_s=600, max_requests=5)
LATER = START + timedelta(seconds=40)
"""When the record's next poll is scheduled (a backup-schedule wait in progress)."""
NOW = START + timedelta(seconds=10)


def stored(
    store: MemoryStore, *, job_id: str = "job-1", webhook: str | None = "reports", **changes: object
) -> Record:
    """A waiting operation in *store* that expects *webhook*'s deliveries about *job_id*,
    its next poll scheduled at :data:`LATER`."""
    outcome = start(
        Operation(status_url=URL, profile=parse_profile(PROFILE), policy=POLICY, job_id=job_id),
        store=store,
        clock=FakeClock(),
    )
    record = store.get(outcome.operation_id)
    assert record is not None
    values: dict[str, object] = {
        "push": Push(webhook=webhook),
        "next_poll_at": LATER,
        "delay_source": DelaySource.BACKUP_POLLING,
    }
    changed = with_fields(record, **(values | changes))
    return store.save(changed, [])


def record_of(**changes: object) -> Record:
    return stored(MemoryStore(), **changes)  # type: ignore[arg-type]


def delivery(
    record: Record | None = None,
    *,
    webhook_id: str = "msg_1",
    payload: object = None,
    authoritative: bool = False,
    job_id: str = "job-1",
    event_type: str | None = "job.updated",
) -> InboundDelivery:
    return InboundDelivery(
        provider="reports",
        webhook_id=webhook_id,
        received_at=START,
        job_id=job_id,
        payload=payload if payload is not None else {"data": {"id": job_id}},  # type: ignore[arg-type]
        event_type=event_type,
        authoritative=authoritative,
        operation_id=record.operation_id if record else None,
    )


def apply(record: Record, d: InboundDelivery, now: datetime = NOW) -> Transition:
    transition = apply_delivery(record, d, now, rng=random.Random(SEED))
    assert transition is not None
    return transition


def kinds(events: Sequence[AuditEvent]) -> list[str]:
    return [event.kind for event in events]


# --- a hint ------------------------------------------------------------------------


def test_a_hint_brings_the_next_poll_forward_to_now() -> None:
    """A delivery sets next_poll_at to now, counts itself, and audits webhook_received."""
    record = record_of()
    done = apply(record, delivery(record))
    assert done.record.next_poll_at == NOW
    assert done.record.delay_source is None
    assert done.record.push.deliveries == 1
    assert done.record.push.last_delivery_at == NOW
    (event,) = done.events
    assert event.kind == "webhook_received"
    assert event.summary == (
        'a webhook from "reports" (event "job.updated", delivery "msg_1") '
        "brought the next check forward to now"
    )
    assert {k: event.data[k] for k in ("provider", "webhook_id", "event_type", "job_id")} == {
        "provider": "reports",
        "webhook_id": "msg_1",
        "event_type": "job.updated",
        "job_id": "job-1",
    }
    assert event.data["next_poll_at"] == NOW.isoformat()


def test_a_hint_never_delays_an_overdue_poll() -> None:
    """A poll already due stays due when it was: a hint never moves it later."""
    record = record_of()
    overdue = record.evolve(
        schedule=record.schedule.evolve(next_poll_at=START + timedelta(seconds=2))
    )
    done = apply(overdue, delivery(record))
    assert done.record.next_poll_at == START + timedelta(seconds=2)
    assert done.record.delay_source is DelaySource.BACKUP_POLLING


def test_a_hint_spends_no_request_and_no_budget() -> None:
    """Every counter but push.deliveries is as it was."""
    record = record_of(status_requests_used=2, transport_failures_used=1)
    after = apply(record, delivery(record)).record
    assert after.requests_used == record.requests_used
    assert after.transport_failures_used == 1
    assert after.rate_limited_used == 0
    assert after.attempt == record.attempt
    assert after.outcome is None


@pytest.mark.parametrize("code", [429, 503])
def test_a_hint_never_cuts_short_a_wait_the_provider_demanded(code: int) -> None:
    """After a 429 or 503 with Retry-After, a webhook does not make the poll sooner."""
    record = record_of(delay_source=DelaySource.PROVIDER_RETRY_AFTER, last_http_status=code)
    done = apply(record, delivery(record))
    assert done.record.next_poll_at == LATER
    assert done.record.push.deliveries == 1
    assert f"the wait the provider demanded (HTTP {code})" in done.events[0].summary


def test_a_hint_never_cuts_short_a_429_backoff_without_retry_after() -> None:
    """A 429 without a hint backs off by the throttle rule: a webhook leaves it too."""
    record = record_of(delay_source=DelaySource.LOCAL_BACKOFF, last_http_status=429)
    assert apply(record, delivery(record)).record.next_poll_at == LATER


def test_a_hint_brings_forward_a_pacing_retry_after_on_a_202() -> None:
    """Retry-After on an ordinary 202 paces polling; a webhook is newer news: now."""
    record = record_of(delay_source=DelaySource.PROVIDER_RETRY_AFTER, last_http_status=202)
    assert apply(record, delivery(record)).record.next_poll_at == NOW


def test_deliveries_are_counted_one_by_one() -> None:
    """Two deliveries: deliveries 2, last_delivery_at the second's time."""
    record = record_of()
    first = apply(record, delivery(record)).record
    second = apply(first, delivery(record, webhook_id="msg_2"), NOW + timedelta(seconds=3))
    assert second.record.push.deliveries == 2
    assert second.record.push.last_delivery_at == NOW + timedelta(seconds=3)


def test_a_finished_operation_or_another_operations_delivery_is_nothing_to_do() -> None:
    """A finished record, or a delivery matched to another operation: None."""
    record = record_of()
    finished = record.evolve(ending=record.ending.evolve(outcome=OutcomeKind.SUCCEEDED))
    assert apply_delivery(finished, delivery(record), NOW, rng=random.Random(1)) is None
    other = replace(delivery(record), operation_id="op-other")
    assert apply_delivery(record, other, NOW, rng=random.Random(1)) is None


def test_a_delivery_without_an_event_type_is_described_without_one() -> None:
    """No event type: 'a webhook from "reports" (delivery "msg_1")'."""
    record = record_of()
    done = apply(record, delivery(record, event_type=None))
    assert done.events[0].summary.startswith('a webhook from "reports" (delivery "msg_1") brought')


# --- budgets bound the poll that follows -------------------------------------------


def test_a_hint_with_the_request_budget_spent_escalates_without_a_request() -> None:
    """The hint makes the operation due; the plan then escalates request_budget_exhausted."""
    record = record_of(status_requests_used=POLICY.max_requests)
    hinted = apply(record, delivery(record)).record
    decision = plan(hinted, NOW, owner="w1")
    assert isinstance(decision, Finish)
    assert decision.transition.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert decision.transition.record.requests_used == POLICY.max_requests


def test_a_hint_past_the_deadline_times_out_without_a_request() -> None:
    """A hint after the deadline: the plan records timed_out, nothing is sent."""
    record = record_of()
    after_deadline = record.deadline_at + timedelta(seconds=1)
    hinted = apply(record, delivery(record), after_deadline).record
    decision = plan(hinted, after_deadline, owner="w1")
    assert isinstance(decision, Finish)
    assert decision.transition.record.outcome is OutcomeKind.TIMED_OUT


def test_a_hinted_poll_is_one_request_under_the_lease() -> None:
    """The poll after a hint is planned like any other: one reserved status request."""
    record = record_of()
    hinted = apply(record, delivery(record)).record
    decision = plan(hinted, NOW, owner="w1")
    assert isinstance(decision, Send)
    assert decision.request.kind == "status"
    assert decision.transition.record.requests_used == record.requests_used + 1
    assert decision.transition.record.lease_owner == "w1"


# --- authoritative payloads --------------------------------------------------------


def test_an_authoritative_terminal_payload_ends_the_operation_without_a_request() -> None:
    """A failed payload from an authoritative receiver: outcome failed, no request spent."""
    record = record_of(last_http_status=200)
    payload = {"status": "failed", "error": {"code": "E_CODEC"}}
    done = apply(record, delivery(record, payload=payload, authoritative=True))
    after = done.record
    assert after.outcome is OutcomeKind.FAILED
    assert after.error == {"code": "E_CODEC"}
    assert after.requests_used == record.requests_used
    assert after.last_http_status == 200  # the last poll's, not the payload's
    assert after.push.deliveries == 1
    assert kinds(done.events) == ["webhook_received", "finished"]
    assert done.events[0].summary == (
        'a webhook from "reports" (event "job.updated", delivery "msg_1") carried an '
        'authoritative payload: state "failed" (failed); no request was sent'
    )
    assert done.events[0].data["authoritative"] is True


def test_an_authoritative_success_payload_carries_its_result() -> None:
    """A succeeded payload with its result: outcome succeeded, the result kept."""
    record = record_of()
    payload = {"status": "done", "output": {"rows": 3}}
    after = apply(record, delivery(record, payload=payload, authoritative=True)).record
    assert after.outcome is OutcomeKind.SUCCEEDED
    assert after.result == {"rows": 3}
    assert after.status_requests_used == 0


def test_an_authoritative_success_with_a_result_url_fetches_it_once() -> None:
    """Success while a result URL is named: the result fetch is next (a request, in budget)."""
    record = record_of(result_url="http://provider.test/result")
    payload = {"status": "done", "output": {"rows": 3}}
    done = apply(record, delivery(record, payload=payload, authoritative=True))
    assert done.record.outcome is None
    assert done.record.phase.value == "fetching_result"
    assert done.record.next_poll_at == NOW
    assert kinds(done.events) == ["webhook_received", "result_due"]


def test_an_authoritative_pending_payload_only_brings_the_poll_forward() -> None:
    """A running payload: the hint applies (next poll now), nothing else changes."""
    record = record_of()
    payload = {"status": "running", "progress": 50}
    done = apply(record, delivery(record, payload=payload, authoritative=True))
    assert done.record.outcome is None
    assert done.record.next_poll_at == NOW
    assert done.record.provider_state is None
    assert done.record.attempt == record.attempt
    assert kinds(done.events) == ["webhook_received"]
    assert done.events[0].summary.endswith(
        'its authoritative payload read as state "running" (pending): the next check decides'
    )


@pytest.mark.parametrize(
    ("payload", "changes"),
    [
        ({"status": "mystery"}, {}),
        ({"unrelated": True}, {}),
        ({"status": "running"}, {"success_seen_at": START}),
    ],
    ids=["unknown-state", "no-state", "running-after-success"],
)
def test_an_authoritative_payload_never_escalates(
    payload: object, changes: dict[str, object]
) -> None:
    """An unknown state, no state, or a contradiction is a hint only: the poll decides."""
    record = record_of(**changes)
    done = apply(record, delivery(record, payload=payload, authoritative=True))
    assert done.record.outcome is None
    assert done.record.next_poll_at == NOW
    assert kinds(done.events) == ["webhook_received"]


def test_a_non_authoritative_terminal_payload_is_only_a_hint() -> None:
    """Without authoritative, even a 'failed' payload only brings the poll forward."""
    record = record_of()
    done = apply(record, delivery(record, payload={"status": "failed"}))
    assert done.record.outcome is None
    assert done.record.next_poll_at == NOW


def test_an_authoritative_payload_is_not_read_while_a_request_is_in_flight() -> None:
    """A reserved request (lease held, in_flight set): only the hint, counters untouched."""
    record = record_of(next_poll_at=NOW)
    send = plan(record, NOW, owner="w1")
    assert isinstance(send, Send)
    reserved = send.transition.record
    payload = {"status": "failed", "error": "E"}
    done = apply(reserved, delivery(record, payload=payload, authoritative=True))
    after = done.record
    assert after.outcome is None
    assert after.in_flight == "status"
    assert after.lease_owner == "w1"
    assert after.status_requests_used == reserved.status_requests_used
    assert "its authoritative payload was not read (a request is in flight)" in (
        done.events[0].summary
    )


def test_an_authoritative_payload_is_not_read_while_a_worker_holds_its_claim() -> None:
    """A worker's claim (a lease, no request yet) also makes the payload a hint only."""
    record = record_of(lease_owner="w2", lease_expires_at=NOW + timedelta(seconds=30))
    done = apply(record, delivery(record, payload={"status": "failed"}, authoritative=True))
    assert done.record.outcome is None
    assert done.record.lease_owner == "w2"
    assert done.record.next_poll_at == NOW


def test_an_expired_lease_does_not_stop_an_authoritative_payload() -> None:
    """A lease past its expiry holds nothing: the payload is read."""
    record = record_of(lease_owner="w2", lease_expires_at=NOW - timedelta(seconds=1))
    done = apply(record, delivery(record, payload={"status": "failed"}, authoritative=True))
    assert done.record.outcome is OutcomeKind.FAILED
    assert done.record.lease_owner is None


def test_a_hint_while_a_request_is_in_flight_is_not_lost_to_its_answer() -> None:
    """The answer to a request sent before the hint may predate it: the next check is now."""
    record = record_of(next_poll_at=NOW)
    send = plan(record, NOW, owner="w1")
    assert isinstance(send, Send)
    hinted = apply(send.transition.record, delivery(record), NOW + timedelta(seconds=1)).record
    answered_at = NOW + timedelta(seconds=2)
    answer = Observation(
        kind="status", at=answered_at, http_status=200, body={"status": "running"}, elapsed_s=2.0
    )
    after = observe(hinted, answer, rng=random.Random(SEED))
    assert after.record.next_poll_at == answered_at
    assert "a webhook arrived while this request was in flight" in after.events[-1].summary


def test_a_hint_applied_before_the_request_was_sent_is_not_applied_twice() -> None:
    """A hint that made the poll due: its answer schedules the backup as usual."""
    record = record_of(next_poll_at=NOW)
    hinted = apply(record, delivery(record), NOW).record
    send = plan(hinted, NOW + timedelta(seconds=1), owner="w1")
    assert isinstance(send, Send)
    answer = Observation(
        kind="status",
        at=NOW + timedelta(seconds=2),
        http_status=200,
        body={"status": "running"},
        elapsed_s=1.0,
    )
    after = observe(send.transition.record, answer, rng=random.Random(SEED))
    assert after.record.next_poll_at > NOW + timedelta(seconds=2)
    assert after.record.delay_source is DelaySource.BACKUP_POLLING


# --- the sweep ---------------------------------------------------------------------


def test_the_sweep_applies_pending_deliveries_and_marks_them_applied() -> None:
    """Two matched deliveries: both applied, both marked; a second sweep has nothing."""
    store = MemoryStore()
    a = stored(store, job_id="job-a")
    b = stored(store, job_id="job-b")
    assert store.put_delivery(delivery(webhook_id="m1", job_id="job-a")) is not None
    assert store.put_delivery(delivery(webhook_id="m2", job_id="job-b")) is not None
    clock = FakeClock(NOW)
    assert sweep_inbox(store, clock=clock, rng=random.Random(SEED)) == 2
    for record in (a, b):
        after = store.get(record.operation_id)
        assert after is not None
        assert after.next_poll_at == NOW
        assert after.push.deliveries == 1
        assert kinds([e.event for e in store.audit(record.operation_id)])[-1] == "webhook_received"
    assert [d.applied_at for d in store.inbox()] == [NOW, NOW]
    assert sweep_inbox(store, clock=clock, rng=random.Random(SEED)) == 0


def test_an_unmatched_delivery_waits_in_the_inbox() -> None:
    """A delivery about a job no operation expects is not swept (not matched)."""
    store = MemoryStore()
    stored(store, job_id="job-a")
    store.put_delivery(delivery(job_id="job-zzz"))
    assert sweep_inbox(store, clock=FakeClock(NOW), rng=random.Random(SEED)) == 0
    assert [d.applied_at for d in store.inbox()] == [None]


def test_a_delivery_stored_before_its_operation_is_applied_once_it_is_recorded() -> None:
    """Look-back: the delivery arrives first; the operation with push.webhook and job_id
    is recorded later; the next sweep applies it."""
    store = MemoryStore()
    early = store.put_delivery(delivery(job_id="job-late"))
    assert early is not None
    assert early.operation_id is None
    assert sweep_inbox(store, clock=FakeClock(NOW), rng=random.Random(SEED)) == 0
    record = stored(store, job_id="job-late")
    assert sweep_inbox(store, clock=FakeClock(NOW), rng=random.Random(SEED)) == 1
    after = store.get(record.operation_id)
    assert after is not None
    assert after.next_poll_at == NOW
    assert after.push.deliveries == 1


def test_a_delivery_for_a_finished_operation_is_marked_applied_without_a_write() -> None:
    """Nothing to do is still applied: the record is left as it was."""
    store = MemoryStore()
    record = stored(store)
    done = store.save(record.evolve(ending=record.ending.evolve(outcome=OutcomeKind.SUCCEEDED)), [])
    store.put_delivery(delivery())
    assert sweep_inbox(store, clock=FakeClock(NOW), rng=random.Random(SEED)) == 1
    assert store.get(record.operation_id) == done
    assert store.pending_deliveries(limit=10) == []


class ConflictingStore(MemoryStore):
    """A store whose first *conflicts* saves lose to another writer (who adds a label)."""

    def __init__(self, conflicts: int) -> None:
        super().__init__()
        self.conflicts = conflicts
        self.saves = 0

    def save(self, record: Record, events: Sequence[AuditEvent]) -> Record:
        self.saves += 1
        if self.conflicts and any(e.kind == "webhook_received" for e in events):
            self.conflicts -= 1
            current = self.get(record.operation_id)
            assert current is not None
            super().save(
                current.evolve(contract=current.contract.evolve(label=f"write-{self.saves}")), []
            )
            raise ConflictError(record.operation_id, record.version)
        return super().save(record, events)


def test_the_sweep_reads_the_record_again_after_a_conflicting_write() -> None:
    """Two lost compare-and-swaps: the third attempt applies the hint to the fresh record."""
    store = ConflictingStore(conflicts=2)
    record = stored(store)
    store.put_delivery(delivery())
    store.saves = 0
    assert sweep_inbox(store, clock=FakeClock(NOW), rng=random.Random(SEED)) == 1
    after = store.get(record.operation_id)
    assert after is not None
    assert after.next_poll_at == NOW
    assert after.label == "write-2"  # the other writer's change is kept
    assert after.push.deliveries == 1


def test_a_delivery_that_keeps_conflicting_is_given_up_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After SAVE_ATTEMPTS conflicts the delivery is marked applied and a warning logged."""
    store = ConflictingStore(conflicts=SAVE_ATTEMPTS)
    record = stored(store)
    store.put_delivery(delivery())
    with caplog.at_level(logging.WARNING, logger="waitbound.inbox"):
        assert sweep_inbox(store, clock=FakeClock(NOW), rng=random.Random(SEED)) == 0
    assert store.pending_deliveries(limit=10) == []
    assert "msg_1" in caplog.text
    assert "ConflictError" in caplog.text
    after = store.get(record.operation_id)
    assert after is not None
    assert after.push.deliveries == 0


class BrokenRecordStore(MemoryStore):
    """A store that cannot read one operation's record."""

    broken: str = ""

    def get(self, operation_id: str) -> Record | None:
        if operation_id == self.broken:
            raise StoreError("a stored record is damaged (KeyError: 'policy')")
        return super().get(operation_id)


def test_one_broken_record_does_not_stop_the_sweep(caplog: pytest.LogCaptureFixture) -> None:
    """The broken one is logged and marked applied; the others are applied."""
    store = BrokenRecordStore()
    bad = stored(store, job_id="job-bad")
    good = stored(store, job_id="job-good")
    store.broken = bad.operation_id
    store.put_delivery(delivery(webhook_id="m-bad", job_id="job-bad"))
    store.put_delivery(delivery(webhook_id="m-good", job_id="job-good"))
    with caplog.at_level(logging.WARNING, logger="waitbound.inbox"):
        assert sweep_inbox(store, clock=FakeClock(NOW), rng=random.Random(SEED)) == 1
    assert "m-bad" in caplog.text
    assert "damaged" in caplog.text
    assert store.pending_deliveries(limit=10) == []
    after = store.get(good.operation_id)
    assert after is not None
    assert after.next_poll_at == NOW


def test_the_sweep_applies_at_most_limit_deliveries_oldest_first() -> None:
    """limit=1: the oldest delivery first, the next one on the next sweep."""
    store = MemoryStore()
    record = stored(store)
    store.put_delivery(replace(delivery(webhook_id="m-new"), received_at=START + timedelta(1)))
    store.put_delivery(delivery(webhook_id="m-old"))
    assert sweep_inbox(store, clock=FakeClock(NOW), rng=random.Random(SEED), limit=1) == 1
    assert [d.webhook_id for d in store.pending_deliveries(limit=10)] == ["m-new"]
    assert sweep_inbox(store, clock=FakeClock(NOW), rng=random.Random(SEED), limit=1) == 1
    after = store.get(record.operation_id)
    assert after is not None
    assert after.push.deliveries == 2
