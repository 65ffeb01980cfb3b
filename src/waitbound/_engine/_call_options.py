"""The keyword options every waiting call shares, as one value.

``wait``, ``submit``, ``run``, ``cancel``, ``check``, ``start`` (each sync and async),
the handles they return and the fan-in calls take the same keywords (*store*,
*headers*, *client*, *clock*, *sleep*, *rng*, *on_event*, *http*, *on_complete*,
*notify_secret*). Each public function keeps them as its own keywords (its signature is
the documentation) and builds one :class:`CallOptions` from them at once; from there on
that one value flows (to the handle it returns, to the interpreter that drives the
loop), so no internal signature repeats the list.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Generic, TypeVar

import httpx

from waitbound._base._clock import Clock
from waitbound._engine._driver import tools
from waitbound._engine._effects import Credentials, EventSink, Tools, _Send, _Sleep
from waitbound._engine._interpreters import run_async_effects, run_sync_effects
from waitbound._engine._outbox import OnComplete
from waitbound._model._observation import Observation
from waitbound._model._record import Record
from waitbound._profile._contract import Profile
from waitbound.stores import Store
from waitbound.transports import HttpSettings

__all__ = ["AsyncOptions", "CallOptions", "SyncOptions", "drive_async", "drive_sync"]

ClientT = TypeVar("ClientT", httpx.Client, httpx.AsyncClient)
SleepT = TypeVar("SleepT")

Steps = Generator[_Sleep | _Send, Observation | None, Record]
"""The shared loop (``_driver.loop``) as the interpreters take it."""


@dataclass(frozen=True, kw_only=True)  # no slots: SyncOptions(...) sets __orig_class__
class CallOptions(Generic[ClientT, SleepT]):
    """What a caller chose for one waiting call; see :func:`waitbound.wait` for each.

    *sleep* is required: the blocking calls default it to ``time.sleep``, the async ones
    to ``anyio.sleep`` (their ``None`` resolved when the value is built).
    """

    sleep: SleepT
    store: Store | None = None
    headers: Credentials | None = None
    client: ClientT | None = None
    clock: Clock | None = None
    rng: random.Random | None = None
    on_event: EventSink | None = None
    http: HttpSettings = HttpSettings()  # noqa: RUF009 - frozen value
    on_complete: OnComplete | None = None
    notify_secret: str | None = None

    def tools(self) -> Tools:
        """The store (the default one when none was given), clock, randomness, event
        sink and headers the loop is driven with."""
        return tools(self.store, self.clock, self.rng, self.on_event, self.headers)


SyncOptions = CallOptions[httpx.Client, Callable[[float], None]]
"""The options of a blocking call."""
AsyncOptions = CallOptions[httpx.AsyncClient, Callable[[float], Awaitable[object]]]
"""The options of an async call (anyio)."""


def drive_sync(
    options: SyncOptions,
    steps: Steps,
    kit: Tools,
    profile: Profile,
    sleep: Callable[[float], None] | None = None,
) -> Record:
    """Carry out *steps* with the options' client, sleep (or *sleep* instead) and HTTP
    settings, blocking."""
    return run_sync_effects(
        steps,
        kit,
        profile,
        client=options.client,
        sleep=sleep or options.sleep,
        http=options.http,
    )


async def drive_async(
    options: AsyncOptions,
    steps: Steps,
    kit: Tools,
    profile: Profile,
    sleep: Callable[[float], Awaitable[object]] | None = None,
) -> Record:
    """Carry out *steps* with the options' client, sleep (or *sleep* instead) and HTTP
    settings, without blocking the event loop."""
    return await run_async_effects(
        steps,
        kit,
        profile,
        client=options.client,
        sleep=sleep or options.sleep,
        http=options.http,
    )
