"""Operation handles: what ``start`` and ``submit`` return, and what a continuation
token rebuilds in another process.

A handle is a thin front over the same engine as :func:`waitbound.wait`: it names one
operation in one store, and reads its record there (``done``, ``outcome``, ``status``)
or drives the one shared loop (``_driver.loop``) on it (``result``, ``cancel``). It
holds the caller's headers in memory only; its continuation token names the operation
and the store, never a secret.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import json
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Self

import anyio
import httpx

from waitbound._base._clock import Clock
from waitbound._base._errors import OperationNotFoundError, UsageError
from waitbound._base._json import JSON
from waitbound._engine._call_options import (
    AsyncOptions,
    CallOptions,
    SyncOptions,
    drive_async,
    drive_sync,
)
from waitbound._engine._driver import loop, one_step
from waitbound._engine._effects import Credentials, EventSink
from waitbound._engine._operation import request_cancel
from waitbound._engine._outbox import OnComplete
from waitbound._engine._own_delivery import deliver_async, deliver_sync
from waitbound._model._outcome import Outcome, TimedOutError
from waitbound._model._record import Record
from waitbound._profile._schedule import DelaySource
from waitbound.stores import MemoryStore, SQLiteStore, Store, open_store
from waitbound.transports import HttpSettings

__all__ = [
    "AsyncOperationHandle",
    "OperationHandle",
    "OperationStatus",
    "TOKEN_PREFIX",
    "store_spec",
]

_LOG = logging.getLogger("waitbound.handle")

TOKEN_PREFIX: Final = "wbop1."
"""What every continuation token starts with (format version 1)."""
_MAX_TOKEN_CHARS: Final = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationStatus:
    """The public view of an operation's record, as stored now.

    Attributes:
        operation_id: our id of the operation.
        state: ``outcome`` once it has one (``succeeded``, ``timed_out``, …), else the
            phase (``submitting``, ``waiting``, ``fetching_result``,
            ``fetching_errors``).
        done: whether an outcome is recorded.
        outcome: the :class:`Outcome` as it stands (``outcome.outcome`` is ``None``
            while waiting; its ``message`` says the job is NOT complete): what
            ``start`` and ``submit`` returned before they returned handles.
        provider_state: the last state value the provider reported, or ``None``.
        progress: the provider's progress (the profile's ``progress``), or ``None``.
        requests_used: requests sent against the request budget (every kind).
        max_requests: the request budget (the policy's plus what decisions granted).
        deadline_at: the operation's own deadline (aware UTC).
        next_check_at: when its next request is due (aware UTC); ``None`` once done.
        next_check_source: why then (``provider_retry_after``, ``local_backoff``, …);
            ``None`` before any answer set it or once done.
    """

    operation_id: str
    state: str
    done: bool
    outcome: Outcome
    provider_state: JSON
    progress: JSON
    requests_used: int
    max_requests: int
    deadline_at: datetime
    next_check_at: datetime | None
    next_check_source: DelaySource | None

    @classmethod
    def of(cls, record: Record) -> OperationStatus:
        """The status of *record*."""
        done = record.is_finished
        return cls(
            operation_id=record.contract.operation_id,
            state=record.ending.outcome.value
            if record.ending.outcome is not None
            else record.ending.phase.value,
            done=done,
            outcome=record.to_outcome(),
            provider_state=record.answer.provider_state,
            progress=record.answer.progress,
            requests_used=record.requests_used,
            max_requests=record.max_requests,
            deadline_at=record.schedule.deadline_at,
            next_check_at=None if done else record.schedule.next_poll_at,
            next_check_source=None if done else record.schedule.delay_source,
        )

    def as_json(self) -> dict[str, JSON]:
        """The status as a JSON object: these attributes by name, instants as RFC 3339."""
        return {
            "operation_id": self.operation_id,
            "state": self.state,
            "done": self.done,
            "provider_state": self.provider_state,
            "progress": self.progress,
            "requests_used": self.requests_used,
            "max_requests": self.max_requests,
            "deadline_at": self.deadline_at.isoformat(),
            "next_check_at": self.next_check_at.isoformat() if self.next_check_at else None,
            "next_check_source": self.next_check_source.value if self.next_check_source else None,
            "outcome": self.outcome.as_json(),
        }


def store_spec(store: Store) -> tuple[str, str | None]:
    """What names *store* in a token: ``(spec, schema)``, never a secret.

    A SQLite file by its absolute path; PostgreSQL by its DSN with any password replaced
    by ``***`` (and its schema); the memory store as ``memory:`` (it cannot be reopened
    by another process).
    """
    if isinstance(store, SQLiteStore):
        return str(Path(store.path).resolve()), None
    if isinstance(store, MemoryStore):
        return "memory:", None
    label = getattr(store, "label", None)
    schema = getattr(store, "schema", None)
    if isinstance(label, str) and isinstance(schema, str):
        return label, schema
    return f"({type(store).__name__})", None


def _encode_token(operation_id: str, store: Store) -> str:
    spec, schema = store_spec(store)
    payload: dict[str, str | int] = {"v": 1, "operation_id": operation_id, "store": spec}
    if schema is not None:
        payload["schema"] = schema
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str) -> tuple[str, str, str | None]:
    """``(operation_id, store spec, schema)`` from a continuation token.

    Raises:
        UsageError: it is not one (one line; the token is not echoed whole).
    """
    bad = "this is not a waitbound continuation token (it starts with 'wbop1.')"
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise UsageError(bad)
    if len(token) > _MAX_TOKEN_CHARS:
        raise UsageError(f"a continuation token is at most {_MAX_TOKEN_CHARS} characters")
    body = token[len(TOKEN_PREFIX) :]
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise UsageError(bad) from None
    if not isinstance(data, dict) or data.get("v") != 1:
        raise UsageError(bad + "; or one written by a newer waitbound")
    operation_id, spec, schema = data.get("operation_id"), data.get("store"), data.get("schema")
    if not isinstance(operation_id, str) or not isinstance(spec, str):
        raise UsageError(bad)
    if schema is not None and not isinstance(schema, str):
        raise UsageError(bad)
    return operation_id, spec, schema


def _reopen(spec: str, schema: str | None) -> Store:
    """Open the store a token names.

    Raises:
        UsageError: the memory store, or a PostgreSQL DSN whose password the token
            leaves out (pass ``store=``).
    """
    if spec == "memory:":
        raise UsageError(
            "the token names a memory store, which lives in one process only; "
            "pass store= (the same MemoryStore) to rebuild the handle"
        )
    if "***" in spec or spec.startswith("("):
        raise UsageError(
            f"the token names store {spec[:80]} without its password; open it and pass store="
        )
    if schema is not None:
        from waitbound.stores.postgres import PostgresStore

        return PostgresStore(spec, schema=schema)
    return open_store(spec, create=False)


class _Handle:
    """What both handles share: the store reads, the token and the callbacks."""

    _lock: threading.Lock
    _callbacks: list[Callable[..., object]]
    _fired: bool

    @classmethod
    def _of(cls, operation_id: str, options: CallOptions[Any, Any]) -> Self:
        """The handle on *operation_id* in *options*' store (given), built from the
        options of the call that returns it (``SyncOptions`` for
        :class:`OperationHandle`, ``AsyncOptions`` for :class:`AsyncOperationHandle`)."""
        handle = cls.__new__(cls)
        handle._setup(operation_id, options)
        return handle

    def _setup(self, operation_id: str, options: CallOptions[Any, Any]) -> None:
        """Name *operation_id* in *options*' store (given), driven with *options*."""
        assert options.store is not None
        self._operation_id = operation_id
        self._store = options.store
        self._kit = options.tools()
        self._lock = threading.Lock()
        self._callbacks = []
        self._fired = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._operation_id!r})"

    @property
    def operation_id(self) -> str:
        """Our id of the operation."""
        return self._operation_id

    @property
    def store(self) -> Store:
        """The store the operation lives in."""
        return self._store

    def _record(self) -> Record:
        record = self._store.get(self._operation_id)
        if record is None:
            raise OperationNotFoundError(self._operation_id)
        return record

    def done(self) -> bool:
        """Whether the operation has an outcome (read from the store; sends nothing).

        Raises:
            OperationNotFoundError: the operation is not in the store.
        """
        return self._seen(self._record()).is_finished

    def outcome(self) -> Outcome | None:
        """The operation's outcome, or ``None`` while it is still waiting (sends nothing).

        Raises:
            OperationNotFoundError: the operation is not in the store.
        """
        record = self._seen(self._record())
        return record.to_outcome() if record.is_finished else None

    def status(self) -> OperationStatus:
        """The record's public view: state, progress, requests used, the next check and
        its source (sends nothing).

        Raises:
            OperationNotFoundError: the operation is not in the store.
        """
        return OperationStatus.of(self._seen(self._record()))

    def continuation_token(self) -> str:
        """A token that rebuilds this handle elsewhere (:meth:`from_token`): ``wbop1.``
        and base64url JSON naming the operation id and the store (a SQLite path, or a
        PostgreSQL DSN with its password as ``***``). Never a secret: headers are not in
        it, so the rebuilt handle is given its own."""
        return _encode_token(self._operation_id, self._store)

    def add_done_callback(self, fn: Callable[[Self], object]) -> None:
        """Call ``fn(handle)`` once this handle sees the operation done (in ``result``,
        ``done``, ``outcome``, ``status``, ``cancel`` or a group wait); at once when it
        is done already. Each callback is called once, in the thread (or task) that saw
        the end; an exception in it is logged (``waitbound.handle``), never raised.
        In-process only: for a completion that survives a crash use ``on_complete``.
        """
        with self._lock:
            fire_now = self._fired
            if not fire_now:
                self._callbacks.append(fn)
        if fire_now:
            self._call(fn)
        else:
            record = self._store.get(self._operation_id)
            if record is not None:
                self._seen(record)

    def _seen(self, record: Record) -> Record:
        """Note *record* as seen: fire the callbacks when it is done."""
        if record.is_finished:
            with self._lock:
                due, self._callbacks = self._callbacks, []
                self._fired = True
            for fn in due:
                self._call(fn)
        return record

    def _call(self, fn: Callable[..., object]) -> None:
        try:
            returned = fn(self)
            if inspect.isawaitable(returned):  # an async callback of a sync caller
                _LOG.warning(
                    "operation %s: a done callback returned an awaitable; it is not awaited "
                    "(use AsyncOperationHandle.add_done_callback for async callbacks)",
                    self._operation_id,
                )
                close = getattr(returned, "close", None)
                if callable(close):
                    close()
        except Exception as exc:  # a callback never breaks the wait
            _LOG.warning(
                "operation %s: a done callback raised %s: %s",
                self._operation_id,
                type(exc).__name__,
                exc,
            )

    def _timed_out(self, record: Record, timeout: float) -> TimedOutError:
        error = TimedOutError(record.to_outcome())
        error.args = (
            f"operation {record.contract.operation_id}: still waiting after "
            f"result(timeout={timeout:g}); "
            "the job is NOT known to be complete and the operation keeps its own deadline",
        )
        return error


