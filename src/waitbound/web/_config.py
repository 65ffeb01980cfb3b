"""``serve.toml``: the receivers (``[webhooks.NAME]``) and the completion signing
secret (``[notify]``), read once at start. See ``docs/serve.md`` and
``docs/webhooks.md``.

Every key is checked when the file is read: an unknown key, a receiver name that
cannot be a URL segment, a scheme not known, a secret shorter than 16 characters (or,
for ``standard`` and ``[notify]``, not ``whsec_`` base64 of a key of at least 16 bytes),
a ``job_id`` that is not JMESPath, a tolerance or body cap out of bounds. The first
problem is one line naming the file and the key, never a value.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import jmespath.parser

from waitbound._base._config_file import expand_env, load_toml
from waitbound._base._errors import ProfileError, UsageError
from waitbound._base._jmes import compile_expression
from waitbound._base._secrets import secret_parts
from waitbound._profile._webhooks import (
    MIN_SHARED_SECRET_CHARS,
    STANDARD_SECRET_PREFIX,
    Scheme,
    WebhookContract,
    standard_secret_key,
)
from waitbound.profiles import builtin_names, builtin_profile
from waitbound.web._auth import TrustedProxy
from waitbound.web._hosts import host_name
from waitbound.web._tokens import DECIDER, ROLES

__all__ = [
    "AUTH_KEYS",
    "DEFAULT_INBOX_RETENTION_DAYS",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_TOLERANCE_S",
    "MAX_BODY_BYTES_RANGE",
    "RECEIVER_KEYS",
    "TOLERANCE_S_RANGE",
    "Receiver",
    "ServeConfig",
    "load_serve_config",
    "redaction_strings",
]

DEFAULT_TOLERANCE_S: Final = 300.0
"""How far a delivery's signed timestamp may be from now, either way (seconds)."""
DEFAULT_MAX_BODY_BYTES: Final = 1_048_576
"""The largest delivery body a receiver reads (bytes)."""
DEFAULT_INBOX_RETENTION_DAYS: Final = 30
"""How long the webhook inbox keeps a delivery that is done with (days)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Receiver:
    """One ``[webhooks.NAME]`` table: ``POST /webhooks/NAME``.

    Attributes:
        name: the provider scope job ids match in (``--webhook NAME`` on an operation).
        scheme: how deliveries are signed.
        secrets: the secrets that verify them (several during a rotation); never shown.
        job_id: JMESPath over the payload naming the job.
        job_id_text: the expression as written (for messages and docs).
        authoritative: the payload is read like a status body.
        tolerance_s: the signed timestamp's allowed distance from now (seconds).
        max_body_bytes: the largest body read.
    """

    name: str
    scheme: Scheme
    secrets: tuple[str, ...] = field(repr=False)
    job_id: jmespath.parser.ParsedResult
    job_id_text: str
    authoritative: bool = False
    tolerance_s: float = DEFAULT_TOLERANCE_S
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeConfig:
    """What ``serve.toml`` says (an empty config: no receivers, no notify secret)."""

    receivers: dict[str, Receiver] = field(default_factory=dict)
    notify_secret: str | None = field(default=None, repr=False)
    proxy: TrustedProxy | None = None
    """``[auth]``: the authenticating proxy whose user header is believed (``None``: none)."""
    allowed_hosts: tuple[str, ...] = ()
    """``[auth] allowed_hosts``: host names served beside the listener's own (the public
    name a reverse proxy passes on; see ``waitbound.web._hosts``)."""
    inbox_retention_s: float | None = DEFAULT_INBOX_RETENTION_DAYS * 86400.0
    """``[inbox] retention_days`` in seconds: deliveries done with are deleted once older
    (``None``: kept forever, ``retention_days = 0``)."""

    literal_secrets: bool = False
    """Whether the file itself holds a secret (one not given as ``${NAME}``)."""

    @property
    def holds_secrets(self) -> bool:
        """Whether the file holds a secret value itself (it is then warned about when
        others may read it)."""
        return self.literal_secrets

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every secret the file holds: each receiver's, then the notify secret."""
        held = [secret for receiver in self.receivers.values() for secret in receiver.secrets]
        return (*held, self.notify_secret) if self.notify_secret else tuple(held)


