"""The CLI's pure parts, without a terminal: story grouping, the live line, credentials."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import waitbound
from waitbound import AuditEvent, Policy, Record, UsageError
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)
from waitbound.cli._credentials import (
    OriginCredentials,
    from_flags,
    load_credentials,
    parse_origin,
)
from waitbound.cli._render import (
    LiveStatus,
    StoryGrouper,
    group_line,
    grouped,
    status_line,
    worker_summary_lines,
)

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def event(kind: str, summary: str, at_s: float = 0, **data: object) -> AuditEvent:
    base = {"state": "running", "requests_used": 1, "max_requests": 30, "phase": "waiting"}
    return AuditEvent(
        at=T0 + timedelta(seconds=at_s),
        kind=kind,
        summary=summary,
        data={**base, "next_poll_at": None, "delay_source": None, **data},  # type: ignore[dict-item]
    )


NEXT = (T0 + timedelta(seconds=5)).isoformat()
STORY = [
    event("created", "waiting on http://x/status", requests_used=0, next_poll_at=T0.isoformat()),
    event("reserved", "reserved status request 1 of 30 (timeout 30s); to http://y/s without "
          "the caller's credentials (another origin)", 1, request="status"),
    event("observed", "status request 1 answered HTTP 200: state \"running\" (pending)", 1.1),
    event("scheduled", "next request in 4s (local_backoff)", 1.1, next_poll_at=NEXT,
          delay_source="local_backoff"),
    event("reserved", "reserved status request 2 of 30 (timeout 30s)", 5, request="status"),
    event("observed", "status request 2 answered HTTP 200: state \"done\" (succeeded)", 5.1),
    event("finished", "outcome succeeded", 5.1, outcome="succeeded"),
]  # fmt: skip


def test_story_groups_each_requests_reserved_observed_scheduled_into_one_line() -> None:
    """reserved + observed + scheduled become one line; other events stay alone."""
    assert grouped(STORY) == [(0, 0), (1, 3), (4, 5), (6, 6)]
    line = group_line(STORY[1:4])
    assert line.startswith("2026-01-01 12:00:01.000Z  request ")
    assert "status request 1 answered HTTP 200" in line
    assert "without the caller's credentials" in line
    assert "next request in 4s (local_backoff)" in line
    assert "next 12:00:05.000Z (local_backoff)" in line
    assert "requests 1/30" in line
    assert "reserved status request" not in line


def test_streamed_story_matches_the_grouping_and_flushes_an_open_request() -> None:
    """StoryGrouper gives the same lines as grouped(); an unanswered request is flushed."""
    grouper = StoryGrouper()
    lines = [line for e in STORY for line in grouper.push(e)] + grouper.flush()
    assert lines == [group_line(STORY[a : b + 1]) for a, b in grouped(STORY)]
    every = StoryGrouper(every_event=True)
    assert len([line for e in STORY for line in every.push(e)]) == len(STORY)
    hanging = StoryGrouper()
    assert hanging.push(STORY[1]) == []
    assert len(hanging.flush()) == 1


def test_live_status_line_counts_down_to_the_next_poll() -> None:
    """The live line: state, requests used of the budget, seconds to the next poll."""
    status = LiveStatus(operation_id="op-1")
    for e in STORY[:4]:
        status = status.after(e)
    line = status_line(status, T0 + timedelta(seconds=2.5))
    assert line == (
        'operation op-1 | state "running" | requests 1/30 | next poll in 2.5s (local_backoff)'
    )
    sending = status.after(STORY[4])
    assert "sending status request" in status_line(sending, T0)
    done = sending.after(STORY[5]).after(STORY[6])
    assert "outcome succeeded" in status_line(done, T0)


def test_worker_summary_lines_name_outcomes_and_errors() -> None:
    """The text summary: steps, operations finished by outcome, still waiting, errors."""
    lines = worker_summary_lines(
        {
            "stopped": "idle",
            "steps": 9,
            "finished": {"succeeded": 2, "failed": 1},
            "still_waiting": 0,
            "errors": ["boom"],
        }
    )
    assert lines[0] == (
        "worker stopped (idle) after 9 steps: 3 operations finished (failed 1, succeeded 2); "
        "0 still waiting"
    )
    assert lines[1] == "error: boom"


# --- credentials --------------------------------------------------------------------


def record(status_url: str, submit_url: str | None = None) -> Record:
    return Record(
        contract=Contract(
            operation_id="op-1",
            profile=waitbound.parse_profile({"state": "s", "pending": ["p"]}, name="t"),
            policy=Policy(),
            created_at=T0,
        ),
        submission=Submission(status_url=status_url, submit_url=submit_url),
        schedule=Schedule(deadline_at=T0 + timedelta(minutes=1), next_poll_at=T0),
    )


@pytest.mark.parametrize(
    ("text", "origin"),
    [
        ("https://API.example.com", ("https", "api.example.com", 443)),
        ("https://api.example.com/", ("https", "api.example.com", 443)),
        ("http://127.0.0.1:8080", ("http", "127.0.0.1", 8080)),
        ("http://[::1]", ("http", "::1", 80)),
    ],
)
def test_origins_are_normalised_with_default_ports(text: str, origin: object) -> None:
    """Scheme and host lower-cased, the scheme's default port filled in."""
    assert parse_origin(text, "--header-for") == origin


