"""``watch``: follow one operation's audit events live from ``waitbound serve`` (SSE,
with ``httpx-sse``), resuming with ``Last-Event-ID`` after a dropped connection; and the
story line each event prints as (:func:`print_event_line`, for ``wait --follow`` too).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Final
from urllib.parse import quote

import click
import httpx

from waitbound._base._errors import OperationNotFoundError, UsageError, WaitboundError
from waitbound._base._json import JSON
from waitbound._model._audit import AuditEvent
from waitbound._model._outcome import OutcomeKind
from waitbound.cli._exits import EXIT_CODES_HELP, EXIT_STILL_WAITING
from waitbound.cli._params import STORED_TEXT
from waitbound.cli._render import printable, story_line
from waitbound.cli._tokens import DEFAULT_PORT, TOKEN_FILE_HELP, default_token_file, read_token

__all__ = [
    "RETRIES",
    "StreamLost",
    "event_from_json",
    "follow",
    "outcome_exit_code",
    "print_event_line",
    "watch",
]

RETRIES: Final = 5
"""Reconnects in a row without an event before ``watch`` gives up."""
BACKOFF_S: Final = 0.5
"""The first pause before a reconnect (seconds); doubled each time, up to MAX_BACKOFF_S."""
MAX_BACKOFF_S: Final = 8.0
READ_TIMEOUT_S: Final = 60.0
"""A stream silent this long (no event, no keep-alive comment) is taken as dropped."""
_END: Final = "end"


class StreamLost(WaitboundError):
    """The event stream could not be (re)opened within the retries."""


def print_event_line(event: AuditEvent, seq: int | None = None, *, err: bool = False) -> None:
    """Print *event* as one story line (as ``show --events`` does), numbered by *seq*
    when given; on stderr with *err* (``wait --follow`` keeps stdout for the outcome)."""
    line = story_line(event)
    click.echo(f"  {seq:>7} {line}" if seq is not None else line, err=err)


def event_from_json(payload: Mapping[str, JSON]) -> tuple[AuditEvent, int]:
    """The audit event and its seq from an SSE ``data:`` object.

    Raises:
        ValueError: not the object the service sends.
    """
    at, kind, summary, seq, data = (
        payload.get("at"),
        payload.get("kind"),
        payload.get("summary"),
        payload.get("seq"),
        payload.get("data"),
    )
    if not (
        isinstance(at, str)
        and isinstance(kind, str)
        and isinstance(summary, str)
        and isinstance(seq, int)
        and isinstance(data, dict)
    ):
        raise ValueError("an event without at, kind, summary, seq and data")
    moment = datetime.fromisoformat(at)
    return AuditEvent(at=moment, kind=kind, summary=summary, data=data), seq


def outcome_exit_code(outcome: Mapping[str, JSON]) -> int:
    """The exit code of an outcome object (``Outcome.exit_code``: 0, 1, 3; 4 without one)."""
    value = outcome.get("outcome")
    try:
        return OutcomeKind(value).exit_code if isinstance(value, str) else EXIT_STILL_WAITING
    except ValueError:
        return EXIT_STILL_WAITING


def _refused(response: httpx.Response, operation_id: str, url: str) -> WaitboundError | None:
    """The error a final (non-retryable) answer means; ``None`` for 200 or a 5xx."""
    if response.status_code == 200 or response.status_code >= 500:
        return None
    response.read()
    try:
        detail = str(response.json().get("detail", ""))
    except (ValueError, AttributeError):
        detail = ""
    if response.status_code == 401:
        return UsageError(
            f"the service at {url} refused the token (401); give the --token-file that "
            "waitbound serve uses"
        )
    if response.status_code == 404:
        return OperationNotFoundError(operation_id)
    return UsageError(
        f"the service at {url} answered {response.status_code}: {printable(detail)[:200]}"
    )


def follow(
    client: httpx.Client,
    url: str,
    operation_id: str,
    token: str,
    *,
    on_event: Callable[[AuditEvent, int], None],
    sleep: Callable[[float], object] = time.sleep,
    retries: int = RETRIES,
) -> dict[str, JSON]:
    """Follow *operation_id*'s events from the service at *url* until its ``end``.

    Each event is passed to *on_event* once, in seq order. A dropped connection, a
    stream that ends early, or a 5xx is followed by a reconnect with ``Last-Event-ID``
    (pauses of 0.5, 1, 2, 4, 8 s); *retries* failures in a row without an event give up.

    Returns:
        The outcome object of the ``end`` event (as ``waitbound wait --json`` prints it).

    Raises:
        UsageError: the token was refused, or another 4xx.
        OperationNotFoundError: no such operation.
        StreamLost: the stream could not be reopened.
    """
    try:
        from httpx_sse import SSEError, connect_sse
    except ImportError:
        raise UsageError(
            "waitbound watch needs the serve extra (httpx-sse); install it with: "
            "pip install 'waitbound[serve]'"
        ) from None

    target = f"{url.rstrip('/')}/operations/{quote(operation_id, safe='')}/events"
    last_seq = 0
    failures = 0
    while True:
        headers = {"Authorization": f"Bearer {token}"}
        if last_seq:
            headers["Last-Event-ID"] = str(last_seq)
        refused: WaitboundError | None = None
        try:
            with connect_sse(client, "GET", target, headers=headers) as source:
                refused = _refused(source.response, operation_id, url)
                if refused is None and source.response.status_code != 200:
                    raise SSEError(f"answer {source.response.status_code}")
                for message in source.iter_sse() if refused is None else ():
                    if message.event == _END:
                        outcome = json.loads(message.data)
                        if not isinstance(outcome, dict):
                            raise ValueError("an end event without an outcome")
                        return outcome
                    event, seq = event_from_json(json.loads(message.data))
                    failures = 0
                    if seq > last_seq:
                        last_seq = seq
                        on_event(event, seq)
            lost = "the stream ended before the outcome"
        except (httpx.TransportError, SSEError, ValueError) as exc:
            lost = f"{type(exc).__name__}: {printable(str(exc))[:200]}"
        if refused is not None:
            raise refused
        failures += 1
        if failures > retries:
            raise StreamLost(
                f"lost the event stream of {operation_id} from {url} ({lost}); gave up after "
                f"{retries} reconnects. Is waitbound serve running? Run watch again to resume"
            )
        sleep(min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (failures - 1)))


@click.command(
    help="Print an operation's audit events live, one story line each, from a running "
    "`waitbound serve`; exit with the outcome's code once it is final.\n\n"
    "A dropped connection is resumed where it stopped (Last-Event-ID), a few times with "
    "backoff.\n\n" + EXIT_CODES_HELP
)
@click.argument("operation_id", type=STORED_TEXT)
@click.option(
    "--url",
    default=f"http://127.0.0.1:{DEFAULT_PORT}",
    show_default=True,
    help="Where waitbound serve listens.",
)
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), help=TOKEN_FILE_HELP)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object per line: each event as the stream sends it, then the outcome "
    "(as wait --json prints it).",
)
def watch(operation_id: str, url: str, token_file: Path | None, as_json: bool) -> int:
    token = read_token(token_file or default_token_file())

    def on_event(event: AuditEvent, seq: int) -> None:
        if as_json:
            click.echo(json.dumps(event.payload(operation_id, seq), ensure_ascii=False))
        else:
            print_event_line(event, seq)

    timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_S)
    with httpx.Client(timeout=timeout, follow_redirects=False) as client:
        outcome = follow(client, url, operation_id, token, on_event=on_event)
    if as_json:
        click.echo(json.dumps(outcome, ensure_ascii=False))
    else:
        reason = f" ({outcome['reason']})" if outcome.get("reason") else ""
        status = outcome.get("outcome") or "still waiting"
        click.echo(f"{operation_id}: {status}{reason}")
        if isinstance(outcome.get("message"), str):
            click.echo(printable(str(outcome["message"])))
    return outcome_exit_code(outcome)