def redaction_strings(values: Iterable[str]) -> tuple[str, ...]:
    """What to replace by ``[redacted]`` so that none of the secret *values* is kept:
    each value and the base64 part of a ``whsec_`` one, with their space-separated
    parts, longest first (see :func:`waitbound._base._secrets.secret_parts`)."""
    given = list(values)
    return secret_parts([*given, *(v.removeprefix(STANDARD_SECRET_PREFIX) for v in given)])


RECEIVER_KEYS: Final = frozenset(
    ("scheme", "secrets", "job_id", "authoritative", "profile", "tolerance_s", "max_body_bytes")
)
"""The keys of one ``[webhooks.NAME]`` table."""
TOLERANCE_S_RANGE: Final = (1.0, 3600.0)
"""``tolerance_s`` bounds, inclusive (seconds)."""
MAX_BODY_BYTES_RANGE: Final = (1024, 32 * 1024 * 1024)
"""``max_body_bytes`` bounds, inclusive (1 KiB to 32 MiB; GitHub caps payloads at 25 MB)."""
_TOP_KEYS: Final = frozenset(("webhooks", "notify", "auth", "inbox"))
INBOX_RETENTION_DAYS_RANGE: Final = (0, 3650)
"""``[inbox] retention_days`` bounds, inclusive (0: keep forever)."""
MIN_INBOX_RETENTION_DAYS: Final = 1 / 24
"""The shortest positive ``retention_days`` (one hour): the prune runs every hour, so a
shorter one means nothing an hour does not, and a tiny one (``1e-320``) is a typo that
would drop every delivery as soon as it is done."""
AUTH_KEYS: Final = frozenset(("trusted_proxies", "user_header", "proxy_role", "allowed_hosts"))
"""The keys of the ``[auth]`` table."""
_HEADER_NAME: Final = re.compile(r"[A-Za-z0-9-]{1,64}")
_ENV_ONLY: Final = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
"""A secret given only as ``${NAME}``: the file itself holds no secret then."""
_NOTIFY_KEYS: Final = frozenset(("secret",))
_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def load_serve_config(path: str | Path, *, env: Mapping[str, str] = os.environ) -> ServeConfig:
    """Read ``serve.toml``.

    ``${NAME}`` in a secret is replaced by the environment variable NAME. With
    ``profile = "NAME"``, a receiver takes ``scheme``, ``job_id`` and ``authoritative``
    from that built-in profile's ``webhook`` key; a key given in the table wins.

    Args:
        path: the TOML file.
        env: where ``${NAME}`` is looked up.

    Raises:
        UsageError: the file cannot be read, is not TOML, or holds a bad key or value;
            one line starting ``serve config PATH:`` and naming the key, never a value.
    """
    return load_toml(path, "serve config", lambda data: _parse(data, env))


def _parse(data: Mapping[str, Any], env: Mapping[str, str]) -> ServeConfig:
    _known(data, _TOP_KEYS, "the top level")
    webhooks = data.get("webhooks", {})
    if not isinstance(webhooks, dict):
        raise UsageError("webhooks must be a table of [webhooks.NAME] tables")
    receivers: dict[str, Receiver] = {}
    for name, table in webhooks.items():
        if not _NAME.fullmatch(name):
            raise UsageError(
                f"webhooks.{name[:64]!a}: a receiver name is 1-64 of a-z, 0-9, _ and -, "
                "starting with a letter or digit (it is the URL path /webhooks/NAME)"
            )
        receivers[name] = _receiver(name, table, env)
    notify_secret: str | None = None
    if "notify" in data:
        notify = data["notify"]
        if not isinstance(notify, dict):
            raise UsageError("notify must be a table with secret")
        _known(notify, _NOTIFY_KEYS, "notify")
        if "secret" not in notify:
            raise UsageError("notify.secret is required (a whsec_ secret)")
        notify_secret = _secret(notify["secret"], "notify.secret", Scheme.STANDARD, env)
    proxy = _proxy(data["auth"]) if "auth" in data else None
    hosts = _allowed_hosts(data["auth"]) if "auth" in data else ()
    raw = [s for t in webhooks.values() for s in t.get("secrets", [])]
    if isinstance(data.get("notify"), dict):
        raw.append(data["notify"].get("secret"))
    literal = any(isinstance(r, str) and not _ENV_ONLY.fullmatch(r.strip()) for r in raw)
    return ServeConfig(
        receivers=receivers,
        notify_secret=notify_secret,
        proxy=proxy,
        allowed_hosts=hosts,
        literal_secrets=literal,
        inbox_retention_s=_retention(data["inbox"]) if "inbox" in data else _DEFAULT_RETENTION_S,
    )


