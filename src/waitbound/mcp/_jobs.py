"""The agent tools' behaviour, free of any protocol: jobs in the store, driven outside
the model.

:class:`Jobs` answers each tool from the durable store. Its :meth:`Jobs.drive` is the
same async worker any ``waitbound worker`` runs (:func:`waitbound.work`), restricted to
nothing but the providers' credentials, so operations progress between tool calls and
resume from the store after a restart.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import replace
from typing import Final

import anyio

from waitbound._base._errors import UsageError
from waitbound._base._json import JSON
from waitbound._engine._api import check_async, submit_async
from waitbound._engine._operation import Submission
from waitbound._engine._worker import WorkerSettings, work
from waitbound._model._record import Phase, Record
from waitbound.mcp._answers import Answer
from waitbound.mcp._job_tasks import JobTasks
from waitbound.mcp._labels import LABEL_PREFIX
from waitbound.mcp._principal import current

__all__ = ["Jobs"]

_PATH: Final = re.compile(r"/[A-Za-z0-9._~/-]*")
"""Paths an agent may name: unreserved characters only (RFC 3986 §2.3), so nothing is
percent-encoded, no ``@``, ``?`` or ``#``; ``..`` segments and ``//`` are refused too."""
_MAX_BODY_BYTES: Final = 1024 * 1024
_KEY: Final = re.compile(r"[A-Za-z0-9._:-]{1,100}")
_SWEEP_S: Final = 30.0
"""How often the background worker looks for submissions nobody can finish."""
_RECHECK_S: Final = 1.0
"""How often a waiting ``await_job`` re-reads the store when no change was signalled
(another process, such as a ``waitbound worker``, may be driving the operation)."""


