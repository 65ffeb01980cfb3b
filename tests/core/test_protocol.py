"""The protocol layer: the first answer, polling URL kinds, moves, final-state-via, query
carry, state matching and idempotent resends. Real loop, virtual time, seeded RNG,
a scripted transport that knows hosts (so credentials can be checked per origin)."""

from __future__ import annotations

import email.utils
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes import START, FakeClock
from tests.hypothesis_profiles import examples
from waitbound import (
    MemoryStore,
    Operation,
    Outcome,
    OutcomeKind,
    Policy,
    Reason,
    Record,
    Submission,
    parse_profile,
    run,
    wait,
)
from waitbound._profile._contract import Classification, StateTable
from waitbound._profile._protocol import FinalStateVia, UrlKind
from waitbound._rules._answers import Meaning, meaning
from waitbound.profiles import builtin_profile

ARM = "https://management.test"
RESOURCE = f"{ARM}/sub/rg/widgets/w1"
SUBMIT = f"{RESOURCE}?api-version=2024-01-01"
EVIL = "https://elsewhere.test"
AUTH = "Bearer secret-token"
AZURE: dict[str, Any] = dict(builtin_profile("azure").source)
FAST = Policy(base_delay_s=1, max_delay_s=2, deadline_s=300, not_found_grace_s=30)

Reply = tuple[int, object] | tuple[int, object, Mapping[str, str]] | Exception


@dataclass
class Sent:
    method: str
    url: str
    headers: Mapping[str, str]

    @property
    def where(self) -> str:
        return self.url.split("?", 1)[0]


class Web:
    """Scripted answers per URL (``scheme://host/path``, query ignored), in order; the last
    repeats. A body of ``bytes`` is sent as it is (with a JSON content type)."""

    def __init__(self, clock: FakeClock, script: Mapping[str, Sequence[Reply]]) -> None:
        self.clock = clock
        self.script = {url: list(replies) for url, replies in script.items()}
        self.sent: list[Sent] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        self.sent.append(Sent(request.method, url, dict(request.headers)))
        key = f"{request.url.scheme}://{request.url.host}{request.url.path}"
        replies = self.script[key]
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        if isinstance(reply, Exception):
            raise reply
        code, body, *rest = reply
        headers = dict(rest[0]) if rest else {}
        if isinstance(body, bytes):
            headers.setdefault("Content-Type", "application/json")
            return httpx.Response(code, content=body, headers=headers)
        if body is None:
            return httpx.Response(code, headers=headers)
        return httpx.Response(code, json=body, headers=headers)

    def count(self, where: str) -> int:
        return sum(1 for s in self.sent if s.where == where)

    def places(self) -> list[str]:
        return [f"{s.method} {s.where}" for s in self.sent]


@dataclass
class Drive:
    outcome: Outcome
    web: Web
    store: MemoryStore
    clock: FakeClock
    record: Record = field(init=False)

    def __post_init__(self) -> None:
        stored = self.store.get(self.outcome.operation_id)
        assert stored is not None
        self.record = stored

    def events(self, kind: str) -> list[Any]:
        return [
            s.event for s in self.store.audit(self.outcome.operation_id) if s.event.kind == kind
        ]

    def detail(self) -> str:
        assert isinstance(self.outcome.error, dict)
        return str(self.outcome.error["detail"])


def drive(
    script: Mapping[str, Sequence[Reply]],
    *,
    method: str = "PUT",
    url: str = SUBMIT,
    profile: Mapping[str, Any] | None = None,
    policy: Policy = FAST,
    wait_url: str | None = None,
    url_kind: UrlKind = UrlKind.STATUS,
    store: MemoryStore | None = None,
    clock: FakeClock | None = None,
    operation_id: str | None = None,
    **fields: Any,
) -> Drive:
    """Submit (or, with *wait_url*, wait on) an operation against the scripted web."""
    clock = clock or FakeClock()
    web = Web(clock, script)
    store = store or MemoryStore()
    table = parse_profile(dict(profile or AZURE), name="test")
    common: dict[str, Any] = {
        "store": store,
        "client": httpx.Client(transport=httpx.MockTransport(web)),
        "clock": clock,
        "sleep": clock.sleep,
        "rng": random.Random(7),
        "headers": {"Authorization": AUTH},
        "operation_id": operation_id,
    }
    if wait_url is not None:
        operation = Operation(
            status_url=wait_url, profile=table, policy=policy, url_kind=url_kind, **fields
        )
        outcome = wait(operation, **common)
    else:
        submission = Submission(method=method, url=url, profile=table, policy=policy, **fields)
        outcome = run(submission, **common)
    return Drive(outcome=outcome, web=web, store=store, clock=clock)


def _no_exception_story(result: Drive) -> None:
    """An escalation is one clear line: no traceback, no raw control character."""
    detail = result.detail()
    assert "\n" not in detail
    assert "Traceback" not in detail
    assert not re.search(r"[\x00-\x1f\x7f]", detail)


# --- 1. the first answer ------------------------------------------------------------

BATCH = {
    "state": "status",
    "pending": ["validating", "in_progress"],
    "succeeded": ["completed"],
    "failed": ["failed"],
    "job_id": "id",
    "error": "errors",
    "submit": {"status_url_headers": [], "status_url_template": "/v1/batches/{job_id}"},
}
BATCHES = "https://api.batch.test/v1/batches"


def test_a_terminal_state_in_the_receipt_body_ends_with_zero_polls() -> None:
    """A status-kind receipt saying `failed` (an OpenAI-batch-like create answer) ends
    the operation failed at the first answer: the status URL is never polled."""
    receipt = {"id": "b1", "status": "failed", "errors": {"data": [{"code": "bad_file"}]}}
    result = drive({BATCHES: [(200, receipt)]}, method="POST", url=BATCHES, profile=BATCH)
    assert result.outcome.outcome is OutcomeKind.FAILED
    assert result.outcome.error == {"data": [{"code": "bad_file"}]}
    assert result.web.places() == [f"POST {BATCHES}"]


