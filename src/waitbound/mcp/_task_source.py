"""What the Tasks extension and the task listener use of the server's jobs
(:class:`~waitbound.mcp.Jobs` is one): read a task, answer and cancel it, and see
the store change. The two fronts take this protocol rather than the jobs' module, so
they sit beside the jobs, not above them.
"""

from __future__ import annotations

from typing import Protocol

import anyio

from waitbound._base._clock import Clock
from waitbound.mcp._answers import Answer
from waitbound.mcp._config import McpConfig
from waitbound.stores import Store

__all__ = ["TaskSource"]


class TaskSource(Protocol):
    """The jobs as the task fronts see them (every method as on ``Jobs``)."""

    @property
    def config(self) -> McpConfig:
        """The server's providers and their credentials."""

    @property
    def store(self) -> Store:
        """The store the jobs live in."""

    @property
    def clock(self) -> Clock:
        """The jobs' clock."""

    def task(self, operation_id: str) -> Answer:
        """The operation as a task (``DetailedTask``), read from the store."""

    async def task_now(self, operation_id: str) -> Answer:
        """:meth:`task`, after settling a submission whose answer was lost."""

    async def answer_task(self, operation_id: str, responses: object, *, by: str) -> bool:
        """Record a client's ``inputResponses`` to the task's elicitation."""

    def cancel_task(self, operation_id: str) -> None:
        """``tasks/cancel``: cancel the task's operation."""

    def changed(self) -> anyio.Event:
        """An event set at the next change this process makes or sees."""
