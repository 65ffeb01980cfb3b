"""A loopback HTTP server that misbehaves on purpose, on real sockets.

httpx's timeouts are per operation (connect, each read, each write), so only a real
socket shows whether a total timeout holds. One server, one behaviour (its *mode*):

- ``"answer"``: answer every request at once with *status*, *headers* and *body*;
- ``"trickle-headers"``: send the status line and headers one byte every
  *interval_s* seconds, and never finish them;
- ``"trickle-body"``: send complete headers (a ``Content-Length`` of 1 MB), then the
  body one byte every *interval_s* seconds;
- ``"hang"``: accept, read the request, send nothing;
- ``"drop"``: accept, read the request, close the connection.

Usage (the server stops by itself after *lifetime_s* seconds at the latest)::

    with HostileServer("trickle-headers", interval_s=0.2) as server:
        send(f"{server.base_url}/status")
    assert server.requests  # the request heads received, in order

The integrator's end-to-end tests use it too (``waitbound wait {base_url}/status
--request-timeout 2s`` must return within about 2 s).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Final, Literal, Self

Mode = Literal["answer", "trickle-headers", "trickle-body", "hang", "drop"]
MODES: Final[tuple[Mode, ...]] = ("answer", "trickle-headers", "trickle-body", "hang", "drop")
_POLL_S: Final = 0.05
_MAX_HEAD_BYTES: Final = 64 * 1024


class HostileServer:
    """A threaded raw-socket HTTP/1.1 server on 127.0.0.1 with one misbehaviour.

    Attributes:
        mode: what the server does with each request (see the module docstring).
        requests: the request heads received (bytes up to the blank line), in order.
        connections: how many connections were accepted.
    """

    def __init__(
        self,
        mode: Mode = "answer",
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        body: bytes = b'{"status": "running"}',
        interval_s: float = 0.2,
        lifetime_s: float = 30.0,
    ) -> None:
        """Describe the server; :meth:`start` (or ``with``) opens its socket.

        Args:
            mode: the behaviour.
            status: the HTTP status of an ``"answer"`` (and of trickled headers).
            headers: extra response headers; ``Content-Length`` is added for answers.
            body: the body of an ``"answer"``.
            interval_s: seconds between trickled bytes.
            lifetime_s: the server stops by itself this many seconds after starting,
                closing every connection, so a test can never hang on it.

        Raises:
            ValueError: an unknown *mode*.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.status = status
        self.headers = dict(headers or {})
        self.body = body
        self.interval_s = interval_s
        self.lifetime_s = lifetime_s
        self.requests: list[bytes] = []
        self.connections = 0
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._deadline = 0.0
        self._base_url: str | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, once started.

        Raises:
            RuntimeError: the server is not started.
        """
        if self._base_url is None:
            raise RuntimeError("start the HostileServer first")
        return self._base_url

    def start(self) -> Self:
        """Listen on a free loopback port and serve in a daemon thread."""
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(_POLL_S)
        host, port = listener.getsockname()[:2]
        # Read once at start: the server may outlive its lifetime before a test on a
        # loaded machine asks for the address, and a closed listener has none.
        self._base_url = f"http://{host}:{port}"
        self._listener = listener
        self._deadline = time.monotonic() + self.lifetime_s
        self._spawn(self._accept_loop)
        return self

    def stop(self) -> None:
        """Stop serving, close every connection and wait (bounded) for the threads."""
        self._stop.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _close(sock)
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(timeout=2.0)
        if self._listener is not None:
            _close(self._listener)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- internals ----------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _running(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._deadline

    def _accept_loop(self) -> None:
        assert self._listener is not None
        try:
            while self._running():
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:
                    continue
                with self._lock:
                    self.connections += 1
                    self._sockets.append(conn)
                self._spawn(self._serve, conn)
        except OSError:
            pass  # the listener was closed by stop()
        finally:
            self._stop.set()  # the lifetime is over: connection loops end too
            if self._listener is not None:
                # A client that connected after the lifetime (still in the backlog) is
                # reset now instead of waiting forever for an accept that never comes.
                _close(self._listener)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(_POLL_S)
        try:
            while self._running():
                head = self._read_head(conn)
                if head is None:
                    return
                with self._lock:
                    self.requests.append(head)
                if self.mode == "answer":
                    conn.sendall(self._answer())
                    continue  # keep-alive: the next request on this connection
                if self.mode == "drop":
                    return
                if self.mode == "hang":
                    self._pause_until_stopped()
                    return
                self._trickle(conn)
                return
        except OSError:
            pass  # the client went away, or stop() closed the socket
        finally:
            _close(conn)

    def _read_head(self, conn: socket.socket) -> bytes | None:
        """The request head, or ``None`` when the client closed or the server stops.

        A request body (``Content-Length``) is read and dropped.
        """
        data = b""
        while b"\r\n\r\n" not in data:
            if not self._running() or len(data) > _MAX_HEAD_BYTES:
                return None
            try:
                chunk = conn.recv(4096)
            except TimeoutError:
                continue
            if not chunk:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = _content_length(head)
        while len(rest) < length and self._running():
            try:
                chunk = conn.recv(4096)
            except TimeoutError:
                continue
            if not chunk:
                return None
            rest += chunk
        return head

    def _status_and_headers(self, extra: Mapping[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {self.status} Hostile"]
        lines += [f"{name}: {value}" for name, value in {**self.headers, **extra}.items()]
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    def _answer(self) -> bytes:
        head = self._status_and_headers({"Content-Length": str(len(self.body))})
        return head + b"\r\n" + self.body

    def _trickle(self, conn: socket.socket) -> None:
        if self.mode == "trickle-headers":
            data = self._status_and_headers({})
            while self._running():  # headers that never end
                for byte in data:
                    if not self._running():
                        return
                    conn.sendall(bytes([byte]))
                    self._pause(self.interval_s)
                data = b"X-Pad: a\r\n"
        else:
            conn.sendall(self._status_and_headers({"Content-Length": "1000000"}) + b"\r\n")
            while self._running():
                conn.sendall(b" ")
                self._pause(self.interval_s)

    def _pause(self, seconds: float) -> None:
        self._stop.wait(min(seconds, max(0.0, self._deadline - time.monotonic())))

    def _pause_until_stopped(self) -> None:
        while self._running():
            self._pause(_POLL_S)


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return int(value.strip())
    return 0


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


__all__ = ["MODES", "HostileServer", "Mode"]
