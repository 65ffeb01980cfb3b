"""A command's progress on stderr: story lines as events are persisted and, on a
terminal, a live status line."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from rich.console import Console
from rich.live import Live
from rich.text import Text

from waitbound._model._audit import AuditEvent
from waitbound.cli._render import LiveStatus, StoryGrouper, status_line
from waitbound.stores import Store


class _StatusView:
    """The live line, rendered afresh at each refresh (so the countdown moves)."""

    def __init__(self, status: LiveStatus) -> None:
        self.status = status

    def __rich__(self) -> Text:
        return Text(status_line(self.status, datetime.now(UTC)), no_wrap=True, overflow="ellipsis")


class Progress:
    """Story lines on stderr as events are persisted; on a terminal also a live status line.

    Args:
        enabled: ``--progress`` / ``--quiet``; ``None``: when stderr is a terminal.
        every_event: ``--events``: one line per event instead of one per request.
        as_json: ``--json``; to a pipe, the live line is left out (plain lines only).
        live: whether a live status line may be shown at all (a worker's events are of
            many operations, so it shows plain lines).
        follow: ``--follow``: one line per event of the operation as the store has them,
            in order, others' included (read after each of this process's events);
            shown even when stderr is not a terminal, unless ``--quiet``.
    """

    def __init__(
        self,
        enabled: bool | None,
        *,
        every_event: bool = False,
        as_json: bool = False,
        live: bool = True,
        follow: bool = False,
    ) -> None:
        terminal = sys.stderr.isatty()
        show = (terminal or follow) if enabled is None else enabled
        self.console = Console(stderr=True, highlight=False) if show else None
        self.grouper = StoryGrouper(every_event=every_event or follow)
        self.follow = follow
        self.store: Store | None = None
        self.operation_id = ""
        self.seen = 0
        self.live_allowed = live and show and terminal and not (as_json and not sys.stdout.isatty())
        self.live: Live | None = None
        self.view: _StatusView | None = None

    def start(self, operation_id: str) -> None:
        """Name the operation; on a terminal, start the live status line."""
        self.note(f"operation {operation_id}")
        if self.live_allowed and self.console is not None:
            self.view = _StatusView(LiveStatus(operation_id=operation_id))
            self.live = Live(self.view, console=self.console, refresh_per_second=4, transient=True)
            self.live.start()

    def attach(self, store: Store, operation_id: str) -> None:
        """With ``follow``: read *operation_id*'s events from *store*."""
        self.store, self.operation_id = store, operation_id

    def __call__(self, event: AuditEvent) -> None:
        events = [event]
        if self.follow and self.store is not None:
            # This process's event is persisted: the store has it, after what others wrote.
            stored = [e for e in self.store.audit(self.operation_id) if e.seq > self.seen]
            if stored:
                self.seen = stored[-1].seq
                events = [e.event for e in stored]
        for each in events:
            if self.view is not None:
                self.view.status = self.view.status.after(each)
            for line in self.grouper.push(each):
                self.note(line)

    def note(self, text: str) -> None:
        """Print one line (above the live line, when there is one)."""
        if self.console is not None:
            self.console.print(text, markup=False, soft_wrap=True)

    def close(self) -> None:
        """Print what is held back and stop the live line."""
        for line in self.grouper.flush():
            self.note(line)
        if self.live is not None:
            self.live.stop()
            self.live = None
