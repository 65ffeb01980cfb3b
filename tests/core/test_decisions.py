"""Decisions: every option of every reason, grants that stay bounded, one decision per
request (compare-and-swap), agents that only ask, requests that expire, and the
business deadline. All on virtual time against a scripted provider."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import waitbound
from tests.fakes import Answer, FakeClock, ScriptedProvider, work_virtually
from tests.hypothesis_profiles import examples
from waitbound import (
    ConflictError,
    DecisionConflictError,
    Grants,
    MemoryStore,
    Operation,
    OperationNotFoundError,
    Outcome,
    OutcomeKind,
    Phase,
    Policy,
    Reason,
    Record,
    Submission,
    UsageError,
    parse_profile,
    submit,
    wait,
)
from waitbound._base._json import JSON, canonical_json
from waitbound._model._audit import AuditEvent
from waitbound._rules._decisions import (
    MAX_WHY_CHARS,
    decide_record,
    escalation_message,
    expire,
    profile_version,
)
from waitbound.stores._protocol import decode_record, encode_record

URL = "http://provider.test/status"
RESULT_URL = "http://provider.test/result"
SEED = 11
SECRET = "sk-live-7f3a9c1e5b"
TABLE: dict[str, Any] = {
    "state": "status",
    "pending": ["queued", "running"],
    "succeeded": ["done"],
    "partial": ["partial"],
    "failed": ["failed"],
    "canceled": ["canceled"],
    "job_id": "id",
    "error": "error",
    "result": "output",
    "result_document": "output",
    "errors_url": "errors_url",
    "cancelable": "can_cancel",
    "cancel": {"url_template": "{status_url}/cancel"},
}
RUNNING: Answer = (200, {"status": "running", "id": "job-1"})
DONE: Answer = (200, {"status": "done", "id": "job-1", "output": {"rows": 3}})
STANDARD_KEYS = {"phase", "state", "requests_used", "max_requests", "next_poll_at", "delay_source"}


@dataclass
class Op:
    """One stored operation on virtual time, and the provider it talks to."""

    store: MemoryStore
    clock: FakeClock
    provider: ScriptedProvider
    id: str
    headers: dict[str, str] | None = None

    @property
    def record(self) -> Record:
        record = self.store.get(self.id)
        assert record is not None
        return record

    def resume(self, *answers: Answer, path: str = "/status") -> Outcome:
        """Continue the operation under ``wait(operation_id=…)`` (the answers replace
        the script of *path*; its last answer repeats)."""
        if answers:
            self.provider.script[path] = list(answers)
        return wait(
            operation_id=self.id,
            store=self.store,
            headers=self.headers,
            client=self.provider.client(),
            clock=self.clock,
            sleep=self.clock.sleep,
            rng=random.Random(SEED),
        )

    def decide(self, option: str, **kwargs: Any) -> Outcome:
        kwargs.setdefault("why", "the export is large today")
        kwargs.setdefault("by", "ana@example")
        return waitbound.decide(self.id, option, store=self.store, clock=self.clock, **kwargs)

    def events(self, kind: str | None = None) -> list[AuditEvent]:
        return [s.event for s in self.store.audit(self.id) if kind in (None, s.event.kind)]

    def sent_at(self) -> list[datetime]:
        return [at for _, at in self.provider.requests]

    def snapshot(self) -> tuple[int, int, str]:
        """The stored record's version, its audit length and its JSON."""
        record = self.record
        return record.version, len(self.store.audit(self.id)), canonical_json(record.to_json())


