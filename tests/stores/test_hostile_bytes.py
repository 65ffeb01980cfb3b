"""Provider bytes a database cannot hold, on every store (the contract suite's backends).

Regression (issue 22): a NUL in a status body's result, stored in a PostgreSQL ``json``
column, made every query reading the records' JSON fail ("unsupported Unicode escape
sequence"): ``audit verify``, ``audit checkpoint``, ``audit export --all``,
``escalations``, the inbox's pages and MCP ``list_jobs``, for every operation, with the
DSN and another operation's data in the error. Here the hostile values go through every
write path, come back identical, and then every store-wide read still works.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import waitbound
from tests.fakes import FakeClock
from tests.stores import pg
from tests.stores.test_store_contract import _BACKENDS, T0, Backend, delivery, entry, make_record
from waitbound import AuditEvent, OutcomeKind, Phase, Store, StoreError
from waitbound._base._json import MAX_DEPTH
from waitbound._engine._audit_check import audit_checkpoint, export_audit, verify_audit
from waitbound._engine._escalations import escalations
from waitbound._model._push import Channel, OutboxStatus
from waitbound._model._record import DecisionRequest, Push
from waitbound.stores._codec import dump_json, from_text, load_json, to_text

MIB = 1 << 20


@pytest.fixture(params=sorted(_BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Every store backend of the contract suite, fresh and empty."""
    with _BACKENDS[request.param](tmp_path) as opened:
        try:
            yield opened
        finally:
            for each in opened.opened:
                each.close()


@pytest.fixture
def store(backend: Backend) -> Store:
    """Every store backend, fresh and empty."""
    return backend.open()


HOSTILE_STRINGS = [
    "x\u0000y",
    "\u0000",
    "\ud800",
    "low \udfff alone",
    "\ud83d\ude00",  # two surrogates as two code points (not the emoji they would pair to)
    "\x10",
    "\x100000",
    "\x10nan",
    " leading space",
    "\\u0000 as six characters",
    "écriture ✓ \U0001f680",
]


def _deep(depth: int) -> Any:
    value: Any = "x\u0000bottom"
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    return value


HOSTILE: dict[str, Any] = {
    "strings": HOSTILE_STRINGS,
    "keys": {text: index for index, text in enumerate(HOSTILE_STRINGS)},
    "not_finite_as_read": ["NaN", "Infinity", "-Infinity", "1e400"],
    "numbers": [10**4000, -(10**300), 1e308, 5e-324, -0.0, 1e16],
    "deep": _deep(MAX_DEPTH),
    "mebibyte": "\u0000" + "z" * MIB + "\ud800",
}
"""Values as :func:`waitbound._base._json.parse_provider_json` may hand them on (it keeps
``NaN`` as text), plus what a Python caller may pass (surrogates, U+0010)."""

TEXT = "t\u0000\ud800\x10"
"""A provider's string for the stores' text columns (job id, event type, error text)."""


def same(a: object, b: object) -> bool:
    """Whether two JSON values are identical (types, -0.0, surrogates included)."""

    def text(value: object) -> str:
        return json.dumps(value, sort_keys=True, default=repr)

    return text(a) == text(b) and _signs(a) == _signs(b)


def _signs(value: object) -> list[bool]:
    if isinstance(value, float):
        return [math.copysign(1.0, value) < 0]
    if isinstance(value, list):
        return [s for item in value for s in _signs(item)]
    if isinstance(value, dict):
        return [s for key in sorted(value) for s in _signs(value[key])]
    return []


def _unholdable(value: Any) -> list[str]:
    """The strings and keys inside *value* holding a NUL or a surrogate."""
    if isinstance(value, str):
        return [value] if any(c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF for c in value) else []
    if isinstance(value, list):
        return [s for item in value for s in _unholdable(item)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_unholdable(k), *_unholdable(v))]
    return []


