"""Profiles: validation when loaded, and classification by lookup only."""

from __future__ import annotations

from pathlib import Path

import pytest

from waitbound import Classification, ProfileError, load_profile, parse_profile

BASIC = {"state": "status", "pending": ["running"], "succeeded": ["done"], "failed": ["failed"]}


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({**BASIC, "colour": "x"}, "unknown key 'colour'"),
        ({"pending": ["a"]}, "no state source"),
        ({**BASIC, "failed": ["done"]}, "in both succeeded and failed"),
        ({"state": "status"}, "no value list"),
        ({**BASIC, "state": "status[?"}, "not a valid JMESPath"),
        ({**BASIC, "pending": "running"}, "must be a list"),
        ({**BASIC, "pending": [{"a": 1}]}, "state values are strings"),
        ({**BASIC, "http_status_states": {"2x": "pending"}}, "not an HTTP status"),
        ({**BASIC, "http_status_states": {"204": "done"}}, "expected one of"),
        ({**BASIC, "counts": {"ok": "a"}}, "counts has unknown key"),
        ({**BASIC, "hint_headers": {"X-Poll": "minutes"}}, "expected 's', 'ms' or 'epoch_s'"),
        ({**BASIC, "result_id": "file_id"}, "needs result_url_template"),
        ({**BASIC, "result_url_template": "/files/x"}, "{result_id}"),
        ({**BASIC, "require_on_success": "out"}, "must be a list"),
        ([1, 2], "expected an object"),
    ],
)
def test_invalid_profile_is_refused_with_one_line(table: object, words: str) -> None:
    """A bad table is refused when loaded, with one line naming the problem."""
    with pytest.raises(ProfileError) as caught:
        parse_profile(table, name="p")
    message = str(caught.value)
    assert words in message
    assert "\n" not in message


def test_true_and_one_are_different_state_values() -> None:
    """State lookup compares JSON types: ``true`` never matches ``1`` (nor "true")."""
    profile = parse_profile({"state": "done", "pending": [False], "succeeded": [True]})
    assert profile.read({"done": True}).classification is Classification.SUCCEEDED
    assert profile.read({"done": 1}).classification is Classification.UNKNOWN
    assert profile.read({"done": "true"}).classification is Classification.UNKNOWN


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"status": "running"}, Classification.PENDING),
        ({"status": "done"}, Classification.SUCCEEDED),
        ({"status": "failed"}, Classification.FAILED),
        ({"status": "error"}, Classification.UNKNOWN),
        ({"status": "Running"}, Classification.UNKNOWN),
        ({"status": ["running"]}, Classification.UNKNOWN),
        ({"other": 1}, None),
    ],
)
def test_state_is_classified_by_lookup_only(body: object, expected: object) -> None:
    """A value in no list is unknown (nothing guessed from its name); no state reads as None."""
    assert parse_profile(BASIC).read(body).classification is expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"done": False}, Classification.PENDING),
        ({"name": "op"}, Classification.PENDING),
        ({"done": True, "response": {"x": 1}}, Classification.SUCCEEDED),
        ({"done": True, "error": {"code": 3, "message": "bad"}}, Classification.FAILED),
        ({"done": True, "error": {"code": 1, "message": "canceled"}}, Classification.CANCELED),
        ({"done": "yes"}, Classification.UNKNOWN),
    ],
)
def test_aip151_done_error_response(body: object, expected: object) -> None:
    """AIP-151: done=true with an error fails, without one succeeds; not done is pending."""
    profile = parse_profile({"done": "done", "error": "error", "result": "response"})
    assert profile.read(body).classification is expected  # type: ignore[arg-type]


