"""The CLI's exit codes, and the errors a command ends with that are its own (Ctrl-C,
a failed store): what ``waitbound.cli.run`` turns into a code."""

from __future__ import annotations

from typing import Final

from waitbound._base._errors import WaitboundError

EXIT_SUCCEEDED: Final = 0
EXIT_NOT_SUCCEEDED: Final = 1
EXIT_USAGE: Final = 2
EXIT_STOPPED: Final = 3
EXIT_STILL_WAITING: Final = 4
EXIT_STORE: Final = 5
EXIT_AUDIT_BROKEN: Final = 6
EXIT_INTERRUPTED: Final = 130

EXIT_CODES_HELP: Final = (
    "Exit codes: 0 succeeded; 1 completed_with_errors, failed, canceled or expired; "
    "2 a usage or configuration error (nothing stored); 3 timed_out or escalated; "
    "4 still waiting (--detach, cancel --no-wait); 5 the store failed (disk full, "
    "read-only, unreachable); 6 an audit chain is broken (audit verify, show, audit "
    "story); 130 interrupted (the operation is saved)."
)


class Interrupted(WaitboundError):
    """Ctrl-C or SIGTERM while driving an operation; the record is saved."""

    def __init__(self, hint: str, operation_id: str) -> None:
        self.operation_id = operation_id
        super().__init__(f"interrupted; operation {operation_id} is saved: resume it with {hint}")


class StoreFailed(WaitboundError):
    """The store failed under a command (disk full, read-only, unreachable); exit 5."""
