"""The inbox: the pages of ``waitbound serve`` for people. Server-rendered HTML
(Jinja2, ``web/templates``), thin over the public API: ``waitbound.escalations`` and
``waitbound.decide``, the store's ``recent``, ``audit``, ``outbox`` and ``inbox``, and
the audit chain's check. See ``docs/inbox.md``.

| page | what |
| --- | --- |
| ``GET /`` | Needs a decision: every open decision request, newest first |
| ``GET /in-flight`` | In flight (``?label=PREFIX&provider=NAME``; ``fragment=rows``: rows) |
| ``GET /finished`` | Finished: recent outcomes (``?label=&provider=&outcome=``) |
| ``GET /operation/{id}`` | One operation (``?option=NAME``: the form that decides it) |
| ``POST /operation/{id}/decide`` | a decision → 303 to the operation; someone was first: 409 |
| ``GET``/``POST /sign-in``, ``POST /sign-out`` | the session (``web/_session.py``) |

Every page works without JavaScript; ``/static/live.js`` only keeps In flight and an
operation's story up to date over ``GET /events`` (SSE). Every form carries the
session's CSRF token.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final
from urllib.parse import quote

import anyio.to_thread
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from waitbound._base._errors import (
    DecisionConflictError,
    OperationNotFoundError,
    ProfileError,
    UsageError,
)
from waitbound._base._numbers import parse_integer, parse_number
from waitbound._engine._escalations import SCAN_LIMIT, Escalation, decide_async, escalations
from waitbound._model._outcome import OutcomeKind
from waitbound._model._record import Record
from waitbound._rules._decisions import MAX_WHY_CHARS
from waitbound._story import chain_status, printable
from waitbound.profiles import builtin_names, builtin_profile
from waitbound.stores._groups import groups_of
from waitbound.web._forms import (
    DECIDE_MAX_BYTES,
    SIGN_IN_MAX_BYTES,
    SIGN_OUT_MAX_BYTES,
    FormRefused,
    read_form,
)
from waitbound.web._service import Service
from waitbound.web._session import (
    BASE_KEY,
    Principal,
    Sessions,
    check_name,
    local_path,
    principal_of,
)
from waitbound.web._tokens import SHARED_MARK, match_token
from waitbound.web._views import (
    OperationView,
    decision_view,
    finished_row,
    in_flight_row,
    is_option,
    operation_view,
)

__all__ = [
    "FINISHED_LIMIT",
    "IN_FLIGHT_LIMIT",
    "LIVE_LOOK_BACK_S",
    "Nav",
    "page_routes",
    "problem_page",
    "templates",
]

IN_FLIGHT_LIMIT: Final = 1000
"""The most operations In flight lists (the newest; the count says how many there are)."""
FINISHED_LIMIT: Final = 200
"""The most outcomes Finished lists (the most recently finished)."""
LIVE_LOOK_BACK_S: Final = 2.0
"""How far before the page was read its live stream starts (seconds): an event stamped
just before the read but committed after it still arrives."""
DELIVERIES_LIMIT: Final = 50
"""The most deliveries of each direction the One operation page lists."""
_MAX_FILTER_CHARS: Final = 200

_ENV: Final = Environment(
    loader=PackageLoader("waitbound.web", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["seg"] = lambda value: quote(str(value), safe="")
"""``{{ id|seg }}``: a value as one path segment."""


def templates() -> Environment:
    """The inbox's Jinja2 environment (autoescaping on, undefined names an error)."""
    return _ENV


@dataclass(frozen=True, slots=True, kw_only=True)
class Nav:
    """The navigation's counts (``None``: not read for this page) and where we are."""

    current: str = ""
    decisions: int | None = None
    in_flight: int | None = None


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _render(
    request: Request,
    template: str,
    *,
    status: int = 200,
    nav: Nav | None = None,
    headers: Mapping[str, str] | None = None,
    **context: Any,
) -> HTMLResponse:
    principal = principal_of(request.scope)
    person = principal is not None and principal.via != "bearer"
    html = _ENV.get_template(template).render(
        nav=nav or Nav(),
        principal=principal,
        signed_in_as=principal.who if principal is not None and person else None,
        signed_in_via=principal.via if principal is not None else None,
        csrf=(principal.csrf or "") if principal is not None else "",
        base=principal.base if principal is not None else "",
        **context,
    )
    return HTMLResponse(
        html, status_code=status, headers={"Cache-Control": "no-store", **(headers or {})}
    )


