"""``serve.toml``: receivers and the notify secret, every key checked, one line per
problem naming the file and the key and never a value (``load_serve_config``)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from tests.web.signing import SECRET_A, SECRET_B
from waitbound import UsageError
from waitbound._base._jmes import search
from waitbound._profile._webhooks import Scheme
from waitbound.web._config import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_TOLERANCE_S,
    ServeConfig,
    load_serve_config,
)

WEAK_GITHUB = "github-secret15"
WEAK_STANDARD = "whsec_" + base64.b64encode(b"fifteen-bytes!!").decode()
ENV = {"REPORTS_SECRET": SECRET_A, "NEXT_SECRET": SECRET_B, "NOTIFY": SECRET_B}
GOOD = """
[webhooks.reports]
scheme = "standard"
secrets = ["${REPORTS_SECRET}", "${NEXT_SECRET}"]
job_id = "data.id"
authoritative = true
tolerance_s = 60
max_body_bytes = 4096

[webhooks.gh]
scheme = "github"
secrets = ["a-github-secret-0123"]
job_id = "workflow_run.id"

[notify]
secret = "${NOTIFY}"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serve.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _load(tmp_path: Path, text: str) -> ServeConfig:
    return load_serve_config(_write(tmp_path, text), env=ENV)


def test_a_full_config_is_read(tmp_path: Path) -> None:
    """Receivers with their secrets expanded from the environment, and the notify secret."""
    config = _load(tmp_path, GOOD)
    reports = config.receivers["reports"]
    assert reports.scheme is Scheme.STANDARD
    assert reports.secrets == (SECRET_A, SECRET_B)
    assert search(reports.job_id, {"data": {"id": "j-1"}}) == "j-1"
    assert reports.job_id_text == "data.id"
    assert reports.authoritative is True
    assert (reports.tolerance_s, reports.max_body_bytes) == (60.0, 4096)
    gh = config.receivers["gh"]
    assert (gh.scheme, gh.authoritative) == (Scheme.GITHUB, False)
    assert (gh.tolerance_s, gh.max_body_bytes) == (DEFAULT_TOLERANCE_S, DEFAULT_MAX_BODY_BYTES)
    assert config.notify_secret == SECRET_B


def test_an_empty_file_is_an_empty_config(tmp_path: Path) -> None:
    """No receivers and no notify secret."""
    assert _load(tmp_path, "") == ServeConfig()


def test_secrets_are_not_in_the_reprs(tmp_path: Path) -> None:
    """A config printed (a log line, a traceback) shows no secret."""
    config = _load(tmp_path, GOOD)
    assert SECRET_A not in repr(config)
    assert SECRET_B not in repr(config)


@pytest.mark.parametrize(
    ("name", "scheme", "job_id"),
    [
        ("openai-batch", Scheme.STANDARD, "starts_with(type, 'batch.') && data.id"),
        ("github-actions-run", Scheme.GITHUB, "workflow_run.id"),
    ],
)
def test_a_profile_gives_scheme_job_id_and_authoritative(
    tmp_path: Path, name: str, scheme: Scheme, job_id: str
) -> None:
    """``profile = NAME`` takes the built-in profile's webhook contract."""
    secret = SECRET_A if scheme is Scheme.STANDARD else "a-github-secret-0123"
    config = _load(tmp_path, f'[webhooks.p]\nprofile = "{name}"\nsecrets = ["{secret}"]\n')
    receiver = config.receivers["p"]
    assert (receiver.scheme, receiver.job_id_text, receiver.authoritative) == (
        scheme,
        job_id,
        False,
    )


def test_keys_given_next_to_a_profile_win(tmp_path: Path) -> None:
    """An explicit ``job_id`` or ``authoritative`` overrides the profile's."""
    text = f"""
[webhooks.p]
profile = "openai-batch"
secrets = ["{SECRET_A}"]
job_id = "data.batch_id"
authoritative = true
"""
    receiver = _load(tmp_path, text).receivers["p"]
    assert (receiver.scheme, receiver.job_id_text, receiver.authoritative) == (
        Scheme.STANDARD,
        "data.batch_id",
        True,
    )


def _receiver(**keys: str) -> str:
    base = {
        "scheme": '"standard"',
        "secrets": f'["{SECRET_A}"]',
        "job_id": '"data.id"',
    }
    base.update(keys)
    lines = [f"{k} = {v}" for k, v in base.items() if v != "DROP"]
    return "[webhooks.reports]\n" + "\n".join(lines) + "\n"


