"""A token bucket on an injected clock: the per-origin rate limit of the worker and of
a fan-in group's scheduler."""

from __future__ import annotations

from typing import Final

from waitbound._base._clock import Clock

__all__ = ["MIN_TOKEN_WAIT_S", "TokenBucket"]

MIN_TOKEN_WAIT_S: Final = 0.001
"""The shortest wait for a token, in seconds."""


class TokenBucket:
    """``rate`` tokens a second (refilled on *clock*'s monotonic reading), at most
    ``burst`` saved up; full when made. Not thread-safe: its owner locks."""

    def __init__(self, rate: float, burst: int, clock: Clock) -> None:
        self.rate, self.burst, self.clock = rate, float(burst), clock
        self.tokens = float(burst)
        self.at = clock.monotonic()

    def take(self) -> float:
        """Take a token if one is there now (return 0); else take none and return how
        long until one is (seconds, at least :data:`MIN_TOKEN_WAIT_S`)."""
        now = self.clock.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        # At least a millisecond: a rounding error's wait would otherwise be too short
        # to move a clock (a virtual one, or a coarse monotonic one) at all.
        return max(MIN_TOKEN_WAIT_S, (1 - self.tokens) / self.rate)
