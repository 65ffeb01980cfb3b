"""What an HTTP answer means, before its body is read: one table per request kind.

The meaning of an answer is looked up, in this order:

1. no answer at all (a timeout, a refused connection) → :attr:`Meaning.TROUBLE`;
2. the profile's exact ``http_status_states`` row for the URL's kind → a class;
3. throttling (429, the profile's ``throttle`` rule, a throttling body) → ``THROTTLED``;
4. the fixed rows below (401/403 denied, 404/410 not found, 409/425 not ready, …);
5. the profile's class rows (``"4xx": "failed"``) for the URL's kind → a class;
6. the row for the status class (2xx: read the body; 5xx: trouble); anything else is
   unexplained (for a submission: refused, the job was not created).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from waitbound._model._record import RequestKind
from waitbound._profile._contract import Classification, StateTable

__all__ = ["Answer", "Meaning", "meaning"]


class Meaning(StrEnum):
    """What kind of answer an HTTP status is, for one kind of request."""

    CLASSIFIED = "classified"
    """The status code itself says the job's state (the profile's table)."""
    BODY = "body"
    """Read the body: the state, the receipt or the result document is in it."""
    THROTTLED = "throttled"
    DENIED = "denied"
    """401/403: the credentials are refused; never retried."""
    NOT_FOUND = "not_found"
    """404/410: the job may not be visible yet (within the not-found grace)."""
    NOT_READY = "not_ready"
    """409/425 at a result URL: the result is not there yet."""
    TROUBLE = "trouble"
    """5xx or no answer: the provider's state could not be learned this time."""
    REFUSED = "refused"
    """A submission answered 4xx: no job was created."""
    UNEXPLAINED = "unexplained"


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer's meaning; ``classification`` is set for :attr:`Meaning.CLASSIFIED`."""

    meaning: Meaning
    classification: Classification | None = None


_FIXED: Final[Mapping[str, Mapping[int, Meaning]]] = MappingProxyType(
    {
        "submit": {401: Meaning.DENIED, 403: Meaning.DENIED, 303: Meaning.BODY},
        "status": {
            401: Meaning.DENIED,
            403: Meaning.DENIED,
            404: Meaning.NOT_FOUND,
            410: Meaning.NOT_FOUND,
        },
        "result": {
            401: Meaning.DENIED,
            403: Meaning.DENIED,
            409: Meaning.NOT_READY,
            425: Meaning.NOT_READY,
        },
    }
)
"""Rows for single status codes, per request kind (after the profile's exact rows)."""

_BY_CLASS: Final[Mapping[str, Mapping[int, Meaning]]] = MappingProxyType(
    {
        "submit": {2: Meaning.BODY, 4: Meaning.REFUSED, 5: Meaning.TROUBLE},
        "status": {2: Meaning.BODY, 5: Meaning.TROUBLE},
        "result": {2: Meaning.BODY, 5: Meaning.TROUBLE},
    }
)
"""Rows for status classes (2xx, 4xx, 5xx), per request kind; no row: unexplained."""

_EMPTY: Final = StateTable()


def meaning(
    request: RequestKind, code: int | None, *, table: StateTable = _EMPTY, throttled: bool = False
) -> Answer:
    """Look up what an answer with HTTP status *code* means (the order atop this module).

    Args:
        request: ``submit``, ``status`` or ``result`` (``errors`` reads as ``result``).
        code: the HTTP status, or ``None`` when no answer came.
        table: the state table of the URL's kind (its code rows; the status kind's
            for a submission).
        throttled: the profile's throttling rule or the body says "throttled".
    """
    kind = "result" if request == "errors" else request
    if code is None:
        return Answer(Meaning.TROUBLE)
    if kind == "status" and (exact := table.by_code(code)) is not None:
        return Answer(Meaning.CLASSIFIED, exact)
    if throttled or code == 429:
        return Answer(Meaning.THROTTLED)
    fixed = _FIXED.get(kind, {}).get(code)
    if fixed is not None:
        return Answer(fixed)
    if kind == "status" and (by_class := table.by_code_class(code)) is not None:
        return Answer(Meaning.CLASSIFIED, by_class)
    return Answer(_BY_CLASS.get(kind, {}).get(code // 100, Meaning.UNEXPLAINED))
