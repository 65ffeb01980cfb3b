"""The provider kit's ASGI app: agent-friendly async endpoints over a :class:`JobStore`.

How work gets done: the kit holds no opinion about the user's queue. Either pass an async
``run(job, progress)`` callable, executed in the app's own task group (started by its
lifespan), or pass none and drive jobs yourself — from your queue's worker — through
:meth:`ProviderApp.report_progress`, :meth:`ProviderApp.finish` and
:meth:`ProviderApp.cancel` (they write the store and send the completion webhook).
A job still running when the app shuts down stays ``processing`` in the store.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Final, Protocol

import anyio
import httpx
from anyio.abc import TaskGroup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from waitbound._base._json import JSON
from waitbound.provider._bodies import (
    JobUrls,
    error_body,
    job_body,
    operation_body,
    retry_after,
)
from waitbound.provider._events import job_events
from waitbound.provider._job import (
    Job,
    JobCompletedWithErrors,
    JobFailed,
    JobSucceeded,
    fingerprint,
)
from waitbound.provider._openapi import openapi_document
from waitbound.provider._settings import ProviderSettings
from waitbound.provider._store import JobStore, MemoryJobStore
from waitbound.provider._webhooks import deliver_completion

__all__ = [
    "JobNotCancelableError",
    "JobNotFoundError",
    "Progress",
    "ProviderApp",
    "Runner",
]

_LOG = logging.getLogger("waitbound.provider")
_MAX_KEY_CHARS: Final = 255
_MAX_ERRORS_LIMIT: Final = 1000

Ending = JobSucceeded | JobCompletedWithErrors | JobFailed


class Progress(Protocol):
    """What ``run`` is given to report progress."""

    async def __call__(self, percent: float, *, cancelable: bool | None = None) -> None:
        """Record *percent* (0 to 100) done; *cancelable* ``False`` refuses cancels from
        now on (a phase that cannot be interrupted), ``None`` leaves it as it is."""
        ...


Runner = Callable[[Job, Progress], Awaitable[Ending | JSON]]
"""The user's work: ``await run(job, progress)`` returns a :class:`JobSucceeded`,
:class:`JobCompletedWithErrors` or :class:`JobFailed` (any other value is a success
with that result). An exception fails the job with ``internal_error`` (logged; its text
is not shown). It is cancelled when the job is canceled."""


class JobNotFoundError(LookupError):
    """There is no job with that id."""


class JobNotCancelableError(Exception):
    """The job cannot be canceled now; ``job`` is its current state."""

    def __init__(self, job: Job) -> None:
        """Refuse to cancel *job*."""
        self.job = job
        reason = (
            f"it already ended ({job.status})"
            if job.done
            else "it is in a phase that cannot be interrupted"
        )
        super().__init__(f"job {job.job_id} cannot be canceled: {reason}")


class _Reporter:
    def __init__(self, app: ProviderApp, job_id: str) -> None:
        self._app = app
        self._job_id = job_id

    async def __call__(self, percent: float, *, cancelable: bool | None = None) -> None:
        await self._app.report_progress(self._job_id, percent, cancelable=cancelable)


def _new_id() -> str:
    return "job_" + secrets.token_urlsafe(12)


class ProviderApp:
    """Agent-friendly async endpoints, as an ASGI app (Starlette; mountable in FastAPI).

    Routes (relative to where it is mounted): ``POST /jobs``, ``GET /jobs/{job_id}``,
    ``GET /jobs/{job_id}/result``, ``GET /jobs/{job_id}/errors``,
    ``POST /jobs/{job_id}/cancel``, ``GET /jobs/{job_id}/events`` (SSE) and
    ``GET /openapi.json``. See ``docs/provider.md``.

    Standalone, the app runs its own lifespan. Mounted in another app (whose lifespan
    runs instead), enter :meth:`lifespan` from that app's lifespan; until then a start
    with a ``run`` callable answers ``503``.
    """

    def __init__(
        self,
        run: Runner | None = None,
        *,
        store: JobStore | None = None,
        settings: ProviderSettings | None = None,
        now: Callable[[], datetime] | None = None,
        new_id: Callable[[], str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        """Build the app.

        Args:
            run: the work of one job (see :data:`Runner`); ``None``: jobs are driven
                through :meth:`finish` and friends.
            store: where jobs live; a new :class:`MemoryJobStore` when ``None``.
            settings: see :class:`ProviderSettings`.
            now: the clock (aware UTC); the system clock when ``None``.
            new_id: makes job ids; ``job_`` and 16 random URL-safe characters when ``None``.
            http_client: sends webhooks; one is made when needed when ``None``.
        """
        self.run = run
        self.store: JobStore = MemoryJobStore() if store is None else store
        self.settings = ProviderSettings() if settings is None else settings
        self._now = now or (lambda: datetime.now(UTC))
        self._new_id = new_id or _new_id
        self._http = http_client
        self._group: TaskGroup | None = None
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._notify_urls: dict[str, JobUrls] = {}
        self._app = Starlette(routes=self.routes, lifespan=lambda _app: self.lifespan())

    @property
    def routes(self) -> list[BaseRoute]:
        """The routes, for an app of your own (their names start with ``job_``)."""
        return [
            Route("/jobs", self._start, methods=["POST"], name="job_start"),
            Route("/jobs/{job_id}", self._status, methods=["GET"], name="job_status"),
            Route("/jobs/{job_id}/result", self._result, methods=["GET"], name="job_result"),
            Route("/jobs/{job_id}/errors", self._errors, methods=["GET"], name="job_errors"),
            Route("/jobs/{job_id}/cancel", self._cancel, methods=["POST"], name="job_cancel"),
            Route("/jobs/{job_id}/events", self._events, methods=["GET"], name="job_events"),
            Route(
                "/jobs/{job_id}/operation", self._operation, methods=["GET"], name="job_operation"
            ),
            Route("/openapi.json", self._openapi, methods=["GET"], name="job_openapi"),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ASGI."""
        await self._app(scope, receive, send)

    def lifespan(self) -> AbstractAsyncContextManager[None]:
        """The task group the ``run`` callables and webhooks run in; leaving it cancels
        them (their jobs stay ``processing``)."""
        return self._lifespan()

    @asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()

    # --- driving jobs -------------------------------------------------------------------

    def _get(self, job_id: str) -> Job:
        job = self.store.get(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        return job

    async def report_progress(
        self, job_id: str, percent: float, *, cancelable: bool | None = None
    ) -> Job:
        """Record progress of a processing job (a finished one is left as it is).

        Raises:
            JobNotFoundError: no such job.
        """
        job = self._get(job_id)
        if job.done:
            return job
        changed = replace(
            job,
            progress_percent=min(100.0, max(0.0, float(percent))),
            cancelable=job.cancelable if cancelable is None else cancelable,
            updated_at=self._now(),
        )
        return changed if self.store.save(changed) else self._get(job_id)

    async def finish(self, job_id: str, ending: Ending | JSON) -> Job:
        """End a job with *ending* (any value but the three endings is a success with that
        result); the first ending wins: an already ended job is returned unchanged.

        Raises:
            JobNotFoundError: no such job.
        """
        job = self._get(job_id)
        if job.done:
            return job
        now = self._now()
        match ending:
            case JobFailed(error=error):
                ended = replace(job, status="failed", error=error)
            case JobCompletedWithErrors(summary=summary, errors=errors, result=result):
                ended = replace(job, status="completed_with_errors", summary=summary, errors=errors)
                ended = replace(ended, result=result, progress_percent=100.0)
            case JobSucceeded(result=result):
                ended = replace(job, status="succeeded", result=result, progress_percent=100.0)
            case _:
                ended = replace(job, status="succeeded", result=ending, progress_percent=100.0)
        ended = replace(ended, cancelable=False, ended_at=now, updated_at=now)
        if not self.store.save(ended):
            return self._get(job_id)
        self._notify(ended)
        return ended

    async def cancel(self, job_id: str, reason: str = "canceled on request") -> Job:
        """Cancel a processing, cancelable job: it ends ``canceled`` and its ``run`` is
        cancelled.

        Raises:
            JobNotFoundError: no such job.
            JobNotCancelableError: it already ended, or it is not cancelable now.
        """
        job = self._get(job_id)
        if job.done or not job.cancelable:
            raise JobNotCancelableError(job)
        now = self._now()
        ended = replace(
            job,
            status="canceled",
            cancelable=False,
            error={"code": "canceled", "message": reason},
            ended_at=now,
            updated_at=now,
        )
        if not self.store.save(ended):
            raise JobNotCancelableError(self._get(job_id))
        scope = self._scopes.get(job_id)
        if scope is not None:
            scope.cancel()
        self._notify(ended)
        return ended

    async def _work(self, job: Job) -> None:
        assert self.run is not None
        with anyio.CancelScope() as scope:
            self._scopes[job.job_id] = scope
            try:
                ending = await self.run(job, _Reporter(self, job.job_id))
            except Exception:
                _LOG.exception("job %s: run raised", job.job_id)
                ending = JobFailed(
                    error={
                        "code": "internal_error",
                        "message": "the job's work raised an unexpected error",
                    }
                )
            finally:
                self._scopes.pop(job.job_id, None)
            await self.finish(job.job_id, ending)

    def _notify(self, job: Job) -> None:
        secret = self.settings.webhook_secret
        if job.notify_url is None or secret is None or self._group is None:
            return
        urls = self._notify_urls.pop(job.job_id, None)
        if urls is None:
            return
        body = self.body_of(job, urls)
        self._group.start_soon(
            partial(
                deliver_completion,
                job.notify_url,
                secret,
                body,
                settings=self.settings,
                client=self._http,
                now=self._now,
            )
        )

    # --- endpoints ----------------------------------------------------------------------

    def _urls(self, request: Request, job_id: str) -> JobUrls:
        return JobUrls(
            status_url=str(request.url_for("job_status", job_id=job_id)),
            result_url=str(request.url_for("job_result", job_id=job_id)),
            cancel_url=str(request.url_for("job_cancel", job_id=job_id)),
            errors_url=str(request.url_for("job_errors", job_id=job_id)),
            events_url=str(request.url_for("job_events", job_id=job_id)),
            operation_url=str(request.url_for("job_operation", job_id=job_id)),
        )

    def _answer(
        self, request: Request, job: Job, status_code: int = 200, *, started: bool = False
    ) -> JSONResponse:
        urls = self._urls(request, job.job_id)
        poll_after = self.settings.poll_after_s
        body = job_body(
            job,
            urls,
            now=self._now(),
            poll_after_s=poll_after,
            inline_result_max_bytes=self.settings.inline_result_max_bytes,
            errors_limit=min(self.settings.errors_limit, _MAX_ERRORS_LIMIT),
            started=started,
        )
        headers = {"Cache-Control": "no-store"}
        if not job.done:
            headers["Retry-After"] = retry_after(poll_after)
        if started:
            headers |= {"Location": urls.status_url, "Operation-Location": urls.operation_url}
        return JSONResponse(body, status_code=status_code, headers=headers)

    async def _start(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: JSON = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return _error(400, "invalid_json", "The request body is not JSON; send an object.")
        if not isinstance(body, dict):
            return _error(422, "invalid_body", "The request body must be a JSON object.")
        key = request.headers.get("idempotency-key")
        if key is not None and not 0 < len(key) <= _MAX_KEY_CHARS:
            return _error(400, "invalid_idempotency_key", "Idempotency-Key: 1 to 255 chars.")
        notify = body.get(self.settings.notify_url_field)
        if notify is not None and (
            not isinstance(notify, str) or not notify.startswith(("http://", "https://"))
        ):
            field = self.settings.notify_url_field
            return _error(422, "invalid_notify_url", f"{field} must be an http(s) URL.")
        if self.run is not None and self._group is None:
            return _error(
                503,
                "not_running",
                "The service is not ready to run jobs (its lifespan is not running); retry later.",
            )
        now = self._now()
        estimate, cancelable = self.settings.estimate_s, self.settings.cancelable
        job = Job(
            job_id=self._new_id(),
            created_at=now,
            updated_at=now,
            request=body,
            fingerprint=fingerprint(body),
            idempotency_key=key,
            estimated_duration_s=None if estimate is None else estimate(body),
            cancelable=True if cancelable is None else bool(cancelable(body)),
            notify_url=notify if isinstance(notify, str) else None,
        )
        stored = self.store.add(job)
        if stored.job_id != job.job_id:
            if stored.fingerprint != job.fingerprint:
                return _error(
                    422,
                    "idempotency_key_reused",
                    f"The Idempotency-Key {key!r} was already used for job {stored.job_id} "
                    "with a different request body. Send a new key to start a new job, or "
                    "the original body to get that job again.",
                    job_id=stored.job_id,
                )
            answer = self._answer(
                request, stored, 200 if stored.done else 202, started=not stored.done
            )
            answer.headers["Idempotent-Replayed"] = "true"
            return answer
        if job.notify_url is not None:
            self._notify_urls[job.job_id] = self._urls(request, job.job_id)
        if self.run is not None and self._group is not None:
            self._group.start_soon(self._work, job)
        return self._answer(request, job, 202, started=True)

    def _find(self, request: Request) -> Job | Response:
        job_id = request.path_params["job_id"]
        job = self.store.get(job_id)
        if job is None:
            return _error(404, "job_not_found", f"There is no job {job_id!r}.")
        return job

    async def _status(self, request: Request) -> Response:
        job = self._find(request)
        return job if isinstance(job, Response) else self._answer(request, job)

    async def _operation(self, request: Request) -> Response:
        """The Azure-style status monitor (``Operation-Location``): Azure's terminal set,
        so azure-core's poller ends on every ending, a partial success included."""
        job = self._find(request)
        if isinstance(job, Response):
            return job
        body = operation_body(
            job,
            self._urls(request, job.job_id),
            inline_result_max_bytes=self.settings.inline_result_max_bytes,
            errors_limit=min(self.settings.errors_limit, _MAX_ERRORS_LIMIT),
        )
        headers = {"Cache-Control": "no-store"}
        if not job.done:
            headers["Retry-After"] = retry_after(self.settings.poll_after_s)
        return JSONResponse(body, headers=headers)

    async def _result(self, request: Request) -> Response:
        job = self._find(request)
        if isinstance(job, Response):
            return job
        urls = self._urls(request, job.job_id)
        if not job.done:
            return _error(
                409,
                "run_not_completed",
                f"The job {job.job_id} is still processing and is NOT complete; there is no "
                f"result yet. Wait at least {self.settings.poll_after_s:g} seconds, then call "
                f"GET {urls.status_url}; fetch the result once done is true.",
                status=job.status,
                headers={"Retry-After": retry_after(self.settings.poll_after_s)},
            )
        if job.status in ("failed", "canceled"):
            return _error(
                409,
                "no_result",
                f"The job {job.job_id} ended {job.status}: it has no result and never will. "
                f"GET {urls.status_url} says why.",
                status=job.status,
            )
        body: dict[str, JSON] = {"job_id": job.job_id, "status": job.status, "result": job.result}
        return JSONResponse(body)

    async def _errors(self, request: Request) -> Response:
        job = self._find(request)
        if isinstance(job, Response):
            return job
        try:
            limit = int(request.query_params.get("limit", self.settings.errors_limit))
            offset = int(request.query_params.get("offset", 0))
        except ValueError:
            return _error(400, "invalid_page", "limit and offset must be whole numbers.")
        if not 1 <= limit <= _MAX_ERRORS_LIMIT or offset < 0:
            return _error(400, "invalid_page", "limit is 1 to 1000; offset is 0 or more.")
        page = list(job.errors[offset : offset + limit])
        body: dict[str, JSON] = {
            "job_id": job.job_id,
            "total": len(job.errors),
            "offset": offset,
            "limit": limit,
            "errors": page,
            "next_url": None,
        }
        if offset + limit < len(job.errors):
            base = self._urls(request, job.job_id).errors_url
            body["next_url"] = f"{base}?limit={limit}&offset={offset + limit}"
        return JSONResponse(body)

    async def _cancel(self, request: Request) -> Response:
        job = self._find(request)
        if isinstance(job, Response):
            return job
        try:
            ended = await self.cancel(job.job_id)
        except JobNotCancelableError as error:
            now_job = error.job
            why = (
                f"it already ended with status {now_job.status}"
                if now_job.done
                else "it is in a phase that cannot be interrupted; it will end by itself"
            )
            return _error(
                409,
                "not_cancelable",
                f"The job {now_job.job_id} cannot be canceled: {why}. "
                f"GET {self._urls(request, now_job.job_id).status_url} for its state.",
                status=now_job.status,
            )
        return self._answer(request, ended)

    async def _events(self, request: Request) -> Response:
        job = self._find(request)
        if isinstance(job, Response):
            return job
        urls = self._urls(request, job.job_id)
        return job_events(
            self.store, self.body_of, job.job_id, urls, interval_s=self.settings.events_interval_s
        )

    async def _openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())

    def body_of(self, job: Job, urls: JobUrls) -> dict[str, JSON]:
        """The status answer's body for *job* (for the SSE stream and webhooks)."""
        return job_body(
            job,
            urls,
            now=self._now(),
            poll_after_s=self.settings.poll_after_s,
            inline_result_max_bytes=self.settings.inline_result_max_bytes,
            errors_limit=min(self.settings.errors_limit, _MAX_ERRORS_LIMIT),
        )


def _error(
    status_code: int,
    error: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    **extra: JSON,
) -> JSONResponse:
    return JSONResponse(error_body(error, message, **extra), status_code, headers=headers)