def problem_page(request: Request, status: int, title: str, detail: str) -> HTMLResponse:
    """An error as a page: *title* and one line of *detail*."""
    return _render(
        request, "problem.html", status=status, title=title, detail=" ".join(detail.split())
    )


def _filter(request: Request, name: str) -> str:
    return request.query_params.get(name, "").strip()[:_MAX_FILTER_CHARS]


def _unprintable_filter(request: Request, *values: str) -> HTMLResponse | None:
    """A 400 page when a filter is not printable text (no label or profile name is; a
    store may refuse it), else ``None``."""
    if all(value.isprintable() for value in values):
        return None
    return problem_page(request, 400, "No such filter", "a filter is printable text")


def _open_requests(records: list[Record], now: datetime) -> int:
    """How many of *records* have a decision request open at *now* (as
    :func:`waitbound.escalations` would list them)."""
    return sum(
        1
        for record in records
        if record.decision_request is not None and now < record.decision_request.due_at
    )


def _matches(record: Record, label: str, provider: str) -> bool:
    return (record.label or "").startswith(label) and (
        not provider or record.profile.name == provider
    )


async def decisions_page(request: Request) -> Response:
    """``GET /``: Needs a decision."""
    service = _service(request)

    def read() -> tuple[list[Escalation], int]:
        found = escalations(store=service.store, clock=service.clock)
        count, _ = service.store.pending_summary()
        return found, count

    found, in_flight = await anyio.to_thread.run_sync(read)
    now = service.clock.now()
    return _render(
        request,
        "decisions.html",
        nav=Nav(current="decisions", decisions=len(found), in_flight=in_flight),
        decisions=[decision_view(escalation, now) for escalation in found],
    )


def _scan(service: Service) -> tuple[list[Record], bool]:
    """The newest :data:`SCAN_LIMIT` records, and whether that is every record."""
    records = service.store.recent(limit=SCAN_LIMIT)
    return records, len(records) < SCAN_LIMIT


async def in_flight_page(request: Request) -> Response:
    """``GET /in-flight``: every operation without an outcome, newest first."""
    service = _service(request)
    label, provider = _filter(request, "label"), _filter(request, "provider")
    if (refused := _unprintable_filter(request, label, provider)) is not None:
        return refused

    def read() -> tuple[list[Record], int, int]:
        records, complete = _scan(service)
        decisions = _open_requests(records, service.clock.now())
        if complete:
            running = [r for r in records if not r.is_finished]
            total = len(running)
        else:
            running = service.store.recent(
                label_prefix=label, open_only=True, limit=IN_FLIGHT_LIMIT
            )
            total = service.store.pending_summary()[0]
        return running, total, decisions

    running, total, decisions = await anyio.to_thread.run_sync(read)
    now = service.clock.now()
    providers = sorted({r.profile.name for r in running} | ({provider} if provider else set()))
    shown = [r for r in running if _matches(r, label, provider)][:IN_FLIGHT_LIMIT]
    rows = [in_flight_row(record, now) for record in shown]
    if request.query_params.get("fragment") == "rows":
        return _render(request, "_in_flight_rows.html", rows=rows)
    since = (now - timedelta(seconds=LIVE_LOOK_BACK_S)).isoformat()
    return _render(
        request,
        "in_flight.html",
        nav=Nav(current="in-flight", decisions=decisions, in_flight=total),
        rows=rows,
        label=label,
        provider=provider,
        providers=providers,
        limit=IN_FLIGHT_LIMIT,
        since=since,
    )


