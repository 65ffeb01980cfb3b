"""``serve.toml``: the receivers (``[webhooks.NAME]``) and the completion signing
secret (``[notify]``), read once at start. See ``docs/serve.md``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import jmespath.parser

from waitbound._webhooks import Scheme

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_TOLERANCE_S", "Receiver", "ServeConfig"]

DEFAULT_TOLERANCE_S: Final = 300.0
"""How far a delivery's signed timestamp may be from now, either way (seconds)."""
DEFAULT_MAX_BODY_BYTES: Final = 1_048_576
"""The largest delivery body a receiver reads (bytes)."""


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