@pytest.mark.parametrize("state", ["validating", "mystery", None])
def test_a_pending_unknown_or_missing_receipt_state_still_polls(state: str | None) -> None:
    """Only an explicit terminal state ends at the first answer: pending, a value in no
    list or no state at all means the named status URL is polled."""
    receipt = {"id": "b1"} | ({"status": state} if state else {})
    result = drive(
        {BATCHES: [(200, receipt)], f"{BATCHES}/b1": [(200, {"id": "b1", "status": "completed"})]},
        method="POST",
        url=BATCHES,
        profile=BATCH,
    )
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.web.places() == [f"POST {BATCHES}", f"GET {BATCHES}/b1"]


@pytest.mark.parametrize(
    ("state", "outcome"),
    [
        ("Succeeded", OutcomeKind.SUCCEEDED),
        ("Failed", OutcomeKind.FAILED),
        ("Canceled", OutcomeKind.CANCELED),
    ],
)
def test_put_200_with_a_terminal_provisioning_state_ends_at_the_first_answer(
    state: str, outcome: OutcomeKind
) -> None:
    """A PUT answered 200 with a terminal provisioningState is the resource's final
    state: zero polls; a success's result is the resource body."""
    body = {"id": "w1", "properties": {"provisioningState": state}}
    result = drive({RESOURCE: [(200, body)]})
    assert result.outcome.outcome is outcome
    assert result.web.places() == [f"PUT {RESOURCE}"]
    if outcome is OutcomeKind.SUCCEEDED:
        assert result.outcome.result == body


@pytest.mark.parametrize(
    ("method", "code", "body"),
    [("DELETE", 204, None), ("PUT", 200, {"id": "w1", "name": "w1"})],
    ids=["delete-204", "put-200-no-state"],
)
def test_a_first_answer_that_is_done_at_the_original_uri_sends_nothing_more(
    method: str, code: int, body: object
) -> None:
    """DELETE 204 and PUT 200 without a provisioningState are succeeded at the first
    answer (DELETE by submit.http_status_states, the PUT by the resource's when_no_state)."""
    result = drive({RESOURCE: [(code, body)]}, method=method)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == body
    assert len(result.web.sent) == 1


def test_put_201_without_a_state_polls_the_original_uri() -> None:
    """A PUT answered 201 without a state is pending by when_no_state: the original URI
    is polled (with the api-version it was sent with) until a terminal state."""
    done = {"id": "w1", "properties": {"provisioningState": "Succeeded"}}
    result = drive({RESOURCE: [(201, {"id": "w1"}), (200, done)]})
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == done
    assert [s.url for s in result.web.sent] == [SUBMIT, SUBMIT]
    assert result.record.poll_kind is UrlKind.RESOURCE


@pytest.mark.parametrize("raw_url", ["HTTPS://Management.TEST/sub/rg/widgets/w1",
                                     "https://management.test:443/sub/rg/widgets/w1"])  # fmt: skip
def test_the_original_uri_is_recognised_whatever_its_spelling(raw_url: str) -> None:
    """Regression: a submit URL not in normal form (upper-case host, explicit default
    port) is still the original URI: a PUT 200 without a state ends with no poll."""
    result = drive({RESOURCE: [(200, {"id": "w1"})]}, url=raw_url)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert len(result.web.sent) == 1


def test_post_200_by_submit_http_status_states_is_read_as_the_result_document() -> None:
    """No polling URL, `submit.http_status_states` says 200 is succeeded: the body is the
    result document, read by `result_document` (not the status body's `result`)."""
    profile = AZURE | {"result_document": "value", "result": "notThis"}
    body = {"value": {"restarted": True}, "notThis": 1}
    result = drive({f"{RESOURCE}/restart": [(200, body)]}, method="POST",
                   url=f"{RESOURCE}/restart", profile=profile)  # fmt: skip
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == {"restarted": True}
    assert len(result.web.sent) == 1


def test_a_202_without_a_polling_url_is_an_integration_failure_naming_where_it_looked() -> None:
    """A POST answered 202 with no header the profile names: not guessed; the message
    lists every place looked at, and nothing is polled."""
    result = drive({f"{RESOURCE}/restart": [(202, None)]}, method="POST",
                   url=f"{RESOURCE}/restart")  # fmt: skip
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    detail = result.detail()
    assert "named no status resource" in detail
    for place in ("azure-asyncoperation header", "operation-location header", "location header"):
        assert place in detail
    assert len(result.web.sent) == 1


# --- 2. polling URL kinds -------------------------------------------------------------

ACTION = f"{RESOURCE}/restart"
ACTION_URL = f"{ACTION}?api-version=2024-01-01"
LOC = f"{ARM}/results/1"


def _post(script: Mapping[str, Sequence[Reply]], **kw: Any) -> Drive:
    """POST an Azure action whose 202 names LOC as its Location (plus *script*)."""
    first: Reply = (202, None, {"Location": f"{LOC}?api-version=2024-01-01"})
    return drive({ACTION: [first], **script}, method="POST", url=ACTION_URL, **kw)


def test_location_202_is_pending_and_a_200_body_is_the_result_without_a_final_get() -> None:
    """At a Location URL 202 means running; 200 ends it, its body the result: nothing is
    fetched afterwards."""
    result = _post({LOC: [(202, None), (202, None), (200, {"restarted": True})]})
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == {"restarted": True}
    assert result.web.places() == [f"POST {ACTION}"] + [f"GET {LOC}"] * 3
    assert result.outcome.result_requests_used == 0


@pytest.mark.parametrize("code", [200, 204])
def test_location_done_with_an_empty_body_has_a_null_result(code: int) -> None:
    """200 or 204 with no body at a Location URL: succeeded, result null."""
    result = _post({LOC: [(code, None)]})
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result is None