async def finished_page(request: Request) -> Response:
    """``GET /finished``: recent outcomes, the most recently finished first."""
    service = _service(request)
    label, provider = _filter(request, "label"), _filter(request, "provider")
    if (refused := _unprintable_filter(request, label, provider)) is not None:
        return refused
    outcome = _filter(request, "outcome")
    kinds = [kind.value for kind in OutcomeKind]
    if outcome and outcome not in kinds:
        return problem_page(
            request, 400, "No such outcome", f"outcome must be one of {', '.join(kinds)}"
        )

    def read() -> tuple[list[Record], int, int]:
        records, complete = _scan(service)
        decisions = _open_requests(records, service.clock.now())
        total = (
            sum(1 for r in records if not r.is_finished)
            if complete
            else service.store.pending_summary()[0]
        )
        if label and not complete:
            records = service.store.recent(label_prefix=label, limit=SCAN_LIMIT)
        return [r for r in records if r.is_finished], total, decisions

    done, total, decisions = await anyio.to_thread.run_sync(read)
    now = service.clock.now()
    providers = sorted({r.profile.name for r in done} | ({provider} if provider else set()))
    shown = [
        r for r in done if _matches(r, label, provider) and (not outcome or r.outcome == outcome)
    ]
    shown.sort(key=lambda r: r.finished_at or r.created_at, reverse=True)
    return _render(
        request,
        "finished.html",
        nav=Nav(current="finished", decisions=decisions, in_flight=total),
        rows=[finished_row(record, now) for record in shown[:FINISHED_LIMIT]],
        label=label,
        provider=provider,
        outcome=outcome,
        providers=providers,
        outcomes=kinds,
        limit=FINISHED_LIMIT,
    )


def _read_operation(
    service: Service, operation_id: str, audit_key: bytes | None
) -> OperationView | None:
    record = service.store.get(operation_id)
    if record is None:
        return None
    events = service.store.audit(operation_id)
    chain, _ = chain_status(record, events, audit_key)
    outbox = service.store.outbox(operation_id=operation_id, limit=DELIVERIES_LIMIT)
    inbox = service.store.inbox(operation_id=operation_id, limit=DELIVERIES_LIMIT)
    return operation_view(record, events, chain, outbox, inbox, service.clock.now())


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupView:
    """A group the operation is a member of, and its members' states (for the page)."""

    group_id: str
    kind: str
    state: str
    reason: str | None
    requests: str
    members: tuple[tuple[str, str], ...]


def _read_groups(service: Service, operation_id: str) -> list[GroupView]:
    """The groups (``wait_all`` / ``wait_any``) the operation is a member of."""
    try:
        rows = groups_of(service.store).groups_of_operation(operation_id)
    except UsageError:  # a store kind that keeps no groups
        return []
    views = []
    for row in rows:
        members = []
        for member in row.members:
            record = service.store.get(member)
            state = "not in the store"
            if record is not None:
                state = record.outcome.value if record.outcome else record.phase.value
            members.append((member, state))
        budget = f" of {row.max_requests}" if row.max_requests is not None else ""
        views.append(
            GroupView(
                group_id=row.group_id,
                kind=row.kind,
                state=row.state,
                reason=row.reason,
                requests=f"{row.requests_used}{budget}",
                members=tuple(members),
            )
        )
    return views


def _not_found(request: Request, operation_id: str) -> HTMLResponse:
    return problem_page(
        request,
        404,
        "No such operation",
        f"there is no operation with id {printable(operation_id[:128])!r} in the store",
    )