@pytest.mark.parametrize(
    "text",
    [
        "api.example.com",
        "ftp://x",
        "https://x/v1",
        "https://x?q=1",
        "https://u:p@x",
        "https://x:99999",
    ],
)
def test_a_bad_origin_is_one_line_naming_the_flag(text: str) -> None:
    """Not scheme://host[:port]: UsageError naming where it came from."""
    with pytest.raises(UsageError, match=r"--header-for: .* is not an origin"):
        parse_origin(text, "--header-for")


def test_each_record_gets_the_headers_of_the_origin_it_named() -> None:
    """The submit URL's origin, else the status URL's; no match: no headers at all."""
    creds = from_flags(
        [("https://a.example", "Authorization: Bearer A"), ("http://b.example:81", "X-K: b")]
    )
    assert creds(record("https://a.example:443/s")) == {"Authorization": "Bearer A"}
    assert creds(record("https://c.example/s", submit_url="https://a.example/jobs")) == {
        "Authorization": "Bearer A"
    }
    assert creds(record("http://b.example:81/s")) == {"X-K": "b"}
    assert creds(record("http://b.example/s")) == {}
    assert creds(record("https://elsewhere.example/s")) == {}


def test_a_header_given_twice_for_one_origin_is_refused() -> None:
    """Two values for one header and origin: refused, naming both."""
    with pytest.raises(UsageError, match="'authorization' for https://a:443 is given twice"):
        from_flags([("https://a", "Authorization: x"), ("https://a/", "authorization: y")])


def test_credentials_file_expands_environment_variables(tmp_path: Path) -> None:
    """[[credentials]] entries: origin and headers, ${NAME} taken from the environment."""
    path = tmp_path / "c.toml"
    path.write_text(
        '[[credentials]]\norigin = "https://api.example.com"\n'
        'headers = { Authorization = "Bearer ${TOKEN}", X-Team = "t1" }\n'
        '[[credentials]]\norigin = "http://127.0.0.1:9000"\nheaders = { X-Api-Key = "${KEY}" }\n',
        encoding="utf-8",
    )
    creds = load_credentials(path, environ={"TOKEN": "tok-123", "KEY": "k-456"})
    assert creds == OriginCredentials(
        {
            ("https", "api.example.com", 443): {"Authorization": "Bearer tok-123", "X-Team": "t1"},
            ("http", "127.0.0.1", 9000): {"X-Api-Key": "k-456"},
        }
    )


ENTRY = '[[credentials]]\norigin = "https://a"\n'


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[[credentials]\n", "not valid TOML"),
        ('origin = "https://a"\n', "unknown key 'origin' at the top level"),
        ("credentials = []\n", "no [[credentials]] entry"),
        ('[[credentials]]\nheaders = { A = "b" }\n', "credentials[0].origin must be text"),
        ('[[credentials]]\norigin = "https://a/x"\nheaders = { A = "b" }\n', "[0].origin: "),
        (ENTRY, "credentials[0].headers must be a table"),
        (ENTRY + "headers = { A = 1 }\n", "credentials[0].headers.A must be text"),
        (ENTRY + 'headers = { A = "${NOPE_UNSET}" }\n',
         "credentials[0].headers.A needs the environment variable NOPE_UNSET"),
        (ENTRY + 'headers = { "A B" = "x" }\n', "not a valid HTTP field"),
        (ENTRY + 'headers = { Host = "x" }\n', "set by the HTTP client"),
        (ENTRY + 'headers = { A = "sécret-v" }\n', "printable ASCII"),
        (ENTRY + 'headers = { A = "x" }\ncolour = 1\n', "credentials[0]: unknown key 'colour'"),
        (ENTRY + 'headers = { A = "x" }\n[[credentials]]\norigin = "https://a:443"\n'
         'headers = { a = "y" }\n', "given twice"),
    ],
)  # fmt: skip
def test_a_bad_credentials_file_is_one_line_naming_file_and_key(
    tmp_path: Path, text: str, words: str
) -> None:
    """Every bad value: one UsageError line naming the file and the key, never a value."""
    path = tmp_path / "creds.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError) as caught:
        load_credentials(path, environ={})
    message = str(caught.value)
    assert message.startswith(f"credentials file {path}: ")
    assert words in message
    assert "\n" not in message
    assert "sécret" not in message
