"""The HTTP transport against hostile providers: total timeout, redirects, URLs, bodies.

The real-socket tests are bound checks (the call returns within the timeout plus a
generous margin), not timing tests; everything else runs on ``httpx.MockTransport``
with a fake clock.
"""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping

import anyio
import httpcore
import httpx
import pytest

from tests.fakes import FakeClock
from tests.transports.hostile import HostileServer, Mode
from waitbound import parse_profile
from waitbound._base._clock import SystemClock
from waitbound._base._json import Ambiguous
from waitbound._base._secrets import REDACTED, secret_parts
from waitbound._model._observation import Observation
from waitbound._rules._controller import Request
from waitbound.transports import HttpSettings, _bounded, new_async_client, send_async, send_sync
from waitbound.transports._bounded import GRACE_S, deadline_of, is_bounded

PROFILE = parse_profile(
    {
        "state": "status",
        "pending": ["running"],
        "succeeded": ["done"],
        "request_id_headers": ["x-request-id", "request-id", "x-ms-request-id"],
    }
)
URL = "http://provider.test/status"
TIMEOUT_S = 1.0
MARGIN_S = 1.5
TOKEN = "tok-5f0e9a1b2c"
SECRETS = secret_parts([f"Bearer {TOKEN}"])

Handler = Callable[[httpx.Request], httpx.Response]


def _sync(
    handler: Handler,
    url: str = URL,
    *,
    secrets: tuple[str, ...] = (),
    headers: Mapping[str, str] | None = None,
    settings: HttpSettings | None = None,
    kind: str = "status",
) -> Observation:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    with client:
        return send_sync(
            client,
            Request(kind=kind, url=url, timeout_s=30.0),  # type: ignore[arg-type]
            headers=headers or {},
            profile=PROFILE,
            clock=FakeClock(),
            settings=settings or HttpSettings(),
            secrets=secrets,
        )


def _async(handler: Handler, url: str = URL, **kw: object) -> Observation:
    async def main() -> Observation:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await send_async(
                client,
                Request(kind="status", url=url, timeout_s=30.0),
                headers={},
                profile=PROFILE,
                clock=FakeClock(),
                **kw,  # type: ignore[arg-type]
            )

    return anyio.run(main)


# --- the total timeout, on real sockets -------------------------------------------


def _real_sync(server: HostileServer, *, stop: bool = True) -> tuple[Observation, float]:
    started = time.monotonic()
    with httpx.Client() as client:
        observation = send_sync(
            client,
            Request(kind="status", url=f"{server.base_url}/status", timeout_s=TIMEOUT_S),
            headers={},
            profile=PROFILE,
            clock=SystemClock(),
        )
        elapsed = time.monotonic() - started
        if stop:
            server.stop()  # ends an abandoned exchange's read before the client closes
    return observation, elapsed


def _real_async(server: HostileServer) -> tuple[Observation, float]:
    async def main() -> tuple[Observation, float]:
        started = time.monotonic()
        async with httpx.AsyncClient() as client:
            observation = await send_async(
                client,
                Request(kind="status", url=f"{server.base_url}/status", timeout_s=TIMEOUT_S),
                headers={},
                profile=PROFILE,
                clock=SystemClock(),
            )
            return observation, time.monotonic() - started

    return anyio.run(main)


HOSTILE_MODES: list[Mode] = ["trickle-headers", "trickle-body", "hang"]


@pytest.mark.parametrize("mode", HOSTILE_MODES)
def test_trickled_headers_cannot_outlast_the_total_timeout_sync(mode: Mode) -> None:
    """A server trickling bytes (or silent) cannot hold a blocking request past its timeout."""
    with HostileServer(mode, interval_s=0.2, lifetime_s=10) as server:
        observation, elapsed = _real_sync(server)
    assert elapsed < TIMEOUT_S + MARGIN_S
    assert observation.transport_error == f"no answer within {TIMEOUT_S:.3g}s (timeout)"
    assert observation.http_status is None