class _Operation:
    """The One operation page and its decision form, with the audit key that checks
    the chain's head."""

    def __init__(self, audit_key: bytes | None) -> None:
        self.audit_key = audit_key

    async def page(self, request: Request) -> Response:
        """``GET /operation/{operation_id}``."""
        return await self.show(request, request.query_params.get("option", "").strip())

    async def show(
        self,
        request: Request,
        option: str,
        *,
        status: int = 200,
        error: str | None = None,
        form: Mapping[str, str] | None = None,
    ) -> Response:
        """The page, with the form that decides *option* when it is one of the open
        ones (and *error* said above it)."""
        service = _service(request)
        operation_id = request.path_params["operation_id"]
        if not operation_id.isprintable():  # no operation has such an id: ask no store
            return _not_found(request, operation_id)
        view = await anyio.to_thread.run_sync(
            _read_operation, service, operation_id, self.audit_key
        )
        if view is None:
            return _not_found(request, operation_id)
        if request.query_params.get("fragment") == "story":
            after = _int(request.query_params.get("after")) or 0
            return _render(
                request, "_story_rows.html", rows=[r for r in view.story if r.seq > after]
            )
        groups = await anyio.to_thread.run_sync(_read_groups, service, operation_id)
        choices = view.open_request.choices if view.open_request else ()
        chosen = next((c for c in choices if c.option == option), None)
        notice = None
        if option and chosen is None:
            notice = f"{option[:40]!r} is not one of the options open on this operation now"
        return _render(
            request,
            "operation.html",
            status=status,
            nav=Nav(),
            op=view,
            groups=groups,
            chosen=chosen,
            notice=notice,
            error=error,
            form=form or {},
            profiles=builtin_names(),
        )

    async def decide(self, request: Request) -> Response:
        """``POST /operation/{operation_id}/decide``: a person's decision."""
        service = _service(request)
        operation_id = request.path_params["operation_id"]
        if not operation_id.isprintable():  # no operation has such an id: ask no store
            return _not_found(request, operation_id)
        principal = principal_of(request.scope) or Principal()
        try:
            form = await read_form(request, DECIDE_MAX_BYTES)
        except FormRefused as exc:
            return _refused(request, exc)
        if not principal.csrf_ok(form.get("csrf")):
            return problem_page(
                request,
                403,
                "This form has expired",
                "the form's CSRF token is missing or not your session's: reload the page "
                "and decide again. Nothing was changed.",
            )
        option = form.get("option", "").strip()
        if not is_option(option):
            return problem_page(
                request, 400, "No such option", "choose one of the options the page offers"
            )
        try:
            why, minutes, checks, by = _decision_fields(form, principal)
            profile_name = form.get("profile", "").strip()
            profile = builtin_profile(profile_name) if profile_name else None
        except (UsageError, ProfileError) as exc:
            return await self.show(request, option, status=400, error=str(exc), form=form)
        try:
            await decide_async(
                operation_id,
                option,
                why=why,
                by=by,
                minutes=minutes,
                checks=checks,
                profile=profile,
                credential_label=form.get("credential_label", "").strip() or None,
                store=service.store,
                clock=service.clock,
            )
        except DecisionConflictError as exc:
            return await self._conflict(request, exc)
        except OperationNotFoundError:
            return _not_found(request, operation_id)
        except UsageError as exc:
            return await self.show(request, option, status=400, error=str(exc), form=form)
        target = f"{principal.base}/operation/{quote(operation_id, safe='')}#decisions"
        return RedirectResponse(target, status_code=303)

    async def back(self, request: Request) -> Response:
        """``GET /operation/{operation_id}/decide`` (a reload of a refused form's page):
        303 to the operation."""
        operation_id = request.path_params["operation_id"]
        base = request.scope.get(BASE_KEY, "")
        return RedirectResponse(f"{base}/operation/{quote(operation_id, safe='')}", status_code=303)

    async def _conflict(self, request: Request, exc: DecisionConflictError) -> Response:
        service = _service(request)
        view = await anyio.to_thread.run_sync(
            _read_operation, service, exc.operation_id, self.audit_key
        )
        first = view.decisions[-1] if view is not None and view.decisions else None
        return _render(request, "conflict.html", status=409, op=view, first=first, error=exc)


def _refused(request: Request, exc: FormRefused) -> HTMLResponse:
    """The page of a form body that was not read (nothing was changed)."""
    return problem_page(
        request, exc.status, "This form was not read", f"{exc.detail}; nothing was changed"
    )


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None and text.strip() else None
    except ValueError:
        return None


def _decision_fields(
    form: Mapping[str, str], principal: Principal
) -> tuple[str, float | None, int | None, str]:
    """``why``, ``minutes``, ``checks`` and who decides, checked.

    Raises:
        UsageError: a blank or multi-line ``why``, a grant that is not a number.
    """
    why = form.get("why", "").strip()
    if not why:
        raise UsageError("say why (it is kept in the audit log); nothing was decided")
    if len(why) > MAX_WHY_CHARS or not why.isprintable():
        raise UsageError(f"the reason is one line of at most {MAX_WHY_CHARS} characters")
    minutes: float | None = None
    text = form.get("minutes", "").strip()
    if text:
        try:
            minutes = parse_number(text)
        except ValueError as exc:
            raise UsageError(f"minutes must be a number: {exc}") from None
        if minutes <= 0:
            raise UsageError("minutes must be a positive number")
    checks: int | None = None
    text = form.get("checks", "").strip()
    if text:
        try:
            checks = parse_integer(text)
        except ValueError as exc:
            raise UsageError(f"checks must be a whole number of at least 1: {exc}") from None
        if checks < 1:
            raise UsageError(f"checks must be a whole number of at least 1, got {text[:20]!r}")
    by = principal.name
    if principal.via == "bearer" and principal.shared and form.get("by", "").strip():
        problem = check_name(form["by"])
        if problem is not None:
            raise UsageError(f"by: {problem}")
        by = form["by"].strip() + SHARED_MARK  # typed, not proven: marked so
    return why, minutes, checks, by


