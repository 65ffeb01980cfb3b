"""The inbox's pages in ``waitbound serve`` (in process, Starlette's TestClient, a
MemoryStore and a fake clock): every page with data and empty, sign-in and its
session cookie, CSRF on every form, the first decision winning, the security headers
on every answer, no secret on any page, and no open redirect."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import jmespath
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

import waitbound
from tests.fakes import FakeClock, ScriptedProvider
from waitbound import MemoryStore, Operation, Policy
from waitbound._model._push import InboundDelivery
from waitbound._profile._webhooks import Scheme
from waitbound.cli import run
from waitbound.web._app import _since, create_app
from waitbound.web._config import Receiver, ServeConfig
from waitbound.web._security import SECURITY_HEADERS
from waitbound.web._service import Service
from waitbound.web._session import SESSION_COOKIE, SESSION_MAX_AGE_S, Sessions, local_path
from waitbound.web._views import duration, notify_target

TOKEN = "tok_" + "pAg3s" * 8
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HEADER_SECRET = "hdr-" + "S3cretHeader" * 3
QUERY_SECRET = "qry-" + "S3cretQuery" * 3
PATH_SECRET = "pth-" + "S3cretPath" * 3
WEBHOOK_SECRET = "whsec_" + "c2VjcmV0LXdlYmhvb2sta2V5LWZvci10ZXN0cw=="
NOTIFY_SECRET = "whsec_" + "bm90aWZ5LXNlY3JldC1rZXktZm9yLXRlc3RzISE="
SECRETS = (TOKEN, HEADER_SECRET, QUERY_SECRET, PATH_SECRET, WEBHOOK_SECRET, NOTIFY_SECRET)
PROFILE = {
    "state": "status",
    "pending": ["running"],
    "succeeded": ["done"],
    "failed": ["failed"],
    "progress": "progress",
}
TEMPLATES = Path(waitbound.__file__).parent / "web" / "templates"
STATIC = Path(waitbound.__file__).parent / "web" / "static"


class SessionClient(TestClient):
    """A TestClient that, once signed in (``base`` set), asks for the inbox's paths
    under the session's prefix, as a browser following the pages' links does."""

    base = ""

    def build_request(self, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
        parts = urlsplit(str(url))
        if self.base and not parts.path.startswith(
            ("/s/", "/sign-in", "/static/", "/healthz", "/webhooks/")
        ):
            url = urlunsplit(parts._replace(path=self.base + parts.path))
        return super().build_request(method, url, *args, **kwargs)


def base_of_location(location: str) -> str:
    """The ``/s/KEY`` prefix a sign-in's 303 names."""
    assert location.startswith("/s/"), location
    return location[:35]


class Inbox:
    """A served inbox: the store, the fake clock and a client."""

    def __init__(self, config: ServeConfig | None = None, **kwargs: Any) -> None:
        self.store = MemoryStore()
        self.clock = FakeClock()
        service = Service(
            store=self.store, config=config or ServeConfig(), clock=self.clock, token=TOKEN
        )
        self.app = create_app(service, poll_s=0.005, ping_s=0, **kwargs)
        self.client = SessionClient(self.app, raise_server_exceptions=False)

    def operation(self, label: str | None = None, **changes: Any) -> Operation:
        # A budget that covers the deadline at the cap (30 x 30 s >= 600 s), so the next
        # check's delay source is the backoff's, not the budget's spread (issue 33).
        policy = changes.pop("policy", Policy(base_delay_s=1.0, max_delay_s=30.0, deadline_s=600))
        return Operation(
            status_url=changes.pop("status_url", "http://provider.test/status"),
            profile=waitbound.parse_profile(PROFILE, name=changes.pop("profile", "reports")),
            policy=policy,
            label=label,
            **changes,
        )

    def start(self, operation_id: str, label: str | None = None, **changes: Any) -> None:
        """An operation in flight (nothing sent yet)."""
        operation = self.operation(label, **changes)
        waitbound.start(operation, operation_id=operation_id, store=self.store, clock=self.clock)

    def wait(
        self,
        operation_id: str,
        answers: list[Any],
        label: str | None = None,
        headers: dict[str, str] | None = None,
        **changes: Any,
    ) -> waitbound.Outcome:
        """Wait on a scripted provider (virtual time) until the operation stops."""
        provider = ScriptedProvider(self.clock, {"/status": answers})
        existing = self.store.get(operation_id)
        return waitbound.wait(
            None if existing else self.operation(label, **changes),
            operation_id=operation_id,
            store=self.store,
            client=provider.client(),
            clock=self.clock,
            sleep=self.clock.sleep,
            rng=random.Random(7),
            headers=headers,
            notify_secret=NOTIFY_SECRET,
        )

    def escalate(self, operation_id: str, label: str | None = None, **changes: Any) -> None:
        """An operation whose request budget ran out: escalated, a decision open."""
        policy = Policy(base_delay_s=1.0, max_delay_s=2.0, deadline_s=600, max_requests=2)
        outcome = self.wait(
            operation_id, [(200, {"status": "running"})], label, policy=policy, **changes
        )
        assert outcome.options, outcome

    def sign_in(self, name: str = "Ada") -> str:
        """Sign the client in; return the session's CSRF token."""
        answer = self.client.post(
            "/sign-in", data={"name": name, "token": TOKEN}, follow_redirects=False
        )
        assert answer.status_code == 303, answer.text
        self.client.base = base_of_location(answer.headers["location"])
        return csrf_of(self.client.get("/").text)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]*)"', html)
    assert found is not None, "the page has a form with a CSRF token"
    return found.group(1)


