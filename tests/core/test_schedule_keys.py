"""The learned schedule learns what it is told to learn (issue 33, item 4): a job
started by ``run``/``submit`` is keyed by its submit endpoint (method and URL
template), never by the id in its status URL; ``wait`` takes ``Policy.schedule_key``
or the profile's ``submit.status_url_template``; ``waitbound schedules`` has a header
row, flags keys that each hold one job, and names the schedule each key's operations
actually used. Virtual time against a scripted provider (docs/waiting.md)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import httpx

import waitbound
from tests.cli.helpers import run_cli
from tests.fakes import FakeClock
from waitbound import (
    MemoryStore,
    Operation,
    OutcomeKind,
    Policy,
    SQLiteStore,
    Store,
    Submission,
    parse_profile,
)
from waitbound._model._history import schedule_key

TABLE: dict[str, Any] = {
    "state": "status",
    "pending": ["running"],
    "succeeded": ["done"],
    "job_id": "id",
    "submit": {"status_url_headers": ["Location"], "job_id": "id"},
}


class Provider:
    """``POST /jobs`` answers 202 with ``Location: /status/j<n>`` (the job's id in its
    bodies is ``ext-j<n>``); each job runs for its own duration (virtual seconds) and
    then answers done."""

    def __init__(self, clock: FakeClock, durations: list[float]) -> None:
        self.clock = clock
        self.durations = durations
        self.started: dict[str, tuple[float, float]] = {}
        self.counter = itertools.count()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        now = self.clock.monotonic()
        path = request.url.path
        if request.method == "POST" and path == "/jobs":
            n = next(self.counter)
            self.started[f"j{n}"] = (now, self.durations[n % len(self.durations)])
            answer = {"id": f"ext-j{n}"}  # the provider's id is not the path's segment
            return httpx.Response(202, json=answer, headers={"Location": f"/status/j{n}"})
        job = path.rsplit("/", 1)[-1]
        began, took = self.started[job]
        state = "done" if now - began >= took else "running"
        return httpx.Response(200, json={"status": state, "id": f"ext-{job}"})

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


def _run(store: Store, clock: FakeClock, provider: Provider, **policy: Any) -> waitbound.Outcome:
    return waitbound.run(
        Submission(
            method="POST",
            url="http://provider.test/jobs",
            profile=parse_profile(TABLE, name="bench"),
            policy=Policy(deadline_s=600, max_requests=60, **policy),
        ),
        store=store, client=provider.client(), clock=clock, sleep=clock.sleep,
        rng=random.Random(len(provider.started)),
    )  # fmt: skip


def test_300_run_jobs_whose_location_names_their_id_share_one_key() -> None:
    """Regression (issue 33): 300 ``waitbound.run`` jobs whose ``Location`` is
    ``/status/j17`` made 300 keys of one job each (``bench http://provider.test/status/
    j0``, …), so the learned schedule never learned. They share one key, the submit
    endpoint's, and the next learned run is planned from their history."""
    clock = FakeClock()
    rng = random.Random(33)
    provider = Provider(clock, [rng.uniform(5, 60) for _ in range(300)])
    store = MemoryStore()
    for _ in range(300):
        assert _run(store, clock, provider).outcome is OutcomeKind.SUCCEEDED
    [row] = store.schedules()
    assert row.key == "bench POST http://provider.test/jobs"
    assert row.jobs == 300
    learned = _run(store, clock, provider, schedule="learned")
    assert learned.outcome is OutcomeKind.SUCCEEDED
    sources = {
        s.event.data.get("delay_source")
        for s in store.audit(learned.operation_id)
        if s.event.kind == "scheduled"
    }
    assert "learned_schedule" in sources