async def sign_in_page(request: Request) -> Response:
    """``GET /sign-in``: the form."""
    return _sign_in(request, next_path=local_path(request.query_params.get("next")))


def _sign_in(
    request: Request,
    *,
    next_path: str,
    status: int = 200,
    error: str | None = None,
    name: str = "",
) -> HTMLResponse:
    return _render(
        request,
        "sign_in.html",
        status=status,
        next_path=next_path,
        error=error,
        name=name,
    )


class _SignIn:
    """Sign in and out with a token of the token file; sessions kept in the store."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions

    async def sign_in(self, request: Request) -> Response:
        """``POST /sign-in``: a token (and, with the shared token, a name) → a session:
        its cookie, 303 to ``next`` under the session's prefix."""
        try:
            form = await read_form(request, SIGN_IN_MAX_BYTES)
        except FormRefused as exc:
            return _refused(request, exc)
        next_path = local_path(form.get("next"))
        name = form.get("name", "")
        token = form.get("token", "").strip()
        holder = match_token(token, _service(request).holders) if token else None
        if holder is None:
            return _sign_in(
                request,
                next_path=next_path,
                status=401,
                error="that is not one of the service's tokens (see the token file of "
                "waitbound serve)",
                name=name.strip(),
            )
        if holder.name is None:
            problem = check_name(name)
            if problem is not None:
                return _sign_in(
                    request, next_path=next_path, status=400, error=problem, name=name.strip()
                )
            who, via = name.strip() + SHARED_MARK, "shared token"
        else:
            who, via = holder.name, f"token {holder.name}"
        session, value = await anyio.to_thread.run_sync(
            functools.partial(self.sessions.issue, who, role=holder.role, via=via)
        )
        cookie = self.sessions.cookie(value, session.base, secure=request.url.scheme == "https")
        return RedirectResponse(
            session.base + next_path, status_code=303, headers={"Set-Cookie": cookie}
        )

    async def sign_out(self, request: Request) -> Response:
        """``POST /sign-out``: revoke the session (with its CSRF token) → 303 to sign-in."""
        principal = principal_of(request.scope) or Principal()
        try:
            form = await read_form(request, SIGN_OUT_MAX_BYTES)
        except FormRefused as exc:
            return _refused(request, exc)
        if not principal.csrf_ok(form.get("csrf")):
            return problem_page(
                request,
                403,
                "This form has expired",
                "the form's CSRF token is missing or not your session's: reload the page "
                "and sign out again",
            )
        secure = request.url.scheme == "https"
        headers = {}
        if principal.session is not None:
            await anyio.to_thread.run_sync(self.sessions.revoke, principal.session)
            headers["Set-Cookie"] = self.sessions.cleared(principal.session.base, secure=secure)
        return RedirectResponse("/sign-in", status_code=303, headers=headers)


def page_routes(*, sessions: Sessions, audit_key: bytes | None = None) -> list[BaseRoute]:
    """The inbox's routes (behind ``BearerAuth`` with *sessions*, see ``create_app``).

    Args:
        sessions: issues and reads the session cookie (``SESSION_COOKIE``).
        audit_key: checks each chain head's MAC on the One operation page.
    """
    operation = _Operation(audit_key)
    signing = _SignIn(sessions)
    return [
        Route("/", decisions_page, methods=["GET"]),
        Route("/in-flight", in_flight_page, methods=["GET"]),
        Route("/finished", finished_page, methods=["GET"]),
        Route("/operation/{operation_id}", operation.page, methods=["GET"]),
        Route("/operation/{operation_id}/decide", operation.decide, methods=["POST"]),
        Route("/operation/{operation_id}/decide", operation.back, methods=["GET"]),
        Route("/sign-in", sign_in_page, methods=["GET"]),
        Route("/sign-in", signing.sign_in, methods=["POST"]),
        Route("/sign-out", signing.sign_out, methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("waitbound.web", "static")]), name="static"),
    ]
