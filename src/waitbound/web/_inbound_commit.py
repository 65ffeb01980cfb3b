"""The webhook receiver's group commit: verified deliveries stored many to a transaction.

Every delivery the receiver verified is handed to :meth:`InboundCommit.put`; the
deliveries waiting at once are stored together by one ``Store.put_deliveries`` (one
transaction, in a thread), with the worker's commit pause (``waitbound._engine._group_commit``:
once one is queued, wait up to ``pause_s`` for the other requests the receiver is
handling, at once when all of them queued). Each request is answered only once the
transaction holding its delivery committed, so an acknowledged delivery is never lost;
a duplicate (an id stored already, or earlier in the same batch) is answered as a
duplicate. A batch that fails is stored again one delivery at a time, so one delivery
the store refuses fails only its own request.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager

import anyio

from waitbound._engine._group_commit import DEFAULT_COMMIT_PAUSE_S, GroupCommit, Offload, in_thread
from waitbound._model._push import InboundDelivery
from waitbound.stores import Store

__all__ = ["InboundCommit", "Stored"]

Stored = InboundDelivery | None | Exception
"""What storing one delivery gave: the delivery as stored, ``None`` for a duplicate, or
the store's failure for it."""


class InboundCommit:
    """The receiver's group commit (one per ``Service``).

    Args:
        pause_s: the commit pause (seconds; 0: store what is waiting at once).
        offload: how the store is called (:func:`waitbound._engine._group_commit.in_thread`).
        sleep: the pause's sleep (``anyio.sleep``).
    """

    def __init__(
        self,
        pause_s: float = DEFAULT_COMMIT_PAUSE_S,
        *,
        offload: Offload = in_thread,
        sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
    ) -> None:
        self.pause_s, self.offload, self.sleep = pause_s, offload, sleep
        self.in_flight = 0
        """Webhook requests being handled now (their deliveries may still come)."""
        self._groups: dict[int, GroupCommit[InboundDelivery, Stored]] = {}

    def group(self, store: Store) -> GroupCommit[InboundDelivery, Stored]:
        """The group commit of *store* (made on first use, inside the event loop)."""
        found = self._groups.get(id(store))
        if found is None:
            found = GroupCommit(
                functools.partial(_write, store),
                self.offload,
                pause_s=self.pause_s,
                sleep=self.sleep,
                in_flight=lambda: self.in_flight,
            )
            self._groups[id(store)] = found
        return found

    @contextmanager
    def handling(self, store: Store) -> Iterator[None]:
        """Count one webhook request in flight for the block."""
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            group = self._groups.get(id(store))
            if group is not None:
                group.check()  # one request fewer to wait for

    async def put(self, store: Store, delivery: InboundDelivery) -> InboundDelivery | None:
        """Store *delivery* with the next batch; return it as stored (``None``: a
        duplicate) once that batch committed.

        Raises:
            Exception: the store failed for this delivery (nothing of it was stored).
        """
        stored = await self.group(store).put(delivery)
        if isinstance(stored, Exception):
            raise stored
        return stored


def _write(store: Store, deliveries: Sequence[InboundDelivery]) -> list[Stored]:
    """Store a batch in one transaction; when that fails, each delivery on its own."""
    try:
        return list(store.put_deliveries(deliveries))
    except Exception:
        if len(deliveries) == 1:
            raise
    return [_one(store, delivery) for delivery in deliveries]


def _one(store: Store, delivery: InboundDelivery) -> Stored:
    try:
        return store.put_delivery(delivery)
    except Exception as exc:  # this delivery's request answers 503
        return exc
