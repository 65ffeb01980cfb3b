"""The inbox card says what the job is and offers the agent's proposal (issue 33, item
2): its label, source, progress and the provider's estimate, and an ``as_requested``
button whose form asks for no grant of its own and grants the proposal."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from html import unescape

import pytest

import waitbound
from tests.web.test_pages import AUTH, Inbox, csrf_of
from waitbound import Policy


@pytest.fixture
def inbox() -> Iterator[Inbox]:
    made = Inbox()
    with made.client:
        yield made


def _escalated_with_a_proposal(inbox: Inbox) -> None:
    policy = Policy(base_delay_s=1.0, max_delay_s=2.0, deadline_s=60, max_requests=3,
                    max_extension_s=600)  # fmt: skip
    inbox.start("op-1", label="team/exports", policy=policy)
    waitbound.request_extension(
        "op-1", minutes=5, checks=3, why="the export is slow", by="agent:mcp",
        store=inbox.store, clock=inbox.clock,
    )  # fmt: skip
    inbox.wait("op-1", [(200, {"status": "running", "progress": "40%"}, {"Retry-After": "300"})])


def test_the_inbox_card_shows_what_the_job_is_its_progress_and_the_estimate(inbox: Inbox) -> None:
    """Regression (issue 33): the card showed ids and counters only. Now it shows the
    label, the source (profile and URL), the progress and the provider's estimate, and
    an as_requested button stating the agent's proposal."""
    _escalated_with_a_proposal(inbox)
    html = unescape(inbox.client.get("/", headers=AUTH).text)
    card = html[html.index('data-testid="decision"') :]
    assert "<dt>Label</dt><dd>team/exports</dd>" in card
    assert "<dt>Source</dt><dd>reports profile, http://provider.test/status</dd>" in card
    assert "<dt>Progress</dt><dd>40%</dd>" in card
    estimate = re.search(r"<dt>Provider estimate</dt><dd>([^<]*)</dd>", card)
    assert estimate is not None
    assert "Retry-After header" in estimate.group(1)
    button = re.search(r'data-testid="option-as_requested">([^<]*)<', card)
    assert button is not None
    assert "as agent:mcp requested: by at least 5 minutes with 3 more checks" in button.group(1)


def test_the_as_requested_form_asks_for_no_grant_and_grants_the_proposal(inbox: Inbox) -> None:
    """Its form has no minutes or checks; posting it grants 5 minutes and 3 checks."""
    _escalated_with_a_proposal(inbox)
    csrf = inbox.sign_in()
    form = inbox.client.get("/operation/op-1?option=as_requested").text
    form = form[form.index('<form method="post" action="') :]
    form = form[: form.index("</form>")]
    assert 'name="minutes"' not in form
    assert 'name="checks"' not in form
    before = inbox.store.get("op-1")
    assert before is not None
    now = inbox.clock.now()
    answer = inbox.client.post(
        "/operation/op-1/decide",
        data={"csrf": csrf, "option": "as_requested", "why": "as the agent said"},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    after = inbox.store.get("op-1")
    assert after is not None
    assert after.decisions[-1].option == "as_requested"
    assert after.max_requests == before.requests_used + 3
    assert after.deadline_at == now + timedelta(minutes=5)
    assert csrf_of(inbox.client.get("/").text)
