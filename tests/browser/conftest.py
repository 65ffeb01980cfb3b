"""The browser tests' setup: the real ``waitbound serve`` in process on a free loopback
port (SQLite store in ``tmp_path``, a fixed token, the worker on), the provider
simulator, and Playwright driving Debian's Chromium (``/usr/bin/chromium``; ``make test``
installs it when missing; Playwright's own browser download is never used).

Screenshots go to ``tests/browser/artifacts/`` (gitignored), one per page a test shows.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, expect, sync_playwright

import waitbound
from waitbound import SQLiteStore, WorkerSettings
from waitbound.sim import Simulator, parse_scenario
from waitbound.web._config import ServeConfig
from waitbound.web._run import serve
from waitbound.web._service import Service

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).parent / "artifacts"
TOKEN = "tok_browser_" + "b" * 32
SESSION_PATH = r"/s/[A-Za-z0-9_-]{32}"
"""The prefix a signed-in session's pages live under (``web/_session.py``)."""
TIMEOUT_MS = 15_000
"""Playwright's default for every expectation (ms): generous for 2 shared cores."""

PROFILE = {
    "state": "status",
    "pending": ["queued", "running", "finishing"],
    "succeeded": ["done"],
    "failed": ["failed"],
    "job_id": "id",
    "result": "output",
}

SCENARIO: dict[str, Any] = {
    "id": "browser-inbox",
    "description": "Running for three answers (a budget of 3 runs out), then, held for "
    "2 s, still running, then finishing, then done.",
    "endpoints": {
        "status": [
            {"code": 200, "body": {"id": "exp_71c", "status": "running"}, "repeat": 3},
            {"code": 200, "body": {"id": "exp_71c", "status": "running"}, "delay_s": 2.0},
            {"code": 200, "body": {"id": "exp_71c", "status": "finishing"}},
            {"code": 200, "body": {"id": "exp_71c", "status": "done", "output": {"rows": 12}}},
        ]
    },
}

T = TypeVar("T")

FAST = waitbound.Policy(deadline_s=120, max_requests=3, base_delay_s=0.1, max_delay_s=600)
"""Exhausts its 3 requests in about a second: the plan keeps the last request for the
final fifth of one spacing (``TAIL``) before the deadline unless the cap is five times
the deadline, so at this cap it leaves the backoff (0.1 s, 0.2 s) alone."""


class _Served:
    """``waitbound.web._run.serve`` in a background thread with its own anyio loop."""

    def __init__(self, service: Service) -> None:
        self._service = service
        self._urls: queue.Queue[str | BaseException] = queue.Queue()
        self._stop: anyio.Event | None = None
        self._loop: anyio.lowlevel.EventLoopToken | None = None
        self._thread = threading.Thread(target=self._run, name="waitbound-serve", daemon=True)
        self.failure: BaseException | None = None

    def start(self) -> str:
        """Start serving; return ``http://127.0.0.1:PORT`` once it accepts."""
        self._thread.start()
        url = self._urls.get(timeout=30)
        if isinstance(url, BaseException):
            raise RuntimeError("waitbound serve did not start") from url
        return url

    def stop(self) -> None:
        """Shut down gracefully and wait for the thread; re-raise what it raised."""
        if self._stop is not None and self._loop is not None and self._thread.is_alive():
            anyio.from_thread.run_sync(self._stop.set, token=self._loop)
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "waitbound serve did not stop within 30 s"
        if self.failure is not None:
            raise self.failure

    def _run(self) -> None:
        try:
            anyio.run(self._main)
        except BaseException as exc:
            self.failure = exc
            self._urls.put(exc)

    async def _main(self) -> None:
        self._stop = anyio.Event()
        self._loop = anyio.lowlevel.current_token()
        await serve(
            self._service,
            "127.0.0.1",
            0,
            worker_settings=WorkerSettings(idle_s=0.05),
            stop=self._stop,
            handle_signals=False,
            on_listening=self._urls.put,
            poll_s=0.1,
        )


