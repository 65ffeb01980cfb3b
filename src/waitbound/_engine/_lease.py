"""A reservation's lease, as the engine holds it: its fence and its owner.

A reserved request is sent only while its lease holds (:class:`Lease`, the fence the
exchange checks in ``waitbound._engine._driver``); a lease's owner is a process
(:func:`new_owner`), and a lease whose owner ran here in a process now gone need not
be waited out (:func:`holder_is_gone`). See ``docs/stores.md`` ("Leases are fences").
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime

from waitbound._base._clock import Clock
from waitbound._model._record import Record, RequestKind

__all__ = ["Lease", "holder_is_gone", "lease_of", "new_owner"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """One reservation's fence: what identifies it in the store, and how long it holds.

    The fencing token is ``(owner, kind, expires_at)`` as the reservation stored it: a
    later reservation of the operation (by another worker, or by this one after the
    lease ran out) always stores another, so a record that still carries this token is
    still this reservation's. Its time left is measured on this process's monotonic
    clock from *started*, read just before the reservation's ``now`` (so the time the
    reservation's own transaction took counts against it); the stored ``expires_at`` is
    wall time, which the other workers compare with their own clocks.
    """

    owner: str
    kind: RequestKind
    expires_at: datetime
    length_s: float
    started: float

    def left_s(self, clock: Clock) -> float:
        """Seconds of the lease left now, by *clock*'s monotonic reading."""
        return self.length_s - (clock.monotonic() - self.started)

    def holds(self, record: Record | None) -> bool:
        """Whether *record* (as stored now) still carries this reservation."""
        return (
            record is not None
            and record.lease.lease_owner == self.owner
            and record.lease.in_flight == self.kind
            and record.lease.lease_expires_at == self.expires_at
        )


def lease_of(reserved: Record, now: datetime, started: float) -> Lease:
    """The fence of the reservation *reserved* (as stored), planned at *now*, whose
    monotonic reading just before *now* was *started*."""
    assert reserved.lease.in_flight is not None
    assert reserved.lease.lease_owner is not None
    expires_at = reserved.lease.lease_expires_at or now
    return Lease(
        owner=reserved.lease.lease_owner,
        kind=reserved.lease.in_flight,
        expires_at=expires_at,
        length_s=(expires_at - now).total_seconds(),
        started=started,
    )


def new_owner() -> str:
    """A lease owner id for this process: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def holder_is_gone(owner: str | None) -> bool:
    """Whether a lease holder ran on this machine in a process that no longer exists.

    Such a lease (left by a killed ``waitbound wait``) need not be waited out. A holder
    on another machine, or one that cannot be checked, is presumed alive until expiry.
    """
    host, _, rest = (owner or "").partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False
