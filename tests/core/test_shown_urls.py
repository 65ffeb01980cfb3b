"""URLs that may carry credentials are shown without them everywhere (issue 22): a
completion's target as its origin only, every other URL without user info or query.

Regression: ``waitbound deliveries`` (text and ``--json``) printed the notify URL's
path (a chat tool's incoming-webhook URL has its secret there), and ``show --json`` and
``GET /operations/{id}`` printed the record's URLs with ``?token=…``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.cli.helpers import run_cli
from tests.records import with_fields
from tests.stores.test_store_contract import T0, entry, make_record
from waitbound import SQLiteStore
from waitbound._base._urls import origin_only
from waitbound._model._record import Push, Record
from waitbound.cli._deliveries import _row, entry_json
from waitbound.web._app import operation_document

SECRET = "S3CRET-in-the-url"
NOTIFY = f"https://user:{SECRET}@hooks.example:8443/services/T0/{SECRET}?token={SECRET}"
STATUS = f"https://provider.example/v1/jobs/42?token={SECRET}"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.example/T0/B1/secret", "https://hooks.example/…"),
        (f"https://u:{SECRET}@h.example:8443/x?token=1", "https://h.example:8443/…"),
        ("https://h.example", "https://h.example"),
        ("https://h.example?token=1", "https://h.example/…"),
        ("http://[::1]:9000/hook", "http://[::1]:9000/…"),
        ("not a url", "(a URL)"),
        ("", "(a URL)"),
    ],
)
def test_origin_only_keeps_scheme_and_authority_without_user_info(url: str, shown: str) -> None:
    """origin_only: scheme://host:port, no user info, ``/…`` when anything followed."""
    assert origin_only(url) == shown


def _record() -> Record:
    return make_record(
        status_url=STATUS,
        result_url=f"https://provider.example/files/1?sig={SECRET}",
        push=Push(notify_url=NOTIFY),
    )


def test_deliveries_show_the_target_as_its_origin_only() -> None:
    """`waitbound deliveries` rows and --json entries name the target's origin only."""
    item = entry("d-1", target=NOTIFY, last_error="HTTP 500")
    assert entry_json(item)["target"] == "https://hooks.example:8443/…"
    assert SECRET not in json.dumps(entry_json(item))
    assert SECRET not in " ".join(_row(item))


def test_an_operation_document_shows_no_query_user_info_or_notify_path() -> None:
    """The record in `show --json` and `GET /operations/{id}`: URLs without queries,
    the notify URL as its origin only."""
    record = _record()
    document = operation_document(record, [])
    shown = document["record"]
    assert isinstance(shown, dict)
    assert shown["status_url"] == "https://provider.example/v1/jobs/42?…"
    assert shown["push"]["notify_url"] == "https://hooks.example:8443/…"  # type: ignore[index,call-overload]
    assert SECRET not in json.dumps(document)


def test_show_json_prints_no_secret_of_a_url(tmp_path: Path) -> None:
    """The real `waitbound show --json`: no query, user info or notify path in it."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        store.create(with_fields(_record(), created_at=T0), [])
    finally:
        store.close()
    shown = run_cli(tmp_path, "show", "op-1", "--json", "--store", str(path))
    assert shown.returncode == 0, shown.stderr
    assert SECRET not in shown.stdout
    assert json.loads(shown.stdout)["record"]["push"]["notify_url"] == (
        "https://hooks.example:8443/…"
    )


def test_a_new_sqlite_store_and_its_wal_and_shm_are_owner_only(tmp_path: Path) -> None:
    """Created under a 022 umask, the store file, its -wal and -shm are 0600 and a
    folder made for it 0700; an existing file keeps its mode."""
    old = os.umask(0o022)
    try:
        store = SQLiteStore(tmp_path / "new" / "s.db")
        store.create(make_record(), [])
        modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in (tmp_path / "new").iterdir()}
        store.close()
        assert modes == {"s.db": 0o600, "s.db-wal": 0o600, "s.db-shm": 0o600}
        assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
        kept = tmp_path / "kept.db"
        kept.touch(mode=0o640)
        kept.chmod(0o640)
        SQLiteStore(kept).close()
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640
    finally:
        os.umask(old)
