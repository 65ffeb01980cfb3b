"""Submitting a job: the receipt, the idempotency key, and never a blind resubmission."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from tests.fakes import Answer, FakeClock, ScriptedProvider
from waitbound import (
    MemoryStore,
    OutcomeKind,
    Phase,
    Policy,
    Reason,
    Record,
    Submission,
    parse_profile,
    run,
    submit,
)

BASE = "http://provider.test"
STATES = {"state": "status", "pending": ["queued", "running"], "succeeded": ["done"]}


def _submit(
    script: dict[str, list[Answer]],
    *,
    submit_contract: dict[str, Any] | None = None,
    wait: bool = True,
    store: MemoryStore | None = None,
    **fields: Any,
) -> tuple[Record, ScriptedProvider, MemoryStore]:
    clock = FakeClock()
    provider = ScriptedProvider(clock, script)
    store = store or MemoryStore()
    table: dict[str, Any] = {**STATES, "job_id": "id"}
    if submit_contract is not None:
        table["submit"] = submit_contract
    submission = Submission(
        method="POST",
        url=f"{BASE}/v1/jobs",
        profile=parse_profile(table),
        policy=fields.pop("policy", Policy(base_delay_s=1, max_delay_s=2, deadline_s=60)),
        body=b'{"input": 1}',
        **fields,
    )
    send = run if wait else submit
    send(
        submission,
        operation_id="op-t",
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(5),
        headers={"Authorization": "Bearer k"},
    )
    record = store.get("op-t")
    assert record is not None
    return record, provider, store


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (
            {"Azure-AsyncOperation": "/ops/1", "Operation-Location": "/ops/2", "Location": "/x"},
            "/ops/1",
        ),
        ({"Operation-Location": "/ops/2", "Location": "/ops/3"}, "/ops/2"),
        ({"Location": "/ops/3"}, "/ops/3"),
    ],
)
def test_status_url_headers_in_precedence(headers: dict[str, str], expected: str) -> None:
    """Azure-AsyncOperation, then Operation-Location, then Location name the status URL."""
    record, _, _ = _submit({"/v1/jobs": [(202, None, headers)]}, wait=False)
    assert record.status_url == f"{BASE}{expected}"
    assert record.phase is Phase.WAITING


def test_receipt_body_names_the_urls_relative_to_the_request() -> None:
    """Receipt body fields name job id, status, result and cancel URLs; relative ones resolve."""
    contract = {
        "status_url_headers": [],
        "status_url": "links.status",
        "result_url": "links.result",
        "cancel_url": "links.cancel",
    }
    body = {"id": "j-1", "links": {"status": "j-1/status", "result": "/r/j-1", "cancel": "c"}}
    record, _, _ = _submit({"/v1/jobs": [(201, body)]}, submit_contract=contract, wait=False)
    assert record.job_id == "j-1"
    assert record.status_url == f"{BASE}/v1/j-1/status"
    assert record.result_url == f"{BASE}/r/j-1"
    assert record.cancel_url == f"{BASE}/v1/c"


def test_status_url_template_fills_in_the_job_id() -> None:
    """A documented template builds the status URL from the receipt's job id."""
    contract = {"status_url_headers": [], "status_url_template": "/v1/jobs/{job_id}"}
    record, _, _ = _submit(
        {"/v1/jobs": [(200, {"id": "b7"})]}, submit_contract=contract, wait=False
    )
    assert record.status_url == f"{BASE}/v1/jobs/b7"


def test_a_202_naming_no_status_resource_is_an_integration_failure() -> None:
    """No header, body field or template names a status URL: not guessed, escalated."""
    record, provider, _ = _submit({"/v1/jobs": [(202, {"id": "j"})]})
    outcome = record.to_outcome()
    assert outcome.reason is Reason.INTEGRATION_FAILURE
    assert "named no status resource" in str(outcome.error)
    assert provider.count("/v1/jobs") == 1


def test_submit_then_wait_reaches_the_outcome_and_sends_the_body_once() -> None:
    """run: the job request is sent once with its body; then the status is polled to success."""
    record, provider, _ = _submit(
        {
            "/v1/jobs": [(202, {"id": "j-9"}, {"Location": "/v1/jobs/j-9"})],
            "/v1/jobs/j-9": [(200, {"status": "running"}), (200, {"status": "done"})],
        }
    )
    assert record.outcome is OutcomeKind.SUCCEEDED
    assert record.job_id == "j-9"
    assert [(m, p) for m, p, _ in provider.sent] == [
        ("POST", "/v1/jobs"),
        ("GET", "/v1/jobs/j-9"),
        ("GET", "/v1/jobs/j-9"),
    ]
    assert provider.sent[0][2] == b'{"input": 1}'
    assert provider.seen_headers[0]["content-type"] == "application/json"


def test_the_record_is_stored_before_the_request_is_sent() -> None:
    """The submission's record (fingerprint, key) exists when the request leaves."""
    store = MemoryStore()
    seen: list[Record | None] = []
    clock = FakeClock()

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(store.get("op-s"))
        return httpx.Response(202, headers={"Location": "/st"})

    submit(
        Submission(
            method="POST",
            url=f"{BASE}/v1/jobs",
            profile=parse_profile(STATES),
            idempotency_key="key-1",
        ),
        operation_id="op-s",
        store=store,
        client=httpx.Client(transport=httpx.MockTransport(handler)),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(1),
    )
    stored = seen[0]
    assert stored is not None
    assert stored.submit_attempts == 1
    assert stored.in_flight == "submit"
    assert stored.idempotency_key == "key-1"
    assert stored.submit_fingerprint is not None
    assert stored.submit_fingerprint.startswith("sha256:")


