"""The provider simulator: serves a :class:`Scenario` over HTTP/1.1 on loopback.

Standard library only (``http.server.ThreadingHTTPServer``, one daemon thread per
connection). Each endpoint has its own cursor; time is measured from the scenario's first
request (of any path), which is where ``at_s`` and ``after_s`` start. An entry with
``after`` waits for a request on another endpoint instead of (or as well as) a time.
"""

from __future__ import annotations

import dataclasses
import email.utils
import ipaddress
import json
import re
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Final, Self
from urllib.parse import parse_qs, urlsplit

from waitbound._base._clock import Clock, SystemClock
from waitbound._base._errors import UsageError
from waitbound._base._json import JSON
from waitbound._base._secrets import REDACTED, is_credential
from waitbound.sim._scenario import ENDPOINT_PATHS, ResponseEntry, Scenario, parse_route

_ROUTES: dict[tuple[str | None, str], str] = {
    (None, path): name for name, path in ENDPOINT_PATHS.items()
}

_TEMPLATE = re.compile(
    r"\{(?:(base_url)|(now|http_date|start_epoch|start|epoch)(?:([+-]\d+(?:\.\d+)?)s)?)\}"
)
_EPOCH_ONLY = re.compile(r"\{(?:start_epoch|epoch)(?:[+-]\d+(?:\.\d+)?s)?\}")
"""A body string that is one Unix-time template becomes a JSON integer (OpenAI's times)."""
_JSON = "application/json"


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestLogEntry:
    """One request the simulator received.

    Attributes:
        method: the HTTP method.
        path: the request target as sent (query string included).
        endpoint: ``status``, ``result``, ``cancel``, ``submit`` or an extra endpoint's name;
            ``None`` for an unknown path.
        index: which entry of the endpoint was served; ``None`` for a 404 without entries
            and for a 400 refusing a request that lacks a required query parameter.
        code: the HTTP status code sent; ``None`` for a drop.
        at_s: seconds from the scenario's first request to this one's arrival (first = 0.0).
        at: arrival time, aware UTC.
        answered_at_s: seconds from the scenario's first request to the answer (or drop).
        headers: the request's headers as received, credentials' values replaced by
            ``[redacted]`` (see :func:`redact_headers`): the names stay, so tests can
            check which headers a client sent, but no log keeps a secret.
    """

    method: str
    path: str
    endpoint: str | None
    index: int | None
    code: int | None
    at_s: float
    at: datetime
    answered_at_s: float
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, JSON]:
        """Return the entry as a JSON object (``at`` as RFC 3339), as in the JSON-lines log."""
        return dataclasses.asdict(self) | {"at": _rfc3339(self.at), "headers": dict(self.headers)}


_IDENTIFYING: Final = frozenset({"idempotency-key"})
"""Headers no credential, but kept out of the log all the same: the name has ``key``."""


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """*headers* with every credential's value replaced by ``[redacted]``; names kept.

    Redacted: the headers :func:`waitbound._base._secrets.is_credential` names (such as
    ``Authorization`` and ``X-Api-Key``) and ``Idempotency-Key`` — every name with
    ``key``, ``token``, ``secret``, ``auth``, ``signature`` or ``password`` in it, as
    ``docs/cli.md`` says. The names stay, so a test can check which headers were sent.
    """
    return {
        name: REDACTED if is_credential(name) or name.lower() in _IDENTIFYING else value
        for name, value in headers.items()
    }


def _render(value: JSON, expand: Callable[[str], str]) -> JSON:
    if isinstance(value, str):
        return int(expand(value)) if _EPOCH_ONLY.fullmatch(value) else expand(value)
    if isinstance(value, list):
        return [_render(item, expand) for item in value]
    if isinstance(value, dict):
        return {expand(key): _render(item, expand) for key, item in value.items()}
    return value


