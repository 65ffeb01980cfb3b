"""``POST /webhooks/{provider}``: the webhook receiver.

integrator: a placeholder so the service runs in this worktree; the receiver helper's
module replaces this file whole.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["receive_webhook"]


async def receive_webhook(request: Request) -> Response:
    """Answer 501: the receiver is not built into this service yet."""
    return JSONResponse(
        {"error": "not_implemented", "detail": "the webhook receiver is not available yet"},
        status_code=501,
    )