@pytest.mark.parametrize("code", [400, 409, 422])
def test_location_4xx_is_failed_by_the_class_row(code: int) -> None:
    """The profile's `4xx: failed` row: a 4xx at a Location URL is the job's failure."""
    result = _post({LOC: [(202, None), (code, {"error": {"code": "Conflict"}})]})
    assert result.outcome.outcome is OutcomeKind.FAILED
    assert result.outcome.last_http_status == code


def test_location_404_is_still_the_not_found_rule_before_the_class_row() -> None:
    """A 404 is "not visible yet" within the grace (the fixed row before `4xx`), not a
    failure: the next 200 succeeds."""
    result = _post({LOC: [(404, None), (200, {"ok": 1})]})
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result == {"ok": 1}


def test_location_404_past_the_grace_is_an_integration_failure_not_failed() -> None:
    """A 404 that outlasts the grace stays the not-found rule's integration failure."""
    policy = Policy(base_delay_s=1, max_delay_s=2, deadline_s=300, not_found_grace_s=3)
    result = _post({LOC: [(404, None)]}, policy=policy)
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE


@pytest.mark.parametrize("code", [401, 403])
def test_location_401_403_are_denied_before_the_class_row(code: int) -> None:
    """401/403 at a Location URL: authorization_denied, never the `4xx: failed` row."""
    result = _post({LOC: [(code, None)]})
    assert result.outcome.reason is Reason.AUTHORIZATION_DENIED


@pytest.mark.parametrize(
    ("replies", "outcome"),
    [
        ([(201, {"id": "w1"}), (200, {"id": "w1"})], OutcomeKind.SUCCEEDED),
        ([(200, {"properties": {"provisioningState": "Updating"}}), (204, None)],
         OutcomeKind.ESCALATED),
        ([(200, {"properties": {"provisioningState": "Failed"}})], OutcomeKind.FAILED),
    ],
    ids=["201-pending-then-200", "updating-then-204", "failed"],
)  # fmt: skip
def test_a_resource_url_is_read_by_its_state_and_when_no_state(
    replies: list[Reply], outcome: OutcomeKind
) -> None:
    """Waiting on a resource URL: its provisioningState decides; a body without one
    means what `when_no_state` says for the code (201 pending, 200 succeeded); a 204
    (no resource) is never success."""
    result = drive({RESOURCE: replies}, wait_url=SUBMIT, url_kind=UrlKind.RESOURCE)
    assert result.outcome.outcome is outcome
    assert result.web.count(RESOURCE) == len(replies)


# --- 3. moves -------------------------------------------------------------------------


def _moves(result: Drive) -> list[Any]:
    return [e.data["polling_url_moved"] for e in result.events("scheduled")
            if "polling_url_moved" in e.data]  # fmt: skip


def test_a_202_naming_a_new_location_moves_the_polling_url_audited_old_and_new() -> None:
    """A 202 whose Location names another URL moves the polling URL; the scheduled
    event's data keeps both (redacted: no query)."""
    loc2 = f"{ARM}/results/2"
    result = _post({LOC: [(202, None, {"Location": loc2})], loc2: [(200, {"ok": 1})]})
    assert result.outcome.result == {"ok": 1}
    assert result.web.places()[1:] == [f"GET {LOC}", f"GET {loc2}"]
    assert _moves(result) == [{"from": f"{LOC}?…", "to": f"{loc2}?…"}]
    assert result.web.sent[2].url == f"{loc2}?api-version=2024-01-01"


def test_a_202_naming_the_same_location_does_not_move() -> None:
    """The same URL again (with or without the carried api-version) is no move."""
    same: Reply = (202, None, {"Location": f"{LOC}?api-version=2024-01-01"})
    result = _post({LOC: [same, (202, None, {"Location": LOC}), (200, None)]})
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert _moves(result) == []


def test_a_move_to_another_origin_sends_no_credentials_there() -> None:
    """A Location moving to another origin: the record no longer trusts the polling
    URL, the request there carries no Authorization; the caller's origin stays trusted."""
    away = f"{EVIL}/results/9"
    result = _post({LOC: [(202, None, {"Location": away})], away: [(200, {"ok": 1})]})
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    sent = {s.where: s.headers.get("authorization") for s in result.web.sent}
    assert sent == {ACTION: AUTH, LOC: AUTH, away: None}
    assert result.web.sent[-1].url == away  # api-version is carried at the submit origin only
    assert not result.record.trusts(away)
    assert result.record.trusts(LOC)
    assert result.record.caller_url == ACTION_URL


def test_a_wait_on_a_location_url_follows_moves_and_pins_the_callers_url() -> None:
    """Regression: waiting on a Location URL (no submit URL), a 202 naming a new one moves
    it, and the caller's URL is pinned: the other origin gets no credentials."""
    away = f"{EVIL}/results/9"
    result = drive({LOC: [(202, None, {"Location": away})], away: [(200, {"ok": 1})]},
                   wait_url=LOC, url_kind=UrlKind.LOCATION)  # fmt: skip
    assert result.outcome.result == {"ok": 1}
    assert [(s.where, s.headers.get("authorization")) for s in result.web.sent] == [
        (LOC, AUTH),
        (away, None),
    ]
    assert result.record.caller_url == LOC
    assert not result.record.trusts(away)


def test_a_second_move_back_to_the_callers_origin_gets_credentials_again() -> None:
    """trusted → other origin → trusted again: the pin is kept (never re-pinned to the
    other origin), so credentials go to the caller's origin only."""
    away, back = f"{EVIL}/results/9", f"{ARM}/results/3"
    result = _post({
        LOC: [(202, None, {"Location": away})],
        away: [(202, None, {"Location": back})],
        back: [(200, {"ok": 1})],
    })  # fmt: skip
    assert [(s.where, s.headers.get("authorization")) for s in result.web.sent] == [
        (ACTION, AUTH), (LOC, AUTH), (away, None), (back, AUTH),
    ]  # fmt: skip
    assert result.record.caller_url == ACTION_URL
    assert len(_moves(result)) == 2


