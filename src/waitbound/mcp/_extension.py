"""The Tasks extension (``io.modelcontextprotocol/tasks``) on the SDK's extension API.

:class:`TasksExtension` is a thin protocol front over :class:`~waitbound.mcp.Jobs`:

- a ``tools/call`` interceptor: ``start_job`` and ``await_job`` answer with a
  ``CreateTaskResult`` (``resultType: "task"``) when, and only when, the request
  itself declares the extension in its ``_meta`` client capabilities at a protocol
  version the extension is specified for; the operation is in the store before the
  answer leaves (a ``tasks/get`` for it resolves at once, on any server process of
  the same store). Every other call is answered as it always was.
- ``tasks/get``, ``tasks/update``, ``tasks/cancel`` (JSON-RPC errors: ``-32602``
  for an unknown, malformed or foreign task id and for bad ``inputResponses``,
  ``-32021`` when the request does not declare the extension).

The specification: the extension's ``specification/draft/tasks.md`` (SEP-2663).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, RequestParams
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import ConfigDict, Field

from waitbound._base._errors import OperationNotFoundError, UsageError, WaitboundError
from waitbound.mcp._answers import Answer, scrub
from waitbound.mcp._principal import acting_for, principal_of_request
from waitbound.mcp._task_source import TaskSource
from waitbound.mcp._tasks import EXTENSION_ID, TASK_PROTOCOL_VERSIONS, TASK_TOOLS

__all__ = ["TasksExtension", "declares_tasks"]

_T = TypeVar("_T")
_log = logging.getLogger(__name__)

MAX_ERROR_CHARS: Final = 500
_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
_TASK_FIELDS: Final = (
    "taskId",
    "status",
    "statusMessage",
    "createdAt",
    "lastUpdatedAt",
    "ttlMs",
    "pollIntervalMs",
)
"""The ``Task`` fields a ``CreateTaskResult`` carries (no result, no input requests)."""


class _TaskParams(RequestParams):
    """``tasks/get`` and ``tasks/cancel`` params: ``taskId`` (checked by the handler,
    so a wrong shape is one clear line, not a validation report)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    task_id: Any = Field(default=None, alias="taskId")


class _UpdateParams(_TaskParams):
    """``tasks/update`` params: ``taskId`` and ``inputResponses``."""

    input_responses: Any = Field(default=None, alias="inputResponses")


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether *this request* declares the extension: its ``_meta`` client
    capabilities name it (an empty object) at a version the extension is specified
    for. Declarations on earlier requests do not count."""
    if ctx.protocol_version not in TASK_PROTOCOL_VERSIONS:
        return False
    meta: Any = ctx.meta or (ctx.params or {}).get("_meta") or {}
    capabilities = meta.get(_CAPABILITIES_KEY) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    declared = extensions.get(EXTENSION_ID) if isinstance(extensions, dict) else None
    return isinstance(declared, dict)


def _invalid(message: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message[:MAX_ERROR_CHARS])


def _task_id(raw: object) -> str:
    if not isinstance(raw, str) or not 0 < len(raw) <= 128:
        raise _invalid("taskId must be the task id a tools/call returned (1-128 characters)")
    return raw


class TasksExtension(Extension):
    """The Tasks extension over *jobs* (see the module)."""

    identifier = EXTENSION_ID

    def __init__(self, jobs: TaskSource) -> None:
        self.jobs = jobs
        self._secrets = jobs.config.secrets()

    def methods(self) -> Sequence[MethodBinding]:
        """``tasks/get``, ``tasks/update`` and ``tasks/cancel``, at the versions the
        specification names."""
        return [
            MethodBinding("tasks/get", _TaskParams, self._get, TASK_PROTOCOL_VERSIONS),
            MethodBinding("tasks/update", _UpdateParams, self._update, TASK_PROTOCOL_VERSIONS),
            MethodBinding("tasks/cancel", _TaskParams, self._cancel, TASK_PROTOCOL_VERSIONS),
        ]

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """A task handle for ``start_job`` and ``await_job`` when this request declares
        the extension; every other call (and a tool error) as without it."""
        if params.name not in TASK_TOOLS or not declares_tasks(ctx):
            return await call_next(ctx)
        with acting_for(principal_of_request(ctx.request)):
            return await self._task_call(params, ctx, call_next)

    async def _task_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name == "await_job":
            asked = (params.arguments or {}).get("operation_id")
            try:
                return self._created(await self.jobs.task_now(asked))  # type: ignore[arg-type]
            except WaitboundError:
                return await call_next(ctx)  # today's tool error, word for word
        answered = await call_next(ctx)
        content = getattr(answered, "structured_content", None)
        if getattr(answered, "is_error", False) or not isinstance(content, dict):
            return answered
        operation_id = str(content["operation_id"])
        return await self._guarded(lambda: _now(self._created(self.jobs.task(operation_id))))

    @staticmethod
    def _created(detailed: Answer) -> Answer:
        """A ``CreateTaskResult``: the task's own fields and ``resultType: "task"``."""
        return {"resultType": "task"} | {k: detailed[k] for k in _TASK_FIELDS if k in detailed}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: _TaskParams) -> Answer:
        require_client_extension(ctx, EXTENSION_ID)
        task_id = _task_id(params.task_id)
        detailed: Answer = {"resultType": "complete"}
        with acting_for(principal_of_request(ctx.request)):
            return detailed | await self._guarded(lambda: self.jobs.task_now(task_id))

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: _UpdateParams) -> Answer:
        require_client_extension(ctx, EXTENSION_ID)
        task_id = _task_id(params.task_id)
        responses = params.input_responses
        principal = principal_of_request(ctx.request)
        with acting_for(principal):
            await self._guarded(lambda: self.jobs.answer_task(task_id, responses, by=principal.by))
        return {"resultType": "complete"}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: _TaskParams) -> Answer:
        require_client_extension(ctx, EXTENSION_ID)
        task_id = _task_id(params.task_id)
        with acting_for(principal_of_request(ctx.request)):
            await self._guarded(lambda: self._cancel_now(task_id))
        return {"resultType": "complete"}

    async def _cancel_now(self, task_id: str) -> None:
        self.jobs.cancel_task(task_id)

    async def _guarded(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """*call*, its waitbound errors as one-line JSON-RPC errors (secrets scrubbed)."""
        try:
            return await call()
        except OperationNotFoundError as exc:
            raise _invalid(f"Failed to retrieve task: task not found ({exc})") from None
        except UsageError as exc:
            raise _invalid(str(scrub(str(exc), self._secrets))) from None
        except WaitboundError as exc:
            _log.warning("task request failed: %s", scrub(str(exc), self._secrets))
            raise MCPError(
                code=INTERNAL_ERROR,
                message=str(scrub(str(exc), self._secrets))[:MAX_ERROR_CHARS],
            ) from None


async def _now(value: _T) -> _T:
    return value
