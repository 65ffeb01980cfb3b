"""An operation's story says truthfully whether each request carried the caller's
credentials: the same decision that chose its headers (``headers_for``), never a second
copy of the rule.

A worker holding bound credentials (``--header-for``) sends them to a place they are
bound to even when the record does not trust that origin, and withholds them from an
origin the record trusts but the binding does not hold. Each request a real loopback
server received is compared with the ``reserved`` line of the story that sent it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.agent.test_bound_credentials import FAST, PROFILE, SECRET, Recorder, recorder
from waitbound import Operation, Record, SQLiteStore, WorkerSettings, parse_profile, start, work
from waitbound._rules._credentials import BoundCredentials
from waitbound.cli._credentials import from_flags

pytestmark = pytest.mark.anyio

WITHOUT = "without the caller's credentials"
WITH = "with the caller's credentials"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _operation(provider: Recorder, attacker: Recorder, case: str) -> Operation:
    """Each case: which origin the record names, which it trusts, where its result is."""
    profile = parse_profile(PROFILE)
    if case == "bound-result-at-untrusted-origin":  # polled at the attacker, result home
        return Operation(
            status_url=f"{attacker.base_url}/jobs/1",
            result_url=f"{provider.base_url}/results/1",
            profile=profile,
            policy=FAST,
        )
    if case == "trusted-origin-not-bound":  # trusts the attacker: still no header there
        return Operation(
            status_url=f"{attacker.base_url}/jobs/2",
            trusted_origins=(provider.base_url,),
            profile=profile,
            policy=FAST,
        )
    assert case == "own-origin-bound"
    return Operation(
        status_url=f"{provider.base_url}/jobs/3",
        result_url=f"{attacker.base_url}/results/3",
        profile=profile,
        policy=FAST,
    )


def _credentials(provider: Recorder, kind: str) -> Callable[[Record], Mapping[str, str]]:
    if kind == "bound":
        bound = from_flags([(provider.base_url, f"Authorization: Bearer {SECRET}")]).bound()
        assert isinstance(bound, BoundCredentials)
        return bound
    fixed = {"Authorization": f"Bearer {SECRET}"}
    return lambda record: fixed


@pytest.mark.parametrize("credentials", ["bound", "per-operation"])
@pytest.mark.parametrize(
    "case",
    ["bound-result-at-untrusted-origin", "trusted-origin-not-bound", "own-origin-bound"],
)
async def test_the_story_says_whether_the_callers_credentials_were_sent(
    tmp_path: Path, case: str, credentials: str
) -> None:
    """Every ``reserved`` line says "without the caller's credentials" exactly when
    the request that followed it reached its server without the header; a request that
    carried it to an origin other than the operation's says "with"."""
    store = SQLiteStore(tmp_path / "s.db")
    try:
        with recorder() as provider, recorder() as attacker:
            operation_id = start(_operation(provider, attacker, case), store=store).operation_id
            with anyio.fail_after(20):
                await work(
                    store,
                    settings=WorkerSettings(until_idle=True, idle_s=0.05),
                    headers=_credentials(provider, credentials),
                )
            received = sorted(
                [(path, "authorization" in headers) for _, path, headers in provider.seen]
                + [(path, "authorization" in headers) for _, path, headers in attacker.seen]
            )
        reserved = [
            stored.event for stored in store.audit(operation_id) if stored.event.kind == "reserved"
        ]
    finally:
        store.close()
    assert len(reserved) == len(received) >= 1
    record_origin = _operation_origin(case, provider, attacker)
    lines: list[tuple[str, bool]] = []
    for event in reserved:
        url = _url_of(event.data, case, provider, attacker)
        said_without = WITHOUT in event.summary
        said_with = WITH in event.summary
        assert not (said_without and said_with), event.summary
        lines.append((url, not said_without))
        if not url.startswith(record_origin):  # another origin: the line names which
            assert said_with or said_without, event.summary
    sent = dict(received)
    for url, said_sent in lines:
        path = "/" + url.split("/", 3)[3]
        assert sent[path] is said_sent, (url, said_sent, sent)


def _operation_origin(case: str, provider: Recorder, attacker: Recorder) -> str:
    return provider.base_url if case == "own-origin-bound" else attacker.base_url


def _url_of(data: Mapping[str, Any], case: str, provider: Recorder, attacker: Recorder) -> str:
    """The URL of a reserved request (status or result) of *case*'s operation."""
    number = {
        "bound-result-at-untrusted-origin": ("1", attacker, provider),
        "trusted-origin-not-bound": ("2", attacker, attacker),
        "own-origin-bound": ("3", provider, attacker),
    }[case]
    n, status_at, result_at = number
    if data["request"] == "result":
        return f"{result_at.base_url}/results/{n}"
    return f"{status_at.base_url}/jobs/{n}"