def _no_sleep(seconds: float) -> None:
    """A handle's ``cancel`` sends its one request now: it never sleeps."""


async def _no_nap(seconds: float) -> None:
    """:func:`_no_sleep` for the async handle."""


class _TimeUp(Exception):
    """The caller's ``result(timeout)`` ran out before the next request was due."""


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0
    ):
        raise UsageError(
            f"timeout must be a non-negative number of seconds or None, got {timeout!r}"
        )


class OperationHandle(_Handle):
    """A handle on one operation, blocking (``waitbound.start`` / ``submit``).

    Built by :func:`waitbound.start` and :func:`waitbound.submit`, or
    :meth:`from_token`. Reading (``done``, ``outcome``, ``status``) never sends a
    request; ``result`` drives the operation as :func:`waitbound.wait` does (with the
    headers, client, clock, sleep and rng the handle was built with) until it has an
    outcome or the caller's timeout runs out.
    """

    def __init__(
        self,
        operation_id: str,
        *,
        store: Store,
        headers: Credentials | None = None,
        client: httpx.Client | None = None,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        on_event: EventSink | None = None,
        http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
        on_complete: OnComplete | None = None,
        notify_secret: str | None = None,
    ) -> None:
        self._setup(
            operation_id,
            SyncOptions(
                store=store, headers=headers, client=client, clock=clock, sleep=sleep,
                rng=rng, on_event=on_event, http=http, on_complete=on_complete,
                notify_secret=notify_secret,
            ),
        )  # fmt: skip

    def _setup(self, operation_id: str, options: SyncOptions) -> None:
        super()._setup(operation_id, options)
        self._options = options

    @classmethod
    def from_token(
        cls,
        token: str,
        *,
        store: Store | None = None,
        headers: Mapping[str, str] | None = None,
        client: httpx.Client | None = None,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        on_event: EventSink | None = None,
        http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
    ) -> OperationHandle:
        """Rebuild a handle from :meth:`continuation_token`'s token.

        Args:
            token: the token.
            store: the store to read; ``None`` opens the one the token names (a SQLite
                file must exist; a PostgreSQL DSN whose password the token leaves out,
                or a memory store, needs ``store=``).
            headers, client, clock, sleep, rng, on_event, http: as in
                :func:`waitbound.wait` (the token carries no headers).

        Raises:
            UsageError: not a token, or its store cannot be reopened without ``store=``.
            OperationNotFoundError: the operation is not in the store.
            StoreError: the store cannot be opened.
        """
        operation_id, spec, schema = _decode_token(token)
        opened = store if store is not None else _reopen(spec, schema)
        if opened.get(operation_id) is None:
            raise OperationNotFoundError(operation_id)
        return cls._of(
            operation_id,
            SyncOptions(
                store=opened, headers=headers, client=client, clock=clock, sleep=sleep,
                rng=rng, on_event=on_event, http=http,
            ),
        )  # fmt: skip

    def result(self, timeout: float | None = None) -> Outcome:
        """Block until the operation has an outcome; return it when it succeeded.

        Drives the operation as :func:`waitbound.wait` resumes it (its own deadline,
        budgets and next check time as stored; the completions delivered as ``wait``
        delivers them).

        Args:
            timeout: the most seconds to wait here, or ``None`` for the operation's own
                deadline. When the next request is due later than the timeout allows,
                no request is sent: the call sleeps out the timeout and raises
                :class:`TimedOutError`. A request that is due is sent (bounded by its
                own request timeout).

        Returns:
            The ``succeeded`` :class:`Outcome`.

        Raises:
            TimedOutError: the operation timed out (``outcome.outcome`` ``timed_out``),
                or the caller's *timeout* ran out first (``outcome.done`` false: the
                operation still waits, its own deadline unchanged).
            JobFailedError, EscalatedError: as :meth:`Outcome.raise_for_outcome`.
            OperationNotFoundError: the operation is not in the store.
            UsageError: a negative *timeout*.
        """
        _check_timeout(timeout)
        record = self._record()
        if not record.is_finished:
            clock = self._kit.clock
            end = None if timeout is None else clock.monotonic() + timeout

            nap = self._options.sleep

            def bounded(seconds: float) -> None:
                if end is not None and clock.monotonic() + seconds > end:
                    nap(max(0.0, end - clock.monotonic()))
                    raise _TimeUp
                nap(seconds)

            try:
                steps = loop(self._kit, record)
                record = drive_sync(
                    self._options, steps, self._kit, record.contract.profile, bounded
                )
            except _TimeUp:
                assert timeout is not None
                raise self._timed_out(self._record(), timeout) from None
            options = self._options
            deliver_sync(self._kit, record, options.on_complete, options.notify_secret)
        return self._seen(record).to_outcome().raise_for_outcome()

    def cancel(self, *, reason: str | None = None, requested_by: str | None = None) -> Outcome:
        """Ask the provider to cancel the job (as :func:`waitbound.cancel`, audited) and
        send that cancel request now, without waiting for how the job ends.

        Returns:
            The :class:`Outcome` as it stands after the cancel request's answer.

        Raises:
            OperationNotFoundError: no such operation.
            UsageError: finished already, no cancel action, or not cancelable now.
        """
        kit = self._kit
        record = request_cancel(
            kit.store, kit.clock, self._operation_id, reason=reason, requested_by=requested_by
        )
        if not record.is_finished:
            steps = loop(kit, record, until=one_step())
            record = drive_sync(self._options, steps, kit, record.contract.profile, _no_sleep)
        return self._seen(record).to_outcome()


