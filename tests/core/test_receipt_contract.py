"""Receipts and status answers read as their contracts say (issue 34): job identity,
next_action deciding, the terminal receipt for every ending, ``cancelable`` obeyed, ids
and request ids kept, partial results with their shape, a cancel the deadline can
confirm, and the counts an escalation message states. Each test runs the real wait
loop against a scripted provider on virtual time."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest

from tests.fakes import START, Answer, FakeClock, ScriptedProvider
from waitbound import (
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    Reason,
    Submission,
    UsageError,
    cancel,
    escalations,
    parse_profile,
    run,
    submit,
    wait,
)
from waitbound.profiles import builtin_profile

BASE = "http://provider.test"
URL = f"{BASE}/status"

TABLE: dict[str, Any] = {
    "state": "status",
    "pending": ["running"],
    "succeeded": ["done"],
    "canceled": ["canceled"],
    "cancelable": "cancelable",
    "cancel": {"url_template": "{status_url}/cancel", "always": True},
}


class CancelAware(ScriptedProvider):
    """A scripted provider whose status answers say ``canceled`` once a cancel arrived
    (a provider that confirms the cancel at its next status answer)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/status" and self.count("/status/cancel"):
            self.requests.append((request.url.path, self.clock.now()))
            return httpx.Response(200, json={"status": "canceled"})
        return super().__call__(request)


def _wait(
    provider: ScriptedProvider,
    clock: FakeClock,
    *,
    table: Mapping[str, Any] = TABLE,
    store: MemoryStore | None = None,
    operation_id: str = "op-34",
    cancel_on_deadline: bool = False,
    result_url: str | None = None,
    **policy: Any,
) -> Any:
    return wait(
        Operation(
            status_url=URL,
            profile=parse_profile(dict(table)),
            policy=Policy(**{"base_delay_s": 1.0, "max_delay_s": 2.0, **policy}),
            cancel_on_deadline=cancel_on_deadline,
            result_url=result_url,
        ),
        operation_id=operation_id,
        store=store if store is not None else MemoryStore(),
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(5),
    )


def _script(status: Sequence[Answer], **more: Sequence[Answer]) -> dict[str, list[Answer]]:
    return {"/status": list(status), **{k: list(v) for k, v in more.items()}}


# --- 4. cancelable read and obeyed ------------------------------------------------


