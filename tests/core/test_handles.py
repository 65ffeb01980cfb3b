"""Operation handles: what start and submit return (sync and async), reading without
sending, result(timeout) bounded without spending a request, cancel, done callbacks,
and continuation tokens rebuilt in a second process."""

from __future__ import annotations

import base64
import json
import logging
import random
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.core.harness import PROFILE, URL
from tests.fakes import START, FakeClock, ScriptedProvider
from waitbound import (
    AsyncOperationHandle,
    JobFailedError,
    MemoryStore,
    Operation,
    OperationHandle,
    OperationNotFoundError,
    OutcomeKind,
    Policy,
    SQLiteStore,
    Submission,
    TimedOutError,
    UsageError,
    parse_profile,
    start,
    start_async,
    submit,
    submit_async,
)

SECRET = "Bearer sk-handle-secret-0123456789"


def _started(
    script: dict[str, list[object]],
    *,
    store: MemoryStore | SQLiteStore | None = None,
    deadline_s: float = 600.0,
) -> tuple[OperationHandle, ScriptedProvider, FakeClock]:
    clock = FakeClock()
    provider = ScriptedProvider(clock, script)  # type: ignore[arg-type]
    handle = start(
        Operation(
            status_url=URL,
            profile=parse_profile(PROFILE),
            policy=Policy(base_delay_s=1, deadline_s=deadline_s),
        ),
        operation_id="op-h",
        store=store if store is not None else MemoryStore(),
        clock=clock,
        client=provider.client(),
        sleep=clock.sleep,
        rng=random.Random(1),
        headers={"Authorization": SECRET},
    )
    return handle, provider, clock


def test_start_returns_a_handle_that_reads_without_sending() -> None:
    """start: a handle naming the operation; done/outcome/status read the store and
    send nothing; status is the record's public view (the old return is its outcome)."""
    handle, provider, _ = _started({"/status": [(200, {"status": "done", "id": "j", "output": 1})]})
    assert isinstance(handle, OperationHandle)
    assert handle.operation_id == "op-h"
    assert not handle.done()
    assert handle.outcome() is None
    status = handle.status()
    assert (status.state, status.done, status.requests_used) == ("waiting", False, 0)
    assert status.next_check_at == START
    assert status.outcome.outcome is None
    assert "NOT complete" in status.outcome.message
    assert provider.requests == []
    assert set(status.as_json()) >= {"state", "progress", "requests_used", "next_check_at"}


def test_result_drives_the_operation_to_its_outcome_and_returns_it() -> None:
    """result(): polls as wait does (the caller's headers go to the status URL), returns
    the succeeded Outcome; done and outcome then say so without a request."""
    handle, provider, _ = _started(
        {
            "/status": [
                (200, {"status": "running", "id": "j"}),
                (200, {"status": "done", "id": "j", "output": 7}),
            ]
        }
    )
    outcome = handle.result()
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert outcome.result == 7
    assert provider.seen_headers[0]["authorization"] == SECRET
    sent = len(provider.requests)
    assert handle.done()
    assert handle.outcome() == outcome
    assert handle.status().state == "succeeded"
    assert handle.status().next_check_at is None
    assert len(provider.requests) == sent


def test_result_raises_the_typed_error_of_a_failed_job() -> None:
    """A failed job: result() raises JobFailedError carrying the Outcome."""
    handle, _, _ = _started(
        {"/status": [(200, {"status": "failed", "id": "j", "error": {"code": "E"}})]}
    )
    with pytest.raises(JobFailedError) as raised:
        handle.result()
    assert raised.value.outcome.outcome is OutcomeKind.FAILED


