"""Every unauthenticated endpoint is cheap: the inbox's form bodies are capped before
they are parsed (the real ASGI application, called directly with a ``receive`` that
counts what the application pulled), multipart bodies and file parts are refused
unread, and nothing is spooled to disk."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fakes import FakeClock
from waitbound import MemoryStore
from waitbound.web._app import create_app
from waitbound.web._config import ServeConfig
from waitbound.web._forms import DECIDE_MAX_BYTES, MAX_FORM_FIELDS, SIGN_IN_MAX_BYTES
from waitbound.web._service import Service

TOKEN = "tok_" + "c4ps" * 8
MIB = 1024 * 1024


class Body:
    """An endless (or *total*-byte) request body in *chunk*-byte pieces, counting what
    the application read."""

    def __init__(self, chunk: bytes, total: int | None = None) -> None:
        self.chunk = chunk
        self.total = total
        self.read = 0
        self.pulls = 0

    async def receive(self) -> dict[str, Any]:
        self.pulls += 1
        if self.total is not None and self.read >= self.total:
            return {"type": "http.disconnect"}
        piece = self.chunk
        if self.total is not None:
            piece = piece[: self.total - self.read]
        self.read += len(piece)
        more = self.total is None or self.read < self.total
        return {"type": "http.request", "body": piece, "more_body": more}


def call(
    path: str, headers: dict[str, str], body: Body, *, origin: str | None = None
) -> tuple[int, bytes]:
    """POST *path* to the application with *body*; its status and answer."""
    app = create_app(
        Service(store=MemoryStore(), config=ServeConfig(), clock=FakeClock(), token=TOKEN)
    )
    sent: list[dict[str, Any]] = []
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    raw.append((b"host", b"127.0.0.1:8765"))
    if origin is not None:
        raw.append((b"origin", origin.encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": raw,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    async def main() -> None:
        await app(scope, body.receive, send)

    anyio.run(main)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    answer = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, answer


def multipart(parts: int, part_bytes: int) -> tuple[dict[str, str], Body]:
    """*parts* fields of *part_bytes* each, as one multipart body."""
    boundary = "b0undary"
    one = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="f"; filename="x.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + b"x" * part_bytes
        + b"\r\n"
    )
    total = len(one) * parts
    headers = {
        "content-type": f"multipart/form-data; boundary={boundary}",
        "content-length": str(total),
    }
    return headers, Body(one, total)


@pytest.fixture
def no_spool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The temporary directory is an empty folder of the test's: nothing may land there."""
    folder = tmp_path / "spool"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    assert list(folder.iterdir()) == [], "a form body was spooled to disk"


def test_a_multipart_sign_in_of_800_one_mib_parts_is_refused_unread(no_spool):
    """The 800 parts of 1 MiB multipart sign-in that took the server to 993 MiB: 415, and not
    one byte of its body was read (nothing parsed, nothing spooled)."""
    headers, body = multipart(800, MIB)
    status, answer = call("/sign-in", headers, body)
    assert status == 415
    assert b"application/x-www-form-urlencoded" in answer
    assert body.read == 0


def test_a_200_mib_file_part_is_never_spooled_to_disk(no_spool):
    """One 200 MiB file part (158 MiB spooled before): refused unread, the temporary
    directory stays empty."""
    headers, body = multipart(1, 200 * MIB)
    status, _ = call("/sign-in", headers, body)
    assert status == 415
    assert body.read == 0


def test_a_sign_in_whose_length_is_over_the_cap_is_413_unread(no_spool):
    """A urlencoded sign-in declaring more than the cap: 413 before any byte is read."""
    body = Body(b"a" * 65536, 100 * MIB)
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "content-length": str(100 * MIB),
    }
    status, _ = call("/sign-in", headers, body)
    assert status == 413
    assert body.read == 0


def test_a_sign_in_streamed_without_a_length_is_read_only_to_the_cap(no_spool):
    """A chunked sign-in without Content-Length that never ends: 413 once the cap is
    passed; the application read at most the cap and one chunk."""
    body = Body(b"a" * 4096)
    status, _ = call("/sign-in", {"content-type": "application/x-www-form-urlencoded"}, body)
    assert status == 413
    assert body.read <= SIGN_IN_MAX_BYTES + 4096


def test_a_sign_in_with_too_many_fields_is_400(no_spool):
    """More than the field cap in a small body: 400, one line, no session."""
    text = "&".join(f"f{i}=" for i in range(MAX_FORM_FIELDS + 1)).encode()
    body = Body(text, len(text))
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "content-length": str(len(text)),
    }
    status, answer = call("/sign-in", headers, body)
    assert status == 400
    assert b"fields" in answer


@pytest.mark.parametrize("text", [b"token=%ff%fe&name=ann", b"token=\xff&name=ann"])
def test_a_form_that_is_not_utf8_even_inside_a_percent_escape_is_400(no_spool, text):
    """Bytes that are not UTF-8, raw or %-escaped (``%ff``): 400, never read as U+FFFD
    (a decision's reason would otherwise be kept in the audit log as replacement marks)."""
    body = Body(text, len(text))
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "content-length": str(len(text)),
    }
    status, answer = call("/sign-in", headers, body)
    assert status == 400
    assert b"UTF-8" in answer


def test_a_decision_form_over_its_cap_is_413_for_a_bearer_script(no_spool):
    """The decision form is capped too, for a caller holding the token: 413 unread."""
    body = Body(b"a" * 65536, 10 * MIB)
    headers = {
        "authorization": f"Bearer {TOKEN}",
        "content-type": "application/x-www-form-urlencoded",
        "content-length": str(10 * MIB),
    }
    status, _ = call("/operation/op-1/decide", headers, body)
    assert status == 413
    assert body.read == 0
    assert DECIDE_MAX_BYTES < 10 * MIB


def test_a_decision_form_without_a_session_is_never_read(no_spool):
    """A decision POST with neither token nor session: refused before its body is read."""
    body = Body(b"a" * 65536, 10 * MIB)
    headers = {"content-type": "application/x-www-form-urlencoded"}
    status, _ = call("/operation/op-1/decide", headers, body)
    assert status in (303, 401, 403)
    assert body.read == 0


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_the_served_process_stays_small_under_a_200_mib_multipart_sign_in():
    """The real server (in this process) sent 200 parts of 1 MiB at POST /sign-in over
    loopback: 415, and this process's resident memory grows by less than 32 MiB (the
    parser of before kept every part: +200 MiB). Memory, not time, is measured."""
    import httpx

    from tests.web.test_protocol import serving
    from waitbound.web._protocol import Limits

    boundary = "b0undary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="f"; filename="x.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    chunk = b"x" * MIB

    async def parts() -> Any:
        for _ in range(200):
            yield head + chunk + b"\r\n"
        yield f"--{boundary}--\r\n".encode()

    async def main() -> tuple[int, float]:
        limits = Limits(head_timeout_s=60.0, body_timeout_s=600.0)
        async with serving(limits) as (host, port), httpx.AsyncClient(timeout=600) as http:
            await http.get(f"http://{host}:{port}/healthz")
            before = _rss_mib()
            answer = await http.post(
                f"http://{host}:{port}/sign-in",
                content=parts(),
                headers={"content-type": f"multipart/form-data; boundary={boundary}"},
            )
            return answer.status_code, _rss_mib() - before

    status, grown = anyio.run(main)
    assert status == 415
    assert grown < 32, f"resident memory grew by {grown:.0f} MiB"