def test_cancelable_false_is_obeyed_by_options_cancel_and_cancel_on_deadline() -> None:
    """The last answer said ``cancelable: false``: even under a profile that declares the
    job always cancelable, the options offer no ``cancel``, ``waitbound cancel`` is
    refused before sending anything, and ``--cancel-on-deadline`` sends none."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock, _script([(200, {"status": "running", "cancelable": False})],
                       **{"/status/cancel": [(202, {})]}),
    )  # fmt: skip
    store = MemoryStore()
    outcome = _wait(provider, clock, store=store, cancel_on_deadline=True, deadline_s=20,
                    max_requests=20)  # fmt: skip
    # A budget that covers the 20 s (20 requests at most 2 s apart), so the wait reaches
    # its deadline with requests left: the very moment --cancel-on-deadline would have
    # sent its cancel. (With 3 requests the plan spread them over the 20 s and the last
    # answer spent the budget just before the deadline: request_budget_exhausted.)
    assert outcome.reason is Reason.DEADLINE_EXCEEDED
    assert provider.count("/status/cancel") == 0
    assert "cancel" not in outcome.options
    (listed,) = escalations(store=store, clock=clock)
    assert "cancel" not in [name for name, _ in listed.options]
    with pytest.raises(UsageError, match="cancelable false"):
        cancel("op-34", store=store, client=provider.client(), clock=clock, sleep=clock.sleep)
    assert provider.count("/status/cancel") == 0


def test_cancelable_absent_under_always_still_allows_the_cancel() -> None:
    """An answer that says nothing about ``cancelable`` leaves ``cancel.always`` in force."""
    clock = FakeClock()
    provider = ScriptedProvider(clock, _script([(200, {"status": "running"})]))
    outcome = _wait(provider, clock, max_requests=2)
    assert "cancel" in outcome.options


# --- 7. a cancel the deadline can confirm -------------------------------------------


def test_cancel_on_deadline_is_sent_early_enough_to_be_confirmed_canceled() -> None:
    """``--cancel-on-deadline`` sends its cancel before the deadline, with time and a
    request kept for one status look: a provider that confirms it is ``canceled``, and
    no request is sent at or after the deadline."""
    clock = FakeClock()
    provider = CancelAware(
        clock, _script([(200, {"status": "running"})], **{"/status/cancel": [(202, {})]}),
        latency_s=0.25,
    )  # fmt: skip
    outcome = _wait(provider, clock, cancel_on_deadline=True, deadline_s=40)
    assert outcome.outcome is OutcomeKind.CANCELED
    sent = [(path, (at - START).total_seconds()) for path, at in provider.requests]
    cancels = [t for path, t in sent if path == "/status/cancel"]
    assert len(cancels) == 1
    assert cancels[0] >= 40 - 20 - 1e-6  # 2 request slots of 10 s before the deadline
    assert [p for p, t in sent if t > cancels[0]] == ["/status"]
    assert max(t for _, t in sent) < 40


def test_cancel_on_deadline_keeps_two_requests_for_the_cancel_and_its_look() -> None:
    """Status polls never spend the last two requests while the deadline cancel is
    still to be sent: the cancel and the look that confirms it get them."""
    clock = FakeClock()
    provider = CancelAware(
        clock, _script([(200, {"status": "running"})], **{"/status/cancel": [(202, {})]})
    )
    outcome = _wait(provider, clock, cancel_on_deadline=True, deadline_s=60, max_requests=4)
    assert outcome.outcome is OutcomeKind.CANCELED
    paths = [p for p, _ in provider.requests]
    # How many status polls come first is the plan's (it spreads them over the time
    # before the cancel); the last two requests are always the cancel and its look.
    assert 1 <= paths.count("/status") - 1 <= 2
    assert len(paths) <= 4
    assert paths[-2:] == ["/status/cancel", "/status"]
    assert set(paths[:-2]) == {"/status"}


def test_a_refused_deadline_cancel_ends_timed_out_saying_so() -> None:
    """A deadline cancel the provider refuses is stated; the outcome stays timed_out."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock, _script([(200, {"status": "running"})], **{"/status/cancel": [(409, {})]})
    )
    outcome = _wait(provider, clock, cancel_on_deadline=True, deadline_s=40)
    assert outcome.outcome is OutcomeKind.TIMED_OUT
    assert "cancel requested before the deadline (HTTP 409): not accepted" in str(outcome.error)


def test_a_refused_deadline_cancel_whose_look_shows_the_end_keeps_that_end() -> None:
    """The deadline cancel is refused because the job just ended: the look kept for it
    shows the end, which is the outcome (never timed_out for a finished job)."""

    class EndedMeanwhile(ScriptedProvider):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.url.path == "/status" and self.count("/status/cancel"):
                self.requests.append((request.url.path, self.clock.now()))
                return httpx.Response(200, json={"status": "done"})
            return super().__call__(request)

    clock = FakeClock()
    provider = EndedMeanwhile(
        clock, _script([(200, {"status": "running"})], **{"/status/cancel": [(409, {})]})
    )
    outcome = _wait(provider, clock, cancel_on_deadline=True, deadline_s=40)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert provider.count("/status/cancel") == 1


# --- 8. the deadline in every request's events; the counts apart ---------------------


