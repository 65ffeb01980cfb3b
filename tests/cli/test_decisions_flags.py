"""The decision commands and flags of the CLI: ``--business-deadline``,
``--credential-label``, options with their costs in ``wait`` / ``show``, and the
refusals of ``decide`` and ``escalations`` that touch no store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import waitbound
from tests.cli.helpers import INLINE, assert_refused, closed_port, run_cli
from waitbound.sim import Simulator, parse_scenario

RUNNING = {"code": 200, "body": {"status": "running"}}


@pytest.fixture
def running() -> Iterator[Simulator]:
    """A provider whose job runs forever."""
    with Simulator(parse_scenario({"id": "r", "endpoints": {"status": [RUNNING]}})) as sim:
        yield sim


def _stored(store: Path, operation_id: str) -> waitbound.Record:
    opened = waitbound.open_store(str(store))
    try:
        record = opened.get(operation_id)
    finally:
        opened.close()
    assert record is not None
    return record


def test_business_deadline_and_credential_label_are_kept_on_the_record(tmp_path: Path) -> None:
    """--business-deadline 90s sets business_deadline_at 90 s after creation; the
    credential label is stored (a name, never a header value); show prints both."""
    store = tmp_path / "s.db"
    url = f"http://127.0.0.1:{closed_port()}/status"
    done = run_cli(tmp_path, "wait", url, *INLINE, "--detach", "--operation-id", "op-b",
                   "--business-deadline", "90s", "--credential-label", "reports-bot-2025",
                   "--header", "Authorization: Bearer s3cr3t", "--store", str(store))  # fmt: skip
    assert done.returncode == 4, done.stderr
    record = _stored(store, "op-b")
    assert record.business_deadline_at == record.created_at + timedelta(seconds=90)
    assert record.credential_label == "reports-bot-2025"
    assert b"s3cr3t" not in store.read_bytes()
    shown = run_cli(tmp_path, "show", "op-b", "--store", str(store))
    assert "business deadline" in shown.stdout
    assert "reports-bot-2025 (label)" in shown.stdout


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--business-deadline", "0"), "--business-deadline"),
        (("--business-deadline", "soon"), "is not a duration"),
        (("--credential-label", "x" * 129), "credential label"),
        (("--credential-label", "a\tb"), "credential label"),
    ],
    ids=["zero-business-deadline", "bad-duration", "long-label", "control-in-label"],
)
def test_bad_business_deadline_or_credential_label_is_refused_before_anything_is_stored(
    tmp_path: Path, flags: tuple[str, ...], says: str
) -> None:
    """Exit 2 with one line naming the flag; no store, no operation."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    line = assert_refused(run_cli(tmp_path, "wait", url, *INLINE, "--detach", *flags), tmp_path)
    assert says in line


def test_a_resume_with_other_credentials_needs_a_decision(tmp_path: Path) -> None:
    """`wait --operation-id` with another --credential-label is refused (exit 2): only a
    person's resume_with_credentials changes it."""
    store = tmp_path / "s.db"
    url = f"http://127.0.0.1:{closed_port()}/status"
    run_cli(tmp_path, "wait", url, *INLINE, "--detach", "--operation-id", "op-c",
            "--credential-label", "bot-a", "--store", str(store))  # fmt: skip
    done = run_cli(tmp_path, "wait", "--operation-id", "op-c", "--credential-label", "bot-b",
                   "--store", str(store))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert "resume_with_credentials" in done.stderr
    assert _stored(store, "op-c").requests_used == 0


def test_an_escalated_wait_prints_its_options_with_their_costs(
    tmp_path: Path, running: Simulator
) -> None:
    """Text: each open option with its cost and the decide command; JSON: option_costs;
    show: the open request and its options."""
    store = tmp_path / "s.db"
    url = f"{running.base_url}/status"
    text = run_cli(tmp_path, "wait", url, *INLINE, "--max-requests", "1", "--operation-id",
                   "op-e", "--store", str(store), "--quiet")  # fmt: skip
    assert text.returncode == 3, text.stderr
    assert "a person decides: waitbound decide op-e OPTION --why" in text.stdout
    assert "extend waiting once by" in text.stdout
    shown = run_cli(tmp_path, "show", "op-e", "--store", str(store), "--json")
    document = json.loads(shown.stdout)
    assert [row["option"] for row in document["option_costs"]] == ["extend", "abandon"]
    plain = run_cli(tmp_path, "show", "op-e", "--store", str(store)).stdout
    assert "decision request open since" in plain
    assert "extend waiting once by" in plain


def test_decide_without_why_is_refused_before_the_store_is_opened(tmp_path: Path) -> None:
    """`decide ID extend` with no --why: one line, exit 2, no store created."""
    line = assert_refused(run_cli(tmp_path, "decide", "op-x", "extend"), tmp_path)
    assert "--why is required" in line
    line = assert_refused(run_cli(tmp_path, "decide", "op-x", "extend", "--why", "a\nb"), tmp_path)
    assert "one line" in line


def test_escalations_on_an_empty_store_says_nothing_waits(tmp_path: Path) -> None:
    """Exit 0 and one sentence; --json an empty list."""
    store = str(tmp_path / "empty.db")
    waitbound.open_store(store).close()
    text = run_cli(tmp_path, "escalations", "--store", store)
    assert (text.returncode, text.stdout) == (0, "nothing waits on a decision\n")
    listed = run_cli(tmp_path, "escalations", "--store", store, "--json")
    assert json.loads(listed.stdout) == {"escalations": [], "count": 0, "stopped_groups": []}
