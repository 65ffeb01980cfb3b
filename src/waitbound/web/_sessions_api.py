"""``/sessions``: an admin lists and revokes the inbox's sessions (JSON; the ``admin``
role, checked by ``BearerAuth``). The same as ``waitbound sessions``.

| endpoint | what |
| --- | --- |
| ``GET /sessions`` | ``{"sessions": [SESSION, …]}``, the open ones, newest first |
| ``POST /sessions/{id}/revoke`` | revoke one (its 12-character id) → ``{"revoked": [SESSION]}`` |
| ``POST /sessions/revoke-all`` | revoke every open one → ``{"revoked": [SESSION, …]}`` |

A SESSION is ``{"id", "who", "role", "via", "created_at", "last_seen_at",
"expires_at", "revoked_at"}`` (RFC 3339 times): never a secret.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from waitbound._base._errors import UsageError
from waitbound.web._session import Sessions

__all__ = ["session_routes"]


def session_routes(sessions: Sessions) -> list[BaseRoute]:
    """The routes of ``/sessions`` over *sessions*."""

    async def listing(request: Request) -> Response:
        """``GET /sessions``."""
        rows = await anyio.to_thread.run_sync(
            functools.partial(sessions.store.list_sessions, now=sessions.clock.now())
        )
        return JSONResponse({"sessions": [row.shown_json() for row in rows]})

    async def revoke(request: Request) -> Response:
        """``POST /sessions/{id}/revoke``."""
        shown = str(request.path_params["session_id"])
        now = sessions.clock.now()
        try:
            rows = await anyio.to_thread.run_sync(
                functools.partial(sessions.store.revoke_sessions, at=now, shown_id=shown)
            )
        except UsageError as exc:
            return JSONResponse({"error": "bad_session_id", "detail": str(exc)}, status_code=400)
        if not rows:
            return JSONResponse(
                {"error": "not_found", "detail": f"no open session {shown[:64]!r}"},
                status_code=404,
            )
        return JSONResponse({"revoked": [replace(r, revoked_at=now).shown_json() for r in rows]})

    async def revoke_all(request: Request) -> Response:
        """``POST /sessions/revoke-all``."""
        now = sessions.clock.now()
        rows = await anyio.to_thread.run_sync(
            functools.partial(sessions.store.revoke_sessions, at=now)
        )
        return JSONResponse({"revoked": [replace(r, revoked_at=now).shown_json() for r in rows]})

    return [
        Route("/sessions", listing, methods=["GET"]),
        Route("/sessions/revoke-all", revoke_all, methods=["POST"]),
        Route("/sessions/{session_id}/revoke", revoke, methods=["POST"]),
    ]
