"""Credentials bound to places: the one rule of where a caller's headers may go.

A record in a shared store is written by whoever can write to the store, so what a
record says is never a reason to send a credential somewhere. A process that holds
credentials for many operations (``waitbound worker --header-for ORIGIN`` or
``--credentials FILE``, ``waitbound serve``'s worker, the MCP server's providers) binds
each set of headers to configured *places* — an origin (scheme, host, port; RFC 6454)
and a path prefix — and a request carries them only when its own URL is in one of
those places, whatever the record names or trusts.

A binding may also be *exclusive* to a label (the MCP server's ``mcp:PROVIDER``): an
operation with that label is driven only inside its provider's places. A request it
plans anywhere else is not sent at all, not even without headers (the record is
hostile, or its provider sent it somewhere the configuration does not name): the
operation is escalated ``integration_failure`` in one line.

Callers hand a :class:`BoundCredentials` wherever ``headers`` are taken (the drivers'
``Credentials``); :func:`headers_for` and :func:`refuse_outside` are what the drivers
ask. A plain mapping or function (a program's own ``wait`` or ``check``) keeps the
older rule: sent to the origins its record trusts (``Record.trusts``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final
from urllib.parse import unquote

import httpx

from waitbound._base._urls import checked_url, origin, redact_url
from waitbound._model._outcome import Reason
from waitbound._model._record import Record
from waitbound._rules._controller import Decision, Finish, Send, Transition
from waitbound._rules._finish import escalate

__all__ = [
    "Binding",
    "BoundCredentials",
    "Origin",
    "Place",
    "credentials_note",
    "headers_for",
    "origin_of",
    "refuse_outside",
]

Origin = tuple[str, str, int]
"""An origin: scheme, lower-case host, port (the scheme's default filled in)."""

_UNSAFE_SEGMENTS: Final = frozenset({".", ".."})


def origin_of(url: str) -> Origin | None:
    """The origin of an http(s) *url* as httpx reads it, or ``None`` when it has none."""
    try:
        scheme, host, port = origin(checked_url(url))
    except ValueError:
        return None
    return (scheme, host, port) if host is not None and port is not None else None


def _segments(url: str) -> tuple[str, ...] | None:
    """The path segments of *url* as sent (percent-escapes kept), or ``None`` when a
    segment could mean something else to a server that decodes it: ``.`` or ``..``
    escaped (``%2e%2e``), or an escaped ``/`` or ``\\`` inside one segment."""
    try:
        raw = httpx.URL(url).raw_path.split(b"?", 1)[0].decode("ascii")
    except (httpx.InvalidURL, ValueError, TypeError, UnicodeDecodeError):
        return None
    parts = tuple(raw.split("/")[1:])
    for part in parts:
        decoded = unquote(part)
        if decoded in _UNSAFE_SEGMENTS or "/" in decoded or "\\" in decoded:
            return None
    return parts


@dataclass(frozen=True, slots=True)
class Place:
    """Where bound credentials may go: an origin, and a path prefix under it.

    Attributes:
        origin: scheme, host, port.
        path: the prefix, whole segments (``/v1`` holds ``/v1`` and ``/v1/runs``,
            never ``/v1x``); ``""`` holds the whole origin.
    """

    origin: Origin
    path: str = ""

    @classmethod
    def of(cls, url: str) -> Place:
        """The place of a base URL: its origin and its path (a trailing ``/`` dropped).

        Raises:
            ValueError: *url* has no http(s) origin, or a path that could be read two ways.
        """
        found = origin_of(url)
        segments = _segments(url) if found is not None else None
        if found is None or segments is None:
            raise ValueError(f"{redact_url(url)!r} is not a base URL credentials can bind to")
        return cls(found, "/".join(("", *segments)).rstrip("/"))

    def holds(self, url: str) -> bool:
        """Whether *url* is in this place: the same origin, and a path of whole segments
        under :attr:`path` (``..`` or escaped separators never count as under it)."""
        if origin_of(url) != self.origin:
            return False
        if not self.path:
            return True
        segments = _segments(url)
        if segments is None:
            return False
        mine = tuple(self.path.split("/")[1:])
        return segments[: len(mine)] == mine

    def show(self) -> str:
        """The place as text: ``https://api.example.com:443/v1``."""
        scheme, host, port = self.origin
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}{self.path}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    """One set of headers and the places it may go.

    Attributes:
        headers: sent to :attr:`places` only; never stored.
        places: where they may go; the first is the home (a provider's ``base_url``).
        label: the operations it serves (``None``: any operation).
        exclusive: an operation with :attr:`label` is driven inside :attr:`places`
            only: a request it plans elsewhere is refused, not sent.
        name: what the operation's story calls the binding (``provider reports``).
    """

    headers: Mapping[str, str] = field(repr=False)
    places: tuple[Place, ...]
    label: str | None = None
    exclusive: bool = False
    name: str = "the configured credentials"


