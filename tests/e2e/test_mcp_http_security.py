"""``waitbound mcp --transport http`` attacked as a local client would: real servers on
loopback, raw sockets and the SDK's client. Who may reach what (tokens, owners, Host),
and what one client may take (sessions, slow heads, file descriptors).

Waits are bounded by generous timeouts; the assertions are on states, not durations.
"""

from __future__ import annotations

import json
import resource
import socket
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import waitbound
from tests.e2e.mcp_tasks import (
    WAIT_S,
    HttpServer,
    free_port,
    http_client,
    listening,
    server_argv,
)
from tests.e2e.runner import cli
from waitbound.mcp._http import MAX_SESSIONS
from waitbound.sim import Simulator, parse_scenario

pytestmark = pytest.mark.e2e

ANN = "ann-" + "a" * 28
BOB = "bob-" + "b" * 28
ROOT = "root-" + "r" * 27
TOKENS = f"ann decider {ANN}\nbob viewer {BOB}\nroot admin {ROOT}\n"

CONFIG = """
[providers.reports]
base_url = "{base_url}"
profile = "next-action"
submit_path = "/jobs"
policy = {{ deadline_s = 60, max_requests = 30, base_delay_s = 0.1, max_delay_s = 0.5 }}
"""


def _scenario() -> Any:
    path = Path(__file__).parents[2] / "src/waitbound/profiles/scenarios/next-action.json"
    return parse_scenario(json.loads(path.read_text()), source=str(path))


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class _Tokens(HttpServer):
    """The server with the three holders of :data:`TOKENS`."""

    def __init__(self, config: Path, store: str, *extra: str, host: str = "127.0.0.1"):
        super().__init__(config, store, {}, None, *extra, host=host)
        tokens = config.parent / "tokens"
        tokens.write_text(TOKENS)
        tokens.chmod(0o600)
        at = self.argv.index("--token-file")
        self.argv[at + 1] = str(tokens)