def ids_of(html: str, testid: str) -> list[str]:
    """The ``data-operation-id`` of each element with this ``data-testid``, in order."""
    pattern = rf'data-testid="{testid}" data-operation-id="([^"]*)"'
    return re.findall(pattern, html)


@pytest.fixture
def inbox() -> Iterator[Inbox]:
    made = Inbox()
    with made.client:
        yield made


# --- every page, with data and empty ---------------------------------------------------


def test_needs_a_decision_lists_each_open_request_with_its_options_newest_first(inbox):
    """Every open decision request is an article with the escalation message and one
    button per open option stating its cost; the newest first."""
    inbox.escalate("op-old", label="team/a")
    inbox.clock.advance(60)
    inbox.escalate("op-new", label="team/b")
    inbox.start("op-running")
    html = inbox.client.get("/", headers=AUTH).text
    assert ids_of(html, "decision") == ["op-new", "op-old"]
    assert "External job needs a decision" in html
    assert "Stopped because" in html
    assert "request_budget_exhausted" in html
    assert "Status requests" in html
    extend = re.search(r'data-testid="option-extend">([^<]*)<', html)
    assert extend is not None
    assert extend.group(1).startswith("Extend waiting once by at least")
    assert "more check" in extend.group(1)
    assert 'data-testid="option-abandon"' in html
    assert 'data-testid="option-cancel"' not in html  # not cancelable: not offered
    assert "Needs a decision <span" in html
    assert "(2)" in html  # the nav's count


def test_needs_a_decision_empty(inbox):
    """Without open requests the page says so (and the nav counts zero)."""
    inbox.start("op-1")
    answer = inbox.client.get("/", headers=AUTH)
    assert answer.status_code == 200
    assert 'data-testid="empty"' in answer.text
    assert 'data-testid="decision"' not in answer.text
    assert "In flight <span" in answer.text


def test_in_flight_rows_state_progress_elapsed_next_check_budget_deadline(inbox):
    """Each operation without an outcome is a row with its state, progress, elapsed
    time, next check (and its delay source), the budget as a <progress> and deadline;
    stopped operations are not in flight."""
    inbox.escalate("op-stopped")
    inbox.start("op-a", label="team/a")
    inbox.clock.advance(90)
    inbox.start("op-b", label="team/b")
    running = [(200, {"status": "running", "progress": {"done": 3, "of": 10}})]
    provider = ScriptedProvider(inbox.clock, {"/status": running})
    waitbound.check("op-b", store=inbox.store, client=provider.client(), clock=inbox.clock)
    answer = inbox.client.get("/in-flight", headers=AUTH)
    html = answer.text
    assert answer.status_code == 200
    assert ids_of(html, "in-flight") == ["op-b", "op-a"]
    row = _row(html, "op-b")
    for cell in ("state", "progress", "elapsed", "next-check", "deadline"):
        assert f'data-testid="{cell}"' in row
    assert '<progress data-testid="budget" value="1" max="30">1 of 30</progress>' in row
    assert '<span class="state">running</span>' in row
    assert "local_backoff" in row  # the next check's delay source
    assert "in 1 s" in row or "in 2 s" in row
    assert "team/b" in row
    assert "{&#34;done&#34;: 3, &#34;of&#34;: 10}" in row
    old = _row(html, "op-a")
    assert ">90 s</time>" in old or ">91 s</time>" in old  # elapsed
    assert "none yet" in old
    assert "in 8 min" in old  # deadline: 10 minutes after it was created
    assert 'src="/static/live.js"' in html
    assert 'data-events="/events?label=&amp;since=' in html
    assert "(2)" in html  # the nav: two in flight


def _row(html: str, operation_id: str) -> str:
    found = re.search(
        rf'<tr data-testid="[a-z-]+" data-operation-id="{operation_id}">.*?</tr>', html, re.S
    )
    assert found is not None, f"a row for {operation_id}"
    return found.group(0)


def test_in_flight_empty_and_filtered(inbox):
    """No operation in flight: one row that says so; the label and provider filters
    narrow the rows; ``fragment=rows`` answers the rows only."""
    assert "Nothing in flight." in inbox.client.get("/in-flight", headers=AUTH).text
    inbox.start("op-a", label="team/a")
    inbox.start("op-b", label="team/b", profile="other")
    by_label = inbox.client.get("/in-flight?label=team/a", headers=AUTH).text
    assert ids_of(by_label, "in-flight") == ["op-a"]
    by_provider = inbox.client.get("/in-flight?provider=other", headers=AUTH).text
    assert ids_of(by_provider, "in-flight") == ["op-b"]
    nothing = inbox.client.get("/in-flight?label=zzz", headers=AUTH).text
    assert "Nothing in flight for this filter." in nothing
    rows = inbox.client.get("/in-flight?fragment=rows", headers=AUTH).text
    assert ids_of(rows, "in-flight") == ["op-b", "op-a"]
    assert "<html" not in rows