def test_request_events_carry_the_deadline_and_the_message_counts_status_apart() -> None:
    """Every ``reserved`` and ``observed`` event names the deadline; after a submission,
    the escalation message's status count matches ``status_requests_used`` and the
    submit request is counted apart."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {
            "/jobs": [(202, {"id": "j1", "status_url": f"{BASE}/status"})],
            "/status": [(200, {"status": "running"})],
        },
    )
    store = MemoryStore()
    profile = parse_profile({**TABLE, "submit": {"status_url": "status_url"}})
    outcome = run(
        Submission(method="POST", url=f"{BASE}/jobs", profile=profile,
                   policy=Policy(max_requests=3, base_delay_s=1)),
        store=store, client=provider.client(), clock=clock, sleep=clock.sleep,
        rng=random.Random(1),
    )  # fmt: skip
    assert outcome.status_requests_used == 2
    events = [e.event for e in store.audit(outcome.operation_id)]
    per_request = [e for e in events if e.kind in ("reserved", "observed")]
    assert len(per_request) == 6
    record = store.get(outcome.operation_id)
    assert record is not None
    deadline = record.deadline_at.isoformat()
    assert all(e.data.get("deadline_at") == deadline for e in per_request)
    (listed,) = escalations(store=store, clock=clock)
    assert "Status requests: 2 of 3" in listed.message
    assert "All requests: 3 of 3 (2 status, 1 submit)" in listed.message


def test_next_action_profile_names_cancelable() -> None:
    """The built-in next-action profile reads ``cancelable``."""
    profile = builtin_profile("next-action")
    assert profile.read({"status": "running", "cancelable": False}).cancelable is False


# --- 5. ids kept -------------------------------------------------------------------

NEXT_ACTION_RECEIPT = {
    "id": "run_42",
    "status": "queued",
    "next_action": "poll_status",
    "status_url": f"{BASE}/status",
    "result_url": f"{BASE}/result",
    "cancel_url": f"{BASE}/cancel",
    "request_id": "req_receipt",
}


def _run_next_action(
    script: Mapping[str, Sequence[Answer]], *, store: MemoryStore | None = None, **policy: Any
) -> Any:
    clock = FakeClock()
    provider = ScriptedProvider(clock, {"/jobs": [(201, NEXT_ACTION_RECEIPT)], **script})
    store = store if store is not None else MemoryStore()
    outcome = run(
        Submission(method="POST", url=f"{BASE}/jobs", profile=builtin_profile("next-action"),
                   policy=Policy(**{"base_delay_s": 1.0, "max_delay_s": 2.0, **policy})),
        store=store, client=provider.client(), clock=clock, sleep=clock.sleep,
        rng=random.Random(2),
    )  # fmt: skip
    return outcome, provider, store


def test_next_action_timeout_returns_the_runs_id() -> None:
    """The next-action profile reads the run's ``id`` as the job id: a timeout returns it."""
    outcome, _, _ = _run_next_action(
        {"/status": [(200, {"id": "run_42", "status": "running", "next_action": "poll_status"})]},
        deadline_s=6,
    )
    assert outcome.outcome is OutcomeKind.TIMED_OUT
    assert outcome.job_id == "run_42"


def test_next_action_with_a_webhook_is_not_refused_for_want_of_a_job_id() -> None:
    """``run --profile next-action --webhook …``: the operation learns the job id."""
    store = MemoryStore()
    clock = FakeClock()
    submission = Submission(method="POST", url=f"{BASE}/jobs", webhook="hooks",
                            profile=builtin_profile("next-action"))  # fmt: skip
    provider = ScriptedProvider(clock, {"/jobs": [(201, NEXT_ACTION_RECEIPT)]})
    handle = submit(submission, store=store, client=provider.client(), clock=clock)
    record = store.get(handle.operation_id)
    assert record is not None
    assert record.job_id == "run_42"


def test_a_request_id_in_a_body_is_kept_in_the_outcome_and_the_story() -> None:
    """A ``request_id`` in the receipt, status or result body (the profile's
    ``request_id``) is kept like a request-id header: on the outcome and in the story."""
    outcome, _, store = _run_next_action(
        {
            "/status": [(200, {"id": "run_42", "status": "completed", "next_action": "none",
                               "request_id": "req_status"})],
            "/result": [(200, {"output": "ok", "output_error": None, "usage": {"credits": 3},
                               "request_id": "req_result"})],
        }
    )  # fmt: skip
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert outcome.request_id == "req_result"
    story = [e.event.summary for e in store.audit(outcome.operation_id)]
    for request_id in ("req_receipt", "req_status", "req_result"):
        assert any(f"[request id {request_id}]" in line for line in story), request_id


