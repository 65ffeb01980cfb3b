"""Fixtures for the provider kit: an app whose jobs are driven by the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from waitbound.provider import ProviderApp, ProviderSettings


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Clock:
    """A clock the test moves."""

    at: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ids() -> Iterator[str]:
    return (f"job_{n}" for n in range(1, 1000))


@pytest.fixture
def kit(clock: Clock, ids: Iterator[str]) -> ProviderApp:
    """An app with no ``run``: the test ends jobs with ``finish`` and friends."""
    return ProviderApp(
        settings=ProviderSettings(poll_after_s=2.5, estimate_s=lambda body: 30.0),
        now=clock,
        new_id=lambda: next(ids),
    )


@pytest.fixture
async def client(kit: ProviderApp) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=kit)
    async with (
        kit.lifespan(),
        httpx.AsyncClient(transport=transport, base_url="http://svc") as http,
    ):
        yield http