def test_a_wait_record_moved_twice_keeps_the_first_pin() -> None:
    """A wait record moved away and then to a third origin trusts only its own URL."""
    away, third = f"{EVIL}/r", "https://third.test/r"
    result = drive(
        {LOC: [(202, None, {"Location": away})], away: [(202, None, {"Location": third})],
         third: [(200, None)]},
        wait_url=LOC, url_kind=UrlKind.LOCATION,
    )  # fmt: skip
    assert [s.headers.get("authorization") for s in result.web.sent] == [AUTH, None, None]
    assert result.record.caller_url == LOC
    assert result.record.trusts(LOC)
    assert not result.record.trusts(third)


# --- 4. final-state-via -----------------------------------------------------------------

MONITOR = f"{ARM}/operations/op1"
DONE_MONITOR = {"status": "Succeeded", "result": {"from": "monitor"}}
FINAL_BODY = {"from": "final"}


def _monitor(method: str, *, monitor: object = DONE_MONITOR, **kw: Any) -> Drive:
    """A submission answered 202 (Azure-AsyncOperation = MONITOR, Location = LOC)."""
    url = ACTION_URL if method == "POST" else SUBMIT
    headers = {"Azure-AsyncOperation": MONITOR, "Location": LOC}
    return drive(
        {
            url.split("?")[0]: [(202, None, headers), (200, FINAL_BODY)],
            MONITOR: [(200, monitor)],
            LOC: [(200, FINAL_BODY)],
            f"{ARM}/elsewhere/w1": [(200, FINAL_BODY)],
            f"{ARM}/given/result": [(200, FINAL_BODY)],
        },
        method=method,
        url=url,
        **kw,
    )


@pytest.mark.parametrize(
    ("method", "via", "fetched"),
    [
        ("POST", None, LOC),
        ("PUT", None, RESOURCE),
        ("PATCH", None, RESOURCE),
        ("DELETE", None, None),
        ("POST", FinalStateVia.LOCATION, LOC),
        ("PUT", FinalStateVia.LOCATION, LOC),
        ("POST", FinalStateVia.ORIGINAL_URI, ACTION),
        ("PUT", FinalStateVia.AZURE_ASYNC_OPERATION, None),
        ("POST", FinalStateVia.OPERATION_LOCATION, None),
    ],
)
def test_final_state_via_and_the_default_by_method(
    method: str, via: FinalStateVia | None, fetched: str | None
) -> None:
    """After the monitor's success the final state is fetched once from where
    final-state-via (else the method) says; none: the monitor's final body, whole."""
    result = _monitor(method, final_state_via=via)
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    places = result.web.places()
    assert places[:2] == [f"{method} {places[0].split(' ')[1]}", f"GET {MONITOR}"]
    if fetched is None:
        assert len(places) == 2
        assert result.outcome.result == {"status": "Succeeded", "result": {"from": "monitor"}}
    else:
        assert places[2:] == [f"GET {fetched}"]
        assert result.outcome.result == FINAL_BODY


def test_final_state_via_in_the_profile_applies_like_the_callers() -> None:
    """`submit.final_state_via` in the profile: the same choice as the caller's."""
    profile = AZURE | {"submit": AZURE["submit"] | {"final_state_via": "location"}}
    result = _monitor("PUT", profile=profile)
    assert result.web.places()[2:] == [f"GET {LOC}"]


def test_resource_location_beats_the_default_by_method() -> None:
    """The monitor's resourceLocation is the final URL before the PUT's request URL."""
    monitor = DONE_MONITOR | {"resourceLocation": f"{ARM}/elsewhere/w1"}
    result = _monitor("PUT", monitor=monitor)
    assert result.web.places()[2:] == [f"GET {ARM}/elsewhere/w1"]


def test_an_explicit_final_state_via_beats_resource_location() -> None:
    """final-state-via: location is explicit: it wins over the monitor's resourceLocation."""
    monitor = DONE_MONITOR | {"resourceLocation": f"{ARM}/elsewhere/w1"}
    result = _monitor("PUT", monitor=monitor, final_state_via=FinalStateVia.LOCATION)
    assert result.web.places()[2:] == [f"GET {LOC}"]


def test_a_callers_result_url_beats_every_final_state_via() -> None:
    """--result-url beats final-state-via and resourceLocation."""
    monitor = DONE_MONITOR | {"resourceLocation": f"{ARM}/elsewhere/w1"}
    result = _monitor(
        "PUT", monitor=monitor, final_state_via=FinalStateVia.LOCATION,
        result_url=f"{ARM}/given/result",
    )  # fmt: skip
    assert result.web.places()[2:] == [f"GET {ARM}/given/result"]


def test_a_final_url_equal_to_the_url_that_just_answered_is_not_fetched_again() -> None:
    """A monitor whose resourceLocation is itself: its body is the final state (HERE),
    read as a result document; no second GET."""
    profile = AZURE | {"result_document": "properties"}
    monitor = {"status": "Succeeded", "resourceLocation": MONITOR, "properties": {"x": 1}}
    result = _monitor("PUT", monitor=monitor, profile=profile)
    assert result.web.places()[1:] == [f"GET {MONITOR}"]
    assert result.outcome.result == {"x": 1}


def test_carry_query_adds_the_api_version_to_status_and_final_urls_at_the_submit_origin() -> None:
    """api-version goes onto the monitor and the final URL (same origin, lacking it)."""
    result = _monitor("POST")
    assert [s.url for s in result.web.sent[1:]] == [
        f"{MONITOR}?api-version=2024-01-01",
        f"{LOC}?api-version=2024-01-01",
    ]
    del result  # the action URL itself has its own api-version


