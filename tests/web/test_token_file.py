"""The token file of ``waitbound serve``: read it, or create it (0600) with a new token;
anything else is one line. Also ``is_loopback`` for the ``--host`` warning."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from waitbound import UsageError
from waitbound.cli import run
from waitbound.cli._tokens import default_token_file, is_loopback, read_or_create_token, read_token


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_missing_token_file_is_created_0600_with_a_new_token(tmp_path: Path) -> None:
    """No file: a token_urlsafe(32) token (43 characters) in a new 0600 file, folder 0700."""
    path = tmp_path / "conf" / "waitbound" / "serve-token"
    token, created = read_or_create_token(path)
    assert created
    assert len(token) == 43
    assert path.read_text() == token + "\n"
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700


def test_an_existing_token_file_is_read_and_kept(tmp_path: Path) -> None:
    """A file: its token without surrounding whitespace; nothing is written."""
    path = tmp_path / "token"
    path.write_text("  \n abcdefghijklmnop-_.~+/XYZ== \r\n")
    assert read_or_create_token(path) == ("abcdefghijklmnop-_.~+/XYZ==", False)
    assert read_or_create_token(path)[1] is False


def test_two_creations_give_the_same_token(tmp_path: Path) -> None:
    """The second start reads what the first wrote."""
    path = tmp_path / "token"
    first, _ = read_or_create_token(path)
    second, created = read_or_create_token(path)
    assert (second, created) == (first, False)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b" \n\t\n", "is empty"),
        (b"short", "does not hold one bearer token"),
        (b"two words in one file", "does not hold one bearer token"),
        (b"line-one-is-long-enough\nline-two-too-long", "does not hold one bearer token"),
        ("tökenwithumlautsandmore".encode(), "does not hold one bearer token"),
        (b"\xff\xfe" * 20, "does not hold one bearer token"),
        (b"a" * 5000, "larger than 4096 bytes"),
    ],
)
def test_a_bad_token_file_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    """Empty, not a token, or too large: one line naming the file, never its content."""
    path = tmp_path / "token"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message) as caught:
        read_or_create_token(path)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)
    if len(content) > 6:
        assert content.decode("latin-1")[:20] not in str(caught.value)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_token_file_that_is_not_a_regular_file_is_refused_without_blocking(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO (reading it would wait for a writer: serve would hang) or a device
    (``/dev/zero`` never ends): one line, at once, nothing read."""
    if kind == "fifo":
        path = tmp_path / "token"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    with pytest.raises(UsageError, match="not a regular file") as caught:
        read_or_create_token(path)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_serve_with_a_fifo_token_file_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``waitbound serve --token-file FIFO``: exit 2 with one line, instead of hanging."""
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    code = run(["serve", "--store", str(tmp_path / "s.db"), "--token-file", str(fifo)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "a FIFO, not a regular file" in err


def test_an_unreadable_token_file_is_one_line(tmp_path: Path) -> None:
    """A folder where the file should be (or no permission): one line."""
    path = tmp_path / "token"
    path.mkdir()
    with pytest.raises(UsageError, match="cannot be read"):
        read_or_create_token(path)


def test_a_token_file_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    """Its folder is a file: one line saying it cannot be created."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="cannot be created"):
        read_or_create_token(tmp_path / "file" / "token")


def test_read_token_never_creates(tmp_path: Path) -> None:
    """watch reads only: a missing file is an error and stays missing."""
    path = tmp_path / "token"
    with pytest.raises(UsageError, match="does not exist"):
        read_token(path)
    assert not path.exists()


def test_the_default_token_file_is_in_the_user_config_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default: $XDG_CONFIG_HOME/waitbound/serve-token (platformdirs)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_token_file() == tmp_path / "waitbound" / "serve-token"


def test_watch_without_a_token_file_is_exit_2_in_one_line(tmp_path: Path) -> None:
    """`waitbound watch` with no token file: exit 2, one line, nothing created."""
    path = tmp_path / "token"
    code = run(["watch", "op-1", "--token-file", str(path), "--url", "http://127.0.0.1:9"])
    assert code == 2
    assert not path.exists()


def test_watch_with_a_garbage_token_file_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A token file that holds no token: exit 2, one line on stderr."""
    path = tmp_path / "token"
    path.write_text("not a token at all")
    code = run(["watch", "op-1", "--token-file", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "does not hold one bearer token" in err


def test_watch_given_a_file_of_named_tokens_says_to_give_ones_own_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`watch --token-file` of serve's named tokens: one line asking for one's own token,
    never advice to delete the file (watch never makes one) and never a token quoted."""
    path = tmp_path / "tokens"
    secret = "Zp0cAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    path.write_text(f"ann decider {secret}\n")
    code = run(["watch", "op-1", "--token-file", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "only your own token" in err
    assert "delete" not in err
    assert secret not in err


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    """Only addresses of this machine alone count as loopback (others get a warning)."""
    assert is_loopback(host) is loopback


def test_a_created_file_is_not_readable_by_others_even_with_a_loose_umask(
    tmp_path: Path,
) -> None:
    """umask 000 does not widen the file's 0600."""
    old = os.umask(0)
    try:
        read_or_create_token(tmp_path / "token")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "token") == 0o600


def test_read_holders_reads_a_named_token_file_and_a_single_token_one(tmp_path: Path) -> None:
    """serve's reader: NAME ROLE TOKEN lines give each holder; a one-token file (the
    earlier format) gives the shared admin token."""
    from waitbound.cli._tokens import read_holders

    named = tmp_path / "named"
    named.write_text("ann decider " + "a" * 20 + "\nops viewer " + "o" * 20 + "\n")
    assert [(h.name, h.role) for h in read_holders(named)] == [
        ("ann", "decider"),
        ("ops", "viewer"),
    ]
    single = tmp_path / "single"
    single.write_text("s" * 24 + "\n")
    (holder,) = read_holders(single)
    assert holder.shared
    assert holder.role == "admin"
    bad = tmp_path / "bad"
    bad.write_text("ann owner " + "a" * 20 + "\n")
    with pytest.raises(UsageError, match=r"line 1: the role must be one of"):
        read_holders(bad)


def test_every_folder_made_for_a_token_or_a_store_is_0700_even_with_umask_000(
    tmp_path: Path,
) -> None:
    """umask 000: the token file's parent folders, and a SQLite store's, are made 0700
    each (``Path.mkdir(parents=True)`` made all but the last 0777), so no other user
    can list them or swap the file; a folder that already existed is left as it was."""
    from waitbound import SQLiteStore

    kept = tmp_path / "existing"
    kept.mkdir(mode=0o755)
    old = os.umask(0)
    try:
        read_or_create_token(kept / "conf" / "waitbound" / "serve-token")
        SQLiteStore(kept / "state" / "deep" / "waitbound.db").close()
    finally:
        os.umask(old)
    made = [kept / "conf", kept / "conf" / "waitbound", kept / "state", kept / "state" / "deep"]
    assert [oct(_mode(folder)) for folder in made] == [oct(0o700)] * 4
    assert _mode(kept) == 0o755
    assert _mode(kept / "conf" / "waitbound" / "serve-token") == 0o600
