"""``waitbound deliveries`` and ``deliveries replay``, the ``--webhook`` / ``--notify``
flags of wait, submit and run, and the worker's notify secret.

Refusals run the real command in a subprocess. The listing and replay run the command
in this process over one memory store (``cli._store_access.open_store`` patched), so they do not
depend on a durable store's outbox.
"""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.cli.helpers import INLINE, assert_refused, cli_env, closed_port, run_cli
from tests.core.completion_receiver import SECRET, receiving
from tests.core.harness import PROFILE, URL
from tests.fakes import FakeClock
from waitbound import (
    Channel,
    MemoryStore,
    OutboxEntry,
    OutboxStatus,
    OutcomeKind,
    Phase,
    Policy,
    Record,
    deliver_due,
    parse_profile,
)
from waitbound._model._push import completion_delivery_id
from waitbound._model._record import (
    Contract,
    Ending,
    Push,
    Schedule,
    Submission,
)
from waitbound.cli import _store_access
from waitbound.cli import run as run_in_process
from waitbound.sim import Simulator, parse_scenario

ENV = "WAITBOUND_NOTIFY_SECRET"
HEADER = ("id", "operation", "channel", "target", "status", "attempts", "next attempt")


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryStore]:
    """One memory store that every command run in this process opens."""
    shared = MemoryStore()
    # every command opens its store through cli._store_access
    monkeypatch.setattr(_store_access, "open_store", lambda *args, **kwargs: shared)
    monkeypatch.delenv(ENV, raising=False)
    previous = signal.getsignal(signal.SIGTERM)
    yield shared
    signal.signal(signal.SIGTERM, previous)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run_in_process(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def finished(store: MemoryStore, operation_id: str, **push: object) -> Record:
    now = FakeClock().now()
    record = Record(
        contract=Contract(
            operation_id=operation_id,
            profile=parse_profile(PROFILE),
            policy=Policy(),
            created_at=now,
        ),
        submission=Submission(status_url=URL),
        schedule=Schedule(deadline_at=now + timedelta(minutes=10), next_poll_at=now),
        ending=Ending(phase=Phase.DONE, outcome=OutcomeKind.SUCCEEDED, finished_at=now),
        push=Push(**push),  # type: ignore[arg-type]
    )
    return store.create(record, [])


# --- deliveries ------------------------------------------------------------------------


def test_deliveries_lists_a_table_with_the_target_redacted(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """One row per entry under the header; a target's query is shown as ?…, never its
    value; a failed attempt's error and next attempt are shown."""
    finished(store, "op-1", notify_url="https://hooks.example/in?token=T0K3N", callback=True)

    def refuse(completion: object) -> None:
        raise RuntimeError("busy")

    deliver_due(store, clock=FakeClock(), on_complete=refuse, rng=random.Random(1))
    code, out, _ = cli(capsys, "deliveries")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split("  ")[0] == "id"
    for word in (*HEADER, "last error", "replay of"):
        assert word in header
    assert len(rows) == 2
    assert "T0K3N" not in out
    assert "https://hooks.example/…" in out
    callback = next(row for row in rows if " callback " in row)
    assert "RuntimeError: busy" in callback
    assert completion_delivery_id("op-1", Channel.CALLBACK) in callback


def test_deliveries_json_filters_by_operation_and_status(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json prints every key; --operation-id, --status and --limit filter."""
    finished(store, "op-1", callback=True)
    finished(store, "op-2", callback=True)
    deliver_due(store, clock=FakeClock(), on_complete=lambda c: None, operation_id="op-1")
    code, out, _ = cli(capsys, "deliveries", "--json", "--status", "delivered")
    assert code == 0
    document = json.loads(out)
    assert document["count"] == 1
    (entry,) = document["deliveries"]
    assert set(entry) == {
        "delivery_id", "operation_id", "channel", "target", "status", "attempts",
        "created_at", "next_attempt_at", "delivered_at", "last_error", "replay_of",
    }  # fmt: skip
    assert (entry["operation_id"], entry["status"], entry["attempts"]) == ("op-1", "delivered", 1)
    assert entry["next_attempt_at"] is None
    _, out, _ = cli(capsys, "deliveries", "--json", "--operation-id", "op-2")
    assert [e["operation_id"] for e in json.loads(out)["deliveries"]] == ["op-2"]
    _, out, _ = cli(capsys, "deliveries", "--json", "--limit", "1")
    assert json.loads(out)["count"] == 1


def test_deliveries_says_so_when_there_are_none(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty outbox: one line, exit 0."""
    assert cli(capsys, "deliveries") == (0, "no deliveries\n", "")


def test_replay_prints_the_new_id_and_the_listing_shows_replay_of(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """replay ID: prints a new dlv_ id; the new entry is pending with replay_of = ID."""
    finished(store, "op-1", callback=True)
    original = completion_delivery_id("op-1", Channel.CALLBACK)
    code, out, _ = cli(capsys, "deliveries", "replay", original)
    assert code == 0
    new_id = out.strip()
    assert new_id.startswith("dlv_")
    assert new_id != original
    replay = store.get_outbox(new_id)
    assert isinstance(replay, OutboxEntry)
    assert (replay.replay_of, replay.status) == (original, OutboxStatus.PENDING)
    _, out, _ = cli(capsys, "deliveries", "--json", "--operation-id", "op-1")
    replays = {e["delivery_id"]: e["replay_of"] for e in json.loads(out)["deliveries"]}
    assert replays == {new_id: original, original: None}
    code, out, _ = cli(capsys, "deliveries", "replay", new_id, "--json")
    assert json.loads(out)["replay_of"] == new_id


def test_replay_of_an_unknown_id_is_one_line_exit_2(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """An id the outbox does not hold: exit 2, one line naming it; nothing added."""
    code, out, err = cli(capsys, "deliveries", "replay", "dlv_missing")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "waitbound: error: no delivery 'dlv_missing' in the store; list them with "
        "waitbound deliveries"
    ]
    assert store.outbox() == []


def test_wait_with_notify_sends_one_signed_webhook_and_deliveries_shows_it(
    store: MemoryStore, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """wait --notify URL with $WAITBOUND_NOTIFY_SECRET against the simulator: the job
    succeeds, the receiver verifies exactly one delivery, deliveries lists it delivered."""
    monkeypatch.setenv(ENV, SECRET)
    scenario = {"id": "ok", "endpoints": {"status": [{"code": 200, "body": {"status": "done"}}]}}
    with Simulator(parse_scenario(scenario)) as sim, receiving() as receiver:
        code, out, err = cli(
            capsys, "wait", f"{sim.base_url}/status", *INLINE, "--notify", receiver.url,
            "--operation-id", "op-n", "--quiet",
        )  # fmt: skip
    assert code == 0, err
    assert receiver.rejected == []
    assert receiver.ids() == [completion_delivery_id("op-n", Channel.WEBHOOK)]
    _, out, _ = cli(capsys, "deliveries", "--json")
    (entry,) = json.loads(out)["deliveries"]
    assert (entry["channel"], entry["status"]) == ("webhook", "delivered")


# --- refusals (the real command, in a subprocess) --------------------------------------


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = cli_env(tmp_path, **extra)
    if ENV not in extra:
        env.pop(ENV, None)
    return env


SUBMIT = ("POST", "http://127.0.0.1:9/jobs")


@pytest.mark.parametrize("command", ["wait", "submit", "run"])
@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--webhook", "Reports!"), ("webhook receiver", "lower-case")),
        (("--notify", "ftp://hooks.example/in"), ("notify URL", "http or https")),
        (("--notify", "https://u:secretpw@hooks.example/in"), ("credentials",)),
        (("--notify", "https://hooks.example/in"), ("$WAITBOUND_NOTIFY_SECRET",)),
    ],
    ids=["webhook-name", "notify-scheme", "notify-credentials", "notify-no-secret"],
)
def test_bad_push_flags_are_refused_in_one_line(
    tmp_path: Path, command: str, flags: tuple[str, ...], words: tuple[str, ...]
) -> None:
    """A bad --webhook name, a --notify URL that cannot be used, or --notify without a
    notify secret: exit 2, one line naming it, nothing stored, no secret echoed."""
    target = (f"http://127.0.0.1:{closed_port()}/status",) if command == "wait" else SUBMIT
    done = run_cli(tmp_path, command, *target, *INLINE, *flags, env=_env(tmp_path))
    line = assert_refused(done, tmp_path)
    for word in words:
        assert word in line, line
    assert "secretpw" not in line
    assert not (tmp_path / "env-store.db").exists(), "a refused command opened the store"


def test_push_flags_on_a_resume_are_refused(tmp_path: Path) -> None:
    """--webhook / --notify with --operation-id alone: they are set at creation."""
    done = run_cli(tmp_path, "wait", "--operation-id", "op-1", "--webhook", "reports")
    assert "set when an operation is created" in assert_refused(done, tmp_path)


def test_a_notify_secret_that_cannot_sign_is_refused_without_showing_it(tmp_path: Path) -> None:
    """$WAITBOUND_NOTIFY_SECRET that is no secret: wait --notify and worker refuse it in
    one line that does not show it."""
    env = _env(tmp_path, **{ENV: "whsec_%%%"})
    url = f"http://127.0.0.1:{closed_port()}/status"
    for args in (("wait", url, *INLINE, "--notify", "https://h.example/x"), ("worker",)):
        done = run_cli(tmp_path, *args, env=env)
        line = assert_refused(done, tmp_path)
        assert "not a Standard Webhooks secret" in line
        assert "%%%" not in line


def test_deliveries_refuses_a_missing_store_and_a_bad_status(tmp_path: Path) -> None:
    """deliveries on a path that names no store, or --status not a status: exit 2."""
    done = run_cli(tmp_path, "deliveries", "--store", "typo/x.db")
    assert "does not exist" in assert_refused(done, tmp_path)
    assert not (tmp_path / "typo").exists()
    done = run_cli(tmp_path, "deliveries", "--status", "lost")
    assert "'lost' is not one of" in assert_refused(done, tmp_path)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["wait", "--help"], ("--webhook PROVIDER", "--notify URL")),
        (["run", "--help"], ("--webhook PROVIDER", "--notify URL")),
        (["submit", "--help"], ("--webhook PROVIDER", "--notify URL")),
        (["worker", "--help"], ("$WAITBOUND_NOTIFY_SECRET",)),
        (["deliveries", "--help"], ("--operation-id", "--status", "replay")),
        (["deliveries", "replay", "--help"], ("DELIVERY_ID", "replay_of")),
    ],
    ids=["wait", "run", "submit", "worker", "deliveries", "replay"],
)
def test_help_names_the_push_flags(tmp_path: Path, args: list[str], words: tuple[str, ...]) -> None:
    """Each command's help names its push flags (and the worker its notify secret)."""
    done = run_cli(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    flat = " ".join(done.stdout.split())
    for word in words:
        assert word in flat, word
