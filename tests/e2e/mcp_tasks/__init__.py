"""The MCP Tasks requester and servers for the end-to-end tests: the official
TypeScript requester (``@modelcontextprotocol/ext-tasks``, installed with npm into
this folder when missing) driven line by line, and ``waitbound mcp`` processes."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).parent
WAIT_S = 60.0
"""The longest any one requester command may take (a bound, never a timing check)."""


def npm_install(folder: Path = HERE) -> None:
    """Install the folder's npm packages (exact versions from its lock file) when
    missing, as the browser tests install Chromium."""
    installed = folder / "node_modules" / ".package-lock.json"
    if installed.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is needed for the MCP Tasks tests (Node 20 or newer)")
    with (folder / ".npm-install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist workers install once, one at a time
        if not installed.exists():
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=folder, check=True)


def free_port() -> int:
    """A port free now; only for an address that must be refused before it is bound (a
    server started on it could meet another test's server there: use :func:`listening`)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_LISTENING = re.compile(r"^waitbound mcp: listening on (http://\S+)/mcp ")


def listening(argv: list[str], **popen: Any) -> tuple[subprocess.Popen[str], str]:
    """Start ``waitbound mcp --transport http --port 0 …`` (*argv*) and return the process
    and the ``http://HOST:PORT`` it says it listens on: the port the server itself bound,
    so no other test's server can answer in its place. Its stderr is drained meanwhile.

    Raises:
        RuntimeError: it exited, or said nothing within :data:`WAIT_S`.
    """
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, **popen)
    found: list[str] = []
    said = threading.Event()

    def drain() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            match = _LISTENING.match(line)
            if match and not found:
                found.append(match.group(1))
                said.set()
        said.set()

    threading.Thread(target=drain, daemon=True).start()
    if not said.wait(WAIT_S) or not found:
        process.kill()
        process.wait(WAIT_S)
        raise RuntimeError(f"waitbound mcp did not listen (exit {process.returncode})")
    return process, found[0]


def server_argv(config: Path, store: str, *extra: str) -> list[str]:
    head = [sys.executable, "-m", "waitbound", "mcp"]
    return [*head, "--config", str(config), "--store", store, *extra]


_SERVERS = itertools.count()


class HttpServer:
    """``waitbound mcp --transport http`` as a subprocess on a port it binds itself, with
    a token file of one shared token (an admin; :attr:`headers` carry it) or of one
    *holder*'s (``"NAME ROLE"``), or none with ``no_auth``; *extra* arguments are
    passed on."""

    def __init__(
        self,
        config: Path,
        store: str,
        env: dict[str, str],
        port: int | None = None,
        *extra: str,
        host: str = "127.0.0.1",
        no_auth: bool = False,
        holder: str | None = None,
    ):
        self.port = port or 0
        self.host = host
        self.url = ""
        self.token = "shared-" + "s" * 32
        self.headers = {} if no_auth else {"Authorization": f"Bearer {self.token}"}
        doors: tuple[str, ...] = ("--no-auth",)
        if not no_auth:
            token_file = config.parent / f"tokens-{next(_SERVERS)}"
            token_file.write_text(f"{holder} {self.token}\n" if holder else f"{self.token}\n")
            token_file.chmod(0o600)
            doors = ("--token-file", str(token_file))
        self.argv = server_argv(
            config, store, "--transport", "http", "--host", host, "--port", str(self.port),
            *doors, *extra,
        )  # fmt: skip
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> HttpServer:
        self.process, base = listening(self.argv, env=self.env)
        self.url = f"{base}/mcp"
        self.port = int(base.rsplit(":", 1)[1])
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(WAIT_S)
        self.process = None

    def __enter__(self) -> HttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


class RequesterError(Exception):
    """A command the requester answered with an error (``.error``: name, message,
    code, data)."""

    def __init__(self, error: dict[str, Any]):
        super().__init__(error.get("message"))
        self.error = error


class Requester:
    """The TypeScript requester process; :meth:`send` a command, :meth:`reply` to it."""

    def __init__(self) -> None:
        npm_install()
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is needed for the MCP Tasks tests")
        self.process = subprocess.Popen(
            [node, str(HERE / "requester.mjs")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=HERE,
            text=True,
        )
        self._ids = itertools.count(1)
        self._replies: dict[int, dict[str, Any]] = {}
        self._arrived = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            reply = json.loads(line)
            with self._arrived:
                self._replies[reply["cid"]] = reply
                self._arrived.notify_all()
        with self._arrived:
            self._replies[-1] = {"ok": False, "error": {"message": "requester exited"}}
            self._arrived.notify_all()

    def send(self, cmd: str, **fields: Any) -> int:
        """Send a command without waiting; its id, for :meth:`reply`."""
        cid = next(self._ids)
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"cid": cid, "cmd": cmd, **fields}) + "\n")
        self.process.stdin.flush()
        return cid

    def reply(self, cid: int, timeout_s: float = WAIT_S) -> Any:
        """The value the command *cid* answered (raises :class:`RequesterError`)."""
        with self._arrived:
            if not self._arrived.wait_for(
                lambda: cid in self._replies or -1 in self._replies, timeout_s
            ):
                raise TimeoutError(f"requester command {cid} did not answer in {timeout_s} s")
            reply = self._replies.pop(cid, None) or self._replies[-1]
        if not reply["ok"]:
            raise RequesterError(reply["error"])
        return reply["value"]

    def __call__(self, cmd: str, **fields: Any) -> Any:
        return self.reply(self.send(cmd, **fields))

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Requester:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def release(base_url: str) -> None:
    """Ask the simulator's ``/release`` endpoint: entries ``after: "release"`` may
    become current."""
    httpx.get(f"{base_url}/release", timeout=10)


def http_client(url: str, headers: dict[str, str]) -> Any:
    """The SDK's ``Client`` over streamable HTTP to *url*, sending *headers* (a bearer
    token) with every request."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
    return Client(streamable_http_client(url, http_client=client))