def test_reading_collects_named_fields() -> None:
    """Job id, result, error, progress, counts, hints and required fields are read by path."""
    profile = parse_profile(
        {
            **BASIC,
            "job_id": "id",
            "result": "out",
            "progress": "pct",
            "poll_hint": "wait",
            "require_on_success": ["out.url", "out.size"],
            "counts": {"succeeded": "n.ok", "failed": ["n.bad", "n.expired"], "total": "n.all"},
        }
    )
    reading = profile.read(
        {
            "status": "done",
            "id": 42,
            "out": {"url": "u"},
            "pct": 100,
            "wait": 3,
            "n": {"ok": 5, "bad": 1, "expired": 2, "all": 8},
        }
    )
    assert reading.job_id == "42"
    assert reading.result == {"url": "u"}
    assert reading.missing_required == ("out.size",)
    assert reading.counts is not None
    assert (reading.counts.succeeded, reading.counts.failed, reading.counts.total) == (5, 3, 8)
    assert reading.poll_hint_s == 3


def test_throttled_expression_tolerates_missing_fields() -> None:
    """A throttled expression over a body without its fields reads false, not an error."""
    profile = parse_profile({**BASIC, "throttled": 'contains(`["Throttling"]`, Error.Code)'})
    assert profile.read({"Error": {"Code": "Throttling"}}).throttled
    assert not profile.read({"status": "running"}).throttled
    assert not profile.read("not an object").throttled


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_profile_files_load_in_json_and_toml(tmp_path: Path, suffix: str) -> None:
    """Profiles load from JSON and TOML files and take their name from the file."""
    path = tmp_path / f"acme{suffix}"
    if suffix == ".json":
        path.write_text('{"state": "s", "pending": ["p"], "succeeded": ["ok"]}')
    else:
        path.write_text('state = "s"\npending = ["p"]\nsucceeded = ["ok"]\n')
    profile = load_profile(path)
    assert profile.name == "acme"
    assert profile.classify_value("ok") is Classification.SUCCEEDED


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("p.json", "{not json", "not valid JSON"),
        ("p.toml", "state = ", "not valid TOML"),
        ("missing.json", None, "cannot read it"),
    ],
)
def test_unreadable_profile_file_is_one_line(
    tmp_path: Path, name: str, text: str | None, words: str
) -> None:
    """An unreadable or unparsable profile file gives one line naming the file."""
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert words in str(caught.value)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_schema_key_is_accepted_and_ignored() -> None:
    """A "$schema" line (for an editor) is accepted, ignored, and not kept in the source."""
    profile = parse_profile({"$schema": "./profile.schema.json", **BASIC}, name="p")
    assert profile.source == BASIC
    assert profile.classify_value("done") is Classification.SUCCEEDED
    with pytest.raises(ProfileError, match=r"^profile p: \$schema must be a string"):
        parse_profile({"$schema": 1, **BASIC}, name="p")


def test_a_huge_or_deeply_nested_profile_file_is_one_clear_line(tmp_path: Path) -> None:
    """A profile file over 1 MiB is refused unread; JSON or TOML nested 100,000 deep is
    refused in one line, never a RecursionError."""
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * (1024 * 1024 + 1))
    with pytest.raises(ProfileError, match="larger than 1024 KiB"):
        load_profile(huge)
    deep = tmp_path / "deep.json"
    deep.write_text('{"state": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ProfileError, match="nested too deeply"):
        load_profile(deep)
    deep_toml = tmp_path / "deep.toml"
    deep_toml.write_text("state = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ProfileError, match=r"nested too deeply|not valid TOML"):
        load_profile(deep_toml)


@pytest.mark.parametrize("template", ["{base_url}/cancel", "{status_url}/{id}", "{}/cancel"])
def test_a_cancel_template_naming_what_is_never_filled_in_is_refused(template: str) -> None:
    """A placeholder other than ``{job_id}`` and ``{status_url}`` would stay as it is and
    make no URL, so the cancel would fail only when a person asks for it: the profile is
    refused when it is loaded, in one line naming the placeholder."""
    table = {
        "state": "status", "pending": ["running"], "succeeded": ["done"],
        "cancel": {"url_template": template},
    }  # fmt: skip
    with pytest.raises(ProfileError, match=r"cancel\.url_template names \{") as refused:
        parse_profile(table)
    assert "\n" not in str(refused.value)
    table["cancel"] = {"url_template": "{status_url}/cancel/{job_id}"}
    assert parse_profile(table).cancel.url_template == "{status_url}/cancel/{job_id}"