def test_result_timeout_shorter_than_the_next_check_raises_timed_out_without_a_request() -> None:
    """The provider says come back in 60 s; result(timeout=5) sends nothing more: it
    sleeps its 5 s and raises TimedOutError whose outcome still waits (done false); the
    operation's own deadline and counters are untouched."""
    handle, provider, clock = _started(
        {"/status": [(200, {"status": "running", "id": "j"}, {"Retry-After": "60"})]}
    )
    with pytest.raises(TimedOutError):
        handle.result(timeout=0.5)  # the first request is due now: sent; then 60 s
    assert len(provider.requests) == 1
    before = handle.status()
    slept = list(clock.sleeps)
    with pytest.raises(TimedOutError) as raised:
        handle.result(timeout=5)
    assert len(provider.requests) == 1
    assert clock.sleeps[len(slept) :] == [5]
    assert raised.value.outcome.done is False
    assert raised.value.outcome.outcome is None
    assert "still waiting after result(timeout=5)" in str(raised.value)
    after = handle.status()
    assert (after.requests_used, after.deadline_at, after.next_check_at) == (
        before.requests_used,
        before.deadline_at,
        before.next_check_at,
    )
    with pytest.raises(UsageError, match="timeout"):
        handle.result(timeout=-1)


def test_result_of_an_operation_that_times_out_raises_timed_out_with_its_outcome() -> None:
    """The operation's own deadline passes inside result(): TimedOutError, outcome
    timed_out (deadline_exceeded)."""
    handle, _, _ = _started({"/status": [(200, {"status": "running", "id": "j"})]}, deadline_s=20)
    with pytest.raises(TimedOutError) as raised:
        handle.result()
    assert raised.value.outcome.outcome is OutcomeKind.TIMED_OUT


def test_done_callbacks_fire_once_and_at_once_when_already_done(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A callback added while waiting fires once when a look sees the end; one added
    after fires at once; one that raises is logged, never raised."""
    handle, _, _ = _started({"/status": [(200, {"status": "done", "id": "j", "output": 1})]})
    seen: list[str] = []
    handle.add_done_callback(lambda h: seen.append("first"))

    def broken(h: OperationHandle) -> None:
        raise RuntimeError("callback bug")

    handle.add_done_callback(broken)
    assert seen == []
    with caplog.at_level(logging.WARNING, logger="waitbound.handle"):
        handle.result()
    handle.done()
    handle.result()
    assert seen == ["first"]
    assert "callback bug" in caplog.text
    handle.add_done_callback(lambda h: seen.append("late"))
    assert seen == ["first", "late"]


def test_cancel_asks_for_the_cancel_and_sends_it_now() -> None:
    """cancel(reason=…): audited with its reason, the cancel request sent at once; the
    outcome as it stands is returned."""
    profile = {
        **PROFILE,
        "cancelable": "cancelable",
        "cancel": {"url_template": "{status_url}/cancel"},
    }
    clock = FakeClock()
    running = {"status": "running", "id": "j", "cancelable": True}
    provider = ScriptedProvider(
        clock,
        {"/status": [(200, running, {"Retry-After": "30"})], "/status/cancel": [(202, {})]},
    )
    store = MemoryStore()
    handle = start(
        Operation(status_url=URL, profile=parse_profile(profile)), operation_id="op-c",
        store=store, clock=clock, client=provider.client(), sleep=clock.sleep,
    )  # fmt: skip
    with pytest.raises(TimedOutError):
        handle.result(timeout=1)
    handle.cancel(reason="not needed")
    assert provider.count("/status/cancel") == 1
    event = next(e.event for e in store.audit("op-c") if e.event.kind == "cancel_requested")
    assert "not needed" in event.summary


def test_the_token_names_the_operation_and_store_never_a_secret(tmp_path: Path) -> None:
    """continuation_token: ``wbop1.`` + base64url JSON of the id and the SQLite path;
    the caller's headers are nowhere in it; from_token in this process rebuilds it."""
    store = SQLiteStore(tmp_path / "s.db")
    try:
        handle, _, _ = _started({"/status": [(200, {"status": "done", "id": "j"})]}, store=store)
        token = handle.continuation_token()
        assert token.startswith("wbop1.")
        body = token.removeprefix("wbop1.")
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        assert data == {"v": 1, "operation_id": "op-h", "store": str((tmp_path / "s.db").resolve())}
        assert "sk-handle" not in token
        again = OperationHandle.from_token(token, store=store)
        assert again.operation_id == "op-h"
        assert again.status() == handle.status()
    finally:
        store.close()


def test_from_token_in_a_second_process_sees_the_same_outcome(tmp_path: Path) -> None:
    """A handle driven to its outcome here; its token, in another Python process, opens
    the store it names and reads the same outcome (and sends nothing)."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        handle, _, _ = _started(
            {"/status": [(200, {"status": "done", "id": "j", "output": 3})]}, store=store
        )
        outcome = handle.result()
        token = handle.continuation_token()
    finally:
        store.close()
    code = (
        "import json, sys\n"
        "from waitbound import OperationHandle\n"
        "handle = OperationHandle.from_token(sys.argv[1])\n"
        "print(json.dumps(handle.outcome().as_json()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, token],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    expected = outcome.as_json()
    seen.pop("message"), expected.pop("message")
    assert seen == json.loads(json.dumps(expected))


def test_bad_tokens_and_memory_tokens_without_a_store_are_refused() -> None:
    """Not a token, a token of another version: one UsageError line; a memory store's
    token needs store=; an id the store does not hold is OperationNotFoundError."""
    handle, _, _ = _started({"/status": [(200, {"status": "done", "id": "j"})]})
    token = handle.continuation_token()
    with pytest.raises(UsageError, match="memory store"):
        OperationHandle.from_token(token)
    assert OperationHandle.from_token(token, store=handle.store).operation_id == "op-h"
    with pytest.raises(OperationNotFoundError):
        OperationHandle.from_token(token, store=MemoryStore())
    for bad in ("nope", "wbop1.!!!", "wbop1." + base64.urlsafe_b64encode(b'{"v": 9}').decode()):
        with pytest.raises(UsageError, match="not a waitbound continuation token"):
            OperationHandle.from_token(bad, store=handle.store)


def test_submit_returns_a_handle_whose_status_outcome_is_the_receipt() -> None:
    """submit: the job request is sent once; the handle's status().outcome is what
    submit returned before (still waiting, the receipt's job id); result() waits."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {"/jobs": [(202, {"id": "j-1"}, {"Location": "/status"})],
         "/status": [(200, {"status": "done", "id": "j-1", "output": 5})]},
    )  # fmt: skip
    handle = submit(
        Submission(method="POST", url="http://provider.test/jobs", profile=parse_profile(PROFILE)),
        store=MemoryStore(), client=provider.client(), clock=clock, sleep=clock.sleep,
    )  # fmt: skip
    receipt = handle.status().outcome
    assert (receipt.done, receipt.job_id) == (False, "j-1")
    assert provider.count("/status") == 0
    assert handle.result().result == 5