# --- 1. job identity -----------------------------------------------------------------

IDENTIFIED: dict[str, Any] = {
    "state": "status",
    "pending": ["running"],
    "succeeded": ["succeeded"],
    "job_id": "job_id",
    "result": "output",
    "result_job_id": "job_id",
}


def _mismatch_events(store: MemoryStore, operation_id: str) -> list[dict[str, Any]]:
    return [
        dict(e.event.data["job_mismatch"])  # type: ignore[arg-type]
        for e in store.audit(operation_id)
        if "job_mismatch" in e.event.data
    ]


def test_another_jobs_success_in_a_status_answer_is_never_this_ones() -> None:
    """exp_71c is running, then the status URL answers about exp_OTHER succeeding: that
    is no evidence for exp_71c; re-checked within the confirmation window, then
    ``contradiction``, the mismatch and both ids in the audit."""
    clock = FakeClock()
    other = {"job_id": "exp_OTHER", "status": "succeeded", "output": {"rows": 9}}
    provider = ScriptedProvider(
        clock, _script([(200, {"job_id": "exp_71c", "status": "running"}), (200, other)])
    )
    store = MemoryStore()
    outcome = _wait(provider, clock, table=IDENTIFIED, store=store)
    assert outcome.outcome is OutcomeKind.ESCALATED
    assert outcome.reason is Reason.CONTRADICTION
    assert outcome.result is None
    assert outcome.job_id == "exp_71c"
    assert "exp_OTHER" in str(outcome.error)
    assert "exp_71c" in str(outcome.error)
    mismatches = _mismatch_events(store, "op-34")
    assert mismatches
    assert all(m == {"expected": "exp_71c", "named": "exp_OTHER"} for m in mismatches)
    assert provider.count("/status") == 2 + 2  # two confirmation re-checks


def test_a_foreign_answer_followed_by_this_jobs_answer_is_forgotten() -> None:
    """One stray answer about another job, then this job's success: succeeded."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        _script([
            (200, {"job_id": "exp_71c", "status": "running"}),
            (200, {"job_id": "exp_OTHER", "status": "succeeded", "output": 1}),
            (200, {"job_id": "exp_71c", "status": "succeeded", "output": 2}),
        ]),
    )  # fmt: skip
    outcome = _wait(provider, clock, table=IDENTIFIED)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert outcome.result == 2


def test_a_status_answer_about_another_job_than_the_receipt_named() -> None:
    """The receipt names job k1; the status answers about k2 succeeding: contradiction."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {
            "/jobs": [(202, {"job_id": "k1", "status_url": f"{BASE}/status"})],
            "/status": [(200, {"job_id": "k2", "status": "succeeded", "output": "x"})],
        },
    )
    store = MemoryStore()
    profile = parse_profile({**IDENTIFIED, "submit": {"status_url": "status_url"}})
    outcome = run(
        Submission(method="POST", url=f"{BASE}/jobs", profile=profile,
                   policy=Policy(base_delay_s=1)),
        store=store, client=provider.client(), clock=clock, sleep=clock.sleep,
        rng=random.Random(1),
    )  # fmt: skip
    assert outcome.reason is Reason.CONTRADICTION
    assert outcome.job_id == "k1"
    assert _mismatch_events(store, outcome.operation_id)[0] == {"expected": "k1", "named": "k2"}