def stopped(
    *answers: Answer,
    table: dict[str, Any] | None = None,
    operation_id: str = "op-1",
    headers: dict[str, str] | None = None,
    result_url: str | None = None,
    cancel_on_deadline: bool = False,
    script: dict[str, list[Answer]] | None = None,
    **policy: Any,
) -> Op:
    """Wait on a scripted provider until the operation has its (first) outcome."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {
            "/status": list(answers),
            "/status/cancel": [(202, {})],
            "/result": [DONE],
            **(script or {}),
        },
    )
    op = Op(store=MemoryStore(), clock=clock, provider=provider, id=operation_id, headers=headers)
    wait(
        Operation(
            status_url=URL,
            profile=parse_profile(table or TABLE),
            policy=Policy(**{"base_delay_s": 1.0, "max_delay_s": 4.0, **policy}),
            result_url=result_url,
            cancel_on_deadline=cancel_on_deadline,
        ),
        operation_id=operation_id,
        store=op.store,
        headers=headers,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(SEED),
    )
    return op


@contextmanager
def unchanged(op: Op) -> Iterator[None]:
    """The stored record (its version and JSON) and its audit log stay as they were."""
    before = op.snapshot()
    yield
    assert op.snapshot() == before


def refused(op: Op, error: type[Exception], match: str, option: str, **kwargs: Any) -> str:
    """Deciding *option* fails with *error*: one line, and nothing stored changes."""
    with unchanged(op), pytest.raises(error, match=match) as info:
        op.decide(option, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def decided_event(op: Op) -> AuditEvent:
    events = op.events("decided")
    assert events
    return events[-1]


def limits(event: AuditEvent, which: str) -> dict[str, JSON]:
    value = event.data[which]
    assert isinstance(value, dict)
    return value


# --- extensions: budget, deadline, transport failures, throttling ----------------


def _budget() -> Op:
    return stopped(RUNNING, max_requests=3)


def _deadline() -> Op:
    return stopped(RUNNING, deadline_s=10, base_delay_s=4, max_delay_s=4, max_extension_s=600)


def _failures() -> Op:
    return stopped((503, None), max_transport_failures=1)


def _throttled() -> Op:
    return stopped((429, None), max_rate_limited=1)


EXTENDABLE = {
    Reason.REQUEST_BUDGET_EXHAUSTED: _budget,
    Reason.DEADLINE_EXCEEDED: _deadline,
    Reason.PROVIDER_FAILURE: _failures,
    Reason.RATE_LIMITED: _throttled,
}


@pytest.mark.parametrize("reason", list(EXTENDABLE))
def test_extend_continues_the_same_operation_with_the_granted_limits_and_no_more(
    reason: Reason,
) -> None:
    """Extend by 1 minute with 2 checks: the same operation polls again at once (delay
    source manual_extension), sends at most 2 more requests, all before the new
    deadline, and stops again; the decided event holds the limits before and after."""
    op = EXTENDABLE[reason]()
    first = op.record
    assert first.reason is reason
    assert "extend" in first.to_outcome().options
    sent_before, used_before = len(op.provider.requests), first.requests_used

    after = op.decide("extend", minutes=1, checks=2)
    assert after.outcome is None
    assert after.operation_id == op.id
    reopened = op.record
    assert reopened.phase is Phase.WAITING
    assert reopened.max_requests == used_before + 2
    assert reopened.deadline_at == max(first.deadline_at, op.clock.now() + timedelta(minutes=1))
    event = decided_event(op)
    assert event.data["option"] == "extend"
    assert event.data["by"] == "ana@example"
    assert event.data["why"] == "the export is large today"
    assert event.data["grant"] == {"minutes": 1.0, "checks": 2}
    assert event.data["stopped_because"] == reason.value
    assert limits(event, "limits_before") == {
        "deadline_at": first.deadline_at.isoformat(),
        "max_requests": first.max_requests,
        "max_transport_failures": first.max_transport_failures,
        "max_rate_limited": first.max_rate_limited,
        "requests_used": used_before,
    }
    assert limits(event, "limits_after")["max_requests"] == used_before + 2
    assert limits(event, "limits_after")["deadline_at"] == reopened.deadline_at.isoformat()
    assert event.data["delay_source"] == "manual_extension"

    outcome = op.resume(RUNNING)
    assert outcome.operation_id == op.id
    assert outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert len(op.provider.requests) == sent_before + 2
    assert op.record.requests_used == used_before + 2
    assert all(at <= reopened.deadline_at for at in op.sent_at()[sent_before:])
    kinds = [e.kind for e in op.events()]
    decided_at = len(kinds) - 1 - kinds[::-1].index("decided")
    first_reserved = next(e for e in op.events()[decided_at:] if e.kind == "reserved")
    assert first_reserved.data["delay_source"] == "manual_extension"


def test_a_provider_failure_extension_gives_a_fresh_allowance_of_the_policys_size() -> None:
    """After provider_failure (1 failure tolerated), extend: one more failure is
    tolerated, the next stops provider_failure again; the counter never resets."""
    op = _failures()
    assert op.record.transport_failures_used == 2
    op.decide("extend", minutes=5, checks=10)
    assert op.record.max_transport_failures == 3
    outcome = op.resume((503, None))
    assert outcome.reason is Reason.PROVIDER_FAILURE
    assert outcome.transport_failures_used == 4
    assert op.provider.count("/status") == 4


def test_a_rate_limit_extension_gives_a_fresh_allowance_of_the_policys_size() -> None:
    """After rate_limited (1 throttle tolerated), extend: one more throttle is fine, and
    the job then succeeds on the same operation; the counter keeps counting."""
    op = _throttled()
    op.decide("extend", minutes=5, checks=10)
    assert op.record.max_rate_limited == 3
    assert op.record.max_transport_failures == 3  # the policy default: not touched
    outcome = op.resume((429, None), DONE)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert outcome.rate_limited_used == 3
    assert outcome.result == {"rows": 3}


def test_extending_before_the_budget_is_spent_means_at_most_the_granted_checks() -> None:
    """A deadline stop with requests left: "2 more checks" caps the budget at the
    requests used + 2 (never the policy's remaining budget on top)."""
    op = _deadline()
    used = op.record.requests_used
    assert used < op.record.policy.max_requests
    op.decide("extend", minutes=5, checks=2)
    assert op.record.max_requests == used + 2
    op.resume(RUNNING)
    assert op.record.requests_used == used + 2


def test_extensions_stop_at_max_extensions_then_only_closing_options_remain() -> None:
    """max_extensions 1: one extend, and after the next stop no resuming option is
    offered (and choosing extend is refused)."""
    op = stopped(RUNNING, max_requests=2, max_extensions=1)
    op.decide("extend", minutes=1, checks=1)
    op.resume(RUNNING)
    assert op.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert op.record.to_outcome().options == ("abandon",)
    refused(op, UsageError, "not open", "extend", minutes=1, checks=1)


def test_max_extensions_counts_every_resuming_grant() -> None:
    """treat_as_pending spends a grant like extend: after it, with max_extensions 1,
    the next unknown state offers no treat_as_pending."""
    op = stopped((200, {"status": "odd"}), max_extensions=1)
    op.decide("treat_as_pending", minutes=1, checks=3)
    op.resume((200, {"status": "odder"}))
    assert op.record.reason is Reason.UNKNOWN_STATE
    assert op.record.to_outcome().options == ("mark_failed", "abandon")


def test_no_extensions_allowed_offers_no_resuming_option() -> None:
    """max_extensions 0: a budget stop offers only abandon."""
    op = stopped(RUNNING, max_requests=1, max_extensions=0)
    assert op.record.to_outcome().options == ("abandon",)


# --- cancel: only when cancelable ----------------------------------------------


def test_cancel_is_offered_when_cancelable_and_the_operation_is_polled_to_canceled() -> None:
    """A budget stop whose last answer said cancelable offers cancel; deciding it sends
    the cancel once, then polls the status to canceled, within the granted checks."""
    op = stopped((200, {"status": "running", "can_cancel": True}), max_requests=2)
    assert op.record.to_outcome().options == ("extend", "cancel", "abandon")
    op.decide("cancel", minutes=2, checks=2, why="wrong input file")
    assert op.record.cancel_due
    assert op.record.cancel_requested_by == "ana@example"
    outcome = op.resume((200, {"status": "canceled"}))
    assert outcome.outcome is OutcomeKind.CANCELED
    assert op.provider.count("/status/cancel") == 1
    assert op.record.requests_used == 2 + 2  # the cancel and one status request


@pytest.mark.parametrize(
    ("table", "body"),
    [
        (TABLE, {"status": "running", "can_cancel": False}),
        (TABLE, {"status": "running"}),
        ({k: v for k, v in TABLE.items() if k != "cancel"}, {"status": "running"}),
    ],
    ids=["said-not-cancelable", "did-not-say", "no-cancel-action"],
)
def test_cancel_is_not_offered_when_not_cancelable(table: dict[str, Any], body: JSON) -> None:
    """Not cancelable by its last answer, or without a cancel action: no cancel option,
    and deciding cancel anyway is refused without a change."""
    op = stopped((200, body), table=table, max_requests=1)
    assert op.record.to_outcome().options == ("extend", "abandon")
    refused(op, UsageError, "not open", "cancel")
    assert op.provider.count("/status/cancel") == 0


# --- unknown_state: treat_as_pending ----------------------------------------------


def test_treat_as_pending_makes_that_one_value_pending_and_a_new_one_stops_again() -> None:
    """The state "odd" is unknown: treat_as_pending reads "odd" as pending for this operation, so
    polling goes on; a further new value "odder" stops unknown_state again."""
    op = stopped((200, {"status": "odd"}))
    assert op.record.reason is Reason.UNKNOWN_STATE
    assert op.record.to_outcome().options == ("treat_as_pending", "mark_failed", "abandon")
    op.decide("treat_as_pending", minutes=2, checks=5)
    assert op.record.grants.pending_states == ("odd",)
    assert decided_event(op).data["pending_state"] == "odd"
    outcome = op.resume(
        (200, {"status": "odd"}), (200, {"status": "odd"}), (200, {"status": "odder"})
    )
    assert outcome.reason is Reason.UNKNOWN_STATE
    assert outcome.provider_state == "odder"
    assert op.provider.count("/status") == 1 + 3


def test_treat_as_pending_lets_the_job_then_succeed() -> None:
    """With "odd" read as pending, the job's later "done" is its success."""
    op = stopped((200, {"status": "odd"}))
    op.decide("treat_as_pending", minutes=2, checks=5)
    outcome = op.resume((200, {"status": "odd"}), DONE)
    assert outcome.outcome is OutcomeKind.SUCCEEDED


def test_treat_as_pending_holds_for_that_operation_only() -> None:
    """Another operation with the same profile still stops on "odd"."""
    op = stopped((200, {"status": "odd"}))
    op.decide("treat_as_pending", minutes=2, checks=5)
    other = stopped((200, {"status": "odd"}), operation_id="op-2")
    assert other.record.reason is Reason.UNKNOWN_STATE
    assert other.record.grants == Grants()


# --- contradiction: mark_succeeded / mark_failed ----------------------------------

REQUIRED = {**TABLE, "require_on_success": ["output"]}
NO_OUTPUT: Answer = (200, {"status": "done", "id": "job-1"})


@pytest.mark.parametrize(
    ("option", "kind"),
    [("mark_succeeded", OutcomeKind.SUCCEEDED), ("mark_failed", OutcomeKind.FAILED)],
)
def test_a_person_asserts_the_outcome_of_a_contradiction(option: str, kind: OutcomeKind) -> None:
    """A "done" without its required output, again and again: contradiction. A person's
    assertion becomes the outcome with decided_by, the kept response as evidence."""
    op = stopped(NO_OUTPUT, table=REQUIRED)
    assert op.record.reason is Reason.CONTRADICTION
    assert op.record.to_outcome().options == ("mark_succeeded", "mark_failed", "abandon")
    sent = len(op.provider.requests)
    outcome = op.decide(option, by="lee@example", why="checked the console: it ran")
    assert outcome.outcome is kind
    assert outcome.decided_by == "lee@example"
    assert outcome.reason is None
    assert decided_event(op).data["evidence"] == {"status": "done", "id": "job-1"}
    assert op.record.decisions[-1].detail["evidence"] == {"status": "done", "id": "job-1"}
    assert op.resume().outcome is kind
    assert len(op.provider.requests) == sent  # an assertion sends nothing


# --- authorization_denied: resume_with_credentials --------------------------------


def test_resume_with_credentials_needs_a_new_label_and_continues_with_it() -> None:
    """Denied: resume only with a credential label that differs from the denied one;
    the identical label is refused, a new one continues to success. No secret is kept."""
    op = stopped((401, {"error": "bad token"}), headers={"Authorization": f"Bearer {SECRET}"})
    assert op.record.reason is Reason.AUTHORIZATION_DENIED
    assert op.record.to_outcome().options == ("resume_with_credentials", "abandon")
    refused(op, UsageError, "credential label", "resume_with_credentials")
    op.headers = {"Authorization": "Bearer second-key"}
    op.decide("resume_with_credentials", credential_label="key-2", minutes=1, checks=2)
    assert op.resume((401, {"error": "bad token"})).reason is Reason.AUTHORIZATION_DENIED
    refused(op, UsageError, "is the one that was denied", "resume_with_credentials",
            credential_label="key-2")  # fmt: skip
    op.headers = {"Authorization": "Bearer third-key"}
    op.decide("resume_with_credentials", credential_label="key-3", minutes=1, checks=2)
    assert decided_event(op).data["credential_label"] == {"from": "key-2", "to": "key-3"}
    outcome = op.resume(DONE)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert op.record.credential_label == "key-3"
    assert op.provider.seen_headers[-1]["authorization"] == "Bearer third-key"
    stored = canonical_json(op.record.to_json()) + "".join(
        e.summary + canonical_json(e.data) for e in op.events()
    )
    assert SECRET not in stored
    assert "third-key" not in stored


# --- integration_failure: resume_with_profile --------------------------------------

WRONG_KEY = {**TABLE, "state": "state_name"}


def test_resume_with_profile_refuses_the_same_profile_and_records_the_new_one() -> None:
    """A body the profile cannot read: integration_failure. The same profile is
    refused; a corrected one continues, its name and version recorded."""
    op = stopped(RUNNING, table=WRONG_KEY, not_found_grace_s=0)
    assert op.record.reason is Reason.INTEGRATION_FAILURE
    assert op.record.to_outcome().options == ("resume_with_profile", "abandon")
    refused(op, UsageError, "needs the corrected profile", "resume_with_profile")
    same = parse_profile(WRONG_KEY)
    refused(op, UsageError, "is the one that stopped", "resume_with_profile", profile=same)
    fixed = parse_profile(TABLE, name="export-v2")
    op.decide("resume_with_profile", profile=fixed, minutes=1, checks=2)
    assert decided_event(op).data["profile"] == {
        "from": {"name": "inline", "version": profile_version(same)},
        "to": {"name": "export-v2", "version": profile_version(fixed)},
    }
    outcome = op.resume(DONE)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert op.record.profile.name == "export-v2"


# --- result_unconfirmed: fetch_result_again ----------------------------------------


def test_fetch_result_again_fetches_the_lost_result_once() -> None:
    """A result request whose answer was lost to our own stop: result_unconfirmed;
    fetch_result_again requests it once more and the operation succeeds."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/status": [DONE], "/result": [DONE]})
    op = Op(store=MemoryStore(), clock=clock, provider=provider, id="op-r")
    waitbound.start(
        Operation(status_url=URL, profile=parse_profile(TABLE), result_url=RESULT_URL),
        operation_id=op.id,
        store=op.store,
        clock=clock,
    )
    op.store.save(
        op.record.evolve(
            ending=op.record.ending.evolve(
                phase=Phase.FETCHING_RESULT, settled_outcome=OutcomeKind.SUCCEEDED
            ),
            lease=op.record.lease.evolve(in_flight="result"),
            counters=op.record.counters.evolve(result_requests_used=1, status_requests_used=2),
            answer=op.record.answer.evolve(provider_state="done"),
        ),
        [],
    )
    assert op.resume().reason is Reason.RESULT_UNCONFIRMED
    assert op.record.stopped_phase is Phase.FETCHING_RESULT
    assert op.record.to_outcome().options == ("fetch_result_again", "abandon")
    op.decide("fetch_result_again", minutes=1, checks=1)
    outcome = op.resume()
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert outcome.result == {"rows": 3}
    assert provider.count("/result") == 1
    assert provider.count("/status") == 0


# --- abandon ---------------------------------------------------------------------


def test_abandon_closes_the_request_and_the_outcome_stays() -> None:
    """abandon: the outcome and reason stay, the request is closed (no options), the
    decision is recorded, and nothing more is sent."""
    op = _budget()
    sent = len(op.provider.requests)
    outcome = op.decide("abandon", why="nobody needs it any more")
    assert outcome.outcome is OutcomeKind.ESCALATED
    assert outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert outcome.options == ()
    assert op.record.decision_request is None
    assert [(d.option, d.by) for d in op.record.decisions] == [("abandon", "ana@example")]
    assert op.resume().outcome is OutcomeKind.ESCALATED
    assert len(op.provider.requests) == sent
    assert waitbound.escalations(store=op.store, clock=op.clock) == []


# --- one decision per request ------------------------------------------------------


def test_a_second_decision_conflicts_naming_who_decided_what_and_when() -> None:
    """The first decision wins; a second one (sequential) is refused with who, what and
    when, and changes nothing."""
    op = _budget()
    op.decide("extend", minutes=1, checks=1, by="ana@example", why="needed today")
    decided_at = op.clock.now().isoformat()
    op.clock.advance(5)
    message = refused(op, DecisionConflictError, "decided first", "abandon", by="bo@example")
    assert "ana@example" in message
    assert "extend (needed today)" in message
    assert decided_at in message
    with pytest.raises(DecisionConflictError) as info:
        op.decide("abandon", by="bo@example")
    assert (info.value.decided_by, info.value.decided_at) == ("ana@example", decided_at)
    assert info.value.option == "extend (needed today)"


def test_concurrent_decisions_one_wins_the_other_conflicts() -> None:
    """Two people read the same open request, then both write: the store's
    compare-and-swap keeps the first and the second gets the conflict."""
    op = _budget()
    record = op.record
    first, first_event = decide_record(
        record, "extend", by="ana@example", why="a", now=op.clock.now(), minutes=1, checks=1
    )
    second, second_event = decide_record(
        record, "abandon", by="bo@example", why="b", now=op.clock.now()
    )
    audit_length = len(op.store.audit(op.id))
    op.store.save(first, [first_event])
    with pytest.raises(ConflictError):
        op.store.save(second, [second_event])
    assert [d.option for d in op.record.decisions] == ["extend"]
    assert len(op.store.audit(op.id)) == audit_length + 1


def test_concurrent_decide_calls_the_loser_gets_a_decision_conflict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through ``waitbound.decide``: bo reads the request, ana decides before bo's write,
    so bo's write conflicts, and on the fresh record bo is told ana decided first."""
    op = _budget()
    save = op.store.save
    raced: list[Record] = []

    def racing_save(record: Record, events: Any) -> Record:
        if not raced:  # bo has read and decided; ana's decision lands first
            raced.append(record)
            op.decide("extend", minutes=1, checks=1, by="ana@example", why="a")
        return save(record, events)

    monkeypatch.setattr(op.store, "save", racing_save)
    with pytest.raises(DecisionConflictError, match="decided first by ana@example"):
        op.decide("abandon", by="bo@example", why="b")
    assert [d.by for d in op.record.decisions] == ["ana@example"]
    assert len(op.events("decided")) == 1
    assert op.record.outcome is None  # ana's extend stands


# --- agents ask; people decide --------------------------------------------------


def _running(**policy: Any) -> Op:
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/status": [RUNNING]})
    op = Op(store=MemoryStore(), clock=clock, provider=provider, id="op-a")
    waitbound.start(
        Operation(
            status_url=URL, profile=parse_profile(TABLE), policy=Policy(base_delay_s=1, **policy)
        ),
        operation_id=op.id,
        store=op.store,
        clock=clock,
    )
    return op


def _ask(op: Op, **kwargs: Any) -> waitbound.Escalation:
    args: dict[str, Any] = {
        "minutes": 5,
        "checks": 3,
        "why": "transcode is slow",
        "by": "agent:mcp",
    }
    return waitbound.request_extension(op.id, store=op.store, clock=op.clock, **(args | kwargs))


def test_an_agents_request_extends_nothing_by_itself() -> None:
    """request_extension on a running operation opens a request (extend, decline) that a
    person sees; the limits stay as they were, and the operation stops at its own budget."""
    op = _running(max_requests=3)
    before = op.record
    escalation = _ask(op)
    assert [o for o, _ in escalation.options] == ["extend", "as_requested", "decline"]
    assert escalation.requested_by == "agent:mcp"
    assert "Requested by: agent:mcp, 5 more minutes with 3 more checks (transcode is slow)" in (
        escalation.message
    )
    after = op.record
    assert (after.deadline_at, after.max_requests, after.grants) == (
        before.deadline_at,
        before.max_requests,
        Grants(),
    )
    assert op.events()[-1].kind == "extension_requested"
    assert [e.operation_id for e in waitbound.escalations(store=op.store, clock=op.clock)] == [
        op.id
    ]
    outcome = op.resume()
    assert outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert op.provider.count("/status") == 3
    request = op.record.decision_request
    assert request is not None
    assert request.requested_by == "agent:mcp"  # still visible
    assert op.record.to_outcome().options == ("extend", "as_requested", "abandon")


def test_declining_an_agents_request_leaves_the_operation_as_it_was() -> None:
    """decline: the request is closed and recorded; limits and schedule unchanged."""
    op = _running()
    before = op.record
    _ask(op)
    outcome = op.decide("decline", why="not worth it")
    after = op.record
    assert outcome.outcome is None
    assert after.decision_request is None
    assert (after.deadline_at, after.max_requests, after.next_poll_at, after.grants) == (
        before.deadline_at,
        before.max_requests,
        before.next_poll_at,
        before.grants,
    )
    assert [d.option for d in after.decisions] == ["decline"]


def test_a_person_extending_an_agents_request_grants_it() -> None:
    """extend on an agent's request: the grant is made by the person's decision (the
    requests used + the checks; now + the minutes)."""
    op = _running(max_requests=3, deadline_s=120, max_extension_s=600)
    op.store.save(op.record.evolve(counters=op.record.counters.evolve(status_requests_used=2)), [])
    _ask(op, minutes=5, checks=3)
    op.decide("extend", minutes=5, checks=3)
    assert op.record.max_requests == 2 + 3
    assert op.record.deadline_at == op.clock.now() + timedelta(minutes=5)
    assert op.record.grants.extensions == 1
    assert op.record.outcome is None


def test_extending_a_running_operation_never_lowers_its_limits() -> None:
    """Regression: an agent asks for 5 more minutes with 3 more checks while 60 minutes
    and 30 requests are left; a person's extend must not cut the operation down to
    5 minutes and 3 requests."""
    op = _running(max_requests=30, deadline_s=3600)
    before = op.record
    _ask(op, minutes=5, checks=3)
    op.decide("extend", minutes=5, checks=3)
    after = op.record
    assert after.deadline_at >= before.deadline_at
    assert after.max_requests >= before.max_requests
    assert after.grants.extensions == 1


def test_a_reason_longer_than_the_limit_is_refused_never_cut() -> None:
    """The audit keeps what a person said: a reason past MAX_WHY_CHARS is refused
    whole (one line, nothing changed), for a decision as for an agent's request; one at
    the limit is kept as given."""
    op = _budget()
    long = "x" * (MAX_WHY_CHARS + 1)
    message = refused(op, UsageError, f"at most {MAX_WHY_CHARS}", "abandon", why=long)
    assert long not in message
    with unchanged(op), pytest.raises(UsageError, match=f"at most {MAX_WHY_CHARS}"):
        _ask(op, why=long)
    op.decide("abandon", why="y" * MAX_WHY_CHARS)
    assert decided_event(op).data["why"] == "y" * MAX_WHY_CHARS


def test_an_agent_cannot_ask_on_a_finished_operation_without_an_open_request() -> None:
    """Finished and closed: nothing to extend; one line, nothing changed."""
    op = _budget()
    op.decide("abandon")
    with unchanged(op), pytest.raises(UsageError, match="nothing to extend"):
        _ask(op)


def test_an_agents_proposal_beyond_the_ceiling_is_refused() -> None:
    """An agent proposes no more than a person could grant."""
    op = _running()
    with unchanged(op), pytest.raises(UsageError, match="ceiling"):
        _ask(op, minutes=11)
    with unchanged(op), pytest.raises(UsageError, match=r"reason \(.why.\) is required"):
        _ask(op, why=" ")


# --- decision timeout -----------------------------------------------------------


def test_an_unanswered_request_closes_as_decision_timeout_through_escalations() -> None:
    """Listed while open; past its due time, escalations() closes it as
    decision_timeout (outcome stays, the first reason kept in the error) and lists
    nothing."""
    op = stopped(RUNNING, max_requests=1, decision_timeout_s=3600)
    assert [e.reason for e in waitbound.escalations(store=op.store, clock=op.clock)] == [
        Reason.REQUEST_BUDGET_EXHAUSTED
    ]
    op.clock.advance(3600)
    assert waitbound.escalations(store=op.store, clock=op.clock) == []
    record = op.record
    assert record.outcome is OutcomeKind.ESCALATED
    assert record.reason is Reason.DECISION_TIMEOUT
    assert record.decision_request is None
    assert isinstance(record.error, dict)
    assert record.error["reason"] == "request_budget_exhausted"
    assert [(d.option, d.by) for d in record.decisions] == [("decision_timeout", "waitbound")]
    event = decided_event(op)
    assert event.data["option"] == "decision_timeout"
    assert event.data["stopped_because"] == "request_budget_exhausted"
    refused(op, DecisionConflictError, "decision_timeout", "extend")


def test_expire_closes_a_request_only_once_it_is_due() -> None:
    """expire(): None before the due time; at it, a decision_timeout decision; a
    running operation's agent request closes and the operation goes on."""
    op = _budget()
    request = op.record.decision_request
    assert request is not None
    assert expire(op.record, request.due_at - timedelta(seconds=1)) is None
    closed = expire(op.record, request.due_at)
    assert closed is not None
    assert closed[0].reason is Reason.DECISION_TIMEOUT
    assert closed[1].kind == "decided"

    running = _running()
    _ask(running)
    request = running.record.decision_request
    assert request is not None
    closed = expire(running.record, request.due_at)
    assert closed is not None
    assert closed[0].outcome is None
    assert closed[0].reason is None
    assert closed[0].decision_request is None


# --- the business deadline ------------------------------------------------------


def test_the_business_deadline_stops_waiting_though_the_provider_deadline_is_later() -> None:
    """business_deadline_s 10 < deadline_s 600: timed_out with
    business_deadline_exceeded, no request after it, and only abandon offered."""
    op = stopped(RUNNING, deadline_s=600, business_deadline_s=10)
    record = op.record
    assert record.outcome is OutcomeKind.TIMED_OUT
    assert record.reason is Reason.BUSINESS_DEADLINE_EXCEEDED
    assert record.business_deadline_at is not None
    assert record.deadline_at > record.business_deadline_at
    assert all(at < record.business_deadline_at for at in op.sent_at())
    assert record.to_outcome().options == ("abandon",)
    refused(op, UsageError, "not open", "extend", minutes=1, checks=1)


def test_a_grant_never_reaches_past_the_business_deadline() -> None:
    """A budget stop before the business deadline; a grant longer than what is left
    still stops at the business deadline, with no request after it."""
    every_10s: Answer = (200, {"status": "running"}, {"Retry-After": "10"})
    op = stopped(
        every_10s, deadline_s=600, business_deadline_s=25, max_requests=2, hint_jitter=0,
        max_delay_s=60,
    )  # fmt: skip
    business = op.record.business_deadline_at
    assert op.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert business is not None
    assert op.clock.now() < business
    op.decide("extend", minutes=10, checks=2)
    assert op.record.stop_at == business
    outcome = op.resume(every_10s)
    # The grant's checks are spread over what is left before the business deadline
    # (issue 33's plan): the wait ends by it or by the granted checks, never after it.
    assert outcome.reason in (Reason.BUSINESS_DEADLINE_EXCEEDED, Reason.REQUEST_BUDGET_EXHAUSTED)
    assert all(at < business for at in op.sent_at())
    if outcome.reason is Reason.BUSINESS_DEADLINE_EXCEEDED:
        assert op.record.to_outcome().options == ("abandon",)


# --- bad input: one clear line, nothing changed -------------------------------------


@pytest.mark.parametrize(
    ("option", "kwargs", "match"),
    [
        ("mark_succeeded", {}, "not open on operation op-1 \\(request_budget_exhausted\\)"),
        ("sing", {}, "'sing' is not open"),
        ("extend", {"minutes": 11}, "beyond the ceiling of 10 minutes .*at most 10 minutes"),
        ("extend", {"minutes": 0}, "positive number"),
        ("extend", {"minutes": float("nan")}, "positive number"),
        ("extend", {"checks": 0}, "from 1 to 3"),
        ("extend", {"checks": 4}, "from 1 to 3"),
        ("extend", {"checks": True}, "from 1 to 3"),
        ("extend", {"why": ""}, r"reason \(.why.\) is required"),
        ("extend", {"why": "   "}, r"reason \(.why.\) is required"),
        ("extend", {"why": "two\nlines"}, "one line"),
        ("extend", {"by": " "}, "'by' must name"),
    ],
)
def test_bad_decisions_are_refused_in_one_line_and_change_nothing(
    option: str, kwargs: dict[str, Any], match: str
) -> None:
    """An option the reason does not offer, a grant beyond the ceilings, a blank why:
    one UsageError line; the record's version and the audit log stay."""
    refused(_budget(), UsageError, match, option, **kwargs)


def test_a_decision_on_a_running_operation_is_refused() -> None:
    """No agent request open: nothing to decide."""
    op = _running()
    refused(op, UsageError, "no open decision request \\(still waiting\\)", "extend")


def test_a_decision_on_an_unknown_operation_is_refused() -> None:
    """An unknown id: OperationNotFoundError, one line."""
    store = MemoryStore()
    with pytest.raises(OperationNotFoundError, match="'nope'") as info:
        waitbound.decide("nope", "extend", why="x", store=store, clock=FakeClock())
    assert "\n" not in str(info.value)


# --- the escalation message ---------------------------------------------------------


def test_the_escalation_message_has_the_issues_shape_and_no_secret() -> None:
    """Budget spent after 12 checks 218 s apart (the last kept late): the message's
    lines, in order, say everything needed to decide; the credential is nowhere in it,
    the events or the record."""
    every_218s: Answer = (
        200,
        {"status": "running", "id": "exp_71c", "can_cancel": True},
        {"Retry-After": "218"},
    )
    op = stopped(
        every_218s,
        operation_id="report-export-2025-04-18-01",
        headers={"Authorization": f"Bearer {SECRET}"},
        max_requests=12,
        deadline_s=2700,
        hint_jitter=0,
        max_delay_s=600,
        backoff_growth=1.0,  # the 218 s hint is the plan's step too: followed every time
    )
    record = op.record
    assert record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    message = escalation_message(record, op.clock.now())
    assert message.splitlines() == [
        "External job needs a decision",
        "Operation: report-export-2025-04-18-01",
        "Source: inline profile, http://provider.test/status",
        "Provider job: exp_71c",
        "Last state: running",
        "Elapsed time: 43 minutes",  # the last request is kept late (issue 33's plan)
        "Status requests: 12 of 12",
        "Last HTTP result: 200 at 12:43 UTC",
        "Stopped because: request_budget_exhausted",
        "Safe options: extend waiting once by at least 15 minutes with 4 more checks, cancel at "
        "provider: 1 cancel request plus 4 more checks within at least 15 minutes, abandon it "
        "(the outcome stays as it is)",
        "Decide by: 2026-01-08 12:43 UTC",
    ]
    (listed,) = waitbound.escalations(store=op.store, clock=op.clock)
    assert listed.message == message
    assert [o for o, _ in listed.options] == ["extend", "cancel", "abandon"]
    op.decide("extend", minutes=15, checks=4)
    stored = [canonical_json(op.record.to_json()), message, canonical_json(listed.as_json())]
    stored += [e.summary + canonical_json(e.data) for e in op.events()]
    assert not [text for text in stored if SECRET in text]


# --- old records, new parts -------------------------------------------------------

NEW_FIELDS = (
    "business_deadline_at",
    "stopped_phase",
    "grants",
    "decision_request",
    "decisions",
    "decided_by",
    "credential_label",
)
NEW_POLICY = ("business_deadline_s", "max_extensions", "max_extension_s", "decision_timeout_s")


def test_records_written_before_decisions_existed_still_load() -> None:
    """A stored record without the decision fields (and a policy without their limits)
    loads with the defaults: no grants, no request, nothing decided."""
    op = _budget()
    data = op.record.to_json()
    for name in NEW_FIELDS:
        data.pop(name)
    policy = data["policy"]
    assert isinstance(policy, dict)
    for name in NEW_POLICY:
        policy.pop(name)
    old = decode_record(canonical_json(data))
    assert old.grants == Grants()
    assert old.decision_request is None
    assert old.decisions == ()
    assert old.stopped_phase is None
    assert old.business_deadline_at is None
    assert old.policy.max_extensions == 3
    assert old.to_outcome().options == ()
    assert old.max_requests == old.policy.max_requests


def test_the_new_parts_survive_the_store_as_they_were() -> None:
    """Grants (with a pending state), an open request with an agent's proposal, and
    decisions with their detail round-trip through the stored JSON unchanged."""
    op = stopped((200, {"status": "odd"}), max_requests=5)
    op.decide("treat_as_pending", minutes=1, checks=2)
    op.resume((200, {"status": "odder"}))
    _ask(op, minutes=1, checks=1)
    record = op.record
    assert record.grants.pending_states == ("odd",)
    assert record.decision_request is not None
    assert record.decision_request.requested_by == "agent:mcp"
    again = decode_record(encode_record(record))
    assert again == record
    assert again.stopped_phase is Phase.WAITING
    assert isinstance(again.decision_request, waitbound.DecisionRequest)
    assert isinstance(again.decisions[0], waitbound.Decision)
    assert again.decisions[0].at == record.decisions[0].at


# --- where a decision resumes: the phase each stop path stopped in -------------------


def test_a_stop_before_the_submission_was_answered_offers_no_resuming_option() -> None:
    """Stopped while submitting (the body is never stored): only closing options."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/v1/jobs": [(503, None)]})
    op = Op(store=MemoryStore(), clock=clock, provider=provider, id="op-s")
    submit(
        Submission(
            method="POST",
            url="http://provider.test/v1/jobs",
            profile=parse_profile(TABLE),
            policy=Policy(max_transport_failures=0),
            body=b"{}",
        ),
        operation_id=op.id,
        store=op.store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
    )
    assert op.record.outcome is OutcomeKind.ESCALATED
    assert op.record.stopped_phase is Phase.SUBMITTING
    assert op.record.to_outcome().options == ("abandon",)
    refused(op, UsageError, "not open", "extend")


def test_extend_in_the_result_phase_fetches_the_result_and_keeps_the_providers_error() -> None:
    """Regression: the budget ran out after a partial success, before its result was
    fetched. extend resumes fetching the result (once), and the provider's error seen
    with the partial success is still the outcome's error."""
    partial: Answer = (200, {"status": "partial", "error": "3 rows rejected"})
    op = stopped(partial, result_url=RESULT_URL, max_requests=1)
    assert op.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert op.record.stopped_phase is Phase.FETCHING_RESULT
    op.decide("extend", minutes=1, checks=1)
    assert op.record.phase is Phase.FETCHING_RESULT
    outcome = op.resume()
    assert outcome.outcome is OutcomeKind.COMPLETED_WITH_ERRORS
    assert outcome.result == {"rows": 3}
    assert outcome.error == "3 rows rejected"
    assert op.provider.count("/result") == 1


def test_extend_in_the_errors_phase_fetches_the_errors_page() -> None:
    """The budget ran out before the errors page of a partial success: extend fetches it."""
    partial: Answer = (200, {"status": "partial", "output": 1, "errors_url": "/errors"})
    errors: Answer = (200, {"errors": [{"row": 7}]})
    op = stopped(partial, script={"/errors": [errors]}, max_requests=1)
    assert op.record.stopped_phase is Phase.FETCHING_ERRORS
    op.decide("extend", minutes=1, checks=1)
    outcome = op.resume()
    assert outcome.outcome is OutcomeKind.COMPLETED_WITH_ERRORS
    assert outcome.errors is not None
    assert op.provider.count("/errors") == 1


def test_extend_after_a_cancel_at_the_deadline_polls_the_status_again() -> None:
    """cancel_on_deadline: the cancel was sent at the deadline, then timed_out; extend
    goes back to polling (no second cancel)."""
    cancelable: Answer = (200, {"status": "running", "can_cancel": True})
    op = stopped(cancelable, cancel_on_deadline=True, deadline_s=5, max_extension_s=600)
    assert op.record.reason is Reason.DEADLINE_EXCEEDED
    assert op.provider.count("/status/cancel") == 1
    assert op.record.stopped_phase is Phase.WAITING
    op.decide("extend", minutes=1, checks=2)
    outcome = op.resume((200, {"status": "canceled"}))
    assert outcome.outcome is OutcomeKind.CANCELED
    assert op.provider.count("/status/cancel") == 1


# --- the audit event of a decision ------------------------------------------------


def test_the_decided_event_carries_the_standard_story_fields_after_the_decision() -> None:
    """The decided event's standard fields describe the record after the decision, and
    every detail (limits, grant) is there under its own key."""
    op = _budget()
    op.decide("extend", minutes=2, checks=3)
    event = decided_event(op)
    record = op.record
    assert set(event.data) >= STANDARD_KEYS
    assert event.data["phase"] == "waiting"
    assert event.data["requests_used"] == record.requests_used
    assert event.data["max_requests"] == record.max_requests
    assert event.data["next_poll_at"] == record.next_poll_at.isoformat()
    assert event.data["delay_source"] == "manual_extension"
    assert {"option", "by", "why", "grant", "limits_before", "limits_after"} <= set(event.data)
    assert record.decisions[-1].detail["limits_after"] == event.data["limits_after"]


# --- a worker picks up a reopened operation ----------------------------------------


def test_a_worker_continues_an_operation_it_stopped_once_a_person_extends_it() -> None:
    """Regression: a worker's step that stops an operation keeps its claim's lease on
    the record; a decision made within that lease must still let a worker take the
    reopened operation at once, not when the old lease ends 30 s later (virtual time
    that moves only when the worker is idle)."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/status": [RUNNING]})
    op = Op(store=MemoryStore(), clock=clock, provider=provider, id="op-w")
    waitbound.start(
        Operation(status_url=URL, profile=parse_profile(TABLE), policy=Policy(max_requests=1)),
        operation_id=op.id,
        store=op.store,
        clock=clock,
    )
    settings = waitbound.WorkerSettings(until_idle=True, lease_s=30, idle_s=0.01)
    work_virtually(op.store, clock, provider, settings=settings)
    assert op.record.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    op.decide("extend", minutes=0.25, checks=1)
    decided_at = clock.now()
    planned = op.record.next_poll_at  # the grant's one check, late in its 15 s (issue 33)
    assert planned - decided_at == timedelta(seconds=12.5)
    provider.script["/status"] = [DONE]
    work_virtually(op.store, clock, provider, settings=settings)
    assert op.record.outcome is OutcomeKind.SUCCEEDED
    assert provider.count("/status") == 2
    assert provider.requests[-1][1] - planned < timedelta(seconds=5)  # not the old lease's 30 s


# --- async ---------------------------------------------------------------------------


def test_the_async_api_decides_lists_and_asks_like_the_sync_one() -> None:
    """escalations_async, request_extension_async and decide_async."""
    op = _running()

    async def main() -> Outcome:
        await waitbound.request_extension_async(
            op.id, minutes=1, checks=1, why="slow", by="agent:x", store=op.store, clock=op.clock
        )
        listed = await waitbound.escalations_async(store=op.store, clock=op.clock)
        assert [e.operation_id for e in listed] == [op.id]
        return await waitbound.decide_async(
            op.id, "decline", why="no", by="ana", store=op.store, clock=op.clock
        )

    assert anyio.run(main).outcome is None
    assert [d.option for d in op.record.decisions] == ["decline"]


# --- the property: grants bound everything ------------------------------------------

_ANSWERS = st.sampled_from(
    [
        RUNNING,
        RUNNING,
        DONE,
        (503, None),
        (429, None),
        (200, {"status": "odd"}),
        (200, {"status": "strange"}),
        (200, {"status": "failed"}),
    ]
)
_ACTIONS = st.tuples(
    st.sampled_from(["extend", "extend", "treat_as_pending", "abandon"]),
    st.sampled_from([0.5, 1.0, 2.0]),  # minutes
    st.integers(1, 4),  # checks
    st.sampled_from([0.0, 3.0, 90.0]),  # seconds a person takes to decide
    st.lists(_ANSWERS, min_size=1, max_size=6),  # what the provider answers afterwards
)


@settings(
    max_examples=examples(150),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    first=st.lists(_ANSWERS, min_size=1, max_size=6),
    actions=st.lists(_ACTIONS, min_size=1, max_size=4),
    max_requests=st.integers(1, 4),
)
def test_no_sequence_of_answers_and_decisions_escapes_the_grants(
    first: list[Answer],
    actions: list[tuple[str, float, int, float, list[Answer]]],
    max_requests: int,
) -> None:
    """However the provider answers and people decide: at most the original budget plus
    the checks granted are sent, never after the deadline in force (the original one,
    then each decided event's), and every stop ends with exactly one outcome."""
    op = stopped(
        *first,
        max_requests=max_requests,
        deadline_s=30,
        max_extension_s=120,
        max_transport_failures=1,
        max_rate_limited=1,
    )
    deadlines = [op.record.deadline_at]
    boundaries = [0]  # requests sent before each deadline came into force
    granted, stops = 0, 1
    for option, minutes, asked_checks, pause_s, answers in actions:
        record = op.record
        assert record.is_finished
        op.clock.advance(pause_s)
        if option not in record.to_outcome().options:
            continue
        checks = min(asked_checks, max_requests)  # a grant is at most the policy's budget
        grant = {"minutes": minutes, "checks": checks} if option != "abandon" else {}
        op.decide(option, **grant)
        if option == "abandon":
            continue
        granted += checks
        boundaries.append(len(op.provider.requests))
        after = decided_event(op).data["limits_after"]
        assert isinstance(after, dict)
        deadlines.append(datetime.fromisoformat(str(after["deadline_at"])))
        # the grant's deadline, or the one in force when that was later: never earlier
        assert deadlines[-1] == max(deadlines[-2], op.clock.now() + timedelta(minutes=minutes))
        assert op.resume(*answers).outcome is not None
        stops += 1

    times = op.sent_at()
    assert len(times) <= max_requests + granted
    assert op.record.requests_used == len(times)
    for deadline, start, end in zip(
        deadlines, boundaries, [*boundaries[1:], len(times)], strict=True
    ):
        assert all(at <= deadline for at in times[start:end])
    assert not times or max(times) <= deadlines[-1]
    assert [e.kind for e in op.events()].count("finished") == stops
    assert op.record.is_finished


def test_a_decision_after_the_due_time_closes_the_request_instead() -> None:
    """Too late is too late: a decision arriving after the request's due time (before
    any listing closed it) closes it as decision_timeout and is refused, naming that."""
    op = stopped(RUNNING, max_requests=1, decision_timeout_s=3600)
    op.clock.advance(3600)
    with pytest.raises(waitbound.DecisionConflictError, match="decision_timeout"):
        op.decide("extend", minutes=1, checks=1)
    record = op.record
    assert record.reason is Reason.DECISION_TIMEOUT
    assert record.decision_request is None
    assert [d.option for d in record.decisions] == ["decision_timeout"]


def test_the_default_grant_fits_a_short_deadline() -> None:
    """A deadline of seconds: the offered extend, taken with its defaults, is within
    the ceiling (a fraction of a minute), and its cost says so in seconds."""
    op = stopped(RUNNING, max_requests=1, deadline_s=20, max_extension_s=20)
    (cost_text,) = [c for o, c in waitbound.option_costs(op.record) if o == "extend"]
    assert "20 seconds" in cost_text
    assert op.decide("extend").outcome is None


@pytest.mark.parametrize(
    ("option", "kwargs", "words"),
    [
        ("abandon", {"minutes": 5}, "minutes and checks do not apply"),
        ("abandon", {"checks": 2}, "minutes and checks do not apply"),
        ("extend", {"credential_label": "bot-2"}, "credential label applies only"),
    ],
)
def test_what_an_option_would_ignore_is_refused(
    option: str, kwargs: dict[str, Any], words: str
) -> None:
    """A grant for an option that resumes nothing, a label for another option: refused,
    not silently dropped."""
    op = stopped(RUNNING, max_requests=1)
    refused(op, UsageError, words, option, **kwargs)


def test_a_closed_option_says_why_it_is_closed() -> None:
    """After the last grant, extend is refused naming max_extensions; after abandon,
    the outcome's message no longer asks for a decision."""
    op = stopped(RUNNING, max_requests=1, max_extensions=0)
    refused(op, UsageError, "max_extensions", "extend")
    op.decide("abandon")
    message = op.record.to_outcome().message
    assert "No decision is open" in message
    assert "must decide" not in message


def test_a_request_filed_while_a_poll_is_in_flight_loses_no_answer() -> None:
    """An agent's request (a write by another process) lands while a status request is
    out: the answer is applied to the fresh record, never "lost" (the lease and the
    reservation are still the poller's), and the operation goes on to its outcome."""
    clock = FakeClock()
    store = MemoryStore()
    answers = iter([(200, "running"), (200, "running"), (200, "done")])

    def provider(request: httpx.Request) -> httpx.Response:
        code, state = next(answers)
        body = {"status": state, "id": "job-1"}
        record = store.get("op-race")
        if state == "running" and record is not None and record.decision_request is None:
            waitbound.request_extension(
                "op-race", minutes=1, checks=1, why="slow today", by="agent:t",
                store=store, clock=clock,
            )  # fmt: skip
        return httpx.Response(code, json=body)

    operation = Operation(
        status_url="http://provider.test/status",
        profile=parse_profile(TABLE),
        policy=Policy(base_delay_s=1, max_delay_s=2, max_requests=10),
    )
    outcome = wait(
        operation, operation_id="op-race", store=store, clock=clock, sleep=clock.sleep,
        rng=random.Random(1), client=httpx.Client(transport=httpx.MockTransport(provider)),
    )  # fmt: skip
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    kinds = [e.event.kind for e in store.audit("op-race")]
    assert "answer_lost" not in kinds
    assert kinds.count("observed") == 3
    assert "extension_requested" in kinds


def test_the_escalation_message_is_bounded_whatever_the_provider_says() -> None:
    """A 900 KB state and a 300 KB job id: the message shows each cut to a line."""
    op = stopped((200, {"status": "running", "id": "j" * 300_000}), max_requests=1)
    op.store.save(
        op.record.evolve(answer=op.record.answer.evolve(provider_state="x" * 900_000)), []
    )
    message = waitbound.escalations(store=op.store, clock=op.clock)[0].message
    assert len(message) < 2_000
    assert "Last state: xxx" in message