def test_finished_lists_outcomes_with_the_word_and_its_colour(inbox):
    """Finished rows: the outcome word in a cell with its tone (colour and word), the
    reason; the most recently finished first; filterable by outcome."""
    inbox.wait("op-ok", [(200, {"status": "running"}), (200, {"status": "done"})])
    inbox.clock.advance(10)
    inbox.wait("op-bad", [(200, {"status": "failed"})])
    inbox.clock.advance(10)
    inbox.escalate("op-esc")
    inbox.start("op-running")
    html = inbox.client.get("/finished", headers=AUTH).text
    assert ids_of(html, "finished") == ["op-esc", "op-bad", "op-ok"]
    assert re.search(r'data-testid="outcome"[^>]*><span class="badge tone-good">succeeded<', html)
    assert re.search(r'data-testid="outcome"[^>]*><span class="badge tone-bad">failed<', html)
    assert re.search(
        r'data-testid="outcome"[^>]*><span class="badge tone-attention">escalated<', html
    )
    assert "request_budget_exhausted" in html
    failed = inbox.client.get("/finished?outcome=failed", headers=AUTH).text
    assert ids_of(failed, "finished") == ["op-bad"]


def test_finished_empty_and_a_bad_outcome_filter(inbox):
    """Nothing finished: a row says so; an outcome filter that is no outcome is a 400
    page naming the outcomes."""
    inbox.start("op-1")
    assert "Nothing finished yet." in inbox.client.get("/finished", headers=AUTH).text
    answer = inbox.client.get("/finished?outcome=nope", headers=AUTH)
    assert answer.status_code == 400
    assert "succeeded" in answer.text


def test_one_operation_story_chain_decisions_and_deliveries(inbox):
    """One operation: every audit event in order, the chain's status, each decision
    (option, by, why, at), the last answer and its deliveries (out and in)."""
    inbox.store.put_delivery(
        InboundDelivery(
            provider="reports",
            webhook_id="msg_early",
            received_at=inbox.clock.now(),
            job_id="job-7",
            payload={"type": "report.done", "data": {"id": "job-7"}},
            event_type="report.done",
        )
    )
    inbox.escalate(
        "op-1",
        notify_url="https://hooks.example/services/abc",
        webhook="reports",
        job_id="job-7",
    )
    csrf = inbox.sign_in("Grace")
    decided = inbox.client.post(
        "/operation/op-1/decide",
        data={"csrf": csrf, "option": "extend", "why": "the export is slow today"},
        follow_redirects=False,
    )
    assert decided.status_code == 303
    inbox.wait("op-1", [(200, {"status": "done"})])
    html = inbox.client.get("/operation/op-1").text
    events = inbox.store.audit("op-1")
    seqs = [int(s) for s in re.findall(r'data-testid="story-event" data-seq="(\d+)"', html)]
    assert seqs == [e.seq for e in events]
    assert '<strong data-testid="chain-status">intact</strong>' in html
    records = re.findall(r'<li data-testid="decision-record".*?</li>', html, re.S)
    assert len(records) == 1
    assert 'data-option="extend"' in records[0]
    assert 'data-by="Grace (shared token)"' in records[0]
    assert "the export is slow today" in records[0]
    assert "<time" in records[0]
    deliveries = html[html.index('data-testid="deliveries"') :]
    assert "completion out" in deliveries
    assert "https://hooks.example/…" in deliveries
    assert "/services/abc" not in html
    assert "webhook in" in deliveries
    assert "msg_early" in deliveries
    assert "succeeded" in html
    assert 'src="/static/live.js"' not in html  # final: nothing more to watch


def test_one_operation_shows_a_broken_chain(inbox):
    """A chain that does not verify says ``broken: …`` (and not to trust the story)."""
    inbox.wait("op-1", [(200, {"status": "done"})])
    stored = inbox.store._events["op-1"]  # tamper with the chain on purpose
    stored[1] = replace(stored[1], event=replace(stored[1].event, summary="edited"))
    html = inbox.client.get("/operation/op-1", headers=AUTH).text
    status = re.search(r'data-testid="chain-status">([^<]*)<', html)
    assert status is not None
    assert status.group(1).startswith("broken: ")
    assert "do not trust this story" in html


def test_one_operation_unknown_is_a_404_page_and_a_live_story_fragment(inbox):
    """An unknown operation is a 404 page; ``fragment=story&after=N`` answers only the
    story rows after seq N."""
    answer = inbox.client.get("/operation/nope", headers=AUTH)
    assert answer.status_code == 404
    assert "No such operation" in answer.text
    inbox.start("op-1")
    page = inbox.client.get("/operation/op-1", headers=AUTH).text
    assert 'data-events="/operations/op-1/events"' in page
    assert 'src="/static/live.js"' in page
    fragment = inbox.client.get("/operation/op-1?fragment=story&after=0", headers=AUTH).text
    assert fragment.count('data-testid="story-event"') == 1
    after = inbox.client.get("/operation/op-1?fragment=story&after=1", headers=AUTH).text
    assert "story-event" not in after


def test_the_minutes_fields_own_minimum_is_no_shorter_than_the_shortest_grant(inbox):
    """The browser's own check of ``minutes`` (``min``) lets through nothing the server
    refuses as below the 1-second grant."""
    from waitbound._rules._options import MIN_GRANT_S

    inbox.escalate("op-1")
    html = inbox.client.get("/operation/op-1?option=extend", headers=AUTH).text
    found = re.search(r'name="minutes"[^>]*\bmin="([0-9.]+)"', html)
    assert found is not None
    assert float(found.group(1)) * 60 >= MIN_GRANT_S


