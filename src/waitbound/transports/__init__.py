"""Transports: send one planned request with httpx and return an Observation."""

from waitbound.transports._http import HttpSettings, send_async, send_sync

__all__ = ["HttpSettings", "send_async", "send_sync"]
