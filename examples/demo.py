"""`make demo`: the provider simulator, a real `waitbound wait` on a slow job, its audit story.

Runs on the embedded default store kind (SQLite), in ./.demo so nothing else is touched.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE.parent / ".demo"
WAITBOUND = [sys.executable, "-m", "waitbound"]


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def show(args: list[str]) -> list[str]:
    print("$ waitbound " + " ".join(shlex.quote(a) for a in args), flush=True)
    return [*WAITBOUND, *args]


def main() -> int:
    WORK.mkdir(exist_ok=True)
    store = str(WORK / "waitbound.db")
    operation_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    say("starting the provider simulator on 127.0.0.1 (a transcode that takes ~6 s)")
    simulator = subprocess.Popen(
        show(["sim", str(HERE / "slow-transcode.json"), "--port", "0"]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert simulator.stdout is not None
        line = simulator.stdout.readline()
        print(line.rstrip(), flush=True)
        base_url = line.split()[-1]
        say("waiting on its status endpoint: progress on stderr, the outcome on stdout")
        wait = subprocess.run(
            show(
                [
                    "wait",
                    f"{base_url}/status",
                    "--profile",
                    str(HERE / "transcode-profile.json"),
                    "--result-url",
                    f"{base_url}/result",
                    "--deadline",
                    "60s",
                    "--base-delay",
                    "0.5s",
                    "--max-delay",
                    "3s",
                    "--operation-id",
                    operation_id,
                    "--store",
                    store,
                    "--progress",
                ]
            ),
            check=False,
        )
        say(f"the outcome's exit code: {wait.returncode} (0 = succeeded)")
        say("the durable record and its audit story (hash-chained)")
        subprocess.run(show(["show", operation_id, "--store", store]), check=True)
        return wait.returncode
    finally:
        simulator.terminate()
        simulator.wait(timeout=10)
        say("simulator stopped")


if __name__ == "__main__":
    sys.exit(main())