def test_choosing_an_option_opens_its_form(inbox):
    """``?option=extend`` (what an option's button asks for) shows the form with
    ``why`` (required), ``minutes``, ``checks`` and the submit button; an option not
    open says so."""
    inbox.escalate("op-1")
    html = inbox.client.get("/operation/op-1?option=extend", headers=AUTH).text
    form = html[html.index('<form method="post" action="/operation/op-1/decide"') :]
    form = form[: form.index("</form>")]
    assert re.search(r'name="why"[^>]*required', form)
    assert 'name="minutes"' in form
    assert 'name="checks"' in form
    assert 'name="option" value="extend"' in form
    assert 'data-testid="decide-submit"' in form
    abandon = inbox.client.get("/operation/op-1?option=abandon", headers=AUTH).text
    assert 'name="minutes"' not in abandon
    closed = inbox.client.get("/operation/op-1?option=mark_succeeded", headers=AUTH).text
    assert "is not one of the options open" in closed
    assert 'data-testid="decide-submit"' not in closed


# --- who may see the pages -------------------------------------------------------------

PAGES = ["/", "/in-flight", "/finished", "/operation/op-1", "/in-flight?label=team/a"]


@pytest.mark.parametrize("path", PAGES)
def test_a_page_without_a_session_or_token_redirects_to_sign_in(inbox, path):
    """No token and no session: a page answers 303 to ``/sign-in?next=…`` (its path)."""
    answer = inbox.client.get(path, follow_redirects=False)
    assert answer.status_code == 303
    location = answer.headers["location"]
    assert location.startswith("/sign-in")
    if path != "/":
        assert parse_qs(urlsplit(location).query)["next"] == [path]


@pytest.mark.parametrize("path", ["/events", "/operations/op-1", "/operations/op-1/events"])
def test_the_api_without_a_token_stays_401(inbox, path):
    """The JSON and SSE endpoints still answer 401 (JSON) without a token or session."""
    answer = inbox.client.get(path, follow_redirects=False)
    assert answer.status_code == 401
    assert answer.json()["error"] == "unauthorized"


