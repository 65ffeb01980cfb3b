"""An OTLP/HTTP receiver on loopback for tests: it keeps every export request and
decodes it with the official protobuf classes (``opentelemetry-proto``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class Received:
    url: str
    bodies: dict[str, list[bytes]] = field(default_factory=dict)
    content_types: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def traces(self) -> list[ExportTraceServiceRequest]:
        with self.lock:
            bodies = list(self.bodies.get("/v1/traces", []))
        return [ExportTraceServiceRequest.FromString(body) for body in bodies]

    def metrics(self) -> list[ExportMetricsServiceRequest]:
        with self.lock:
            bodies = list(self.bodies.get("/v1/metrics", []))
        return [ExportMetricsServiceRequest.FromString(body) for body in bodies]

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.traces()
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


def value_of(value: AnyValue) -> object:
    """The Python value of one OTLP attribute value."""
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def attributes_of(item: Any) -> dict[str, object]:
    return {kv.key: value_of(kv.value) for kv in item.attributes}


@contextmanager
def otlp_receiver() -> Iterator[Received]:
    """Serve ``POST /v1/traces`` and ``/v1/metrics`` on 127.0.0.1 (any free port)."""
    received = Received(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            with received.lock:
                received.bodies.setdefault(self.path, []).append(body)
                received.content_types.append(self.headers.get("Content-Type", ""))
            answer = (
                ExportTraceServiceResponse()
                if self.path == "/v1/traces"
                else ExportMetricsServiceResponse()
            ).SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
