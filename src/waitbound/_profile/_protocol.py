"""The staged part of a long-running-operation protocol: where to poll and where the
final state is.

A polling URL has a *kind*, which says how its answers are read (the reading rules
live with the state tables in ``_contract.py``):

- ``status``: a status monitor, read by its body's state (``Azure-AsyncOperation``,
  ``Operation-Location``, a job's status URL);
- ``location``: a ``Location`` URL, read by status code (202 running; 200/201/204 done,
  its body, possibly empty, the result);
- ``resource``: the resource itself (the "original URI" pattern), read by its
  provisioning state.

The first answer names the polling URL in the profile's precedence
(:class:`PollSource`). After a terminal success at a status monitor, the final state
is fetched once from the place ``final-state-via`` names (:func:`final_url`), following
the Azure REST API guidelines' defaults by method; a terminal success at a
``location`` or ``resource`` URL is itself the final state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import httpx

from waitbound._base._errors import ProfileError
from waitbound._base._jmes import Expression, compile_expression
from waitbound._base._urls import origin
from waitbound._profile._sections import checked_section

__all__ = [
    "IDEMPOTENT_METHODS",
    "FinalStateVia",
    "PollSource",
    "UrlKind",
    "carry_query",
    "final_url",
    "parse_final_state_via",
    "parse_poll_sources",
]

_SOURCE_KEYS: Final = frozenset({"header", "field", "request_url", "kind"})
IDEMPOTENT_METHODS: Final = frozenset({"PUT", "DELETE"})
"""Methods whose request may be sent again after no answer (RFC 9110 §9.2.2)."""


class UrlKind(StrEnum):
    """How answers from a polling URL are read."""

    STATUS = "status"
    LOCATION = "location"
    RESOURCE = "resource"


class FinalStateVia(StrEnum):
    """Where the final state of a long-running operation is (Azure's ``final-state-via``)."""

    AZURE_ASYNC_OPERATION = "azure-async-operation"
    LOCATION = "location"
    ORIGINAL_URI = "original-uri"
    OPERATION_LOCATION = "operation-location"


_MONITOR_FINAL: Final = frozenset(
    {FinalStateVia.AZURE_ASYNC_OPERATION, FinalStateVia.OPERATION_LOCATION}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PollSource:
    """One place a first answer may name its polling URL, and the URL's kind.

    Exactly one of ``header`` (a response header, lower-case), ``field`` (an
    expression over the answer's body) or ``request_methods`` (the request URL itself,
    for these methods: the original-URI pattern) is set.
    """

    kind: UrlKind
    header: str | None = None
    field: Expression | None = None
    request_methods: frozenset[str] = frozenset()

    @property
    def origin(self) -> str:
        """Where the URL came from, in words (for the audit log)."""
        if self.header is not None:
            return f"{self.header} header"
        return "receipt body" if self.field is not None else "request URL"


def parse_poll_sources(where: str, data: object) -> tuple[PollSource, ...]:
    """Validate ``submit.polling_url``: a list of ``{"header"|"field"|"request_url", "kind"}``.

    Raises:
        ProfileError: not a list, an entry with none or several places, an unknown key,
            an unknown kind, or a ``request_url`` that is not a list of methods.
    """
    if not isinstance(data, list):
        raise ProfileError(f"{where}: submit.polling_url must be a list of places to look")
    sources = []
    for index, raw in enumerate(data):
        at = f"{where}: submit.polling_url[{index}]"
        entry = checked_section(where, f"submit.polling_url[{index}]", raw, _SOURCE_KEYS)
        places = [key for key in ("header", "field", "request_url") if key in entry]
        if len(places) != 1:
            raise ProfileError(f"{at} must name exactly one of header, field or request_url")
        kind = entry.get("kind")
        if kind is None:
            raise ProfileError(f"{at} needs a kind ({', '.join(k.value for k in UrlKind)})")
        if kind not in tuple(UrlKind):
            raise ProfileError(
                f"{at}.kind = {kind!r}; expected one of {', '.join(k.value for k in UrlKind)}"
            )
        header = entry.get("header")
        if header is not None and (not isinstance(header, str) or not header):
            raise ProfileError(f"{at}.header must be a header name")
        methods = entry.get("request_url")
        if methods is not None and (
            not isinstance(methods, list)
            or not methods
            or len(set(methods)) != len(methods)
            or not all(m in ("PUT", "PATCH", "POST", "DELETE") for m in methods)
        ):
            raise ProfileError(
                f"{at}.request_url must be a list of methods (PUT, PATCH, POST, DELETE)"
            )
        field = entry.get("field")
        sources.append(
            PollSource(
                kind=UrlKind(str(kind)),
                header=header.lower() if isinstance(header, str) else None,
                field=None if field is None else compile_expression(where, f"{at}.field", field),
                request_methods=frozenset(methods or ()),
            )
        )
    return tuple(sources)


def parse_final_state_via(where: str, key: str, value: object) -> FinalStateVia | None:
    """Validate a ``final_state_via`` value (``None``: by method).

    Raises:
        ProfileError: a value that is not one of :class:`FinalStateVia`.
    """
    if value is None:
        return None
    if value not in tuple(FinalStateVia):
        raise ProfileError(
            f"{where}: {key} = {value!r}; expected one of "
            f"{', '.join(v.value for v in FinalStateVia)}"
        )
    return FinalStateVia(str(value))


def final_url(
    *,
    method: str | None,
    request_url: str | None,
    location_url: str | None,
    monitor_result_url: str | None,
    via: FinalStateVia | None,
    by_method: Mapping[str, str],
) -> str | None:
    """Where the final state is fetched after a status monitor reported success.

    The order of the Azure REST API guidelines (and of azure-core's poller): an
    explicit ``final-state-via`` first (``location``: the first answer's Location, when
    it named one; ``azure-async-operation`` / ``operation-location``: the monitor
    itself, so nothing is fetched; ``original-uri``: the request URL); then the
    monitor's own ``resourceLocation`` (*monitor_result_url*); then the profile's
    default by method (*by_method*: method → ``"request_url"`` or ``"location"``; for
    Azure, PUT and PATCH the request URL, POST the Location, DELETE nothing).

    Returns:
        The absolute URL to fetch once, or ``None`` when the monitor is the final state.
    """
    if via is FinalStateVia.LOCATION and location_url:
        return location_url
    if via in _MONITOR_FINAL:
        return None
    if via is FinalStateVia.ORIGINAL_URI and request_url:
        return request_url
    if monitor_result_url:
        return monitor_result_url
    match by_method.get((method or "").upper()):
        case "request_url":
            return request_url
        case "location":
            return location_url
        case _:
            return None


def carry_query(url: str, submit_url: str | None, names: Sequence[str]) -> str:
    """Carry the query parameters *names* from *submit_url* onto *url*.

    Only onto a URL at the submit URL's origin that lacks the parameter (Azure.Core's
    operation locations must be polled with the ``api-version`` they were started
    with); any other URL is returned as it is.
    """
    if not names or not submit_url:
        return url
    try:
        if origin(url) != origin(submit_url):
            return url
    except ValueError:
        return url
    target, source = httpx.URL(url), httpx.URL(submit_url)
    missing = {n: source.params[n] for n in names if n in source.params and n not in target.params}
    return str(target.copy_merge_params(missing)) if missing else url