def test_a_decision_post_without_a_session_redirects_and_changes_nothing(inbox):
    """A decision posted with neither token nor session: 303 to sign-in, nothing decided."""
    inbox.escalate("op-1")
    answer = inbox.client.post(
        "/operation/op-1/decide", data={"option": "extend", "why": "x"}, follow_redirects=False
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/sign-in"
    assert inbox.store.get("op-1").decisions == ()


@pytest.mark.parametrize("path", PAGES)
def test_the_bearer_token_is_accepted_on_every_page(inbox, path):
    """``Authorization: Bearer TOKEN`` (a script) reads every page."""
    inbox.start("op-1")
    assert inbox.client.get(path, headers=AUTH).status_code == 200


def test_a_wrong_bearer_token_is_401_on_a_page(inbox):
    """A wrong token is refused (401), not sent to sign in."""
    answer = inbox.client.get("/", headers={"Authorization": "Bearer not-the-token-at-all"})
    assert answer.status_code == 401


def test_sign_in_with_a_wrong_token_is_401_with_the_form_again(inbox):
    """A wrong token: 401, the form again with one line saying so, the name kept, no
    cookie, and the token never echoed."""
    answer = inbox.client.post("/sign-in", data={"name": "Ada", "token": "wrong-token-123"})
    assert answer.status_code == 401
    assert 'data-testid="form-error"' in answer.text
    assert "not one of the service&#39;s tokens" in answer.text
    assert 'value="Ada"' in answer.text
    assert "wrong-token-123" not in answer.text
    assert "set-cookie" not in answer.headers


@pytest.mark.parametrize("name", ["", "   ", "x" * 65, "two\nlines"])
def test_sign_in_needs_a_name(inbox, name):
    """A name is required: 1-64 printable characters (it is recorded as the decider)."""
    answer = inbox.client.post("/sign-in", data={"name": name, "token": TOKEN})
    assert answer.status_code == 400
    assert "set-cookie" not in answer.headers


def test_sign_in_sets_an_httponly_samesite_strict_cookie(inbox):
    """The right token: 303 to ``next`` under the session's prefix, and the cookie
    ``waitbound_session`` is HttpOnly, SameSite=Strict, Path=the prefix, Max-Age 12 h,
    not Secure over http; it holds no token."""
    answer = inbox.client.post(
        "/sign-in",
        data={"name": "Ada", "token": TOKEN, "next": "/in-flight?label=team/a"},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    base = base_of_location(answer.headers["location"])
    assert answer.headers["location"] == f"{base}/in-flight?label=team/a"
    inbox.client.base = base
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    flags = [part.strip() for part in cookie.split(";")[1:]]
    assert "HttpOnly" in flags
    assert "SameSite=Strict" in flags
    assert f"Path={base}" in flags
    assert f"Max-Age={SESSION_MAX_AGE_S}" in flags
    assert "Secure" not in flags
    assert TOKEN not in cookie
    page = inbox.client.get("/in-flight")
    assert page.status_code == 200
    assert 'data-testid="signed-in-as">Ada (shared token)<' in page.text


def test_sign_in_over_https_sets_a_secure_cookie():
    """Over https the cookie is also Secure."""
    made = Inbox()
    client = TestClient(made.app, base_url="https://inbox.test")
    answer = client.post("/sign-in", data={"name": "Ada", "token": TOKEN}, follow_redirects=False)
    assert "Secure" in [part.strip() for part in answer.headers["set-cookie"].split(";")]


def test_the_session_authorizes_the_read_endpoints_too(inbox):
    """The session cookie reads ``/operations/{id}`` and its event stream (what
    ``live.js`` opens), not only the pages."""
    inbox.wait("op-1", [(200, {"status": "done"})])
    inbox.sign_in()
    assert inbox.client.get("/operations/op-1").status_code == 200
    with inbox.client.stream("GET", "/operations/op-1/events") as stream:
        assert stream.status_code == 200
        body = "".join(stream.iter_text())
    assert "event: end" in body


def test_the_session_does_not_authorize_other_posts():
    """A POST to an endpoint that is not an inbox form is not authorized by the
    cookie (only by the token)."""

    async def thing(request: Request) -> Response:
        return Response("done")

    made = Inbox(routes=[Route("/api/thing", thing, methods=["POST"])])
    with made.client:
        made.sign_in()
        assert made.client.post("/api/thing").status_code == 401
        assert made.client.post("/api/thing", headers=AUTH).status_code == 200


def test_a_session_expires_after_12_hours(inbox):
    """A session older than 12 hours is refused: back to sign in."""
    inbox.sign_in()
    inbox.clock.advance(SESSION_MAX_AGE_S - 60)
    assert inbox.client.get("/", follow_redirects=False).status_code == 200
    inbox.clock.advance(120)
    assert inbox.client.get("/", follow_redirects=False).status_code == 303


@pytest.mark.parametrize(
    "value", ["", "garbage", "eyJuIjoiQWRhIiwiYyI6IngifQ.AAAAAA.forged-signature", "x" * 5000]
)
def test_a_forged_session_cookie_is_refused(inbox, value):
    """A cookie not signed by this process (or malformed) counts as none."""
    inbox.client.cookies.set(SESSION_COOKIE, value)
    assert inbox.client.get("/", follow_redirects=False).status_code == 303


def test_a_session_of_another_store_is_refused(inbox):
    """A session made in another store: its cookie, under its own prefix, counts as none."""
    session, value = Sessions(MemoryStore(), clock=inbox.clock).issue(
        "Mallory", role="admin", via="shared token"
    )
    inbox.client.cookies.set(SESSION_COOKIE, value, path=session.base)
    inbox.client.base = session.base
    assert inbox.client.get("/", follow_redirects=False).status_code == 303


def test_sign_out_clears_the_cookie_with_the_csrf_token(inbox):
    """Sign out needs the CSRF token (403 without), then clears the cookie: 303 to
    sign-in, and the pages redirect again."""
    csrf = inbox.sign_in()
    refused = inbox.client.post("/sign-out", data={}, follow_redirects=False)
    assert refused.status_code == 403
    answer = inbox.client.post("/sign-out", data={"csrf": csrf}, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/sign-in"
    assert "Max-Age=0" in answer.headers["set-cookie"]
    assert inbox.client.get("/", follow_redirects=False).status_code == 303


# --- deciding ------------------------------------------------------------------------


def test_a_decision_without_the_csrf_token_is_403_and_changes_nothing(inbox):
    """A signed-in person's decision without (or with a wrong) CSRF token: 403, the
    request stays open, no decision recorded."""
    inbox.escalate("op-1")
    inbox.sign_in()
    before = inbox.store.get("op-1")
    for data in (
        {"option": "extend", "why": "more time"},
        {"option": "extend", "why": "more time", "csrf": "wrong-csrf-token"},
    ):
        answer = inbox.client.post("/operation/op-1/decide", data=data, follow_redirects=False)
        assert answer.status_code == 403
        assert "Nothing was changed" in answer.text
    after = inbox.store.get("op-1")
    assert after.version == before.version
    assert after.decisions == ()
    assert after.decision_request is not None


def test_a_decision_with_the_csrf_token_is_recorded_by_the_signed_in_person(inbox):
    """With the CSRF token: 303 to the operation, the decision recorded with the
    session's name as ``by`` (a ``by`` field cannot change it), the grant as given."""
    inbox.escalate("op-1")
    csrf = inbox.sign_in("Ada Lovelace")
    answer = inbox.client.post(
        "/operation/op-1/decide",
        data={
            "csrf": csrf,
            "option": "extend",
            "why": "the provider is slow today",
            "minutes": "5",
            "checks": "2",
            "by": "someone-else",
        },
        follow_redirects=False,
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == f"{inbox.client.base}/operation/op-1#decisions"
    record = inbox.store.get("op-1")
    (decision,) = record.decisions
    assert decision.option == "extend"
    assert decision.by == "Ada Lovelace (shared token)"  # typed with the shared token
    assert decision.why == "the provider is slow today"
    assert record.outcome is None  # due again
    assert record.grants.requests == 2
    assert record.deadline_at >= inbox.clock.now() + timedelta(minutes=5)
    assert decision.detail["grant"] == {"minutes": 5.0, "checks": 2}


def test_a_decision_with_the_bearer_token_needs_no_csrf_and_is_by_bearer(inbox):
    """A script deciding with the bearer token needs no CSRF token; ``by`` is what its
    form says, else ``bearer``."""
    inbox.escalate("op-1")
    inbox.escalate("op-2")
    for operation_id, data in (("op-1", {}), ("op-2", {"by": "deploy-bot"})):
        answer = inbox.client.post(
            f"/operation/{operation_id}/decide",
            data={"option": "abandon", "why": "not needed any more", **data},
            headers=AUTH,
            follow_redirects=False,
        )
        assert answer.status_code == 303
    assert inbox.store.get("op-1").decisions[-1].by == "bearer"
    assert inbox.store.get("op-2").decisions[-1].by == "deploy-bot (shared token)"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"why": ""}, "say why"),
        ({"why": "   "}, "say why"),
        ({"why": "ok", "minutes": "soon"}, "minutes must be a number"),
        ({"why": "ok", "minutes": "-3"}, "positive"),
        ({"why": "ok", "checks": "2.5"}, "whole number"),
        ({"why": "ok", "minutes": "100000"}, "extension"),
        ({"why": "ok", "minutes": "1e-12"}, "below the minimum of 1 second"),
        ({"why": "ok", "minutes": "1_0"}, "without underscores"),
        ({"why": "ok", "minutes": "1e-320"}, "too close to zero"),
        ({"why": "ok", "minutes": "inf"}, "minutes must be a number"),
        ({"why": "ok", "checks": "1_0"}, "without underscores"),
    ],
)
def test_a_bad_decision_is_a_400_form_and_changes_nothing(inbox, data, says):
    """A missing reason, a grant that is no number, one beyond the ceiling: 400 with
    the form again saying why, and nothing decided."""
    inbox.escalate("op-1")
    csrf = inbox.sign_in()
    answer = inbox.client.post(
        "/operation/op-1/decide", data={"csrf": csrf, "option": "extend", **data}
    )
    assert answer.status_code == 400
    assert says in unescape(answer.text)
    assert 'data-testid="decide-submit"' in answer.text
    assert inbox.store.get("op-1").decisions == ()


