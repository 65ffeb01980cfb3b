"""A real loopback receiver of completion webhooks, for tests: it verifies each delivery
with the ``standardwebhooks`` library and records it."""

from __future__ import annotations

import json
import threading
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
