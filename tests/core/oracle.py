"""The honesty oracle: a scripted provider that keeps its own log, a world that drives
the real API (``wait``, ``run``, ``cancel``, ``check``, ``decide``, ``escalations``)
against it on virtual time, and the checks that hold every claim waitbound makes to
what the provider's log shows.

The oracle's model of what was seen is derived from the provider's log and the
oracle's own reading of the answers it scripted (:data:`SAYS`), never from the record:
the record is only the thing being checked. Everything is deterministic: a fake clock,
seeded jitter, and requests carried out inline (no thread, no real-time timeout).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from itertools import pairwise
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

import httpx

import waitbound
from waitbound import (
    Completion,
    DecisionConflictError,
    MemoryStore,
    Operation,
    OutcomeKind,
    Phase,
    Policy,
    Reason,
    Record,
    SQLiteStore,
    Store,
    Submission,
    UsageError,
    parse_profile,
)
from waitbound._model._observation import Observation
from waitbound._model._record import (
    Contract,
    Schedule,
)
from waitbound._model._record import Submission as SubmissionPart
from waitbound._rules._controller import Request
from waitbound.testing import FakeClock
from waitbound.transports import Fence, _exchange, _http

BASE = "http://provider.test"
SUBMIT_URL = f"{BASE}/jobs"
FIRST_STATUS = "/s/1"
RESULT_PATH = "/result"
OP = "op-oracle"
JOB = "job-7"
OUTPUT = {"rows": 3}
RESULT_BODY = {"rows": 3, "file": "out.csv"}

TABLE: dict[str, Any] = {
    "state": "status",
    "pending": ["queued", "running"],
    "succeeded": ["done"],
    "partial": ["partial"],
    "failed": ["failed"],
    "canceled": ["canceled"],
    "expired": ["expired"],
    "job_id": "id",
    "error": "error",
    "result": "output",
    "poll_hint": "poll_after",
    "cancelable": "can_cancel",
    "cancel": {"url_template": "{status_url}/cancel"},
    "decided_by": {
        "field": "next_action", "pending": ["poll_status"], "skipped": ["retry_later"],
        "terminal": ["none"],
    },
}  # fmt: skip
INLINE = {**TABLE, "require_on_success": ["output"]}
"""Variant ``inline``: the status body carries the result, which a success must have."""
FETCHED = {**TABLE, "result_document": "@"}
"""Variant ``fetched``: the result is fetched once from the result endpoint."""

CORRECTED_NOTE = "the same contract, corrected"


def corrected(table: Mapping[str, Any]) -> waitbound.Profile:
    """A profile that reads answers exactly as *table* does, with another version."""
    return parse_profile({**table, "description": CORRECTED_NOTE}, name="corrected")


# --- what the provider says -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer: ``kind`` names it in the oracle's vocabulary (:data:`SAYS`).

    ``code`` ``None`` is a transport failure (``error`` names which); ``body`` is a JSON
    value, ``bytes`` sent as they are, or ``None`` for no body. ``latency_s`` is virtual
    time the answer takes; past the request's timeout it becomes a read timeout.
    """

    kind: str
    code: int | None = 200
    body: object = None
    headers: tuple[tuple[str, str], ...] = ()
    latency_s: float = 0.0
    error: str = ""
    location: str | None = None
    """A status answer naming a new polling URL (``Location``), relative to the base."""


def status(state: str, **extra: object) -> dict[str, object]:
    return {"status": state, "id": JOB, **extra}


# The oracle's own reading of each status reply kind, independent of waitbound: what a
# person reading the provider's documentation would say the answer means.
PENDING, SUCCEEDED, BARE_SUCCESS, PARTIAL, FAILED, CANCELED, EXPIRED = (
    "pending", "succeeded", "bare_success", "partial", "failed", "canceled", "expired",
)  # fmt: skip
UNKNOWN, INVISIBLE, DENIED, THROTTLED, TROUBLE, UNREADABLE, UNEXPLAINED = (
    "unknown", "invisible", "denied", "throttled", "trouble", "unreadable", "unexplained",
)  # fmt: skip
FOREIGN, NO_ENDING = "foreign", "no_ending"
"""An answer about another job than :data:`JOB` (no evidence for this operation); a
``next_action: none`` whose status names no ending (no evidence of an ending)."""
TERMINAL = frozenset({SUCCEEDED, PARTIAL, FAILED, CANCELED, EXPIRED})


def says(reply: Reply, *, inline: bool) -> str:
    """What a status reply means, by the oracle's reading of the scripted contract."""
    if reply.code is None:
        return TROUBLE
    code = reply.code
    if code == 429:
        return THROTTLED
    if code in (401, 403):
        return DENIED
    if code in (404, 410):
        return INVISIBLE
    if code >= 500:
        return TROUBLE
    if not 200 <= code < 300:
        return UNEXPLAINED
    body = reply.body
    if not isinstance(body, dict):
        return UNREADABLE
    if body.get("id", JOB) != JOB:
        return FOREIGN  # another job's answer is never this one's
    state = body.get("status")
    action = body.get("next_action")
    if action == "poll_status":
        return PENDING  # next_action decides, whatever the status says
    if action == "retry_later":
        return CANCELED  # skipped: outcome canceled, reason skipped
    if action is not None and action != "none":
        return UNKNOWN
    if action == "none" and state not in ("done", "partial", "failed", "canceled", "expired"):
        return NO_ENDING
    if state is None:
        return INVISIBLE
    if state in ("queued", "running"):
        return PENDING
    if state == "done":
        if body.get("error") is not None:
            return FAILED
        if inline and body.get("output") is None:
            return BARE_SUCCESS
        return SUCCEEDED
    if state == "partial":
        return PARTIAL
    return {"failed": FAILED, "canceled": CANCELED, "expired": EXPIRED}.get(str(state), UNKNOWN)