def test_an_option_not_offered_is_refused(inbox):
    """An option that is not an option, or not open on this request: 400, nothing
    decided."""
    inbox.escalate("op-1")
    csrf = inbox.sign_in()
    for option in ("explode", "mark_succeeded"):
        answer = inbox.client.post(
            "/operation/op-1/decide", data={"csrf": csrf, "option": option, "why": "x"}
        )
        assert answer.status_code == 400
    assert inbox.store.get("op-1").decisions == ()


def test_a_second_decision_sees_the_first_in_a_409_page(inbox):
    """Two people decide the same request: the first wins; the second gets 409 with
    who decided what, when and why, and nothing of theirs is recorded."""
    inbox.escalate("op-1")
    first = inbox.sign_in("Ada")
    inbox.client.post(
        "/operation/op-1/decide",
        data={"csrf": first, "option": "abandon", "why": "nobody needs it"},
        follow_redirects=False,
    )
    other = SessionClient(inbox.app)
    signed = other.post("/sign-in", data={"name": "Bob", "token": TOKEN}, follow_redirects=False)
    other.base = base_of_location(signed.headers["location"])
    csrf = csrf_of(other.get("/").text)
    answer = other.post(
        "/operation/op-1/decide", data={"csrf": csrf, "option": "extend", "why": "more time"}
    )
    assert answer.status_code == 409
    shown = answer.text[answer.text.index('data-testid="first-decision"') :]
    assert '<strong class="by">Ada (shared token)</strong>' in shown
    assert '<strong class="option-word">abandon</strong>' in shown
    assert "nobody needs it" in shown
    assert "<time" in shown
    assert [d.by for d in inbox.store.get("op-1").decisions] == ["Ada (shared token)"]


def test_reloading_the_decide_address_goes_back_to_the_operation(inbox):
    """``GET /operation/{id}/decide`` (a refused form's page reloaded): 303 to the
    operation, nothing decided."""
    answer = inbox.client.get("/operation/op-1/decide", headers=AUTH, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/operation/op-1"


def test_a_decision_on_an_unknown_operation_is_404(inbox):
    """Deciding an operation that does not exist: 404 page."""
    answer = inbox.client.post(
        "/operation/nope/decide", data={"option": "extend", "why": "x"}, headers=AUTH
    )
    assert answer.status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/operation/%00", 404),
        ("GET", "/operation/op%1b%5b2J?fragment=story", 404),
        ("POST", "/operation/%00/decide", 404),
        ("GET", "/in-flight?label=team%00", 400),
        ("GET", "/finished?provider=x%0ay", 400),
    ],
)
def test_an_id_or_filter_that_is_not_printable_never_reaches_the_store(inbox, method, path, status):
    """No operation id, label or profile name holds a control character (PostgreSQL's
    text columns refuse NUL: 503 forever): a 404 or 400 page, the store never asked."""
    csrf = inbox.sign_in()

    def untouchable(*args, **kwargs):
        raise AssertionError("the store was asked")

    for name in ("get", "audit", "recent", "pending_summary", "inbox", "outbox"):
        setattr(inbox.store, name, untouchable)
    if method == "POST":
        answer = inbox.client.post(path, data={"csrf": csrf, "option": "extend", "why": "x"})
    else:
        answer = inbox.client.get(path)
    assert answer.status_code == status, answer.text
    assert "text/html" in answer.headers["content-type"]


# --- security headers, secrets, templates, redirects -------------------------------------


def _boom(request: Request) -> Response:
    raise RuntimeError("boom")


