"""Sessions bound to their origin and revocable, and people rather than names
(in process: the real application, Starlette's TestClient, a MemoryStore, a fake
clock): the cookie is opaque and scoped to its session's own path, sign-out and an
operator revoke it, a state-changing request from another origin or port is refused,
named tokens carry their owner and role, and a trusted proxy's user header is believed
only from its addresses."""

from __future__ import annotations

import ipaddress
import threading
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from httpx_sse import connect_sse
from starlette.datastructures import Headers

from tests.web.test_pages import TOKEN, Inbox, SessionClient, base_of_location, csrf_of
from waitbound import MemoryStore, SQLiteStore, UsageError
from waitbound.cli import run
from waitbound.stores._sessions import sessions_of
from waitbound.web._auth import TrustedProxy, cross_origin
from waitbound.web._config import ServeConfig, load_serve_config
from waitbound.web._session import SESSION_COOKIE, Sessions, digest
from waitbound.web._tokens import Holder, allows, match_token, parse_tokens

ANN = "ann-token-" + "a" * 24
VIC = "vic-token-" + "v" * 24
ROOT = "root-token-" + "r" * 24
HOLDERS = (
    Holder(name="ann", role="decider", token=ANN),
    Holder(name="vic", role="viewer", token=VIC),
    Holder(name="root", role="admin", token=ROOT),
)


def named_inbox(**kwargs: Any) -> Inbox:
    """An inbox whose token file names three people (decider, viewer, admin)."""
    made = Inbox(**kwargs)
    service = made.app.state.service
    made.app.state.service = type(service)(
        store=service.store,
        config=service.config,
        clock=service.clock,
        token=ANN,
        holders=HOLDERS,
    )
    return made


def rebuild(made: Inbox, holders: tuple[Holder, ...], config: ServeConfig | None = None) -> None:
    """Serve *made*'s store again with these token holders (and config)."""
    from waitbound.web._app import create_app
    from waitbound.web._service import Service

    service = Service(
        store=made.store,
        config=config or ServeConfig(),
        clock=made.clock,
        token=holders[0].token,
        holders=holders,
    )
    made.app = create_app(service, poll_s=0.005, ping_s=0)
    made.client = SessionClient(made.app, raise_server_exceptions=False)


@pytest.fixture
def inbox() -> Inbox:
    return Inbox()


@pytest.fixture
def named() -> Inbox:
    made = Inbox()
    rebuild(made, HOLDERS)
    return made


