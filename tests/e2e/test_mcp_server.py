"""`waitbound mcp` as a real subprocess: stdio (the SDK's stdio client) and streamable HTTP."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.e2e.mcp_tasks import WAIT_S, HttpServer, http_client
from tests.e2e.runner import cli
from waitbound.sim import Simulator, parse_scenario

TOKEN = "Bearer sk-stdio-93ab"

CONFIG = """
[server]
default_wait_seconds = 15
max_wait_seconds = 20

[providers.reports]
base_url = "{base_url}"
profile = "next-action"
submit_path = "/jobs"
headers = {{ Authorization = "${{REPORTS_TOKEN}}" }}
policy = {{ deadline_s = 30, max_requests = 15, base_delay_s = 0.1, max_delay_s = 0.5 }}
"""


def _scenario() -> Any:
    path = Path(__file__).parents[2] / "src/waitbound/profiles/scenarios/next-action.json"
    return parse_scenario(json.loads(path.read_text()), source=str(path))


def _text(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


@pytest.mark.e2e
def test_every_tool_over_stdio_against_the_simulator(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    with Simulator(_scenario()) as sim:
        config = tmp_path / "waitbound-mcp.toml"
        config.write_text(CONFIG.format(base_url=sim.base_url))
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "waitbound", "mcp", "--config", str(config), "--store", str(db)],
            env={**os.environ, "REPORTS_TOKEN": TOKEN},
        )

        async def session() -> dict[str, Any]:
            seen: dict[str, Any] = {}
            async with Client(params) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                seen["tools"] = names
                started = await client.call_tool("start_job", {"provider": "reports"})
                seen["start"] = started.structured_content
                operation_id = started.structured_content["operation_id"]
                for tool, args in [
                    ("await_job", {"operation_id": operation_id}),
                    ("check_job", {"operation_id": operation_id}),
                    ("list_jobs", {}),
                    ("get_result", {"operation_id": operation_id}),
                    ("cancel_job", {"operation_id": operation_id}),
                    ("start_job", {"provider": "reports", "path": "/etc/passwd"}),
                    (
                        "request_extension",
                        {"operation_id": operation_id, "minutes": 1, "checks": 1, "why": "w"},
                    ),
                ]:
                    result = await client.call_tool(tool, args)
                    seen[f"{tool}{len(seen)}"] = (result.is_error, result.structured_content)
                    seen.setdefault("texts", []).append(_text(result))
            return seen

        seen = anyio.run(session)
    assert seen["tools"] == {
        "start_job",
        "await_job",
        "check_job",
        "list_jobs",
        "get_result",
        "cancel_job",
        "request_extension",
    }
    assert seen["start"]["done"] is False
    assert "NOT complete" in seen["start"]["message"]
    answers = [v for k, v in seen.items() if k[-1].isdigit()]
    (awaited_error, awaited), (_, checked), (_, listed), (_, result), cancel, bad_path, more = (
        answers
    )
    assert not awaited_error
    assert awaited["done"] is True
    assert awaited["status"] == "succeeded"
    assert checked["status"] == "succeeded"
    assert listed["operations"][0]["operation_id"] == awaited["operation_id"]
    assert "Quarterly summary" in result["text"]
    assert cancel[0] is True  # finished, and this provider does not let agents cancel
    assert bad_path[0] is True
    assert "outside the allowed paths" in seen["texts"][-2]
    assert more[0] is True  # finished: an agent may not ask for more time on it
    assert "nothing to extend" in seen["texts"][-1]
    assert all("sk-stdio" not in text for text in seen["texts"])
    assert sim.count("submit") == 1
    assert sim.count("result") == 2  # next-action's result answers 409 once, then once
    for stored in tmp_path.glob("mcp.db*"):  # the database and its write-ahead log
        assert b"sk-stdio" not in stored.read_bytes()


@pytest.mark.e2e
def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[providers.reports]\nbase_url = "https://x.example"\nprofile = "nope"\n')
    done = cli("mcp", "--config", str(config), "--store", str(tmp_path / "s.db"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "providers.reports.profile" in done.stderr
    missing = tmp_path / "env.toml"
    missing.write_text(
        '[providers.r]\nbase_url = "https://x.example"\nprofile = "next-action"\n'
        'headers = { Authorization = "Bearer ${NOT_SET_ANYWHERE}" }\n'
    )
    done = cli("mcp", "--config", str(missing), "--store", str(tmp_path / "s.db"))
    assert done.returncode == 2
    assert "NOT_SET_ANYWHERE, which is not set" in done.stderr
    assert not (tmp_path / "s.db").exists()


@pytest.mark.e2e
def test_the_http_transport_serves_the_same_tools(tmp_path: Path) -> None:
    """Once the server listens (its start-up is not timed: a loaded machine may take
    long to import it), one session lists the tools and calls one; any error fails."""
    config = tmp_path / "c.toml"
    config.write_text('[providers.r]\nbase_url = "http://127.0.0.1:9"\nprofile = "next-action"\n')

    async def session(url: str) -> tuple[set[str], Any]:
        with anyio.fail_after(WAIT_S):  # a bound, never a timing check
            async with http_client(url, server.headers) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                listed = await client.call_tool("list_jobs", {})
                return names, listed.structured_content

    with HttpServer(config, str(tmp_path / "h.db"), {}) as server:
        names, listed = anyio.run(session, server.url)
    assert "await_job" in names
    assert listed["operations"] == []
