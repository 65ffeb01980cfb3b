"""Counts a provider did not report are no counts: shown nowhere, in JSON or text."""

from __future__ import annotations

import pytest

from tests.core.harness import PROFILE, run
from tests.records import with_fields
from waitbound._model._record import reported_counts
from waitbound.cli._output import print_outcome

COUNTED = {**PROFILE, "counts": {"succeeded": "n.ok", "failed": "n.bad", "total": "n.all"}}


def test_counts_the_body_does_not_carry_are_null_not_all_null_members() -> None:
    """A profile that names counts, a success whose body has none: counts is null."""
    result = run({"/status": [(200, {"status": "done", "output": {"u": 1}})]}, profile=COUNTED)
    assert result.outcome.outcome == "succeeded"
    assert result.outcome.counts is None
    assert result.outcome.as_json()["counts"] is None
    record = result.store.get(result.outcome.operation_id)
    assert record is not None
    assert record.counts is None


def test_a_stored_record_with_all_null_counts_shows_none() -> None:
    """An older record holding {"succeeded": null, …} gives an outcome without counts."""
    result = run({"/status": [(200, {"status": "done", "output": {"u": 1}})]}, profile=COUNTED)
    record = result.store.get(result.outcome.operation_id)
    assert record is not None
    old = with_fields(record, counts={"succeeded": None, "failed": None, "total": None})
    assert old.to_outcome().counts is None


@pytest.mark.parametrize(
    ("counts", "shown"),
    [
        (None, None),
        ({"succeeded": None, "failed": None, "total": None}, None),
        (
            {"succeeded": None, "failed": 0, "total": None},
            {"succeeded": None, "failed": 0, "total": None},
        ),
    ],
)
def test_counts_are_reported_when_any_member_is(
    counts: dict[str, object] | None, shown: object
) -> None:
    """One member reported (a 0 included) keeps the counts; none reported drops them."""
    assert reported_counts(counts) == shown  # type: ignore[arg-type]


def test_the_text_output_has_no_counts_line_for_unreported_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`wait` without --json prints no "counts:" line when nothing was counted."""
    result = run({"/status": [(200, {"status": "done", "output": {"u": 1}})]}, profile=COUNTED)
    print_outcome(result.outcome, as_json=False)
    assert "counts" not in capsys.readouterr().out
    partial = run(
        {
            "/status": [
                (200, {"status": "done", "output": {"u": 1}, "n": {"ok": 3, "bad": 1, "all": 4}})
            ]
        },
        profile=COUNTED,
    )
    print_outcome(partial.outcome, as_json=False)
    assert 'counts: {"succeeded": 3, "failed": 1, "total": 4}' in capsys.readouterr().out