@pytest.mark.parametrize("mode", HOSTILE_MODES)
def test_trickled_headers_cannot_outlast_the_total_timeout_async(mode: Mode) -> None:
    """The same bound holds for the async transport (an anyio cancel scope)."""
    with HostileServer(mode, interval_s=0.2, lifetime_s=10) as server:
        observation, elapsed = _real_async(server)
    assert elapsed < TIMEOUT_S + MARGIN_S
    assert observation.transport_error == f"no answer within {TIMEOUT_S:.3g}s (timeout)"


def test_a_prompt_real_answer_is_read_sync_and_async() -> None:
    """The thread and the cancel scope do not disturb an ordinary answer."""
    body = b'{"status": "done"}'
    with HostileServer("answer", body=body, headers={"X-Request-Id": "r-1"}) as server:
        for observation, _ in (_real_sync(server, stop=False), _real_async(server)):
            assert observation.http_status == 200
            assert observation.body == {"status": "done"}
            assert observation.request_id == "r-1"


def test_a_dropped_connection_is_a_transport_error_not_an_exception() -> None:
    """A server closing without an answer gives an observation saying so."""
    with HostileServer("drop") as server:
        observation, _ = _real_sync(server)
    assert observation.transport_error == "the connection closed without a complete response"


def test_the_hostile_server_stops_by_itself() -> None:
    """Its lifetime bounds every loop: a forgotten server ends on its own, and so does its client.

    However late the client connects (a loaded machine), the server ends the connection by
    itself (its own lifetime, not the client's timeout), and every thread ends unjoined.
    """
    server = HostileServer("trickle-headers", lifetime_s=0.3).start()
    with (
        httpx.Client() as client,
        pytest.raises((httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError)),
    ):
        client.get(f"{server.base_url}/status", timeout=120.0)
    for thread in list(server._threads):
        thread.join(timeout=120.0)
        assert not thread.is_alive()
    server.stop()
    assert server.connections <= 1


# --- redirects ----------------------------------------------------------------------


class Router:
    """Answer by host, recording each request's URL and headers."""

    def __init__(self, answers: Mapping[str, httpx.Response]) -> None:
        self.answers = answers
        self.seen: list[tuple[str, Mapping[str, str]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((str(request.url), dict(request.headers)))
        return self.answers[request.url.host]


def _redirect_to_another_origin() -> Router:
    return Router(
        {
            "provider.test": httpx.Response(302, headers={"Location": "http://other.test/x"}),
            "other.test": httpx.Response(200, json={"status": "done"}),
        }
    )


def test_a_caller_client_that_follows_redirects_never_reaches_another_origin_sync() -> None:
    """follow_redirects=True on the caller's client is overridden: other.test receives nothing."""
    router = _redirect_to_another_origin()
    with httpx.Client(transport=httpx.MockTransport(router), follow_redirects=True) as client:
        observation = send_sync(
            client,
            Request(kind="status", url=URL, timeout_s=5.0),
            headers={"Authorization": f"Bearer {TOKEN}"},
            profile=PROFILE,
            clock=FakeClock(),
        )
    assert [url for url, _ in router.seen] == [URL]
    assert observation.http_status == 302
    assert "another origin" in str(observation.body_problem)


def test_a_caller_client_that_follows_redirects_never_reaches_another_origin_async() -> None:
    """The async transport overrides the caller's follow_redirects=True as well."""
    router = _redirect_to_another_origin()

    async def main() -> Observation:
        transport = httpx.MockTransport(router)
        async with httpx.AsyncClient(transport=transport, follow_redirects=True) as client:
            return await send_async(
                client,
                Request(kind="status", url=URL, timeout_s=5.0),
                headers={"Authorization": f"Bearer {TOKEN}"},
                profile=PROFILE,
                clock=FakeClock(),
            )

    observation = anyio.run(main)
    assert [url for url, _ in router.seen] == [URL]
    assert observation.http_status == 302


# --- nothing raises out of one request ----------------------------------------------


def _never(request: httpx.Request) -> httpx.Response:
    raise AssertionError("no request may be sent to an unusable URL")


@pytest.mark.parametrize("url", ["http://☃.net/status", "http://xn--n3h.net/status"])
def test_a_url_httpx_refuses_is_an_observation_not_an_exception(url: str) -> None:
    """httpx.InvalidURL (not an httpx.HTTPError) and IDNA errors become transport_error."""
    for send in (_sync, _async):
        observation = send(_never, url)
        assert observation.transport_error is not None
        assert observation.transport_error.startswith("the URL cannot be used (")
        assert "☃" not in observation.transport_error


@pytest.mark.parametrize(
    "error",
    [
        OSError("network is unreachable"),
        ValueError("odd"),
        httpx.DecodingError("bad"),
        httpx.LocalProtocolError("bad header"),
    ],
    ids=["oserror", "valueerror", "decoding", "local-protocol"],
)
def test_any_request_trouble_is_an_observation(error: Exception) -> None:
    """OSError, ValueError and every httpx.HTTPError from the exchange become transport_error."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    for send in (_sync, _async):
        observation = send(handler)
        assert observation.transport_error == f"transport error ({type(error).__name__})"


def test_a_header_that_cannot_be_sent_is_an_observation() -> None:
    """A caller's header httpx cannot encode is reported, not raised."""
    observation = _sync(_never, headers={"Authorization": "Bearer ☃☃☃☃☃☃☃☃"})
    assert observation.transport_error == "transport error (UnicodeEncodeError)"


def test_a_bug_in_the_handler_still_raises() -> None:
    """What is not one request's trouble (here a RuntimeError) is not swallowed."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("the process stops here")

    with pytest.raises(RuntimeError, match="process stops"):
        _sync(handler)


# --- bodies: content codings and the cap --------------------------------------------


class Streamed(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body served in chunks to a sync or an async client (never read whole by httpx)."""

    def __init__(self, data: bytes, chunk: int = 16 * 1024) -> None:
        self.data = data
        self.chunk = chunk

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), self.chunk):
            yield self.data[start : start + self.chunk]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk


