"""The webhook inbox's retention (``[inbox] retention_days``): deliveries done with —
applied, or never matched — are deleted once older, on every store (memory, SQLite,
real PostgreSQL); one matched but not yet applied is kept; the counts reach
``/healthz``."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.fakes import FakeClock
from tests.stores import pg
from waitbound import MemoryStore, SQLiteStore, Store, UsageError
from waitbound._model._push import InboundDelivery
from waitbound.stores._inbox_retention import prune_inbox
from waitbound.web._config import load_serve_config
from waitbound.web._run import serve
from waitbound.web._service import Service

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Every store kind, fresh."""
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "s.db")
        yield opened
        opened.close()
    else:
        from waitbound.stores.postgres import PostgresStore

        with pg.fresh_schema() as schema:
            made = PostgresStore(pg.require_postgres(), schema=schema, max_size=2)
            yield made
            made.close()


def delivery(webhook_id: str, received_at: datetime, job_id: str | None) -> InboundDelivery:
    return InboundDelivery(
        provider="reports",
        webhook_id=webhook_id,
        received_at=received_at,
        job_id=job_id,
        event_type="job.done",
        payload={"id": job_id},
        authoritative=False,
    )


def test_pruning_deletes_old_deliveries_done_with_and_keeps_the_rest(store: Store) -> None:
    """Old and never matched: deleted; recent: kept; the count of what is left."""
    store.put_delivery(delivery("old-unmatched", T0 - timedelta(days=40), "job-x"))
    store.put_delivery(delivery("new-unmatched", T0 - timedelta(days=1), "job-y"))
    counted = prune_inbox(store, before=T0 - timedelta(days=30))
    assert counted.pruned == 1
    assert counted.kept == 1
    kept = {d.webhook_id for d in store.inbox(limit=10)}
    assert kept == {"new-unmatched"}


def test_the_retention_setting_is_read_from_serve_toml(tmp_path: Path) -> None:
    """[inbox] retention_days: 30 by default, 0 keeps every delivery, a bad value is one
    line naming the key."""
    path = tmp_path / "serve.toml"
    path.write_text("")
    assert load_serve_config(path).inbox_retention_s == 30 * 86400.0
    path.write_text("[inbox]\nretention_days = 0\n")
    assert load_serve_config(path).inbox_retention_s is None
    path.write_text("[inbox]\nretention_days = 7\n")
    assert load_serve_config(path).inbox_retention_s == 7 * 86400.0
    path.write_text("[inbox]\nretention_days = 0.5\n")
    assert load_serve_config(path).inbox_retention_s == 0.5 * 86400.0
    for bad in ('"forever"', "1e-320", "0.01", "-1", "3651", "nan", "inf", "true"):
        path.write_text(f"[inbox]\nretention_days = {bad}\n")
        with pytest.raises(UsageError, match=r"inbox\.retention_days") as refused:
            load_serve_config(path)
        assert "\n" not in str(refused.value)


def test_serve_prunes_the_inbox_at_start_and_healthz_shows_the_counts() -> None:
    """A served store with one old delivery: the start's prune deletes it, and /healthz
    says how many were pruned and kept."""
    store = MemoryStore()
    clock = FakeClock(T0)
    store.put_delivery(delivery("old", T0 - timedelta(days=31), None))
    store.put_delivery(delivery("new", T0 - timedelta(hours=1), None))
    from waitbound.web._config import ServeConfig

    service = Service(store=store, config=ServeConfig(), clock=clock, token="t" * 32)

    async def main() -> Any:
        stop = anyio.Event()
        urls: list[str] = []
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: serve(
                    service,
                    "127.0.0.1",
                    0,
                    worker=False,
                    stop=stop,
                    handle_signals=False,
                    on_listening=urls.append,
                    sweep_every_s=3600,
                    rng=random.Random(1),
                )
            )
            with anyio.fail_after(20):
                while not urls or "inbox" not in service.health:
                    await anyio.sleep(0.01)
            async with httpx.AsyncClient() as http:
                health = (await http.get(f"{urls[0]}/healthz")).json()
            stop.set()
        return health

    health = anyio.run(main)
    assert health["ok"] is True
    assert health["inbox"]["pruned"] == 1
    assert health["inbox"]["kept"] == 1
    assert health["inbox"]["retention_days"] == 30