def test_carry_query_leaves_another_origins_url_and_a_present_parameter_alone() -> None:
    """A monitor at another origin is polled as named; a URL that has api-version keeps it."""
    away = f"{EVIL}/operations/op1"
    headers = {"Azure-AsyncOperation": away, "Location": f"{LOC}?api-version=1999-01-01&x=1"}
    result = drive(
        {ACTION: [(202, None, headers)], away: [(200, {"status": "Succeeded"})],
         LOC: [(200, FINAL_BODY)]},
        method="POST", url=ACTION_URL,
    )  # fmt: skip
    assert [s.url for s in result.web.sent[1:]] == [away, f"{LOC}?api-version=1999-01-01&x=1"]


# --- 5. state matching ------------------------------------------------------------------

SIMPLE = {"state": "status", "pending": ["Running"], "succeeded": ["Succeeded"]}
JOB = "https://jobs.test/status"


def test_case_insensitive_states_match_whatever_the_case() -> None:
    """`case_insensitive_states`: `succeeded` is Succeeded, `RUNNING` is Running."""
    profile = SIMPLE | {"case_insensitive_states": True}
    result = drive({JOB: [(200, {"status": "RUNNING"}), (200, {"status": "succeeded"})]},
                   wait_url=JOB, profile=profile)  # fmt: skip
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.provider_state == "succeeded"


def test_without_case_insensitive_states_a_different_case_is_unknown() -> None:
    """By default `succeeded` is not `Succeeded`: unknown_state, nothing guessed."""
    result = drive({JOB: [(200, {"status": "succeeded"})]}, wait_url=JOB, profile=SIMPLE)
    assert result.outcome.reason is Reason.UNKNOWN_STATE


def test_unlisted_state_pending_is_audited_every_time_and_bounded_by_max_requests() -> None:
    """`unlisted_state: pending`: each unlisted answer says so in the audit; the budget
    still ends it."""
    profile = SIMPLE | {"unlisted_state": "pending"}
    policy = Policy(base_delay_s=1, max_delay_s=2, deadline_s=300, max_requests=5)
    result = drive({JOB: [(200, {"status": "Warming"})]}, wait_url=JOB, profile=profile,
                   policy=policy)  # fmt: skip
    assert result.outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert len(result.web.sent) == 5
    notes = [e.summary for e in result.events("scheduled")]
    assert len(notes) == 5
    assert all('unlisted state "Warming": pending by the profile' in n for n in notes)


def test_unlisted_state_pending_is_bounded_by_the_deadline() -> None:
    """An unlisted state forever with a large budget: timed out at the deadline."""
    profile = SIMPLE | {"unlisted_state": "pending"}
    policy = Policy(base_delay_s=1, max_delay_s=2, deadline_s=20, max_requests=1000)
    result = drive({JOB: [(200, {"status": "Warming"})]}, wait_url=JOB, profile=profile,
                   policy=policy)  # fmt: skip
    assert result.outcome.outcome is OutcomeKind.TIMED_OUT
    assert sum(result.clock.sleeps) <= 20
    assert len(result.web.sent) < 20


def test_the_default_unlisted_state_stops_unknown_state() -> None:
    """Without `unlisted_state`, a value in no list stops at once: unknown_state."""
    result = drive({JOB: [(200, {"status": "Warming"})]}, wait_url=JOB, profile=SIMPLE)
    assert result.outcome.reason is Reason.UNKNOWN_STATE
    assert len(result.web.sent) == 1


def test_a_listed_state_is_never_reported_as_unlisted() -> None:
    """A listed pending state under `unlisted_state: pending` is not audited as unlisted."""
    profile = SIMPLE | {"unlisted_state": "pending"}
    result = drive({JOB: [(200, {"status": "Running"}), (200, {"status": "Succeeded"})]},
                   wait_url=JOB, profile=profile)  # fmt: skip
    assert not any("unlisted" in e.summary for e in result.events("scheduled"))


# --- 6. idempotent resends ----------------------------------------------------------------

CREATED: Reply = (201, {"id": "w1", "properties": {"provisioningState": "Succeeded"}})


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
@pytest.mark.parametrize(
    "trouble", [(500, None), httpx.ConnectError("refused")], ids=["500", "no-answer"]
)
def test_put_and_delete_are_resent_after_trouble_up_to_max_submit_attempts(
    method: str, trouble: Reply
) -> None:
    """PUT and DELETE are idempotent: resent after a 500 or no answer, at most
    max_submit_attempts times in all, then provider_failure."""
    result = drive({RESOURCE: [trouble]}, method=method, max_submit_attempts=3)
    assert result.outcome.reason is Reason.PROVIDER_FAILURE
    assert result.web.places() == [f"{method} {RESOURCE}"] * 3
    resent = drive({RESOURCE: [trouble, CREATED]}, method=method)
    assert resent.outcome.outcome is OutcomeKind.SUCCEEDED
    assert resent.web.places() == [f"{method} {RESOURCE}"] * 2


def test_post_without_a_key_is_sent_once_after_a_500() -> None:
    """A POST without an idempotency key is never resent: it may have created a job."""
    result = drive({ACTION: [(500, None)]}, method="POST", url=ACTION)
    assert result.outcome.reason is Reason.PROVIDER_FAILURE
    assert "may have created a job" in result.detail()
    assert len(result.web.sent) == 1


class _ProcessStops(BaseException):
    """Stands for the process being killed while a request is out (as kill -9)."""