def test_a_first_answer_about_another_job_than_the_caller_named_is_no_evidence() -> None:
    """The caller knows its job (``Operation(job_id=…)``); a first status answer (the
    receipt the caller hands over) about another job that failed is not this job's
    failure: contradiction after the window, never ``failed``."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock, _script([(200, {"job_id": "mine-9", "status": "failed", "error": "E"})])
    )
    store = MemoryStore()
    outcome = wait(
        Operation(status_url=URL, job_id="mine-1",
                  profile=parse_profile({**IDENTIFIED, "failed": ["failed"], "error": "error"}),
                  policy=Policy(base_delay_s=1)),
        operation_id="op-r", store=store, client=provider.client(), clock=clock,
        sleep=clock.sleep, rng=random.Random(1),
    )  # fmt: skip
    assert outcome.outcome is OutcomeKind.ESCALATED
    assert outcome.reason is Reason.CONTRADICTION
    assert _mismatch_events(store, "op-r")[-1] == {"expected": "mine-1", "named": "mine-9"}


def test_a_result_document_about_another_job_is_not_this_jobs_result() -> None:
    """The result URL answers with another job's document: asked again within the
    confirmation window, then contradiction; its output never becomes the result."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        _script(
            [(200, {"job_id": "j1", "status": "succeeded"})],
            **{"/result": [(200, {"job_id": "j2", "rows": 5})]},
        ),
    )
    store = MemoryStore()
    outcome = _wait(provider, clock, table={**IDENTIFIED, "result": "nothing"}, store=store,
                    result_url=f"{BASE}/result")  # fmt: skip
    assert outcome.reason is Reason.CONTRADICTION
    assert outcome.result is None
    assert provider.count("/result") == 3
    assert _mismatch_events(store, "op-34")[-1] == {"expected": "j1", "named": "j2"}


# --- 2. next_action decides ------------------------------------------------------------


def _na(status: str | None, action: str | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "run_42", **extra}
    if status is not None:
        body["status"] = status
    if action is not None:
        body["next_action"] = action
    return body


@pytest.mark.parametrize("status", ["processing", "completed", "failed", "queued", "whatever"])
def test_poll_status_keeps_waiting_whatever_the_status_says(status: str) -> None:
    """``poll_status`` keeps waiting, whatever the status string (``processing`` and a
    terminal-looking ``completed`` included); the run then completes."""
    outcome, _, _ = _run_next_action(
        {
            "/status": [(200, _na(status, "poll_status")), (200, _na(status, "poll_status")),
                        (200, _na("completed", "none"))],
            "/result": [(200, {"output": "ok", "usage": {"credits": 1}})],
        }
    )  # fmt: skip
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert outcome.result == {"output": "ok", "usage": {"credits": 1}}


def test_retry_later_is_skipped_and_never_resubmitted() -> None:
    """``retry_later`` is skipped (canceled, reason skipped), whatever the status."""
    outcome, provider, _ = _run_next_action(
        {"/status": [(200, _na("queued", "retry_later"))], "/result": [(409, {})]},
        max_requests=4,
    )
    assert outcome.outcome is OutcomeKind.CANCELED
    assert outcome.reason is Reason.SKIPPED
    assert provider.count("/jobs") == 1


@pytest.mark.parametrize(
    ("status", "expected"),
    [("completed", OutcomeKind.SUCCEEDED), ("failed", OutcomeKind.FAILED),
     ("canceled", OutcomeKind.CANCELED)],
)  # fmt: skip
def test_none_is_terminal_and_the_status_names_the_ending(
    status: str, expected: OutcomeKind
) -> None:
    outcome, _, _ = _run_next_action(
        {"/status": [(200, _na(status, "none"))], "/result": [(200, {"output": None})]}
    )
    assert outcome.outcome is expected


@pytest.mark.parametrize("status", ["running", None])
def test_none_with_a_status_that_names_no_ending_is_rechecked_then_contradiction(
    status: str | None,
) -> None:
    """``running:none`` is no ending: re-checked within the confirmation window (two
    more status requests), then ``contradiction`` (never unknown_state at once)."""
    outcome, provider, _ = _run_next_action({"/status": [(200, _na(status, "none"))]})
    assert outcome.outcome is OutcomeKind.ESCALATED
    assert outcome.reason is Reason.CONTRADICTION
    assert provider.count("/status") == 3
    assert "names no ending" in str(outcome.error)