class Simulator:
    """Serve a scenario on loopback HTTP so tests can script a provider.

    Paths: ``/status``, ``/result``, ``/cancel`` and ``/jobs`` (``submit``), any method,
    plus the scenario's ``paths`` routes (``"METHOD /path"`` wins over a path alone);
    anything else answers 404 ``{"error": "no such endpoint"}``. A request lacking a query
    parameter the scenario's ``require_query`` names for its endpoint is answered 400 with
    an Azure-style error body, logged and counted, and serves no entry. ``GET /_sim/log``
    answers the request log as a JSON list and is neither logged nor counted.

    Args:
        scenario: what each endpoint answers.
        host: a loopback address to bind (``127.0.0.1``, ``::1`` or ``localhost``).
        port: the TCP port; 0 picks a free one.
        log_path: if given, append each request as one JSON line here (flushed each time).
        clock: where arrival times, ``after_s`` and the time templates are read; ``None``
            means the system clock. A test hands the fake clock its code sleeps on
            (``waitbound.testing.FakeClock``) so that the scenario runs in virtual time.
        sleep: how an entry's ``delay_s`` is waited (seconds); ``None`` means
            ``time.sleep``. With a fake clock, its ``sleep`` advances virtual time instead.

    Attributes:
        scenario: the scenario being served.
        clock: the clock the simulator reads.

    Raises:
        UsageError: ``host`` is not a loopback address.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: Path | None = None,
        clock: Clock | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise UsageError(f"simulator host must be a loopback address, got {host!r}")
        self.scenario = scenario
        self.routes = dict(_ROUTES) | {
            parse_route(route): name for name, routes in scenario.paths.items() for route in routes
        }
        self._address = (host, port)
        self._log_path = log_path
        self.clock: Clock = clock or SystemClock()
        self._sleep = sleep or time.sleep
        self._lock = threading.Lock()
        self._cursors = dict.fromkeys(scenario.endpoints, (0, 0))  # (index, times served)
        self._asked: set[str] = set()  # endpoints that have been requested (``after``)
        self._start: tuple[float, datetime] | None = None  # first request: monotonic, UTC
        self._log: list[RequestLogEntry] = []
        self._log_file: IO[str] | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._base_url = ""

    @property
    def base_url(self) -> str:
        """The simulator's own address, like ``http://127.0.0.1:PORT``.

        Raises:
            UsageError: the simulator was never started.
        """
        if not self._base_url:
            raise UsageError("simulator not started; call start() or use it as a context")
        return self._base_url

    def start(self) -> Self:
        """Bind the port and serve in a background daemon thread; return self.

        Raises:
            UsageError: already started (a simulator serves once).
            OSError: the address cannot be bound.
        """
        if self._thread is not None:
            raise UsageError("simulator already started; build a new Simulator to serve again")
        self._server = server = _Server(self, *self._address)
        host, port = server.socket.getsockname()[:2]
        self._base_url = f"http://[{host}]:{port}" if ":" in str(host) else f"http://{host}:{port}"
        if self._log_path is not None:
            self._log_file = self._log_path.open("a", encoding="utf-8")
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="waitbound-sim", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the log file; calling it again does nothing."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
        self._stopped.set()

    def serve_forever(self) -> None:
        """Serve until :meth:`stop` is called (e.g. by a SIGTERM handler) or KeyboardInterrupt.

        Raises:
            KeyboardInterrupt: re-raised after the server is stopped.
        """
        if self._thread is None:
            self.start()
        try:
            while not self._stopped.wait(0.2):
                pass
        finally:
            self.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def log(self) -> list[RequestLogEntry]:
        """Return a copy of the request log, in order of answering."""
        with self._lock:
            return list(self._log)

    def count(self, endpoint: str) -> int:
        """Return how many requests were answered on ``endpoint`` (drops and 404s included).

        Raises:
            UsageError: ``endpoint`` is not one of the scenario's endpoints (``status``,
                ``result``, ``cancel``, ``submit`` and its extra ones).
        """
        if endpoint not in self.scenario.endpoints:
            names = ", ".join(self.scenario.endpoints)
            raise UsageError(f"unknown endpoint {endpoint!r} (expected one of: {names})")
        with self._lock:
            return sum(1 for entry in self._log if entry.endpoint == endpoint)

    def route(self, method: str, path: str) -> str | None:
        """The endpoint serving ``method`` ``path`` (query ignored), or None."""
        path = urlsplit(path).path
        return self.routes.get((method, path)) or self.routes.get((None, path))

    def missing_query(self, endpoint: str | None, target: str) -> tuple[str, str] | None:
        """The first ``require_query`` parameter *target* lacks (name, wanted value), or None."""
        required = self.scenario.require_query.get(endpoint or "", {})
        given = parse_qs(urlsplit(target).query, keep_blank_values=True)
        for name, value in required.items():
            if value not in given.get(name, []):
                return name, value
        return None

    def _arrive(
        self, endpoint: str | None, mono: float, at: datetime, *, serve: bool = True
    ) -> tuple[int | None, float]:
        """Start the clock on the first request, advance the endpoint's cursor if *serve*."""
        with self._lock:
            if self._start is None:
                self._start = (mono, at)
            at_s = max(0.0, mono - self._start[0])
            entries = self.scenario.endpoints.get(endpoint or "", ())
            if endpoint is not None and serve:
                self._asked.add(endpoint)
            if not entries or endpoint is None or not serve:
                return None, at_s
            index, served = self._cursors[endpoint]
            if served >= entries[index].repeat and self._may_follow(entries, index, at_s):
                index, served = index + 1, 0
            self._cursors[endpoint] = (index, served + 1)
            return index, at_s

    def _may_follow(self, entries: tuple[ResponseEntry, ...], index: int, at_s: float) -> bool:
        """Whether the entry after *index* may become current: its ``after_s`` has passed
        and the endpoint its ``after`` names has been asked (under the lock)."""
        if index + 1 == len(entries):
            return False
        following = entries[index + 1]
        asked = following.after is None or following.after in self._asked
        return at_s >= following.after_s and asked

    def _expand(self, text: str) -> str:
        """Replace ``{base_url}``, ``{now±Ns}``, ``{http_date±Ns}``, ``{start±Ns}`` and the
        Unix times ``{epoch±Ns}`` / ``{start_epoch±Ns}`` (whole seconds)."""
        now = self.clock.now()
        start = self._start[1] if self._start else now

        def one(match: re.Match[str]) -> str:
            if match[1]:
                return self._base_url
            offset = timedelta(seconds=float(match[3] or 0))
            if match[2] == "start":
                return _rfc3339(start + offset)
            if match[2] in ("epoch", "start_epoch"):
                return str(
                    int(((start if match[2] == "start_epoch" else now) + offset).timestamp())
                )
            if match[2] == "http_date":
                return email.utils.format_datetime(now + offset, usegmt=True)
            return _rfc3339(now + offset)

        return _TEMPLATE.sub(one, text)

    def _content(self, entry: ResponseEntry) -> tuple[bytes, dict[str, str]]:
        """Render an entry's body or raw text and headers, templates expanded."""
        headers = {name: self._expand(text) for name, text in entry.headers.items()}
        kind, content = None, b""
        if entry.raw is not None:
            kind, content = "text/plain; charset=utf-8", self._expand(entry.raw).encode()
        elif entry.body is not None:
            kind, content = _JSON, json.dumps(_render(entry.body, self._expand)).encode()
        if kind and not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = kind
        return content, headers

    def _record(self, entry: RequestLogEntry) -> None:
        with self._lock:
            self._log.append(entry)
            if self._log_file is not None:
                self._log_file.write(json.dumps(entry.to_json()) + "\n")
                self._log_file.flush()