def _encoded(coding: str, data: bytes, chunk: int = 16 * 1024) -> httpx.Response:
    return httpx.Response(200, headers={"Content-Encoding": coding}, stream=Streamed(data, chunk))


BODY = json.dumps({"status": "running", "pad": "x" * 5000}).encode()


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        ("gzip", gzip.compress(BODY)),
        ("x-gzip", gzip.compress(BODY)),
        ("deflate", zlib.compress(BODY)),
        ("deflate", zlib.compress(BODY)[2:-4]),
        ("identity", BODY),
        ("identity, gzip", gzip.compress(BODY)),
    ],
    ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw", "identity", "identity-then-gzip"],
)
def test_gzip_and_deflate_bodies_are_decoded(coding: str, data: bytes) -> None:
    """Each supported coding decodes to the same JSON, sync and async."""
    for send in (_sync, _async):
        observation = send(lambda request: _encoded(coding, data))
        assert observation.body_problem is None
        assert isinstance(observation.body, dict)
        assert observation.body["status"] == "running"


def test_a_trickled_deflate_body_is_decoded() -> None:
    """Deflate arriving one byte per chunk still finds its zlib header (or raw form)."""
    for data in (zlib.compress(BODY), zlib.compress(BODY)[2:-4]):
        observation = _sync(
            lambda request, data=data: _encoded("deflate", data, 1)  # type: ignore[misc]
        )
        assert observation.body_problem is None


@pytest.mark.parametrize(
    ("coding", "data", "words"),
    [
        ("br", b"\x0b\x02\x80{}\x03", "unsupported Content-Encoding"),
        ("zstd", b"(\xb5/\xfd", "unsupported Content-Encoding"),
        ("gzip, gzip", gzip.compress(gzip.compress(BODY)), "unsupported Content-Encoding"),
        ("gzip", b"not gzip at all", "cannot be decoded"),
        ("gzip", gzip.compress(BODY)[:-30], "cut short"),
    ],
    ids=["br", "zstd", "two-layers", "damaged", "truncated"],
)
def test_an_unusable_content_coding_is_a_body_problem(coding: str, data: bytes, words: str) -> None:
    """Other codings, damaged or cut-short data: a body problem, never an exception."""
    observation = _sync(lambda request: _encoded(coding, data))
    assert observation.http_status == 200
    assert words in str(observation.body_problem)
    assert observation.body is None


