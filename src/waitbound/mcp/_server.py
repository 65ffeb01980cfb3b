"""The MCP server: the agent tools over the official ``mcp`` SDK (``MCPServer``).

The tools only read and write the store; the waiting happens in the server's
background worker (:meth:`Jobs.drive`), never in the model's turns.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from waitbound._base._errors import WaitboundError
from waitbound._base._version import VERSION
from waitbound._engine._worker import WorkerSettings
from waitbound.mcp._answers import Answer, scrub
from waitbound.mcp._extension import TasksExtension
from waitbound.mcp._jobs import Jobs
from waitbound.mcp._notifications import ListenParams, TaskListener
from waitbound.mcp._principal import acting_for, principal_of_context

__all__ = ["INSTRUCTIONS", "STORY_URI", "create_server"]

INSTRUCTIONS = (
    "waitbound runs long jobs at external APIs for you and waits for them outside your "
    "turns. start_job returns at once: the job has STARTED and is NOT complete. Then call "
    "await_job (it blocks inside the server up to its ceiling) until `done` is true, and "
    "report only what `status` says. If you lose track of your jobs, call list_jobs. "
    "Escalations are decided by a person, not by you: if a job needs more time than its "
    "budget allows, call request_extension, which asks a person; it extends nothing by "
    "itself."
)

_T = TypeVar("_T")

MAX_ERROR_CHARS = 500
"""The longest tool error text (a bad argument is named, not echoed whole)."""


class _Server(MCPServer[None]):
    """``MCPServer`` whose argument errors are one line (the SDK passes on pydantic's
    multi-line report, with a web link, which a model need not read)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            with acting_for(principal_of_context(context)):
                return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}"
                for error in cause.errors()
            )
            raise ToolError(
                f"Error executing tool {name}: invalid arguments ({problems})"[:MAX_ERROR_CHARS]
            ) from cause

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        """The SDK's, on behalf of the request's principal (a story only reaches the
        operation's owner)."""
        with acting_for(principal_of_context(context)):
            return await super().read_resource(uri, context)


ToolAnswer = dict[str, Any]
"""The tools' structured answer (JSON); ``Answer`` itself is recursive, which the SDK's
output-schema builder cannot describe."""

OperationId = Annotated[str, Field(description="The operation_id that start_job returned.")]


