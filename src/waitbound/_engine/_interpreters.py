"""The interpreters of the driver's effects: blocking and async.

The loop (:func:`waitbound._engine._driver.loop`) and one request's exchange
(:func:`waitbound._engine._driver.exchange`) yield effects
(``waitbound._engine._effects``); the functions here carry them out, with a blocking
client and ``sleep`` or an async client and an async ``sleep``, and decide nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator

import httpx

from waitbound._base._errors import ConflictError
from waitbound._engine._effects import (
    Exchange,
    Tools,
    _Pause,
    _Persist,
    _Reread,
    _Send,
    _Sleep,
)
from waitbound._engine._tell import save_and_tell
from waitbound._model._observation import Observation
from waitbound._model._record import Record
from waitbound._observe._telemetry import sending
from waitbound._profile._contract import Profile
from waitbound._rules._controller import Transition
from waitbound.transports import (
    HttpSettings,
    borrow_async_client,
    borrow_client,
    send_async,
    send_sync,
)

__all__ = [
    "run_async_effects",
    "run_exchange_async",
    "run_exchange_sync",
    "run_sync_effects",
]


def run_sync_effects(
    loop: Generator[_Sleep | _Send, Observation | None, Record],
    tools: Tools,
    profile: Profile,
    *,
    client: httpx.Client | None,
    sleep: Callable[[float], None],
    http: HttpSettings,
) -> Record:
    """Carry out the loop's effects with a blocking client and ``sleep``.

    *client* ``None``: the process's shared client (``transports.shared_client``).
    Neither is closed here.
    """
    http_client = borrow_client(client)
    try:
        effect = next(loop)
        while True:
            match effect:
                case _Sleep(seconds=seconds):
                    sleep(seconds)
                    effect = loop.send(None)
                case _Send():
                    try:
                        observation = _send_sync(http_client, effect, tools, profile, http, sleep)
                    except Exception as exc:  # the loop records it on this operation
                        effect = loop.throw(exc)
                    else:
                        effect = loop.send(observation)
    except StopIteration as stop:
        record: Record = stop.value
        return record


async def run_async_effects(
    loop: Generator[_Sleep | _Send, Observation | None, Record],
    tools: Tools,
    profile: Profile,
    *,
    client: httpx.AsyncClient | None,
    sleep: Callable[[float], Awaitable[object]],
    http: HttpSettings,
) -> Record:
    """Carry out the loop's effects with an async client and an async ``sleep``.

    *client* ``None``: the running event loop's shared client (a client of this call's
    own, closed after, where the loop cannot be identified). *client* is never closed.
    """
    http_client, own_client = await borrow_async_client(client)
    try:
        effect = next(loop)
        while True:
            match effect:
                case _Sleep(seconds=seconds):
                    await sleep(seconds)
                    effect = loop.send(None)
                case _Send():
                    try:
                        observation = await _send_async(
                            http_client, effect, tools, profile, http, sleep
                        )
                    except Exception as exc:  # the loop records it on this operation
                        effect = loop.throw(exc)
                    else:
                        effect = loop.send(observation)
    except StopIteration as stop:
        record: Record = stop.value
        return record
    finally:
        if own_client:
            await http_client.aclose()


async def run_exchange_async(
    steps: Exchange,
    tools: Tools,
    profile: Profile,
    *,
    client: httpx.AsyncClient,
    http: HttpSettings,
    persist: Callable[[Transition], Awaitable[Record | ConflictError]],
    reread: Callable[[str], Awaitable[Record | None]],
    sleep: Callable[[float], Awaitable[object]],
) -> Record | None:
    """Carry out one :func:`exchange`'s effects: the request with an async client, the
    writes and reads with the caller's *persist* and *reread* (the worker's group commit
    and a read off the event loop), a pause with *sleep*. Returns what the exchange
    returns."""
    try:
        effect = next(steps)
        while True:
            match effect:
                case _Send():
                    try:
                        observation = await _send_async(client, effect, tools, profile, http, sleep)
                    except Exception as exc:  # the exchange records it on this operation
                        effect = steps.throw(exc)
                    else:
                        effect = steps.send(observation)
                case _Persist(transition=after):
                    effect = steps.send(await persist(after))
                case _Reread(operation_id=operation_id):
                    effect = steps.send(await reread(operation_id))
                case _Pause(seconds=seconds):
                    await sleep(seconds)
                    effect = steps.send(None)
    except StopIteration as stop:
        ended: Record | None = stop.value
        return ended


def run_exchange_sync(
    steps: Exchange,
    tools: Tools,
    profile: Profile,
    *,
    client: httpx.Client | None,
    http: HttpSettings,
    sleep: Callable[[float], None],
) -> Record | None:
    """Carry out one :func:`exchange`'s effects, blocking: the request with a blocking
    client (``None``: the process's shared one), the writes and reads on the store, a
    pause with *sleep*. Returns what the exchange returns (a group wait's step)."""
    http_client = borrow_client(client)
    try:
        effect = next(steps)
        while True:
            match effect:
                case _Send():
                    try:
                        observation = _send_sync(http_client, effect, tools, profile, http, sleep)
                    except Exception as exc:  # the exchange records it on this operation
                        effect = steps.throw(exc)
                    else:
                        effect = steps.send(observation)
                case _Persist(transition=after):
                    written: Record | ConflictError
                    try:
                        written = save_and_tell(
                            tools.store, after.record, after.events, tools.on_event
                        )
                    except ConflictError as exc:
                        written = exc
                    effect = steps.send(written)
                case _Reread(operation_id=operation_id):
                    effect = steps.send(tools.store.get(operation_id))
                case _Pause(seconds=seconds):
                    sleep(seconds)
                    effect = steps.send(None)
    except StopIteration as stop:
        ended: Record | None = stop.value
        return ended


async def _send_async(  # noqa: PLR0917 - the interpreters' one call
    client: httpx.AsyncClient,
    effect: _Send,
    tools: Tools,
    profile: Profile,
    http: HttpSettings,
    sleep: Callable[[float], Awaitable[object]],
) -> Observation:
    with sending(effect.record, effect.request, effect.headers, profile) as sent:
        observation = await send_async(
            client,
            effect.request,
            headers=sent.headers,
            content=effect.content,
            secrets=effect.secrets,
            profile=profile,
            clock=tools.clock,
            settings=http,
            fence=effect.fence,
            sleep=sleep,
        )
        sent.answered(observation)
    return observation


def _send_sync(  # noqa: PLR0917 - the interpreters' one call, as _send_async's
    client: httpx.Client,
    effect: _Send,
    tools: Tools,
    profile: Profile,
    http: HttpSettings,
    sleep: Callable[[float], None],
) -> Observation:
    with sending(effect.record, effect.request, effect.headers, profile) as sent:
        observation = send_sync(
            client,
            effect.request,
            headers=sent.headers,
            content=effect.content,
            secrets=effect.secrets,
            profile=profile,
            clock=tools.clock,
            settings=http,
            fence=effect.fence,
            sleep=sleep,
        )
        sent.answered(observation)
    return observation
