"""Run ``waitbound serve``: uvicorn's server in the anyio event loop, and beside it in
the same process the worker (``waitbound.work``) and the inbox sweep.

The server speaks HTTP/1.1 with h11 (uvicorn's pure-Python parser, the one that caps a
request head's size) under the limits of ``waitbound.web._protocol``: a deadline for
each request's head and body, request heads of at most 64 KiB, a cap on open
connections, a short keep-alive and accept queue; no WebSocket upgrades.

Shutdown (SIGTERM, SIGINT, or *stop* set): the worker stops claiming and the steps in
flight finish and are persisted; open streams end at their next look at the store;
the server stops accepting, lets the answers in flight finish (at most
:data:`GRACEFUL_S` seconds) and closes; the inbox sweep in progress finishes. The
caller closes the store afterwards.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Final

import anyio
import anyio.to_thread
from starlette.routing import BaseRoute

from waitbound._engine._effects import Credentials
from waitbound._engine._group_commit import first_of
from waitbound._engine._inbox import sweep_inbox
from waitbound._engine._outbox import OnComplete
from waitbound._engine._worker import WorkerSettings, work
from waitbound._model._audit import AuditEvent
from waitbound.stores import Store
from waitbound.stores._inbox_retention import prune_inbox
from waitbound.stores._sessions import sessions_of
from waitbound.transports import HttpSettings
from waitbound.web._app import DEFAULT_PING_S, DEFAULT_POLL_S, create_app
from waitbound.web._auth import is_public
from waitbound.web._bounded import (
    GRACEFUL_S,
    bounded_server,
    budget_of,
    listen,
    run_beside,
    url_of,
)
from waitbound.web._hosts import allowed_hosts
from waitbound.web._inbound_commit import InboundCommit
from waitbound.web._protocol import Limits
from waitbound.web._service import Nudge, Service

__all__ = [
    "GRACEFUL_S",
    "PRUNE_EVERY_S",
    "SWEEP_EVERY_S",
    "SWEEP_LIMIT",
    "serve",
]

_LOG = logging.getLogger("waitbound.serve")

SWEEP_EVERY_S: Final = 1.0
"""The inbox sweep runs at least this often (seconds), and at once after a delivery."""
SESSIONS_KEPT_S: Final = 7 * 86400.0
"""How long an ended (revoked or expired) session stays listed (seconds)."""
PRUNE_EVERY_S: Final = 3600.0
"""The webhook inbox is pruned at start and then this often (seconds)."""
SWEEP_LIMIT: Final = 100
"""Deliveries one sweep applies at most (a full sweep is followed by another at once)."""


def worker_wake(store: Store, hinted: Nudge) -> Callable[[float], Awaitable[object]]:
    """What ends the worker's idle pause in ``serve``: the sweep applied webhook
    deliveries (*hinted*), or — on a store that has one, PostgreSQL — a wake-up from
    the store (``wait_for_wakeup``: a ``NOTIFY`` that any process made an operation due
    sooner), whichever comes first; as ``waitbound worker`` is woken."""
    listen: Callable[[float], Awaitable[object]] | None = getattr(store, "wait_for_wakeup", None)
    if listen is None:
        return hinted.wait

    async def wake(pause_s: float) -> None:
        await first_of(functools.partial(hinted.wait, pause_s), functools.partial(listen, pause_s))

    return wake


async def _sweep_inbox(
    service: Service,
    nudge: Nudge,
    stop: anyio.Event,
    rng: random.Random,
    every_s: float,
    *,
    applied_some: Callable[[], None],
) -> None:
    """Apply the inbox's matched deliveries: at once after a nudge, at least every
    *every_s* seconds, until *stop*."""
    sweep = functools.partial(
        sweep_inbox, service.store, clock=service.clock, rng=rng, limit=SWEEP_LIMIT
    )
    while not stop.is_set():
        applied = 0
        try:
            applied = await anyio.to_thread.run_sync(sweep)
        except Exception as exc:  # the store failed: try again at the next sweep
            _LOG.warning("inbox sweep: %s: %s", type(exc).__name__, exc)
        if applied:
            applied_some()  # the worker looks for the operations made due at once
        if applied >= SWEEP_LIMIT:
            continue
        await nudge.wait(every_s)


async def _prune_inbox(service: Service, stop: anyio.Event, every_s: float) -> None:
    """Delete the inbox's deliveries older than ``[inbox] retention_days`` that are done
    with, and the sessions that ended more than :data:`SESSIONS_KEPT_S` ago, at start and
    every *every_s* seconds until *stop*; report the inbox's counts in ``/healthz``
    (``inbox``)."""
    retention_s = service.config.inbox_retention_s
    while not stop.is_set():
        if retention_s is not None:
            before = service.clock.now() - timedelta(seconds=retention_s)
            try:
                counted = await anyio.to_thread.run_sync(
                    functools.partial(prune_inbox, service.store, before=before)
                )
            except Exception as exc:  # the store failed: try again at the next prune
                _LOG.warning("inbox prune: %s: %s", type(exc).__name__, exc)
            else:
                service.health["inbox"] = {
                    "kept": counted.kept,
                    "pruned": counted.pruned,
                    "retention_days": retention_s / 86400.0,
                    "pruned_at": service.clock.now().isoformat(),
                }
        try:  # sessions that ended a week ago are of no more use, even to a listing
            ended = service.clock.now() - timedelta(seconds=SESSIONS_KEPT_S)
            await anyio.to_thread.run_sync(
                functools.partial(sessions_of(service.store).prune_sessions, before=ended)
            )
        except Exception as exc:  # the store failed (or keeps no sessions): next time
            _LOG.warning("sessions prune: %s: %s", type(exc).__name__, exc)
        with anyio.move_on_after(every_s):
            await stop.wait()


async def serve(
    service: Service,
    host: str,
    port: int,
    *,
    worker: bool = True,
    worker_settings: WorkerSettings = WorkerSettings(),  # noqa: B008 - frozen value
    headers: Credentials | None = None,
    notify_secret: str | None = None,
    on_complete: OnComplete | None = None,
    on_listening: Callable[[str], None] | None = None,
    on_event: Callable[[AuditEvent], None] | None = None,
    http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
    stop: anyio.Event | None = None,
    handle_signals: bool = True,
    poll_s: float = DEFAULT_POLL_S,
    ping_s: float = DEFAULT_PING_S,
    audit_key: bytes | None = None,
    sweep_every_s: float = SWEEP_EVERY_S,
    rng: random.Random | None = None,
    limits: Limits = Limits(),  # noqa: B008 - frozen value
    prune_every_s: float = PRUNE_EVERY_S,
    routes: Sequence[BaseRoute] = (),
    public: Callable[[str], bool] = is_public,
) -> None:
    """Serve *service* on *host*:*port* until a signal (or *stop*), with the worker
    and the inbox sweep in the same event loop.

    Args:
        service: the store, configuration, clock and token; its ``delivered`` is made
            a :class:`Nudge` (calling the one given too) that wakes the sweep.
        host, port: where to listen (port 0: any free port; *on_listening* says which).
        worker: drive the store's due operations as ``waitbound worker`` does.
        worker_settings, headers, http, on_event: for the worker, as in
            :func:`waitbound.work`.
        notify_secret: signs completion webhooks (``[notify] secret``).
        on_complete: called with each completion on the ``callback`` channel.
        on_listening: called with ``http://HOST:PORT`` once the server accepts.
        stop: set it to shut down (as a signal does).
        handle_signals: shut down on SIGTERM/SIGINT (only in the main thread).
        poll_s, ping_s, audit_key: for the application (see ``create_app``).
        sweep_every_s: the longest pause between inbox sweeps (seconds).
        rng: for the sweep's jitter.
        limits: what one client may take: deadlines for a request's head and body,
            open connections at most (see ``waitbound.web._protocol``).
        prune_every_s: seconds between prunes of the webhook inbox (``[inbox]
            retention_days`` of the config; at start too).
        routes, public: more routes (``/metrics``), and which paths need no token (see
            ``create_app``).

    Raises:
        UsageError: the address cannot be bound.
        WaitboundError: the worker failed (after the rest shut down).
    """
    current = service.delivered
    nudge = current if isinstance(current, Nudge) else Nudge(then=current)
    inbound = InboundCommit(worker_settings.commit_pause_s)  # the worker's pause
    service = replace(service, delivered=nudge, inbound=inbound)
    service.stopping.clear()  # a service served again streams again
    cap, budget = budget_of(limits)
    app = create_app(
        service,
        poll_s=poll_s,
        ping_s=ping_s,
        audit_key=audit_key,
        budget=budget,
        hosts=allowed_hosts(host, service.config.allowed_hosts),
        routes=routes,
        public=public,
    )
    sock = listen(host, port)
    url = url_of(sock)
    server = bounded_server(app, limits, cap, budget)
    stop = stop or anyio.Event()
    hinted = Nudge()  # the sweep applied deliveries: the worker looks for due work at once

    async def drive() -> None:
        await work(
            service.store,
            settings=worker_settings,
            headers=headers,
            clock=service.clock,
            on_event=on_event,
            stop=stop,
            http=http,
            notify_secret=notify_secret,
            on_complete=on_complete,
            wake=worker_wake(service.store, hinted),
        )

    async def prune() -> None:
        await _prune_inbox(service, stop, prune_every_s)

    async def sweep() -> None:
        await _sweep_inbox(
            service, nudge, stop, rng or random.Random(), sweep_every_s, applied_some=hinted
        )

    def stopping() -> None:
        service.stopping.set()
        nudge()

    try:
        await run_beside(
            server,
            [sock],
            [sweep, prune, *([drive] if worker else [])],
            stop=stop,
            on_listening=None if on_listening is None else lambda: on_listening(url),
            on_stop=stopping,
            handle_signals=handle_signals,
        )
    finally:
        sock.close()
