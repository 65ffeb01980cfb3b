"""A reserved request's fence, checked by the transport at the last moment.

The engine reserves a request under a lease (``waitbound._engine._lease``) and checks,
when it plans the send, that the lease still covers it. A process frozen after that
check (a GC or VM pause, ``SIGSTOP``, a starved CPU) would send on waking, however long
it slept. So the transport checks the lease again, on the same monotonic clock, right
before a connection is opened for the request and right before the request's bytes are
written: httpcore's ``trace`` request extension calls :meth:`Fence.check` (through
``transports._http``) at ``connect_tcp.started`` (``connect_unix_socket``,
``start_tls``) and at ``send_request_headers.started`` — after that call, h11 serializes
the head and the socket's ``sendall`` runs; nothing else of waitbound's. A client whose
transport does not run httpcore (``httpx.MockTransport``) is checked once, just before
the request is handed to it.

When the check fails the request is not sent and :class:`Fenced` is raised (it is not
one request's transport trouble, so it is never turned into an observation): the
engine releases the reservation (``send_skipped``).

What is left (``docs/stores.md``, "Leases are fences"): a process frozen between this
check and the kernel's send still sends on waking; only the provider can close that
window (an idempotency key or a fencing token it checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from waitbound._base._clock import Clock

__all__ = ["CHECKED_EVENTS", "Fence", "Fenced"]

CHECKED_EVENTS: Final = frozenset(
    {
        "connection.connect_tcp.started",
        "connection.connect_unix_socket.started",
        "connection.start_tls.started",
        "http11.send_request_headers.started",
        "http2.send_request_headers.started",
    }
)
"""httpcore ``trace`` events before which the fence is checked (nothing of the request
has been written when they start)."""


class Fenced(Exception):
    """A reserved request was not sent: its lease no longer covered it when its
    connection was to be opened or its bytes written.

    Attributes:
        left_s: seconds of the fence left when it was checked (negative when past).
        min_s: the least time the request needed left to be sent (seconds).
    """

    def __init__(self, left_s: float, min_s: float) -> None:
        super().__init__(f"the lease had {left_s:.3g}s left before its margin, not {min_s:.3g}s")
        self.left_s = left_s
        self.min_s = min_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Fence:
    """The last moment a reserved request may leave, on the send's monotonic clock.

    Attributes:
        ends_at: the monotonic reading (the ``clock`` handed to the send) by which the
            request must be over: its lease's end less the lease's margin. The
            request's total timeout is cut to end there too.
        min_s: the least time before *ends_at* at which the request may still be sent
            (seconds): the engine's ``MIN_SEND_S``, or the request's whole timeout when
            shorter.
    """

    ends_at: float
    min_s: float

    def left_s(self, clock: Clock) -> float:
        """Seconds left before :attr:`ends_at` by *clock*'s monotonic reading."""
        return self.ends_at - clock.monotonic()

    def check(self, clock: Clock) -> None:
        """Pass when the request may still be sent now.

        Raises:
            Fenced: less than :attr:`min_s` seconds are left before :attr:`ends_at`.
        """
        left_s = self.ends_at - clock.monotonic()
        if left_s < self.min_s:
            raise Fenced(left_s, self.min_s)