_DEFAULT_RETENTION_S: Final = DEFAULT_INBOX_RETENTION_DAYS * 86400.0


def _retention(table: object) -> float | None:
    """``[inbox] retention_days`` in seconds (``0``: ``None``, kept forever)."""
    if not isinstance(table, dict):
        raise UsageError("inbox must be a table with retention_days")
    _known(table, frozenset(("retention_days",)), "inbox")
    days = table.get("retention_days", DEFAULT_INBOX_RETENTION_DAYS)
    low, high = INBOX_RETENTION_DAYS_RANGE
    if (
        isinstance(days, bool)
        or not isinstance(days, int | float)
        or not low <= days <= high
        or 0 < days < MIN_INBOX_RETENTION_DAYS
    ):
        raise UsageError(
            f"inbox.retention_days must be 0 (keep every delivery) or a number of days "
            f"from 1/24 (one hour, how often the inbox is pruned) to {high}, got {days!r:.40}"
        )
    return None if days == 0 else float(days) * 86400.0


def _allowed_hosts(table: object) -> tuple[str, ...]:
    """``[auth] allowed_hosts``: a list of host names (no scheme, path or port)."""
    raw = table.get("allowed_hosts", []) if isinstance(table, dict) else []
    if not isinstance(raw, list) or not all(isinstance(h, str) for h in raw):
        raise UsageError("auth.allowed_hosts must be a list of host names")
    for index, text in enumerate(raw):
        if host_name(text) != text.strip().lower().rstrip(".") or not text.strip():
            raise UsageError(
                f"auth.allowed_hosts[{index}] is not a host name (e.g. inbox.example.com; "
                "no scheme, port or path)"
            )
    return tuple(text.strip().lower() for text in raw)


def _proxy(table: object) -> TrustedProxy | None:
    """``[auth]``: ``trusted_proxies`` (addresses or networks), ``user_header``,
    ``proxy_role``; no ``trusted_proxies``: no proxy is believed."""
    if not isinstance(table, dict):
        raise UsageError("auth must be a table")
    _known(table, AUTH_KEYS, "auth")
    raw = table.get("trusted_proxies", [])
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise UsageError("auth.trusted_proxies must be a list of addresses or networks")
    networks = []
    for index, text in enumerate(raw):
        try:
            networks.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError:
            raise UsageError(
                f"auth.trusted_proxies[{index}] is not an IP address or network "
                "(e.g. 127.0.0.1 or 10.0.0.0/8)"
            ) from None
    header = table.get("user_header", "X-Forwarded-User")
    if not isinstance(header, str) or not _HEADER_NAME.fullmatch(header):
        raise UsageError("auth.user_header must be a header name (e.g. X-Forwarded-User)")
    role = table.get("proxy_role", DECIDER)
    if role not in ROLES:
        raise UsageError(f"auth.proxy_role must be one of {', '.join(ROLES)}")
    if not networks:
        return None
    return TrustedProxy(addresses=tuple(networks), user_header=header, role=role)


