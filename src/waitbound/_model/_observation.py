"""One request and what it returned: the request a decision plans (:class:`Request`),
and the HTTP answer or transport failure it got (:class:`Observation`).

These are values only, below the rules that plan requests and read answers and the
transports that send them, so both can name them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from waitbound._base._json import JSON
from waitbound._model._record import RequestKind
from waitbound._profile._actions import DEFAULT_STATUS_URL_HEADERS
from waitbound._profile._contract import Profile

__all__ = ["HINT_HEADERS", "Observation", "Request", "kept_header_names"]

HINT_HEADERS: Final = ("retry-after", "retry-after-ms", "x-ms-retry-after-ms")


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One request to send: ``method url`` with a total timeout in seconds.

    A ``submit`` request's body and headers come from the caller, never the record.
    ``redirect_budget`` is how many same-origin redirects it may follow at most (each
    is one more request to the provider, so never more than the request budget has
    left); ``None`` leaves it to the transport's own limit.
    """

    kind: RequestKind
    url: str
    timeout_s: float
    method: str = "GET"
    redirect_budget: int | None = None


def kept_header_names(profile: Profile) -> frozenset[str]:
    """The response headers an observation keeps (lower-case): hints, the throttle
    rule's headers and request ids.

    Every other header is dropped before anything is stored.
    """
    hint_headers = (name for name, _ in profile.hint_headers)
    throttle_headers = profile.throttle.header_names if profile.throttle else ()
    receipt_headers = profile.submit.status_url_headers
    return frozenset(
        (
            *HINT_HEADERS,
            *hint_headers,
            *throttle_headers,
            *profile.request_id_headers,
            *DEFAULT_STATUS_URL_HEADERS,
            *receipt_headers,
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """One request's answer, as the core sees it.

    Attributes:
        kind: ``"status"`` or ``"result"``.
        at: when the answer (or the failure) arrived, aware UTC.
        http_status: the HTTP status code, or ``None`` on a transport failure.
        headers: the kept headers only (see :func:`kept_header_names`), lower-case names.
        body: the parsed JSON body; a text body that is not JSON is kept only for
            result requests, as a string.
        body_problem: why the body could not be used (not JSON, over the size cap).
        transport_error: a timeout or connection failure, in words; ``None`` otherwise.
        request_id: the provider's request id, from the profile's request-id headers.
        elapsed_s: seconds the request took.
        redirects: same-origin redirects followed on the way (each one more request
            to the provider, counted like the request itself).
    """

    kind: RequestKind
    at: datetime
    http_status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: JSON = None
    body_problem: str | None = None
    transport_error: str | None = None
    request_id: str | None = None
    elapsed_s: float = 0.0
    redirects: int = 0