def test_none_with_no_ending_then_an_ending_is_that_ending() -> None:
    """A lagging ``running:none`` confirmed by ``completed:none``: succeeded."""
    outcome, _, _ = _run_next_action(
        {
            "/status": [(200, _na("running", "none")), (200, _na("completed", "none"))],
            "/result": [(200, {"output": "ok"})],
        }
    )
    assert outcome.outcome is OutcomeKind.SUCCEEDED


def test_decided_by_is_a_key_any_profile_can_use() -> None:
    """An inline profile names its own deciding field and values."""
    table = {
        "state": "phase",
        "pending": ["busy"],
        "succeeded": ["ok"],
        "decided_by": {"field": "then", "pending": ["wait"], "terminal": ["stop"]},
    }
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        _script([(200, {"phase": "ok", "then": "wait"}), (200, {"phase": "ok", "then": "stop"})]),
    )
    outcome = _wait(provider, clock, table=table)
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert provider.count("/status") == 2


@pytest.mark.parametrize(
    ("decided_by", "problem"),
    [
        ({"pending": ["a"]}, "needs 'field'"),
        ({"field": "x"}, "needs 'terminal'"),
        ({"field": "x", "terminal": ["a"], "pending": ["a"]}, "in both"),
        ({"field": "x", "terminal": [1]}, "list of strings"),
        ({"field": "x", "terminal": ["a"], "other": []}, "unknown key"),
    ],
)
def test_a_bad_decided_by_is_refused_in_one_line(decided_by: object, problem: str) -> None:
    from waitbound import ProfileError

    with pytest.raises(ProfileError, match=problem):
        parse_profile({"state": "s", "pending": ["p"], "decided_by": decided_by})


# --- 3. the terminal receipt for every ending --------------------------------------


@pytest.mark.parametrize(
    ("status", "action", "expected", "reason"),
    [("failed", "none", OutcomeKind.FAILED, None),
     ("canceled", "none", OutcomeKind.CANCELED, None),
     ("skipped", "retry_later", OutcomeKind.CANCELED, Reason.SKIPPED)],
)  # fmt: skip
def test_the_receipt_is_fetched_once_for_every_ending(
    status: str, action: str, expected: OutcomeKind, reason: Reason | None
) -> None:
    """A failed, canceled or skipped run's full receipt is fetched once (a 409 before it
    is "not ready"): its output_error, usage and request id reach the outcome."""
    receipt = {"output": None, "output_error": {"code": "E_RUN"}, "usage": {"credits": 7},
               "request_id": "req_receipt_end"}  # fmt: skip
    outcome, provider, _ = _run_next_action(
        {"/status": [(200, _na(status, action))],
         "/result": [(409, {"error": "run_not_completed"}), (200, receipt)]}
    )  # fmt: skip
    assert outcome.outcome is expected
    assert outcome.reason is reason
    assert outcome.usage == {"credits": 7}
    assert outcome.error == {"code": "E_RUN"}
    assert outcome.request_id == "req_receipt_end"
    assert provider.count("/result") == 2


def test_a_receipt_never_ready_leaves_the_ending_as_it_is() -> None:
    """The receipt answers 409 until the deadline: the run's failure stands (never a
    contradiction, never timed out)."""
    outcome, provider, _ = _run_next_action(
        {"/status": [(200, _na("failed", "none", error={"code": "E"}))],
         "/result": [(409, {"error": "run_not_completed"})]},
        deadline_s=8,
    )  # fmt: skip
    assert outcome.outcome is OutcomeKind.FAILED
    assert provider.count("/result") >= 1


# --- 6. partial results with their shape ------------------------------------------------

PARTIAL: dict[str, Any] = {
    "state": "status",
    "pending": ["running"],
    "partial": ["completed_with_errors"],
    "counts": {"succeeded": "n.ok", "failed": "n.bad"},
    "errors_url": "errors_url",
}


def _partial(errors_page: Any, errors_url: str, **table: Any) -> Any:
    clock = FakeClock()
    body = {"status": "completed_with_errors", "n": {"ok": 50, "bad": 150},
            "errors_url": errors_url}  # fmt: skip
    provider = ScriptedProvider(clock, _script([(200, body)], **{"/errors": [(200, errors_page)]}))
    return _wait(provider, clock, table={**PARTIAL, **table})