def sign_in(client: SessionClient, token: str, name: str = "") -> str:
    """Sign *client* in with *token*; its base is set; return the CSRF token."""
    answer = client.post("/sign-in", data={"name": name, "token": token}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    client.base = base_of_location(answer.headers["location"])
    return csrf_of(client.get("/").text)


def cookie_of(client: SessionClient) -> str:
    value = client.cookies.get(SESSION_COOKIE)
    assert value
    return value


# --- the cookie ------------------------------------------------------------------------


def test_the_session_cookie_is_opaque_and_the_store_keeps_only_its_hash(inbox):
    """The cookie holds neither the name nor the CSRF token (nothing readable); the
    store's row keeps only the SHA-256 of the cookie and of the path key."""
    csrf = inbox.sign_in("Ada")
    value = cookie_of(inbox.client)
    assert "Ada" not in value
    assert csrf not in value
    (row,) = sessions_of(inbox.store).list_sessions(now=inbox.clock.now())
    assert row.session_id == digest(value)
    assert value not in repr(row)
    assert inbox.client.base.removeprefix("/s/") not in repr(row)


def test_the_cookie_is_refused_outside_its_own_sessions_path(inbox):
    """Replayed by a script at the plain paths, or under another session's prefix, the
    cookie counts as none (303 to sign-in); under its own prefix it works."""
    inbox.sign_in()
    value = cookie_of(inbox.client)
    replay = SessionClient(inbox.app)
    header = {"Cookie": f"{SESSION_COOKIE}={value}"}
    assert replay.get("/", headers=header, follow_redirects=False).status_code == 303
    other = "/s/" + "A" * 32
    assert replay.get(f"{other}/", headers=header, follow_redirects=False).status_code == 303
    own = replay.get(f"{inbox.client.base}/", headers=header, follow_redirects=False)
    assert own.status_code == 200


def test_sign_out_revokes_the_session_so_the_old_cookie_is_refused(inbox):
    """After sign-out the same cookie, replayed under its own prefix, is refused (it no
    longer works for 12 hours), and the store shows the session revoked."""
    csrf = inbox.sign_in()
    value, base = cookie_of(inbox.client), inbox.client.base
    assert (
        inbox.client.post("/sign-out", data={"csrf": csrf}, follow_redirects=False).status_code
        == 303
    )
    replay = SessionClient(inbox.app)
    header = {"Cookie": f"{SESSION_COOKIE}={value}"}
    assert replay.get(f"{base}/", headers=header, follow_redirects=False).status_code == 303
    assert sessions_of(inbox.store).list_sessions(now=inbox.clock.now()) == []
    (row,) = sessions_of(inbox.store).list_sessions(now=inbox.clock.now(), ended=True)
    assert row.revoked_at is not None


def test_an_admin_lists_and_revokes_sessions_over_http(named):
    """GET /sessions with an admin token lists who is signed in (no secret); POST
    /sessions/ID/revoke ends one at its next request; revoke-all ends the rest."""
    ann, vic = SessionClient(named.app), SessionClient(named.app)
    sign_in(ann, ANN)
    sign_in(vic, VIC)
    admin = {"Authorization": f"Bearer {ROOT}"}
    listed = named.client.get("/sessions", headers=admin).json()["sessions"]
    assert sorted(s["who"] for s in listed) == ["ann", "vic"]
    assert all(ANN not in str(s) and cookie_of(ann) not in str(s) for s in listed)
    ann_id = next(s["id"] for s in listed if s["who"] == "ann")
    done = named.client.post(f"/sessions/{ann_id}/revoke", headers=admin)
    assert done.status_code == 200
    assert ann.get("/", follow_redirects=False).status_code == 303
    assert vic.get("/", follow_redirects=False).status_code == 200
    assert len(named.client.post("/sessions/revoke-all", headers=admin).json()["revoked"]) == 1
    assert vic.get("/", follow_redirects=False).status_code == 303


def test_the_revoke_endpoints_answer_the_sessions_as_revoked(named):
    """POST /sessions/ID/revoke and /sessions/revoke-all answer each session with its
    revoked_at set (the moment of the revoke), as `waitbound sessions revoke` prints it."""
    ann, vic = SessionClient(named.app), SessionClient(named.app)
    sign_in(ann, ANN)
    sign_in(vic, VIC)
    admin = {"Authorization": f"Bearer {ROOT}"}
    listed = named.client.get("/sessions", headers=admin).json()["sessions"]
    ann_id = next(s["id"] for s in listed if s["who"] == "ann")
    one = named.client.post(f"/sessions/{ann_id}/revoke", headers=admin).json()["revoked"]
    rest = named.client.post("/sessions/revoke-all", headers=admin).json()["revoked"]
    assert [s["who"] for s in one + rest] == ["ann", "vic"]
    assert all(s["revoked_at"] is not None for s in one + rest)


@pytest.mark.parametrize("path", ["/events", "/operations/op-1/events"])
def test_a_stream_a_session_holds_open_ends_once_the_session_is_revoked(named, path):
    """An event stream a signed-in session opened — one that would not end by itself
    (all operations; an operation with a decision open) — ends once the session is
    revoked: a revoked cookie is not a standing subscription."""
    named.escalate("op-1")
    ann = SessionClient(named.app)
    sign_in(ann, ANN)
    stopping = named.app.state.service.stopping
    guard = threading.Timer(60, stopping.set)  # ends the stream only if the fix is missing
    guard.start()
    try:
        with connect_sse(cast(httpx.Client, ann), "GET", path) as source:
            assert source.response.status_code == 200
            messages = source.iter_sse()
            next(messages)
            sessions_of(named.store).revoke_sessions(at=named.clock.now())
            for _ in messages:
                pass
    finally:
        guard.cancel()
    assert not stopping.is_set()


def test_a_bearer_or_proxy_stream_has_no_session_to_recheck():
    """Only a session's stream is rechecked: a bearer request has nothing to revoke."""
    from starlette.requests import Request

    from waitbound.web._app import session_still_open

    request = Request({"type": "http", "method": "GET", "path": "/events", "headers": []})
    assert session_still_open(request, Sessions(MemoryStore()), 0.25) is None


def test_waitbound_sessions_revoke_ends_a_session_in_a_sqlite_store(tmp_path: Path, capsys):
    """The CLI lists the sessions of the store and revokes one by its id; its cookie is
    then refused by the service reading the same store."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        sessions = Sessions(store)
        session, value = sessions.issue("ann", role="decider", via="token ann")
        assert run(["sessions", "--store", str(path)]) == 0
        listed = capsys.readouterr().out
        assert session.row.shown_id in listed
        assert "ann" in listed
        revoke = ["sessions", "revoke", session.row.shown_id, "--store", str(path)]
        assert run(revoke) == 0
        assert sessions.read(value, session.base.removeprefix("/s/")) is None
        assert run(revoke) == 2
        assert "no open session" in capsys.readouterr().err
    finally:
        store.close()


def test_waitbound_sessions_all_lists_the_ended_ones_without_the_list_word(tmp_path: Path, capsys):
    """`waitbound sessions --all` lists revoked sessions too, as `sessions list --all` does."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        sessions = Sessions(store)
        session, _ = sessions.issue("ann", role="decider", via="token ann")
        assert run(["sessions", "revoke", "--all", "--store", str(path)]) == 0
        capsys.readouterr()
        assert run(["sessions", "--all", "--store", str(path)]) == 0
        short = capsys.readouterr().out
        assert run(["sessions", "list", "--all", "--store", str(path)]) == 0
        assert short == capsys.readouterr().out
        assert session.row.shown_id in short
        assert "revoked" in short
        assert run(["sessions", "--all", "revoke", "--store", str(path)]) == 2
        assert "write it after" in capsys.readouterr().err
    finally:
        store.close()


# --- origin ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "origin", "refused"),
    [
        ("inbox.example.com", "https://inbox.example.com", False),
        ("inbox.example.com", "https://inbox.example.com:8443", True),
        ("inbox.example.com:443", "https://inbox.example.com", False),
        ("127.0.0.1:8765", "http://127.0.0.1:8765", False),
        ("127.0.0.1:8765", "http://127.0.0.1:9999", True),
        ("127.0.0.1:8765", "http://127.0.0.1", True),
    ],
)
def test_an_origin_behind_a_tls_ending_proxy_is_compared_by_the_browsers_scheme(
    host: str, origin: str, refused: bool
):
    """A Host without a port has the default port of the Origin's scheme: the https
    page of a proxy that ends TLS is this service's own, another port is not."""
    found = cross_origin(Headers({"host": host, "origin": origin}), "http")
    assert (found is not None) is refused, found


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "http://testserver:9999"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://testserver", "Sec-Fetch-Site": "same-site"},
        {"Origin": "http://testserver:9999", "Sec-Fetch-Site": "same-site"},
    ],
)
def test_a_decision_from_another_origin_or_port_is_refused_even_with_the_csrf_token(inbox, headers):
    """A signed-in POST carrying the right CSRF token but sent from another site, another
    port of the same host, an opaque origin, or flagged cross-/same-site by Fetch
    Metadata: 403, nothing decided."""
    inbox.escalate("op-1")
    csrf = inbox.sign_in()
    answer = inbox.client.post(
        "/operation/op-1/decide",
        data={"csrf": csrf, "option": "abandon", "why": "from elsewhere"},
        headers=headers,
        follow_redirects=False,
    )
    assert answer.status_code == 403
    assert answer.json()["error"] == "cross_origin"
    assert inbox.store.get("op-1").decisions == ()