def _query_error(name: str, value: str) -> bytes:
    """An Azure-style error body for a request lacking ``name=value`` in its query."""
    if name.lower() == "api-version":
        code = "MissingApiVersionParameter"
        message = "The api-version query parameter (?api-version=) is required for all requests."
    else:
        code, message = "MissingQueryParameter", f"The query parameter {name!r} is required."
    message += f" This endpoint wants {name}={value}."
    return json.dumps({"error": {"code": code, "message": message}}).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, simulator: Simulator, host: str, port: int) -> None:
        self.simulator = simulator
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse-DNS lookup of the host name."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        """Silence the default stderr access log; the simulator keeps its own."""

    def __getattr__(self, name: str) -> Callable[[], None]:
        if name.startswith("do_"):  # any method is accepted
            return self._answer
        raise AttributeError(name)

    def _answer(self) -> None:
        sim = self.server.simulator
        mono, at = sim.clock.monotonic(), sim.clock.now()
        try:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
        except ValueError:
            self.close_connection = True
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True  # we do not read chunked bodies
        path = urlsplit(self.path).path
        if self.command == "GET" and path == "/_sim/log":
            listing = [entry.to_json() for entry in sim.log()]
            self._send(200, json.dumps(listing).encode(), {"Content-Type": _JSON})
            return
        endpoint = sim.route(self.command, path)
        missing = sim.missing_query(endpoint, self.path)
        index, at_s = sim._arrive(endpoint, mono, at, serve=missing is None)
        code: int | None = 404
        answer: tuple[bytes, Mapping[str, str]] | None = (
            b'{"error": "no such endpoint"}',
            {"Content-Type": _JSON},
        )
        if missing is not None:
            code, answer = 400, (_query_error(*missing), {"Content-Type": _JSON})
        elif index is not None and endpoint is not None:
            entry = sim.scenario.endpoints[endpoint][index]
            if entry.delay_s > 0:
                sim._sleep(entry.delay_s)
            code = entry.code
            # A drop writes nothing; closing the socket sends EOF.
            answer = None if entry.drop or code is None else sim._content(entry)
        # Logged before the answer leaves, so a client that has its answer finds it logged.
        sim._record(
            RequestLogEntry(
                method=self.command,
                path=self.path,
                endpoint=endpoint,
                index=index,
                code=code,
                at_s=at_s,
                at=at,
                answered_at_s=at_s + sim.clock.monotonic() - mono,
                headers=redact_headers(dict(self.headers.items())),
            )
        )
        if answer is None or code is None:
            self.close_connection = True
        else:
            self._send(code, *answer)

    def _send(self, code: int, content: bytes, headers: Mapping[str, str]) -> None:
        """Write one response; no Content-Length on 1xx/204 (RFC 9110 §8.6), no body on HEAD."""
        try:
            self.send_response(code)
            for name, value in headers.items():
                self.send_header(name, value)
            if code >= 200 and code != 204:
                self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(content)
        except OSError:  # the client went away; nothing more to send
            self.close_connection = True
