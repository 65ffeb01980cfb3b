"""``waitbound audit`` on bad input: one clear line, exit 2, no traceback; and the story.

Tampering itself is tested against SQLite and PostgreSQL in
``tests/stores/test_audit_tamper.py``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import waitbound
from tests.cli.helpers import assert_refused, cli_env, run_cli
from waitbound import AuditEvent, Policy, Record, SQLiteStore
from waitbound._model._record import (
    Contract,
    Schedule,
    Submission,
)

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
KEY = "a key of at least sixteen bytes"


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A SQLite store with one operation ``op-1`` (a decision among its events), signed."""
    path = tmp_path / "audited.db"
    opened = SQLiteStore(path, audit_key=KEY.encode())
    record = Record(
        contract=Contract(
            operation_id="op-1",
            profile=waitbound.parse_profile({"state": "s", "pending": ["p"], "succeeded": ["d"]}),
            policy=Policy(),
            created_at=T0,
        ),
        submission=Submission(status_url="https://provider.example/jobs/1"),
        schedule=Schedule(deadline_at=T0 + timedelta(minutes=5), next_poll_at=T0),
    )
    created = opened.create(
        record, [AuditEvent(at=T0, kind="created", summary="operation created")]
    )
    opened.save(
        created,
        [
            AuditEvent(
                at=T0 + timedelta(seconds=1),
                kind="decided",
                summary="alice granted 10 more requests: the batch is large",
                data={"decision": "grant_requests", "by": "alice", "requests_used": 3,
                      "max_requests": 40},
            )
        ],
    )  # fmt: skip
    opened.close()
    return str(path)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["audit", "verify", "nope"], "no operation with id 'nope'"),
        (["audit", "verify"], "give an OPERATION_ID or --all"),
        (["audit", "verify", "op-1", "--all"], "give an OPERATION_ID or --all"),
        (["audit", "verify", "op-1", "--checkpoint", "0" * 64], "use it with --all"),
        (["audit", "verify", "--all", "--checkpoint", "nonsense"], "neither a 64-hex digest"),
        (["audit", "verify", "--all", "--audit-key-file", "missing.key"], "does not exist"),
        (["audit", "story", "nope"], "no operation with id 'nope'"),
        (["audit", "export", "nope"], "no operation with id 'nope'"),
        (["audit", "export"], "give an OPERATION_ID or --all"),
        (["show", "op-1", "--audit-key-file", "short.key"], "must be at least 16"),
    ],
    ids=[
        "unknown-id", "neither", "both", "checkpoint-with-id", "bad-checkpoint",
        "missing-key-file", "story-unknown-id", "export-unknown-id", "export-neither",
        "short-key-file",
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, store: str, args: list[str], says: str
) -> None:
    """Unknown ids, a missing choice, a bad checkpoint or key file: exit 2, one line."""
    (tmp_path / "short.key").write_text("too short\n")
    line = assert_refused(run_cli(tmp_path, *args, "--store", store), tmp_path)
    assert says in line
    assert KEY not in line


def test_a_checkpoint_file_whose_heads_were_edited_is_refused(tmp_path: Path, store: str) -> None:
    """Editing the checkpoint file itself (to match a rewritten store) is exit 2."""
    taken = run_cli(tmp_path, "audit", "checkpoint", "--json", "--store", store)
    document = json.loads(taken.stdout)
    document["heads"][0][1] = 1
    edited = tmp_path / "checkpoint.json"
    edited.write_text(json.dumps(document))
    line = assert_refused(
        run_cli(tmp_path, "audit", "verify", "--all", "--checkpoint", str(edited),
                "--store", store),
        tmp_path,
    )  # fmt: skip
    assert "do not match its digest" in line


def test_a_bad_key_in_the_environment_is_one_line(tmp_path: Path, store: str) -> None:
    """WAITBOUND_AUDIT_KEY too short: exit 2, the key never shown."""
    env = cli_env(tmp_path, WAITBOUND_AUDIT_KEY="0123")
    line = assert_refused(run_cli(tmp_path, "audit", "verify", "--all", "--store", store,
                                  env=env), tmp_path)  # fmt: skip
    assert "WAITBOUND_AUDIT_KEY is 4 bytes" in line
    assert "0123" not in line


def test_the_story_shows_every_event_with_decisions(tmp_path: Path, store: str) -> None:
    """audit story: the record, the chain (authenticated with the key), and one line per
    event, a decision included with its requests used of the budget."""
    env = cli_env(tmp_path, WAITBOUND_AUDIT_KEY=KEY)
    done = run_cli(tmp_path, "audit", "story", "op-1", "--store", store, env=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert "audit (2 events, chain intact, head authenticated):" in done.stdout
    [decided] = [line for line in done.stdout.splitlines() if "decided" in line]
    assert decided.split()[:4] == ["2", "2026-01-01", "12:00:01.000Z", "decided"]
    assert "alice granted 10 more requests" in decided
    assert decided.endswith("| requests 3/40")


def test_show_with_the_key_reports_an_unsigned_head(tmp_path: Path) -> None:
    """A store written without the key, shown with it: the story, then one line
    'unauthenticated' on stderr, exit 6."""
    path = tmp_path / "unsigned.db"
    opened = SQLiteStore(path)
    opened.create(
        Record(
            contract=Contract(
                operation_id="op-u",
                profile=waitbound.parse_profile(
                    {"state": "s", "pending": ["p"], "succeeded": ["d"]}
                ),
                policy=Policy(),
                created_at=T0,
            ),
            submission=Submission(status_url="https://provider.example/jobs/1"),
            schedule=Schedule(deadline_at=T0 + timedelta(minutes=5), next_poll_at=T0),
        ),
        [AuditEvent(at=T0, kind="created", summary="operation created")],
    )
    opened.close()
    assert run_cli(tmp_path, "show", "op-u", "--store", str(path)).returncode == 0
    env = cli_env(tmp_path, WAITBOUND_AUDIT_KEY=KEY)
    done = run_cli(tmp_path, "show", "op-u", "--store", str(path), env=env)
    assert done.returncode == 6
    assert "operation op-u" in done.stdout
    assert done.stderr.startswith("waitbound: error: audit chain broken: op-u: unauthenticated:")
    assert len(done.stderr.splitlines()) == 1