def test_a_crash_after_sending_a_put_resumes_by_sending_it_again() -> None:
    """A PUT whose answer was lost (record in_flight="submit") is resent on resume: the
    lost attempt stays counted."""
    clock, store = FakeClock(), MemoryStore()

    def crash(request: httpx.Request) -> httpx.Response:
        raise _ProcessStops

    submission = Submission(method="PUT", url=SUBMIT, profile=parse_profile(AZURE), policy=FAST)
    with pytest.raises(_ProcessStops):
        run(submission, store=store, client=httpx.Client(transport=httpx.MockTransport(crash)),
            clock=clock, sleep=clock.sleep, operation_id="op-put")  # fmt: skip
    stranded = store.get("op-put")
    assert stranded is not None
    assert stranded.in_flight == "submit"
    result = drive({RESOURCE: [CREATED]}, store=store, clock=clock, operation_id="op-put")
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.web.places() == [f"PUT {RESOURCE}"]
    assert result.record.submit_attempts == 2
    assert len(result.events("answer_lost")) == 1


def test_repeatability_headers_are_identical_on_every_attempt() -> None:
    """`idempotency_scheme: repeatability`: Repeatability-Request-ID and
    Repeatability-First-Sent (an IMF-fixdate of the creation time) on every attempt,
    unchanged."""
    profile = AZURE | {"submit": AZURE["submit"] | {"idempotency_scheme": "repeatability"}}
    result = drive({ACTION: [(500, None), (503, None), (200, {"ok": 1})]}, method="POST",
                   url=ACTION, profile=profile)  # fmt: skip
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    ids = {s.headers["repeatability-request-id"] for s in result.web.sent}
    first_sent = {s.headers["repeatability-first-sent"] for s in result.web.sent}
    assert len(result.web.sent) == 3
    assert len(ids) == 1
    assert len(first_sent) == 1
    (stamp,) = first_sent
    assert stamp == email.utils.format_datetime(START, usegmt=True)
    assert re.fullmatch(r"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT", stamp)


# --- 7. result_document vs result ---------------------------------------------------------


def test_result_reads_only_the_status_body_and_result_document_only_the_fetched_one() -> None:
    """A monitor that is the final state (staged) is the result whole; `result_document`
    reads only a fetched document, never the monitor body."""
    profile = AZURE | {"result_document": "doc"}
    monitor = {"status": "Succeeded", "result": {"from": "monitor"}, "doc": "not-this"}
    final = _monitor("POST", monitor=monitor, profile=profile,
                     final_state_via=FinalStateVia.AZURE_ASYNC_OPERATION)  # fmt: skip
    assert final.outcome.result == monitor
    fetched_script: dict[str, list[Reply]] = {
        ACTION: [(202, None, {"Azure-AsyncOperation": MONITOR, "Location": LOC})],
        MONITOR: [(200, monitor)],
        LOC: [(200, {"doc": {"from": "document"}, "result": "not-this"})],
    }
    fetched = drive(fetched_script, method="POST", url=ACTION, profile=profile)
    assert fetched.outcome.result == {"from": "document"}


# --- 8. the answer table ----------------------------------------------------------------

TABLE = StateTable(
    codes={202: Classification.PENDING, 200: Classification.SUCCEEDED},
    code_classes={4: Classification.FAILED},
)


@pytest.mark.parametrize(
    ("request_kind", "code", "table", "throttled", "expected", "classification"),
    [
        ("status", None, TABLE, False, Meaning.TROUBLE, None),
        ("status", 202, TABLE, False, Meaning.CLASSIFIED, Classification.PENDING),
        ("status", 200, TABLE, True, Meaning.CLASSIFIED, Classification.SUCCEEDED),
        ("status", 429, TABLE, False, Meaning.THROTTLED, None),
        ("status", 400, TABLE, True, Meaning.THROTTLED, None),
        ("status", 401, TABLE, False, Meaning.DENIED, None),
        ("status", 403, TABLE, False, Meaning.DENIED, None),
        ("status", 404, TABLE, False, Meaning.NOT_FOUND, None),
        ("status", 410, TABLE, False, Meaning.NOT_FOUND, None),
        ("status", 400, TABLE, False, Meaning.CLASSIFIED, Classification.FAILED),
        ("status", 409, TABLE, False, Meaning.CLASSIFIED, Classification.FAILED),
        ("status", 409, StateTable(), False, Meaning.UNEXPLAINED, None),
        ("status", 201, StateTable(), False, Meaning.BODY, None),
        ("status", 503, TABLE, False, Meaning.TROUBLE, None),
        ("status", 302, TABLE, False, Meaning.UNEXPLAINED, None),
        ("submit", 202, TABLE, False, Meaning.BODY, None),
        ("submit", 303, StateTable(), False, Meaning.BODY, None),
        ("submit", 400, TABLE, False, Meaning.REFUSED, None),
        ("submit", 401, TABLE, False, Meaning.DENIED, None),
        ("submit", 404, TABLE, False, Meaning.REFUSED, None),
        ("submit", 429, TABLE, False, Meaning.THROTTLED, None),
        ("submit", 500, TABLE, False, Meaning.TROUBLE, None),
        ("submit", None, TABLE, False, Meaning.TROUBLE, None),
        ("result", 200, TABLE, False, Meaning.BODY, None),
        ("result", 409, TABLE, False, Meaning.NOT_READY, None),
        ("result", 425, TABLE, False, Meaning.NOT_READY, None),
        ("result", 403, TABLE, False, Meaning.DENIED, None),
        ("result", 404, TABLE, False, Meaning.UNEXPLAINED, None),
        ("result", 502, TABLE, False, Meaning.TROUBLE, None),
        ("errors", 409, TABLE, False, Meaning.NOT_READY, None),
    ],
)
def test_the_answer_table(
    *,
    request_kind: Any,
    code: int | None,
    table: StateTable,
    throttled: bool,
    expected: Meaning,
    classification: Classification | None,
) -> None:
    """`_answers.meaning`: no answer, exact rows, throttle, fixed rows, class rows, then
    the status class, per request kind (the order atop `_answers.py`)."""
    answer = meaning(request_kind, code, table=table, throttled=throttled)
    assert answer.meaning is expected
    assert answer.classification is classification


