"""Webhooks in: verified deliveries stored per second by one ``waitbound serve``.

One ``waitbound serve --no-worker`` process (SQLite store, one Standard Webhooks
receiver) on loopback; a load generator in a second process sends distinct, validly
signed deliveries (signatures made with the ``standardwebhooks`` library beforehand, so
signing costs the generator nothing) over keep-alive connections, one request in
flight per connection. A delivery counts when the answer is ``200`` and the store
holds it afterwards (the figure is checked against the inbox's row count).

The generator writes each pre-built HTTP/1.1 request on an asyncio stream and reads
the answer's head and its ``Content-Length`` body: a general HTTP client (httpx costs
about as much per request as the server being measured) would measure itself.

Usage: ``python -m benchmarks.webhooks_in [--quick] [--repeat N] [--profile]
[--commit-pause DURATION]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from standardwebhooks import Webhook

from benchmarks._common import SPAWN, machine, print_machine, print_table, verdict
from waitbound import SQLiteStore

TARGET = 2_000.0
"""Verified deliveries stored per second by one ``serve`` process (issue 12)."""

SECRET = "whsec_" + base64.b64encode(b"b" * 32).decode()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _requests(count: int, port: int, run: str) -> list[bytes]:
    """*count* distinct signed deliveries as raw HTTP/1.1 requests."""
    hook = Webhook(SECRET)
    now = datetime.now(UTC)
    built = []
    for n in range(count):
        body = json.dumps(
            {"type": "report.completed", "data": {"id": f"job-{run}-{n}", "status": "done"}}
        )
        webhook_id = f"msg_{run}_{n}"
        signature = hook.sign(webhook_id, now, body)
        head = (
            f"POST /webhooks/bench HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body.encode())}\r\n"
            f"webhook-id: {webhook_id}\r\n"
            f"webhook-timestamp: {int(now.timestamp())}\r\n"
            f"webhook-signature: {signature}\r\n\r\n"
        )
        built.append(head.encode() + body.encode())
    return built


async def _connection(port: int, requests: list[bytes], statuses: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for request in requests:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            statuses.append(status)
    finally:
        writer.close()


def _load(port: int, requests: list[bytes], connections: int, out: object) -> None:
    """Send every request (child process); put (seconds, statuses) on *out*."""
    statuses: list[int] = []
    shares = [requests[i::connections] for i in range(connections)]

    async def run() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(_connection(port, share, statuses) for share in shares))
        return time.perf_counter() - start

    seconds = asyncio.run(run())
    out.put((seconds, statuses))  # type: ignore[attr-defined]


def _wait_listening(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"serve exited early ({server.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("serve did not start listening within 30 s")


def measure(
    count: int,
    connections: int,
    *,
    profile_to: Path | None = None,
    commit_pause: str | None = None,
) -> float:
    """Deliveries stored per second in one run (a fresh store and server; *commit_pause*:
    its ``--commit-pause``, ``None`` for the default)."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        store = folder / "store.db"
        SQLiteStore(store).close()  # serve never creates a store
        config = folder / "serve.toml"
        config.write_text(
            f'[webhooks.bench]\nscheme = "standard"\nsecrets = ["{SECRET}"]\njob_id = "data.id"\n'
        )
        token = folder / "token"
        token.write_text("bench-token-" + "x" * 32)
        port = _free_port()
        command = [sys.executable]
        if profile_to is not None:
            command += ["-m", "cProfile", "-o", str(profile_to)]
        command += ["-m", "waitbound", "serve", "--no-worker", "--port", str(port)]
        command += ["--store", str(store), "--config", str(config), "--token-file", str(token)]
        if commit_pause is not None:
            command += ["--commit-pause", commit_pause]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait_listening(port, server)
            requests = _requests(count, port, run=os.urandom(4).hex())
            out = SPAWN.Queue()
            child = SPAWN.Process(target=_load, args=(port, requests, connections, out))
            child.start()
            seconds, statuses = out.get(timeout=600)
            child.join()
        finally:
            server.send_signal(2)  # SIGINT: a clean shutdown (and the profile written)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        ok = sum(1 for status in statuses if status == 200)
        with sqlite3.connect(store) as db:
            (stored,) = db.execute("SELECT count(*) FROM inbox").fetchone()
        if stored != ok or ok != count:
            raise SystemExit(f"{count} sent, {ok} answered 200, {stored} stored: not all stored")
        return float(stored) / float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--profile", action="store_true", help="also profile the server once")
    parser.add_argument("--commit-pause", help="serve's --commit-pause (e.g. 0, 2ms)")
    args = parser.parse_args()
    count = 3_000 if args.quick else 20_000
    print_machine(machine(pg_dsn=None))
    pause = args.commit_pause
    runs = [measure(count, args.connections, commit_pause=pause) for _ in range(args.repeat)]
    median = statistics.median(runs)
    print_table(
        "Webhooks in: verified deliveries stored per second, one serve process (SQLite), "
        f"commit pause {pause or 'default'}",
        ["deliveries", "connections", "stored/s (median)", "runs", "target", "verdict"],
        [
            [
                f"{count:,}",
                args.connections,
                f"**{median:,.0f}**",
                " / ".join(f"{r:,.0f}" for r in runs),
                f"≥ {TARGET:,.0f}",
                verdict(median, TARGET),
            ]
        ],
    )
    if args.profile:
        path = Path(tempfile.gettempdir()) / "waitbound-webhooks-in.prof"
        measure(count, args.connections, profile_to=path, commit_pause=pause)
        from benchmarks._common import top_of_profile

        print(top_of_profile(path))


if __name__ == "__main__":
    main()
