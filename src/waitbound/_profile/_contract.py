"""Profiles: a provider's waiting contract as a checked state table.

A profile says where a status body keeps its state, which values mean pending,
succeeded, partial, failed, canceled or expired, and where results, errors, counts
and poll hints live. Values are classified by lookup only: nothing is inferred from a
field's name, and a value in no list is ``unknown``. The table is validated when it
is loaded (no unknown key, no value in two lists, a state source present, every
expression compiles), so a bad profile fails before any request is sent.

Expressions are JMESPath (https://jmespath.org/specification.html) over the parsed
JSON body. The ``done`` / ``error`` / ``result`` trio follows AIP-151
(google.longrunning.Operation).

This module is the model: the compiled :class:`Profile` and how it reads an answer.
Reading the profile format into one (``waitbound.parse_profile``,
``waitbound.load_profile``) is :mod:`waitbound._profile._contract_parse`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Final

from waitbound._base._jmes import Expression, search
from waitbound._base._json import JSON, JSONScalar, contains_ambiguous
from waitbound._profile._actions import CancelContract, SubmitContract
from waitbound._profile._decided_by import DecidedBy, Verdict
from waitbound._profile._protocol import UrlKind
from waitbound._profile._throttle import Throttle
from waitbound._profile._times import parse_time
from waitbound._profile._webhooks import WebhookContract

__all__ = [
    "ENDINGS",
    "RPC_CANCELLED",
    "Classification",
    "Counts",
    "Profile",
    "Reading",
    "ResultReading",
    "StateTable",
    "ValueKey",
    "is_present",
    "value_key",
]


class Classification(StrEnum):
    """What one status answer says about the job."""

    PENDING = "pending"
    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCELED = "canceled"
    EXPIRED = "expired"
    SKIPPED = "skipped"
    """The provider skipped the run: the outcome is ``canceled`` with reason ``skipped``."""
    UNKNOWN = "unknown"


RPC_CANCELLED: Final = 1
"""google.rpc.Code CANCELLED: an AIP-151 operation canceled by request ends done with it."""

ValueKey = tuple[str, object]


def value_key(value: object, *, fold: bool = False) -> ValueKey | None:
    """Key a state value by JSON type, so ``true`` never matches ``1``; *fold* compares
    strings case-insensitively."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float range keeps its exact value
            return ("number", value)
        return ("number", number) if math.isfinite(number) else None
    if isinstance(value, str):
        return ("string", value.casefold() if fold else value)
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class StateTable:
    """How answers from one kind of URL are read (see ``_protocol.UrlKind``).

    Attributes:
        state: the expression giving the state value, or ``None`` (read by code only).
        codes: HTTP status code → class, checked before the body (``http_status_states``).
        code_classes: ``2``/``4``/``5`` → class, for rows such as ``"4xx"``; they apply
            only after the fixed rules for 401, 403, 404, 410 and 429.
        when_no_state: HTTP status code → class when a 2xx body (possibly empty) has no
            state.
        unlisted: what a state value in no list means: ``UNKNOWN`` (the default: stop)
            or ``PENDING`` (only where the provider documents "any other value is
            in progress").
    """

    state: Expression | None = None
    codes: Mapping[int, Classification] = field(default_factory=dict)
    code_classes: Mapping[int, Classification] = field(default_factory=dict)
    when_no_state: Mapping[int, Classification] = field(default_factory=dict)
    unlisted: Classification = Classification.UNKNOWN

    def by_code(self, code: int) -> Classification | None:
        """The class an exact ``http_status_states`` row gives *code*, or ``None``."""
        return self.codes.get(code)

    def by_code_class(self, code: int) -> Classification | None:
        """The class a ``"4xx"``-style row gives *code*, or ``None``."""
        return self.code_classes.get(code // 100)


@dataclass(frozen=True, slots=True, kw_only=True)
class Counts:
    """Per-item counts a provider reports for a batch; ``None`` means not reported."""

    succeeded: int | None = None
    failed: int | None = None
    total: int | None = None
    canceled: int | None = None
    expired: int | None = None

    @property
    def unsuccessful(self) -> int:
        """Items that did not succeed: failed, canceled and expired together."""
        return (self.failed or 0) + (self.canceled or 0) + (self.expired or 0)

    def settled(self) -> Counts:
        """Return the counts of a finished job: ``succeeded`` not reported but ``total``
        known is derived as total minus unsuccessful (never below 0)."""
        if self.succeeded is not None or self.total is None:
            return self
        return replace(self, succeeded=max(0, self.total - self.unsuccessful))

    def as_json(self) -> dict[str, JSON]:
        """Return the counts as a JSON object (canceled / expired only when reported)."""
        counted: dict[str, JSON] = {
            "succeeded": self.succeeded,
            "failed": self.failed,
            "total": self.total,
        }
        for name, value in (("canceled", self.canceled), ("expired", self.expired)):
            if value is not None:
                counted[name] = value
        return counted


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """What a profile reads from one status body.

    Attributes:
        classification: the class of the state, or ``None`` when the body has no
            state at all (the state expression gave null).
        state: the provider's own state value (a JSON scalar), or ``None``.
        missing_required: the ``require_on_success`` expressions that were null.
        throttled: the body matched the profile's ``throttled`` expression.
        poll_hint_s: the body's poll hint in seconds as given (unvalidated), or ``None``.
        poll_hint_ms: the same in milliseconds (``poll_hint_ms``), or ``None``.
        next_check_at: the body's next-check time as given (unvalidated), or ``None``.
        expires_at: the body's own expiry time, when it parses in the profile's
            ``time_format``.
        estimated_duration_s: the provider's estimate of the job's whole duration in
            seconds as given (unvalidated; ``estimated_duration``), or ``None``.
        ambiguous: a key the body holds more than once with different values, found
            inside a value the profile read (the first one); ``None`` when none is.
            Such a body is never read as either value.
        unlisted: the state is in no list and the profile reads unlisted values as
            pending (``unlisted_state``).
        decided: the value of the profile's ``decided_by`` field (e.g. ``next_action``)
            as given, or ``None``.
        ending_unnamed: ``decided_by`` says the run is over, but the state names no
            ending (``classification`` is then ``UNKNOWN``; the answer is re-checked).
    """

    classification: Classification | None
    state: JSONScalar = None
    job_id: str | None = None
    result: JSON = None
    error: JSON = None
    progress: JSON = None
    counts: Counts | None = None
    missing_required: tuple[str, ...] = ()
    throttled: bool = False
    poll_hint_s: JSON = None
    poll_hint_ms: JSON = None
    next_check_at: JSON = None
    expires_at: datetime | None = None
    estimated_duration_s: JSON = None
    result_url: str | None = None
    result_id: str | None = None
    cancel_url: str | None = None
    cancelable: bool | None = None
    output_error: JSON = None
    usage: JSON = None
    errors_url: str | None = None
    ambiguous: str | None = None
    unlisted: bool = False
    decided: JSONScalar = None
    ending_unnamed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultReading:
    """What a profile reads from a result document (the result endpoint's body).

    Attributes:
        output: the ``result`` expression's value, or the whole document without one.
        output_error: a present value means the job failed, whatever the output says.
        usage: the provider's usage report; ``None`` stays ``None`` (unknown, not 0).
        ambiguous: a key repeated with different values inside what was read, or ``None``.
        job_id: the job the document names (the profile's ``result_job_id``), or ``None``.
    """

    output: JSON
    output_error: JSON = None
    usage: JSON = None
    ambiguous: str | None = None
    job_id: str | None = None


def is_present(value: JSON) -> bool:
    """Tell whether a read value counts as present: not null, not ``""``, ``[]`` or ``{}``."""
    return value is not None and value not in ("", [], {})


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """A provider's state table, validated and compiled.

    Build one with ``waitbound.parse_profile`` (a mapping) or ``waitbound.load_profile``
    (a JSON or TOML file; both in :mod:`waitbound._profile._contract_parse`). ``source`` is the
    validated data as given; it is what a store persists and what docs print.
    """

    name: str
    source: Mapping[str, JSON]
    states: Mapping[ValueKey, Classification] = field(repr=False)
    expressions: Mapping[str, Expression] = field(repr=False)
    require_on_success: tuple[tuple[str, Expression], ...] = field(repr=False)
    count_expressions: Mapping[str, tuple[Expression, ...]] = field(repr=False)
    tables: Mapping[UrlKind, StateTable] = field(repr=False)
    first_answer: StateTable = field(default_factory=StateTable)
    case_insensitive: bool = False
    hint_headers: tuple[tuple[str, str], ...]
    request_id_headers: tuple[str, ...]
    result_url_template: str | None
    submit: SubmitContract = field(default_factory=SubmitContract)
    cancel: CancelContract = field(default_factory=CancelContract)
    throttle: Throttle | None = None
    time_format: str = "rfc3339"
    webhook: WebhookContract | None = None
    """The provider's webhook contract (the ``webhook`` key), or ``None`` when the
    profile names none."""
    trace_context: bool = False
    """Send the W3C ``traceparent`` of each request's span to the provider (the
    ``trace_context`` key; only to origins the operation trusts, only with an SDK)."""
    decided_by: DecidedBy | None = None
    """The field that decides before the state does (``decided_by``), or ``None``."""
    result_for_every_ending: bool = False
    """The result URL holds the full receipt after any terminal state (failed, canceled
    and skipped too): it is fetched once whatever the ending."""
    errors_url_query_safe: bool = False
    """The errors URL's query holds no credential: the outcome keeps it whole (its
    userinfo still stripped)."""

    def throttled_by(
        self, status: int, headers: Mapping[str, str], *, body_throttled: bool = False
    ) -> bool:
        """Tell whether the ``throttle`` rule makes an answer a throttle (see
        :meth:`Throttle.matches`); always ``False`` without one."""
        return self.throttle is not None and self.throttle.matches(
            status, headers, body_throttled=body_throttled
        )

    @property
    def http_status_states(self) -> Mapping[int, Classification]:
        """The exact ``http_status_states`` rows of the status monitor."""
        return self.tables[UrlKind.STATUS].codes

    def table(self, kind: UrlKind) -> StateTable:
        """How answers from a URL of *kind* are read (the status monitor's by default)."""
        return self.tables.get(kind) or self.tables[UrlKind.STATUS]

    def classify_value(
        self, value: object, *, unlisted: Classification = Classification.UNKNOWN
    ) -> Classification:
        """Classify one state value by lookup; a value in no list is *unlisted*
        (``UNKNOWN`` unless the profile reads unlisted values as pending)."""
        key = value_key(value, fold=self.case_insensitive)
        return self.states.get(key, unlisted) if key else Classification.UNKNOWN

    def body_request_id(self, body: JSON) -> str | None:
        """The provider's request id a body carries (the profile's ``request_id``
        expression, over a receipt, status or result body), at most 200 characters;
        ``None`` without one."""
        found = _text(self._search("request_id", body)) if isinstance(body, dict) else None
        return found[:200] if found else None

    def _search(self, key: str, body: JSON) -> JSON:
        expression = self.expressions.get(key)
        return None if expression is None else search(expression, body)

    def read(self, body: JSON, kind: UrlKind = UrlKind.STATUS) -> Reading:
        """Read the state and every named field from one parsed answer body.

        For a status monitor the state comes from ``state`` when the profile has it,
        else from ``done`` (AIP-151: ``done`` true with an ``error`` means failed —
        canceled when its ``code`` is 1, google.rpc.Code CANCELLED — without one
        succeeded; ``done`` false or absent means pending), and ``result`` is read
        from it. For a ``location`` or ``resource`` URL the state comes from that
        kind's ``state`` (a terminal body there is a result document, see
        :meth:`read_result`). ``ambiguous`` names a key the body repeats
        with different values inside anything read (see :class:`Reading`).
        """
        ambiguous: list[str] = []
        table = self.table(kind)

        def found(value: JSON) -> JSON:
            if (repeated := contains_ambiguous(value)) is not None:
                ambiguous.append(repeated)
            return value

        def find(key: str) -> JSON:
            return found(self._search(key, body))

        classification: Classification | None
        state: JSONScalar = None
        error = find("error")
        unlisted = False
        if table.state is not None:
            raw_state = found(search(table.state, body))
            if raw_state is None:
                classification = None
            else:
                state = raw_state if not isinstance(raw_state, list | dict) else str(raw_state)
                key = value_key(raw_state, fold=self.case_insensitive)
                unlisted = key is not None and key not in self.states
                classification = self.classify_value(raw_state, unlisted=table.unlisted)
        elif kind is UrlKind.STATUS and "done" in self.expressions:
            done = find("done")
            state = done if isinstance(done, bool) else None
            if done is True and isinstance(error, dict) and error.get("code") == RPC_CANCELLED:
                classification = Classification.CANCELED
            elif done is True:
                failed = is_present(error)
                classification = Classification.FAILED if failed else Classification.SUCCEEDED
            elif done is False or done is None:
                classification = Classification.PENDING
            else:
                classification = Classification.UNKNOWN
        else:
            classification = None
        decided: JSONScalar = None
        ending_unnamed = False
        if self.decided_by is not None and kind is UrlKind.STATUS:
            value = found(self.decided_by.value(body))
            decided = value if not isinstance(value, list | dict) else str(value)
            classification, ending_unnamed = _decide_by(
                self.decided_by.verdict(value), classification
            )
            unlisted = unlisted and decided is None
        cancelable = find("cancelable")
        required = [
            (text, search(expression, body)) for text, expression in self.require_on_success
        ]
        counts = self._counts(body, ambiguous)
        ambiguous.extend(k for _, v in required if (k := contains_ambiguous(v)) is not None)
        return Reading(
            classification=classification,
            state=state,
            job_id=_text(find("job_id")),
            result=find("result") if kind is UrlKind.STATUS else None,
            error=error,
            progress=find("progress"),
            counts=counts,
            missing_required=tuple(text for text, value in required if value is None),
            throttled=bool(find("throttled")),
            poll_hint_s=find("poll_hint"),
            poll_hint_ms=find("poll_hint_ms"),
            next_check_at=find("next_check_at"),
            expires_at=parse_time(find("expires_at"), self.time_format),
            estimated_duration_s=find("estimated_duration"),
            result_url=_text(find("result_url")),
            result_id=_text(find("result_id")),
            cancel_url=_text(find("cancel_url")),
            cancelable=cancelable if isinstance(cancelable, bool) else None,
            output_error=find("output_error"),
            usage=find("usage"),
            errors_url=_text(find("errors_url")),
            ambiguous=ambiguous[0] if ambiguous else None,
            unlisted=unlisted and classification is Classification.PENDING,
            decided=decided,
            ending_unnamed=ending_unnamed,
        )

    def read_result(self, document: JSON) -> ResultReading:
        """Read the output, output error and usage from a result document (the final
        GET's body, a result endpoint's body, a first answer that is the result).

        The output is ``result_document`` over it, or the whole document without one;
        a text body (not JSON) is the output as it is.
        """
        if isinstance(document, str) or "result_document" not in self.expressions:
            output = document
        else:
            output = self._search("result_document", document)
        output_error = self._search("output_error", document)
        usage = self._search("usage", document)
        repeated = (contains_ambiguous(v) for v in (output, output_error, usage))
        return ResultReading(
            output=output,
            output_error=output_error,
            usage=usage,
            ambiguous=next((k for k in repeated if k is not None), None),
            job_id=_text(self._search("result_job_id", document)),
        )

    def _counts(self, body: JSON, repeated: list[str]) -> Counts | None:
        """The counts in *body*; a key repeated inside one is added to *repeated*."""
        if not self.count_expressions:
            return None
        values: dict[str, int | None] = {}
        for name, expressions in self.count_expressions.items():
            parts = [search(expression, body) for expression in expressions]
            repeated.extend(k for p in parts if (k := contains_ambiguous(p)) is not None)
            ints = [p for p in parts if isinstance(p, int) and not isinstance(p, bool) and p >= 0]
            values[name] = sum(ints) if ints else None
        return Counts(**values)


ENDINGS: Final = frozenset(
    {
        Classification.SUCCEEDED,
        Classification.PARTIAL,
        Classification.FAILED,
        Classification.CANCELED,
        Classification.EXPIRED,
        Classification.SKIPPED,
    }
)
"""The classes that name how a run ended."""


def _decide_by(
    verdict: Verdict, by_state: Classification | None
) -> tuple[Classification | None, bool]:
    """The class of an answer whose ``decided_by`` field says *verdict*, the state's
    own class being *by_state*: ``(class, ending_unnamed)``. Absent, the state decides;
    pending and skipped decide whatever the state says; terminal takes the ending the
    state names, or is ``UNKNOWN`` with ``ending_unnamed`` when it names none."""
    match verdict:
        case Verdict.ABSENT:
            return by_state, False
        case Verdict.PENDING:
            return Classification.PENDING, False
        case Verdict.SKIPPED:
            return Classification.SKIPPED, False
        case Verdict.TERMINAL if by_state in ENDINGS:
            return by_state, False
        case Verdict.TERMINAL:
            return Classification.UNKNOWN, True
        case _:
            return Classification.UNKNOWN, False


def _text(value: JSON) -> str | None:
    if value is None or isinstance(value, list | dict):
        return None
    return value if isinstance(value, str) else json.dumps(value)