async def _call(url: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    with anyio.fail_after(WAIT_S):
        async with http_client(url, _bearer(token)) as client:
            return await client.call_tool(tool, arguments)


def _initialize(
    url: str, headers: dict[str, str], host: str | None = None, client: httpx.Client | None = None
) -> httpx.Response:
    """An ``initialize`` request (through *client*, else a client of its own)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "1"},
        },
    }
    extra = {"Host": host} if host else {}
    return (client or httpx).post(
        url,
        json=body,
        headers={"Accept": "application/json, text/event-stream", **headers, **extra},
        timeout=WAIT_S,
    )


def test_without_a_token_nothing_is_served(tmp_path: Path) -> None:
    """No token, or a wrong one: 401 before the MCP layer; /healthz stays open."""
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(base_url="http://127.0.0.1:9"))
    with _Tokens(config, str(tmp_path / "s.db")) as server:
        assert _initialize(server.url, {}).status_code == 401
        assert _initialize(server.url, _bearer("x" * 32)).status_code == 401
        assert _initialize(server.url, _bearer(BOB)).status_code == 200
        health = httpx.get(server.url.replace("/mcp", "/healthz"), timeout=WAIT_S)
        assert health.json() == {"ok": True}


def test_list_jobs_and_reads_reach_only_the_owner_and_an_admin(tmp_path: Path) -> None:
    """ann starts a job; bob (another token) neither lists, reads, waits on, cancels nor
    reads the story of it — each is 'not found'; root (an admin) lists it."""
    with Simulator(_scenario()) as sim:
        config = tmp_path / "c.toml"
        config.write_text(CONFIG.format(base_url=sim.base_url))
        with _Tokens(config, str(tmp_path / "s.db")) as server:

            async def attack() -> tuple[Any, ...]:
                started = await _call(server.url, ANN, "start_job", {"provider": "reports"})
                op = started.structured_content["operation_id"]
                theirs = await _call(server.url, BOB, "list_jobs", {})
                mine = await _call(server.url, ANN, "list_jobs", {})
                admin = await _call(server.url, ROOT, "list_jobs", {})
                reads = [
                    await _call(server.url, BOB, tool, {"operation_id": op})
                    for tool in ("check_job", "await_job", "get_result", "cancel_job")
                ]
                uri = f"waitbound://operations/{op}/story"
                with anyio.fail_after(WAIT_S):
                    async with http_client(server.url, _bearer(ANN)) as client:
                        own = await client.read_resource(uri)
                    async with http_client(server.url, _bearer(BOB)) as client:
                        try:
                            await client.read_resource(uri)
                            story = "read"
                        except Exception as exc:
                            story = str(exc)
                return op, theirs, mine, admin, reads, (own, story)

            op, theirs, mine, admin, reads, (own, story) = anyio.run(attack)
    assert op in own.contents[0].text
    assert theirs.structured_content["operations"] == []
    assert [o["operation_id"] for o in mine.structured_content["operations"]] == [op]
    assert op in [o["operation_id"] for o in admin.structured_content["operations"]]
    for answer in reads:
        assert answer.is_error
        assert "no operation with id" in answer.content[0].text
    assert story != "read"


def _task_request(url: str, token: str, method: str, params: dict[str, Any]) -> Any:
    """One 2026-07-28 request declaring the Tasks extension; its JSON-RPC answer."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "ann", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**params, "_meta": meta}}
    name = params.get("taskId") or params.get("name")
    answer = httpx.post(
        url,
        json=body,
        headers={
            **_bearer(token),
            "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": "2026-07-28",
            "Mcp-Method": method,
            **({"Mcp-Name": name} if isinstance(name, str) else {}),
        },
        timeout=WAIT_S,
    )
    text = answer.text
    if "text/event-stream" in answer.headers.get("content-type", ""):
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = next(d for d in data if '"id":7' in d.replace(" ", ""))
    return json.loads(text)


def test_tasks_reach_only_their_owner(tmp_path: Path) -> None:
    """A task ann started: bob's tasks/get, tasks/update and tasks/cancel are 'task not
    found' and change nothing; ann's own tasks/get answers it."""
    with Simulator(_scenario()) as sim:
        config = tmp_path / "c.toml"
        config.write_text(CONFIG.format(base_url=sim.base_url) + "allow_cancel = true\n")
        with _Tokens(config, str(tmp_path / "s.db")) as server:
            call = {"name": "start_job", "arguments": {"provider": "reports"}}
            created = _task_request(server.url, ANN, "tools/call", call)
            task_id = created["result"]["taskId"]
            own = _task_request(server.url, ANN, "tasks/get", {"taskId": task_id})
            answers = [
                _task_request(server.url, BOB, "tasks/get", {"taskId": task_id}),
                _task_request(server.url, BOB, "tasks/cancel", {"taskId": task_id}),
                _task_request(
                    server.url, BOB, "tasks/update", {"taskId": task_id, "inputResponses": {}}
                ),
            ]
            after = _task_request(server.url, ANN, "tasks/get", {"taskId": task_id})
    assert own["result"]["taskId"] == task_id
    for answer in answers:
        assert answer["error"]["code"] == -32602, answer
        assert "task not found" in answer["error"]["message"]
    assert after["result"]["taskId"] == task_id
    store = waitbound.open_store(str(tmp_path / "s.db"))
    try:
        record = store.get(task_id)
    finally:
        store.close()
    assert record is not None
    assert record.cancel_requested_at is None  # bob's tasks/cancel changed nothing


@pytest.mark.parametrize(("host", "extra"), [("127.0.0.2", ()), ("0.0.0.0", ("--allow-remote",))])
def test_a_rebound_host_name_is_refused_on_every_bind_address(
    host: str, extra: tuple[str, ...], tmp_path: Path
) -> None:
    """Host: evil.example is 400 on 127.0.0.2 and on 0.0.0.0 (the SDK's guard was off
    there: 200); the address listened on is answered."""
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(base_url="http://127.0.0.1:9"))
    with _Tokens(config, str(tmp_path / "s.db"), *extra, host=host) as server:
        url = server.url.replace("0.0.0.0", "127.0.0.1")
        evil = _initialize(url, _bearer(ANN), host="evil.example")
        assert evil.status_code == 400
        assert evil.json()["error"] == "unknown_host"
        own = "127.0.0.2" if host == "127.0.0.2" else "127.0.0.1"
        assert _initialize(url, _bearer(ANN), host=f"{own}:{server.port}").status_code == 200
        origin = httpx.post(
            url,
            content=b"{}",
            headers={**_bearer(ANN), "Origin": "http://evil.example", "Content-Type": "x"},
            timeout=WAIT_S,
        )
        assert origin.status_code == 403


