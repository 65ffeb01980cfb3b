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
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Final

from waitbound._actions import CancelContract, SubmitContract, parse_cancel, parse_submit
from waitbound._config_file import read_bounded
from waitbound._decided_by import DecidedBy, Verdict, parse_decided_by
from waitbound._errors import ProfileError
from waitbound._jmes import Expression, compile_expression, search
from waitbound._json import JSON, JSONScalar, contains_ambiguous
from waitbound._protocol import UrlKind
from waitbound._sections import checked_section
from waitbound._throttle import Throttle, parse_hint_headers, parse_throttle
from waitbound._webhooks import WebhookContract, parse_webhook_contract

__all__ = [
    "Classification",
    "Counts",
    "Profile",
    "Reading",
    "ResultReading",
    "StateTable",
    "load_profile",
    "parse_profile",
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


STATE_LISTS: Final = (
    "pending",
    "succeeded",
    "partial",
    "failed",
    "canceled",
    "expired",
    "skipped",
)
EXPRESSION_KEYS: Final = (
    "state",
    "done",
    "job_id",
    "result",
    "error",
    "progress",
    "poll_hint",
    "poll_hint_ms",
    "next_check_at",
    "expires_at",
    "estimated_duration",
    "cancelable",
    "throttled",
    "result_url",
    "result_id",
    "cancel_url",
    "output_error",
    "usage",
    "errors_url",
    "result_document",
    "request_id",
    "result_job_id",
)
OTHER_KEYS: Final = (
    "$schema",
    "name",
    "description",
    "docs",
    "require_on_success",
    "http_status_states",
    "counts",
    "hint_headers",
    "result_url_template",
    "request_id_headers",
    "submit",
    "cancel",
    "url_kinds",
    "case_insensitive_states",
    "unlisted_state",
    "$schema",
    "throttle",
    "time_format",
    "webhook",
    "trace_context",
    "decided_by",
    "result_for_every_ending",
    "errors_url_query_safe",
)
URL_KIND_KEYS: Final = frozenset(("state", "http_status_states", "when_no_state", "unlisted_state"))
UNLISTED_STATES: Final = ("unknown", "pending")
_KINDS: Final = frozenset(("location", "resource"))
LOCATION_DEFAULTS: Final = {
    "http_status_states": {"202": "pending", "200": "succeeded", "201": "succeeded",
                           "204": "succeeded"},
}  # fmt: skip
"""How a ``location`` URL is read when the profile does not say: by status code (the
Azure REST API guidelines' Location pattern); its terminal body is the result document."""
KNOWN_KEYS: Final = frozenset((*STATE_LISTS, *EXPRESSION_KEYS, *OTHER_KEYS))
COUNT_KEYS: Final = frozenset(("succeeded", "failed", "total", "canceled", "expired"))
SCHEMA_KEY: Final = "$schema"
"""Names the JSON Schema for editors; accepted (a string) and ignored: not kept in ``source``."""
MAX_PROFILE_BYTES: Final = 1024 * 1024
"""A profile file larger than this (1 MiB) is refused unread: a profile is a small table."""
DEFAULT_REQUEST_ID_HEADERS: Final = ("x-request-id", "request-id", "x-ms-request-id")
TIME_FORMATS: Final = ("rfc3339", "epoch_s")
"""How a body's times (``expires_at``, ``next_check_at``) are written: RFC 3339 text or
a Unix time in seconds (a JSON number)."""
RPC_CANCELLED: Final = 1
"""google.rpc.Code CANCELLED: an AIP-151 operation canceled by request ends done with it."""

_ValueKey = tuple[str, object]


def _value_key(value: object, *, fold: bool = False) -> _ValueKey | None:
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


def parse_rfc3339(value: object) -> datetime | None:
    """Parse an RFC 3339 time with a zone offset (``Z`` allowed); ``None`` if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def parse_time(value: object, time_format: str) -> datetime | None:
    """Parse a body time in *time_format*; ``None`` if it is not one.

    ``rfc3339``: see :func:`parse_rfc3339`. ``epoch_s``: a non-negative JSON number of
    seconds since 1970-01-01T00:00:00Z (OpenAI's Batch times), aware UTC.
    """
    if time_format != "epoch_s":
        return parse_rfc3339(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """A provider's state table, validated and compiled.

    Build one with :func:`parse_profile` (a mapping) or :func:`load_profile` (a JSON
    or TOML file). ``source`` is the validated data as given; it is what a store
    persists and what docs print.
    """

    name: str
    source: Mapping[str, JSON]
    states: Mapping[_ValueKey, Classification] = field(repr=False)
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
        key = _value_key(value, fold=self.case_insensitive)
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
                key = _value_key(raw_state, fold=self.case_insensitive)
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


def _refuse_nulls(where: str, data: Mapping[str, object]) -> None:
    """A key given as ``null`` is a mistake, never "absent": say which (top level, and in
    the ``submit`` and ``cancel`` sections)."""
    sections = [("", data)] + [
        (f"{name}.", section)
        for name in ("submit", "cancel")
        if isinstance(section := data.get(name), Mapping)
    ]
    for prefix, section in sections:
        nulls = sorted(str(key) for key, value in section.items() if value is None)
        if nulls:
            raise ProfileError(f"{where}: {prefix}{nulls[0]} is null; leave the key out instead")


def _text(value: JSON) -> str | None:
    if value is None or isinstance(value, list | dict):
        return None
    return value if isinstance(value, str) else json.dumps(value)


def parse_profile(data: object, *, name: str = "inline") -> Profile:
    """Validate and compile a profile from a mapping in the profile format.

    Args:
        data: the profile's keys (the format: ``docs/profile-format.md``; a
            ``$schema`` string is accepted for editors and left out of ``source``).
        name: what error messages and records call the profile.

    Raises:
        ProfileError: an unknown key, a value in two lists, no state source
            (``state``, ``done`` or ``http_status_states``), a list state without any
            value list, an expression that does not compile, or a wrong type.
    """
    where = f"profile {name}"
    if not isinstance(data, Mapping):
        raise ProfileError(
            f"{where}: expected an object of profile keys, got {type(data).__name__}"
        )
    unknown = sorted(set(data) - KNOWN_KEYS)
    if unknown:
        raise ProfileError(
            f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(sorted(KNOWN_KEYS))})"
        )
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{where}: every value must be plain JSON ({exc})") from None
    except RecursionError:
        raise ProfileError(f"{where}: nested too deeply to be a profile") from None
    _refuse_nulls(where, data)
    if "name" in data and not isinstance(data["name"], str):
        raise ProfileError(f"{where}: name must be a string")
    if "description" in data and not isinstance(data["description"], str):
        raise ProfileError(f"{where}: description must be a string")
    docs = data.get("docs", [])
    if not all(isinstance(d, str) and d for d in (docs if isinstance(docs, list) else [docs])):
        raise ProfileError(f"{where}: docs must be a URL or a list of URLs (non-empty strings)")
    if SCHEMA_KEY in data and not isinstance(data[SCHEMA_KEY], str):
        raise ProfileError(f"{where}: $schema must be a string (the schema's path or URL)")
    if not any(key in data for key in ("state", "done", "http_status_states")):
        raise ProfileError(
            f"{where}: no state source; give 'state', 'done' or 'http_status_states'"
        )

    submit_data = data.get("submit")
    first = submit_data.get("http_status_states") if isinstance(submit_data, Mapping) else None
    fold = data.get("case_insensitive_states", False)
    if not isinstance(fold, bool):
        raise ProfileError(f"{where}: case_insensitive_states must be true or false")
    for flag in ("trace_context", "result_for_every_ending", "errors_url_query_safe"):
        if not isinstance(data.get(flag, False), bool):
            raise ProfileError(f"{where}: {flag} must be true or false")
    states: dict[_ValueKey, Classification] = {}
    listed: dict[_ValueKey, tuple[str, object]] = {}
    for list_name in STATE_LISTS:
        values = data.get(list_name, [])
        if not isinstance(values, list):
            raise ProfileError(f"{where}: {list_name} must be a list of state values")
        for value in values:
            key = _value_key(value, fold=fold)
            if key is None:
                raise ProfileError(
                    f"{where}: {list_name} holds {value!r}; state values are strings, "
                    "finite numbers or booleans"
                )
            if key in listed:
                other, earlier = listed[key]
                if earlier != value:
                    raise ProfileError(
                        f"{where}: state values {earlier!r} ({other}) and {value!r} "
                        f"({list_name}) are the same ignoring case"
                    )
                where_else = (
                    f"twice in {list_name}"
                    if other == list_name
                    else f"in both {other} and {list_name}"
                )
                raise ProfileError(f"{where}: state value {value!r} is {where_else}")
            listed[key] = (list_name, value)
            states[key] = Classification(list_name)
    if "state" in data and not states:
        raise ProfileError(
            f"{where}: 'state' is given but no value list "
            f"({', '.join(STATE_LISTS)}); every value would be unknown"
        )

    expressions = {
        key: compile_expression(where, key, data[key]) for key in EXPRESSION_KEYS if key in data
    }
    required = data.get("require_on_success", [])
    if not isinstance(required, list):
        raise ProfileError(f"{where}: require_on_success must be a list of expressions")
    require_on_success = tuple(
        (str(text), compile_expression(where, "require_on_success", text)) for text in required
    )
    codes, classes = _parse_codes(where, "http_status_states", data.get("http_status_states"))
    status = StateTable(
        state=expressions.get("state"),
        codes=codes,
        code_classes=classes,
        unlisted=_parse_unlisted(where, "unlisted_state", data.get("unlisted_state")),
    )
    codes, classes = _parse_codes(where, "submit.http_status_states", first)
    first_answer = StateTable(codes=codes, code_classes=classes)
    tables = {UrlKind.STATUS: status} | _parse_url_kinds(where, data.get("url_kinds"))
    submit = parse_submit(where, data.get("submit"), job_id=expressions.get("job_id"))
    for source in submit.polling:
        if source.kind not in tables:
            raise ProfileError(
                f"{where}: submit.polling_url names kind {source.kind.value!r} but "
                f"url_kinds has no {source.kind.value!r} entry"
            )
    return Profile(
        name=name,
        source={key: value for key, value in data.items() if key != SCHEMA_KEY},
        states=states,
        expressions=expressions,
        require_on_success=require_on_success,
        count_expressions=_parse_counts(where, data.get("counts")),
        tables=tables,
        first_answer=first_answer,
        case_insensitive=fold,
        hint_headers=parse_hint_headers(where, data.get("hint_headers"), "hint_headers"),
        request_id_headers=_parse_header_names(where, data.get("request_id_headers")),
        result_url_template=_parse_template(where, data),
        submit=submit,
        cancel=parse_cancel(where, data.get("cancel")),
        throttle=parse_throttle(where, data.get("throttle")),
        time_format=_parse_time_format(where, data.get("time_format")),
        webhook=None if "webhook" not in data else parse_webhook_contract(where, data["webhook"]),
        trace_context=bool(data.get("trace_context", False)),
        decided_by=parse_decided_by(where, data.get("decided_by")),
        result_for_every_ending=bool(data.get("result_for_every_ending", False)),
        errors_url_query_safe=bool(data.get("errors_url_query_safe", False)),
    )


def _parse_url_kinds(where: str, data: object) -> dict[UrlKind, StateTable]:
    """``url_kinds``: how ``location`` and ``resource`` URLs are read.

    A ``location`` URL is read by :data:`LOCATION_DEFAULTS` unless the profile says
    otherwise; a ``resource`` URL must name its ``state``.
    """
    kinds = checked_section(where, "url_kinds", {} if data is None else data, _KINDS)
    tables = {}
    for kind in (UrlKind.LOCATION, UrlKind.RESOURCE):
        at = f"url_kinds.{kind.value}"
        section = kinds.get(kind.value, LOCATION_DEFAULTS if kind is UrlKind.LOCATION else None)
        if section is None:
            continue
        section = checked_section(where, at, section, URL_KIND_KEYS)
        if kind is UrlKind.RESOURCE and "state" not in section:
            raise ProfileError(f"{where}: {at} needs 'state' (where the resource keeps it)")
        codes, classes = _parse_codes(
            where, f"{at}.http_status_states", section.get("http_status_states")
        )
        tables[kind] = StateTable(
            state=_compiled(where, f"{at}.state", section.get("state")),
            codes=codes,
            code_classes=classes,
            when_no_state=_parse_when_no_state(where, f"{at}.when_no_state", section),
            unlisted=_parse_unlisted(where, f"{at}.unlisted_state", section.get("unlisted_state")),
        )
    return tables


def _parse_when_no_state(
    where: str, key: str, section: Mapping[str, object]
) -> dict[int, Classification]:
    """``when_no_state``: what a 2xx body without a state means, by its status code."""
    table = _parse_http_status_states(where, key, section.get("when_no_state"))
    outside = sorted(code for code in table if not 200 <= code < 300)
    if outside:
        raise ProfileError(f"{where}: {key} key {outside[0]} is not a 2xx status")
    return table


def _compiled(where: str, key: str, text: object) -> Expression | None:
    return None if text is None else compile_expression(where, key, text)


def _parse_unlisted(where: str, key: str, value: object) -> Classification:
    if value is None:
        return Classification.UNKNOWN
    if value not in UNLISTED_STATES:
        raise ProfileError(f"{where}: {key} = {value!r}; expected 'unknown' or 'pending'")
    return Classification(value)


def _parse_codes(
    where: str, key: str, table: object
) -> tuple[dict[int, Classification], dict[int, Classification]]:
    """An ``http_status_states`` table split into exact codes and ``"4xx"``-style rows
    (keyed by the status class: 2, 4 or 5)."""
    exact: object = table
    classes: dict[int, Classification] = {}
    if isinstance(table, Mapping):
        exact = {k: v for k, v in table.items() if not re.fullmatch(r"[245]xx", str(k))}
        for row, value in table.items():
            if row not in exact:
                classes[int(str(row)[0])] = _class(where, f"{key}[{row}]", value)
    return _parse_http_status_states(where, key, exact), classes


def _parse_counts(where: str, counts: object) -> dict[str, tuple[Expression, ...]]:
    if counts is None:
        return {}
    counts = checked_section(where, "counts", counts, COUNT_KEYS)
    parsed: dict[str, tuple[Expression, ...]] = {}
    for key, value in counts.items():
        items = value if isinstance(value, list) else [value]
        parsed[key] = tuple(compile_expression(where, f"counts.{key}", item) for item in items)
    return parsed


def _parse_http_status_states(where: str, key: str, table: object) -> dict[int, Classification]:
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ProfileError(f"{where}: {key} must map HTTP status codes to classes")
    parsed: dict[int, Classification] = {}
    for code, value in table.items():
        if not re.fullmatch(r"[1-5][0-9][0-9]", str(code)):
            raise ProfileError(f"{where}: {key} key {code!r} is not an HTTP status")
        parsed[int(code)] = _class(where, f"{key}[{code}]", value)
    return parsed


def _class(where: str, at: str, value: object) -> Classification:
    allowed = [c.value for c in Classification if c is not Classification.UNKNOWN]
    if value not in allowed:
        raise ProfileError(f"{where}: {at} = {value!r}; expected one of {', '.join(allowed)}")
    return Classification(value)


def _parse_time_format(where: str, value: object) -> str:
    if value is None:
        return "rfc3339"
    if value not in TIME_FORMATS:
        raise ProfileError(
            f"{where}: time_format = {value!r}; expected {TIME_FORMATS[0]!r} or {TIME_FORMATS[1]!r}"
        )
    return str(value)


def _parse_header_names(where: str, names: object) -> tuple[str, ...]:
    if names is None:
        return DEFAULT_REQUEST_ID_HEADERS
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ProfileError(f"{where}: request_id_headers must be a list of header names")
    return tuple(n.lower() for n in names)


def _parse_template(where: str, data: Mapping[str, object]) -> str | None:
    template = data.get("result_url_template")
    if template is None:
        if "result_id" in data:
            raise ProfileError(f"{where}: result_id needs result_url_template to build the URL")
        return None
    if not isinstance(template, str) or "{result_id}" not in template:
        raise ProfileError(f"{where}: result_url_template must be a string with {{result_id}}")
    if "result_id" not in data:
        raise ProfileError(f"{where}: result_url_template needs result_id to fill it")
    return template


def load_profile(path: str | Path) -> Profile:
    """Load a profile from a JSON (``.json``) or TOML (``.toml``) file.

    Raises:
        ProfileError: the file cannot be read or parsed, or the table is invalid
            (see :func:`parse_profile`).
    """
    path = Path(path)
    try:
        raw = read_bounded(path, MAX_PROFILE_BYTES)
        text = raw.decode("utf-8")
    except OSError as exc:
        raise ProfileError(f"profile file {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ProfileError(f"profile file {path}: not UTF-8 text") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(
            f"profile file {path}: larger than {MAX_PROFILE_BYTES // 1024} KiB; a profile "
            "is a small table"
        )
    try:
        if path.suffix.lower() == ".toml":
            data: object = tomllib.loads(text)
        else:
            data = json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"profile file {path}: not valid {_kind(path)} ({exc})") from None
    except RecursionError:
        raise ProfileError(f"profile file {path}: nested too deeply to be a profile") from None
    name = data.get("name") if isinstance(data, dict) else None
    return parse_profile(data, name=name if isinstance(name, str) else path.stem)


def _kind(path: Path) -> str:
    return "TOML" if path.suffix.lower() == ".toml" else "JSON"
