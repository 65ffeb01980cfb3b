"""The web inbox in a real browser (Debian's Chromium through Playwright) against the
real service and the provider simulator: sign-in, a wait that runs out of requests
decided by a click and followed live to ``succeeded``, the guards (session, CSRF, the
first decision wins), the keyboard and a narrow window.

Selectors are the stable test hooks of the inbox's page contract (``data-testid``)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Locator, Page, Request, expect

import waitbound
from tests.browser.conftest import SESSION_PATH, Inbox

pytestmark = pytest.mark.e2e

DOCS_SHOT = Path(__file__).parents[2] / "docs" / "inbox.png"
LIVE = waitbound.Policy(deadline_s=120, max_requests=3, base_delay_s=2.0, max_delay_s=600)
"""Checks 1-4 s apart (at this cap the plan does not spread them, as ``FAST``): the row
stays on In flight long enough to be watched."""
LIVE_MS = 30_000


def _card(page: Page, operation_id: str) -> Locator:
    return page.locator(f'article[data-testid="decision"][data-operation-id="{operation_id}"]')


def _operation_url(inbox: Inbox, operation_id: str) -> re.Pattern[str]:
    """The operation's page, at any fragment (``#decisions``)."""
    return re.compile(
        re.escape(inbox.url) + SESSION_PATH + re.escape(f"/operation/{operation_id}") + r"(#.*)?$"
    )


def _choose(page: Page, operation_id: str, option: str) -> None:
    """Click *option* on the operation's decision card: its decide form opens."""
    _card(page, operation_id).get_by_test_id(f"option-{option}").click()
    expect(page.locator('[name="why"]')).to_be_visible()


def _submit(page: Page, why: str, *, minutes: str = "", checks: str = "") -> None:
    """Fill the open decide form (the reason, and the grant when it asks) and submit it."""
    form = page.locator("form", has=page.locator('[name="why"]'))
    form.locator('[name="why"]').fill(why)
    for name, value in (("minutes", minutes), ("checks", checks)):
        field = form.locator(f'[name="{name}"]')
        if value and field.count():
            field.fill(value)
    form.get_by_test_id("decide-submit").click()


def _decide(page: Page, operation_id: str, option: str, why: str, **grant: str) -> None:
    """Choose *option* on the card, fill the form it opens and submit it."""
    _choose(page, operation_id, option)
    _submit(page, why, **grant)


def _tab_to(page: Page, selector: str, *, presses: int = 80) -> None:
    """Press Tab until the focused element matches *selector* (and is visible)."""
    focused = "s => { const e = document.activeElement; return !!e && e.matches(s); }"
    for _ in range(presses):
        if page.evaluate(focused, selector):
            return
        page.keyboard.press("Tab")
    pytest.fail(f"Tab never reached {selector} in {presses} presses")


def _no_horizontal_scroll(page: Page) -> None:
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"scrollWidth {widths[0]} > innerWidth {widths[1]}"


def test_sign_in_with_name_and_token_opens_needs_a_decision(inbox: Inbox, page: Page) -> None:
    """Name + token on the sign-in page: a strict HttpOnly session, Needs a decision."""
    page.goto(f"{inbox.url}/sign-in")
    inbox.shot(page, "sign-in")
    inbox.sign_in(page, "ann")
    expect(page.locator("h1")).to_contain_text("Needs a decision")
    cookie = next(c for c in page.context.cookies() if c["name"] == "waitbound_session")
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    assert inbox.token not in cookie["value"]
    assert inbox.token not in page.content()
    inbox.shot(page, "needs-a-decision-empty")


def test_a_wrong_token_does_not_sign_in(inbox: Inbox, page: Page) -> None:
    """A wrong token: still the sign-in page, no session cookie, the token not echoed."""
    page.goto(f"{inbox.url}/sign-in")
    page.fill("input[name=name]", "mallory")
    page.fill("input[name=token]", "tok_wrong_" + "w" * 32)
    page.click("button[type=submit]")
    expect(page.locator("input[name=token]")).to_be_visible()
    assert not [c for c in page.context.cookies() if c["name"] == "waitbound_session"]
    assert "tok_wrong_" not in page.content()


