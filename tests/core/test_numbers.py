"""The one strict reading of what people type: whole numbers, numbers, durations."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from waitbound._base._numbers import (
    DURATION_SYNTAX,
    DURATION_UNITS,
    check_number,
    parse_duration,
    parse_integer,
    parse_number,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2d", 172_800.0),
        ("1d2h", 93_600.0),
        ("1h30m", 5_400.0),
        ("1h 30m", 5_400.0),
        ("1.5h", 5_400.0),
        ("90s", 90.0),
        ("90", 90.0),
        ("0.5", 0.5),
        (".5s", 0.5),
        ("250ms", 0.25),
        ("1m30.5s", 90.5),
        ("1d1h1m1s1ms", 90_061.001),
        ("10M", 600.0),
        ("  10m ", 600.0),
        ("0s", 0.0),
    ],
)
def test_a_duration_takes_days_and_compound_forms(text: str, seconds: float) -> None:
    """Days, hours, minutes, seconds and milliseconds, alone or largest first, add up."""
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1_0m", "without underscores"),
        ("1_0", "without underscores"),
        ("30m1h", "largest first"),
        ("1h1h", "largest first"),
        ("2x", DURATION_SYNTAX),
        ("1e3s", DURATION_SYNTAX),
        ("", DURATION_SYNTAX),
        ("h", DURATION_SYNTAX),
        ("1h30", DURATION_SYNTAX),
        ("-5s", DURATION_SYNTAX),
        ("nan", DURATION_SYNTAX),
        ("inf", DURATION_SYNTAX),
        ("\u0661\u0660s", "digits 0-9"),
        ("9" * 70, "longer than"),
    ],
)
def test_a_duration_that_is_not_one_is_refused_in_one_line(text: str, says: str) -> None:
    """Garbage, underscores, a unit twice or out of order: one line saying what to write."""
    with pytest.raises(ValueError) as caught:  # noqa: PT011 - the message is checked below
        parse_duration(text)
    message = str(caught.value)
    assert says in message
    assert "\n" not in message


@given(
    st.lists(
        st.tuples(st.sampled_from(list(DURATION_UNITS)), st.integers(0, 10_000)),
        min_size=1,
        max_size=5,
        unique_by=lambda part: part[0],
    )
)
def test_a_compound_duration_is_the_sum_of_its_parts(parts: list[tuple[str, int]]) -> None:
    """Any units written largest first, each once, read as the sum of their seconds."""
    order = list(DURATION_UNITS)
    parts.sort(key=lambda part: order.index(part[0]))
    text = "".join(f"{value}{unit}" for unit, value in parts)
    assert parse_duration(text) == pytest.approx(
        sum(value * DURATION_UNITS[unit] for unit, value in parts)
    )


@pytest.mark.parametrize(("text", "value"), [("30", 30), ("0", 0), ("-1", -1), (" 7 ", 7)])
def test_a_whole_number_is_digits(text: str, value: int) -> None:
    """Digits, optionally signed, surrounding spaces ignored."""
    assert parse_integer(text) == value


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1_0", "without underscores"),
        ("1.0", "not a whole number"),
        ("1e3", "not a whole number"),
        ("0x10", "not a whole number"),
        ("", "not a whole number"),
        ("\u0661\u0660", "digits 0-9"),
        ("1" * 65, "longer than"),
    ],
)
def test_a_whole_number_int_would_read_is_refused(text: str, says: str) -> None:
    """``int()`` reads ``1_0`` as 10 and Arabic-Indic digits as digits; people mean neither."""
    with pytest.raises(ValueError, match=says):
        parse_integer(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("15", 15.0), ("0.5", 0.5), ("-2", -2.0), ("1.5e3", 1500.0), (".25", 0.25), ("0", 0.0)],
)
def test_a_number_is_a_decimal_with_an_optional_exponent(text: str, value: float) -> None:
    """Decimals and exponents read as float() reads them."""
    assert parse_number(text) == value


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1_0", "without underscores"),
        ("nan", "not a number"),
        ("inf", "not a number"),
        ("-infinity", "not a number"),
        ("1e400", "too large"),
        ("1e-320", "too close to zero"),
        ("1e-400", "too close to zero"),
        ("0x1p3", "not a number"),
        ("1,5", "not a number"),
    ],
)
def test_a_number_float_would_read_differently_is_refused(text: str, says: str) -> None:
    """Underscores, nan and inf, overflow, subnormals and what float() rounds to 0."""
    with pytest.raises(ValueError, match=says):
        parse_number(text)


def test_a_computed_value_is_checked_like_a_typed_one() -> None:
    """check_number: finite and zero or normal, else one line naming the value."""
    assert check_number(0.0) == 0.0
    assert check_number(sys.float_info.min) == sys.float_info.min
    with pytest.raises(ValueError, match="too close to zero"):
        check_number(sys.float_info.min / 2, "minutes")
    with pytest.raises(ValueError, match="not a number"):
        check_number(float("nan"))