def result_ok(reply: Reply) -> bool:
    """Whether a result reply delivers a result: a 2xx with a body (JSON or text). An
    empty answer is no evidence of anything (issue 20: an empty final resource is never
    success)."""
    ok = reply.code is not None and 200 <= reply.code < 300
    return ok and reply.body is not None and reply.body not in (b"", {})


@dataclass
class Hit:
    """One request the provider received (its log entry)."""

    n: int
    endpoint: str
    """``submit``, ``status``, ``result`` or ``cancel``."""
    method: str
    path: str
    sent_at: datetime
    reply: Reply
    answered_at: datetime | None = None
    timed_out: bool = False
    lost: bool = False
    """The answer reached waitbound, which was stopped before it recorded it."""

    @property
    def delivered(self) -> bool:
        return self.reply.code is not None and not self.timed_out

    @property
    def processed(self) -> bool:
        """Waitbound had this answer (or this failure) to decide on."""
        return not self.lost


class Provider:
    """Serves each endpoint's scripted replies in order (the last one repeats) and
    logs every request. Paths: ``POST /jobs`` submit, ``GET /s/N`` status (any N: the
    polling URL may move), ``POST /s/N/cancel`` cancel, ``GET /result`` result."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.scripts: dict[str, list[Reply]] = {
            "submit": [Reply("receipt", 202, {"id": JOB}, location=FIRST_STATUS)],
            "status": [Reply("running", 200, status("running"))],
            "result": [Reply("result", 200, RESULT_BODY)],
            "cancel": [Reply("accepted", 202, {})],
        }
        self.log: list[Hit] = []

    def endpoint(self, request: httpx.Request) -> str:
        path = request.url.path
        if path == "/jobs":
            return "submit"
        if path == RESULT_PATH:
            return "result"
        if path.endswith("/cancel"):
            return "cancel"
        return "status"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        kind = self.endpoint(request)
        queue = self.scripts[kind]
        reply = queue.pop(0) if len(queue) > 1 else queue[0]
        hit = Hit(
            len(self.log) + 1, kind, request.method, request.url.path, self.clock.now(), reply
        )
        self.log.append(hit)
        timeout = request.extensions.get("timeout", {}).get("read")
        if timeout is not None and reply.latency_s > timeout:
            self.clock.advance(timeout)
            hit.timed_out = True
            hit.answered_at = self.clock.now()
            raise httpx.ReadTimeout("timed out", request=request)
        self.clock.advance(reply.latency_s)
        hit.answered_at = self.clock.now()
        if reply.code is None:
            if reply.error == "refused":
                raise httpx.ConnectError("connection refused", request=request)
            raise httpx.RemoteProtocolError("connection dropped", request=request)
        headers = dict(reply.headers)
        if reply.location is not None:
            headers["Location"] = f"{BASE}{reply.location}"
        headers = {k: self._expand(v) for k, v in headers.items()}
        if isinstance(reply.body, bytes):
            headers.setdefault("Content-Type", "application/json")
            return httpx.Response(reply.code, content=reply.body, headers=headers)
        if reply.body is None:
            return httpx.Response(reply.code, headers=headers)
        return httpx.Response(reply.code, json=reply.body, headers=headers)

    def _expand(self, value: str) -> str:
        """``date+N``: an IMF-fixdate N seconds after the answer."""
        if value.startswith("date+"):
            at = self.clock.now() + timedelta(seconds=float(value[5:]))
            return format_datetime(at, usegmt=True)
        return value

    def hits(self, endpoint: str | None = None, since: int = 0) -> list[Hit]:
        return [h for h in self.log[since:] if endpoint in (None, h.endpoint)]


# --- kills: a step stopped at a chosen point ----------------------------------------


class Killed(BaseException):
    """The driver was stopped here (like ``kill -9``: nothing after it runs)."""


@dataclass
class Kill:
    """Stop the driver at its *at*-th request: ``reserved`` (counted, persisted, not
    sent) or ``answered`` (sent and answered, the answer not yet recorded)."""

    at: int
    where: str


LEARNED_KEY = "oracle-learned"
"""The schedule key of a world on the learned schedule."""


def seed_history(store: Store, key: str, jobs: int = 25) -> None:
    """*jobs* finished operations under *key* (2 to 50 s long, more than the cold
    start's minimum), written through *store* as any finished operation is, so a
    learned-schedule operation plans from them."""
    began = datetime(2025, 1, 1, tzinfo=UTC)
    for i in range(jobs):
        ended = began + timedelta(seconds=2.0 + 2.0 * i)
        record = Record(
            contract=Contract(
                operation_id=f"history-{i}",
                profile=parse_profile(INLINE, name="oracle"),
                policy=Policy(schedule_key=key),
                created_at=began,
            ),
            submission=SubmissionPart(status_url=f"{BASE}/history/{i}"),
            schedule=Schedule(deadline_at=began + timedelta(hours=1), next_poll_at=began),
        )
        created = store.create(record, [])
        store.save(
            created.evolve(
                ending=created.ending.evolve(
                    phase=Phase.DONE, outcome=OutcomeKind.SUCCEEDED, finished_at=ended
                ),
                answer=created.answer.evolve(
                    pending_seen_at=ended - timedelta(seconds=1), ended_seen_at=ended
                ),
            ),
            [],
        )


# --- the world: one operation, one provider, one store ------------------------------


@dataclass
class Decided:
    option: str
    at: datetime
    log_at: int
    """How many requests the provider had received when it was decided."""
    resuming: bool
    checks: int = 0


RESUMING = frozenset(
    {"extend", "as_requested", "cancel", "treat_as_pending", "resume_with_credentials",
     "resume_with_profile", "fetch_result_again"}
)  # fmt: skip


class World:
    """One operation waited on through the public API, and everything the oracle
    needs to judge it. Every method is one step; :meth:`check` runs after each."""

    POLICY: ClassVar[Policy] = Policy(
        deadline_s=120, max_requests=6, max_transport_failures=2, max_rate_limited=2,
        base_delay_s=1, max_delay_s=8, request_timeout_s=10, not_found_grace_s=5,
        lease_s=5,
    )  # fmt: skip
    """The policy of a world that is given none."""

    def __init__(
        self,
        store: Store,
        *,
        variant: str = "inline",
        via_submit: bool = False,
        policy: Policy | None = None,
        seed: int = 7,
        clock: FakeClock | None = None,
    ) -> None:
        self.store = store
        self.variant = variant
        self.inline = variant == "inline"
        self.table = INLINE if self.inline else FETCHED
        self.via_submit = via_submit
        self.clock = clock or FakeClock()
        self.provider = Provider(self.clock)
        self.client = httpx.Client(transport=httpx.MockTransport(self.provider))
        self.rng = random.Random(seed)
        self.policy = policy or World.POLICY
        self.profile = parse_profile(self.table, name="oracle")
        self.result_url = None if self.inline else f"{BASE}{RESULT_PATH}"
        self.submission = Submission(
            method="POST",
            url=SUBMIT_URL,
            profile=self.profile,
            policy=self.policy,
            body=b'{"job": 1}',
            result_url=self.result_url,
            max_submit_attempts=1,
        )
        self.kill: Kill | None = None
        self.sends = 0
        self.kills_before_send = 0
        self.lost_kinds: list[str] = []
        self.decisions: list[Decided] = []
        self.cancels: list[Decided] = []
        """Every cancel a person asked for (a decision or ``waitbound.cancel``)."""
        self.acts: list[Decided] = []
        """Every decision and ``waitbound cancel`` accepted, in order."""
        self.completions: list[Completion] = []
        self.finished_events_allowed = 1
        self.started = False
        self.credential = "key-1"
        if not via_submit:
            waitbound.start(
                Operation(
                    status_url=f"{BASE}{FIRST_STATUS}",
                    job_id=JOB,  # the caller knows its job: another job's answer is foreign
                    profile=self.profile,
                    policy=self.policy,
                    result_url=self.result_url,
                ),
                operation_id=OP,
                store=store,
                clock=self.clock,
                callback=True,
            )
            self.started = True

    # --- the driver under a kill plan -----------------------------------------------

    @contextmanager
    def _inline_sends(self) -> Iterator[None]:
        """Requests are carried out inline on virtual time (never a real-time timeout),
        and the kill plan stops the driver where it says."""

        def send(
            client: httpx.Client,
            request: Request,
            *,
            headers: Mapping[str, str],
            profile: waitbound.Profile,
            clock: FakeClock,
            content: bytes | None = None,
            settings: waitbound.HttpSettings = waitbound.HttpSettings(),  # noqa: B008
            secrets: Sequence[str] = (),
            fence: Fence | None = None,
            sleep: Callable[[float], object] = self.clock.sleep,
        ) -> Observation:
            self.sends += 1
            kill = self.kill
            if kill is not None and kill.at == self.sends and kill.where == "reserved":
                self.kill = None
                self.kills_before_send += 1
                self.lost_kinds.append(request.kind)
                raise Killed
            exchange = _exchange._Exchange(
                request, headers, profile, clock, settings,
                secrets=secrets, fence=fence, sleep=sleep,
            )  # fmt: skip
            logged = len(self.provider.log)
            observed = _http._exchange_sync(client, exchange, content)
            if kill is not None and kill.at == self.sends and kill.where == "answered":
                self.kill = None
                if len(self.provider.log) > logged:
                    self.provider.log[-1].lost = True
                self.lost_kinds.append(request.kind)
                raise Killed
            return observed

        with mock.patch("waitbound._engine._interpreters.send_sync", send):
            yield

    def _common(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "client": self.client,
            "clock": self.clock,
            "sleep": self.clock.sleep,
            "rng": self.rng,
        }

    def drive(
        self,
        status: Sequence[Reply] = (),
        result: Sequence[Reply] = (),
        cancel: Sequence[Reply] = (),
        submit: Sequence[Reply] = (),
        kill: Kill | None = None,
    ) -> Record:
        """``waitbound wait`` (``run`` for a submission) with these replies next."""
        for name, replies in (("status", status), ("result", result), ("cancel", cancel),
                              ("submit", submit)):  # fmt: skip
            if replies:
                self.provider.scripts[name] = list(replies)
        self.sends = 0
        self.kill = kill
        before = self._begin()
        try:
            with self._inline_sends():
                if self.via_submit:
                    waitbound.run(
                        self.submission, operation_id=OP, on_complete=self._completed,
                        **self._common(),
                    )  # fmt: skip
                else:
                    waitbound.wait(operation_id=OP, on_complete=self._completed, **self._common())
        except Killed:
            pass
        finally:
            self.kill = None
        self.started = True
        return self._end(before)

    def cancel(self, cancel: Sequence[Reply] = (), status: Sequence[Reply] = ()) -> Record | None:
        """``waitbound cancel``: refused (``None``), or the cancel and the wait after it."""
        if cancel:
            self.provider.scripts["cancel"] = list(cancel)
        if status:
            self.provider.scripts["status"] = list(status)
        record = self.record
        before = self._begin()
        # The options a person could act on now: a decision request past its due time is
        # closed as decision_timeout by the first look (waitbound cancel's included).
        request = record.decision_request
        offered = record.to_outcome().options if request and request.due_at > before.at else ()
        try:
            with self._inline_sends():
                waitbound.cancel(OP, reason="oracle", requested_by="ana", **self._common())
        except UsageError as exc:
            one_line(exc)
            refusal_is_offered_nowhere(offered, exc)
            after = self.record
            if request is not None and request.due_at <= before.at:
                # The one change a refusal may make: closing the expired decision
                # request as decision_timeout (a stopped operation's reason becomes
                # that; the outcome and counters stay).
                assert after.decision_request is None, "an expired request stayed open"
                assert after.outcome == record.outcome
                stopped = record.is_finished
                assert after.reason is (Reason.DECISION_TIMEOUT if stopped else record.reason)
                assert after.requests_used == record.requests_used
            else:
                assert after.version == record.version, "a refused cancel changed the record"
            self._end(before)
            return None
        if before.finished:
            # Accepted on a stopped operation: a person's decision of the cancel option,
            # with the default grant (at least one check, at most the policy's) and the
            # cancel's own requests on top; the operation was open again (the wait after
            # the cancel may have ended it already).
            after = self.record
            granted = after.max_requests - record.requests_used
            assert 1 <= granted <= self.policy.max_requests + 2, f"cancel: {granted} checks"
            assert after.grants.extensions == record.grants.extensions + 1
            decided = Decided("cancel", before.at, before.log, resuming=True, checks=granted)
            self.decisions.append(decided)
            self.finished_events_allowed += 1
        else:
            decided = Decided("cancel", before.at, before.log, resuming=False)
        self.cancels.append(decided)
        self.acts.append(decided)
        return self._end(before, decided=True)

    def look(self) -> Record:
        """``waitbound check``: one bounded look (at most one request)."""
        before = self._begin()
        with self._inline_sends():
            waitbound.check(
                OP, store=self.store, client=self.client, clock=self.clock, rng=self.rng
            )
        after = self._end(before)
        assert len(self.provider.log) - before.log <= 1, "a check sent more than one request"
        return after

    def escalations(self) -> Record:
        """``waitbound escalations``: lists open requests, closing the ones past due."""
        before = self._begin()
        waitbound.escalations(store=self.store, clock=self.clock)
        return self._end(before)

    def agent_asks(self, minutes: float, checks: int) -> bool:
        """An agent's ``request_extension``: a proposal a person sees; nothing changes
        but the open request (refused on a finished operation with nothing open)."""
        before = self._begin()
        record = self.record
        try:
            waitbound.request_extension(
                OP, minutes=minutes, checks=checks, why="transcode is slow", by="agent:mcp",
                store=self.store, clock=self.clock,
            )  # fmt: skip
        except UsageError as exc:
            one_line(exc)
            assert self.record.version == record.version, "a refused request changed it"
            self._end(before)
            return False
        after = self.record
        assert (after.deadline_at, after.max_requests, after.grants) == (
            record.deadline_at, record.max_requests, record.grants,
        ), "an agent's request extended something by itself"  # fmt: skip
        assert after.decision_request is not None
        self._end(before)
        return True

    def advance(self, seconds: float) -> None:
        """Time passes and nobody does anything."""
        self.clock.advance(seconds)

    def decide(
        self,
        option: str,
        *,
        minutes: float | None = None,
        checks: int | None = None,
        profile: bool = False,
        credential: bool = False,
    ) -> bool:
        """``waitbound decide``: whether the decision was accepted (refused: nothing
        changes, or the request is closed as past due)."""
        before = self._begin()
        record = self.record
        kwargs: dict[str, Any] = {"minutes": minutes, "checks": checks}
        if profile:
            kwargs["profile"] = corrected(self.table)
        if credential:
            self.credential = f"key-{len(self.decisions) + 2}"
            kwargs["credential_label"] = self.credential
        try:
            waitbound.decide(
                OP, option, why="oracle decides", by="ana", store=self.store, clock=self.clock,
                **kwargs,
            )  # fmt: skip
        except (UsageError, DecisionConflictError) as exc:
            one_line(exc)
            after = self.record
            expired = after.decisions and after.decisions[-1].option == "decision_timeout"
            assert after.version == record.version or expired, "a refused decision changed it"
            self._end(before)
            return False
        now = self.clock.now()
        after = self.record
        resuming = option in RESUMING
        granted = 0
        if resuming:
            granted = self._check_grant(
                record, after, option, now=now, minutes=minutes, checks=checks
            )
        decided = Decided(option, now, len(self.provider.log), resuming, granted)
        self.decisions.append(decided)
        self.acts.append(decided)
        if option == "cancel":
            self.cancels.append(decided)
        if resuming:
            self.finished_events_allowed += 1
        if option in ("mark_succeeded", "mark_failed"):
            kind = OutcomeKind.SUCCEEDED if option == "mark_succeeded" else OutcomeKind.FAILED
            assert after.outcome is kind
            assert after.decided_by == "ana"
        if option == "abandon":
            assert (after.outcome, after.reason) == (record.outcome, record.reason)
            assert after.decision_request is None
        self._end(before, decided=True)
        return True

    def _check_grant(
        self, record: Record, after: Record, option: str, *, now: datetime,
        minutes: float | None, checks: int | None,
    ) -> int:  # fmt: skip
        """A resuming grant took effect: due again, with exactly the checks granted (on a
        running operation, never fewer than it had) and a deadline no later than granted,
        and a window in which a request can be sent."""
        assert after.outcome is None, f"{option}: the operation is not due again"
        if option == "as_requested":  # exactly the agent's proposal (issue 33)
            asked = record.decision_request
            assert asked is not None
            assert asked.minutes is not None
            assert asked.checks is not None
            minutes, checks = asked.minutes, asked.checks
            assert after.deadline_at >= now + timedelta(minutes=minutes) - timedelta(seconds=1)
        if checks is None:  # the default grant: at least one check, at most the policy's
            checks = after.max_requests - record.requests_used
            assert 1 <= checks <= self.policy.max_requests, f"{option}: {checks} checks"
        wanted = record.requests_used + checks
        if not record.is_finished:  # an agent's request on a running one: never lowered
            wanted = max(wanted, record.max_requests)
        if option in ("cancel", "fetch_result_again"):
            # An action may carry the requests it needs on top (the cancel or the result
            # request, and a status request to learn how the job ended).
            assert wanted <= after.max_requests <= wanted + 2, f"{option}: {after.max_requests}"
            checks = after.max_requests - record.requests_used
        else:
            # The one result request still to fetch rides on top of the checks (issue
            # 33: a grant that sees the job succeed also fetches its result); never once
            # the result was fetched.
            on_top = 0 if record.result_fetched_at is not None else 1
            carried = record.requests_used + checks + on_top
            if not record.is_finished:
                carried = max(carried, record.max_requests)
            assert after.max_requests in (wanted, carried), (
                f"{option}: {after.max_requests}, not {wanted} (or {carried} with the result)"
            )
            checks += after.max_requests - wanted
        assert after.grants.extensions == record.grants.extensions + 1
        assert after.grants.extensions <= self.policy.max_extensions
        if minutes is not None:
            latest = max(record.deadline_at, now + timedelta(minutes=minutes))
            assert after.deadline_at <= latest + timedelta(seconds=1)
        grant_gives_time(option, (after.stop_at - now).total_seconds(), self.policy.floor_s)
        if option == "cancel":
            assert after.cancel_due
        return checks

    # --- bookkeeping around every step ---------------------------------------------

    @dataclass
    class _Before:
        at: datetime
        log: int
        stop_at: datetime | None
        finished: bool

    def _begin(self) -> World._Before:
        record = self.store.get(OP)
        return World._Before(
            at=self.clock.now(),
            log=len(self.provider.log),
            stop_at=record.stop_at if record else None,
            finished=bool(record and record.is_finished),
        )

    def _completed(self, completion: Completion) -> None:
        self.completions.append(completion)

    @property
    def record(self) -> Record:
        record = self.store.get(OP)
        assert record is not None
        return record

    def _end(self, before: World._Before, *, decided: bool = False) -> Record:
        record = self.store.get(OP)
        if record is None:  # nothing stored yet (a submission killed before it): fine
            assert not self.provider.log
            return Record(
                contract=Contract(
                    operation_id=OP,
                    profile=self.profile,
                    policy=self.policy,
                    created_at=self.clock.now(),
                ),
                submission=SubmissionPart(status_url=None),
                schedule=Schedule(deadline_at=self.clock.now(), next_poll_at=self.clock.now()),
            )
        new = self.provider.log[before.log :]
        if before.finished and not decided:
            assert not new, f"requests after the outcome: {[h.path for h in new]}"
        # A decision that reopened a stopped operation (``waitbound cancel`` of a timed_out
        # one records a person's cancel with its grant) bounds what follows by the granted
        # deadline; otherwise the deadline before the step does.
        stop_at = record.stop_at if decided and before.finished else before.stop_at
        if stop_at is not None:
            late = [h for h in new if h.sent_at >= stop_at]
            assert not late, f"sent at or after the deadline {stop_at}: {late}"
        check(self, record)
        return record


# --- the checks ---------------------------------------------------------------------


def one_line(exc: Exception) -> None:
    """A refusal is one line (never a traceback)."""
    assert "\n" not in str(exc), f"a refusal of more than one line: {exc!r}"


def grant_gives_time(option: str, window_s: float, floor_s: float) -> None:
    """An accepted grant leaves at least one request's floor before the deadline: a
    grant never costs one of ``max_extensions`` and gives nothing (issue 20)."""
    assert window_s >= floor_s, (
        f"{option} was granted a window of {window_s:g}s, less than one request's floor "
        f"({floor_s:g}s): a grant that gives nothing"
    )


def refusal_is_offered_nowhere(offered: Sequence[str], exc: Exception) -> None:
    """``waitbound cancel`` refuses only what no decision offers as ``cancel``."""
    assert "cancel" not in offered, (
        f"waitbound cancel refused ({exc}) an operation whose options list cancel"
    )


NOT_COMPLETE_WORDS = (
    "not complete",
    "not known to be complete",
    "without a terminal answer",
    "may still run",
    "may still be running",
)


def words(record: Record) -> str:
    """Everything the outcome says in words: its message and its error's detail."""
    return f"{record.to_outcome().message} {detail(record)}".lower()


def detail(record: Record) -> str:
    """Why the outcome is what it is, in words (the error's detail), lower-case."""
    found = record.error.get("detail") if isinstance(record.error, dict) else None
    return str(found or "").lower()


@dataclass
class Seen:
    """What the provider's log shows waitbound was told (answers it had to decide on)."""

    status: list[tuple[Hit, str]] = field(default_factory=list)
    result: list[Hit] = field(default_factory=list)
    cancel: list[Hit] = field(default_factory=list)
    submit: list[Hit] = field(default_factory=list)

    def said(self, *meanings: str) -> list[Hit]:
        return [h for h, m in self.status if m in meanings]

    @property
    def first_terminal(self) -> str | None:
        return next((m for _, m in self.status if m in TERMINAL), None)


def seen(world: World) -> Seen:
    found = Seen()
    for hit in world.provider.log:
        if not hit.processed:
            continue
        match hit.endpoint:
            case "status":
                reply = hit.reply if hit.delivered else Reply("timeout", None)
                found.status.append((hit, says(reply, inline=world.inline)))
            case "result":
                found.result.append(hit)
            case "cancel":
                found.cancel.append(hit)
            case _:
                found.submit.append(hit)
    return found


def hinted_minimum_s(reply: Reply, floor_s: float) -> float | None:
    """The least wait a status reply's hint demands by RFC 9110 §10.2.3 and the
    documented precedence (``retry-after-ms`` over ``Retry-After`` over a body hint), or
    ``None`` when it demands none the oracle can be sure of (no hint, a bad one, or one
    below the floor)."""
    headers = {name.lower(): value for name, value in reply.headers}
    body = reply.body if isinstance(reply.body, dict) else {}
    found: float | None = None
    if "retry-after-ms" in headers:
        found = float(headers["retry-after-ms"]) / 1000
    elif "retry-after" in headers:
        value = headers["retry-after"]
        if value.isdigit():
            found = float(value)
        elif value.startswith("date+"):
            found = float(value[5:]) - 1  # an HTTP-date has whole seconds
        else:
            return None  # unparsable or negative: ignored
    elif isinstance(body.get("poll_after"), int):
        found = float(body["poll_after"])
    return found if found is not None and found >= floor_s else None


def trouble(hit: Hit) -> bool:
    return not hit.delivered or (hit.reply.code or 0) >= 500


def check(world: World, record: Record) -> None:
    """Every invariant and every claim of the outcome, against the provider's log."""
    log = world.provider.log
    facts = seen(world)
    policy = world.policy
    # Counting: every request sent is counted, and the budgets plus grants hold.
    assert record.requests_used == len(log) + world.kills_before_send, (
        f"requests counted {record.requests_used}, sent {len(log)} "
        f"(+{world.kills_before_send} reserved then killed)"
    )
    granted = sum(d.checks for d in world.decisions if d.resuming)
    assert record.requests_used <= policy.max_requests + granted
    assert record.grants.extensions <= policy.max_extensions
    assert record.transport_failures_used <= record.max_transport_failures + 1
    assert record.rate_limited_used <= record.max_rate_limited + 1
    # The result is fetched at most once: nothing asked of it after it was delivered, and
    # a result request whose answer was lost is repeated only on a person's decision.
    delivered = [h for h in facts.result if result_ok(h.reply)]
    assert len(delivered) <= 1, "the result was delivered more than once"
    if delivered:
        assert not [h for h in log if h.endpoint == "result" and h.n > delivered[0].n]
    lost_results = [h for h in log if h.endpoint == "result" and h.lost]
    for lost in lost_results:
        again = [h for h in log if h.endpoint == "result" and h.n > lost.n]
        agreed = [d for d in world.decisions if d.option == "fetch_result_again"
                  and d.log_at >= lost.n]  # fmt: skip
        assert not again or agreed, "a lost result request was sent again without a decision"
    # Every status request goes to the polling URL the last pending answer named (a new
    # Location moves it; an answer waitbound never recorded moves nothing).
    expected = FIRST_STATUS
    for hit in log:
        if hit.endpoint != "status":
            continue
        assert hit.path == expected, f"#{hit.n} polled {hit.path}, the URL named is {expected}"
        moved = hit.processed and hit.delivered and hit.reply.location is not None
        if moved and says(hit.reply, inline=world.inline) == PENDING:
            expected = hit.reply.location or expected
    # Every status request waited at least what the last answer's hint demanded (unless
    # a person acted in between: a decision makes the operation due now).
    acted = [d.log_at for d in world.decisions + world.cancels]
    stopped_at = record.created_at + timedelta(seconds=policy.deadline_s)
    polled = [h for h, _ in facts.status]
    for first, then in pairwise(polled):
        minimum = hinted_minimum_s(first.reply, policy.floor_s) if first.delivered else None
        if minimum is None or any(first.n <= k < then.n for k in acted):
            continue
        assert first.answered_at is not None
        code = first.reply.code or 0
        reach = first.answered_at + timedelta(seconds=minimum)
        if 200 <= code < 300 and reach >= min(record.stop_at, stopped_at):
            continue  # guidance past the deadline is rejected, not obeyed (issue 33)
        waited = (then.sent_at - first.answered_at).total_seconds()
        assert waited >= minimum - 1e-3, f"#{then.n} came {waited:g}s after a {minimum:g}s hint"
    check_budget_pace(world, record)
    # Exactly one outcome; at most one completion owed and delivered.
    finished = [s for s in world.store.audit(OP) if s.event.kind == "finished"]
    assert len(finished) <= world.finished_events_allowed, "more outcomes than reopenings"
    assert (record.outcome is not None) == (record.phase.value == "done")
    owed = [e for e in world.store.outbox(operation_id=OP) if e.replay_of is None]
    assert len(owed) <= 1, f"{len(owed)} completions owed"
    assert len({c.delivery_id for c in world.completions}) <= 1
    assert len(world.completions) <= 1, "the completion was delivered twice"
    if record.is_final and world.completions:
        assert world.completions[0].outcome.outcome is record.outcome
    if record.outcome is None:
        return
    check_outcome(world, record, facts)


def check_budget_pace(world: World, record: Record) -> None:
    """The budget invariant (docs/waiting.md, *The plan*): every status request
    scheduled while waiting on the job (not a confirmation re-check) leaves the requests
    after it able to reach the stop: with R requests left and T seconds to the stop,
    the delay d is at least ``T - (R - 1 + 0.2) * max(cap, T / (R + 0.2))``. R is the
    whole budget left (the plan also keeps a reserve out, so it is stricter than this).
    Checked up to a person's first decision (a grant spreads over its own window)."""
    cap_s = record.policy.max_delay_s
    if record.push.webhook is not None:
        cap_s *= record.policy.backup_factor
    stop = record.deadline_at if not record.grants.extensions else None
    if stop is None:
        return
    if record.business_deadline_at is not None:
        stop = min(stop, record.business_deadline_at)
    for stored in world.store.audit(OP):
        event = stored.event
        if event.kind == "decided":
            return
        data = event.data
        if event.kind != "scheduled" or data.get("phase") != "waiting":
            continue
        if "confirming" in event.summary:
            continue
        left = int(str(data["max_requests"])) - int(str(data["requests_used"]))
        time_left_s = (stop - event.at).total_seconds()
        if left <= 0 or time_left_s <= 0:
            continue
        spacing = max(cap_s, time_left_s / (left + 0.2))
        bound = time_left_s - (left - 1 + 0.2) * spacing
        waited = (datetime.fromisoformat(str(data["next_poll_at"])) - event.at).total_seconds()
        assert waited >= bound - 1e-3, (
            f"status request scheduled {waited:g}s ahead with {left} requests left and "
            f"{time_left_s:g}s to the stop: the rest cannot cover it (at least {bound:g}s)"
        )


def check_outcome(world: World, record: Record, facts: Seen) -> None:
    """Each claim the outcome's kind, reason and words make is true of the log."""
    outcome, reason = record.outcome, record.reason
    said = words(record)
    person = record.decided_by is not None
    first = facts.first_terminal
    success = facts.said(SUCCEEDED)
    got_result = [h for h in facts.result if result_ok(h.reply)]
    story = f"{outcome} ({reason}): {said!r}; provider log: {_log(world)}"
    # A terminal success the provider reported is never called incomplete.
    if success and not person:
        for phrase in NOT_COMPLETE_WORDS:
            assert phrase not in said, f"after a success was seen it says {phrase!r}: {story}"
        assert outcome is not OutcomeKind.TIMED_OUT, f"a finished job timed out: {story}"
    match outcome:
        case OutcomeKind.SUCCEEDED if not person:
            assert success, f"succeeded without a success answer with its fields: {story}"
            if world.inline:
                assert record.result == OUTPUT, story
            else:
                assert got_result, f"succeeded without the result answer: {story}"
                if isinstance(got_result[0].reply.body, dict):
                    assert record.result == got_result[0].reply.body, story
        case OutcomeKind.COMPLETED_WITH_ERRORS:
            assert facts.said(PARTIAL), story
            if not world.inline:
                assert got_result, f"completed without the result answer: {story}"
        case OutcomeKind.FAILED if not person:
            refused_submit = [
                h for h in facts.submit if h.delivered and 400 <= (h.reply.code or 0) < 500
            ]
            assert facts.said(FAILED) or refused_submit, f"failed, never said: {story}"
        case OutcomeKind.CANCELED:
            assert facts.said(CANCELED), f"canceled, but the provider never said so: {story}"
        case OutcomeKind.EXPIRED:
            assert facts.said(EXPIRED), story
        case OutcomeKind.TIMED_OUT:
            assert first is None, f"timed out after the provider said {first}: {story}"
        case _:
            pass
    if first is not None and not person and outcome is not OutcomeKind.ESCALATED:
        expected = {SUCCEEDED: OutcomeKind.SUCCEEDED, PARTIAL: OutcomeKind.COMPLETED_WITH_ERRORS,
                    FAILED: OutcomeKind.FAILED, CANCELED: OutcomeKind.CANCELED,
                    EXPIRED: OutcomeKind.EXPIRED}[first]  # fmt: skip
        assert outcome is expected, f"the provider said {first} first: {story}"
    if outcome in (OutcomeKind.ESCALATED, OutcomeKind.TIMED_OUT) and reason is not None:
        assert _reason_is_true(world, record, facts, reason), f"untrue reason: {story}"
    _decisions_took_effect(world, record, facts, said, story)


def _reason_is_true(world: World, record: Record, facts: Seen, reason: Reason) -> bool:
    troubles = [h for h, m in facts.status if m == TROUBLE] + [
        h for h in facts.result + facts.submit if trouble(h)
    ]
    throttles = facts.said(THROTTLED) + [h for h in facts.result if h.reply.code == 429]
    match reason:
        case Reason.REQUEST_BUDGET_EXHAUSTED:
            return record.requests_used >= record.max_requests
        case Reason.PROVIDER_FAILURE:
            killed_submit = "submit" in world.lost_kinds
            unsent = [h for h in facts.submit if trouble(h)]  # never sent again without a key
            return len(troubles) > record.max_transport_failures or killed_submit or bool(unsent)
        case Reason.RATE_LIMITED:
            demanded = throttles + [h for h in troubles if h.reply.code == 503]
            return bool(demanded) or any(h.reply.code == 429 for h in facts.submit)
        case Reason.UNKNOWN_STATE:
            return bool(facts.said(UNKNOWN))
        case Reason.AUTHORIZATION_DENIED:
            return bool(facts.said(DENIED)) or any(
                h.reply.code in (401, 403) for h in facts.result + facts.submit
            )
        case Reason.CONTRADICTION:
            fetched_late = bool(facts.said(SUCCEEDED, PARTIAL)) and not world.inline
            doubtful = facts.said(BARE_SUCCESS, FOREIGN, NO_ENDING)
            return bool(doubtful) or fetched_late
        case Reason.INTEGRATION_FAILURE:
            odd = facts.said(INVISIBLE, UNREADABLE, UNEXPLAINED)
            bad_result = [h for h in facts.result if h.delivered and not result_ok(h.reply)
                          and h.reply.code not in (409, 425, 429)]  # fmt: skip
            bad_submit = [h for h in facts.submit if h.delivered]
            return bool(odd or bad_result or bad_submit)
        case Reason.RESULT_UNCONFIRMED:
            return "result" in world.lost_kinds
        case Reason.DEADLINE_EXCEEDED:
            finished = record.finished_at or world.clock.now()
            return finished >= record.deadline_at or "deadline" in words(record)
        case Reason.DECISION_TIMEOUT:
            return any(d.option == "decision_timeout" for d in record.decisions)
        case Reason.CANCEL_NOT_ACCEPTED:
            # A cancel was answered, not accepted; the status look after it (if any was
            # sent) did not show an end: only a job still running ends so (issue 33).
            if not facts.cancel:
                return False
            last = facts.cancel[-1]
            if last.delivered and 200 <= (last.reply.code or 0) < 300:
                return False
            after = [m for h, m in facts.status if h.n > last.n]
            return not any(m in TERMINAL for m in after[:1]) and "last seen null" not in words(
                record
            )
        case _:
            return True


def _decisions_took_effect(
    world: World, record: Record, facts: Seen, said: str, story: str
) -> None:
    """A person's cancel (or result fetch) was carried out, or the outcome says why not
    (in its detail: the options it lists are no explanation)."""
    said = detail(record)
    if record.decided_by is not None or record.outcome in (
        OutcomeKind.SUCCEEDED, OutcomeKind.COMPLETED_WITH_ERRORS, OutcomeKind.FAILED,
        OutcomeKind.CANCELED, OutcomeKind.EXPIRED,
    ):  # fmt: skip
        return
    story = f"{story}; detail: {said!r}"
    # Only what was asked since the last other reopening: an earlier outcome already
    # answered for what came before it.
    since = 0
    for index, act in enumerate(world.acts):
        if act.resuming and act.option != "cancel":
            since = index
    recent = world.acts[since:]
    for asked in [a for a in recent if a.option == "cancel"]:
        answers = [h for h in facts.cancel if h.n > asked.log_at]
        accepted = [h for h in answers if h.delivered and 200 <= (h.reply.code or 0) < 300]
        if not accepted or answers[-1] is not accepted[-1]:
            assert "cancel" in said, f"a person's cancel was not carried out, unsaid: {story}"
            continue
        polled = [h for h, _ in facts.status if h.n > accepted[-1].n]
        assert polled or "cancel" in said, (
            f"the provider accepted a person's cancel, nobody asked how the job ended, and "
            f"the outcome does not say: {story}"
        )
    for asked in recent:
        if asked.option == "fetch_result_again":
            fetched = [h for h in facts.result if h.n > asked.log_at]
            assert fetched or "result" in said, f"fetch_result_again not carried out: {story}"


def _log(world: World) -> str:
    return "; ".join(
        f"#{h.n} {h.method} {h.path} -> {h.reply.kind}{' (lost)' if h.lost else ''}"
        for h in world.provider.log
    )


# --- stores -------------------------------------------------------------------------


def sqlite_store(directory: Path) -> SQLiteStore:
    return SQLiteStore(directory / "oracle.db")


def memory_store() -> MemoryStore:
    return MemoryStore()