# --- 9. hostile input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "location",
    [
        "http://[::1",
        "file:///etc/passwd",
        "ftp://management.test/x",
        "javascript:alert(1)",
        f"{ARM}/a\x01b",
        f"{ARM}/a\r\nSet-Cookie: x",
        "http://xn--n3h.net/x",
        f"{ARM}:99999/x",
        "https://user:pw@management.test/x",
    ],
    ids=["broken", "file", "ftp", "javascript", "control", "crlf", "idna", "port", "userinfo"],
)
def test_a_poll_answer_naming_an_unusable_location_escalates_one_line(location: str) -> None:
    """A 202 whose Location cannot be used: integration_failure naming the header and
    the URL (escaped), after two requests; never an exception."""
    result = _post({LOC: [(202, None, {"Location": location})]})
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert "location header named a polling URL" in result.detail()
    assert "pw" not in result.detail()
    _no_exception_story(result)
    assert len(result.web.sent) == 2


def test_a_huge_location_is_refused_or_used_never_a_crash() -> None:
    """A 100,000-character Location ends in one outcome; the story stays bounded."""
    huge = f"{ARM}/" + "a" * 100_000
    result = _post({LOC: [(202, None, {"Location": huge})], huge: [(200, None)]})
    assert result.outcome.outcome in (OutcomeKind.SUCCEEDED, OutcomeKind.ESCALATED)
    for stored in result.store.audit(result.outcome.operation_id):
        assert len(stored.event.summary) < 5_000


@pytest.mark.parametrize(
    "query",
    ["api-version=", "x=%zz&&=&api-version", "api-version=1&api-version=2", "%00=1", "a=b;c"],
)
def test_carry_query_with_odd_query_strings_never_raises(query: str) -> None:
    """Odd query strings on the polling URL: the carry leaves a present parameter alone
    and the operation ends normally."""
    result = drive(
        {ACTION: [(202, None, {"Location": f"{LOC}?{query}"})], LOC: [(200, {"ok": 1})]},
        method="POST", url=ACTION_URL,
    )  # fmt: skip
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert "api-version=2024-01-01" not in result.web.sent[1].url or "api-version" not in query


@pytest.mark.parametrize("body", [[1, 2], "text", 7, True], ids=["list", "string", "int", "bool"])
def test_a_first_answer_body_that_is_not_an_object_ends_in_one_outcome(body: object) -> None:
    """A receipt body that is a list, string, number or boolean: nothing raises; with a
    polling URL the monitor decides."""
    result = drive(
        {ACTION: [(202, body, {"Azure-AsyncOperation": MONITOR})],
         MONITOR: [(200, {"status": "Succeeded"})]},
        method="POST", url=ACTION,
    )  # fmt: skip
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert len(result.web.sent) == 2


@pytest.mark.parametrize(
    "state", [{"nested": "Succeeded"}, ["Succeeded"], 3.5, True], ids=["object", "list", "n", "b"]
)
def test_a_provisioning_state_that_is_not_text_is_unknown_not_pending(state: object) -> None:
    """A provisioningState that is an object or list is never "unlisted, so pending":
    the first answer polls once (unknown is not terminal), then unknown_state in one
    line. Numbers and booleans are unlisted values: pending, bounded by the budget."""
    policy = Policy(base_delay_s=1, max_delay_s=2, deadline_s=300, max_requests=4)
    result = drive({RESOURCE: [(200, {"properties": {"provisioningState": state}})]}, policy=policy)
    assert result.outcome.outcome is OutcomeKind.ESCALATED
    if isinstance(state, dict | list):
        assert result.outcome.reason is Reason.UNKNOWN_STATE
        assert len(result.web.sent) == 2
    else:
        assert result.outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    _no_exception_story(result)


def test_a_location_200_whose_body_is_not_json_is_not_a_null_result() -> None:
    """Regression: a Location URL answering 200 with a body that is not JSON: the job is
    done but its result cannot be read: integration_failure, never succeeded with null."""
    result = _post({LOC: [(200, b"<html>oops</html>")]})
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert "the result cannot be read" in result.detail()
    _no_exception_story(result)


def test_a_post_200_whose_body_is_not_json_is_not_a_null_result() -> None:
    """Regression: the first answer ending the operation (200 by submit.http_status_states)
    with a body that is not JSON: integration_failure, not succeeded with null."""
    result = drive({ACTION: [(200, b"{not json")]}, method="POST", url=ACTION)
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert "the result cannot be read" in result.detail()


def test_a_204_at_a_location_url_is_still_a_null_result() -> None:
    """A body-less done answer is no body problem: succeeded, result null."""
    result = _post({LOC: [(204, b"")]})
    assert result.outcome.outcome is OutcomeKind.SUCCEEDED
    assert result.outcome.result is None


def test_a_redirect_loop_of_moves_is_bounded_by_max_requests() -> None:
    """A→B→A→B on every 202: each move audited, at most max_requests sent."""
    a, b = f"{ARM}/loop/a", f"{EVIL}/loop/b"
    policy = Policy(base_delay_s=1, max_delay_s=2, deadline_s=300, max_requests=9)
    result = _post({LOC: [(202, None, {"Location": a})], a: [(202, None, {"Location": b})],
                    b: [(202, None, {"Location": a})]}, policy=policy)  # fmt: skip
    assert result.outcome.reason is Reason.REQUEST_BUDGET_EXHAUSTED
    assert len(result.web.sent) == 9
    assert len(_moves(result)) == 8
    for sent in result.web.sent:
        assert (sent.headers.get("authorization") is None) == sent.url.startswith(EVIL)


# --- 10. property: any answers at a location / resource URL -----------------------------

