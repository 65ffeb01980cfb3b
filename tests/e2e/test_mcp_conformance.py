"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, run on
Node 22 from the npm registry) against ``waitbound mcp --transport http``.

Every server scenario that applies to what waitbound offers must pass. The others
test fixtures of the suite's reference server that waitbound has no reason to carry
(tools named ``test_image_content``…, resources under ``test://``, prompts, logging,
completion, sampling and elicitation during a tool call); each is listed in
:data:`NOT_APPLICABLE` with why, and a test checks that the two lists together are
the suite's whole list, so a scenario a new suite version adds is not missed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.mcp_tasks import HERE, HttpServer, npm_install

pytestmark = pytest.mark.e2e

APPLIES = (
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "server-sse-multiple-streams",
    "resources-list",
    "dns-rebinding-protection",
)
"""The scenarios that apply: each must pass."""

NOT_APPLICABLE = {
    "logging-set-level": "no logging capability (the server logs to stderr only)",
    "completion-complete": "no completion capability: no prompt or template argument to complete",
    "tools-call-image": "needs the reference server's test_image_content tool",
    "tools-call-audio": "needs the reference server's test_audio_content tool",
    "tools-call-embedded-resource": "needs the reference server's embedded-resource tool",
    "tools-call-mixed-content": "needs the reference server's mixed-content tool",
    "tools-call-with-logging": "needs the reference server's logging tool and logging",
    "tools-call-with-progress": "needs a tool that reports progress (await_job waits silently)",
    "tools-call-sampling": "no tool asks the client for sampling",
    "tools-call-elicitation": "no tool elicits during a call (a task's input_required does)",
    "elicitation-sep1034-defaults": "needs the reference server's elicitation tool",
    "elicitation-sep1330-enums": "needs the reference server's elicitation tool",
    "resources-read-text": "reads the reference server's test://static-text",
    "resources-read-binary": "reads the reference server's test://static-binary",
    "resources-templates-read": "reads the reference server's test://template/{id}/data",
    "resources-subscribe": "no resource subscriptions (a story is read when wanted)",
    "resources-unsubscribe": "no resource subscriptions",
    "prompts-list": "no prompts (the capability is not advertised)",
    "prompts-get-simple": "no prompts",
    "prompts-get-with-args": "no prompts",
    "prompts-get-embedded-resource": "no prompts",
    "prompts-get-with-image": "no prompts",
    "json-schema-2020-12": "needs the reference server's json_schema_2020_12_tool",
    "server-sse-polling": "needs the reference server's test_reconnection tool",
}
"""The scenarios that do not apply, and why."""

CONFIG = """
[providers.reports]
base_url = "http://127.0.0.1:9"
profile = "next-action"
submit_path = "/jobs"
"""


def conformance(*args: str) -> subprocess.CompletedProcess[str]:
    npm_install()
    bin_dir = HERE / "node_modules" / ".bin"
    node = bin_dir / "node"  # Node 22 from the npm registry (the suite needs >= 22)
    script = HERE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    return subprocess.run(
        [str(node), str(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE,
        check=False,
    )


def test_the_scenario_lists_cover_the_whole_suite() -> None:
    listed = conformance("list", "--server")
    assert listed.returncode == 0, listed.stderr
    names = {
        line.split()[1] for line in listed.stdout.splitlines() if line.strip().startswith("- ")
    }
    assert names == set(APPLIES) | set(NOT_APPLICABLE)
    assert not set(APPLIES) & set(NOT_APPLICABLE)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> object:
    folder = tmp_path_factory.mktemp("conformance")
    config = folder / "waitbound-mcp.toml"
    config.write_text(CONFIG)
    # the suite sends no token: a loopback server without tokens (each session its own)
    with HttpServer(config, str(folder / "mcp.db"), {}, no_auth=True) as running:
        yield running


@pytest.mark.parametrize("scenario", APPLIES)
def test_every_scenario_that_applies_passes(
    server: HttpServer, scenario: str, tmp_path: Path
) -> None:
    ran = conformance("server", "--url", server.url, "--scenario", scenario, "-o", str(tmp_path))
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert "0 failed" in ran.stdout
