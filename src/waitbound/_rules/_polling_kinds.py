"""One reader per polling-URL kind: the five questions a polling URL answers.

A polling URL has a kind (:class:`~waitbound._profile._protocol.UrlKind`): a status
monitor, a ``Location`` URL, or the resource itself. As azure-core's ``base_polling.py``
gives each kind one class (``OperationResourcePolling``, ``LocationPolling``, ARM's
body-content polling of the original URI), each kind here is one
:class:`PollingKind`, and the answer modules ask it instead of testing the kind:

1. **can it poll this answer** (:meth:`PollingKind.can_poll`): whether the submission's
   own answer is an answer of this kind, read whole (the resource, for a PUT or PATCH
   whose original URI is polled);
2. **which URL to poll next** (:meth:`PollingKind.next_url`): the URL an answer names in
   the header that named the polling URL, else the same one;
3. **what status an answer says** (:meth:`PollingKind.status`, :meth:`PollingKind.read`):
   by the kind's state table (an exact code row, the body's state, the
   ``when_no_state`` row);
4. **where the final result is** (:attr:`PollingKind.final_here`,
   :meth:`PollingKind.final_url`, :attr:`PollingKind.resource`): this URL's terminal
   answer, or the place ``final-state-via`` names after a status monitor's success;
5. **whether the polling URL moved** (:meth:`PollingKind.moved`).

:func:`polling_kind` picks the reader of a record's polling URL and
:func:`first_answer_reader` the reader of its first answer. Pure (the rules atop
``_controller.py``): no clock, socket or store.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, Final

from waitbound._base._json import JSON
from waitbound._base._urls import resolve, shown_url
from waitbound._model._observation import Observation
from waitbound._model._record import Record
from waitbound._profile._contract import Classification, Reading, StateTable
from waitbound._profile._protocol import UrlKind, final_url

__all__ = [
    "LOCATION",
    "RESOURCE",
    "STATUS_MONITOR",
    "LocationPolling",
    "PollingKind",
    "ResourcePolling",
    "StatusMonitorPolling",
    "UnusablePollingUrl",
    "first_answer_reader",
    "polling_kind",
    "reader_of",
]


class UnusablePollingUrl(ValueError):
    """An answer named a polling URL that cannot be used (its message says which and why)."""


class PollingKind:
    """How one kind of polling URL is read: the five questions (see the module docstring).

    The readers hold no state: one instance per kind (:data:`STATUS_MONITOR`,
    :data:`LOCATION`, :data:`RESOURCE`), each question asked with the record.
    """

    kind: ClassVar[UrlKind]
    """The kind this reader reads."""
    name: ClassVar[str]
    """The URL in words (``"status URL"``, ``"location URL"``, ``"resource URL"``)."""
    aside: ClassVar[str]
    """How the first answer's ``scheduled`` sentence names the kind after the URL
    (``""`` for a status monitor, ``" (location URL)"``)."""
    final_here: ClassVar[bool]
    """Whether this URL's terminal answer is itself the final state (its body the
    result document), so nothing is fetched after it unless the caller named a result URL."""
    resource: ClassVar[bool] = False
    """Whether this URL is the resource itself, so an answer read as the final state must
    be a document (an empty one is no evidence of success)."""
    names_the_job: ClassVar[bool] = False
    """Whether a job id in this URL's body is the job's (a status monitor's), so one that
    differs is another job; a ``location`` or ``resource`` body is another resource, whose
    ``id`` is not the job's."""

    def can_poll(self, record: Record) -> bool:
        """Whether the submission's own answer is an answer of this kind, read whole by
        :meth:`read` (see :func:`first_answer_reader`)."""
        return False

    def table(self, record: Record) -> StateTable:
        """The state table of this kind in *record*'s profile (the status monitor's when
        the profile has none for it)."""
        return record.contract.profile.table(self.kind)

    def read(self, record: Record, body: JSON) -> Reading:
        """What *record*'s profile reads from one parsed answer body of this kind."""
        return record.contract.profile.read(body, self.kind)

    def status(
        self, record: Record, observation: Observation, reading: Reading | None
    ) -> Classification | None:
        """The class this kind's state table gives an answer: an exact code row, the
        body's state (*reading*), or the ``when_no_state`` row for a body (possibly
        empty) without one; ``None`` when none applies (no answer, an unreadable body)."""
        table = self.table(record)
        code = observation.http_status
        if code is None or observation.body_problem is not None:
            return None
        if (by_code := table.by_code(code)) is not None:
            return by_code
        found = reading.classification if reading is not None else None
        return found if found is not None else table.when_no_state.get(code)

    def next_url(self, record: Record, observation: Observation) -> str | None:
        """The polling URL the next status request goes to: the URL a status answer
        names in the header that named the polling URL (``record.poll_header``; a new
        ``Location`` on every 202), resolved against the polling URL with the
        profile's query parameters carried; else ``record.status_url``.

        Raises:
            UnusablePollingUrl: the header names a URL that cannot be used.
        """
        header = record.submission.poll_header
        named = observation.headers.get(header) if header and observation.kind == "status" else None
        if not named:
            return record.submission.status_url
        try:
            return record.contract.profile.submit.carried(
                resolve(record.submission.status_url or "", named), record.submission.submit_url
            )
        except ValueError as exc:
            raise UnusablePollingUrl(
                f"the {header} header named a polling URL {shown_url(named)} that cannot be "
                f"used ({exc})"
            ) from exc

    def moved(self, record: Record, url: str | None) -> bool:
        """Whether *url* (from :meth:`next_url`) moves *record*'s polling URL."""
        return url is not None and url != record.submission.status_url

    def final_url(self, record: Record, monitor_result_url: str | None) -> str | None:
        """Where the final state is fetched once after this URL reported success
        (absolute), or ``None`` when nothing is fetched. Asked only when this URL's
        answer is not itself the final state (:attr:`final_here` false)."""
        return None


class StatusMonitorPolling(PollingKind):
    """A status monitor (``Azure-AsyncOperation``, ``Operation-Location``, a job's status
    URL): read by its body's state; after a success the final state is where
    ``final-state-via`` (or the method's default) says, or the monitor itself."""

    kind = UrlKind.STATUS
    name = "status URL"
    aside = ""
    final_here = False
    names_the_job = True

    def can_poll(self, record: Record) -> bool:
        """Always: a first answer no other kind reads whole is read as a status body."""
        return True

    def final_url(self, record: Record, monitor_result_url: str | None) -> str | None:
        """Where ``final-state-via`` puts the final state (``_protocol.final_url``): the
        caller's or the profile's choice, the monitor's own result URL
        (*monitor_result_url*), then the method's default; ``None`` when the monitor
        is the final state."""
        contract = record.contract.profile.submit
        return final_url(
            method=record.submission.submit_method,
            request_url=record.submission.submit_url,
            location_url=record.submission.location_url,
            monitor_result_url=monitor_result_url,
            via=record.contract.final_state_via or contract.final_state_via,
            by_method=contract.final_get,
        )


class LocationPolling(PollingKind):
    """A ``Location`` URL: read by status code (202 running; 200/201/204 done), its
    terminal answer's body (possibly empty) the result."""

    kind = UrlKind.LOCATION
    name = "location URL"
    aside = " (location URL)"
    final_here = True


class ResourcePolling(PollingKind):
    """The resource itself (the original-URI pattern): read by its provisioning state;
    its terminal answer is the final state and must hold the resource."""

    kind = UrlKind.RESOURCE
    name = "resource URL"
    aside = " (resource URL)"
    final_here = True
    resource = True

    def can_poll(self, record: Record) -> bool:
        """Whether the profile polls the original URI for the submission's method (a PUT
        or PATCH at Azure): its first answer is then the resource's, read whole."""
        return any(
            source.kind is UrlKind.RESOURCE
            and record.submission.submit_method in source.request_methods
            for source in record.contract.profile.submit.polling
        )


STATUS_MONITOR: Final = StatusMonitorPolling()
LOCATION: Final = LocationPolling()
RESOURCE: Final = ResourcePolling()

_READERS: Final[Mapping[UrlKind, PollingKind]] = MappingProxyType(
    {reader.kind: reader for reader in (STATUS_MONITOR, LOCATION, RESOURCE)}
)


def reader_of(kind: UrlKind) -> PollingKind:
    """The reader of polling URLs of *kind*."""
    return _READERS[kind]


def polling_kind(record: Record) -> PollingKind:
    """The reader of *record*'s polling URL (``record.poll_kind``)."""
    return _READERS[record.submission.poll_kind]


def first_answer_reader(record: Record) -> PollingKind:
    """The reader of *record*'s first answer (the submission's): the resource's when it
    can poll it (:meth:`ResourcePolling.can_poll`), else the status monitor's."""
    return RESOURCE if RESOURCE.can_poll(record) else STATUS_MONITOR
