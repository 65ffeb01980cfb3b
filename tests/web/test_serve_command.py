"""``waitbound serve`` as the CLI builds it, without serving: the service it would serve
(``waitbound.web._run.serve`` replaced by a recorder)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from waitbound.cli import run
from waitbound.web import _run
from waitbound.web._service import Service

CREDENTIAL = "provider-credential-" + "c" * 20
API_KEY = "api-key-value-" + "k" * 20
RECEIVER_SECRET = "whsec_" + base64.b64encode(b"receiver-secret-of-the-test").decode()
NOTIFY_ENV = "whsec_" + base64.b64encode(b"notify-secret-from-the-env!").decode()
TOKEN = "tok_" + "s" * 40


def _serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *flags: str
) -> tuple[int, list[Service]]:
    served: list[Service] = []

    async def recorded(service: Service, *args: Any, **kwargs: Any) -> None:
        served.append(service)

    monkeypatch.setattr(_run, "serve", recorded)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    args = ["serve", "--store", str(tmp_path / "ops.db"), "--token-file", str(token), *flags]
    return run(args), served


def test_the_service_holds_every_secret_serve_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's credential headers (``--header-for``, ``--credentials``), the
    receivers' secrets, the notify secret from the environment and the token are all
    in ``Service.secrets``, so the receiver redacts each of them."""
    config = tmp_path / "serve.toml"
    config.write_text(
        f'[webhooks.reports]\nscheme = "standard"\nsecrets = ["{RECEIVER_SECRET}"]\n'
        'job_id = "data.id"\n'
    )
    credentials = tmp_path / "credentials.toml"
    credentials.write_text(
        '[[credentials]]\norigin = "https://other.example"\n'
        f'headers = {{ "X-Api-Key" = "{API_KEY}", "Accept-Language" = "de-DE-x-long" }}\n'
    )
    monkeypatch.setenv("WAITBOUND_NOTIFY_SECRET", NOTIFY_ENV)
    code, [service] = _serve(
        tmp_path,
        monkeypatch,
        "--config", str(config),
        "--credentials", str(credentials),
        "--header-for", "https://api.example", f"Authorization: Bearer {CREDENTIAL}",
    )  # fmt: skip
    assert code == 0
    for secret in (CREDENTIAL, API_KEY, RECEIVER_SECRET, NOTIFY_ENV, NOTIFY_ENV[6:], TOKEN):
        assert secret in service.secrets
    assert "de-DE-x-long" not in service.secrets  # not a credential header


def test_a_weak_notify_secret_in_the_environment_is_refused_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``$WAITBOUND_NOTIFY_SECRET`` is held to ``[notify] secret``'s rule: a key under
    16 bytes is one line, exit 2, before anything is served; the value is not shown."""
    weak = "whsec_AAAA"
    monkeypatch.setenv("WAITBOUND_NOTIFY_SECRET", weak)
    code, served = _serve(tmp_path, monkeypatch)
    err = capsys.readouterr().err
    assert (code, served) == (2, [])
    assert err.count("\n") == 1
    assert "at least 16 bytes" in err
    assert "AAAA" not in err


def test_serve_with_config_dev_zero_exits_2_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--config /dev/zero`` would be read forever: one line, exit 2, nothing served."""
    code, served = _serve(tmp_path, monkeypatch, "--config", "/dev/zero")
    err = capsys.readouterr().err
    assert (code, served) == (2, [])
    assert err.count("\n") == 1
    assert "serve config /dev/zero: cannot read it (a device or socket, not a regular file)" in err