def create_server(
    jobs: Jobs, *, settings: WorkerSettings | None = None, worker: bool = True
) -> MCPServer[None]:
    """Build the MCP server for *jobs*; while a client is connected, a background worker
    drives the store's due operations (with *worker*; the HTTP front runs it beside
    its server instead, ``waitbound.mcp._http``).

    Returns:
        An ``MCPServer``; run it with ``.run("stdio")`` or ``.run("streamable-http")``,
        or connect to it in-process with ``mcp.Client(server)``.
    """

    @asynccontextmanager
    async def lifespan(app: MCPServer[None]) -> AsyncIterator[None]:
        stop = anyio.Event()
        async with anyio.create_task_group() as group:
            if worker:
                group.start_soon(jobs.drive, stop, settings)
            try:
                yield
            finally:
                stop.set()

    server = _Server(
        name="waitbound",
        instructions=INSTRUCTIONS,
        version=VERSION,
        lifespan=lifespan,
        log_level="WARNING",
        extensions=[TasksExtension(jobs)],
    )
    _no_prompts(server)
    # the SDK's handler drops the filter's taskIds: notifications/tasks need their own
    server._lowlevel_server.add_request_handler(  # a spec method: no extension binding
        "subscriptions/listen", ListenParams, TaskListener(jobs)
    )

    async def answer(call: Callable[[], Awaitable[Answer]]) -> Answer:
        try:
            return await call()
        except WaitboundError as exc:
            cleaned = str(scrub(str(exc), jobs.config.secrets()))[:MAX_ERROR_CHARS]
            raise ToolError(cleaned) from None

    async def now(value: _T) -> _T:
        return value

    @server.tool(annotations=ToolAnnotations(idempotent_hint=False, open_world_hint=True))
    async def start_job(
        provider: Annotated[str, Field(description="A provider named in the server's config.")],
        body: Annotated[
            dict[str, Any] | list[Any] | None,
            Field(description="The job request's JSON body, if it has one."),
        ] = None,
        path: Annotated[
            str | None,
            Field(description="The job path under the provider's base URL (must be allowed)."),
        ] = None,
        method: Annotated[str | None, Field(description="HTTP method (default POST).")] = None,
        idempotency_key: Annotated[
            str | None,
            Field(description="Repeat a call with the same key to get the same operation."),
        ] = None,
    ) -> ToolAnswer:
        """Start a long-running job at a configured provider and return at once.

        Usually the answer has done=false and status "processing": the job has STARTED
        and is NOT complete; call await_job next with the operation_id. When the
        provider's first answer already ends the job, done=true and the outcome is final.
        """
        return await answer(lambda: jobs.start_job(provider, body, path, method, idempotency_key))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    async def await_job(
        operation_id: OperationId,
        max_wait_seconds: Annotated[
            float | None,
            Field(
                description="Longest wait in this call, seconds (default and cap set by "
                "the server)."
            ),
        ] = None,
    ) -> ToolAnswer:
        """Wait inside the server until the job finishes or the wait ceiling is reached.

        done=true comes with the one outcome (succeeded, completed_with_errors, failed,
        canceled, expired, timed_out, escalated). done=false means still running and NOT
        complete: call await_job again. Always safe to repeat.
        """
        return await answer(lambda: jobs.await_job(operation_id, max_wait_seconds))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    async def check_job(operation_id: OperationId) -> ToolAnswer:
        """Look once at a job: done, status, progress, elapsed time, next check time, and
        for an escalation its reason and the options a person may choose."""
        return await answer(lambda: jobs.check_job(operation_id))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    async def list_jobs(
        include_finished: Annotated[
            bool, Field(description="Also list recently finished jobs.")
        ] = True,
    ) -> ToolAnswer:
        """List your jobs, newest first, with their status: find your work again after
        losing context."""
        return await answer(lambda: now(jobs.list_jobs(include_finished)))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    async def get_result(
        operation_id: OperationId,
        part: Annotated[
            Literal["result", "error"], Field(description="Which part to read.")
        ] = "result",
        offset: Annotated[int, Field(description="Character offset to read from.")] = 0,
    ) -> ToolAnswer:
        """Read a finished job's result (or error) from the store, in bounded parts; the
        provider is never asked again."""
        return await answer(lambda: now(jobs.get_result(operation_id, part, offset)))

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
    async def cancel_job(
        operation_id: OperationId,
        reason: Annotated[str | None, Field(description="Why, for the audit log.")] = None,
    ) -> ToolAnswer:
        """Ask the provider to cancel a job, when the server allows agents to cancel it and
        the job is cancelable now; otherwise the answer says why not."""
        return await answer(lambda: now(jobs.cancel_job(operation_id, reason)))

    @server.tool(annotations=ToolAnnotations(idempotent_hint=False, open_world_hint=False))
    async def request_extension(
        operation_id: OperationId,
        minutes: Annotated[
            float, Field(description="How many more minutes of waiting to ask for.")
        ],
        checks: Annotated[int, Field(description="How many more status checks to ask for.")],
        why: Annotated[str, Field(description="Why more time is needed, in one line.")],
    ) -> ToolAnswer:
        """Ask a PERSON for more time on a job: the request appears in `waitbound
        escalations` and a person decides it. Nothing is extended by this call (agents
        never decide); the answer says so, with the request as the person sees it."""
        return await answer(lambda: jobs.request_extension(operation_id, minutes, checks, why))

    @server.resource(
        STORY_URI,
        name="operation_story",
        title="An operation's story",
        description="Every audit event of one operation, one line each (as `waitbound show` "
        "prints them), newest 200 at most.",
        mime_type="text/plain",
    )
    def operation_story(operation_id: str) -> str:
        try:
            return jobs.story(operation_id)
        except WaitboundError as exc:
            cleaned = str(scrub(str(exc), jobs.config.secrets()))[:MAX_ERROR_CHARS]
            raise ValueError(cleaned) from None

    return server


STORY_URI = "waitbound://operations/{operation_id}/story"
"""The resource template of an operation's story."""


def _no_prompts(server: MCPServer[None]) -> None:
    """Serve no ``prompts/*`` methods, so the capability is not advertised: the server
    has no prompts (``MCPServer`` registers the handlers whether or not any exist)."""
    handlers = server._lowlevel_server._request_handlers  # no public remover
    for method in ("prompts/list", "prompts/get"):
        handlers.pop(method, None)