def _write_everything(store: Store) -> None:
    """Every write path, each carrying the hostile values."""
    created = store.create(
        make_record(
            "op-hostile",
            job_id=TEXT,
            label="mcp:hostile",
            provider_state=TEXT,
            progress=HOSTILE,
            last_request_id=TEXT,
            push=Push(webhook="reports"),
        ),
        [AuditEvent(at=T0, kind="created", summary=f"created {TEXT}", data=HOSTILE)],
    )
    observed = store.save(
        created.evolve(
            answer=created.answer.evolve(
                provider_state="x\u0000running", last_request_id="r\u0000\ud800"
            )
        ),
        [AuditEvent(at=T0, kind="observed", summary=TEXT, data={"body": HOSTILE})],
    )
    asked = store.save(
        observed.evolve(
            ending=observed.ending.evolve(
                phase=Phase.DONE,
                outcome=OutcomeKind.ESCALATED,
                reason=waitbound.Reason.UNKNOWN_STATE,
                stopped_phase=Phase.WAITING,
                finished_at=T0,
            ),
            oversight=observed.oversight.evolve(
                decision_request=(
                    DecisionRequest(
                        opened_at=T0, due_at=T0 + timedelta(days=365), options=("extend",), why=TEXT
                    )
                )
            ),
        ),
        [AuditEvent(at=T0, kind="decision_requested", summary=TEXT, data={"why": TEXT})],
    )
    assert asked.decision_request is not None
    store.create(
        make_record(
            "op-result",
            phase=Phase.DONE,
            outcome=OutcomeKind.FAILED,
            result=HOSTILE,
            error={"message": TEXT, "body": HOSTILE},
            finished_at=T0,
        ),
        [AuditEvent(at=T0, kind="finished", summary=TEXT, data={"outcome": "failed"})],
    )
    store.create(make_record("op-plain", label="mcp:plain"), [])
    assert store.put_delivery(
        delivery(TEXT, job_id=TEXT, event_type=TEXT, payload=HOSTILE, authoritative=True)
    )
    store.add_outbox(entry("d-hostile", payload=HOSTILE, target="https://n.example/h"))
    [claimed] = store.claim_outbox(
        owner="w1",
        now=T0,
        lease_s=30,
        limit=10,
        channels=[Channel.WEBHOOK],
    )
    assert store.settle_outbox(
        replace(claimed, attempts=1, last_error=TEXT, next_attempt_at=T0 + timedelta(hours=1))
    )


def test_hostile_bytes_go_through_every_write_path_and_read_back_identical(
    store: Store,
) -> None:
    """NUL, surrogates, U+0010, NaN as text, huge numbers, 128-deep nesting and a 1 MiB
    string are stored by create, save, decisions, results, the inbox and the outbox, and
    read back exactly as given."""
    _write_everything(store)
    hostile = store.get("op-hostile")
    assert hostile is not None
    assert (hostile.job_id, hostile.provider_state) == (TEXT, "x\u0000running")
    assert hostile.last_request_id == "r\u0000\ud800"
    assert same(hostile.progress, HOSTILE)
    assert hostile.decision_request is not None
    assert hostile.decision_request.why == TEXT
    result = store.get("op-result")
    assert result is not None
    assert same(result.result, HOSTILE)
    assert same(result.error, {"message": TEXT, "body": HOSTILE})
    events = store.audit("op-hostile")
    assert [e.event.summary for e in events] == [f"created {TEXT}", TEXT, TEXT]
    assert same(dict(events[0].event.data), HOSTILE)
    assert same(dict(events[1].event.data), {"body": HOSTILE})
    [stored] = store.inbox()
    assert (stored.webhook_id, stored.job_id, stored.event_type) == (TEXT, TEXT, TEXT)
    assert stored.operation_id == "op-hostile"  # matched by the (escaped) job id
    assert same(stored.payload, HOSTILE)
    assert [d.webhook_id for d in store.pending_deliveries(limit=10)] == [TEXT]
    assert store.mark_applied("reports", TEXT, T0)
    kept = store.get_outbox("d-hostile")
    assert kept is not None
    assert (kept.last_error, kept.status) == (TEXT, OutboxStatus.PENDING)
    assert same(kept.payload, HOSTILE)


def test_store_wide_reads_work_beside_hostile_bytes(store: Store) -> None:
    """With the hostile values stored, every store-wide read works: verify, checkpoint,
    export --all, escalations, listings (labelled too), the event stream, reservations."""
    _write_everything(store)
    assert verify_audit(store) == []
    assert verify_audit(store, "op-plain") == []
    checkpoint = audit_checkpoint(store, now=T0)
    assert [op for op, _, _ in checkpoint.heads] == ["op-hostile", "op-plain", "op-result"]
    exported = list(export_audit(store))
    assert same(exported[0]["data"], HOSTILE)
    assert exported[0]["summary"] == f"created {TEXT}"
    assert [e.operation_id for e in escalations(store=store, clock=FakeClock(T0))] == ["op-hostile"]
    assert {r.operation_id for r in store.recent(limit=10)} == {
        "op-hostile",
        "op-plain",
        "op-result",
    }
    assert {r.operation_id for r in store.recent(label_prefix="mcp:", limit=10)} == {
        "op-hostile",
        "op-plain",
    }
    assert len(store.audit_after(None, label_prefix="mcp:")) == 3
    assert len(store.audit_after(None)) == 4
    assert store.next_claimable(now=T0, label_prefix="mcp:")[0] == T0
    taken = store.claim_due(owner="w", now=T0, lease_s=5, limit=10, label_prefix="mcp:")
    assert [r.operation_id for r in taken] == ["op-plain"]