class Jobs(JobTasks):
    """The agent tools over one store and one configuration.

    Args:
        config: the providers and the answer bounds.
        store: where operations live (shared with any worker).
        client: an ``httpx.AsyncClient`` to send with; ``None`` makes one per call.
        clock, rng: time and jitter, injectable for tests.
        http: body cap, redirects and connect timeout (default: the config's
            ``max_response_bytes``).

    Every tool raises :class:`~waitbound.UsageError` (or
    :class:`~waitbound.OperationNotFoundError`) for bad input, before storing anything.

    Its parts, by seam: the store and the plumbing (:class:`~waitbound.mcp._jobs_core.JobsCore`),
    the tools answered from the store alone (``_stored_tools``), the tasks
    (``_job_tasks``); here, what sends or drives: ``start_job``, the looks of
    ``await_job``, ``check_job`` and ``task_now``, and the background worker.
    """

    # -- the background worker --------------------------------------------------------

    async def drive(self, stop: anyio.Event, settings: WorkerSettings | None = None) -> None:
        """Drive this server's due operations (labelled ``mcp:``) until *stop* is set:
        the background worker of the MCP server. Other operations in the store are left
        to workers that hold their credentials. Every ``_SWEEP_S`` seconds it also
        settles the submissions nobody can finish (:meth:`settle_lost_submissions`)."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._sweep, stop)
            await self._work(stop, settings)
            group.cancel_scope.cancel()

    async def _sweep(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            self.settle_lost_submissions()
            with anyio.move_on_after(_SWEEP_S):
                await stop.wait()

    async def _work(self, stop: anyio.Event, settings: WorkerSettings | None) -> None:
        await work(
            self.store,
            settings=replace(settings or WorkerSettings(), label_prefix=LABEL_PREFIX),
            # bound to each provider's places: a record naming elsewhere is refused
            headers=self._credentials,
            client=self.client,
            clock=self.clock,
            rng=self.rng,
            on_event=self._notify,
            stop=stop,
            http=self.http,
        )

    # -- the tools ----------------------------------------------------------------

    async def start_job(
        self,
        provider: str,
        body: JSON = None,
        path: str | None = None,
        method: str | None = None,
        idempotency_key: str | None = None,
    ) -> Answer:
        """Submit a job to a configured provider, record it, and return at once.

        The same *idempotency_key* (with the same request) returns the same operation
        instead of submitting twice.

        Raises:
            UsageError: unknown provider, a method or path not allowed, a body that is
                too large, or a bad key.
        """
        chosen = self._provider(provider)
        verb = (method or chosen.allowed_methods[0]).upper()
        if verb not in chosen.allowed_methods:
            raise UsageError(
                f"method {verb[:10]!r} is not allowed for provider {chosen.name}; "
                f"allowed: {', '.join(chosen.allowed_methods)}"
            )
        where = path or chosen.submit_path
        if (
            not isinstance(where, str)
            or not _PATH.fullmatch(where)
            or ".." in where.split("/")
            or "//" in where
        ):
            raise UsageError(
                f"path {str(where)[:60]!r} must start with '/' and hold only letters, digits "
                "and '.', '_', '~', '-', '/' (no '..' or '//')"
            )
        if not any(fnmatch.fnmatchcase(where, pattern) for pattern in chosen.allowed_paths):
            raise UsageError(
                f"path {where[:60]!r} is outside the allowed paths of provider {chosen.name}: "
                f"{', '.join(chosen.allowed_paths)}"
            )
        content = b"" if body is None else json.dumps(body, ensure_ascii=False).encode()
        if len(content) > _MAX_BODY_BYTES:
            raise UsageError(f"body is {len(content)} bytes; at most {_MAX_BODY_BYTES} are sent")
        if idempotency_key is not None and not _KEY.fullmatch(idempotency_key):
            raise UsageError("idempotency_key must be 1-100 letters, digits, '.', '_', ':' or '-'")
        submission = Submission(
            method=verb,
            url=chosen.base_url + where,
            profile=chosen.profile,
            policy=chosen.policy,
            body=content,
            content_type="application/json" if body is not None else None,
            idempotency_key=idempotency_key,
            label=current().label(chosen.name),
            trusted_origins=chosen.trusted_origins,  # what its story says reaches them
        )
        operation_id = None
        if idempotency_key is not None:
            operation_id = current().key_scope(chosen.name, idempotency_key)
            existing = self.store.get(operation_id)
            if existing is not None and existing.submit_fingerprint != submission.fingerprint():
                raise UsageError(
                    f"idempotency_key {idempotency_key!r} was already used for another request "
                    f"(operation {operation_id}); use a new key"
                )
        handle = await submit_async(
            submission,
            operation_id=operation_id,
            store=self.store,
            headers=self._credentials,
            client=self.client,
            clock=self.clock,
            rng=self.rng,
            on_event=self._notify,
            http=self.http,
        )
        answer = self._view(self._record(handle.operation_id))
        if not answer["done"]:
            answer["poll_after_seconds"] = answer["next_check_after_seconds"]
        return answer

    async def await_job(self, operation_id: str, max_wait_seconds: float | None = None) -> Answer:
        """Wait inside the server until the operation has an outcome or the ceiling
        (*max_wait_seconds*, default and cap from the configuration) is reached.

        Safe to call again: it reads the stored operation and waits; it sends nothing
        itself (the background worker does).

        Raises:
            UsageError: a negative or non-numeric wait.
            OperationNotFoundError: no such operation.
        """
        ceiling = self._ceiling(max_wait_seconds)
        record = self._record(operation_id)
        if record.phase is Phase.SUBMITTING:
            record = await self._look(record)
        start = self.clock.monotonic()
        while not record.is_finished and record.phase is not Phase.SUBMITTING:
            left = ceiling - (self.clock.monotonic() - start)
            if left <= 0:
                break
            changed = self._changed
            with anyio.move_on_after(min(left, _RECHECK_S)):
                await changed.wait()
            record = self._record(operation_id)
        answer = self._view(record)
        answer["waited_seconds"] = round(self.clock.monotonic() - start, 1)
        if not record.is_finished and record.phase is not Phase.SUBMITTING:
            answer["message"] = (
                f"Waited {ceiling:g} s: the job is still running in the background and is "
                f"NOT complete. Do not report success. Call await_job again with "
                f"operation_id {record.operation_id!r}."
            )
        return answer

    def _ceiling(self, wanted: object) -> float:
        if wanted is None:
            return self.config.default_wait_seconds
        if not isinstance(wanted, int | float) or isinstance(wanted, bool) or math.isnan(wanted):
            raise UsageError("max_wait_seconds must be a number of seconds")
        if wanted < 0:
            raise UsageError(f"max_wait_seconds must not be negative, got {wanted:g}")
        return min(float(wanted), self.config.max_wait_seconds)

    async def check_job(self, operation_id: str) -> Answer:
        """One look at the stored operation; a request is sent only when one is due
        and no worker holds it.

        Raises:
            OperationNotFoundError: no such operation.
        """
        return self._view(await self._look(self._record(operation_id)))

    async def _look(self, record: Record) -> Record:
        """*record* after one bounded look: at most one request, only when one is due
        and nobody holds the operation. A submission whose answer was lost (the server
        stopped mid-submit) is settled here when nobody can finish it
        (:meth:`_abandoned`): escalated, since it may have created a job."""
        if record.is_finished:
            return record
        if record.phase is not Phase.SUBMITTING:
            await check_async(
                record.operation_id,
                store=self.store,
                headers=self._credentials,
                client=self.client,
                clock=self.clock,
                rng=self.rng,
                on_event=self._notify,
                http=self.http,
            )
        elif self._abandoned(record):
            return self._settle(record)
        return self._record(record.operation_id)

    # -- tasks (the rest is in _job_tasks.py) ------------------------------------------

    async def task_now(self, operation_id: str) -> Answer:
        """:meth:`task`, after settling a submission whose answer was lost (the server
        stopped mid-submit), as ``await_job`` does: a task never stays ``working`` on
        a submission nobody will finish."""
        record = self._record(operation_id)
        if record.phase is Phase.SUBMITTING:
            await self._look(record)
        return self.task(operation_id)
