"""What every part of ``waitbound serve`` shares: the store, the configuration, the
clock, the token, and the signals between the parts (a delivery was stored; the
service is stopping). Kept at ``app.state.service``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

import anyio
import anyio.from_thread
import anyio.lowlevel

from waitbound._base._clock import Clock
from waitbound._base._json import JSON
from waitbound._model._push import InboundDelivery
from waitbound.stores import Store
from waitbound.web._config import ServeConfig, redaction_strings
from waitbound.web._inbound_commit import InboundCommit
from waitbound.web._tokens import ADMIN, Holder

__all__ = ["Nudge", "Service"]


class Nudge:
    """A callable that wakes one waiter: "a new delivery was stored, sweep the inbox".

    Calling it (from the event loop or from any thread) marks it pending and wakes a
    task blocked in :meth:`wait`; a call while nobody waits is not lost (the next
    :meth:`wait` returns at once). Many calls before one wait count as one.

    Args:
        then: called with each delivery too (a test's recorder, say).
    """

    def __init__(self, then: Callable[[InboundDelivery], None] | None = None) -> None:
        self._then = then
        self._lock = threading.Lock()
        self._pending = False
        self._event: anyio.Event | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._thread: int | None = None

    def __call__(self, delivery: InboundDelivery | None = None) -> None:
        """Mark the nudge pending and wake the waiter (*delivery* is passed to ``then``)."""
        with self._lock:
            self._pending = True
            event, token, thread = self._event, self._token, self._thread
        if event is not None:
            if thread == threading.get_ident():
                event.set()
            elif token is not None:
                with suppress(anyio.RunFinishedError):  # the loop is gone: nobody waits
                    anyio.from_thread.run_sync(event.set, token=token)
        if self._then is not None and delivery is not None:
            self._then(delivery)

    async def wait(self, timeout_s: float) -> bool:
        """Wait until nudged, at most *timeout_s* seconds; consume the nudge.

        Returns:
            Whether it was nudged (``False``: the time ran out first).
        """
        with self._lock:
            if not self._pending:
                self._event = anyio.Event()
                self._token = anyio.lowlevel.current_token()
                self._thread = threading.get_ident()
            event = self._event if not self._pending else None
        if event is not None:
            with anyio.move_on_after(timeout_s):
                await event.wait()
        with self._lock:
            nudged, self._pending, self._event = self._pending, False, None
        return nudged


@dataclass(frozen=True, slots=True, kw_only=True)
class Service:
    """The state of one ``waitbound serve`` process (``app.state.service``).

    Attributes:
        store: the store every endpoint and the background work use.
        config: what ``serve.toml`` says (receivers, the notify secret).
        clock: the time the receiver checks signatures against and sweeps use.
        token: the shared bearer token (when *holders* is empty, the only one);
            never logged or shown.
        delivered: the receiver calls it once a new delivery is stored (the nudge
            that runs the inbox sweep at once); ``waitbound.web.serve`` makes it a
            :class:`Nudge` it waits on.
        stopping: set when the service shuts down; streams end at their next look.
        secrets: every secret value the service holds, as the strings the receiver
            replaces by ``[redacted]`` in a delivery before anything of it is stored or
            audited (see :func:`~waitbound.web._config.redaction_strings`). Built once,
            here: the token, every receiver's secrets and ``[notify] secret`` always;
            give the others it holds — the worker's credential header values
            (:func:`waitbound._base._secrets.credential_values`), a notify secret from the
            environment — and they are added.
        holders: the token file's tokens with their owners and roles (empty: *token*
            alone, as the shared token of an ``admin``); see ``web/_tokens.py``.
        health: what ``/healthz`` says besides ``ok`` (the background work writes it,
            e.g. ``inbox``: the last prune's counts), never read from the store per
            request.
        inbound: the webhook receiver's group commit (its commit pause: ``waitbound
            serve --commit-pause``, as the worker's).
    """

    store: Store
    config: ServeConfig
    clock: Clock
    token: str = field(repr=False)
    delivered: Callable[[InboundDelivery], None] = field(default_factory=Nudge)
    stopping: threading.Event = field(default_factory=threading.Event)
    secrets: tuple[str, ...] = field(default=(), repr=False)
    holders: tuple[Holder, ...] = field(default=(), repr=False)
    health: dict[str, JSON] = field(default_factory=dict)
    inbound: InboundCommit = field(default_factory=InboundCommit, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.holders:  # one token: the shared one, an admin
            shared = Holder(name=None, role=ADMIN, token=self.token)
            object.__setattr__(self, "holders", (shared,))
        tokens = [holder.token for holder in self.holders]
        held = redaction_strings([self.token, *tokens, *self.config.secrets, *self.secrets])
        object.__setattr__(self, "secrets", held)  # frozen: built once, at start
