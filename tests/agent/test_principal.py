"""Who an MCP request is served for (``waitbound.mcp._principal``): the token's holder,
the session with ``--no-auth``, nobody otherwise; and which labels each reaches."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser

from waitbound.mcp._http import HolderVerifier
from waitbound.mcp._principal import (
    NOBODY,
    OPEN_SESSION_KEY,
    acting_for,
    current,
    owner_of,
    principal_of_request,
)
from waitbound.web._tokens import Holder

HOLDERS = (
    Holder(name="ann", role="decider", token="a" * 32),
    Holder(name="bob", role="viewer", token="b" * 32),
    Holder(name=None, role="admin", token="s" * 32),
)


async def _request(token: str | None, **scope: Any) -> Any:
    headers = list(scope.pop("headers", []))
    if token is not None:
        access = await HolderVerifier(HOLDERS).verify_token(token)
        assert access is not None
        scope["user"] = AuthenticatedUser(access)
    return SimpleNamespace(scope={"type": "http", "headers": headers, **scope})


@pytest.mark.anyio
async def test_a_token_is_its_holder_with_its_role() -> None:
    ann = principal_of_request(await _request("a" * 32))
    bob = principal_of_request(await _request("b" * 32))
    shared = principal_of_request(await _request("s" * 32))
    assert (ann.owner, ann.role, ann.by, ann.decides) == ("ann", "decider", "ann", True)
    assert (bob.owner, bob.decides) == ("bob", False)
    assert (shared.owner, shared.admin, shared.by) == (None, True, "bearer")
    assert await HolderVerifier(HOLDERS).verify_token("x" * 32) is None


@pytest.mark.anyio
async def test_each_reaches_its_own_labels_and_an_admin_every_one() -> None:
    ann = principal_of_request(await _request("a" * 32))
    bob = principal_of_request(await _request("b" * 32))
    shared = principal_of_request(await _request("s" * 32))
    assert ann.label("reports") == "mcp:ann/reports"
    assert owner_of("mcp:ann/reports") == "ann"
    assert owner_of("mcp:reports") is None
    assert ann.reaches("mcp:ann/reports")
    assert not bob.reaches("mcp:ann/reports")
    assert not bob.reaches("mcp:reports")  # the operator's: admins only
    assert shared.reaches("mcp:ann/reports")
    assert shared.reaches("mcp:reports")
    assert ann.key_scope("reports", "k") != bob.key_scope("reports", "k")
    assert (ann.label_prefix, shared.label_prefix) == ("mcp:ann/", "mcp:")


@pytest.mark.anyio
async def test_without_a_token_a_request_is_nobody_unless_the_server_is_open() -> None:
    closed = principal_of_request(await _request(None))
    assert closed is NOBODY
    assert not closed.reaches("mcp:reports")
    session = [(b"mcp-session-id", b"abc123")]
    opened = principal_of_request(await _request(None, headers=session, **{OPEN_SESSION_KEY: True}))
    assert (opened.owner, opened.decides) == ("session-abc123", False)
    sessionless = principal_of_request(await _request(None, **{OPEN_SESSION_KEY: True}))
    assert sessionless.owner == "local"
    forged = [(b"mcp-session-id", b"../x y")]
    bad = await _request(None, headers=forged, **{OPEN_SESSION_KEY: True})
    assert principal_of_request(bad) is NOBODY


def test_without_a_request_the_principal_in_force_stays() -> None:
    assert principal_of_request(None).admin  # stdio and in-process: the operator
    with acting_for(NOBODY):
        assert principal_of_request(None) is NOBODY
        assert current() is NOBODY