def test_a_decision_from_the_same_origin_is_accepted(inbox):
    """Origin equal to the service's own (and Sec-Fetch-Site same-origin): accepted."""
    inbox.escalate("op-1")
    csrf = inbox.sign_in()
    answer = inbox.client.post(
        "/operation/op-1/decide",
        data={"csrf": csrf, "option": "abandon", "why": "here"},
        headers={"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    assert len(inbox.store.get("op-1").decisions) == 1


def test_a_sign_in_from_another_origin_is_refused(inbox):
    """A cross-origin sign-in (a login CSRF, or a no-cors flood): 403, no session."""
    answer = inbox.client.post(
        "/sign-in",
        data={"name": "Ada", "token": TOKEN},
        headers={"Origin": "http://127.0.0.1:9999"},
        follow_redirects=False,
    )
    assert answer.status_code == 403
    assert "set-cookie" not in answer.headers
    assert sessions_of(inbox.store).list_sessions(now=inbox.clock.now()) == []


def test_a_webhook_delivery_needs_no_origin_check(inbox):
    """The receiver is not a browser's: an Origin header does not refuse it by itself
    (an unknown receiver is 404, not 403)."""
    answer = inbox.client.post(
        "/webhooks/nobody", content=b"{}", headers={"Origin": "https://evil.example"}
    )
    assert answer.status_code != 403


# --- people and roles ------------------------------------------------------------------


def test_a_named_token_signs_in_as_its_owner_whatever_name_is_typed(named):
    """Signing in with ann's token and the name 'bob' typed: the session is ann's, and
    her decision is recorded as made by ann."""
    named.escalate("op-1")
    csrf = sign_in(named.client, ANN, name="bob")
    page = named.client.get("/")
    assert 'data-testid="signed-in-as">ann<' in page.text
    answer = named.client.post(
        "/operation/op-1/decide",
        data={"csrf": csrf, "option": "abandon", "why": "done with it", "by": "bob"},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    assert [d.by for d in named.store.get("op-1").decisions] == ["ann"]


def test_a_viewer_sees_but_cannot_decide(named):
    """The viewer's session reads every page (an option's page says deciding needs the
    decider role, no form); its decision POST is 403, nothing decided."""
    named.escalate("op-1")
    csrf = sign_in(named.client, VIC)
    assert named.client.get("/operation/op-1").status_code == 200
    offered = named.client.get("/operation/op-1", params={"option": "abandon"})
    assert 'data-testid="viewer-note"' in offered.text
    assert 'name="why"' not in offered.text
    answer = named.client.post(
        "/operation/op-1/decide",
        data={"csrf": csrf, "option": "abandon", "why": "w"},
        follow_redirects=False,
    )
    assert answer.status_code == 403
    assert named.store.get("op-1").decisions == ()
    bearer = named.client.post(
        "/operation/op-1/decide",
        data={"option": "abandon", "why": "w"},
        headers={"Authorization": f"Bearer {VIC}"},
    )
    assert bearer.status_code == 403


def test_a_bearer_decision_with_a_named_token_is_by_its_owner(named):
    """A script deciding with ann's token is recorded as ann (a form's 'by' is ignored)."""
    named.escalate("op-1")
    answer = named.client.post(
        "/operation/op-1/decide",
        data={"option": "abandon", "why": "script", "by": "someone-else"},
        headers={"Authorization": f"Bearer {ANN}"},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    assert [d.by for d in named.store.get("op-1").decisions] == ["ann"]


def test_only_an_admin_manages_sessions(named):
    """GET /sessions: 403 for a decider's and a viewer's token, 200 for the admin's."""
    for token, status in ((ANN, 403), (VIC, 403), (ROOT, 200)):
        answer = named.client.get("/sessions", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == status, token


def test_the_shared_token_is_an_admin_whose_typed_name_is_marked():
    """One unnamed token (the earlier file format): an admin; the name typed at sign-in
    is recorded as '<name> (shared token)'."""
    (holder,) = parse_tokens("shared-token-" + "s" * 20 + "\n", "token file t")
    assert holder.shared
    assert holder.role == "admin"
    made = Inbox()
    made.escalate("op-1")
    csrf = made.sign_in("Ada")
    made.client.post(
        "/operation/op-1/decide",
        data={"csrf": csrf, "option": "abandon", "why": "w"},
        follow_redirects=False,
    )
    record = made.store.get("op-1")
    assert record is not None
    assert [d.by for d in record.decisions] == ["Ada (shared token)"]


# --- trusted proxy ---------------------------------------------------------------------


def proxied(config: ServeConfig, address: str) -> tuple[Inbox, SessionClient]:
    made = Inbox()
    rebuild(made, HOLDERS, config)
    return made, SessionClient(made.app, client=(address, 40000))


PROXY = ServeConfig(
    proxy=TrustedProxy(
        addresses=(ipaddress.ip_network("10.0.0.5/32"),),
        user_header="X-Auth-Request-User",
        role="decider",
    )
)


def test_a_trusted_proxys_user_header_signs_the_request_in():
    """From the proxy's address, X-Auth-Request-User names the person: the page shows
    them, and their decision (with the page's CSRF token) is recorded as theirs."""
    made, client = proxied(PROXY, "10.0.0.5")
    made.escalate("op-1")
    head = {"X-Auth-Request-User": "carol@example.org"}
    page = client.get("/operation/op-1", params={"option": "abandon"}, headers=head)
    assert 'data-testid="signed-in-as">carol@example.org<' in page.text
    csrf = csrf_of(page.text)
    answer = client.post(
        "/operation/op-1/decide",
        data={"csrf": csrf, "option": "abandon", "why": "via the proxy"},
        headers=head,
        follow_redirects=False,
    )
    assert answer.status_code == 303
    record = made.store.get("op-1")
    assert record is not None
    assert [d.by for d in record.decisions] == ["carol@example.org"]


def test_a_proxy_user_header_from_any_other_address_is_ignored():
    """The same header from a client that is not the proxy signs nobody in."""
    _, client = proxied(PROXY, "10.0.0.6")
    head = {"X-Auth-Request-User": "carol@example.org"}
    assert client.get("/", headers=head, follow_redirects=False).status_code == 303
    assert client.get("/operations/x", headers=head).status_code == 401


def test_the_auth_table_of_serve_toml_configures_the_proxy(tmp_path: Path):
    """[auth] trusted_proxies, user_header, proxy_role are read; a bad address or role is
    one line naming the key."""
    path = tmp_path / "serve.toml"
    path.write_text(
        '[auth]\ntrusted_proxies = ["127.0.0.1", "10.0.0.0/8"]\n'
        'user_header = "X-Forwarded-User"\nproxy_role = "viewer"\n'
    )
    proxy = load_serve_config(path).proxy
    assert proxy is not None
    assert proxy.role == "viewer"
    assert proxy.trusts(("10.1.2.3", 1))
    assert not proxy.trusts(("192.168.0.1", 1))
    path.write_text('[auth]\ntrusted_proxies = ["not-an-address"]\n')
    with pytest.raises(UsageError, match=r"auth.trusted_proxies\[0\]"):
        load_serve_config(path)
    path.write_text('[auth]\ntrusted_proxies = ["::1"]\nproxy_role = "owner"\n')
    with pytest.raises(UsageError, match=r"auth\.proxy_role"):
        load_serve_config(path)


# --- the token file --------------------------------------------------------------------


def test_a_token_file_of_named_tokens_is_read_with_roles():
    """NAME ROLE TOKEN lines, comments and blank lines: each holder with its role."""
    text = f"# people\nann decider {ANN}\n\nvic viewer {VIC}  # read only\nroot admin {ROOT}\n"
    holders = parse_tokens(text, "token file t")
    assert [(h.name, h.role) for h in holders] == [
        ("ann", "decider"),
        ("vic", "viewer"),
        ("root", "admin"),
    ]
    assert match_token(VIC, holders) == holders[1]
    assert match_token("nope-" + "x" * 20, holders) is None
    assert allows("admin", "decider")
    assert not allows("viewer", "decider")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"ann owner {ANN}", "the role must be one of"),
        (f"ann decider {ANN}\nbob viewer {ANN}", "a token is given twice"),
        (f"ann decider {ANN}\nann viewer {VIC}", "a name is given twice"),
        ("ann decider short", "does not hold a bearer token"),
        (f"ann decider {ANN} extra", "three words"),
        (f"{ANN}\n{VIC}", "at most one line is a token without a name"),
        ("# only a comment\n", "is empty"),
    ],
)
def test_a_bad_named_token_file_is_one_line_without_the_token(text, message):
    """Each fault: one line naming the file (and line), never a token."""
    with pytest.raises(UsageError, match=message) as caught:
        parse_tokens(text, "token file t")
    assert "\n" not in str(caught.value)
    assert ANN not in str(caught.value)
    assert VIC not in str(caught.value)


def test_a_readable_serve_toml_with_literal_secrets_is_warned_about(tmp_path: Path, capsys):
    """serve.toml holding a secret itself and readable by others: a warning naming the
    file and its mode; one whose secrets are all ${NAME}: none needed."""
    from waitbound.cli._tokens import warn_if_readable

    secret = "whsec_" + "c2VjcmV0LXdlYmhvb2sta2V5LWZvci10ZXN0cw=="
    path = tmp_path / "serve.toml"
    path.write_text(f'[notify]\nsecret = "{secret}"\n')
    path.chmod(0o644)
    assert load_serve_config(path).holds_secrets
    warn_if_readable(path, "serve config")
    err = capsys.readouterr().err
    assert "serve config" in err
    assert "0644" in err
    assert secret not in err
    path.write_text('[notify]\nsecret = "${NOTIFY}"\n')
    assert not load_serve_config(path, env={"NOTIFY": secret}).holds_secrets