@dataclass(frozen=True, slots=True)
class BoundCredentials:
    """Headers bound to configured places; see the module docstring.

    Attributes:
        bindings: tried in order; one with the record's label before one for any.
    """

    bindings: tuple[Binding, ...] = field(default=())

    @classmethod
    def by_origin(cls, table: Mapping[Origin, Mapping[str, str]]) -> BoundCredentials:
        """Headers per origin (``--header-for``, ``--credentials``), for any operation."""
        return cls(
            tuple(
                Binding(headers=dict(headers), places=(Place(found),))
                for found, headers in table.items()
            )
        )

    def __call__(self, record: Record) -> Mapping[str, str]:
        """The headers *record*'s own URL (its submit URL, else its status URL) gets."""
        return self.for_request(
            record, record.submission.submit_url or record.submission.status_url or ""
        )

    def binding(self, record: Record, url: str) -> Binding | None:
        """The binding whose places hold *url* for *record*, or ``None``."""
        mine = [
            b for b in self.bindings if b.label is not None and b.label == record.contract.label
        ]
        for candidate in (*mine, *(b for b in self.bindings if b.label is None)):
            if any(place.holds(url) for place in candidate.places):
                return candidate
        return None

    def for_request(self, record: Record, url: str) -> Mapping[str, str]:
        """The headers a request of *record* to *url* carries: those of the binding
        that holds *url*; none when no binding does (whatever the record trusts)."""
        found = self.binding(record, url)
        return found.headers if found is not None else {}

    def refusal(self, record: Record, url: str, kind: str) -> str | None:
        """Why *record*'s *kind* request to *url* must not be sent at all (an exclusive
        binding of its label does not hold *url*), in one line; ``None``: it may go."""
        for bound in self.bindings:
            if not bound.exclusive or bound.label != record.contract.label:
                continue
            if any(place.holds(url) for place in bound.places):
                return None
            where = " or ".join(place.show() for place in bound.places)
            return (
                f"refused to send its {kind} request: {redact_url(url)} is not under "
                f"{where}, where {bound.name}'s credentials and requests go; nothing was "
                "sent. The record names a URL its configuration does not: check who "
                "wrote it to the store"
            )
        return None


def headers_for(
    headers: Callable[[Record], Mapping[str, str]], record: Record, url: str
) -> Mapping[str, str]:
    """The caller's headers for *record*'s request to *url*: the one rule every driver
    asks. Bound credentials go only where they are bound (:meth:`BoundCredentials.
    for_request`); a plain mapping or function of the caller's own goes to the origins
    *record* trusts (``Record.trusts``)."""
    if isinstance(headers, BoundCredentials):
        return headers.for_request(record, url)
    return headers(record) if record.trusts(url) else {}


def credentials_note(
    headers: Callable[[Record], Mapping[str, str]],
    record: Record,
    url: str,
    *,
    kind: str,
    per_origin: bool,
) -> str | None:
    """What the story of *record*'s *kind* request to *url* says of the caller's
    credentials, derived from the headers :func:`headers_for` gives that request (the
    one decision, so the story and the request never disagree); ``None``: nothing worth
    saying (sent to the operation's own origins, or none configured there).

    *per_origin*: the caller gives each operation its own credentials (a function, or
    :class:`BoundCredentials`), so a request to a trusted origin that carries none
    (none held for it) is worth a note.
    """
    sent = bool(headers_for(headers, record, url))
    trusted = record.trusts(url)
    if sent:  # bound there: sent, whatever the record trusts
        if trusted:
            return None
        return f"to {redact_url(url)} with the caller's credentials (bound to that place)"
    if not trusted:
        return f"to {redact_url(url)} without the caller's credentials (another origin)"
    if not per_origin or kind == "submit":
        return None
    if isinstance(headers, BoundCredentials) and headers.binding(record, url) is not None:
        return None  # bound there, with no headers to send (none configured)
    return "without the caller's credentials (none held for this origin)"


def refuse_outside(
    decision: Decision,
    headers: Callable[[Record], Mapping[str, str]] | None,
    record: Record,
    now: datetime,
) -> Decision:
    """*decision*, unless it sends a request that bound credentials refuse (see
    :meth:`BoundCredentials.refusal`): then the operation is escalated
    ``integration_failure`` instead, and nothing is reserved or sent."""
    if not isinstance(decision, Send) or not isinstance(headers, BoundCredentials):
        return decision
    why = headers.refusal(record, decision.request.url, decision.request.kind)
    if why is None:
        return decision
    cleared = record.evolve(lease=record.lease.released())
    step = escalate(cleared, now, Reason.INTEGRATION_FAILURE, why)
    return Finish(transition=Transition(record=step.record, events=(step.event(now),)))