def test_a_network_host_without_allow_remote_is_refused(tmp_path: Path) -> None:
    """--host 0.0.0.0 without --allow-remote: one line, exit 2, nothing listens;
    --no-auth off loopback too."""
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(base_url="http://127.0.0.1:9"))
    port = str(free_port())
    base = ("mcp", "--config", str(config), "--store", str(tmp_path / "s.db"))
    done = cli(*base, "--transport", "http", "--host", "0.0.0.0", "--port", port)
    assert done.returncode == 2
    assert "--allow-remote" in done.stderr
    assert done.stderr.count("\n") == 1
    no_auth = cli(*base, "--transport", "http", "--host", "0.0.0.0", "--port", port,
                  "--allow-remote", "--no-auth")  # fmt: skip
    assert no_auth.returncode == 2
    assert "--no-auth" in no_auth.stderr


def test_sessions_are_capped_with_health_checks_still_answered(tmp_path: Path) -> None:
    """MAX_SESSIONS sessions open; one more is 503 (the SDK's default was 10,000);
    /healthz is answered all the while."""
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(base_url="http://127.0.0.1:9"))
    with _Tokens(config, str(tmp_path / "s.db")) as server, httpx.Client() as client:
        # one client, one connection: a session is its id, never its connection
        opened = [_initialize(server.url, _bearer(BOB), client=client) for _ in range(MAX_SESSIONS)]
        assert all(r.status_code == 200 for r in opened)
        assert len({r.headers["mcp-session-id"] for r in opened}) == MAX_SESSIONS
        assert _initialize(server.url, _bearer(BOB)).status_code == 503
        health = httpx.get(server.url.replace("/mcp", "/healthz"), timeout=WAIT_S)
        assert health.status_code == 200


def _closed_within(sock: socket.socket, limit_s: float) -> bool:
    """Whether the server closes *sock* within *limit_s* seconds (a bound)."""
    sock.settimeout(limit_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_slow_request_head_is_closed(tmp_path: Path) -> None:
    """A connection that never finishes its request's head is closed by the server
    (head deadline; uvicorn had none: 3,000 such connections stayed open)."""
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(base_url="http://127.0.0.1:9"))
    with _Tokens(config, str(tmp_path / "s.db")) as server:
        slow = socket.create_connection(("127.0.0.1", server.port))
        slow.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: ")
        try:
            assert _closed_within(slow, 60.0)
        finally:
            slow.close()


def _lowered_nofile(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def test_idle_sockets_past_the_descriptor_limit_do_not_wedge_the_server(tmp_path: Path) -> None:
    """Under a 1,024-descriptor limit, 1,100 idle sockets (the attack that wedged the
    server for good): it keeps answering /healthz while they are open, serves MCP again
    once they close, and its worker drives a job started before the flood to its end."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard >= 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    limit = 1024 if resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 1400 else 256
    with Simulator(_scenario()) as sim:
        config = tmp_path / "c.toml"
        config.write_text(CONFIG.format(base_url=sim.base_url))
        (tmp_path / "tokens").write_text(TOKENS)
        (tmp_path / "tokens").chmod(0o600)
        argv = server_argv(config, str(tmp_path / "s.db"), "--transport", "http", "--port",
                           "0", "--token-file", str(tmp_path / "tokens"))  # fmt: skip
        process, base = listening(
            argv,
            preexec_fn=lambda: _lowered_nofile(limit),
        )
        port = int(base.rsplit(":", 1)[1])
        url = f"{base}/mcp"
        idle: list[socket.socket] = []
        try:
            started = anyio.run(_call, url, ANN, "start_job", {"provider": "reports"})
            op = started.structured_content["operation_id"]
            own, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            assert own >= limit + 200, "the test process needs descriptors of its own"
            for _ in range(limit + limit // 16 + 12):  # 1,100 against 1,024
                try:
                    idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                except OSError:
                    break  # the backlog is full: refused, as it should be
            healthy, seen = False, "nothing"
            deadline = time.monotonic() + 2 * WAIT_S
            while not healthy and time.monotonic() < deadline:
                try:
                    answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                    healthy, seen = answer.status_code == 200, f"HTTP {answer.status_code}"
                except httpx.HTTPError as exc:
                    seen = f"{type(exc).__name__}: {exc}"
                if not healthy:
                    time.sleep(0.2)
            assert healthy, f"/healthz was not answered during the flood (last: {seen})"
            assert process.poll() is None
            for sock in idle:
                sock.close()
            idle.clear()
            done = anyio.run(_call, url, ANN, "await_job", {"operation_id": op})
            assert done.structured_content["done"] is True, done.structured_content
            assert process.poll() is None
        finally:
            for sock in idle:
                sock.close()
            process.kill()
            process.wait(WAIT_S)
