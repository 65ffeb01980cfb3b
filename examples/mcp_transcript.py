"""An agent's transcript: a 90-second job through the MCP tools, over real stdio.

Starts the provider simulator (a report export that takes ~90 s), runs
``waitbound mcp`` as a subprocess the way an MCP client does, and prints each tool
call and its answer as the model would read them. Used for docs/mcp.md.

    python examples/mcp_transcript.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from waitbound.sim import Simulator, parse_scenario

SCENARIO = {
    "id": "ninety-second-export",
    "endpoints": {
        "submit": [
            {
                "code": 202,
                "body": {"id": "exp_4821", "status": "queued"},
                "headers": {"Location": "{base_url}/status"},
            }
        ],
        "status": [
            {"code": 200, "body": {"id": "exp_4821", "status": "running", "percent": 10}},
            {
                "code": 200,
                "body": {"id": "exp_4821", "status": "running", "percent": 55},
                "after_s": 45,
            },
            {
                "code": 200,
                "body": {
                    "id": "exp_4821",
                    "status": "succeeded",
                    "percent": 100,
                    "output": {"rows": 18250, "file": "exports/q3.csv"},
                },
                "after_s": 90,
            },
        ],
    },
}

CONFIG = """
[providers.exports]
base_url = "{base_url}"
submit_path = "/jobs"
headers = {{ Authorization = "Bearer ${{EXPORTS_TOKEN}}" }}
policy = {{ deadline_s = 600, max_requests = 60, base_delay_s = 5, max_delay_s = 20 }}

[providers.exports.profile]
state = "status"
pending = ["queued", "running"]
succeeded = ["succeeded"]
failed = ["failed"]
job_id = "id"
progress = "percent"
result = "output"
submit = {{ job_id = "id" }}
"""


def show(tool: str, arguments: dict[str, Any], answer: Any, started: float) -> None:
    print(f"\n[{time.monotonic() - started:5.1f} s] → {tool}({json.dumps(arguments)})")
    print(json.dumps(answer, indent=2, ensure_ascii=False))


async def main() -> None:
    with Simulator(parse_scenario(SCENARIO)) as sim, tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "waitbound-mcp.toml"
        config.write_text(CONFIG.format(base_url=sim.base_url))
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "waitbound", "mcp", "--config", str(config), "--store", f"{tmp}/m.db"],
            env={**os.environ, "EXPORTS_TOKEN": "sk-demo"},
        )
        async with Client(params) as client:
            began = time.monotonic()
            arguments: dict[str, Any] = {"provider": "exports", "body": {"quarter": "Q3"}}
            answer = (await client.call_tool("start_job", arguments)).structured_content
            show("start_job", arguments, answer, began)
            assert answer is not None
            arguments = {"operation_id": answer["operation_id"]}
            while not answer["done"]:
                answer = (await client.call_tool("await_job", arguments)).structured_content
                show("await_job", arguments, answer, began)
                assert answer is not None
        print(f"\nstatus requests the provider saw: {sim.count('status')}")


if __name__ == "__main__":
    anyio.run(main)