def test_the_async_handles_of_start_async_and_submit_async() -> None:
    """start_async / submit_async return AsyncOperationHandle: result and cancel are
    coroutines; an async done callback is awaited."""
    clock = FakeClock()
    provider = ScriptedProvider(
        clock,
        {"/jobs": [(202, {"id": "j-1"}, {"Location": "/status"})],
         "/status": [(200, {"status": "running", "id": "j-1"}),
                     (200, {"status": "done", "id": "j-1", "output": 5})]},
    )  # fmt: skip
    awaited: list[str] = []

    async def main() -> tuple[int, int]:
        client = provider.async_client()
        store = MemoryStore()
        started = await start_async(
            Operation(status_url=URL, profile=parse_profile(PROFILE)),
            store=store, clock=clock, client=client, sleep=clock.async_sleep,
        )  # fmt: skip
        assert isinstance(started, AsyncOperationHandle)

        async def note(h: AsyncOperationHandle) -> None:
            awaited.append(h.operation_id)

        started.add_done_callback(note)
        first = (await started.result()).result
        submission = Submission(
            method="POST", url="http://provider.test/jobs", profile=parse_profile(PROFILE)
        )
        submitted = await submit_async(
            submission, store=store, client=client, clock=clock, sleep=clock.async_sleep
        )
        second = (await submitted.result()).result
        assert isinstance(first, int)
        assert isinstance(second, int)
        return first, second

    assert anyio.run(main) == (5, 5)
    assert len(awaited) == 1
