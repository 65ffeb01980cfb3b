"""The Host allow-list of ``waitbound serve``: a DNS-rebound name is never answered."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from tests.fakes import FakeClock
from tests.web.test_run import serve_until
from waitbound import MemoryStore, UsageError
from waitbound.web._config import load_serve_config
from waitbound.web._hosts import LOOPBACK_NAMES, allowed_hosts, host_name, machine_names
from waitbound.web._service import Service


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("127.0.0.1:8765", "127.0.0.1"),
        ("LocalHost", "localhost"),
        ("[::1]:8765", "::1"),
        ("inbox.example.com.", "inbox.example.com"),
        ("", None),
        ("[::1", None),
    ],
)
def test_a_host_header_is_read_as_its_name_without_port(value: str, name: str | None) -> None:
    """RFC 9110 §7.2: host[:port], IPv6 in brackets; the port is not compared."""
    assert host_name(value) == name


def test_a_loopback_listener_answers_to_the_loopback_names_and_the_configured_ones() -> None:
    """On loopback: 127.0.0.1, localhost, ::1, the --host given and [auth] allowed_hosts."""
    assert allowed_hosts("127.0.0.1") == LOOPBACK_NAMES
    assert allowed_hosts("127.0.0.2", ["inbox.example.com"]) == LOOPBACK_NAMES | {
        "127.0.0.2",
        "inbox.example.com",
    }


def test_a_listener_opened_to_the_network_checks_the_host_too() -> None:
    """--allow-remote on 0.0.0.0 answers to the loopback names, the machine's own names
    and the configured ones, never to any name; on another address, to that address
    and the configured names (the guard was off there without configured names)."""
    everywhere = allowed_hosts("0.0.0.0")
    assert everywhere >= LOOPBACK_NAMES | machine_names()
    assert "evil.example" not in everywhere
    assert allowed_hosts("::", ["inbox.example.com"]) >= {"inbox.example.com", "localhost"}
    assert allowed_hosts("192.0.2.7") == frozenset({"192.0.2.7"})
    assert allowed_hosts("192.0.2.7", ["inbox.example.com"]) == frozenset(
        {"192.0.2.7", "inbox.example.com"}
    )


@pytest.mark.parametrize("bad", ["https://inbox.example.com", "inbox.example.com:443", "a/b", ""])
def test_allowed_hosts_that_are_not_host_names_are_one_line(bad: str, tmp_path: Path) -> None:
    """No scheme, port or path: one line naming the key and its index."""
    path = tmp_path / "serve.toml"
    path.write_text(f'[auth]\nallowed_hosts = ["{bad}"]\n')
    with pytest.raises(UsageError, match=r"auth\.allowed_hosts\[0\] is not a host name"):
        load_serve_config(path, env={})


def test_a_dns_rebound_host_is_refused_by_the_served_process_before_any_auth(
    tmp_path: Path,
) -> None:
    """A page on evil.example resolving to 127.0.0.1 is same-origin with serve to the
    browser; its requests name evil.example as Host and are answered 400 unknown_host
    (the trusted proxy's user header never read); the loopback names and a configured
    name are served."""
    path = tmp_path / "serve.toml"
    path.write_text(
        '[auth]\ntrusted_proxies = ["127.0.0.1"]\nuser_header = "X-Auth-Request-User"\n'
        'allowed_hosts = ["inbox.example.com"]\n'
    )
    config = load_serve_config(path, env={})
    service = Service(store=MemoryStore(), config=config, token="t" * 43, clock=FakeClock())
    answers: dict[str, httpx.Response] = {}

    async def main() -> None:
        stop = anyio.Event()
        urls: list[str] = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(serve_until, service, stop, False, urls)
                while not urls:
                    await anyio.sleep(0.01)
                port = urls[0].rsplit(":", 1)[1]
                async with httpx.AsyncClient() as http:
                    for host in ("evil.example", "127.0.0.1", "localhost", "inbox.example.com"):
                        answers[host] = await http.get(
                            f"{urls[0]}/",
                            headers={"Host": f"{host}:{port}", "X-Auth-Request-User": "pat"},
                        )
                stop.set()

    anyio.run(main)
    evil = answers.pop("evil.example")
    assert evil.status_code == 400
    assert evil.json()["error"] == "unknown_host"
    assert "pat" not in evil.text
    assert all(answer.status_code == 200 for answer in answers.values()), answers
