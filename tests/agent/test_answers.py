"""Tool answers: bounded in size whatever the provider said, and free of secrets."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes import FakeClock
from tests.hypothesis_profiles import examples
from tests.records import with_fields
from waitbound import (
    DecisionRequest,
    MemoryStore,
    OutcomeKind,
    Phase,
    Policy,
    Reason,
    Record,
    parse_profile,
    request_extension,
)
from waitbound._base._json import JSON
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)
from waitbound.mcp._answers import answer_bound, bounded, escalation_answer, fit, scrub, view

T0 = datetime(2026, 1, 1, tzinfo=UTC)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3000),
    lambda inner: (
        st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=40), inner, max_size=8)
    ),
    max_leaves=40,
)


def record(**changes: object) -> Record:
    base = Record(
        contract=Contract(
            operation_id="op_1",
            profile=parse_profile({"state": "s", "pending": ["p"], "succeeded": ["d"]}, name="t"),
            policy=Policy(),
            created_at=T0,
            label="mcp:reports",
        ),
        submission=Submission(status_url="https://api.example.com/s"),
        schedule=Schedule(
            deadline_at=T0 + timedelta(minutes=10), next_poll_at=T0 + timedelta(seconds=5)
        ),
    )
    return with_fields(base, **changes)


@settings(max_examples=examples(150), deadline=None)
@given(
    result=json_values,
    error=json_values,
    progress=json_values,
    state=st.text(max_size=2000),
    job_id=st.text(min_size=1, max_size=500),
    finished=st.sampled_from([None, *OutcomeKind]),
    max_chars=st.integers(200, 5000),
)
def test_an_answer_never_exceeds_its_bound(  # noqa: PLR0917 - hypothesis passes each
    result: object,
    error: object,
    progress: object,
    state: str,
    job_id: str,
    finished: OutcomeKind | None,
    max_chars: int,
) -> None:
    done = finished is not None
    shown = record(
        result=result,
        error=error,
        progress=progress,
        provider_state=state,
        job_id=job_id,
        outcome=finished,
        reason=Reason.UNKNOWN_STATE if finished is OutcomeKind.ESCALATED else None,
        phase=Phase.DONE if done else Phase.WAITING,
        finished_at=T0 + timedelta(seconds=9) if done else None,
        counts={"total": 10, "failed": [state]} if done else None,
    )
    answer = view(shown, T0, max_chars=max_chars)
    assert len(json.dumps(answer, ensure_ascii=False)) <= answer_bound(max_chars)
    assert answer["done"] is done
    assert ("NOT complete" in str(answer["message"])) is not done or finished in (
        OutcomeKind.TIMED_OUT,
        OutcomeKind.ESCALATED,
    )


@given(st.text(max_size=500), st.integers(0, 400))
def test_fit_is_the_longest_start_that_fits(text: str, limit: int) -> None:
    cut = fit(text, limit)
    assert text.startswith(cut)
    assert len(json.dumps(cut, ensure_ascii=False)) <= limit or cut == ""
    if cut != text:
        assert len(json.dumps(text[: len(cut) + 1], ensure_ascii=False)) > limit


def test_bounded_keeps_small_values_and_cuts_large_ones() -> None:
    assert bounded({"a": 1}, 100) == ({"a": 1}, False)
    cut, was_cut = bounded({"a": "x" * 500}, 100)
    assert was_cut
    assert isinstance(cut, str)
    assert cut.startswith('{"a": "xxx')


def test_scrub_replaces_secrets_in_keys_and_values() -> None:
    said: JSON = {"Bearer t0k": ["x Bearer t0k y", 3, None]}
    assert scrub(said, ["Bearer t0k"]) == {"[redacted]": ["x [redacted] y", 3, None]}


REASON_CHARS = st.characters(codec="utf-8", categories=["L", "N", "P"], include_characters=" ")


@settings(max_examples=examples(60), deadline=None)
@given(
    state=st.text(max_size=2000),
    job_id=st.text(min_size=1, max_size=500),
    why=st.text(REASON_CHARS, min_size=1, max_size=2000).filter(str.strip),
    escalated=st.booleans(),
    max_chars=st.integers(200, 5000),
)  # fmt: skip
def test_a_request_extension_answer_never_exceeds_its_bound(
    state: str, job_id: str, why: str, escalated: bool, max_chars: int
) -> None:
    """request_extension's answer stays within answer_bound whatever the provider's state,
    job id and the agent's reason are, and says a person decides."""
    store = MemoryStore()
    shown = record(provider_state=state, job_id=job_id)
    if escalated:
        shown = shown.evolve(
            ending=shown.ending.evolve(
                outcome=OutcomeKind.ESCALATED,
                reason=Reason.UNKNOWN_STATE,
                phase=Phase.DONE,
                finished_at=T0 + timedelta(seconds=9),
            ),
            oversight=shown.oversight.evolve(
                decision_request=DecisionRequest(opened_at=T0, due_at=T0 + timedelta(days=7))
            ),
        )
    store.create(shown, [])
    clock = FakeClock(T0 + timedelta(seconds=10))
    filed = request_extension(
        "op_1", minutes=5, checks=3, why=why, by="agent:mcp:reports", store=store, clock=clock
    )
    stored = store.get("op_1")
    assert stored is not None
    answer = escalation_answer(stored, filed, max_chars=max_chars)
    assert len(json.dumps(answer, ensure_ascii=False)) <= answer_bound(max_chars)
    assert answer["extended"] is False
    assert "a PERSON decides" in str(answer["message"])
    assert "Nothing was extended" in str(answer["message"])


def test_a_job_whose_result_is_being_fetched_is_not_called_not_complete() -> None:
    """Regression: check_job while the result is fetched after the provider's success
    says SUCCEEDED at the provider and the result is not available yet, never "has
    STARTED and is NOT complete"."""
    fetching = record(
        phase=Phase.FETCHING_RESULT, settled_outcome=OutcomeKind.SUCCEEDED, job_id="j-9",
        result_url="https://api.example.com/r",
    )  # fmt: skip
    message = str(view(fetching, T0, max_chars=2000)["message"])
    assert message.startswith("Job j-9 SUCCEEDED at the provider")
    assert "NOT available yet" in message
    assert "STARTED" not in message
    assert "await_job" in message