INVALID: dict[str, tuple[str, str]] = {
    "unknown top key": ("[server]\nport = 1\n", "unknown key 'server' in the top level"),
    "webhooks not a table": ("webhooks = 1\n", "webhooks must be a table"),
    "receiver not a table": ("[webhooks]\nreports = 1\n", "webhooks.reports must be a table"),
    "bad receiver name": (
        '[webhooks."Has Space"]\nscheme = "github"\n',
        "a receiver name is 1-64",
    ),
    "receiver name too long": (
        "[webhooks." + "a" * 65 + ']\nscheme = "github"\n',
        "a receiver name",
    ),
    "receiver name with a slash": ('[webhooks."a/b"]\n', "a receiver name"),
    "unknown receiver key": (_receiver(colour='"red"'), "unknown key 'colour' in webhooks.reports"),
    "no scheme": (_receiver(scheme="DROP"), "webhooks.reports.scheme is required"),
    "bad scheme": (_receiver(scheme='"svix"'), "webhooks.reports.scheme must be one of"),
    "scheme not text": (_receiver(scheme="1"), "webhooks.reports.scheme must be one of"),
    "no job_id": (_receiver(job_id="DROP"), "webhooks.reports.job_id is required"),
    "job_id not JMESPath": (_receiver(job_id='"data.[?"'), "webhooks.reports.job_id must be"),
    "job_id unknown function": (_receiver(job_id='"lenght(@)"'), "webhooks.reports.job_id must"),
    "job_id not text": (_receiver(job_id="1"), "webhooks.reports.job_id must be"),
    "job_id blank": (_receiver(job_id='" "'), "webhooks.reports.job_id must be"),
    "authoritative not a bool": (
        _receiver(authoritative='"yes"'),
        "webhooks.reports.authoritative must be true or false",
    ),
    "no secrets": (_receiver(secrets="DROP"), "webhooks.reports.secrets must be a non-empty"),
    "secrets empty": (_receiver(secrets="[]"), "webhooks.reports.secrets must be a non-empty"),
    "secrets a string": (
        _receiver(secrets=f'"{SECRET_A}"'),
        "webhooks.reports.secrets must be a non-empty",
    ),
    "secret not a string": (_receiver(secrets="[1]"), "webhooks.reports.secrets[0] must be a"),
    "secret empty": (_receiver(secrets='[""]'), "webhooks.reports.secrets[0] must be at least"),
    "secret short": (
        _receiver(scheme='"github"', secrets='["abc"]'),
        "webhooks.reports.secrets[0] must be at least 16",
    ),
    "github secret of 15 characters": (
        _receiver(scheme='"github"', secrets=f'["{WEAK_GITHUB}"]'),
        "webhooks.reports.secrets[0] must be at least 16 characters",
    ),
    "stripe secret of 15 characters": (
        _receiver(scheme='"stripe"', secrets='["whsec_123456789"]'),
        "webhooks.reports.secrets[0] must be at least 16 characters",
    ),
    "standard secret of a 1-byte key": (
        _receiver(secrets='["whsec_AA"]'),
        "webhooks.reports.secrets[0] must be at least 16 characters",
    ),
    "standard secret of a 15-byte key": (
        _receiver(secrets=f'["{WEAK_STANDARD}"]'),
        "webhooks.reports.secrets[0]: a Standard Webhooks secret's key (the base64 after "
        "whsec_) must decode to at least 16 bytes",
    ),
    "secret with spaces": (
        _receiver(scheme='"github"', secrets='["  long-enough-secret "]'),
        "webhooks.reports.secrets[0] must be",
    ),
    "standard secret without whsec_": (
        _receiver(secrets='["c2VjcmV0LXNlY3JldA=="]'),
        "webhooks.reports.secrets[0]: a Standard Webhooks secret starts with whsec_",
    ),
    "standard secret not base64": (
        _receiver(secrets='["whsec_not base64!!"]'),
        "webhooks.reports.secrets[0]: a Standard Webhooks secret is whsec_",
    ),
    "standard second secret bad": (
        _receiver(secrets=f'["{SECRET_A}", "whsec_%%%%%%%%"]'),
        "webhooks.reports.secrets[1]",
    ),
    "secret from an unset variable": (
        _receiver(secrets='["${UNSET_SECRET}"]'),
        "webhooks.reports.secrets[0] needs the environment variable UNSET_SECRET",
    ),
    "tolerance not a number": (
        _receiver(tolerance_s='"300"'),
        "webhooks.reports.tolerance_s must be a number from 1 to 3600",
    ),
    "tolerance zero": (_receiver(tolerance_s="0"), "webhooks.reports.tolerance_s must be"),
    "tolerance negative": (_receiver(tolerance_s="-5"), "webhooks.reports.tolerance_s must be"),
    "tolerance too big": (_receiver(tolerance_s="86400"), "webhooks.reports.tolerance_s must"),
    "tolerance nan": (_receiver(tolerance_s="nan"), "webhooks.reports.tolerance_s must be"),
    "tolerance inf": (_receiver(tolerance_s="inf"), "webhooks.reports.tolerance_s must be"),
    "tolerance a bool": (_receiver(tolerance_s="true"), "webhooks.reports.tolerance_s must be"),
    "max_body_bytes a float": (
        _receiver(max_body_bytes="4096.0"),
        "webhooks.reports.max_body_bytes must be an integer from 1024 to 33554432",
    ),
    "max_body_bytes too small": (
        _receiver(max_body_bytes="10"),
        "webhooks.reports.max_body_bytes must be",
    ),
    "max_body_bytes too big": (
        _receiver(max_body_bytes="1_000_000_000"),
        "webhooks.reports.max_body_bytes must be",
    ),
    "unknown profile": (
        _receiver(profile='"azure"'),
        "webhooks.reports.profile must name a built-in profile with a webhook contract "
        "(github-actions-run, openai-batch)",
    ),
    "profile not text": (_receiver(profile="1"), "webhooks.reports.profile must name"),
    "notify not a table": ('notify = "x"\n', "notify must be a table"),
    "notify unknown key": ('[notify]\nurl = "x"\n', "unknown key 'url' in notify"),
    "notify without secret": ("[notify]\n", "notify.secret is required"),
    "notify secret of a 3-byte key": (
        '[notify]\nsecret = "whsec_AAAA"\n',
        "notify.secret must be at least 16 characters",
    ),
    "notify secret of a 15-byte key": (
        f'[notify]\nsecret = "{WEAK_STANDARD}"\n',
        "notify.secret: a Standard Webhooks secret's key (the base64 after whsec_) must "
        "decode to at least 16 bytes",
    ),
    "notify secret not whsec": (
        '[notify]\nsecret = "plain-secret-value"\n',
        "notify.secret: a Standard Webhooks secret starts with whsec_",
    ),
    "not TOML": ("[webhooks\n", "not valid TOML"),
}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_a_bad_config_is_refused_with_one_line_naming_file_and_key(
    tmp_path: Path, name: str
) -> None:
    """The first problem: one line, ``serve config PATH:`` then the key; no value."""
    text, words = INVALID[name]
    path = _write(tmp_path, text)
    with pytest.raises(UsageError) as caught:
        load_serve_config(path, env=ENV)
    message = str(caught.value)
    assert message.startswith(f"serve config {path}: ")
    assert "\n" not in message
    assert words in message
    for value in (SECRET_A, SECRET_B, "plain-secret-value", "long-enough-secret", 'abc"]',
                  WEAK_GITHUB, WEAK_STANDARD, "whsec_AA", "123456789"):  # fmt: skip
        assert value not in message
    if "job_id" in name:
        assert "data.[?" not in message
        assert "lenght" not in message


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    """A missing file: the path and the reason."""
    with pytest.raises(UsageError, match=r"serve config .*missing.toml: cannot read it"):
        load_serve_config(tmp_path / "missing.toml", env=ENV)


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_config_that_is_not_a_regular_file_is_one_line_at_once(tmp_path: Path, kind: str) -> None:
    """``--config /dev/zero`` (it never ends), a FIFO (it waits for a writer), a folder:
    one line naming the file, without reading from it."""
    path = tmp_path / "serve.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = Path("/dev/zero")
    else:
        path.mkdir()
    with pytest.raises(UsageError, match=r"not a regular file\)$") as caught:
        load_serve_config(path, env=ENV)
    assert str(caught.value).startswith(f"serve config {path}: cannot read it (")


def test_a_config_over_a_mebibyte_is_refused(tmp_path: Path) -> None:
    """A serve.toml is a few tables: over 1 MiB is one line, read no further."""
    path = _write(tmp_path, "# " + "x" * (1024 * 1024) + "\n")
    with pytest.raises(UsageError, match="larger than 1024 KiB"):
        load_serve_config(path, env=ENV)


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    """Bytes that are not UTF-8: one line."""
    path = tmp_path / "serve.toml"
    path.write_bytes(b"\xff\xfe[webhooks]")
    with pytest.raises(UsageError, match="not UTF-8"):
        load_serve_config(path, env=ENV)
