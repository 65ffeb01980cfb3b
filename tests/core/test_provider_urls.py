"""URLs a provider names are checked by httpx's own rules before they are stored or used."""

from __future__ import annotations

import pytest

from tests.core.test_one_bad_operation import FAST
from tests.fakes import FakeClock, ScriptedProvider
from waitbound import (
    MemoryStore,
    Operation,
    OutcomeKind,
    Reason,
    Submission,
    parse_profile,
    run,
    wait,
)


@pytest.mark.parametrize(
    "bad_url",
    [
        "http://\u2603.net/status",
        "http://\u2460\u2461\u2466.0.0.1/status",
        "http://p.test/status\x01x",
        "http://p.test:99999/status",
    ],
    ids=["idna", "non-ascii-digits", "control-char", "bad-port"],
)
@pytest.mark.parametrize("field", ["result_url", "cancel_url"])
def test_a_status_body_naming_a_broken_url_escalates_integration_failure(
    bad_url: str, field: str
) -> None:
    """A URL the provider names that httpx cannot use: integration_failure with the
    value shown escaped (no control character in the story), never a traceback."""
    clock = FakeClock()
    profile = parse_profile(
        {
            "state": "status",
            "pending": ["running"],
            "succeeded": ["done"],
            "result_url": "result_url",
            "cancel_url": "cancel_url",
        }
    )
    provider = ScriptedProvider(clock, {"/status": [(200, {"status": "done", field: bad_url})]})
    store = MemoryStore()
    outcome = wait(
        Operation(status_url="http://p.test/status", profile=profile, policy=FAST),
        store=store,
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
    )
    assert outcome.outcome is OutcomeKind.ESCALATED
    assert outcome.reason is Reason.INTEGRATION_FAILURE
    assert "cannot be used" in str(outcome.error)
    for stored in store.audit(outcome.operation_id):
        assert "\x01" not in stored.event.summary
        assert "\u2603" not in stored.event.summary


@pytest.mark.parametrize(
    "bad_url",
    ["http://\u2603.net/status", "http://p.test/a\r\nb", "http://p.test:99999/x"],
    ids=["idna", "crlf", "bad-port"],
)
def test_a_receipt_naming_a_broken_status_url_escalates_integration_failure(
    bad_url: str,
) -> None:
    """A 202 whose Location or body names an unusable URL: integration_failure at the
    submission, no status request sent, the reserved submit counted once."""
    clock = FakeClock()
    profile = parse_profile(
        {
            "state": "status",
            "pending": ["running"],
            "succeeded": ["done"],
            "submit": {"status_url": "status_url"},
        }
    )
    provider = ScriptedProvider(clock, {"/jobs": [(202, {"status_url": bad_url})]})
    outcome = run(
        Submission(method="POST", url="http://p.test/jobs", profile=profile, policy=FAST),
        store=MemoryStore(),
        client=provider.client(),
        clock=clock,
        sleep=clock.sleep,
    )
    assert outcome.reason is Reason.INTEGRATION_FAILURE
    assert "status URL" in str(outcome.error)
    assert provider.count("/jobs") == 1
    assert len(provider.requests) == 1