def test_the_outcome_carries_the_errors_url_with_its_query_when_the_profile_says_safe() -> None:
    """The errors URL reaches the outcome (and ``--json``); its query (the page's limit
    and offset) is kept when the profile marks it safe, hidden (``?…``) otherwise, as a
    query may carry a credential (a signature)."""
    safe = _partial([], "/errors?limit=100&offset=0", errors_url_query_safe=True)
    assert safe.outcome is OutcomeKind.COMPLETED_WITH_ERRORS
    assert safe.errors_url == "http://provider.test/errors?limit=100&offset=0"
    assert safe.as_json()["errors_url"] == safe.errors_url
    hidden = _partial([], "/errors?sig=s3cret&limit=100")
    assert hidden.errors_url == "http://provider.test/errors?…"
    assert "s3cret" not in json.dumps(hidden.as_json())


def test_a_long_errors_page_is_kept_as_whole_items_with_a_count_of_the_rest() -> None:
    """150 errors on the first page: at most 20 whole items kept, the rest counted;
    never a string cut in the middle of an item."""
    page: dict[str, Any] = {
        "total": 150,
        "next_url": "http://provider.test/errors?offset=100",
        "errors": [{"item": n, "message": "x" * 40} for n in range(150)],
    }
    outcome = _partial(page, "/errors")
    errors = outcome.errors
    assert isinstance(errors, dict)
    assert errors["errors"] == page["errors"][:20]
    assert errors["omitted_items"] == 130
    assert errors["total"] == 150
    assert errors["next_url"] == page["next_url"]


def test_a_json_lines_errors_file_is_kept_as_items() -> None:
    """A JSON Lines errors file (one error per line, as batch error files are): items."""
    lines = "\n".join(json.dumps({"custom_id": f"r{n}", "error": "bad" * 30}) for n in range(40))
    clock = FakeClock()
    body = {"status": "completed_with_errors", "n": {"ok": 1, "bad": 40}, "errors_url": "/errors"}
    provider = ScriptedProvider(clock, _script([(200, body)]))
    provider.script["/errors"] = [(200, None)]

    def text_errors(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/errors":
            provider.requests.append(("/errors", clock.now()))
            return httpx.Response(200, text=lines, headers={"content-type": "application/jsonl"})
        return provider(request)

    outcome = wait(
        Operation(status_url=URL, profile=parse_profile(PARTIAL), policy=Policy(base_delay_s=1)),
        store=MemoryStore(), client=httpx.Client(transport=httpx.MockTransport(text_errors)),
        clock=clock, sleep=clock.sleep, rng=random.Random(1),
    )  # fmt: skip
    assert outcome.outcome is OutcomeKind.COMPLETED_WITH_ERRORS
    assert isinstance(outcome.errors, dict)
    items = outcome.errors["items"]
    assert isinstance(items, list)
    assert 0 < len(items) <= 20
    assert items[0] == {"custom_id": "r0", "error": "bad" * 30}
    assert outcome.errors["omitted_items"] == 40 - len(items)


def test_show_prints_the_errors_url_as_the_outcome_keeps_it() -> None:
    """``show`` prints the errors URL with its query when the profile marks it safe."""
    from waitbound.cli._render import record_summary

    clock = FakeClock()
    body = {"status": "completed_with_errors", "n": {"ok": 5, "bad": 1},
            "errors_url": "/errors?limit=100&offset=0"}  # fmt: skip
    provider = ScriptedProvider(clock, _script([(200, body)], **{"/errors": [(200, [])]}))
    store = MemoryStore()
    _wait(provider, clock, table={**PARTIAL, "errors_url_query_safe": True}, store=store)
    record = store.get("op-34")
    assert record is not None
    lines = record_summary(record)
    assert "  errors URL   http://provider.test/errors?limit=100&offset=0" in lines