_TARGETS = [f"{ARM}/p/a", f"{ARM}/p/b", f"{EVIL}/p/c", "https://third.test/p/d"]
_PROPERTY_ANSWERS = st.fixed_dictionaries(
    {
        "code": st.sampled_from([200, 201, 202, 202, 204, 400, 401, 404, 409, 429, 500, 503, 0]),
        "body": st.sampled_from(
            [
                None,
                {"properties": {"provisioningState": "Updating"}},
                {"properties": {"provisioningState": "Succeeded"}},
                {"properties": {"provisioningState": "Failed"}},
                {"properties": {"provisioningState": {"x": 1}}},
                {"properties": {"provisioningState": "Weird"}},
                {"id": "w1"},
                [1, 2],
                "text",
                b"{broken",
            ]
        ),
        "location": st.one_of(
            st.none(),
            st.sampled_from(_TARGETS),
            st.sampled_from(["http://[::1", "file:///x", "/p/relative", "//elsewhere.test/p/e"]),
        ),
    }
)


class _Anything:
    """Serves the drawn answers in order at whatever URL is asked (the last repeats)."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.sent: list[Sent] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(Sent(request.method, str(request.url), dict(request.headers)))
        answer = self.answers[min(len(self.sent) - 1, len(self.answers) - 1)]
        if answer["code"] == 0:
            raise httpx.ReadTimeout("slow")
        headers = {"Location": answer["location"]} if answer["location"] else {}
        body = answer["body"]
        if isinstance(body, bytes):
            return httpx.Response(answer["code"], content=body, headers=headers)
        if body is None:
            return httpx.Response(answer["code"], headers=headers)
        return httpx.Response(answer["code"], json=body, headers=headers)


@settings(
    max_examples=examples(200),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    answers=st.lists(_PROPERTY_ANSWERS, min_size=1, max_size=12),
    kind=st.sampled_from([UrlKind.LOCATION, UrlKind.RESOURCE]),
    submitted=st.booleans(),
    max_requests=st.integers(1, 10),
)
def test_any_answers_at_a_location_or_resource_url_stay_bounded_and_end_once(
    answers: list[dict[str, Any]], kind: UrlKind, submitted: bool, max_requests: int
) -> None:
    """Whatever a location / resource URL answers (codes, bodies, moves anywhere): at
    most max_requests sent, no credentials to another origin, exactly one outcome."""
    clock, store = FakeClock(), MemoryStore()
    web = _Anything(answers)
    policy = Policy(base_delay_s=1, max_delay_s=4, deadline_s=120, max_requests=max_requests)
    profile = parse_profile(AZURE, name="azure")
    common: dict[str, Any] = {
        "store": store,
        "client": httpx.Client(transport=httpx.MockTransport(web)),
        "clock": clock,
        "sleep": clock.sleep,
        "rng": random.Random(3),
        "headers": {"Authorization": AUTH},
    }
    if submitted:  # the first answer names the polling URL; the drawn ones follow
        method = "POST" if kind is UrlKind.LOCATION else "PUT"
        first = {"code": 202 if method == "POST" else 201, "body": None, "location": None}
        web.answers = [first | ({"location": _TARGETS[0]} if method == "POST" else {}), *answers]
        outcome = run(Submission(method=method, url=SUBMIT, profile=profile, policy=policy),
                      **common)  # fmt: skip
    else:
        outcome = wait(Operation(status_url=SUBMIT, profile=profile, policy=policy,
                                 url_kind=kind), **common)  # fmt: skip
    assert len(web.sent) <= max_requests
    for sent in web.sent:
        if not sent.url.startswith(f"{ARM}/"):
            assert "authorization" not in sent.headers, sent.url
    record = store.get(outcome.operation_id)
    assert record is not None
    assert record.is_finished
    assert outcome.outcome in set(OutcomeKind)
    finished = [s for s in store.audit(outcome.operation_id) if s.event.kind == "finished"]
    assert len(finished) == 1
    if outcome.outcome is OutcomeKind.ESCALATED:
        assert isinstance(outcome.error, dict)
        assert "\n" not in str(outcome.error.get("detail"))


def test_a_monitor_success_by_code_with_an_unreadable_body_is_not_a_null_result() -> None:
    """A status monitor whose exact code row says 200 is succeeded, answering a body that
    is not JSON: the job's result would be the monitor's own `result`, which cannot be
    read: integration_failure, never succeeded with null (and require_on_success is not
    skipped by it)."""
    monitor = f"{ARM}/operations/1"
    profile = {"state": "status", "succeeded": ["done"], "result": "result",
               "http_status_states": {"200": "succeeded"}}  # fmt: skip
    result = drive({monitor: [(200, b"<html>maintenance</html>")]}, wait_url=monitor,
                   profile=profile)  # fmt: skip
    assert result.outcome.reason is Reason.INTEGRATION_FAILURE
    assert "the result cannot be read" in result.detail()


@pytest.mark.parametrize(("code", "ended"), [(200, True), (204, True), (202, False)])
def test_submit_http_status_states_accepts_a_class_row(code: int, ended: bool) -> None:
    """`submit.http_status_states` takes `"2xx"`-style rows like every code table: with no
    polling URL, `{"2xx": "succeeded", "202": "pending"}` ends a 200 or 204 at once and a
    202 (exact row first) still names no status resource."""
    first = {"2xx": "succeeded", "202": "pending"}
    profile = {"state": "status", "succeeded": ["done"],
               "submit": {"status_url_headers": [], "http_status_states": first}}  # fmt: skip
    result = drive({ACTION: [(code, b"" if code == 204 else b"{}")]}, method="POST", url=ACTION,
                   profile=profile)  # fmt: skip
    assert (result.outcome.outcome is OutcomeKind.SUCCEEDED) is ended
    assert len(result.web.sent) == 1
