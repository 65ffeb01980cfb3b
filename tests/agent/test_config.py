"""The MCP server's configuration file: every bad value is one line naming its key."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from waitbound import UsageError
from waitbound.mcp import load_config, parse_config


def provider(**changes: Any) -> dict[str, Any]:
    return {"base_url": "https://api.example.com/v1/", "profile": "next-action", **changes}


def parse(data: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    return parse_config(data, base_dir=Path("/cfg"), environ=env or {})


def test_a_minimal_provider_gets_safe_defaults() -> None:
    config = parse({"providers": {"reports": provider(submit_path="/runs")}})
    reports = config.providers["reports"]
    assert reports.base_url == "https://api.example.com/v1"
    assert reports.allowed_paths == ("/runs",)
    assert reports.allowed_methods == ("POST",)
    assert reports.allow_cancel is False
    assert reports.label == "mcp:reports"
    assert (config.default_wait_seconds, config.max_wait_seconds) == (25.0, 50.0)


def test_headers_take_secrets_from_the_environment_only() -> None:
    data = {"providers": {"r": provider(headers={"Authorization": "Bearer ${TOKEN}"})}}
    config = parse(data, {"TOKEN": "abc123def"})
    assert config.providers["r"].headers == {"Authorization": "Bearer abc123def"}
    assert config.secrets() == ["Bearer abc123def", "abc123def"]
    short = {"providers": {"r": provider(headers={"X-Api-Version": "${V}", "Accept": "x/y"})}}
    assert parse(short, {"V": "2"}).secrets() == []  # too short to redact without mangling
    with pytest.raises(UsageError, match="needs the environment variable TOKEN, which is not set"):
        parse(data)


def test_a_relative_store_is_read_from_the_config_folder() -> None:
    config = parse({"server": {"store": "jobs.db"}, "providers": {"r": provider()}})
    assert config.store == str(Path("/cfg/jobs.db"))
    dsn = "postgresql://postgres@127.0.0.1:5432/test"
    assert parse({"server": {"store": dsn}, "providers": {"r": provider()}}).store == dsn


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "no \\[providers.NAME\\] table"),
        ({"providers": {"r": provider()}, "extra": 1}, "unknown key 'extra'"),
        ({"providers": {"r": provider(colour="red")}}, "unknown key 'colour'"),
        ({"providers": {"r b": provider()}}, "provider name 'r b'"),
        ({"providers": {"r": provider(base_url="ftp://x")}}, "providers.r.base_url"),
        ({"providers": {"r": provider(profile="no-such")}}, "providers.r.profile"),
        ({"providers": {"r": provider(submit_path="runs")}}, "must be a path starting with"),
        ({"providers": {"r": provider(allowed_paths=["/a/../b"])}}, "no '..'"),
        ({"providers": {"r": provider(allowed_methods=["TRACE"])}}, "'TRACE' is not one of"),
        ({"providers": {"r": provider(allow_cancel="yes")}}, "allow_cancel must be true"),
        ({"providers": {"r": provider(profile=None)}}, "providers.r.profile is missing"),
        ({"providers": {"r": provider(base_url="https://x.example/?k=1")}}, "no query"),
        ({"providers": {"r": provider(headers={"Bad Header": "x"})}}, "not a valid header name"),
        ({"providers": {"r": provider(headers={"A": " x "})}}, "printable ASCII"),
        ({"providers": {"r": provider(headers={"A": "Bearer ü"})}}, "printable ASCII"),
        ({"providers": {"r": provider(policy={"deadline_s": -1})}}, "providers.r.policy"),
        ({"providers": {"r": provider(policy={"speed": 1})}}, "unknown key 'speed'"),
        (
            {"server": {"default_wait_seconds": 60}, "providers": {"r": provider()}},
            "must not exceed",
        ),
        ({"server": {"max_wait_seconds": 0}, "providers": {"r": provider()}}, "max_wait"),
        ({"server": {"max_answer_chars": 10}, "providers": {"r": provider()}}, ">= 200"),
    ],
)
def test_bad_values_name_their_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        parse(data)
    assert "\n" not in str(caught.value)


def test_load_config_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[providers.r\n")
    with pytest.raises(UsageError, match=f"config file {path}: not valid TOML"):
        load_config(path)
    with pytest.raises(UsageError, match="cannot read it"):
        load_config(tmp_path / "missing.toml")


def test_a_policy_whose_budget_and_deadline_disagree_loads_without_a_python_warning() -> None:
    """The config loads quietly: `waitbound mcp` says the disagreement itself, as one
    ``waitbound: warning:`` line naming the provider (not Python's two-line warning
    with a source line on the server's stderr)."""
    slow = provider(
        policy={"deadline_s": 600, "max_requests": 3, "base_delay_s": 1, "max_delay_s": 1}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = parse({"providers": {"r": slow}})
    assert config.providers["r"].policy.max_requests == 3