def _receiver(name: str, table: object, env: Mapping[str, str]) -> Receiver:
    at = f"webhooks.{name}"
    if not isinstance(table, dict):
        raise UsageError(f"{at} must be a table")
    _known(table, RECEIVER_KEYS, at)
    contract = _profile_contract(table, at) if "profile" in table else None
    if "scheme" in table:
        scheme = table["scheme"]
        if not isinstance(scheme, str) or scheme not in tuple(Scheme):
            raise UsageError(f"{at}.scheme must be one of {', '.join(s.value for s in Scheme)}")
        scheme = Scheme(scheme)
    elif contract is not None:
        scheme = contract.scheme
    else:
        raise UsageError(f"{at}.scheme is required (or profile = a built-in profile's name)")
    if "job_id" in table:
        job_id_text = table["job_id"]
        job_id = _job_id(job_id_text, f"{at}.job_id")
    elif contract is not None:
        job_id_text, job_id = contract.job_id_text, contract.job_id
    else:
        raise UsageError(f"{at}.job_id is required (or profile = a built-in profile's name)")
    authoritative = table.get("authoritative", contract.authoritative if contract else False)
    if not isinstance(authoritative, bool):
        raise UsageError(f"{at}.authoritative must be true or false")
    raw_secrets = table.get("secrets")
    if not isinstance(raw_secrets, list) or not raw_secrets:
        raise UsageError(f"{at}.secrets must be a non-empty list of strings")
    secrets = tuple(
        _secret(raw, f"{at}.secrets[{index}]", scheme, env) for index, raw in enumerate(raw_secrets)
    )
    return Receiver(
        name=name,
        scheme=scheme,
        secrets=secrets,
        job_id=job_id,
        job_id_text=str(job_id_text),
        authoritative=authoritative,
        tolerance_s=_number(table, "tolerance_s", at, DEFAULT_TOLERANCE_S, TOLERANCE_S_RANGE),
        max_body_bytes=int(
            _number(table, "max_body_bytes", at, DEFAULT_MAX_BODY_BYTES, MAX_BODY_BYTES_RANGE)
        ),
    )


def _profile_contract(table: Mapping[str, object], at: str) -> WebhookContract:
    """The ``webhook`` contract of the built-in profile the table's ``profile`` names."""
    name = table["profile"]
    with_contract = [n for n in builtin_names() if builtin_profile(n).webhook is not None]
    if not isinstance(name, str) or name not in with_contract:
        raise UsageError(
            f"{at}.profile must name a built-in profile with a webhook contract "
            f"({', '.join(with_contract)})"
        )
    contract = builtin_profile(name).webhook
    assert contract is not None
    return contract


def _job_id(text: object, at: str) -> jmespath.parser.ParsedResult:
    try:
        return compile_expression(at, "job_id", text)
    except ProfileError:
        raise UsageError(
            f"{at} must be a JMESPath expression over the payload that compiles and calls "
            "only JMESPath's functions"
        ) from None


def _secret(raw: object, at: str, scheme: Scheme, env: Mapping[str, str]) -> str:
    """A secret with ``${NAME}`` expanded, checked; messages never quote it."""
    if not isinstance(raw, str):
        raise UsageError(f"{at} must be a string")
    secret = expand_env(raw, at, env)
    if secret != secret.strip() or len(secret) < MIN_SHARED_SECRET_CHARS:
        raise UsageError(
            f"{at} must be at least {MIN_SHARED_SECRET_CHARS} characters, without "
            "surrounding spaces"
        )
    if scheme is Scheme.STANDARD:
        try:
            standard_secret_key(secret)
        except ValueError as exc:
            raise UsageError(f"{at}: {exc}") from None
    return secret


def _number(
    table: Mapping[str, object],
    key: str,
    at: str,
    default: float,
    bounds: tuple[float, float],
) -> float:
    if key not in table:
        return default
    value = table[key]
    low, high = bounds
    integral = key == "max_body_bytes"
    number = None if isinstance(value, bool) else value
    if integral and not isinstance(number, int):
        number = None
    if (
        not isinstance(number, int | float)
        or not math.isfinite(number)
        or not low <= number <= high
    ):
        kind = "an integer" if integral else "a number"
        raise UsageError(f"{at}.{key} must be {kind} from {low:.0f} to {high:.0f}")
    return float(number)


def _known(table: Mapping[str, object], known: frozenset[str], at: str) -> None:
    unknown = sorted(str(key) for key in set(table) - known)
    if unknown:
        raise UsageError(
            f"unknown key {unknown[0][:64]!a} in {at} (known: {', '.join(sorted(known))})"
        )