def test_security_headers_on_every_answer():
    """Pages, redirects, 401s, 404s, static files, JSON, streams and 500s all carry the
    CSP, X-Frame-Options, Referrer-Policy and X-Content-Type-Options."""
    made = Inbox(routes=[Route("/operation-crash", _boom), Route("/operation/x/crash", _boom)])
    made.wait("op-1", [(200, {"status": "done"})])
    answers = [
        made.client.get("/", headers=AUTH),
        made.client.get("/in-flight", headers=AUTH),
        made.client.get("/", follow_redirects=False),
        made.client.get("/sign-in"),
        made.client.post("/sign-in", data={"name": "x", "token": "nope-nope"}),
        made.client.get("/static/inbox.css"),
        made.client.get("/static/live.js"),
        made.client.get("/static/nope.css"),
        made.client.get("/events"),
        made.client.get("/healthz"),
        made.client.get("/operations/op-1", headers=AUTH),
        made.client.get("/operation/nope", headers=AUTH),
        made.client.get("/operation-crash", headers=AUTH),
        made.client.get("/operation/x/crash", headers=AUTH),
        made.client.post("/webhooks/nope", content=b"{}"),
    ]
    with made.client.stream("GET", "/operations/op-1/events", headers=AUTH) as stream:
        answers.append(stream)
    statuses = {answer.status_code for answer in answers}
    assert {200, 303, 401, 404, 500} <= statuses
    for answer in answers:
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers.get(name) == value, (answer.url, name)
    assert "frame-ancestors 'none'" in SECURITY_HEADERS["Content-Security-Policy"]
    crash = made.client.get("/operation/x/crash", headers=AUTH)
    assert "boom" not in crash.text


def _secret_store(inbox: Inbox) -> None:
    """Operations whose URLs, answers and deliveries hold secrets (as a careless caller
    or a provider's echo would put them)."""
    status_url = f"http://provider.test/status?api_key={QUERY_SECRET}"
    echo = {"status": "running", "echo": f"Bearer {HEADER_SECRET}"}
    policy = Policy(base_delay_s=1.0, max_delay_s=2.0, deadline_s=600, max_requests=2)
    provider = ScriptedProvider(inbox.clock, {"/status": [(200, echo)]})
    waitbound.wait(
        inbox.operation(
            "team/secret",
            status_url=status_url,
            policy=policy,
            notify_url=f"https://hooks.example/services/{PATH_SECRET}?token={QUERY_SECRET}",
            result_url=f"http://provider.test/result?sig={QUERY_SECRET}",
        ),
        operation_id="op-secret",
        store=inbox.store,
        client=provider.client(),
        clock=inbox.clock,
        sleep=inbox.clock.sleep,
        rng=random.Random(7),
        headers={"Authorization": f"Bearer {HEADER_SECRET}", "X-Api-Key": HEADER_SECRET},
        notify_secret=NOTIFY_SECRET,
    )
    inbox.start("op-running", status_url=status_url)
    finished = ScriptedProvider(inbox.clock, {"/status": [(200, {"status": "done"})]})
    waitbound.wait(
        inbox.operation(
            notify_url=f"https://hooks.example/services/{PATH_SECRET}",
            webhook="reports",
            job_id="job-done",
        ),
        operation_id="op-done",
        store=inbox.store,
        client=finished.client(),
        clock=inbox.clock,
        sleep=inbox.clock.sleep,
        rng=random.Random(7),
        headers={"Authorization": f"Bearer {HEADER_SECRET}"},
        notify_secret=NOTIFY_SECRET,
    )
    inbox.store.put_delivery(
        InboundDelivery(
            provider="reports",
            webhook_id="msg_1",
            received_at=inbox.clock.now(),
            job_id=None,
            payload={"data": {"secret": WEBHOOK_SECRET}},
        )
    )


def test_no_page_shows_a_secret():
    """No page holds the token, a credential header's value, a URL's query or a chat
    webhook's path, a receiver's secret or the notify secret, even where records and
    answers were given them."""
    receiver = Receiver(
        name="reports",
        scheme=Scheme.STANDARD,
        secrets=(WEBHOOK_SECRET,),
        job_id=jmespath.compile("data.id"),
        job_id_text="data.id",
    )
    made = Inbox(ServeConfig(receivers={"reports": receiver}, notify_secret=NOTIFY_SECRET))
    with made.client:
        _secret_store(made)
        csrf = made.sign_in()
        pages = [
            "/",
            "/in-flight",
            "/finished",
            "/operation/op-secret",
            "/operation/op-secret?option=extend",
            "/operation/op-done",
            "/operation/op-running",
            "/in-flight?fragment=rows",
            "/operation/op-secret?fragment=story",
        ]
        bodies = [made.client.get(path).text for path in pages]
        bodies.append(
            made.client.post(
                "/operation/op-secret/decide", data={"csrf": csrf, "option": "extend"}
            ).text
        )
        bodies.append(made.client.post("/sign-in", data={"name": "x", "token": TOKEN[:-1]}).text)
        cookies = json.dumps(dict(made.client.cookies))
    assert "op-secret" in bodies[0]
    for body in [*bodies, cookies]:
        for secret in SECRETS:
            assert secret not in body
            assert secret[6:30] not in body


def test_templates_have_no_inline_script_or_style():
    """No template (nor the static files' HTML) has an inline ``<script>`` body, a
    ``<style>`` element, a ``style=`` attribute or an ``on…=`` handler: the CSP allows
    none of them."""
    files = sorted(TEMPLATES.glob("*.html"))
    assert len(files) >= 8
    for path in files:
        text = path.read_text(encoding="utf-8")
        for script in re.findall(r"<script\b[^>]*>(.*?)</script>", text, re.S | re.I):
            assert not script.strip(), f"{path.name}: inline script"
        assert all("src=" in tag for tag in re.findall(r"<script\b[^>]*>", text, re.I)), path.name
        assert not re.search(r"<style\b", text, re.I), path.name
        assert not re.search(r"\sstyle\s*=", text, re.I), path.name
        assert not re.search(r"\son[a-z]+\s*=", text, re.I), path.name
        assert "javascript:" not in text.lower(), path.name
    assert (STATIC / "live.js").is_file()
    assert (STATIC / "inbox.css").is_file()


