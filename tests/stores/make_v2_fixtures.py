"""Write the schema-version-2 fixture stores the migration tests load.

The fixtures are stores "as written by the release with schema version 2": they were
made by running this script against that release's code, and are committed as they
came out. Never regenerate them with a newer waitbound (the point is that they were
written by the old code); to make a fixture for a later schema, copy this script.

Regenerate (from a checkout of the schema-2 release, PostgreSQL reachable at
``$WAITBOUND_TEST_PG_DSN``, default trust auth on 127.0.0.1:5432/test)::

    PYTHONPATH=src python tests/stores/make_v2_fixtures.py

It writes, in ``tests/stores/fixtures/``:

- ``v2.db``: a SQLite store (``PRAGMA user_version = 2``);
- ``v2-postgres.sql``: ``pg_dump --schema=waitbound_v2_fixture --no-owner --inserts``
  (plain SQL) of the same operations in a PostgreSQL schema named
  ``waitbound_v2_fixture`` (the tests load it under another name);
- ``v2-expected.json``: the facts the tests check after an upgrade: each operation's
  phase, outcome, counters and audit chain head, the inbox and outbox rows, and what
  ``verify_audit`` found with and without the audit key (:data:`AUDIT_KEY_HEX`).

The operations (every one through the store API, with audit events):

- ``op-waiting``: waiting, counters above 0, a provider state and progress, unsigned;
- ``op-escalated``: escalated ``request_budget_exhausted`` with an open decision
  request, signed with the audit key;
- ``op-succeeded``: finished ``succeeded`` with an inline result, signed;
- ``op-webhook``: waiting on ``push.webhook`` with a matched inbox delivery, plus a
  notify URL; ``op-notified`` finished with a notify URL (two outbox entries), unsigned;
- ``op-unsigned-after-signed``: signed at create, then written without the key (its head
  is then unsigned: ``verify_audit`` with the key reports it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import waitbound
from tests.records import with_fields
from waitbound import AuditEvent, OutcomeKind, Phase, Policy, Reason, Record, Store
from waitbound._engine._audit_check import verify_audit
from waitbound._model._push import InboundDelivery
from waitbound._model._record import (
    Contract,
    DecisionRequest,
    Push,
    Schedule,
    Submission,
)
from waitbound._profile._schedule import DelaySource

HERE = Path(__file__).resolve().parent / "fixtures"
PG_SCHEMA = "waitbound_v2_fixture"
AUDIT_KEY_HEX = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
AUDIT_KEY = bytes.fromhex(AUDIT_KEY_HEX)
T0 = datetime(2026, 3, 1, 9, 30, 0, 250000, tzinfo=UTC)
PROFILE: dict[str, Any] = {
    "state": "status",
    "pending": ["queued", "running"],
    "succeeded": ["completed"],
    "failed": ["failed"],
    "require_on_success": ["output"],
    "result": "output",
    "progress": "progress",
    "poll_hint": "poll_after_seconds",
}


def _base(operation_id: str, **changes: Any) -> Record:
    record = Record(
        contract=Contract(
            operation_id=operation_id,
            profile=waitbound.parse_profile(PROFILE, name="fixture"),
            policy=Policy(deadline_s=3600, max_requests=12, base_delay_s=2.0),
            created_at=T0,
            label=f"fixture:{operation_id}",
        ),
        submission=Submission(
            status_url=f"https://provider.example/v1/jobs/{operation_id}",
            job_id=f"job-{operation_id}",
        ),
        schedule=Schedule(deadline_at=T0 + timedelta(hours=1), next_poll_at=T0),
    )
    return with_fields(record, **changes)


def _events(*kinds: str, start_s: float) -> list[AuditEvent]:
    return [
        AuditEvent(
            at=T0 + timedelta(seconds=start_s + i),
            kind=kind,
            summary=f"{kind} at +{start_s + i:g}s",
            data={"step": i, "ratio": 0.25, "state": "running", "none": None},
        )
        for i, kind in enumerate(kinds)
    ]


def _poll(record: Record, n: int, **changes: Any) -> Record:
    """*record* after *n* status requests (the counters a real wait leaves)."""
    seen = T0 + timedelta(seconds=10 * n)
    return with_fields(
        record,
        status_requests_used=record.status_requests_used + n,
        attempt=record.attempt + n,
        provider_state="running",
        progress={"percent": 12.5 * n},
        last_http_status=200,
        last_request_id=f"req-{n}",
        last_observed_at=seen,
        job_seen_at=T0 + timedelta(seconds=10),
        delay_source=DelaySource.LOCAL_BACKOFF,
        next_poll_at=seen + timedelta(seconds=4),
        **changes,
    )


def populate(signed: Store, unsigned: Store) -> None:
    """Write the fixture operations (see the module's docstring)."""
    w = unsigned.create(_base("op-waiting"), _events("created", start_s=0))
    w = unsigned.save(
        _poll(w, 3, transport_failures_used=1, rate_limited_used=2),
        _events("observed", "observed", "observed", start_s=10),
    )

    e = signed.create(_base("op-escalated"), _events("created", start_s=0))
    e = signed.save(_poll(e, 2), _events("observed", "observed", start_s=10))
    opened = T0 + timedelta(seconds=40)
    signed.save(
        e.evolve(
            ending=e.ending.evolve(
                phase=Phase.DONE,
                outcome=OutcomeKind.ESCALATED,
                reason=Reason.REQUEST_BUDGET_EXHAUSTED,
                stopped_phase=Phase.WAITING,
                finished_at=opened,
            ),
            oversight=e.oversight.evolve(
                decision_request=(
                    DecisionRequest(
                        opened_at=opened,
                        due_at=opened + timedelta(days=7),
                        options=("extend", "cancel", "abandon"),
                    )
                )
            ),
        ),
        _events("escalated", start_s=40),
    )

    s = signed.create(_base("op-succeeded"), _events("created", start_s=0))
    s = signed.save(_poll(s, 1), _events("observed", start_s=10))
    done = T0 + timedelta(seconds=30)
    signed.save(
        s.evolve(
            ending=s.ending.evolve(
                phase=Phase.DONE,
                outcome=OutcomeKind.SUCCEEDED,
                result={"output": {"rows": [1, 2.5, None, True, "é"]}, "big": 1e16},
                finished_at=done,
            ),
            answer=s.answer.evolve(provider_state="completed", last_observed_at=done),
            counters=s.counters.evolve(status_requests_used=2),
        ),
        _events("observed", "finished", start_s=30),
    )

    unsigned.put_delivery(
        InboundDelivery(
            provider="acme",
            webhook_id="msg-early",
            received_at=T0 + timedelta(seconds=1),
            job_id="job-op-webhook",
            event_type="job.progress",
            authoritative=False,
            payload={"status": "running", "progress": 0.5},
        )
    )
    h = unsigned.create(
        _base("op-webhook", push=Push(webhook="acme", notify_url="https://hooks.example/done")),
        _events("created", start_s=2),
    )
    unsigned.put_delivery(
        InboundDelivery(
            provider="acme",
            webhook_id="msg-late",
            received_at=T0 + timedelta(seconds=5),
            job_id="job-op-webhook",
            event_type="job.progress",
            authoritative=False,
            payload={"status": "running", "progress": 0.75},
        )
    )
    unsigned.mark_applied("acme", "msg-early", T0 + timedelta(seconds=6))
    unsigned.save(
        _poll(h, 1, push=h.push.evolve(deliveries=1, last_delivery_at=T0 + timedelta(seconds=6))),
        _events("webhook_applied", start_s=6),
    )

    n = unsigned.create(
        _base("op-notified", push=Push(notify_url="https://hooks.example/done", callback=True)),
        _events("created", start_s=0),
    )
    finished = T0 + timedelta(seconds=50)
    unsigned.save(
        with_fields(
            _poll(n, 2),
            phase=Phase.DONE,
            outcome=OutcomeKind.FAILED,
            provider_state="failed",
            error={"code": "E_CODEC", "message": "bad input"},
            finished_at=finished,
        ),
        _events("finished", start_s=50),
    )

    u = signed.create(_base("op-unsigned-after-signed"), _events("created", start_s=0))
    unsigned.save(_poll(u, 1), _events("observed", start_s=10))


def facts(store: Store) -> dict[str, Any]:
    """What the tests compare after the upgrade (see the module's docstring)."""
    operations: dict[str, Any] = {}
    for record in sorted(store.recent(limit=1000), key=lambda r: r.operation_id):
        operations[record.operation_id] = {
            "version": record.version,
            "phase": record.phase.value,
            "outcome": record.outcome.value if record.outcome else None,
            "reason": record.reason.value if record.reason else None,
            "submit_attempts": record.submit_attempts,
            "status_requests_used": record.status_requests_used,
            "transport_failures_used": record.transport_failures_used,
            "rate_limited_used": record.rate_limited_used,
            "result_requests_used": record.result_requests_used,
            "attempt": record.attempt,
            "next_poll_at": record.next_poll_at.isoformat(),
            "provider_state": record.provider_state,
            "progress": record.progress,
            "result": record.result,
            "decision_options": list(record.decision_request.options)
            if record.decision_request
            else None,
            "push": {"webhook": record.push.webhook, "deliveries": record.push.deliveries},
            "audit_seq": record.audit_seq,
            "audit_head": record.audit_head,
            "audit_mac": record.audit_mac,
            "events": [[e.seq, e.event.kind, e.hash] for e in store.audit(record.operation_id)],
        }
    return {
        "operations": operations,
        "inbox": [
            [d.provider, d.webhook_id, d.operation_id, d.applied_at is not None, d.payload]
            for d in sorted(store.inbox(limit=1000), key=lambda d: d.webhook_id)
        ],
        "outbox": [
            [e.delivery_id, e.operation_id, e.channel.value, e.status.value, e.payload]
            for e in sorted(store.outbox(limit=1000), key=lambda e: e.delivery_id)
        ],
        "verify_without_key": [f.as_json() for f in verify_audit(store)],
        "verify_with_key": [f.as_json() for f in verify_audit(store, key=AUDIT_KEY)],
    }


def _sqlite() -> dict[str, Any]:
    path = HERE / "v2.db"
    for leftover in (path, path.with_name("v2.db-wal"), path.with_name("v2.db-shm")):
        leftover.unlink(missing_ok=True)
    signed = waitbound.SQLiteStore(path, audit_key=AUDIT_KEY)
    unsigned = waitbound.SQLiteStore(path)
    try:
        populate(signed, unsigned)
        found = facts(unsigned)
    finally:
        signed.close()
        unsigned.close()
    import sqlite3

    with sqlite3.connect(path) as db:  # fold the WAL in: the fixture is one file
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA journal_mode=DELETE")
    return found


def _postgres(dsn: str) -> dict[str, Any]:
    import psycopg

    from waitbound.stores.postgres import PostgresStore, upgrade

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{PG_SCHEMA}" CASCADE'.encode())
    upgrade(dsn, schema=PG_SCHEMA)
    signed = PostgresStore(dsn, schema=PG_SCHEMA, audit_key=AUDIT_KEY)
    unsigned = PostgresStore(dsn, schema=PG_SCHEMA)
    try:
        populate(signed, unsigned)
        found = facts(unsigned)
    finally:
        signed.close()
        unsigned.close()
    dump = subprocess.run(
        [
            shutil.which("pg_dump") or "pg_dump",
            f"--schema={PG_SCHEMA}",
            "--no-owner",
            "--no-privileges",
            "--inserts",
            dsn,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (HERE / "v2-postgres.sql").write_text(dump)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{PG_SCHEMA}" CASCADE'.encode())
    return found


def main() -> None:
    """Write the fixtures; the SQLite and PostgreSQL stores must hold the same facts."""
    HERE.mkdir(exist_ok=True)
    dsn = os.environ.get("WAITBOUND_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    lite = _sqlite()
    pg = _postgres(dsn)
    if lite != pg:
        sys.exit("the SQLite and PostgreSQL fixtures differ; see the two facts documents")
    document = {"audit_key_hex": AUDIT_KEY_HEX, "pg_schema": PG_SCHEMA, **lite}
    (HERE / "v2-expected.json").write_text(
        json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    )
    print(f"wrote {HERE}/v2.db, v2-postgres.sql and v2-expected.json")


if __name__ == "__main__":
    main()