def test_an_exhausted_wait_is_extended_by_a_click_and_followed_live_to_succeeded(
    inbox: Inbox, page: Page
) -> None:
    """Budget exhausted → Needs a decision; Extend clicked → In flight updates live → succeeded."""
    op = "report-export-01"
    escalation = inbox.escalate(op, policy=LIVE)
    assert escalation.reason == waitbound.Reason.REQUEST_BUDGET_EXHAUSTED
    inbox.sign_in(page, "ann")
    card = _card(page, op)
    expect(card).to_be_visible()
    for line in ("request_budget_exhausted", "3 of 3", "running", "exp_71c"):
        expect(card).to_contain_text(line)
    extend = card.get_by_test_id("option-extend")
    expect(extend).to_have_text(re.compile(r"extend .*\d+ minutes? with \d+ more checks?", re.I))
    expect(card.get_by_test_id("option-abandon")).to_be_visible()
    shot = inbox.shot(page, "needs-a-decision")
    if os.environ.get("WAITBOUND_DOCS_SCREENSHOT"):
        shutil.copyfile(shot, DOCS_SHOT)

    # 3 checks over 12 s: the plan spreads them about 3.75 s apart, the first ~3.75 s on
    _decide(page, op, "extend", "quarter close", minutes="0.2", checks="3")
    expect(page).to_have_url(_operation_url(inbox, op))
    expect(page.get_by_test_id("decision-record")).to_contain_text("ann")

    event_sources: list[Request] = []
    page.on(
        "request", lambda r: event_sources.append(r) if r.resource_type == "eventsource" else None
    )
    page.goto(inbox.at(page, "/in-flight?label=browser:"))
    row = page.locator(f'tr[data-testid="in-flight"][data-operation-id="{op}"]')
    expect(row).to_be_visible()
    budget = row.locator('progress[data-testid="budget"], [data-testid="budget"] progress')
    expect(budget).to_have_count(1)
    inbox.shot(page, "in-flight")
    state_at_load = row.get_by_test_id("state").inner_text()
    page.evaluate("window.__sameDocument = true")
    if "finishing" not in state_at_load:  # loaded before the held answer came in
        expect(row.get_by_test_id("state")).to_contain_text("finishing", timeout=LIVE_MS)
    page.wait_for_function(  # moved out (or marked) once it succeeded, without a reload
        """op => { const row = document.querySelector(
             `tr[data-testid="in-flight"][data-operation-id="${op}"]`);
           return !row || /succeeded/.test(row.textContent); }""",
        arg=op,
        timeout=LIVE_MS,
    )
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    assert any("/events" in r.url for r in event_sources), "no EventSource was opened"
    assert inbox.record(op).to_outcome().outcome == waitbound.OutcomeKind.SUCCEEDED

    page.goto(inbox.at(page, "/finished?label=browser:"))
    finished = page.locator(f'tr[data-testid="finished"][data-operation-id="{op}"]')
    expect(finished.get_by_test_id("outcome")).to_have_text(re.compile(r"\bsucceeded\b"))
    inbox.shot(page, "finished")

    page.goto(inbox.at(page, f"/operation/{op}"))
    record = page.get_by_test_id("decision-record")
    expect(record).to_have_count(1)
    for part in ("extend", "ann", "quarter close"):
        expect(record).to_contain_text(part)
    events = page.get_by_test_id("story-event")
    expect(events.filter(has_text="decided by ann")).to_have_count(1)
    expect(events.last).to_contain_text("succeeded")
    expect(page.get_by_test_id("chain-status")).to_contain_text("intact")
    inbox.shot(page, "operation")
    decisions = inbox.record(op).decisions
    assert [(d.option, d.by, d.why) for d in decisions] == [
        ("extend", "ann (shared token)", "quarter close")
    ]


def test_without_a_session_pages_redirect_to_sign_in(inbox: Inbox, page: Page) -> None:
    """No session: pages go to sign-in (then back to the page), the JSON API answers 401."""
    page.goto(f"{inbox.url}/")
    expect(page).to_have_url(re.compile(re.escape(f"{inbox.url}/sign-in") + r"(\?next=%2F)?$"))
    for path in ("/in-flight?label=browser:", "/finished", "/operation/op-1"):
        page.goto(f"{inbox.url}{path}")
        expect(page).to_have_url(f"{inbox.url}/sign-in?next={quote(path, safe='')}")
        expect(page.locator("input[name=token]")).to_be_visible()
    api = page.request.get(f"{inbox.url}/operations/op-1")
    assert api.status == 401
    assert api.json()["error"] == "unauthorized"
    page.goto(f"{inbox.url}/in-flight?label=browser:")
    page.fill("input[name=name]", "ann")
    page.fill("input[name=token]", inbox.token)
    page.click("button[type=submit]")
    expect(page).to_have_url(
        re.compile(re.escape(inbox.url) + SESSION_PATH + re.escape("/in-flight?label=browser:"))
    )


def test_a_decision_post_without_the_csrf_token_is_refused(inbox: Inbox, page: Page) -> None:
    """A signed-in decision POST without (or with a wrong) CSRF token: 403, nothing changes."""
    op = "report-export-02"
    inbox.escalate(op)
    before = inbox.record(op)
    inbox.sign_in(page, "ann")
    card = _card(page, op)
    expect(card).to_be_visible()
    target = inbox.at(page, f"/operation/{op}/decide")
    form = {"option": "extend", "why": "no csrf", "minutes": "1", "checks": "1"}
    for extra in ({}, {"csrf": "not-the-token"}, {"csrf": ""}):
        refused = page.request.post(target, form={**form, **extra}, max_redirects=0)
        assert refused.status == 403, (extra, refused.status)
    after = inbox.record(op)
    assert after.version == before.version
    assert after.decisions == ()
    assert after.decision_request is not None
    page.reload()
    expect(_card(page, op)).to_be_visible()
    # The same POST with the decide form's CSRF token is accepted: the 403s were the check.
    _choose(page, op, "extend")
    csrf = page.locator("form", has=page.locator('[name="why"]')).locator('[name="csrf"]')
    accepted = page.request.post(target, form={**form, "csrf": csrf.input_value()}, max_redirects=0)
    assert accepted.status == 303
    assert [d.by for d in inbox.record(op).decisions] == ["ann (shared token)"]


