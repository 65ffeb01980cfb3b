"""The audit chain's diagnosis, the head MAC and the audit key: I/O-free, table-driven.

The stores' raw-SQL tampering is in ``tests/stores/test_audit_tamper.py``; here the
same findings are produced from event lists directly, plus the cases a database's
primary key rules out (duplicate or unsorted numbers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import waitbound
from waitbound import AuditEvent, AuditProblem, MemoryStore, Policy, Record, StoredAuditEvent
from waitbound._model._audit import GENESIS_HASH, EventKind, head_mac, seal, seal_all
from waitbound._model._audit_record import asserted_digest, audit_event
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)
from waitbound.stores._protocol import advance

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = b"0123456789abcdef0123"
Chain = list[StoredAuditEvent]


def chain(n: int = 6) -> Chain:
    """*n* sealed events of operation ``op``."""
    events = [
        AuditEvent(at=T0 + timedelta(seconds=i), kind="observed", summary=f"event {i + 1}")
        for i in range(n)
    ]
    return seal_all("op", events, last_seq=0, last_hash=GENESIS_HASH)


def head(events: Chain) -> tuple[int, str]:
    return (events[-1].seq, events[-1].hash) if events else (0, GENESIS_HASH)


def _edited(c: Chain) -> Chain:
    c[2] = replace(c[2], event=replace(c[2].event, summary="changed"))
    return c


def _rehashed(c: Chain) -> Chain:
    again = seal("op", 3, replace(c[2].event, summary="changed"), c[2].prev_hash)
    c[2] = again
    return c


def _renumbered_deletion(c: Chain) -> Chain:
    return c[:2] + [replace(s, seq=s.seq - 1) for s in c[3:]]


def _duplicate(c: Chain) -> Chain:
    return [*c[:3], c[2], *c[3:]]


def _unsorted(c: Chain) -> Chain:
    return [c[0], c[1], c[3], c[2], c[4], c[5]]


def _moved_to_the_end(c: Chain) -> Chain:
    return [c[0], c[1], c[3], c[4], c[5], replace(c[2], seq=7)]


def _zero(c: Chain) -> Chain:
    return [seal("op", 0, c[0].event, GENESIS_HASH), *c]


def _other_operation(c: Chain) -> Chain:
    c[1] = replace(c[1], operation_id="other")
    return c


DIAGNOSES: list[tuple[str, Callable[[Chain], Chain], AuditProblem, int]] = [
    ("edited", _edited, AuditProblem.EDITED, 3),
    ("rewritten-and-rehashed", _rehashed, AuditProblem.EDITED, 3),
    ("deleted-gap", lambda c: c[:2] + c[3:], AuditProblem.DELETED, 3),
    ("deleted-first", lambda c: c[1:], AuditProblem.DELETED, 1),
    ("deleted-renumbered", _renumbered_deletion, AuditProblem.DELETED, 3),
    ("duplicate-seq", _duplicate, AuditProblem.INSERTED, 3),
    ("numbered-zero", _zero, AuditProblem.INSERTED, 0),
    ("another-operation", _other_operation, AuditProblem.INSERTED, 2),
    ("unsorted", _unsorted, AuditProblem.REORDERED, 3),
    ("moved-to-the-end", _moved_to_the_end, AuditProblem.REORDERED, 3),
]


@pytest.mark.parametrize(
    ("tamper", "problem", "seq"), [d[1:] for d in DIAGNOSES], ids=[d[0] for d in DIAGNOSES]
)
def test_diagnose_chain_names_the_first_bad_event(
    tamper: Callable[[Chain], Chain], problem: AuditProblem, seq: int
) -> None:
    """Each kind of tampering of an event list is named, with its first bad event."""
    finding = waitbound.diagnose_chain("op", tamper(chain()))
    assert finding is not None
    assert (finding.problem, finding.seq) == (problem, seq)
    assert finding.line().startswith(f"op: {problem.value} at event {seq}: ")


@pytest.mark.parametrize(
    ("cut", "named", "problem", "seq"),
    [
        (4, 6, AuditProblem.TRUNCATED, 5),
        (0, 6, AuditProblem.TRUNCATED, 1),
        (6, 4, AuditProblem.INSERTED, 5),
    ],
    ids=["last-two-removed", "all-removed", "events-after-the-head"],
)
def test_a_chain_must_end_at_the_records_head(
    cut: int, named: int, problem: AuditProblem, seq: int
) -> None:
    """Against the record's head: too short is truncated, too long inserted."""
    full = chain()
    finding = waitbound.diagnose_chain("op", full[:cut], head=head(full[:named]))
    assert finding is not None
    assert (finding.problem, finding.seq) == (problem, seq)