def test_accept_encoding_is_gzip_and_deflate_whatever_the_caller_asks() -> None:
    """waitbound decodes only what it asks for: a caller's br is replaced."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["accept-encoding"])
        return httpx.Response(200, json={"status": "running"})

    _sync(handler, headers={"Accept-Encoding": "br, zstd"})
    _async(handler)
    assert seen == ["gzip, deflate", "gzip, deflate"]


def _bomb(decoded_bytes: int) -> bytes:
    """A gzip body of *decoded_bytes* zeros, built without holding them."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"0" * (1024 * 1024)
    parts = [packer.compress(block) for _ in range(decoded_bytes // len(block))]
    return b"".join([*parts, packer.flush()])


BOMB_DECODED = 200 * 1024 * 1024
CAP = 1024 * 1024


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _bomb(BOMB_DECODED)


def test_a_gzip_bomb_is_capped_as_it_is_decoded_sync(bomb: bytes) -> None:
    """200 MB of zeros in ~200 KB of gzip: peak memory stays near the 1 MiB cap."""
    tracemalloc.start()
    try:
        observation = _sync(
            lambda request: _encoded(
                "gzip",
                bomb,
            )
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert observation.body_problem == f"a body larger than {CAP} bytes"
    assert peak < 8 * CAP, f"peak {peak} bytes"


def test_a_gzip_bomb_is_capped_as_it_is_decoded_async(bomb: bytes) -> None:
    """The async transport decodes under the same cap."""
    tracemalloc.start()
    try:
        observation = _async(lambda request: _encoded("gzip", bomb))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert observation.body_problem == f"a body larger than {CAP} bytes"
    assert peak < 8 * CAP, f"peak {peak} bytes"


def test_a_body_exactly_at_the_cap_is_read() -> None:
    """max_body_bytes decoded bytes are fine; one more is the problem."""
    exact = json.dumps({"status": "running", "pad": ""}).encode()
    pad = 100 - len(exact)
    body = json.dumps({"status": "running", "pad": "x" * pad}).encode()
    assert len(body) == 100
    settings = HttpSettings(max_body_bytes=100)
    ok = _sync(lambda request: _encoded("gzip", gzip.compress(body)), settings=settings)
    assert ok.body_problem is None
    over = _sync(lambda request: _encoded("gzip", gzip.compress(body + b" ")), settings=settings)
    assert over.body_problem == "a body larger than 100 bytes"


# --- what a provider says is redacted before it is kept ------------------------------


@pytest.mark.parametrize("header", ["X-Request-Id", "Request-Id", "x-ms-request-id"])
def test_an_echoed_credential_in_a_request_id_header_is_redacted(header: str) -> None:
    """A request id echoing the token is redacted in the kept headers and request_id."""
    observation = _sync(
        lambda request: httpx.Response(
            200, json={"status": "running"}, headers={header: f"req {TOKEN}"}
        ),
        secrets=SECRETS,
    )
    assert observation.request_id == f"req {REDACTED}"
    assert TOKEN not in json.dumps(dict(observation.headers))


def test_an_echoed_credential_in_retry_after_is_redacted() -> None:
    """A bad Retry-After quoting the Authorization header is kept only redacted."""
    observation = _sync(
        lambda request: httpx.Response(
            429, json={"status": "running"}, headers={"Retry-After": f"Bearer {TOKEN}"}
        ),
        secrets=SECRETS,
    )
    assert observation.headers["retry-after"] == REDACTED


def test_a_json_escaped_echo_in_the_body_is_redacted() -> None:
    r"""An echo written with \u escapes is redacted once decoded."""
    escaped = TOKEN.replace("-", "\\u002d")
    observation = _sync(
        lambda request: httpx.Response(
            200, content=f'{{"status": "running", "echo": "{escaped}"}}'.encode()
        ),
        secrets=SECRETS,
    )
    assert observation.body == {"status": "running", "echo": REDACTED}


def test_an_echo_in_a_text_result_is_redacted() -> None:
    """A result body that is not JSON is kept as text, redacted."""
    observation = _sync(
        lambda request: httpx.Response(200, content=f"token={TOKEN}\n".encode()),
        secrets=SECRETS,
        kind="result",
    )
    assert observation.body == f"token={REDACTED}\n"


# --- provider JSON through the transport --------------------------------------------


def test_a_nan_state_reads_as_the_string_nan() -> None:
    """{"status": NaN} is the state "NaN" (unknown), not a float."""
    observation = _sync(lambda request: httpx.Response(200, content=b'{"status": NaN}'))
    assert observation.body == {"status": "NaN"}


def test_a_duplicated_state_key_reads_as_ambiguous() -> None:
    """{"status":"failed","status":"completed"} reaches the core as an Ambiguous marker."""
    observation = _sync(
        lambda request: httpx.Response(200, content=b'{"status":"failed","status":"completed"}')
    )
    assert isinstance(observation.body, dict)
    assert isinstance(observation.body["status"], Ambiguous)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"status": "\xff"}', "not JSON"),
    ],
    ids=["deep", "invalid-utf8"],
)
def test_unreadable_status_bodies_are_body_problems(content: bytes, words: str) -> None:
    """Deep nesting and invalid UTF-8 give a body problem, sync and async."""
    for send in (_sync, _async):
        observation = send(lambda request: httpx.Response(200, content=content))
        assert words in str(observation.body_problem)