def test_a_second_person_deciding_the_same_request_sees_the_first_decision(
    inbox: Inbox, new_page: Callable[..., Page]
) -> None:
    """Two people, one request: ann's extend wins; bob's decision is a 409 naming ann's."""
    op = "report-export-03"
    inbox.escalate(op)
    ann, bob = new_page(), new_page()
    inbox.sign_in(ann, "ann")
    inbox.sign_in(bob, "bob")
    _choose(bob, op, "abandon")  # bob's form is open while the request still is
    _decide(ann, op, "extend", "quarter close")
    expect(ann).to_have_url(_operation_url(inbox, op))
    with bob.expect_response(lambda r: r.url.endswith("/decide")) as answered:
        _submit(bob, "not needed any more")
    assert answered.value.status == 409
    body = bob.locator("body")
    for part in ("ann", "extend", "quarter close"):
        expect(body).to_contain_text(part)
    inbox.shot(bob, "conflict")
    decided = [(d.by, d.option) for d in inbox.record(op).decisions]
    assert decided == [("ann (shared token)", "extend")]


def test_the_decision_can_be_made_with_the_keyboard_only(inbox: Inbox, page: Page) -> None:
    """Tab to Extend, Enter, type the reason, Tab to the submit button, Enter: decided."""
    op = "report-export-04"
    inbox.escalate(op)
    inbox.sign_in(page, "kim")
    expect(_card(page, op)).to_be_visible()
    _tab_to(page, f'[data-operation-id="{op}"] [data-testid="option-extend"]')
    page.keyboard.press("Enter")
    expect(page.locator('[name="why"]')).to_be_visible()  # the decide form opened
    page.wait_for_load_state("load")  # its autofocus is applied: a person types after that
    _tab_to(page, '[name="why"]')
    page.keyboard.type("keyboard only")
    _tab_to(page, '[data-testid="decide-submit"]')
    inbox.shot(page, "keyboard-form")
    page.keyboard.press("Enter")
    expect(page).to_have_url(_operation_url(inbox, op))
    expect(page.get_by_test_id("decision-record")).to_contain_text("kim")
    decided = [(d.by, d.why) for d in inbox.record(op).decisions]
    assert decided == [("kim (shared token)", "keyboard only")]


def test_a_narrow_window_shows_the_decision_card_without_horizontal_scrolling(
    inbox: Inbox, new_page: Callable[..., Page]
) -> None:
    """At 375 px wide the decision card and its open form fit: no horizontal scrolling."""
    op = "report-export-05"
    inbox.escalate(op)
    page = new_page(viewport={"width": 375, "height": 812}, is_mobile=True, has_touch=True)
    inbox.sign_in(page, "ann")
    card = _card(page, op)
    expect(card).to_be_visible()
    _no_horizontal_scroll(page)
    box = card.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= 375
    _choose(page, op, "extend")  # the card again, with its decide form
    expect(card).to_be_visible()
    _no_horizontal_scroll(page)
    inbox.shot(page, "narrow")


def test_the_card_says_what_the_job_is_and_grants_the_agents_proposal_by_a_click(
    inbox: Inbox, page: Page
) -> None:
    """Issue 33: the card shows the job's label and source, and an agent's proposal
    (request_extension: 1.5 minutes, 2 checks) is granted as requested by its own
    button, whose form asks for no grant."""
    op = "report-export-06"
    inbox.escalate(op, label="team/exports")
    waitbound.request_extension(
        op, minutes=1.5, checks=2, why="the export is slow", by="agent:mcp", store=inbox.store
    )
    inbox.sign_in(page, "lee")
    card = _card(page, op)
    expect(card).to_contain_text("team/exports")
    expect(card).to_contain_text("Source")
    button = card.get_by_test_id("option-as_requested")
    expect(button).to_contain_text("as agent:mcp requested: by at least 1.5 minutes")
    _choose(page, op, "as_requested")
    expect(page.locator('[name="minutes"]')).to_have_count(0)
    _submit(page, "as the agent asked")
    expect(page).to_have_url(_operation_url(inbox, op))
    last = inbox.record(op).decisions[-1]
    assert last.option == "as_requested"
    assert last.detail["grant"] == {"minutes": 1.5, "checks": 2, "requested_by": "agent:mcp"}
