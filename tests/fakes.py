"""Test doubles: a scripted httpx transport; the virtual clock is ``waitbound.testing``'s."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from itertools import pairwise

import httpx

from waitbound import Observation
from waitbound.testing import START, FakeClock

Answer = tuple[int, object] | tuple[int, object, Mapping[str, str]] | Exception


class ScriptedProvider:
    """An ``httpx.MockTransport`` handler serving scripted answers per path, in order.

    The last answer repeats. Each request can take ``latency_s`` of virtual time.
    """

    def __init__(
        self,
        clock: FakeClock,
        script: Mapping[str, Sequence[Answer]],
        *,
        latency_s: float = 0.0,
    ) -> None:
        self.clock = clock
        self.script = {path: list(answers) for path, answers in script.items()}
        self.latency_s = latency_s
        self.requests: list[tuple[str, datetime]] = []
        self.seen_headers: list[Mapping[str, str]] = []
        self.timeouts: list[float | None] = []
        self.sent: list[tuple[str, str, bytes]] = []
        """(method, path, body) of every request."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.requests.append((path, self.clock.now()))
        self.seen_headers.append(dict(request.headers))
        self.timeouts.append(request.extensions.get("timeout", {}).get("read"))
        self.sent.append((request.method, path, request.read()))
        self.clock.advance(self.latency_s)
        answers = self.script[path]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        code, body, *rest = answer
        headers = dict(rest[0]) if rest else {}
        if body is None:
            return httpx.Response(code, headers=headers)
        return httpx.Response(code, json=body, headers=headers)

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.requests if p == path)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))

    def async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


def gaps(times: list[datetime]) -> list[float]:
    """Seconds between consecutive instants."""
    return [(b - a).total_seconds() for a, b in pairwise(times)]


Handler = Callable[[httpx.Request], httpx.Response]
__all__ = ["START", "Answer", "FakeClock", "Handler", "Observation", "ScriptedProvider", "gaps"]
