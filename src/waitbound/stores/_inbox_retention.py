"""Pruning the webhook inbox (``waitbound serve``'s ``[inbox] retention_days``): the
deliveries received before a cutoff that are done with — applied to their operation,
or never matched to one — are deleted; one that is matched and still waiting to be
applied is kept whatever its age. Each store does it in one of its transactions
(:class:`~waitbound.stores._protocol.InboxPruning`; the SQL stores share
``_inbox_rows``); the records' ``Store`` protocol is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from waitbound._base._clock import utc
from waitbound._base._errors import UsageError
from waitbound.stores._protocol import InboxPruning, Store

__all__ = ["InboxCount", "prune_inbox"]


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxCount:
    """What a prune did: ``pruned`` deliveries deleted, ``kept`` left in the inbox."""

    pruned: int
    kept: int


def prune_inbox(store: Store, *, before: datetime) -> InboxCount:
    """Delete the inbox's deliveries received before *before* that were applied or never
    matched; count what is left.

    Raises:
        StoreError: the store failed (nothing is deleted).
        UsageError: a store kind that keeps no inbox this knows.
    """
    if not isinstance(store, InboxPruning):
        raise UsageError(f"a {type(store).__name__} keeps no inbox this can prune")
    pruned, kept = store.prune_inbox(before=utc(before))
    return InboxCount(pruned=pruned, kept=kept)