def test_a_body_problem_quoting_the_provider_is_redacted() -> None:
    """A problem text built from a provider's header (Content-Encoding) is redacted too."""
    observation = _sync(lambda request: _encoded(f"x-{TOKEN}", b"{}"), secrets=SECRETS)
    assert "unsupported Content-Encoding" in str(observation.body_problem)
    assert TOKEN not in str(observation.body_problem)


# --- waitbound's own async clients: the deadline kept by their network streams ------


def _own_async(server: HostileServer) -> tuple[Observation, float]:
    async def main() -> tuple[Observation, float]:
        started = time.monotonic()
        async with new_async_client() as client:
            assert is_bounded(client)
            observation = await send_async(
                client,
                Request(kind="status", url=f"{server.base_url}/status", timeout_s=TIMEOUT_S),
                headers={},
                profile=PROFILE,
                clock=SystemClock(),
            )
            return observation, time.monotonic() - started

    return anyio.run(main)


@pytest.mark.parametrize("mode", HOSTILE_MODES)
def test_trickled_headers_cannot_outlast_the_total_timeout_own_async_client(mode: Mode) -> None:
    """With waitbound's own async client (no cancel scope around the exchange), its
    network streams keep the bound read by read: a server trickling its headers or its
    body one byte at a time, or silent, is cut off at the total timeout."""
    with HostileServer(mode, interval_s=0.2, lifetime_s=10) as server:
        observation, elapsed = _own_async(server)
    assert elapsed < TIMEOUT_S + MARGIN_S
    assert observation.transport_error == f"no answer within {TIMEOUT_S:.3g}s (timeout)"
    assert observation.http_status is None


def test_a_prompt_real_answer_is_read_by_the_own_async_client() -> None:
    """The bounded streams do not disturb an ordinary answer."""
    body = b'{"status": "done"}'
    with HostileServer("answer", body=body, headers={"X-Request-Id": "r-1"}) as server:
        observation, _ = _own_async(server)
    assert (observation.http_status, observation.body) == (200, {"status": "done"})


def test_a_read_past_the_deadline_takes_only_what_has_arrived() -> None:
    """Past the deadline a write or a connect fails at once; a read gets a grace of
    GRACE_S (bytes already received are read, a trickler waits no longer)."""

    async def main() -> None:
        with deadline_of(-1.0):
            assert _bounded._left(30.0, httpcore.ReadTimeout, grace=True) == GRACE_S
            with pytest.raises(httpcore.WriteTimeout):
                _bounded._left(30.0, httpcore.WriteTimeout)
        with deadline_of(100.0):
            left = _bounded._left(None, httpcore.ReadTimeout)
            assert left is not None
            assert 99.0 < left <= 100.0
        assert _bounded._left(7.0, httpcore.ReadTimeout) == 7.0  # no deadline: as given

    anyio.run(main)
