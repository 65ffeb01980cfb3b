"""Write the schema-version-4 fixture stores the schema-5 migration tests load.

The fixtures are stores "as written by the release with schema version 4" (records as
typed hot columns, a ``poll`` JSON and a cold ``data`` JSON): they were made by running
this script against that release's code, and are committed as they came out. Never
regenerate them with a newer waitbound (the point is that they were written by the old
code); to make a fixture for a later schema, copy this script.

Regenerate (from a checkout of the schema-4 release, PostgreSQL reachable at
``$WAITBOUND_TEST_PG_DSN``, default trust auth on 127.0.0.1:5432/test)::

    PYTHONPATH=src python tests/stores/make_v4_fixtures.py

It writes, in ``tests/stores/fixtures/``:

- ``v4.db``: a SQLite store (``PRAGMA user_version = 4``);
- ``v4-postgres.sql``: ``pg_dump --schema=waitbound_v4_fixture --no-owner --inserts``
  (plain SQL) of the same operations in a PostgreSQL schema named
  ``waitbound_v4_fixture`` (the tests load it under another name);
- ``v4-expected.json``: the facts the tests check after an upgrade: each operation's
  whole record as ``Record.to_json`` gave it (every field) and its audit chain, the
  inbox, outbox and session rows, and what ``verify_audit`` found with and without the
  audit key (:data:`AUDIT_KEY_HEX`).

The operations are those of ``make_v2_fixtures.py`` (waiting, escalated, succeeded,
webhook with inbox rows, notified with outbox rows, unsigned after signed), and:

- ``op-submitting``: phase ``submitting`` with a submission (method, URL, fingerprint,
  idempotency key), a reserved submit in flight and a lease, signed;
- ``op-fetching``: phase ``fetching_result``: a success seen, a result URL, a settled
  outcome, counters in every budget (cancel and confirm included), unsigned;
- ``op-decided``: escalated, then a person's ``extend`` decision: grants, a decision in
  the log, ``decided_by``, a moved deadline, a cancel request noted, waiting again,
  signed;
- ``op-partial``: finished ``completed_with_errors`` with counts, usage and an errors
  page, signed;
- two sessions (one open, one revoked).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import waitbound
from tests.records import with_fields
from tests.stores.make_v2_fixtures import AUDIT_KEY, AUDIT_KEY_HEX, T0, _base, _events, _poll
from tests.stores.make_v2_fixtures import populate as populate_v2
from waitbound import OutcomeKind, Phase, Reason, Store
from waitbound._engine._audit_check import verify_audit
from waitbound._model._record import Decision, DecisionRequest, Grants
from waitbound._profile._schedule import DelaySource
from waitbound.stores._sessions import SessionRow, sessions_of

HERE = Path(__file__).resolve().parent / "fixtures"
PG_SCHEMA = "waitbound_v4_fixture"


def populate(signed: Store, unsigned: Store) -> None:
    """Write the fixture operations (see the module's docstring)."""
    populate_v2(signed, unsigned)

    s = signed.create(
        _base(
            "op-submitting",
            phase=Phase.SUBMITTING,
            status_url=None,
            job_id=None,
            submit_method="POST",
            submit_url="https://provider.example/v1/jobs",
            submit_fingerprint="sha256:" + "ab" * 32,
            idempotency_key="idem-0001",
            max_submit_attempts=3,
        ),
        _events("created", start_s=0),
    )
    signed.save(
        s.evolve(
            counters=s.counters.evolve(submit_attempts=1),
            lease=s.lease.evolve(
                in_flight="submit",
                lease_owner="worker-a",
                lease_expires_at=T0 + timedelta(seconds=40),
            ),
        ),
        _events("submit_reserved", start_s=1),
    )

    f = unsigned.create(
        _base("op-fetching", trusted_origins=("https://cdn.provider.example",)),
        _events("created", start_s=0),
    )
    unsigned.save(
        with_fields(
            _poll(f, 4, transport_failures_used=2, rate_limited_used=1),
            phase=Phase.FETCHING_RESULT,
            provider_state="completed",
            settled_outcome=OutcomeKind.SUCCEEDED,
            success_seen_at=T0 + timedelta(seconds=40),
            confirm_requests_used=1,
            cancel_requests_used=1,
            result_url="https://cdn.provider.example/results/op-fetching.json",
            cancel_url="https://provider.example/v1/jobs/op-fetching/cancel",
            cancelable=False,
            delay_source=DelaySource.PROVIDER_POLL_HINT,
        ),
        _events("observed", "success_seen", start_s=40),
    )

    d = signed.create(_base("op-decided"), _events("created", start_s=0))
    d = signed.save(_poll(d, 12), _events("observed", start_s=10))
    opened = T0 + timedelta(seconds=130)
    d = signed.save(
        d.evolve(
            ending=d.ending.evolve(
                phase=Phase.DONE,
                outcome=OutcomeKind.ESCALATED,
                reason=Reason.REQUEST_BUDGET_EXHAUSTED,
                stopped_phase=Phase.WAITING,
                finished_at=opened,
            ),
            oversight=d.oversight.evolve(
                decision_request=(
                    DecisionRequest(
                        opened_at=opened,
                        due_at=opened + timedelta(days=7),
                        options=("extend", "cancel", "abandon"),
                    )
                )
            ),
        ),
        _events("escalated", start_s=130),
    )
    decided = opened + timedelta(minutes=5)
    signed.save(
        d.evolve(
            ending=d.ending.evolve(
                phase=Phase.WAITING, outcome=None, reason=None, finished_at=None, stopped_phase=None
            ),
            oversight=d.oversight.evolve(
                decision_request=None,
                grants=Grants(requests=10, extensions=1, pending_states=("paused", 3)),
                decisions=(
                    Decision(
                        option="extend",
                        by="ana@example.com",
                        why="the batch is large today",
                        at=decided,
                        detail={"max_requests": [12, 22], "minutes": 30},
                    ),
                ),
                decided_by="ana@example.com",
                credential_label="acme-prod",
                cancel_requested_at=decided,
                cancel_requested_by="bob@example.com",
                cancel_reason="no longer needed",
            ),
            schedule=d.schedule.evolve(
                deadline_at=d.deadline_at + timedelta(minutes=30), next_poll_at=decided
            ),
            contract=d.contract.evolve(cancel_on_deadline=True),
        ),
        _events("decided", start_s=430),
    )

    p = signed.create(_base("op-partial"), _events("created", start_s=0))
    done = T0 + timedelta(seconds=70)
    signed.save(
        with_fields(
            _poll(p, 5),
            phase=Phase.DONE,
            outcome=OutcomeKind.COMPLETED_WITH_ERRORS,
            provider_state="partial",
            counts={"succeeded": 8, "failed": 2, "total": 10},
            usage={"tokens": 1234, "cost": 0.5},
            errors=[{"line": 3, "message": "bad row"}, {"line": 9, "message": "ö ü"}],
            result={"rows": 8},
            result_requests_used=2,
            result_fetched_at=done,
            finished_at=done,
        ),
        _events("observed", "finished", start_s=70),
    )

    sessions = sessions_of(unsigned)
    sessions.put_session(
        SessionRow(
            session_id="a1" * 32,
            path_hash="b2" * 32,
            who="ana@example.com",
            role="decider",
            via="token ana",
            created_at=T0,
            last_seen_at=T0 + timedelta(minutes=3),
            expires_at=T0 + timedelta(hours=12),
        )
    )
    sessions.put_session(
        SessionRow(
            session_id="c3" * 32,
            path_hash="b2" * 32,
            who="bob@example.com",
            role="viewer",
            via="proxy",
            created_at=T0,
            last_seen_at=T0 + timedelta(minutes=1),
            expires_at=T0 + timedelta(hours=12),
            revoked_at=T0 + timedelta(minutes=2),
        )
    )


def facts(store: Store) -> dict[str, Any]:
    """What the tests compare after the upgrade (see the module's docstring)."""
    operations: dict[str, Any] = {}
    for record in sorted(store.recent(limit=1000), key=lambda r: r.operation_id):
        operations[record.operation_id] = {
            "record": record.to_json(),
            "events": [
                [e.seq, e.event.kind, e.event.summary, e.event.data, e.prev_hash, e.hash]
                for e in store.audit(record.operation_id)
            ],
        }
    later = T0 - timedelta(days=1)
    return {
        "operations": operations,
        "heads": [list(head) for head in store.heads()],
        "inbox": [
            [d.provider, d.webhook_id, d.operation_id, d.applied_at is not None, d.payload]
            for d in sorted(store.inbox(limit=1000), key=lambda d: d.webhook_id)
        ],
        "outbox": [
            [e.delivery_id, e.operation_id, e.channel.value, e.status.value, e.payload]
            for e in sorted(store.outbox(limit=1000), key=lambda e: e.delivery_id)
        ],
        "sessions": [
            [s.session_id, s.who, s.role, s.via, s.revoked_at is not None]
            for s in sorted(
                sessions_of(store).list_sessions(now=later, ended=True),
                key=lambda s: s.session_id,
            )
        ],
        "verify_without_key": [f.as_json() for f in verify_audit(store)],
        "verify_with_key": [f.as_json() for f in verify_audit(store, key=AUDIT_KEY)],
    }


def _sqlite() -> dict[str, Any]:
    path = HERE / "v4.db"
    for leftover in (path, path.with_name("v4.db-wal"), path.with_name("v4.db-shm")):
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
    (HERE / "v4-postgres.sql").write_text(dump)
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
    (HERE / "v4-expected.json").write_text(
        json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    )
    print(f"wrote {HERE}/v4.db, v4-postgres.sql and v4-expected.json")


if __name__ == "__main__":
    main()