@pytest.mark.parametrize("text", [*HOSTILE_STRINGS, "", "plain", "\x10\x10", "a\x10b"], ids=repr)
def test_the_text_column_escape_is_exactly_inverted(text: str) -> None:
    """Every string survives to_text/from_text, and what is stored has no NUL or
    surrogate; a string without them and not starting with U+0010 is stored as is."""
    stored = to_text(text)
    assert from_text(stored) == text
    assert "\x00" not in stored
    stored.encode("utf-8")
    if not text.startswith("\x10") and "\x00" not in text:
        assert stored == text or any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def test_stored_json_holds_no_nul_or_surrogate_escape_and_plain_json_is_unchanged() -> None:
    """The JSON a store writes has no NUL or surrogate (escaped or raw) a database would
    refuse to read; a value without them is written as plain compact JSON, and a value
    with them (or with NaN floats) comes back identical."""
    assert dump_json({"b": [1, 2.5], "a": "é"}) == '{"a":"é","b":[1,2.5]}'
    text = dump_json(HOSTILE)
    text.encode("utf-8")
    assert not _unholdable(json.loads(text))  # as the database's own JSON reader sees it
    assert same(load_json(text), HOSTILE)
    odd = load_json(dump_json({"nan": math.nan, "inf": [math.inf, -math.inf]}))
    assert isinstance(odd, dict)
    assert math.isnan(odd["nan"])  # type: ignore[arg-type]
    assert odd["inf"] == [math.inf, -math.inf]
    assert load_json('{"a":"\\u0010x"}') == {"a": "\x10x"}  # older rows read as written


def test_a_damaged_row_is_left_out_of_listings_and_reported_by_verify(
    backend: Backend,
) -> None:
    """One record that cannot be read back fails neither listing nor escalations; verify
    --all reports it as unreadable and checkpoints still name it."""
    if backend.kind == "memory":
        pytest.skip("a memory store's rows cannot be damaged from outside")
    store = backend.open()
    store.create(make_record("op-damaged"), [])
    store.create(make_record("op-fine"), [])
    if backend.kind == "sqlite":
        import sqlite3

        path = store.path  # type: ignore[attr-defined]
        db = sqlite3.connect(path)
        with db:
            db.execute(
                """UPDATE operations SET ending = '{"phase": "no-such-phase"}'"""
                " WHERE operation_id = ?",
                ("op-damaged",),
            )
        db.close()
    else:
        schema = store.schema  # type: ignore[attr-defined]
        pg.execute(
            f"""UPDATE "{schema}".operations SET ending = '{{"phase": "no-such-phase"}}'"""
            " WHERE operation_id = 'op-damaged'"
        )
    reader = backend.open()
    assert [r.operation_id for r in reader.recent()] == ["op-fine"]
    assert escalations(store=reader, clock=FakeClock(T0)) == []
    [finding] = verify_audit(reader)
    assert (finding.operation_id, finding.problem.value) == ("op-damaged", "unreadable")
    assert [op for op, _, _ in audit_checkpoint(reader, now=T0).heads] == [
        "op-damaged",
        "op-fine",
    ]
    with pytest.raises(StoreError):
        reader.get("op-damaged")


TOKEN = "tok_" + "h0st1le" * 6


def test_the_inbox_pages_and_mcp_list_jobs_work_beside_hostile_bytes(store: Store) -> None:
    """With the hostile values stored, the inbox's three list pages answer 200 (through
    the web app's test client), and MCP ``list_jobs`` lists the agent's operations."""
    from starlette.testclient import TestClient

    from waitbound.mcp._config import parse_config
    from waitbound.mcp._jobs import Jobs
    from waitbound.web._app import create_app
    from waitbound.web._config import ServeConfig
    from waitbound.web._service import Service

    _write_everything(store)
    clock = FakeClock(T0)
    service = Service(store=store, config=ServeConfig(), clock=clock, token=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app(service, poll_s=0.005, ping_s=0)) as client:
        for page in ("/", "/in-flight", "/finished", "/?label=mcp:", "/finished?label=mcp:"):
            answer = client.get(page, headers=auth)
            assert answer.status_code == 200, (page, answer.text[:300])
        assert 'data-operation-id="op-hostile"' in client.get("/", headers=auth).text
    config = parse_config(
        {
            "providers": {
                "hostile": {
                    "base_url": "http://provider.test",
                    "profile": {"state": "status", "pending": ["running"], "succeeded": ["done"]},
                    "submit_path": "/jobs",
                }
            }
        },
        base_dir=Path("/cfg"),
        environ={},
    )
    listed: Any = Jobs(config, store, clock=clock).list_jobs()
    assert [line["operation_id"] for line in listed["operations"]] == ["op-hostile"]


