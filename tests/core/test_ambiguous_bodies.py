"""A key a provider repeats with different values is never silently resolved."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes import FakeClock
from waitbound import (
    MemoryStore,
    Operation,
    Outcome,
    OutcomeKind,
    Policy,
    Reason,
    Submission,
    parse_profile,
    run,
    wait,
)

PROFILE = parse_profile(
    {
        "state": "status",
        "pending": ["running"],
        "succeeded": ["completed"],
        "failed": ["failed"],
        "result": "output",
        "submit": {"status_url": "status_url"},
    }
)
POLICY = Policy(base_delay_s=1, max_delay_s=2, deadline_s=60)


def _serve(answers: dict[str, bytes]) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=answers[request.url.path])

    return httpx.Client(transport=httpx.MockTransport(answer))


def _wait(answers: dict[str, bytes], result_url: str | None = None) -> Outcome:
    clock = FakeClock()
    return wait(
        Operation(
            status_url="http://p.test/status", profile=PROFILE, policy=POLICY, result_url=result_url
        ),
        store=MemoryStore(),
        client=_serve(answers),
        clock=clock,
        sleep=clock.sleep,
    )


def test_a_state_key_repeated_with_different_values_is_integration_failure() -> None:
    """{"status":"failed","status":"completed"} is neither failed nor succeeded."""
    outcome = _wait({"/status": b'{"status": "failed", "status": "completed"}'})
    assert outcome.outcome is OutcomeKind.ESCALATED
    assert outcome.reason is Reason.INTEGRATION_FAILURE
    assert "'status' more than once" in str(outcome.error)


@pytest.mark.parametrize(
    "body",
    [
        b'{"status": "completed", "status": "completed", "output": 1}',
        b'{"status": "completed", "output": 1, "ignored": 1, "ignored": 2}',
    ],
    ids=["identical-repeat", "repeat-outside-what-is-read"],
)
def test_harmless_repeats_are_read(body: bytes) -> None:
    """An identical repeat, or a repeat in a part the profile never reads, changes nothing."""
    outcome = _wait({"/status": body})
    assert outcome.outcome is OutcomeKind.SUCCEEDED
    assert outcome.result == 1


def test_a_repeat_inside_the_result_read_is_integration_failure() -> None:
    """The result document repeating a key inside the output escalates; nothing is kept."""
    outcome = _wait(
        {
            "/status": b'{"status": "completed"}',
            "/result": b'{"output": {"rows": 1, "rows": 2}}',
        },
        result_url="http://p.test/result",
    )
    assert outcome.reason is Reason.INTEGRATION_FAILURE
    assert outcome.result is None
    assert "'rows' more than once" in str(outcome.error)


def test_a_receipt_repeating_its_status_url_is_integration_failure() -> None:
    """Two different status URLs in one receipt: no URL is chosen, none is polled."""
    clock = FakeClock()
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(
            202, content=b'{"status_url": "http://p.test/a", "status_url": "http://p.test/b"}'
        )

    outcome = run(
        Submission(method="POST", url="http://p.test/jobs", profile=PROFILE, policy=POLICY),
        store=MemoryStore(),
        client=httpx.Client(transport=httpx.MockTransport(answer)),
        clock=clock,
        sleep=clock.sleep,
    )
    assert outcome.reason is Reason.INTEGRATION_FAILURE
    assert "'status_url' more than once" in str(outcome.error)
    assert seen == ["/jobs"]
