"""Issue 33's target: with every default, a 45 s and a 9-minute job at the example
provider app end ``succeeded``. The example app's own settings (``examples/
provider_app.py``: ``poll_after_seconds: 1`` and ``Retry-After: 1`` on every pending
answer, its duration estimate) in the real :class:`~waitbound.provider.ProviderApp`,
served over ASGI in process, waited on by ``waitbound.run_async`` with ``Policy()``
and the built-in ``provider-kit`` profile, on virtual time: the app's clock is the
wait's clock, and the job ends when the virtual clock passes its duration. (The 45 s
job through the real CLI against the app under uvicorn, on the same virtual time:
``test_kit_cli.py``.)"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from waitbound import MemoryStore, OutcomeKind, Policy, Submission, run_async
from waitbound.profiles import builtin_profile
from waitbound.provider import JobSucceeded, ProviderApp, ProviderSettings
from waitbound.testing import FakeClock

pytestmark = pytest.mark.anyio
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "provider_app.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("provider_app_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("duration_s", [45.0, 540.0], ids=["45s", "9min"])
async def test_the_example_apps_jobs_end_succeeded_with_every_default(duration_s: float) -> None:
    """Regression (issue 33): a 45 s job ended ``escalated (request_budget_exhausted)``
    after 31 s and 29 status requests (the kit's ``Retry-After: 1`` replaced the
    backoff). Now both jobs end succeeded, the result fetched from the app, within the
    default budget and before the default deadline."""
    example = _example()
    clock = FakeClock()
    settings: ProviderSettings = example.app.settings  # the example's own settings
    assert settings.poll_after_s == 1.0
    app = ProviderApp(settings=settings, now=clock.now)  # jobs driven on virtual time
    statuses: list[float] = []
    job_ids: list[str] = []

    async def virtual_sleep(seconds: float) -> None:
        """Sleep on the virtual clock; the job ends once its duration has passed."""
        clock.advance(seconds)
        if job_ids and clock.elapsed_s >= duration_s:
            job = app.store.get(job_ids[0])
            if job is not None and job.status == "processing":
                source = "input.mov"
                await app.finish(
                    job_ids[0],
                    JobSucceeded(result={"output_url": f"https://cdn.example/{source}.mp4"}),
                )

    async def record_request(request: httpx.Request) -> None:
        if request.method == "GET" and request.url.path.count("/") == 2:
            statuses.append(clock.elapsed_s)

    async def record_start(response: httpx.Response) -> None:
        if response.request.method == "POST" and response.status_code == 202:
            await response.aread()
            job_ids.append(str(response.json()["job_id"]))

    transport = httpx.ASGITransport(app=app)
    async with (
        app.lifespan(),
        httpx.AsyncClient(
            transport=transport,
            event_hooks={"request": [record_request], "response": [record_start]},
        ) as client,
    ):
        outcome = await run_async(
            Submission(
                method="POST",
                url="http://kit.test/jobs",
                profile=builtin_profile("provider-kit"),
                policy=Policy(),
                body=json.dumps({"duration_s": duration_s}).encode(),
            ),
            store=MemoryStore(),
            client=client,
            clock=clock,
            sleep=virtual_sleep,
            rng=random.Random(1),
        )
    assert outcome.outcome is OutcomeKind.SUCCEEDED, outcome.error
    assert outcome.result == {"output_url": "https://cdn.example/input.mov.mp4"}
    assert 1 <= len(statuses) < Policy().max_requests
    assert statuses[-1] >= duration_s  # the look that saw it done came after its end
    assert clock.elapsed_s < Policy().deadline_s
    assert example.estimate_s({"duration_s": duration_s}) == duration_s