def _as_schema_3_wrote(value: object) -> str:
    """How schema 3 wrote JSON: as it was, ``\\u0000`` escapes included."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _write_as_schema_3(schema: str, record: Any, sealed: Any, inbound: Any) -> None:
    """Rows as the schema-3 release wrote them (its writer is not this code's): the
    record split into hot columns, ``poll`` and ``data``, the event, the delivery and
    the job's registration, every JSON text as it was (``\\u0000`` escapes included),
    every text raw."""
    import psycopg

    from waitbound._model._record import field_json
    from waitbound.stores._rows_v4 import COLD_FIELDS, HOT_COLUMNS, POLL_FIELDS

    def column(name: str) -> object:
        value = getattr(record, name)
        return value.value if hasattr(value, "value") else value

    data = {"schema": 1, **{name: field_json(record, name) for name in COLD_FIELDS}}
    poll = {name: field_json(record, name) for name in POLL_FIELDS}
    names = ["operation_id", *HOT_COLUMNS, "created_at", "poll", "data_version", "data"]
    values = [
        record.operation_id,
        *(column(name) for name in HOT_COLUMNS),
        record.created_at,
        _as_schema_3_wrote(poll),
        record.version,
        _as_schema_3_wrote(data),
    ]
    [event] = sealed
    with psycopg.connect(pg.DSN, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{schema}".operations ({", ".join(names)})'
            f" VALUES ({', '.join(['%s'] * len(names))})",
            values,
        )
        conn.execute(
            f'INSERT INTO "{schema}".audit_events'
            " (operation_id, seq, at, kind, summary, data, prev_hash, hash)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (
                event.operation_id,
                event.seq,
                event.event.at,
                event.event.kind,
                event.event.summary,
                _as_schema_3_wrote(dict(event.event.data)),
                event.prev_hash,
                event.hash,
            ),
        )
        conn.execute(
            f'INSERT INTO "{schema}".webhook_jobs'
            " (provider, job_id, operation_id) VALUES (%s, %s, %s)",
            (record.push.webhook, record.job_id, record.operation_id),
        )
        conn.execute(
            f'INSERT INTO "{schema}".inbox'
            " (provider, webhook_id, received_at, job_id, event_type, authoritative,"
            " payload, operation_id, applied_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, NULL)",
            (
                record.push.webhook,
                inbound.webhook_id,
                inbound.received_at,
                inbound.job_id,
                inbound.event_type,
                inbound.authoritative,
                _as_schema_3_wrote(inbound.payload),
                record.operation_id,
            ),
        )


def test_db_upgrade_to_4_repairs_a_postgres_store_schema_3_poisoned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A schema-3 store holding a NUL in a record, an event and a delivery (every ``->>``
    over them failed) and a job id starting with U+0010: `db upgrade` applies 4 (and 5,
    the parts), after which the labelled listing works, every value reads back as
    schema 3 stored it, and every chain still verifies with its key."""
    import psycopg

    from waitbound.stores import _postgres_schema, postgres
    from waitbound.stores._protocol import advance

    key = b"k" * 32
    nul: dict[str, Any] = {"text": "x\u0000y", "list": ["\u0000"], "\u0000key": 1}
    dle = "\x10job"
    with pg.fresh_schema(upgraded=False) as schema:
        with monkeypatch.context() as release_3:
            release_3.setattr(_postgres_schema, "MIGRATIONS", postgres.MIGRATIONS[:3])
            release_3.setattr(_postgres_schema, "SCHEMA_VERSION", 3)
            assert postgres.upgrade(pg.DSN, schema=schema) == [1, 2, 3]
        record = make_record(
            "op-nul", label="mcp:x", result=nul, job_id=dle, push=Push(webhook="reports")
        )
        stored, sealed = advance(
            record, [AuditEvent(at=T0, kind="created", summary="s", data=nul)], key
        )
        _write_as_schema_3(schema, stored, sealed, delivery("wh-1", job_id=dle, payload=nul))
        with (
            psycopg.connect(pg.DSN, autocommit=True) as conn,
            pytest.raises(psycopg.Error, match="unsupported Unicode escape sequence"),
        ):
            conn.execute(f"SELECT data->>'label' FROM \"{schema}\".operations")
        assert postgres.upgrade(pg.DSN, schema=schema) == [4, 5]
        store = postgres.PostgresStore(pg.DSN, schema=schema, audit_key=key)
        try:
            [listed] = store.recent(label_prefix="mcp:")
            assert same(listed.result, nul)
            assert listed.job_id == dle
            assert same(dict(store.audit("op-nul")[0].event.data), nul)
            [kept] = store.inbox()
            assert (kept.job_id, kept.operation_id) == (dle, "op-nul")
            assert same(kept.payload, nul)
            assert verify_audit(store, key=key) == []
        finally:
            store.close()