def test_no_answer_with_an_idempotency_key_is_sent_again_with_the_same_key() -> None:
    """An ambiguous failure (no answer) is retried only with the persisted key, same value."""
    record, provider, _ = _submit(
        {
            "/v1/jobs": [httpx.ReadTimeout("slow"), (202, None, {"Location": "/st"})],
            "/st": [(200, {"status": "done"})],
        },
        submit_contract={"idempotency_header": "Idempotency-Key"},
    )
    assert record.outcome is OutcomeKind.SUCCEEDED
    keys = [h.get("idempotency-key") for h in provider.seen_headers[:2]]
    assert keys[0] is not None
    assert keys[0] == keys[1]
    assert record.submit_attempts == 2


def test_no_answer_without_a_key_is_never_sent_again() -> None:
    """Without an idempotency key, a submission that got no answer escalates; not resent."""
    record, provider, _ = _submit({"/v1/jobs": [httpx.ConnectError("down")]})
    outcome = record.to_outcome()
    assert outcome.reason is Reason.PROVIDER_FAILURE
    assert "may have created a job" in str(outcome.error)
    assert provider.count("/v1/jobs") == 1


def test_attempts_with_a_key_are_bounded() -> None:
    """With a key, at most max_submit_attempts sends; then provider_failure."""
    record, provider, _ = _submit(
        {"/v1/jobs": [(503, None)]},
        submit_contract={"idempotency_header": "Idempotency-Key"},
        max_submit_attempts=2,
    )
    assert record.to_outcome().reason is Reason.PROVIDER_FAILURE
    assert provider.count("/v1/jobs") == 2


@pytest.mark.parametrize(
    ("answer", "outcome", "reason"),
    [
        ((400, {"error": "bad input"}), OutcomeKind.FAILED, None),
        ((401, None), OutcomeKind.ESCALATED, Reason.AUTHORIZATION_DENIED),
        ((429, None, {"Retry-After": "5"}), OutcomeKind.ESCALATED, Reason.RATE_LIMITED),
    ],
)
def test_refused_submissions_end_at_once(answer: Answer, outcome: str, reason: object) -> None:
    """A rejected job request is failed; 401/403 and 429 escalate; none is resent."""
    record, provider, _ = _submit({"/v1/jobs": [answer]})
    assert record.outcome == outcome
    assert record.reason == reason
    assert provider.count("/v1/jobs") == 1


def test_a_submission_cannot_be_resent_without_its_body() -> None:
    """Resuming a submitting operation without its body escalates instead of guessing."""

    from waitbound import wait

    store = MemoryStore()
    clock = FakeClock()
    record, _, _ = _submit(
        {"/v1/jobs": [httpx.ReadTimeout("slow")]},
        submit_contract={"idempotency_header": "Idempotency-Key"},
        store=store,
        max_submit_attempts=1,
    )
    assert record.outcome is OutcomeKind.ESCALATED
    pending = store.create(
        record.evolve(
            contract=record.contract.evolve(operation_id="op-2"),
            ending=record.ending.evolve(outcome=None, reason=None, phase=Phase.SUBMITTING),
            counters=record.counters.evolve(submit_attempts=0),
            audit=record.audit.evolve(audit_seq=0, audit_head="0" * 64),
            version=0,
        ),
        [],
    )
    outcome = wait(operation_id=pending.operation_id, store=store, clock=clock, sleep=clock.sleep)
    assert outcome.reason is Reason.PROVIDER_FAILURE
    assert "never stored" in str(outcome.error)


def test_credentials_go_only_to_the_submit_urls_origin() -> None:
    """A status URL on another origin named by the receipt gets no Authorization header."""
    clock = FakeClock()
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("authorization")))
        if request.url.path == "/v1/jobs":
            return httpx.Response(202, headers={"Location": "http://other.test/st"})
        return httpx.Response(200, json={"status": "done"})

    run(
        Submission(method="POST", url=f"{BASE}/v1/jobs", profile=parse_profile(STATES)),
        store=MemoryStore(),
        client=httpx.Client(transport=httpx.MockTransport(handler)),
        clock=clock,
        sleep=clock.sleep,
        headers={"Authorization": "Bearer k"},
    )
    assert seen == [("provider.test", "Bearer k"), ("other.test", None)]


def test_a_job_just_accepted_is_not_polled_at_once() -> None:
    """202 + Location: the first status request waits the first jittered backoff delay
    (attempt 0: uniform in [0.5, 1] x base), never at t = 0 after the receipt."""
    record, provider, _ = _submit(
        {"/v1/jobs": [(202, None, {"Location": "/ops/1"})], "/ops/1": [(200, {"status": "done"})]},
        policy=Policy(base_delay_s=4, max_delay_s=8, deadline_s=60, backoff_jitter_floor=0.5),
    )
    assert record.outcome is OutcomeKind.SUCCEEDED
    (_, accepted), (path, polled) = provider.requests
    assert path == "/ops/1"
    expected = random.Random(5).uniform(2.0, 4.0)
    assert (polled - accepted).total_seconds() == pytest.approx(expected, abs=1e-5)


def test_a_receipts_retry_after_sets_the_first_poll() -> None:
    """202 + Location + Retry-After: 7: the first status request waits 7 s plus the
    bounded upward jitter (at most min(10 %, 1 s))."""
    receipt = (202, None, {"Location": "/ops/1", "Retry-After": "7"})
    record, provider, _ = _submit({"/v1/jobs": [receipt], "/ops/1": [(200, {"status": "done"})]})
    assert record.outcome is OutcomeKind.SUCCEEDED
    (_, accepted), (_, polled) = provider.requests
    expected = 7 + random.Random(5).uniform(0, 0.7)
    assert (polled - accepted).total_seconds() == pytest.approx(expected, abs=1e-5)
