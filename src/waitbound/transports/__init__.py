"""Transports: send one planned request with httpx and return an Observation; the
clients waitbound builds itself (one shared per process, one per event loop)."""

from waitbound.transports._clients import (
    borrow_async_client,
    borrow_client,
    new_async_client,
    new_client,
    shared_client,
    worker_limits,
)
from waitbound.transports._fence import Fence, Fenced
from waitbound.transports._http import HttpSettings, send_async, send_sync
from waitbound.transports._pool import ShardedTransport

__all__ = [
    "Fence",
    "Fenced",
    "HttpSettings",
    "ShardedTransport",
    "borrow_async_client",
    "borrow_client",
    "new_async_client",
    "new_client",
    "send_async",
    "send_sync",
    "shared_client",
    "worker_limits",
]
