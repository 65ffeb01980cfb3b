"""The Starlette application of ``waitbound serve``: the receiver, the operation
endpoints, the SSE streams and the inbox's pages (``_pages.py``), behind the bearer
token or a signed-in person's session, with the security headers on every answer.

Every answer that is not a stream or a page is JSON. Bad input is a 4xx
``{"error": "<code>", "detail": "<one line>"}``; a store failure is 503; anything
unexpected is 500 with the same shape and no traceback text (the server's log has it).
See ``docs/serve.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Final

import anyio.to_thread
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from waitbound._base._errors import StoreError, UsageError
from waitbound._base._json import JSON
from waitbound._model._audit import StoredAuditEvent
from waitbound._model._record import Record
from waitbound._story import chain_status, printable
from waitbound._story import operation_document as build_document
from waitbound.stores import Store
from waitbound.stores._groups import groups_of
from waitbound.stores._protocol import AuditCursor
from waitbound.web._auth import BearerAuth, is_page, is_public
from waitbound.web._budget import BudgetGuard, ConnectionBudget
from waitbound.web._events import (
    Allowed,
    many_events,
    operation_events,
    parse_many_id,
    parse_seq,
    parse_time,
)
from waitbound.web._hosts import HostGuard
from waitbound.web._inbound import receive_webhook
from waitbound.web._pages import page_routes, problem_page
from waitbound.web._security import SECURITY_HEADERS, SecurityHeaders
from waitbound.web._service import Service
from waitbound.web._session import Sessions, principal_of
from waitbound.web._sessions_api import session_routes

__all__ = ["DEFAULT_PING_S", "DEFAULT_POLL_S", "create_app", "operation_document", "problem"]

_LOG = logging.getLogger("waitbound.serve")

DEFAULT_POLL_S: Final = 0.25
"""How often an open stream looks at the store (seconds)."""
DEFAULT_PING_S: Final = 15.0
"""How often an open stream sends a comment line, so proxies keep it open (seconds)."""
SESSION_RECHECK_S: Final = 1.0
"""How often a stream held open by a signed-in session checks that the session is still
open (seconds): a revoked or expired session's stream ends within about this long."""


def problem(status: int, error: str, detail: str, **headers: str) -> JSONResponse:
    """A JSON error answer: ``{"error": error, "detail": detail}`` (one line)."""
    line = " ".join(detail.split())
    return JSONResponse({"error": error, "detail": line}, status_code=status, headers=headers)


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def operation_document(
    record: Record,
    events: Sequence[StoredAuditEvent],
    key: bytes | None = None,
    groups: Sequence[str] = (),
) -> dict[str, JSON]:
    """The operation as ``waitbound show --json`` prints it (one builder for both,
    :func:`waitbound._story.operation_document`); the audit chain's finding line is
    served unescaped, as this endpoint always has (``chain_status``'s *escaped*)."""
    chain = chain_status(record, events, key, escaped=False)
    return build_document(record, events, chain, groups)


def _not_found(operation_id: str) -> JSONResponse:
    return problem(404, "not_found", f"no operation with id {operation_id[:128]!r} in the store")


async def healthz(request: Request) -> Response:
    """``GET /healthz``: the process answers (no token), with what the background work
    last reported (``inbox``: the webhook inbox's counts after its last prune)."""
    return JSONResponse({"ok": True, **_service(request).health})


def _read(store: Store, operation_id: str) -> tuple[Record | None, list[StoredAuditEvent]]:
    record = store.get(operation_id)
    return record, store.audit(operation_id) if record is not None else []


def _group_ids(store: Store, operation_id: str) -> list[str]:
    """The ids of the groups *operation_id* is a member of (none for a store kind that
    keeps no groups)."""
    try:
        return [row.group_id for row in groups_of(store).groups_of_operation(operation_id)]
    except UsageError:
        return []


def _operation_endpoint(key: bytes | None) -> Callable[[Request], object]:
    async def operation(request: Request) -> Response:
        """``GET /operations/{operation_id}``: the operation as ``show --json`` prints it."""
        operation_id = request.path_params["operation_id"]
        if not operation_id.isprintable():  # no operation has such an id: ask no store
            return _not_found(operation_id)
        record, events = await anyio.to_thread.run_sync(
            _read, _service(request).store, operation_id
        )
        if record is None:
            return _not_found(operation_id)
        groups = await anyio.to_thread.run_sync(_group_ids, _service(request).store, operation_id)
        return JSONResponse(operation_document(record, events, key, groups))

    return operation


def session_still_open(request: Request, sessions: Sessions, poll_s: float) -> Allowed | None:
    """For a stream a signed-in session opened: a check, asked at each look, that the
    session is still open (read from the store about every :data:`SESSION_RECHECK_S`);
    ``None`` for a bearer token's or a proxy user's stream (nothing to end)."""
    principal = principal_of(request.scope)
    session = principal.session if principal is not None else None
    if session is None:
        return None
    every = max(1, round(SESSION_RECHECK_S / poll_s))
    looks = 0

    async def allowed() -> bool:
        nonlocal looks
        looks += 1
        if looks % every:
            return True
        try:
            return await anyio.to_thread.run_sync(sessions.still_open, session)
        except Exception as exc:  # the store failed: end the stream, the client resumes
            _LOG.warning("a stream's session check failed: %s", type(exc).__name__)
            return False

    return allowed


