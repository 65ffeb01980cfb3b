"""Backoff with jitter, and provider hints (RFC 9110 Retry-After and body hints)."""

from __future__ import annotations

import random
from datetime import timedelta
from email.utils import format_datetime

import pytest

from tests.fakes import START
from waitbound import DelaySource, parse_profile, parse_retry_after
from waitbound._schedule import backoff_delay_s, backoff_raw_s, hinted_delay_s, read_hints

PROFILE = parse_profile(
    {
        "state": "s",
        "pending": ["p"],
        "poll_hint": "hint",
        "next_check_at": "next",
        "hint_headers": {"X-Poll-Interval": "s"},
    }
)


@pytest.mark.parametrize(
    ("attempt", "raw"), [(0, 5.0), (1, 10.0), (4, 80.0), (5, 120.0), (64, 120.0), (10_000, 120.0)]
)
def test_backoff_doubles_then_clamps_without_overflow(attempt: int, raw: float) -> None:
    """raw = min(120, 5 * 2**attempt); attempt 10,000 gives the cap, never an overflow."""
    assert backoff_raw_s(attempt, base_delay_s=5, max_delay_s=120) == raw


def test_backoff_jitter_is_uniform_between_half_and_full() -> None:
    """The drawn delay lies in [0.5 * raw, raw] and uses the whole range."""
    rng = random.Random(7)
    draws = [backoff_delay_s(2, base_delay_s=5, max_delay_s=120, rng=rng) for _ in range(2000)]
    assert min(draws) >= 10
    assert max(draws) <= 20
    assert min(draws) < 10.5
    assert max(draws) > 19.5


def test_hint_jitter_is_upward_only_and_small() -> None:
    """A hint of 120 s is waited at least 120 s and at most 132 s."""
    rng = random.Random(3)
    draws = [hinted_delay_s(120, jitter=0.1, rng=rng) for _ in range(1000)]
    assert min(draws) >= 120
    assert max(draws) <= 132


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("4", 4.0), (" 120 ", 120.0), ("0", 0.0), ("1.5", 1.5), ("0.25", 0.25)],
)
def test_retry_after_delay_seconds(value: str, seconds: float) -> None:
    """RFC 9110 §10.2.3 delay-seconds are SECONDS (4 means 4 s); a decimal 1.5 means 1.5 s."""
    assert parse_retry_after(value, now=START) == seconds


def test_retry_after_http_date_uses_the_given_now() -> None:
    """An IMF-fixdate Retry-After is measured from the observation time handed in."""
    when = format_datetime(START + timedelta(seconds=90), usegmt=True)
    assert parse_retry_after(when, now=START) == 90.0
    assert parse_retry_after(when, now=START + timedelta(seconds=200)) == 0.0


@pytest.mark.parametrize(
    "value",
    [
        "Thu, 01 Jan 2026 12:01:30 GMT",
        "Thursday, 01-Jan-26 12:01:30 GMT",
        "Thu Jan  1 12:01:30 2026",
    ],
    ids=["imf-fixdate", "rfc-850", "asctime"],
)
def test_retry_after_accepts_all_three_http_date_forms(value: str) -> None:
    """RFC 9110 §5.6.7: IMF-fixdate, the obsolete RFC 850 form and asctime all parse."""
    assert parse_retry_after(value, now=START) == 90.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2, 30", 30.0),
        ("30, 2", 30.0),
        ("1.5, 1", 1.5),
        ("5, Thu, 01 Jan 2026 12:01:30 GMT", 90.0),
        ("Thu, 01 Jan 2026 12:01:30 GMT, Thu, 01 Jan 2026 12:00:10 GMT", 90.0),
        ("Thu Jan  1 12:01:30 2026, 3", 90.0),
        ("soon, 7", 7.0),
    ],
)
def test_repeated_retry_after_headers_give_the_largest_valid_value(
    value: str, seconds: float
) -> None:
    """Two Retry-After headers arrive joined ("2, 30"): the client waits the longest asked."""
    assert parse_retry_after(value, now=START) == seconds


@pytest.mark.parametrize(
    "value",
    [
        "1000abc",
        "soon",
        "-5",
        "",
        "Mon, 99 Foo 2026",
        ".5",
        "1.",
        "\uff11\uff12",
        "-5, soon",
        "Thu, 01 Jan 2026 12:01:30 EST",
        "Thu, 01 Jan 2026 12:01:30 GMT junk",
    ],
)
def test_malformed_retry_after_is_rejected(value: str) -> None:
    """Values that are neither delay-seconds nor an HTTP-date are refused, not guessed."""
    with pytest.raises(ValueError, match="neither delay-seconds nor an HTTP-date"):
        parse_retry_after(value, now=START)


@pytest.mark.parametrize(
    ("value", "origin"),
    [
        ("30", "Retry-After header"),
        ("2, 30", "Retry-After header '2, 30' (largest of 2 values)"),
        ("2, soon", "Retry-After header '2, soon' (largest of 1 value; ignored 'soon')"),
    ],
)
def test_the_hint_says_which_retry_after_value_was_read(value: str, origin: str) -> None:
    """A joined Retry-After is recorded with how many values it held and which were ignored."""
    hint, invalid = read_hints({"retry-after": value}, None, PROFILE, now=START)
    assert invalid == ()
    assert hint is not None
    assert hint.origin == origin


def _hint(headers: dict[str, str], body: object = None) -> tuple[object, list[str]]:
    reading = PROFILE.read(body) if body is not None else None  # type: ignore[arg-type]
    hint, invalid = read_hints(headers, reading, PROFILE, now=START)
    return hint, [bad.origin for bad in invalid]


@pytest.mark.parametrize(
    ("headers", "body", "delay", "source"),
    [
        ({"retry-after-ms": "1500", "retry-after": "9"}, None, 1.5, "provider_retry_after"),
        ({"x-ms-retry-after-ms": "250", "retry-after": "9"}, None, 0.25, "provider_retry_after"),
        ({"retry-after": "9", "x-poll-interval": "3"}, {"hint": 2}, 9.0, "provider_retry_after"),
        ({"x-poll-interval": "3"}, {"hint": 2}, 3.0, "provider_poll_hint"),
        ({}, {"hint": 2, "next": "2026-01-01T12:01:00Z"}, 2.0, "provider_poll_hint"),
        ({}, {"next": "2026-01-01T12:01:00Z"}, 60.0, "provider_poll_hint"),
    ],
)
def test_hint_precedence(headers: dict[str, str], body: object, delay: float, source: str) -> None:
    """ms headers, then Retry-After, then profile headers, then poll_hint, then next_check_at."""
    hint, invalid = _hint(headers, body)
    assert invalid == []
    assert hint is not None
    assert (hint.delay_s, hint.source) == (delay, DelaySource(source))  # type: ignore[attr-defined]


def test_invalid_hint_is_recorded_and_the_next_one_applies() -> None:
    """An unparsable hint is reported and skipped; the next valid one in precedence wins."""
    hint, invalid = _hint({"retry-after": "soon"}, {"hint": -3, "next": "2026-01-01T12:00:10Z"})
    assert invalid == ["Retry-After header", "body poll_hint"]
    assert hint is not None
    assert hint.delay_s == 10.0  # type: ignore[attr-defined]


def test_no_valid_hint_gives_none() -> None:
    """With only invalid hints, there is no hint: local backoff applies."""
    hint, invalid = _hint({"retry-after-ms": "abc"}, {"hint": "later"})
    assert hint is None
    assert invalid == ["retry-after-ms header", "body poll_hint"]