def test_an_intact_chain_has_no_finding_and_an_authentic_head_passes_the_key() -> None:
    """Intact and signed: no finding, with or without the key; an empty chain too."""
    full = chain()
    mac = head_mac(KEY, "op", *head(full))
    assert waitbound.diagnose_chain("op", full, head=head(full)) is None
    assert waitbound.diagnose_chain("op", full, head=head(full), mac=mac, key=KEY) is None
    empty = head_mac(KEY, "op", 0, GENESIS_HASH)
    assert waitbound.diagnose_chain("op", [], head=(0, GENESIS_HASH), mac=empty, key=KEY) is None


@pytest.mark.parametrize(
    ("mac", "key", "problem"),
    [
        (None, KEY, AuditProblem.UNAUTHENTICATED),
        ("0" * 64, KEY, AuditProblem.FORGED_HEAD),
        ("signed", b"another key, 16 bytes or more", AuditProblem.FORGED_HEAD),
    ],
    ids=["no-mac", "wrong-mac", "other-key"],
)
def test_with_a_key_the_head_needs_its_mac(
    mac: str | None, key: bytes, problem: AuditProblem
) -> None:
    """A missing MAC is unauthenticated; a wrong one (or another key) is a forged head."""
    full = chain()
    given = head_mac(KEY, "op", *head(full)) if mac == "signed" else mac
    finding = waitbound.diagnose_chain("op", full, head=head(full), mac=given, key=key)
    assert finding is not None
    assert (finding.problem, finding.seq) == (problem, None)


def test_the_mac_binds_the_operation_and_the_event_number() -> None:
    """A head's MAC does not verify for another operation or another event number."""
    digest = chain()[-1].hash
    assert head_mac(KEY, "op", 6, digest) != head_mac(KEY, "op2", 6, digest)
    assert head_mac(KEY, "op", 6, digest) != head_mac(KEY, "op", 5, digest)


def test_verify_chain_keeps_raising_store_error_with_the_finding() -> None:
    """The old door still raises StoreError; its message is the finding's line."""
    with pytest.raises(waitbound.StoreError, match="broken: op: deleted at event 3: "):
        waitbound.verify_chain(chain()[:2] + chain()[3:])


# --- signing at write time ------------------------------------------------------------


def record() -> Record:
    return Record(
        contract=Contract(
            operation_id="op",
            profile=waitbound.parse_profile({"state": "s", "pending": ["p"], "succeeded": ["d"]}),
            policy=Policy(),
            created_at=T0,
        ),
        submission=Submission(status_url="https://provider.example/jobs/1"),
        schedule=Schedule(deadline_at=T0 + timedelta(minutes=5), next_poll_at=T0),
    )


def events(n: int) -> list[AuditEvent]:
    return [AuditEvent(at=T0, kind="observed", summary=f"e{i}") for i in range(n)]


def test_an_event_kind_is_stored_as_its_plain_name() -> None:
    """A rule names its event with :class:`EventKind`; the event keeps the plain string,
    so the hashed payload, the stored rows and every output are the names as before."""
    event = audit_event(record(), T0, EventKind.RESULT_DUE, "s")
    assert type(event.kind) is str
    assert event.kind == EventKind.RESULT_DUE
    assert event.payload("op", 1)["kind"] == "result_due"


