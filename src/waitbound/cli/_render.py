"""How the CLI shows operations to a person: story lines and a progress line."""

from __future__ import annotations

from datetime import datetime

from waitbound import AuditEvent, Record
from waitbound._json import show
from waitbound._urls import redact_url


def _time(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _short_time(text: str) -> str:
    return _time(datetime.fromisoformat(text))[11:]


def printable(text: str) -> str:
    """*text* with control characters escaped: a provider's value cannot forge a line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def story_line(event: AuditEvent) -> str:
    """One audit event as a line: time, what happened, state, next poll, requests used."""
    data = event.data
    parts = [f"{_time(event.at)}  {event.kind:<12} {printable(event.summary)}"]
    if data.get("state") is not None:
        parts.append(f"state {printable(show(data['state']))}")
    next_poll_at = data.get("next_poll_at")
    if isinstance(next_poll_at, str) and event.kind in ("scheduled", "created", "result_due"):
        parts.append(f"next {_short_time(next_poll_at)} ({data.get('delay_source') or 'now'})")
    if "requests_used" in data:
        parts.append(f"requests {data['requests_used']}/{data['max_requests']}")
    return " | ".join(parts)


def record_summary(record: Record) -> list[str]:
    """A few lines that describe a record: what it waits on and where it stands."""
    policy = record.policy
    lines = [
        f"operation {record.operation_id}  profile {record.profile.name}",
        f"  status URL   {redact_url(record.status_url or '') or '(not known yet)'}",
        f"  created      {_time(record.created_at)}   deadline {_time(record.deadline_at)}",
        f"  requests     {record.requests_used}/{policy.max_requests}   transport failures "
        f"{record.transport_failures_used}/{policy.max_transport_failures}   rate limited "
        f"{record.rate_limited_used}/{policy.max_rate_limited}",
        f"  state        {printable(show(record.provider_state))}   "
        f"last HTTP {record.last_http_status}",
    ]
    if record.job_id:
        lines.append(f"  job id       {printable(record.job_id)}")
    if record.outcome is not None:
        reason = f" ({record.reason.value})" if record.reason else ""
        lines.append(f"  outcome      {record.outcome.value}{reason}")
    else:
        source = record.delay_source.value if record.delay_source else "now"
        lines.append(
            f"  phase        {record.phase.value}; next {_time(record.next_poll_at)} ({source})"
        )
    return lines