def test_templates_escape_provider_text(inbox):
    """A provider's state with HTML in it is shown as text, never as markup."""
    inbox.wait("op-1", [(200, {"status": "<img src=x onerror=alert(1)>"})])
    for path in ("/operation/op-1", "/finished", "/"):
        html = inbox.client.get(path, headers=AUTH).text
        assert "<img src=x" not in html
    assert "&lt;img src=x" in inbox.client.get("/operation/op-1", headers=AUTH).text


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/",
        "https://evil.example/",
        "http:evil.example",
        "/\\evil.example",
        "\\\\evil.example",
        "/%0d%0aSet-Cookie:x=1",
        "/in flight",
        "/\r\nSet-Cookie: x=1",
        "javascript:alert(1)",
        "evil.example",
        "/sign-in",
        "",
    ],
)
def test_sign_in_never_redirects_off_site(inbox, target):
    """``next`` is followed only when it is a path of this service: never another
    site, never a header injection, never the sign-in page."""
    answer = inbox.client.post(
        "/sign-in", data={"name": "Ada", "token": TOKEN, "next": target}, follow_redirects=False
    )
    assert answer.status_code == 303
    location = answer.headers["location"]
    base = base_of_location(location)
    assert location in (f"{base}/", f"{base}/%0d%0aSet-Cookie:x=1")
    assert "\n" not in location
    page = inbox.client.get("/sign-in", params={"next": target})
    found = re.search(r'name="next" value="([^"]*)"', page.text)
    assert found is not None
    assert unescape(found.group(1)) in ("/", "/%0d%0aSet-Cookie:x=1")


@pytest.mark.parametrize(
    ("target", "kept"),
    [
        ("/in-flight?label=team/a", True),
        ("/operation/op-1", True),
        ("/", True),
        ("//x", False),
        ("/\\x", False),
        ("https://x", False),
        ("/sign-out", False),
        ("/a b", False),
        (None, False),
    ],
)
def test_local_path(target, kept):
    """Only a path of this service is kept."""
    assert local_path(target) == (target if kept else "/")


def test_events_since_is_checked():
    """``GET /events?since=`` takes an RFC 3339 time with an offset (the page's read
    time); anything else is a 400."""
    made = Inbox()
    answer = made.client.get("/events?since=yesterday", headers=AUTH)
    assert answer.status_code == 400
    assert answer.json()["error"] == "bad_since"
    assert made.client.get("/events?since=2026-01-01T12:00:00", headers=AUTH).status_code == 400
    at = made.clock.now()
    assert _since(at.isoformat()) == (at, "", 0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (45.4, "45 s"), (119, "119 s"), (120, "2 min"), (7199, "119 min"),
     (7200, "2 h"), (3 * 3600 + 300, "3 h 5 min"), (48 * 3600, "2 d"), (52 * 3600, "2 d 4 h"),
     (-5, "0 s")],
)  # fmt: skip
def test_duration(seconds, text):
    """Spans read at a glance (and live.js writes them the same way)."""
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.test/services/T0/B0/SECRET", "https://hooks.slack.test/…"),
        ("https://user:pw@hooks.test:8443/x?token=t", "https://hooks.test:8443/…"),
        ("https://hooks.test", "https://hooks.test"),
    ],
)
def test_notify_target_shows_only_the_authority(url, shown):
    """A completion's target is shown without path or query (a chat tool's incoming
    webhook URL carries its secret in the path)."""
    assert notify_target(url) == shown


# --- waitbound serve --allow-remote ------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "::", "example.test"])
def test_serve_refuses_a_remote_host_without_allow_remote(tmp_path, capsys, host):
    """``--host`` other than loopback without ``--allow-remote``: one line, exit 2,
    nothing started (no token file made)."""
    token_file = tmp_path / "token"
    code = run(
        ["serve", "--host", host, "--store", str(tmp_path / "s.db"),
         "--token-file", str(token_file)],
    )  # fmt: skip
    assert code == 2
    said = capsys.readouterr()
    assert "--allow-remote" in said.err
    assert len(said.err.strip().splitlines()) == 1
    assert said.out == ""
    assert not token_file.exists()


def test_the_operation_page_lists_the_groups_it_is_a_member_of_with_their_members(inbox):
    """An operation waited on in a group: its page names the group (kind, state, the
    reason its own bound stopped it, requests used) and links every member."""
    inbox.start("op-a")
    inbox.start("op-b")
    provider = ScriptedProvider(inbox.clock, {"/status": [(200, {"status": "running"})]})
    result = waitbound.wait_all(
        ["op-a", "op-b"], max_requests=1, store=inbox.store, client=provider.client(),
        clock=inbox.clock, sleep=inbox.clock.sleep, rng=random.Random(1),
    )  # fmt: skip
    assert result.stopped is waitbound.Reason.REQUEST_BUDGET_EXHAUSTED
    html = inbox.client.get("/operation/op-b", headers=AUTH).text
    assert f'data-group="{result.group_id}"' in html
    assert "request_budget_exhausted: the group's own bound stopped it" in unescape(html)
    assert "1 of 1 requests used" in html
    assert re.findall(r'href="[^"]*/operation/(op-[ab])"', html) == ["op-a", "op-b"]
    alone = inbox.client.get("/operation/op-a", headers=AUTH).text
    assert 'data-testid="groups"' in alone
    inbox.start("op-c")
    assert 'data-testid="groups"' not in inbox.client.get("/operation/op-c", headers=AUTH).text