def test_a_keyed_store_signs_every_head_it_writes() -> None:
    """Create and every save sign the head they leave (version 2: with the record's
    asserted fields); a claim keeps it signed."""
    store = MemoryStore(audit_key=KEY)
    saved = store.save(store.create(record(), events(2)), events(3))
    assert saved.audit_mac == head_mac(KEY, "op", 5, saved.audit_head, asserted_digest(saved))
    [claimed] = store.claim_due(owner="w", now=T0, lease_s=5, limit=1)
    assert claimed.audit_mac == saved.audit_mac
    assert waitbound.verify_audit(store, key=KEY) == []


def test_a_keyed_write_never_signs_over_a_head_without_a_valid_mac() -> None:
    """An unsigned head stays unsigned, a forged MAC stays as it was: extending a rewrite
    never blesses it."""
    unsigned, _ = advance(record(), events(2))
    unsigned = unsigned.evolve(audit=unsigned.audit.evolve(audit_mac=None))
    after, _ = advance(unsigned, events(1), KEY)
    assert after.audit_mac is None
    forged = unsigned.evolve(audit=unsigned.audit.evolve(audit_mac="f" * 64))
    after, _ = advance(forged, events(1), KEY)
    assert after.audit_mac == "f" * 64


def test_a_write_without_the_key_drops_the_mac_when_the_head_moves() -> None:
    """The new head was signed by nobody: no MAC. A write that adds no event keeps it."""
    signed, _ = advance(record(), events(2), KEY)
    assert signed.audit_mac is not None
    assert advance(signed, [])[0].audit_mac == signed.audit_mac
    assert advance(signed, events(1))[0].audit_mac is None


def test_an_old_record_without_audit_mac_still_decodes() -> None:
    """A record stored before audit_mac existed reads back with audit_mac None."""
    stored = record().to_json()
    del stored["audit_mac"]
    assert Record.from_json(stored).audit_mac is None


# --- the audit key --------------------------------------------------------------------


def test_the_key_comes_from_the_option_then_the_file_variable_then_the_variable(
    tmp_path: Path,
) -> None:
    """--audit-key-file wins; a file's one trailing newline is not part of the key."""
    option, named = tmp_path / "option.key", tmp_path / "named.key"
    option.write_bytes(b"from the option file!\r\n")
    named.write_bytes(b"from the named file!!\n")
    env = {"WAITBOUND_AUDIT_KEY_FILE": str(named)}
    assert waitbound.load_audit_key(option, environ=env) == b"from the option file!"
    assert waitbound.load_audit_key(environ=env) == b"from the named file!!"
    assert waitbound.load_audit_key(environ={"WAITBOUND_AUDIT_KEY": "k" * 16}) == b"k" * 16
    assert waitbound.load_audit_key(environ={}) is None


@pytest.mark.parametrize(
    ("content", "environ", "message"),
    [
        (b"Q9zKw\n", None, "is 5 bytes; it must be at least 16"),
        (None, None, "does not exist"),
        (b"x" * 16, {"WAITBOUND_AUDIT_KEY": "y" * 16}, "set only one of them"),
        (None, {"WAITBOUND_AUDIT_KEY": "tiny"}, "WAITBOUND_AUDIT_KEY is 4 bytes"),
    ],
    ids=["too-short", "missing-file", "both-variables", "short-variable"],
)
def test_an_unusable_key_is_one_clear_usage_error_without_the_key(
    tmp_path: Path, content: bytes | None, environ: dict[str, str] | None, message: str
) -> None:
    """A short key, a missing file or both variables set: UsageError, key not shown."""
    path = tmp_path / "audit.key"
    if content is not None:
        path.write_bytes(content)
    env = {"WAITBOUND_AUDIT_KEY_FILE": str(path)} if environ is None or content else {}
    env |= environ or {}
    with pytest.raises(waitbound.UsageError, match=message) as caught:
        waitbound.load_audit_key(environ=env)
    assert "Q9zKw" not in str(caught.value)
    assert "tiny" not in str(caught.value)
