"""``notifications/tasks`` on ``subscriptions/listen`` streams (the Tasks extension).

The SDK's own ``subscriptions/listen`` handler keeps only the core filter fields, so
a client's ``taskIds`` would be dropped; :class:`TaskListener` serves the method
instead. A listen request naming ``taskIds`` (the request must declare the
extension, else ``-32021``) is acknowledged with the ids this server answers for (its
own providers' operations; others are left out, as if unknown), then gets each
task's current ``DetailedTask`` and, after that, a ``notifications/tasks`` whenever
the task changes: the same audit events ``waitbound serve`` streams at ``GET
/events`` (the store's change feed, :meth:`Store.audit_after`), read again a little
back in time so an event committed late is not missed. Each notification is what
``tasks/get`` would answer at that moment. The stream stays open until the client
closes it.

The other subscription kinds (list changes, resource updates) are not honored: the
tools, prompts and resource templates of this server never change.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, Final

import anyio
import anyio.to_thread
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import RequestParams
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST
from pydantic import BaseModel, ConfigDict

from waitbound._base._errors import WaitboundError
from waitbound.mcp._answers import Answer
from waitbound.mcp._labels import LABEL_PREFIX
from waitbound.mcp._principal import acting_for, principal_of_request
from waitbound.mcp._task_source import TaskSource
from waitbound.mcp._tasks import EXTENSION_ID
from waitbound.stores._protocol import AuditCursor, cursor_of

__all__ = ["MAX_LISTENERS", "MAX_TASK_IDS", "TaskListener"]

_log = logging.getLogger(__name__)

MAX_TASK_IDS: Final = 100
"""The most task ids one listen request may name."""
MAX_LISTENERS: Final = 32
"""``subscriptions/listen`` streams open at once, at most (each looks at the store
twice a second); one more is refused with a JSON-RPC error until one closes."""
_VOLATILE: Final = ("pollIntervalMs", "statusMessage")
"""Fields that change with time alone (a countdown), not with the task."""


class ListenParams(RequestParams):
    """``subscriptions/listen`` params, every field of the filter kept."""

    model_config = ConfigDict(extra="allow")
    notifications: Any = None


class _Notification(BaseModel):
    """A notification as the session sends it (``method`` and ``params``)."""

    method: str
    params: dict[str, Any]


def _same(a: Answer | None, b: Answer) -> bool:
    if a is None:
        return False
    return {k: v for k, v in a.items() if k not in _VOLATILE} == {
        k: v for k, v in b.items() if k not in _VOLATILE
    }


class TaskListener:
    """Serves ``subscriptions/listen`` with ``taskIds`` (see the module).

    Args:
        jobs: the tasks' source.
        poll_s: seconds between looks at the store's change feed when nothing in this
            process signalled a change.
        look_back_s: seconds of event time read again at each look.
        max_listeners: streams open at once, at most.
    """

    def __init__(
        self,
        jobs: TaskSource,
        *,
        poll_s: float = 0.5,
        look_back_s: float = 2.0,
        max_listeners: int = MAX_LISTENERS,
    ) -> None:
        self.jobs = jobs
        self.poll_s = poll_s
        self.look_back = timedelta(seconds=look_back_s)
        self.max_listeners = max_listeners
        self.listening = 0

    async def __call__(self, ctx: ServerRequestContext[Any, Any], params: ListenParams) -> Answer:
        if self.listening >= self.max_listeners:
            raise MCPError(
                INTERNAL_ERROR,
                f"{self.max_listeners} notification streams are open, the most this server "
                "serves at once; listen again later",
            )
        self.listening += 1
        try:
            return await self._listen(ctx, params)
        finally:
            self.listening -= 1

    async def _listen(self, ctx: ServerRequestContext[Any, Any], params: ListenParams) -> Answer:
        subscription = ctx.request_id
        if subscription is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        principal = principal_of_request(ctx.request)
        wanted = params.notifications if isinstance(params.notifications, dict) else {}
        asked = wanted.get("taskIds")
        honored: list[str] = []
        if asked is not None:
            require_client_extension(ctx, EXTENSION_ID)
            with acting_for(principal):
                honored = self._honored(asked)
        meta = {SUBSCRIPTION_ID_META_KEY: subscription}

        async def send(method: str, body: dict[str, Any]) -> None:
            note = _Notification(method=method, params=body | {"_meta": meta})
            await ctx.session.send_notification(note, related_request_id=subscription)  # type: ignore[arg-type]

        filtered = {"taskIds": honored} if asked is not None else {}
        await send("notifications/subscriptions/acknowledged", {"notifications": filtered})
        if not honored:
            await anyio.sleep_forever()
        with acting_for(principal):  # each notification is what its owner may read
            await self._stream(honored, send)
        return {}

    def _honored(self, asked: object) -> list[str]:
        if not isinstance(asked, list) or not all(isinstance(i, str) for i in asked):
            raise MCPError(INVALID_PARAMS, "notifications.taskIds must be a list of task ids")
        if len(asked) > MAX_TASK_IDS:
            raise MCPError(
                INVALID_PARAMS,
                f"notifications.taskIds names {len(asked)} tasks; at most {MAX_TASK_IDS}",
            )
        honored = []
        for task_id in dict.fromkeys(asked):
            try:
                self.jobs.task(task_id)
            except WaitboundError:
                continue  # unknown, malformed or another tenant's: not honored
            honored.append(task_id)
        return honored

    def _read(self, start: AuditCursor) -> list[Any]:
        return self.jobs.store.audit_after(start, label_prefix=LABEL_PREFIX)

    async def _stream(self, honored: list[str], send: Any) -> None:
        sent: dict[str, Answer] = {}
        newest: AuditCursor = (self.jobs.clock.now(), "", 0)
        recent: set[AuditCursor] = set()
        changed = set(honored)  # the current state first
        while True:
            for task_id in sorted(changed):
                try:
                    detailed = self.jobs.task(task_id)
                except WaitboundError as exc:
                    _log.warning("task notification skipped: %s", exc)
                    continue
                if not _same(sent.get(task_id), detailed):
                    sent[task_id] = detailed
                    await send("notifications/tasks", dict(detailed))
            wake = self.jobs.changed()
            with anyio.move_on_after(self.poll_s):
                await wake.wait()
            start: AuditCursor = (_before(newest[0], self.look_back), "", 0)
            try:
                events = await anyio.to_thread.run_sync(self._read, start)
            except Exception as exc:  # the stream is open: end it, the client listens again
                _log.warning("task notifications: the store failed: %s", type(exc).__name__)
                return
            changed = set()
            for stored in events:
                cursor = cursor_of(stored)
                if cursor in recent:
                    continue
                recent.add(cursor)
                newest = max(newest, cursor)
                if stored.operation_id in honored:
                    changed.add(stored.operation_id)
            horizon = _before(newest[0], self.look_back)
            recent = {c for c in recent if c[0] >= horizon}


def _before(when: datetime, window: timedelta) -> datetime:
    try:
        return when - window
    except OverflowError:
        return when