def _stream_endpoints(
    poll_s: float, ping_s: float, sessions: Sessions
) -> tuple[Callable[[Request], object], Callable[[Request], object]]:
    async def one(request: Request) -> Response:
        """``GET /operations/{operation_id}/events``: the operation's audit events."""
        service = _service(request)
        operation_id = request.path_params["operation_id"]
        if not operation_id.isprintable():  # no operation has such an id: ask no store
            return _not_found(operation_id)
        try:
            after = parse_seq(request.headers.get("last-event-id"))
        except UsageError as exc:
            return problem(400, "bad_last_event_id", str(exc))
        record = await anyio.to_thread.run_sync(service.store.get, operation_id)
        if record is None:
            return _not_found(operation_id)
        stream = operation_events(
            service.store,
            operation_id,
            after_seq=after,
            poll_s=poll_s,
            stopping=service.stopping,
            allowed=session_still_open(request, sessions, poll_s),
        )
        return EventSourceResponse(stream, ping=ping_s)

    async def many(request: Request) -> Response:
        """``GET /events?label=PREFIX&since=RFC3339``: every (matching) operation's audit
        events (after ``Last-Event-ID``, else stamped at or after ``since``)."""
        service = _service(request)
        try:
            after = parse_many_id(request.headers.get("last-event-id"))
        except UsageError as exc:
            return problem(400, "bad_last_event_id", str(exc))
        if after is None and request.query_params.get("since"):
            try:
                after = _since(request.query_params["since"])
            except UsageError as exc:
                return problem(400, "bad_since", str(exc))
        label = request.query_params.get("label", "")
        if not label.isprintable():
            return problem(400, "bad_label", "label must be printable text (a label's prefix)")
        stream = many_events(
            service.store,
            label_prefix=label,
            after=after,
            poll_s=poll_s,
            stopping=service.stopping,
            allowed=session_still_open(request, sessions, poll_s),
        )
        return EventSourceResponse(stream, ping=ping_s)

    return one, many


def _since(text: str) -> AuditCursor:
    """The cursor just before every event stamped at or after *text* (RFC 3339 with a
    UTC offset).

    Raises:
        UsageError: not such a time.
    """
    at = parse_time(text.strip()[:64])
    if at is None:
        raise UsageError(
            f"since {text[:40]!r} is not an RFC 3339 time with a UTC offset within years "
            "1-9999 (e.g. 2026-01-01T12:00:00+00:00)"
        )
    return (at, "", 0)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
    return problem(exc.status_code, code, str(exc.detail), **(exc.headers or {}))


async def _store_error(request: Request, exc: Exception) -> Response:
    _LOG.error("%s %r: the store failed: %s", request.method, request.url.path, printable(str(exc)))
    if is_page(request.url.path):
        return problem_page(request, 503, "The store failed", "try again in a moment")
    return problem(503, "store_unavailable", "the store failed; try again later")


async def _unexpected(request: Request, exc: Exception) -> Response:
    """A 500 (Starlette answers it outside every middleware: the security headers are
    added here)."""
    _LOG.error("%s %r: unexpected %s", request.method, request.url.path, type(exc).__name__)
    response: Response = problem(
        500, "internal", "an unexpected error; the service's log has the details"
    )
    if is_page(request.url.path):
        try:
            response = problem_page(
                request, 500, "Something went wrong", "the service's log has the details"
            )
        except Exception:  # the page cannot be drawn either: the JSON answer stands
            _LOG.error("%s %r: the error page failed too", request.method, request.url.path)
    response.headers.update(SECURITY_HEADERS)
    return response


def create_app(
    service: Service,
    *,
    poll_s: float = DEFAULT_POLL_S,
    ping_s: float = DEFAULT_PING_S,
    audit_key: bytes | None = None,
    routes: Sequence[BaseRoute] = (),
    public: Callable[[str], bool] = is_public,
    sessions: Sessions | None = None,
    budget: ConnectionBudget | None = None,
    hosts: frozenset[str] | None = None,
) -> Starlette:
    """The application of ``waitbound serve`` over *service* (``app.state.service``).

    Args:
        service: the store, configuration, clock and token.
        poll_s: seconds between a stream's looks at the store.
        ping_s: seconds between a stream's keep-alive comments (0: none).
        audit_key: checks each chain head's MAC in ``GET /operations/{id}``.
        routes: more routes (pages of later features), behind the token too unless
            *public* says otherwise.
        public: which paths need no token (default: ``/healthz``, the receiver, the
            sign-in page and the static files).
        sessions: the inbox's sessions (default: kept in the service's store, on its
            clock).
        budget: the connection budget (the reserve, the stream cap; default: no limit
            but the default stream cap); see ``waitbound.web._budget``.
        hosts: the ``Host`` names answered (``None``: any); any other is ``400
            unknown_host`` before anything else (``waitbound.web._hosts``).

    Returns:
        The Starlette application (serve it with uvicorn; see ``waitbound.web._run``).
    """
    sessions = sessions or Sessions(service.store, clock=service.clock)
    one, many = _stream_endpoints(poll_s, ping_s, sessions)
    app = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/webhooks/{provider}", receive_webhook, methods=["POST"]),
            Route("/events", many, methods=["GET"]),
            Route("/operations/{operation_id}", _operation_endpoint(audit_key), methods=["GET"]),
            Route("/operations/{operation_id}/events", one, methods=["GET"]),
            *page_routes(sessions=sessions, audit_key=audit_key),
            *session_routes(sessions),
            *routes,
        ],
        middleware=[
            Middleware(SecurityHeaders),
            *([Middleware(HostGuard, hosts=hosts)] if hosts is not None else []),
            Middleware(
                BearerAuth,
                holders=service.holders,
                public=public,
                sessions=sessions,
                proxy=service.config.proxy,
            ),
            Middleware(BudgetGuard, budget=budget or ConnectionBudget(general=1 << 30)),
        ],
        exception_handlers={
            HTTPException: _http_error,
            StoreError: _store_error,
            Exception: _unexpected,
        },
    )
    app.state.service = service
    return app
