"""``Record.evolve`` is ``dataclasses.replace``, only cheaper: same fields, same errors."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import cast, get_type_hints

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples
from waitbound import Policy, Record, parse_profile
from waitbound._model._record import (
    FIELD_NAMES,
    Contract,
    RecordChanges,
    Schedule,
    Submission,
)
from waitbound._model._record_parts import PARTS, Push

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RECORD = Record(
    contract=Contract(
        operation_id="op-e",
        profile=parse_profile({"state": "status", "pending": ["running"], "succeeded": ["done"]}),
        policy=Policy(),
        created_at=T0,
    ),
    submission=Submission(status_url="https://api.example/jobs/1"),
    schedule=Schedule(deadline_at=T0 + timedelta(minutes=10), next_poll_at=T0),
)
# Neither copy checks types, so any values show the copy itself; identity is compared.
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=8),
    st.datetimes(timezones=st.just(UTC)),
    st.tuples(st.text(max_size=3)),
    st.builds(object),
)
CHANGES = st.dictionaries(st.sampled_from(FIELD_NAMES), VALUES, max_size=len(FIELD_NAMES))


def _same_fields(got: Record, want: Record) -> None:
    assert type(got) is Record
    for name in FIELD_NAMES:
        assert getattr(got, name) is getattr(want, name), name


@settings(max_examples=examples(300), deadline=None, derandomize=True)
@given(start=CHANGES, changes=CHANGES)
def test_evolve_gives_what_replace_gives(
    start: dict[str, object], changes: dict[str, object]
) -> None:
    base = dataclasses.replace(RECORD, **start)  # type: ignore[arg-type]
    before = {name: getattr(base, name) for name in FIELD_NAMES}
    got = base.evolve(**cast("RecordChanges", changes))
    _same_fields(got, dataclasses.replace(base, **changes))  # type: ignore[arg-type]
    assert got is not base
    assert {name: getattr(base, name) for name in FIELD_NAMES} == before  # base untouched


@settings(max_examples=examples(200), deadline=None, derandomize=True)
@given(
    changes=CHANGES,
    unknown=st.lists(
        st.text(alphabet="abcdefghij_", min_size=1, max_size=12).filter(
            lambda name: name not in FIELD_NAMES
        ),
        min_size=1,
        max_size=3,
        unique=True,
    ),
    at=st.integers(min_value=0),
)
def test_an_unknown_name_raises_the_type_error_replace_raises(
    changes: dict[str, object], unknown: list[str], at: int
) -> None:
    items = list(changes.items())
    where = at % (len(items) + 1)
    mixed = dict(items[:where] + [(name, 1) for name in unknown] + items[where:])
    with pytest.raises(TypeError) as replaced:
        dataclasses.replace(RECORD, **mixed)  # type: ignore[arg-type]
    with pytest.raises(TypeError) as evolved:
        RECORD.evolve(**cast("RecordChanges", mixed))
    assert str(evolved.value) == str(replaced.value)


def test_an_evolved_record_stays_frozen() -> None:
    got = RECORD.evolve(schedule=RECORD.schedule.evolve(attempt=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.attempt = 4  # type: ignore[misc]
    assert got.attempt == 3
    assert RECORD.attempt == 0


def test_record_has_no_post_init_for_evolve_to_skip() -> None:
    assert not hasattr(Record, "__post_init__")


def test_record_changes_names_every_field_with_its_type() -> None:
    """RecordChanges names every flat field of the record, in FIELD_NAMES order: every
    field of every part (with the type its part declares), ``push`` (a whole part) and
    ``version``; no name twice, none left out."""
    assert tuple(RecordChanges.__annotations__) == FIELD_NAMES
    want: dict[str, object] = {"version": int}
    for attr, kind in PARTS:
        if attr == "push":
            want["push"] = Push
            continue
        hints = get_type_hints(kind)
        for item in dataclasses.fields(kind):  # type: ignore[arg-type]
            assert item.name not in want, item.name
            want[item.name] = hints[item.name]
    assert get_type_hints(RecordChanges) == want
    assert RecordChanges.__required_keys__ == frozenset()
    assert get_type_hints(Record) == {
        **dict(PARTS),
        "version": int,
    }