@dataclass
class Inbox:
    """The served inbox of one test, its simulator and its own handle on the store."""

    url: str
    token: str
    store: SQLiteStore
    sim: Simulator
    test_name: str
    shots: list[Path] = field(default_factory=list)

    def escalate(
        self, operation_id: str, *, policy: waitbound.Policy = FAST, label: str = "browser:reports"
    ) -> waitbound.Escalation:
        """Start a wait on the simulator (``waitbound.start``: the service's worker drives
        it) and return its decision request once its request budget is exhausted."""
        operation = waitbound.Operation(
            status_url=f"{self.sim.base_url}/status",
            profile=waitbound.parse_profile(PROFILE),
            policy=policy,
            label=label,
        )
        waitbound.start(operation, operation_id=operation_id, store=self.store)
        return until(
            lambda: next(
                (
                    e
                    for e in waitbound.escalations(store=self.store)
                    if e.operation_id == operation_id
                ),
                None,
            ),
            what=f"{operation_id} to stop with a decision request",
        )

    def record(self, operation_id: str) -> waitbound.Record:
        """The stored record (it exists)."""
        record = self.store.get(operation_id)
        assert record is not None, operation_id
        return record

    def sign_in(self, page: Page, name: str) -> None:
        """Sign in on *page* as *name* with the service's (shared) token: Needs a decision
        opens, under the session's own prefix."""
        page.goto(f"{self.url}/sign-in")
        page.fill("input[name=name]", name)
        page.fill("input[name=token]", self.token)
        page.click("button[type=submit]")
        expect(page).to_have_url(re.compile(re.escape(self.url) + SESSION_PATH + "/$"))

    def at(self, page: Page, path: str) -> str:
        """The URL of *path* in *page*'s session (under its ``/s/KEY`` prefix, which
        the page's current URL shows; none before sign-in)."""
        found = re.match(re.escape(self.url) + f"({SESSION_PATH})?", page.url)
        prefix = (found.group(1) or "") if found is not None else ""
        return f"{self.url}{prefix}{path}"

    def shot(self, page: Page, name: str) -> Path:
        """Save a full-page screenshot as ``artifacts/TEST-NAME.png``; return its path."""
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', self.test_name)}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        self.shots.append(path)
        return path


def until(probe: Callable[[], T | None], *, what: str, timeout_s: float = 30.0) -> T:
    """Look with *probe* every 50 ms until it returns something; fail after *timeout_s*."""
    deadline = time.monotonic() + timeout_s
    while (found := probe()) is None:
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(0.05)
    return found


@pytest.fixture
def scenario() -> dict[str, Any]:
    """What the simulator answers (a test may parametrize its own)."""
    return SCENARIO


@pytest.fixture
def inbox(
    tmp_path: Path, scenario: dict[str, Any], request: pytest.FixtureRequest
) -> Iterator[Inbox]:
    """The real service (worker on) on a free loopback port, and the simulator."""
    path = tmp_path / "store.db"
    served_store = SQLiteStore(path)
    own_store = SQLiteStore(path)
    service = Service(
        store=served_store, config=ServeConfig(), clock=waitbound.SystemClock(), token=TOKEN
    )
    served = _Served(service)
    with Simulator(parse_scenario(scenario)) as sim:
        url = served.start()
        try:
            yield Inbox(url=url, token=TOKEN, store=own_store, sim=sim, test_name=request.node.name)
        finally:
            served.stop()
            own_store.close()
            served_store.close()


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    """Playwright's driver (no browser download: see :func:`browser`). Module-scoped: its
    sync API keeps an event loop running in the thread, which must end before a test of
    another module (in the same xdist worker) runs its own loop."""
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    """Debian's Chromium, headless (``--no-sandbox`` when running as root, as CI does)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (apt-get install chromium)")
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=args)
    yield launched
    launched.close()


@pytest.fixture
def new_page(browser: Browser, inbox: Inbox) -> Iterator[Callable[..., Page]]:
    """Open a page in a new browser context (a separate person: own cookies); every
    context is closed before the service stops."""
    contexts: list[BrowserContext] = []

    def open_page(**options: Any) -> Page:
        context = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **options})
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        return context.new_page()

    expect.set_options(timeout=TIMEOUT_MS)
    yield open_page
    for context in contexts:
        context.close()


@pytest.fixture
def page(new_page: Callable[..., Page]) -> Page:
    """A page of a fresh browser context, 1280 x 900 px."""
    return new_page()
