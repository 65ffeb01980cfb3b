"""The submit and cancel parts of a provider's contract.

Submit: where the answer to the job request (the *receipt*) names the job id and the
status, result and cancel URLs, in the profile's precedence: the status headers
(``Azure-AsyncOperation``, ``Operation-Location``, ``Location`` by default), then the
receipt body's fields, then a declared URL template. A URL is never guessed: a
receipt that names no status resource is an integration failure. Relative URLs
resolve against the request URL.

Cancel: the documented cancellation action (method and URL), allowed only when the
last status answer said the job is cancelable or the profile declares it always
cancelable before a terminal state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from waitbound._base._errors import ProfileError
from waitbound._base._jmes import Expression, compile_expression, search
from waitbound._base._json import JSON, contains_ambiguous
from waitbound._base._urls import resolve, shown_url
from waitbound._profile._protocol import (
    FinalStateVia,
    PollSource,
    UrlKind,
    carry_query,
    parse_final_state_via,
    parse_poll_sources,
)
from waitbound._profile._sections import checked_section

__all__ = [
    "CancelContract",
    "Receipt",
    "SubmitContract",
    "parse_cancel",
    "parse_submit",
    "repeated_key",
]

SUBMIT_EXPRESSIONS: Final = ("job_id", "status_url", "result_url", "cancel_url", "poll_hint")
SUBMIT_KEYS: Final = frozenset(
    (
        *SUBMIT_EXPRESSIONS,
        "status_url_headers",
        "status_url_template",
        "idempotency_header",
        "idempotency_scheme",
        "final_get",
        "final_state_via",
        "polling_url",
        "http_status_states",
        "carry_query",
    )
)
DEFAULT_STATUS_URL_HEADERS: Final = ("azure-asyncoperation", "operation-location", "location")
CANCEL_KEYS: Final = frozenset(("method", "url_template", "always"))
FINAL_GET_SOURCES: Final = ("request_url", "location")
IDEMPOTENCY_SCHEMES: Final = ("header", "repeatability")


def repeated_key(document: str, key: str) -> str:
    """Why a *document* whose *key* repeats with different values is not read."""
    return (
        f"the {document} holds the key {key[:80]!a} more than once with different "
        "values; waitbound does not choose one"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Receipt:
    """What a submit answer named. URLs are absolute; ``None`` means not named."""

    job_id: str | None = None
    status_url: str | None = None
    status_url_origin: str | None = None
    status_url_kind: UrlKind = UrlKind.STATUS
    status_url_header: str | None = None
    """The header that named the status URL: a poll answer carrying it moves the URL."""
    location_url: str | None = None
    """The answer's ``Location``, absolute: where ``final-state-via: location`` looks."""
    result_url: str | None = None
    cancel_url: str | None = None
    poll_hint: JSON = None
    problem: str | None = None
    """A URL the receipt named that cannot be used, in words (the URL shown safely)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitContract:
    """How to read a receipt.

    Attributes:
        polling: where the receipt names its polling URL, in precedence order, each
            with the URL's kind (``submit.polling_url``; by default the headers
            ``Azure-AsyncOperation``, ``Operation-Location``, ``Location``, then the
            body's ``status_url``, all status monitors).
        expressions: ``job_id``, ``status_url``, ``result_url``, ``cancel_url``,
            ``poll_hint`` (seconds) over the receipt body.
        status_url_template: a documented status URL with ``{job_id}``.
        idempotency_header: where the provider accepts an idempotency key; ``None``
            means it accepts none (unless ``idempotency_scheme`` is ``repeatability``).
        idempotency_scheme: ``header`` (the key in ``idempotency_header``) or
            ``repeatability`` (Azure's repeatable requests: ``Repeatability-Request-ID``
            and ``Repeatability-First-Sent``).
        final_get: HTTP method → where the final state is fetched by default
            (``"request_url"`` or ``"location"``), the protocol's defaults by method.
        final_state_via: where the final state is, overriding the defaults by method.
        carry_query: query parameters carried from the submit URL onto the polling
            and final URLs at its origin that lack them (``api-version``).
    """

    polling: tuple[PollSource, ...] = tuple(
        PollSource(kind=UrlKind.STATUS, header=h) for h in DEFAULT_STATUS_URL_HEADERS
    )
    expressions: Mapping[str, Expression] = field(default_factory=dict, repr=False)
    status_url_template: str | None = None
    idempotency_header: str | None = None
    idempotency_scheme: str = "header"
    final_get: Mapping[str, str] = field(default_factory=dict)
    final_state_via: FinalStateVia | None = None
    carry_query: tuple[str, ...] = ()

    @property
    def status_url_headers(self) -> tuple[str, ...]:
        """The response headers that may name a polling URL (lower-case), in order."""
        return tuple(s.header for s in self.polling if s.header is not None)

    def carried(self, url: str, submit_url: str | None) -> str:
        """*url* with the parameters of :attr:`carry_query` carried from *submit_url*."""
        return carry_query(url, submit_url, self.carry_query)

    def read(
        self, *, method: str, request_url: str, headers: Mapping[str, str], body: JSON
    ) -> Receipt:
        """Read a receipt: ids and URLs from the places this contract names.

        Args:
            method: the submit request's method.
            request_url: the submit request's URL (relative URLs resolve against it).
            headers: the answer's headers, names lower-cased.
            body: the answer's parsed JSON body, or ``None``.
        """

        problems: list[str] = []

        def text(expression: Expression | None) -> str | None:
            value = search(expression, body) if expression is not None else None
            if (repeated := contains_ambiguous(value)) is not None:
                problems.append(repeated_key("receipt", repeated))
                return None
            return None if value is None or isinstance(value, list | dict) else str(value)

        def absolute(url: str | None, what: str) -> str | None:
            if not url:
                return None
            try:
                return self.carried(resolve(request_url, url), request_url)
            except ValueError as exc:
                problems.append(f"the receipt's {what} {shown_url(url)} cannot be used ({exc})")
                return None

        job_id = text(self.expressions.get("job_id"))
        status_url, source = None, None
        for candidate in self.polling:
            if candidate.header is not None:
                status_url = headers.get(candidate.header) or None
            elif candidate.field is not None:
                status_url = text(candidate.field)
            elif method.upper() in candidate.request_methods:
                status_url = request_url
            if status_url:
                source = candidate
                break
        origin = source.origin if source else None
        if status_url is None and self.status_url_template and job_id:
            status_url, origin = self.status_url_template.replace("{job_id}", job_id), "template"
        return Receipt(
            job_id=job_id,
            status_url=absolute(status_url, "status URL"),
            status_url_origin=origin,
            status_url_kind=source.kind if source else UrlKind.STATUS,
            status_url_header=source.header if source else None,
            location_url=absolute(headers.get("location"), "Location"),
            result_url=absolute(text(self.expressions.get("result_url")), "result URL"),
            cancel_url=absolute(text(self.expressions.get("cancel_url")), "cancel URL"),
            poll_hint=search(expression, body)
            if (expression := self.expressions.get("poll_hint")) is not None
            else None,
            problem=problems[0] if problems else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelContract:
    """The documented cancellation action.

    Attributes:
        method: the HTTP method (``POST`` unless the provider documents another).
        url_template: the cancel URL with ``{job_id}`` / ``{status_url}``; relative
            resolves against the status URL. ``None``: only a cancel URL named by a
            receipt, a status body or ``--cancel-url`` is used.
        always: the provider documents cancel as allowed in every non-terminal state.
    """

    method: str = "POST"
    url_template: str | None = None
    always: bool = False

    def url(self, *, status_url: str | None, job_id: str | None) -> str | None:
        """The cancel URL from the template, or ``None`` when it cannot be filled."""
        template = self.url_template
        if template is None or status_url is None:
            return None
        if "{job_id}" in template:
            if not job_id:
                return None
            template = template.replace("{job_id}", job_id)
        try:
            return resolve(status_url, template.replace("{status_url}", status_url))
        except ValueError:
            return None  # e.g. a job id that makes no URL: no cancel is sent


def parse_submit(where: str, data: object, *, job_id: Expression | None) -> SubmitContract:
    """Validate the profile's ``submit`` object (absent: the default headers, no template).

    ``submit.http_status_states`` is accepted here and read by the state tables.

    Args:
        where: names the profile in messages.
        data: the ``submit`` object, or ``None``.
        job_id: the profile's own ``job_id`` expression, read from a receipt too unless
            ``submit.job_id`` says otherwise.

    Raises:
        ProfileError: an unknown key, a wrong type or an expression that does not compile.
    """
    section = checked_section(where, "submit", {} if data is None else data, SUBMIT_KEYS)
    if "polling_url" in section and "status_url_headers" in section:
        raise ProfileError(
            f"{where}: give submit.polling_url or submit.status_url_headers, not both"
        )
    headers = section.get("status_url_headers", list(DEFAULT_STATUS_URL_HEADERS))
    if not isinstance(headers, list) or not all(isinstance(h, str) and h for h in headers):
        raise ProfileError(f"{where}: submit.status_url_headers must be a list of header names")
    template = _optional_text(where, "submit.status_url_template", section)
    if template is not None and "{job_id}" not in template:
        raise ProfileError(f"{where}: submit.status_url_template must contain {{job_id}}")
    final_get = section.get("final_get", {})
    if not isinstance(final_get, Mapping) or any(
        v not in FINAL_GET_SOURCES for v in final_get.values()
    ):
        raise ProfileError(
            f"{where}: submit.final_get must map HTTP methods to 'request_url' or 'location'"
        )
    scheme = section.get("idempotency_scheme", "header")
    if scheme not in IDEMPOTENCY_SCHEMES:
        raise ProfileError(
            f"{where}: submit.idempotency_scheme = {scheme!r}; expected header or repeatability"
        )
    carried = section.get("carry_query", [])
    if (
        not isinstance(carried, list)
        or not all(isinstance(n, str) and n for n in carried)
        or len(set(carried)) != len(carried)
    ):
        raise ProfileError(
            f"{where}: submit.carry_query must be a list of distinct query parameter names"
        )
    expressions = {
        key: compile_expression(where, f"submit.{key}", section[key])
        for key in SUBMIT_EXPRESSIONS
        if key in section
    }
    if "job_id" not in expressions and job_id is not None:
        expressions["job_id"] = job_id
    if "polling_url" in section:
        polling = parse_poll_sources(where, section["polling_url"])
    else:
        polling = tuple(PollSource(kind=UrlKind.STATUS, header=h.lower()) for h in headers)
        if "status_url" in expressions:
            polling += (PollSource(kind=UrlKind.STATUS, field=expressions["status_url"]),)
    return SubmitContract(
        polling=polling,
        expressions=expressions,
        status_url_template=template,
        idempotency_header=_optional_text(where, "submit.idempotency_header", section),
        idempotency_scheme=str(scheme),
        final_get={str(k).upper(): str(v) for k, v in final_get.items()},
        final_state_via=parse_final_state_via(
            where, "submit.final_state_via", section.get("final_state_via")
        ),
        carry_query=tuple(carried),
    )


def parse_cancel(where: str, data: object) -> CancelContract:
    """Validate the profile's ``cancel`` object (absent: POST, no template, not always).

    Raises:
        ProfileError: an unknown key or a wrong type.
    """
    if data is None:
        return CancelContract()
    section = checked_section(where, "cancel", data, CANCEL_KEYS)
    method = section.get("method", "POST")
    if method not in ("POST", "DELETE", "PUT", "PATCH"):
        raise ProfileError(f"{where}: cancel.method must be POST, DELETE, PUT or PATCH")
    always = section.get("always", False)
    if not isinstance(always, bool):
        raise ProfileError(f"{where}: cancel.always must be true or false")
    template = _optional_text(where, "cancel.url_template", section)
    unknown = sorted(set(_PLACEHOLDER.findall(template or "")) - {"job_id", "status_url"})
    if unknown:
        raise ProfileError(
            f"{where}: cancel.url_template names {{{unknown[0][:40]}}}; only {{job_id}} and "
            "{status_url} are filled in (or give a URL relative to the status URL)"
        )
    return CancelContract(method=str(method), url_template=template, always=always)


_PLACEHOLDER: Final = re.compile(r"\{([^{}]*)\}")
"""A ``{name}`` in a URL template."""


def _optional_text(where: str, key: str, section: Mapping[str, object]) -> str | None:
    value = section.get(key.rpartition(".")[2])
    if value is not None and (not isinstance(value, str) or not value):
        raise ProfileError(f"{where}: {key} must be a non-empty string")
    return value