def test_the_submit_key_keeps_the_method_and_hides_ids_and_the_query() -> None:
    """The key is the profile, the method and the submit URL's origin and path
    template: an id in the submit path is ``{id}``, the query never appears."""
    clock = FakeClock()
    store = MemoryStore()
    waitbound.submit(
        Submission(method="put", url="http://provider.test/v1/projects/4711/exports?sig=S3CRET",
                   profile=parse_profile(TABLE, name="bench")),
        store=store, client=Provider(clock, [5.0]).client(), clock=clock, operation_id="op-1",
    )  # fmt: skip
    record = store.get("op-1")
    assert record is not None
    assert schedule_key(record) == "bench PUT http://provider.test/v1/projects/{id}/exports"


def _waited_key(status_url: str, table: dict[str, Any], **policy: Any) -> str | None:
    store = MemoryStore()
    waitbound.start(
        Operation(status_url=status_url, profile=parse_profile(table, name="bench"),
                  policy=Policy(**policy)),
        operation_id="op-1", store=store, clock=FakeClock(),
    )  # fmt: skip
    record = store.get("op-1")
    assert record is not None
    return schedule_key(record)


def test_wait_takes_the_profiles_status_url_template_or_a_schedule_key() -> None:
    """``wait`` on ``/status/j17`` (an id that does not look like one): the profile's
    ``submit.status_url_template`` names the kind of job; a URL it does not match
    falls back to the path template; ``Policy.schedule_key`` wins over both."""
    templated = {**TABLE, "submit": {**TABLE["submit"], "status_url_template": "/status/{job_id}"}}
    url = "http://provider.test/status/j17"
    assert _waited_key(url, TABLE) == "bench http://provider.test/status/j17"  # the leak
    assert _waited_key(url, templated) == "bench http://provider.test/status/{id}"
    other = "http://provider.test/other/j17/x"
    assert _waited_key(other, templated) == "bench http://provider.test/other/j17/x"
    assert _waited_key(url, templated, schedule_key="exports") == "exports"


def _seeded(path: Path) -> None:
    """Three keys of one job each (ids leaking) and one key of 25 learned-policy jobs."""
    store = SQLiteStore(path)
    try:
        clock = FakeClock()
        provider = Provider(clock, [5.0])
        for n in range(3):
            provider.started[f"j{n}"] = (clock.monotonic(), 5.0)
            waitbound.wait(
                Operation(status_url=f"http://provider.test/status/j{n}",
                          profile=parse_profile(TABLE, name="bench")),
                store=store, client=provider.client(), clock=clock, sleep=clock.sleep,
                rng=random.Random(n), operation_id=f"w-{n}",
            )  # fmt: skip
        for _ in range(25):
            _run(store, clock, provider)
    finally:
        store.close()


def test_schedules_has_a_header_flags_one_job_keys_and_names_the_schedule_used(
    tmp_path: Path,
) -> None:
    """Regression (issue 33): ``waitbound schedules`` had no header, never flagged the
    300 one-job keys, and said "learned" for a key whose operations ran on the
    formula. Now: a header row; each one-job key marked and a warning naming the fix;
    ``formula`` for operations that never asked for the learned schedule."""
    store = tmp_path / "s.db"
    _seeded(store)
    shown = run_cli(tmp_path, "schedules", "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split()[:3] == ["KEY", "JOBS", "CENSORED"]
    assert "SCHEDULE USED" in lines[0]
    submit_row = next(line for line in lines if line.startswith("bench POST"))
    assert " formula " in f"{submit_row} "
    assert "learned" not in submit_row
    assert sum("(1 job)" in line for line in lines) == 3
    assert any(line.startswith("warning: 3 keys hold one job each") for line in lines)
    listed = run_cli(tmp_path, "schedules", "--json", "--store", str(store))
    rows = {row["key"]: row for row in json.loads(listed.stdout)}
    submitted = rows["bench POST http://provider.test/jobs"]
    assert submitted["learned"] is True  # enough history to learn from…
    assert submitted["schedule_used"] == "formula"  # …but nobody asked for it
    assert (submitted["operations_formula"], submitted["single_job"]) == (20, False)
    assert rows["bench http://provider.test/status/j0"]["single_job"] is True
