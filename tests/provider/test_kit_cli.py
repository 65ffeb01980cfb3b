"""Issue 33's regression through the real command line: ``waitbound run POST …/jobs
--profile provider-kit`` with a ``{"duration_s": 45}`` body and every default ends
``succeeded``. The real :class:`~waitbound.provider.ProviderApp` with the example app's
own settings (``examples/provider_app.py``: ``Retry-After: 1`` on every pending answer,
its duration estimate) under real uvicorn on loopback; the CLI in this process
(:func:`waitbound.cli.run`) on virtual time, the app reading the same clock: the job
ends when the wait has slept past its 45 s, and nobody waits for them.

(The same job and a 9-minute one through ``waitbound.run_async``:
``test_kit_defaults.py``; the kit's jobs under a real ``waitbound`` process on real time,
their transcode function included: ``tests/e2e/test_provider_kit.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from tests.e2e.runner import SEED
from tests.provider.test_kit_defaults import _example
from waitbound import Policy, SQLiteStore
from waitbound.cli import run as cli_run
from waitbound.provider import JobSucceeded, ProviderApp
from waitbound.testing import FakeClock

DURATION_S = 45.0


class _Served:
    """*app* under uvicorn in a thread of its own, on a port it binds itself."""

    def __init__(self, app: ProviderApp) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="provider-kit", daemon=True)

    def _run(self) -> None:
        self.loop.run_until_complete(self.server.serve())

    def start(self) -> None:
        self.thread.start()
        end = time.monotonic() + 30  # a safety net, not a bound on start-up
        while not self.server.started:
            assert self.thread.is_alive(), "uvicorn stopped before it started"
            assert time.monotonic() < end, "uvicorn never started"
            time.sleep(0.01)

    @property
    def base_url(self) -> str:
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def call(self, coroutine: object) -> object:
        """Run *coroutine* on the app's event loop; its value."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def served_clock() -> Iterator[tuple[_Served, FakeClock, ProviderApp]]:
    example = _example()
    clock = FakeClock(limit_s=3600.0)
    app = ProviderApp(settings=example.app.settings, now=clock.now)  # no run: the test ends it
    served = _Served(app)
    served.start()
    try:
        yield served, clock, app
    finally:
        served.stop()


def test_a_45_second_job_with_every_default_ends_succeeded(
    served_clock: tuple[_Served, FakeClock, ProviderApp], tmp_path: Path
) -> None:
    """It ended ``escalated (request_budget_exhausted)`` after 31 s with 29 status
    requests (the app's ``Retry-After: 1`` replaced the backoff). Asserts the outcome
    and the counts, on virtual time."""
    served, clock, app = served_clock
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"duration_s": DURATION_S}))
    store = tmp_path / "store.db"
    ended: list[str] = []

    def sleep(seconds: float) -> None:
        """Virtual sleep; once the clock passes the job's duration, the job succeeds
        (the transcode the example app would run, ended by the test)."""
        clock.sleep(seconds)
        if ended or clock.elapsed_s < DURATION_S:
            return
        opened = SQLiteStore(store, read_only=True)
        try:
            record = opened.get("op-45")
        finally:
            opened.close()
        assert record is not None
        assert record.job_id is not None
        job = JobSucceeded(result={"output_url": "https://cdn.example/input.mov.mp4"})
        served.call(app.finish(record.job_id, job))
        ended.append(record.job_id)

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_run(
            ["run", "POST", f"{served.base_url}/jobs", "--profile", "provider-kit",
             "--body", str(body), "--json", "--store", str(store), "--operation-id", "op-45"],
            clock=clock, sleep=sleep, rng=random.Random(SEED),
        )  # fmt: skip
    outcome = json.loads(out.getvalue())
    assert (outcome["outcome"], code) == ("succeeded", 0), err.getvalue()
    assert ended, "the wait ended before the job did"
    assert outcome["result"] == {"output_url": "https://cdn.example/input.mov.mp4"}
    assert 1 <= int(outcome["status_requests_used"]) < 30
    assert float(outcome["elapsed_seconds"]) >= DURATION_S  # seen after its end
    assert clock.elapsed_s < Policy().deadline_s
