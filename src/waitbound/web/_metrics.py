"""``GET /metrics``: the Prometheus text exposition of waitbound's metrics
(``waitbound serve --metrics``; see ``docs/operations.md``).

The OpenTelemetry Prometheus reader turns the same OpenTelemetry instruments every
other exporter reads into ``prometheus_client`` metrics; this endpoint renders that
registry. The text is built off the event loop (a collection reads the store's gauges).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["metrics_route"]


def metrics_route(collect: Callable[[], bytes], content_type: str) -> Route:
    """The ``GET /metrics`` route answering *collect*'s text as *content_type*."""

    async def metrics(request: Request) -> Response:
        body = await anyio.to_thread.run_sync(collect)
        return Response(body, media_type=content_type)

    return Route("/metrics", metrics, methods=["GET"])
