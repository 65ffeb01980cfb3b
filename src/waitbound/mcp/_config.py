"""The MCP server's configuration: which providers an agent may start jobs at, and how.

A TOML file (``waitbound mcp --config FILE``)::

    [server]
    default_wait_seconds = 25   # await_job's ceiling when the agent names none
    max_wait_seconds = 50       # the highest ceiling an agent may ask for
    max_answer_chars = 4000     # result or error text in one tool answer
    list_limit = 20             # operations list_jobs shows at most
    max_response_bytes = 1048576  # the largest provider answer read
    task_retention_seconds = 86400  # how long a task outlives its deadline (ttlMs)
    inbox_url = "https://waitbound.example/inbox"  # where a person decides (serve)

    [providers.reports]
    base_url = "https://api.example.com"
    profile = "next-action"     # a built-in name, a profile file, or an inline table
    submit_path = "/v1/runs"    # start_job's path when the agent names none
    allowed_paths = ["/v1/runs", "/v1/exports/*"]   # fnmatch patterns
    allowed_methods = ["POST"]
    allow_cancel = false
    decide_via_elicitation = false  # a tasks/update answer IS a person's decision?
    headers = { Authorization = "Bearer ${REPORTS_TOKEN}" }
    trusted_origins = ["https://files.example.com"]  # more places its URLs may name
    policy = { deadline_s = 3600, max_requests = 120 }

Header values take ``${NAME}`` from the server's environment when the file is loaded,
so an agent never passes (or sees) a secret. Header values are credentials: echoed
back by a provider, they are redacted before anything is stored or answered.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from waitbound._base._config_file import expand_env, load_toml
from waitbound._base._errors import UsageError, WaitboundError
from waitbound._base._secrets import credential_values
from waitbound._engine._operation import check_url
from waitbound._model._record import Policy
from waitbound._profile._contract import Profile
from waitbound._profile._contract_parse import parse_profile
from waitbound._profile._policy import quiet_budget_warning
from waitbound._rules._credentials import Binding, BoundCredentials, Place
from waitbound.mcp._labels import LABEL_PREFIX
from waitbound.profiles import resolve_profile
from waitbound.stores import is_postgres_dsn

__all__ = ["McpConfig", "ProviderConfig", "load_config", "parse_config"]

_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 §5.6.2
_FIELD_VALUE: Final = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")  # §5.5, ASCII
_METHODS: Final = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderConfig:
    """One provider an agent may start jobs at.

    Attributes:
        name: what the agent calls it (``start_job(provider=...)``).
        base_url: scheme, host, port and an optional path prefix; job paths are
            appended to it. Credentials go to this origin only.
        profile: the provider's contract (state table, receipt, result, cancel).
        submit_path: the path ``start_job`` uses when the agent names none.
        allowed_paths: ``fnmatch`` patterns a job path must match.
        allowed_methods: HTTP methods an agent may submit with.
        allow_cancel: whether agents may cancel this provider's jobs.
        decide_via_elicitation: whether an MCP client's answer to a task's
            ``input_required`` elicitation (``tasks/update``) is recorded as a
            person's decision (``waitbound.decide``); when false it is recorded as a
            request a person decides, like ``request_extension``.
        headers: sent with every request under ``base_url`` (or to a trusted origin),
            never stored.
        trusted_origins: more origins (``https://files.example.com``) the provider's
            operations may send requests to, with ``headers``; any other place is
            refused (see :meth:`binding`).
        secrets: the credentials in ``headers`` (see
            :func:`waitbound._base._secrets.secret_parts`), kept out of every tool answer.
        policy: deadline, budgets and pacing of each job (seconds).
    """

    name: str
    base_url: str
    profile: Profile
    submit_path: str
    allowed_paths: tuple[str, ...]
    allowed_methods: tuple[str, ...] = ("POST",)
    allow_cancel: bool = False
    decide_via_elicitation: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    policy: Policy = field(default_factory=Policy)
    trusted_origins: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The label of this provider's operations in the store: ``mcp:NAME``."""
        return f"{LABEL_PREFIX}{self.name}"

    def binding(self) -> Binding:
        """Where this provider's headers, and its operations' requests, may go: under
        ``base_url`` (origin and path) and to ``trusted_origins``; an ``mcp:NAME``
        operation that names anywhere else is refused, not driven."""
        return Binding(
            headers=self.headers,
            places=(Place.of(self.base_url), *(Place.of(o) for o in self.trusted_origins)),
            label=self.label,
            exclusive=True,
            name=f"provider {self.name}",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class McpConfig:
    """The whole configuration. Durations in seconds.

    Attributes:
        providers: by name.
        store: the store path or PostgreSQL DSN (``--store`` wins), or ``None``.
        default_wait_seconds: ``await_job``'s ceiling when the agent names none.
        max_wait_seconds: the highest ceiling an agent may ask for (many clients cut
            a tool call off at 60 s).
        max_answer_chars: the most characters of result or error in one answer.
        list_limit: the most operations ``list_jobs`` shows.
        max_response_bytes: the largest provider answer read (a result included).
        task_retention_seconds: how long a task outlives its operation's deadline
            (its ``ttlMs`` is the deadline, from creation, plus this).
        inbox_url: where a person decides (``waitbound serve``'s inbox), named in a
            task's ``statusMessage`` when an answer cannot decide; ``None``: the
            ``waitbound decide`` command is named instead.
    """

    providers: Mapping[str, ProviderConfig]
    store: str | None = None
    default_wait_seconds: float = 25.0
    max_wait_seconds: float = 50.0
    max_answer_chars: int = 4000
    list_limit: int = 20
    max_response_bytes: int = 1024 * 1024
    task_retention_seconds: float = 86400.0
    inbox_url: str | None = None

    def credentials(self) -> BoundCredentials:
        """Every provider's headers, bound to its places (see
        :meth:`ProviderConfig.binding`): what the server's requests carry."""
        return BoundCredentials(tuple(p.binding() for p in self.providers.values()))

    def secrets(self) -> list[str]:
        """Every provider's secrets, longest first (to scrub from answers)."""
        values = {v for p in self.providers.values() for v in p.secrets}
        return sorted(values, key=len, reverse=True)


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> McpConfig:
    """Read and check a configuration file.

    Args:
        path: the TOML file.
        environ: where ``${NAME}`` in header values is looked up (``os.environ``).

    Raises:
        UsageError: the file cannot be read, is not TOML, or holds a bad value; the
            message names the file and the key, never a header value.
    """
    return load_toml(
        path,
        "config file",
        lambda data: parse_config(data, base_dir=Path(path).parent, environ=environ),
    )


def parse_config(
    data: Mapping[str, Any], *, base_dir: Path, environ: Mapping[str, str] | None = None
) -> McpConfig:
    """Check a configuration already parsed from TOML (see :func:`load_config`).

    Raises:
        UsageError: a bad value, named by its key.
    """
    env = os.environ if environ is None else environ
    _only(data, {"server", "providers"}, "the top level")
    server = _table(data.get("server", {}), "[server]")
    _only(server, {f.name for f in fields(McpConfig)} - {"providers"}, "[server]")
    providers = _table(data.get("providers", {}), "[providers]")
    if not providers:
        raise UsageError("no [providers.NAME] table: name at least one provider")
    config = McpConfig(
        providers={
            name: _provider(name, _table(raw, f"[providers.{name}]"), base_dir, env)
            for name, raw in providers.items()
        },
        store=_store(server.get("store"), base_dir),
        default_wait_seconds=_seconds(server.get("default_wait_seconds", 25), "default_wait"),
        max_wait_seconds=_seconds(server.get("max_wait_seconds", 50), "max_wait"),
        max_answer_chars=_whole(server.get("max_answer_chars", 4000), "max_answer_chars", 200),
        list_limit=_whole(server.get("list_limit", 20), "list_limit", 1),
        max_response_bytes=_whole(
            server.get("max_response_bytes", 1024 * 1024), "max_response_bytes", 1024
        ),
        task_retention_seconds=_retention(server.get("task_retention_seconds", 86400)),
        inbox_url=_inbox_url(server.get("inbox_url")),
    )
    if config.default_wait_seconds > config.max_wait_seconds:
        raise UsageError("server.default_wait_seconds must not exceed server.max_wait_seconds")
    return config


_PROVIDER_KEYS: Final = frozenset(
    {
        "base_url",
        "profile",
        "submit_path",
        "allowed_paths",
        "allowed_methods",
        "allow_cancel",
        "decide_via_elicitation",
        "headers",
        "policy",
        "trusted_origins",
    }
)


def _provider(
    name: str, raw: Mapping[str, Any], base_dir: Path, env: Mapping[str, str]
) -> ProviderConfig:
    where = f"providers.{name}"
    if not _NAME.fullmatch(name):
        raise UsageError(f"provider name {name[:40]!r} must be 1-64 letters, digits, '_' or '-'")
    _only(raw, _PROVIDER_KEYS, f"[{where}]")
    base_url = check_url(_text(raw.get("base_url"), f"{where}.base_url"), f"{where}.base_url")
    if "?" in base_url or "#" in base_url:
        raise UsageError(f"{where}.base_url must have no query or fragment (use headers)")
    try:
        Place.of(base_url)
    except ValueError:
        raise UsageError(
            f"{where}.base_url: its path must hold no '.', '..' or escaped '/'"
        ) from None
    trusted = _origins(raw.get("trusted_origins", []), f"{where}.trusted_origins")
    submit_path = _path(raw.get("submit_path", "/"), f"{where}.submit_path")
    allowed = raw.get("allowed_paths", [submit_path])
    if not isinstance(allowed, list) or not allowed:
        raise UsageError(f"{where}.allowed_paths must be a non-empty list of path patterns")
    methods = raw.get("allowed_methods", ["POST"])
    if not isinstance(methods, list) or not methods:
        raise UsageError(f"{where}.allowed_methods must be a non-empty list")
    checked_methods = []
    for method in methods:
        if not isinstance(method, str) or method.upper() not in _METHODS:
            raise UsageError(
                f"{where}.allowed_methods: {method!r} is not one of {sorted(_METHODS)}"
            )
        checked_methods.append(method.upper())
    headers, secrets = _headers(raw.get("headers", {}), where, env)
    allow_cancel = raw.get("allow_cancel", False)
    if not isinstance(allow_cancel, bool):
        raise UsageError(f"{where}.allow_cancel must be true or false")
    decide_via_elicitation = raw.get("decide_via_elicitation", False)
    if not isinstance(decide_via_elicitation, bool):
        raise UsageError(f"{where}.decide_via_elicitation must be true or false")
    return ProviderConfig(
        name=name,
        base_url=base_url.rstrip("/"),
        profile=_profile(raw.get("profile"), where, base_dir),
        submit_path=submit_path,
        allowed_paths=tuple(_path(p, f"{where}.allowed_paths") for p in allowed),
        allowed_methods=tuple(checked_methods),
        allow_cancel=allow_cancel,
        decide_via_elicitation=decide_via_elicitation,
        headers=headers,
        secrets=secrets,
        policy=_policy(raw.get("policy", {}), where),
        trusted_origins=trusted,
    )


def _origins(raw: object, what: str) -> tuple[str, ...]:
    """Origins (``scheme://host[:port]``, no path), checked."""
    if not isinstance(raw, list) or len(raw) > 20:
        raise UsageError(f"{what} must be a list of at most 20 origins (scheme://host[:port])")
    found = []
    for text in raw:
        url = check_url(_text(text, what), what)
        if Place.of(url).path or any(c in url for c in "?#"):
            raise UsageError(f"{what}: {url[:80]!r} must be an origin (scheme://host[:port])")
        found.append(url)
    return tuple(found)


def _profile(raw: object, where: str, base_dir: Path) -> Profile:
    try:
        if isinstance(raw, str):
            candidate = base_dir / raw
            return resolve_profile(candidate if candidate.exists() else raw)
        if isinstance(raw, dict):
            return parse_profile(raw, name=str(raw.get("name", where)))
    except WaitboundError as exc:
        raise UsageError(f"{where}.profile: {exc}") from None
    if raw is None:
        raise UsageError(f"{where}.profile is missing: name a built-in profile or a file")
    raise UsageError(f"{where}.profile must name a built-in profile, a file, or be a table")


def _headers(
    raw: object, where: str, env: Mapping[str, str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The headers with ``${NAME}`` expanded, and the secrets in them."""
    table = _table(raw, f"{where}.headers")
    headers = {}
    for name, value in table.items():
        if not _TOKEN.fullmatch(name):
            raise UsageError(f"{where}.headers: {name[:40]!r} is not a valid header name")
        if not isinstance(value, str):
            raise UsageError(f"{where}.headers.{name} must be text")

        expanded = expand_env(value, f"{where}.headers.{name}", env)
        if not _FIELD_VALUE.fullmatch(expanded):
            raise UsageError(
                f"{where}.headers.{name}: the value (after ${{NAME}} expansion) must be "
                "printable ASCII without leading or trailing spaces"
            )
        headers[name] = expanded
    return headers, credential_values(headers)


def _policy(raw: object, where: str) -> Policy:
    table = _table(raw, f"{where}.policy")
    known = {f.name for f in fields(Policy)}
    _only(table, known, f"[{where}.policy]")
    try:
        with quiet_budget_warning():  # said as one line by the command that loads it
            return Policy(**table)
    except UsageError as exc:
        raise UsageError(f"{where}.policy: {exc}") from None


def _table(raw: object, what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise UsageError(f"{what} must be a table")
    return raw


def _only(table: Mapping[str, Any], known: set[str] | frozenset[str], what: str) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise UsageError(f"{what}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")


def _text(raw: object, what: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise UsageError(f"{what} must be non-empty text")
    return raw


def _store(raw: object, base_dir: Path) -> str | None:
    """The store named in the file; a relative SQLite path is read from the file's folder."""
    if raw is None:
        return None
    spec = _text(raw, "server.store")
    if is_postgres_dsn(spec) or spec == "memory:" or Path(spec).is_absolute():
        return spec
    return str(base_dir / spec)


def _path(raw: object, what: str) -> str:
    text = _text(raw, what)
    if not text.startswith("/") or "://" in text or ".." in text.split("/"):
        raise UsageError(f"{what}: {text[:60]!r} must be a path starting with '/' (no '..')")
    return text


def _seconds(raw: object, what: str) -> float:
    ok = isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw)
    if not ok or raw <= 0 or raw > 3600:  # type: ignore[operator]
        raise UsageError(f"server.{what}_seconds must be a number of seconds in (0, 3600]")
    return float(raw)  # type: ignore[arg-type]


_MAX_RETENTION_S: Final = 365 * 86400


def _retention(raw: object) -> float:
    ok = isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw)
    if not ok or not 0 <= raw <= _MAX_RETENTION_S:  # type: ignore[operator]
        raise UsageError(
            f"server.task_retention_seconds must be a number of seconds in [0, {_MAX_RETENTION_S}]"
        )
    return float(raw)  # type: ignore[arg-type]


def _inbox_url(raw: object) -> str | None:
    if raw is None:
        return None
    url = check_url(_text(raw, "server.inbox_url"), "server.inbox_url")
    if len(url) > 500:
        raise UsageError("server.inbox_url must be at most 500 characters")
    return url


def _whole(raw: object, what: str, minimum: int) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < minimum:
        raise UsageError(f"server.{what} must be a whole number >= {minimum}")
    return raw
