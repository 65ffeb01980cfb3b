"""A command's store: opened for what the command does, the memory store refused where
it means nothing, a store failure or Ctrl-C turned into one line saying how to resume."""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Final, Protocol, TypeVar

from waitbound._base._errors import SchemaVersionError, StoreError, UsageError
from waitbound._base._urls import redact_url
from waitbound.cli._exits import Interrupted, StoreFailed
from waitbound.stores import STORE_ENV, Store, is_postgres_dsn, open_store

_T = TypeVar("_T")


class _Closes(Protocol):
    """What :func:`drive` needs of a command's progress (``cli._progress.Progress``)."""

    def close(self) -> None: ...


def shown_store(spec: str | None) -> str | None:
    """The store as a message or hint may show it: a DSN's password is ``***``."""
    if spec is None:
        return None
    if is_postgres_dsn(spec):
        try:
            from waitbound.stores.postgres import redact_dsn
        except ImportError:
            return redact_url(spec)
        return redact_dsn(spec)
    return spec


def resume_hint(
    operation_id: str, store: str | None, header_names: Sequence[str], command: str = "wait"
) -> str:
    """The command that resumes *operation_id*: its store, and its headers by name only."""
    words = ["waitbound", command, "--operation-id", operation_id]
    shown = shown_store(store)
    if shown is not None:
        words += ["--store", shown]
    hint = shlex.join(words)
    for name in header_names:
        hint += f" --header '{name}: …'"
    return f"`{hint}`"


def _advice(message: str) -> str:
    lowered = message.lower()
    if "full" in lowered:
        return "free disk space"
    if "readonly" in lowered or "read-only" in lowered:
        return "make the store file and its folder writable"
    return "fix the store"


def store_failed(exc: StoreError, then: str) -> StoreFailed:
    """A store failure as one line saying what to do, then *then*."""
    return StoreFailed(f"{exc}; nothing half-written was kept. {_advice(str(exc))}, then {then}")


def _is_usage(exc: StoreError) -> bool:
    return isinstance(exc, UsageError | SchemaVersionError)


MEMORY_EMPTY: Final = "it starts empty, so there is nothing for this command to read or change"
"""Why a command that acts on stored operations refuses the memory store."""


def refuse_memory_store(spec: str | None, why: str | None) -> None:
    """Refuse ``memory:`` (from ``--store`` or ``$WAITBOUND_STORE``) for a command it
    makes meaningless, saying *why*; ``None`` allows it.

    Raises:
        UsageError: the store is ``memory:`` and *why* is given.
    """
    chosen = spec if spec is not None else os.environ.get(STORE_ENV)
    if why is not None and chosen is not None and chosen.strip() == "memory:":
        raise UsageError(
            f"the memory store (memory:) keeps nothing once this command ends: {why}; "
            "give --store a SQLite file or a PostgreSQL DSN"
        )


@contextmanager
def opened_store(
    spec: str | None,
    *,
    create: bool = False,
    read_only: bool = False,
    then: str,
    memory: str | None = MEMORY_EMPTY,
) -> Iterator[Store]:
    """Open the store for what the command does; a store failure names what to do next.

    Only commands that record operations pass ``create``; ``then`` ends the message of a
    store failure ("run the command again", "resume with …"). ``memory`` says why the
    command refuses the memory store (:func:`refuse_memory_store`); ``None`` for the
    commands that finish their operation themselves (``wait URL``, ``run``).
    """
    refuse_memory_store(spec, memory)
    try:
        store = open_store(spec, create=create, read_only=read_only)
    except StoreError as exc:
        if _is_usage(exc):
            raise
        raise store_failed(exc, then) from None
    try:
        yield store
    except StoreError as exc:
        if _is_usage(exc):
            raise
        raise store_failed(exc, then) from None
    finally:
        store.close()


def stop_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt: the record is persisted after every step."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def drive(
    operation_id: str,
    store: str | None,
    action: Callable[[Store], _T],
    *,
    create: bool,
    header_names: Sequence[str] = (),
    progress: _Closes | None = None,
    memory: str | None = MEMORY_EMPTY,
) -> _T:
    """Open the store, run *action* on it, close it; Ctrl-C and store failures say how
    to resume (with the store and the header names, never a value). ``memory`` as for
    :func:`opened_store`."""
    hint = resume_hint(operation_id, store, header_names)
    try:
        with opened_store(
            store, create=create, then=f"resume with {hint}", memory=memory
        ) as opened:
            stop_on_sigterm()
            try:
                return action(opened)
            except KeyboardInterrupt:
                raise Interrupted(hint, operation_id) from None
    finally:
        if progress is not None:
            progress.close()


def header_names(headers: Sequence[tuple[str, str]]) -> list[str]:
    """The names of *headers*, in order, each once."""
    return list(dict.fromkeys(name for name, _ in headers))