class AsyncOperationHandle(_Handle):
    """A handle on one operation for async callers (``start_async`` / ``submit_async``).

    As :class:`OperationHandle`; ``result`` and ``cancel`` are coroutines (anyio), and
    a done callback may be a coroutine function (awaited by the task that saw the end).
    ``done``, ``outcome`` and ``status`` read the store and send nothing.
    """

    def __init__(
        self,
        operation_id: str,
        *,
        store: Store,
        headers: Credentials | None = None,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
        sleep: Callable[[float], Awaitable[object]] | None = None,
        rng: random.Random | None = None,
        on_event: EventSink | None = None,
        http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
        on_complete: OnComplete | None = None,
        notify_secret: str | None = None,
    ) -> None:
        self._setup(
            operation_id,
            AsyncOptions(
                store=store, headers=headers, client=client, clock=clock,
                sleep=sleep or anyio.sleep, rng=rng, on_event=on_event, http=http,
                on_complete=on_complete, notify_secret=notify_secret,
            ),
        )  # fmt: skip

    def _setup(self, operation_id: str, options: AsyncOptions) -> None:
        super()._setup(operation_id, options)
        self._options = options
        self._pending: list[Awaitable[object]] = []

    @classmethod
    def from_token(
        cls,
        token: str,
        *,
        store: Store | None = None,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
        sleep: Callable[[float], Awaitable[object]] | None = None,
        rng: random.Random | None = None,
        on_event: EventSink | None = None,
        http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen value
    ) -> AsyncOperationHandle:
        """Rebuild a handle from a continuation token; see
        :meth:`OperationHandle.from_token`."""
        operation_id, spec, schema = _decode_token(token)
        opened = store if store is not None else _reopen(spec, schema)
        if opened.get(operation_id) is None:
            raise OperationNotFoundError(operation_id)
        return cls._of(
            operation_id,
            AsyncOptions(
                store=opened, headers=headers, client=client, clock=clock,
                sleep=sleep or anyio.sleep, rng=rng, on_event=on_event, http=http,
            ),
        )  # fmt: skip

    def _call(self, fn: Callable[..., object]) -> None:
        try:
            returned = fn(self)
        except Exception as exc:  # a callback never breaks the wait
            _LOG.warning(
                "operation %s: a done callback raised %s: %s",
                self._operation_id,
                type(exc).__name__,
                exc,
            )
            return
        if inspect.isawaitable(returned):
            self._pending.append(returned)

    async def _run_pending(self) -> None:
        """Await the async done callbacks the last look fired."""
        due, self._pending = self._pending, []
        for awaitable in due:
            try:
                await awaitable
            except Exception as exc:  # a callback never breaks the wait
                _LOG.warning(
                    "operation %s: a done callback raised %s: %s",
                    self._operation_id,
                    type(exc).__name__,
                    exc,
                )

    async def result(self, timeout: float | None = None) -> Outcome:
        """Wait without blocking the event loop; see :meth:`OperationHandle.result`."""
        _check_timeout(timeout)
        record = self._record()
        if not record.is_finished:
            clock = self._kit.clock
            end = None if timeout is None else clock.monotonic() + timeout
            nap = self._options.sleep

            async def bounded(seconds: float) -> None:
                if end is not None and clock.monotonic() + seconds > end:
                    await nap(max(0.0, end - clock.monotonic()))
                    raise _TimeUp
                await nap(seconds)

            try:
                steps = loop(self._kit, record)
                record = await drive_async(
                    self._options, steps, self._kit, record.contract.profile, bounded
                )
            except _TimeUp:
                assert timeout is not None
                raise self._timed_out(self._record(), timeout) from None
            options = self._options
            await deliver_async(self._kit, record, options.on_complete, options.notify_secret)
        self._seen(record)
        await self._run_pending()
        return record.to_outcome().raise_for_outcome()

    async def cancel(
        self, *, reason: str | None = None, requested_by: str | None = None
    ) -> Outcome:
        """Cancel without blocking the event loop; see :meth:`OperationHandle.cancel`."""
        kit = self._kit
        record = request_cancel(
            kit.store, kit.clock, self._operation_id, reason=reason, requested_by=requested_by
        )
        if not record.is_finished:
            steps = loop(kit, record, until=one_step())
            record = await drive_async(self._options, steps, kit, record.contract.profile, _no_nap)
        self._seen(record)
        await self._run_pending()
        return record.to_outcome()
