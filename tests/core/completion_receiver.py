"""Real loopback receivers of completion webhooks, for tests: one verifies each delivery
with the ``standardwebhooks`` library and records it; one trickles its answer's headers
and never ends them (a slow or hostile receiver)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
"""A Standard Webhooks secret (base64 of 24 bytes), as a user would configure one."""


@dataclass
class Received:
    """One verified delivery."""

    path: str
    webhook_id: str
    timestamp: str
    headers: dict[str, str]
    body: bytes
    payload: Any
    at_s: float = field(default_factory=time.monotonic)
    """When it arrived (``time.monotonic()``)."""


@dataclass
class Receiver:
    """What the receiver saw, and what it answers (in order; the last repeats)."""

    statuses: list[int] = field(default_factory=lambda: [200])
    secret: str = SECRET
    received: list[Received] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    """Why each delivery that did not verify was refused."""
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ids(self) -> list[str]:
        """The ``webhook-id`` of every verified delivery, in order."""
        with self.lock:
            return [r.webhook_id for r in self.received]

    def _answer(self) -> int:
        with self.lock:
            return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                payload = Webhook(receiver.secret).verify(body, headers)
            except WebhookVerificationError as exc:
                with receiver.lock:
                    receiver.rejected.append(str(exc))
                self._reply(400, {"error": "invalid signature"})
                return
            with receiver.lock:
                receiver.received.append(
                    Received(
                        path=self.path,
                        webhook_id=headers["webhook-id"],
                        timestamp=headers["webhook-timestamp"],
                        headers=headers,
                        body=body,
                        payload=payload,
                    )
                )
            status = receiver._answer()
            extra = {"Location": "/elsewhere"} if 300 <= status < 400 else {}
            self._reply(status, None if status in (204, 304) else {"echo": "kept by nobody"}, extra)

        def _reply(self, status: int, body: object, extra: dict[str, str] | None = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            if status not in (204, 304):  # they have no body, and say no length
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    return Handler


@contextmanager
def receiving(statuses: Sequence[int] = (200,), secret: str = SECRET) -> Iterator[Receiver]:
    """A receiver on 127.0.0.1 for the duration of the block; ``url`` is ``…/hook``."""
    receiver = Receiver(statuses=list(statuses), secret=secret)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@dataclass
class Trickler:
    """What the trickling receiver saw."""

    interval_s: float
    url: str = ""
    requests: int = 0
    """Requests whose headers arrived."""
    cut_at_s: list[float] = field(default_factory=list)
    """When the client gave up each connection (``time.monotonic()``)."""
    cut: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _trickle(trickler: Trickler, conn: socket.socket, stop: threading.Event) -> None:
    with conn:
        conn.settimeout(5)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            with trickler.lock:
                trickler.requests += 1
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            while not stop.wait(trickler.interval_s):  # a header line, never the last
                conn.sendall(b"x-slow: 1\r\n")
        except OSError:  # the client closed the connection
            with trickler.lock:
                trickler.cut_at_s.append(time.monotonic())
            trickler.cut.set()


@contextmanager
def trickling(interval_s: float = 0.05) -> Iterator[Trickler]:
    """A receiver on 127.0.0.1 that answers each request with a 200 status line, then one
    header line every *interval_s* seconds, never the blank line that ends them: each
    read arrives well within any per-read timeout, so only a whole-attempt deadline ends
    it. ``url`` is ``…/slow``."""
    trickler = Trickler(interval_s=interval_s)
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    trickler.url = f"http://127.0.0.1:{listener.getsockname()[1]}/slow"

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=_trickle, args=(trickler, conn, stop), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield trickler
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
