"""How the CLI shows operations to a person: story lines and a progress line."""

from __future__ import annotations

from datetime import datetime

from waitbound import AuditEvent, Record


def _time(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _short_time(text: str) -> str:
    return _time(datetime.fromisoformat(text))[11:]


def story_line(event: AuditEvent) -> str:
    """One audit event as a line: time, what happened, state, next poll, requests used."""
    data = event.data
    parts = [f"{_time(event.at)}  {event.kind:<12} {event.summary}"]
    if data.get("state") is not None:
        parts.append(f"state {data['state']}")
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
        f"  status URL   {(record.status_url or '(not known yet)').split('?')[0]}",
        f"  created      {_time(record.created_at)}   deadline {_time(record.deadline_at)}",
        f"  requests     {record.requests_used}/{policy.max_requests}   transport failures "
        f"{record.transport_failures_used}/{policy.max_transport_failures}   rate limited "
        f"{record.rate_limited_used}/{policy.max_rate_limited}",
        f"  state        {record.provider_state!r}   last HTTP {record.last_http_status}",
    ]
    if record.job_id:
        lines.append(f"  job id       {record.job_id}")
    if record.outcome is not None:
        reason = f" ({record.reason.value})" if record.reason else ""
        lines.append(f"  outcome      {record.outcome.value}{reason}")
    else:
        source = record.delay_source.value if record.delay_source else "now"
        lines.append(
            f"  phase        {record.phase.value}; next {_time(record.next_poll_at)} ({source})"
        )
    return lines
