"""Schedule efficiency: waitbound's pacing against the peers' real polling code, on a virtual clock.

2,000 jobs (log-normal durations, median 60 s, p95 10 min, fixed seeds) are each
submitted at t = 0 (a 202 naming the status URL) and then polled by every strategy, in
four hint modes (none, exact, ±30 %, stale; see :class:`benchmarks._schedule_model.HintMode`).
Every strategy runs its library's real code; only time is virtual: the library's sleep
(and, where it reads one, its clock) advances a :class:`waitbound.testing.FakeClock`, and
the provider is an in-process fake that answers from the job's state at that virtual
time and counts the requests (``benchmarks._schedule_model.Provider``).

- waitbound: ``waitbound.submit`` then ``waitbound.wait`` (the real driver, controller
  and ``Policy``), a ``MemoryStore``, an ``httpx.MockTransport`` client;
- azure-core: ``LROBasePolling(timeout=30)`` driven by its own ``run()`` (what
  ``LROPoller`` runs in its thread), through a ``PipelineClient`` on a fake
  ``HttpTransport`` whose ``sleep`` is virtual;
- google-api-core: ``operation.from_http_json(...).result()`` with the operation's
  ``DEFAULT_POLLING`` (a fake ``api_request`` refresh; ``retry_unary``'s and
  ``retry_base``'s ``time`` and ``retry_base``'s ``random`` patched);
- botocore: two real waiter models (Transcribe ``TranscriptionJobCompleted``, EMR
  ``StepComplete``) on real clients whose operation method is a fake
  (``botocore.waiter.time`` patched);
- tenacity, stamina, backoff: as their docs configure them for polling (sleep and
  clock patched, their global ``random`` replaced by a seeded one);
- the OpenAI SDK's poll helper (``client.vector_stores.files.poll``: 1 s, or the
  ``openai-poll-after-ms`` header), over ``httpx2.MockTransport`` (the SDK's HTTP
  library), its resource's ``_sleep`` virtual.

Usage: ``python -m benchmarks.schedule_efficiency [--quick] [--jobs N] [--seed N]
[--out-dir DIR] [--plot PATH] [--policy [LABEL=]JSON ...]``. Each ``--policy`` is the
keyword arguments of ``waitbound.Policy`` for one more waitbound row (any keyword
passes through); ``waitbound (default)`` is always run. Needs the ``bench`` extra
(``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import httpx

from benchmarks._schedule_model import (
    HintMode,
    Provider,
    Stats,
    markdown_table,
    pareto_front,
    run_jobs,
    summarize,
)
from waitbound import MemoryStore, Operation, Policy, Submission, parse_profile, submit, wait
from waitbound.testing import FakeClock

BENCH_EXTRA = (
    "azure.core",
    "google.api_core",
    "botocore",
    "tenacity",
    "stamina",
    "backoff",
    "openai",
    "matplotlib",
)
"""The peers (and the plot's library): the ``bench`` extra, never imported by the package."""

BASE = "http://provider.test"
SUBMIT_URL = f"{BASE}/jobs"
STATUS_URL = f"{BASE}/operations/job"

WAITBOUND_BENCH_DEFAULTS: Mapping[str, object] = {"deadline_s": 86_400.0, "max_requests": 10_000}
"""The budget of every waitbound row (overridable by ``--policy``): a day and 10,000
requests, so no job outlasts it. Deadline and budget are the caller's choice for the job
at hand, not pacing; the pacing (base, cap, jitter, floor, ...) is the Policy's own."""

PROFILE = parse_profile(
    {"state": "status", "pending": ["running"], "succeeded": ["succeeded"]},
    name="schedule-bench",
)


def hint_headers(hint_s: int | None) -> dict[str, str]:
    """A pending answer's hint headers: ``Retry-After`` (seconds) and the OpenAI SDK's
    own ``openai-poll-after-ms`` with the same value."""
    if hint_s is None:
        return {}
    return {"Retry-After": str(hint_s), "openai-poll-after-ms": str(hint_s * 1000)}


class Bench:
    """The current job: its provider and its virtual clock (one per job)."""

    def __init__(self) -> None:
        self.provider: Provider | None = None
        self.clock = FakeClock()

    def start(self, provider: Provider) -> FakeClock:
        """Begin a job at t = 0 on a fresh clock."""
        self.provider = provider
        self.clock = FakeClock()
        return self.clock

    @property
    def t(self) -> float:
        """Virtual seconds since the submit."""
        return self.clock.elapsed_s

    def status(self) -> tuple[bool, int | None]:
        """Ask the provider about the job now: ``(done, hint seconds or None)``."""
        assert self.provider is not None
        answer = self.provider.status(self.t)
        return answer.done, answer.hint_s

    def submit_hint(self) -> int | None:
        """The submit answer's hint (the same 202 for every strategy)."""
        assert self.provider is not None
        return self.provider.submit().hint_s


def fake_time(clock: FakeClock) -> SimpleNamespace:
    """A stand-in for the ``time`` module whose sleep and clocks are *clock*'s."""
    return SimpleNamespace(
        sleep=clock.sleep,
        monotonic=clock.monotonic,
        time=lambda: clock.now().timestamp(),
        perf_counter=clock.monotonic,
    )


class Runner:
    """A strategy: ``setup`` once, then ``poll`` each job (the Bench holds the job)."""

    label: str
    modes: tuple[HintMode, ...] = tuple(HintMode)
    short: str = ""
    """The plot's short name (the label when empty)."""
    gives_up: tuple[type[Exception], ...] = ()
    """The exceptions by which the library gives up (a timeout, an attempt limit); any
    other exception is a bug in the benchmark and stops it."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def poll(self, rng: random.Random) -> None:
        """Poll the current job until done (or give up by raising)."""
        raise NotImplementedError

    def __call__(self, provider: Provider, rng: random.Random) -> None:
        self.bench.start(provider)
        self.poll(rng)


# --- waitbound -------------------------------------------------------------------


class WaitboundStopped(Exception):
    """waitbound ended a job without success (a deadline or budget a --policy set)."""


class WaitboundRunner(Runner):
    """waitbound's real driver on the job.

    ``entry="submit"``: ``waitbound.submit`` sends the job (the 202 and its hint are
    waitbound's own first answer), then ``waitbound.wait`` resumes the operation to the
    end (what ``waitbound run`` does). ``entry="wait"``: the caller submitted the job
    itself and calls ``waitbound.wait`` on the status URL at t = 0 (the 202's hint is
    not waitbound's to read).
    """

    gives_up = (WaitboundStopped,)

    def __init__(
        self,
        bench: Bench,
        label: str,
        policy: Policy,
        *,
        entry: str = "submit",
        store: MemoryStore | None = None,
    ) -> None:
        super().__init__(bench)
        self.label = label
        self.policy = policy
        self.entry = entry
        self.store = store
        """One store for every job (its history shared: the learned schedule), or a
        fresh one per job (``None``)."""
        self.client = httpx.Client(transport=httpx.MockTransport(self._handle), trust_env=False)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            headers = {"Operation-Location": STATUS_URL, **hint_headers(self.bench.submit_hint())}
            return httpx.Response(202, headers=headers, json={"status": "running"})
        done, hint = self.bench.status()
        body = {"status": "succeeded" if done else "running"}
        return httpx.Response(200, headers=hint_headers(hint), json=body)

    def poll(self, rng: random.Random) -> None:
        clock = self.bench.clock
        store = self.store if self.store is not None else MemoryStore()
        if self.entry == "wait":
            operation = Operation(status_url=STATUS_URL, profile=PROFILE, policy=self.policy)
            outcome = wait(
                operation, store=store, client=self.client, clock=clock, sleep=clock.sleep, rng=rng
            )
            if outcome.outcome != "succeeded":
                raise WaitboundStopped(f"waitbound stopped: {outcome.outcome} {outcome.reason}")
            return
        submission = Submission(method="POST", url=SUBMIT_URL, profile=PROFILE, policy=self.policy)
        outcome = (
            submit(
                submission, store=store, client=self.client, clock=clock, sleep=clock.sleep, rng=rng
            )
            .status()
            .outcome
        )
        if not outcome.done:
            outcome = wait(
                operation_id=outcome.operation_id,
                store=store,
                client=self.client,
                clock=clock,
                sleep=clock.sleep,
                rng=rng,
            )
        if outcome.outcome != "succeeded":
            raise WaitboundStopped(f"waitbound stopped: {outcome.outcome} {outcome.reason}")


def waitbound_policy(overrides: Mapping[str, Any]) -> Policy:
    """``Policy(**(WAITBOUND_BENCH_DEFAULTS | overrides))``.

    Raises:
        ValueError: a keyword Policy does not take, or a value it refuses (one line).
    """
    known = {f.name for f in dataclasses.fields(Policy)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"--policy: Policy has no keyword {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(sorted(known))})"
        )
    try:
        return Policy(**{**WAITBOUND_BENCH_DEFAULTS, **overrides})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--policy: {str(exc).splitlines()[0]}") from None


def hint_optimal(provider: Provider, rng: random.Random) -> None:
    """The hint-optimal line: poll exactly when each hint says, no jitter, nothing else."""
    t = float(provider.submit().hint_s or 0)
    while True:
        answer = provider.status(t)
        if answer.done:
            return
        t += answer.hint_s or 0


# --- azure-core ------------------------------------------------------------------


class AzureRunner(Runner):
    """azure-core ``LROBasePolling(timeout=30)``: 30 s, or the answer's Retry-After.

    The initial 202 is sent through a ``PipelineClient`` (its default policies) on a
    fake ``HttpTransport``; ``LROBasePolling.initialize`` and ``run`` then poll as
    ``LROPoller`` does (without its thread). Its transport's ``sleep`` is virtual.
    """

    label = "azure-core LROBasePolling"
    short = "azure-core"

    def __init__(self, bench: Bench) -> None:
        super().__init__(bench)
        from azure.core import PipelineClient
        from azure.core.pipeline.transport import HttpTransport
        from azure.core.rest import HttpRequest
        from azure.core.rest._http_response_impl import HttpResponseImpl
        from azure.core.utils import case_insensitive_dict

        runner = self

        class FakeTransport(HttpTransport):  # type: ignore[type-arg]
            """Answers from the job's state at virtual time; sleeps virtually."""

            def send(self, request: Any, **kwargs: Any) -> Any:
                if request.method == "POST":
                    status = 202
                    headers = {
                        "Operation-Location": STATUS_URL,
                        **hint_headers(runner.bench.submit_hint()),
                    }
                    body: dict[str, str] = {"status": "Running"}
                else:
                    done, hint = runner.bench.status()
                    status, headers = 200, hint_headers(hint)
                    body = {"status": "Succeeded" if done else "Running"}
                response = HttpResponseImpl(
                    request=request,
                    internal_response=SimpleNamespace(close=lambda: None),
                    status_code=status,
                    reason="OK" if status == 200 else "Accepted",
                    content_type="application/json",
                    headers=case_insensitive_dict({**headers, "Content-Type": "application/json"}),
                    stream_download_generator=None,
                )
                response._content = json.dumps(body).encode()
                return response

            def open(self) -> None:
                pass

            def close(self) -> None:
                pass

            def __exit__(self, *args: object) -> None:
                pass

            def sleep(self, duration: float) -> None:
                runner.bench.clock.sleep(duration)

        self.client: PipelineClient[Any, Any] = PipelineClient(BASE, transport=FakeTransport())
        self.request = HttpRequest

    def poll(self, rng: random.Random) -> None:
        from azure.core.polling.base_polling import LROBasePolling

        initial = self.client.send_request(
            self.request("POST", SUBMIT_URL), _return_pipeline_response=True
        )
        polling: LROBasePolling[None, Any, Any] = LROBasePolling(timeout=30)
        polling.initialize(self.client, initial, lambda response: None)
        polling.run()


# --- google-api-core -------------------------------------------------------------


class GoogleRunner(Runner):
    """google-api-core ``Operation.result()`` with ``DEFAULT_POLLING`` (1 s, x1.5 to 20 s,
    full jitter, 900 s timeout); the refresh is a fake ``api_request``."""

    label = "google-api-core DEFAULT_POLLING"
    short = "google-api-core"
    gives_up = (TimeoutError,)  # concurrent.futures.TimeoutError after its 900 s

    def poll(self, rng: random.Random) -> None:
        from google.api_core import operation
        from google.api_core.retry import retry_base, retry_unary
        from google.protobuf import empty_pb2

        def api_request(method: str, path: str) -> dict[str, object]:
            done, _ = self.bench.status()
            answer: dict[str, object] = {"name": "operations/job", "done": done}
            if done:
                answer["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
            return answer

        clock = self.bench.clock
        with ExitStack() as stack:
            for module in (retry_unary, retry_base):
                stack.enter_context(mock.patch.object(module, "time", fake_time(clock)))
            stack.enter_context(mock.patch.object(retry_base, "random", rng))
            # google-api-core's operation module is untyped.
            from_http_json: Callable[..., Any] = operation.from_http_json
            future = from_http_json(
                {"name": "operations/job", "done": False}, api_request, empty_pb2.Empty
            )
            future.result()


# --- botocore --------------------------------------------------------------------


class BotocoreRunner(Runner):
    """A real botocore waiter (its model's delay and maxAttempts) on a real client
    whose operation method is a fake; ``botocore.waiter.time`` is virtual."""

    def __init__(self, bench: Bench, service: str, waiter: str, operation: str) -> None:
        super().__init__(bench)
        import botocore
        import botocore.exceptions
        import botocore.session

        session = botocore.session.get_session()
        self.client = session.create_client(
            service,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        )
        setattr(self.client, operation, self._answer)
        self.waiter = self.client.get_waiter(botocore.xform_name(waiter))
        config = self.waiter.config
        self.label = f"botocore {service} {waiter}"
        self.short = f"botocore {service}"
        self.detail = f"{config.delay} s, {config.max_attempts} attempts"
        self.service = service
        self.gives_up = (botocore.exceptions.WaiterError,)

    def _answer(self, **kwargs: object) -> dict[str, object]:
        done, _ = self.bench.status()
        if self.service == "transcribe":
            state = "COMPLETED" if done else "IN_PROGRESS"
            return {"TranscriptionJob": {"TranscriptionJobStatus": state}}
        return {"Step": {"Status": {"State": "COMPLETED" if done else "RUNNING"}}}

    def poll(self, rng: random.Random) -> None:
        import botocore.waiter

        with mock.patch.object(botocore.waiter, "time", fake_time(self.bench.clock)):
            if self.service == "transcribe":
                self.waiter.wait(TranscriptionJobName="job")
            else:
                self.waiter.wait(ClusterId="j-1", StepId="s-1")


# --- tenacity, stamina, backoff --------------------------------------------------


class Pending(Exception):
    """The job is not done yet (what stamina retries on); carries the answer's hint."""

    def __init__(self, hint_s: int | None) -> None:
        super().__init__("pending")
        self.hint_s = hint_s


class TenacityRunner(Runner):
    """tenacity ``Retrying(retry=retry_if_result(pending), wait=wait_exponential(
    multiplier=1, min=4, max=10))``, no stop (tenacity's default ``stop_never``)."""

    label = "tenacity wait_exponential(1, 4..10 s)"
    short = "tenacity"

    def poll(self, rng: random.Random) -> None:
        import tenacity

        clock = self.bench.clock
        with mock.patch.object(tenacity, "time", fake_time(clock)):
            retrying = tenacity.Retrying(
                retry=tenacity.retry_if_result(lambda done: not done),
                wait=tenacity.wait_exponential(multiplier=1, min=4, max=10),
                sleep=clock.sleep,
            )
            retrying(lambda: self.bench.status()[0])


class StaminaRunner(Runner):
    """``stamina.retry(on=hook, ...)``: the hook retries on :class:`Pending` and returns
    the answer's ``Retry-After`` when it has a positive one (stamina's backoff hook)."""

    gives_up = (Pending,)  # re-raised once attempts or the timeout are spent

    def __init__(self, bench: Bench, label: str, short: str, **settings: Any) -> None:
        super().__init__(bench)
        import stamina.instrumentation

        stamina.instrumentation.set_on_retry_hooks([])  # no log line per retry
        self.label = label
        self.short = short
        self.settings = settings

    def poll(self, rng: random.Random) -> None:
        import stamina
        import stamina._core
        import tenacity
        import tenacity.nap

        def hook(exc: Exception) -> bool | float:
            if not isinstance(exc, Pending):
                return False
            return float(exc.hint_s) if exc.hint_s else True

        @stamina.retry(on=hook, **self.settings)
        def check() -> None:
            done, hint = self.bench.status()
            if not done:
                raise Pending(hint)

        fake = fake_time(self.bench.clock)
        with (
            mock.patch.object(tenacity, "time", fake),
            mock.patch.object(tenacity.nap, "time", fake),
            mock.patch.object(stamina._core, "random", rng),
        ):
            check()


class _FakeDatetime:
    """``datetime.datetime`` for backoff's elapsed time: ``now()`` is virtual."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    def now(self) -> datetime:
        return self._clock.now().replace(tzinfo=None)


class BackoffRunner(Runner):
    """backoff ``on_predicate(backoff.fibo, pending, max_value=13)``, full jitter: its
    README's polling example."""

    label = "backoff on_predicate(fibo, max_value=13)"
    short = "backoff"

    def poll(self, rng: random.Random) -> None:
        import backoff
        import backoff._jitter
        import backoff._sync

        clock = self.bench.clock
        with (
            mock.patch.object(backoff._sync, "time", fake_time(clock)),
            mock.patch.object(
                backoff._sync, "datetime", SimpleNamespace(datetime=_FakeDatetime(clock))
            ),
            mock.patch.object(backoff._jitter, "random", rng),
        ):

            @backoff.on_predicate(backoff.fibo, lambda done: not done, max_value=13)
            def check() -> bool:
                return self.bench.status()[0]

            check()


# --- OpenAI ----------------------------------------------------------------------


class OpenAIRunner(Runner):
    """The OpenAI SDK's ``client.vector_stores.files.poll`` (1 s, or the first pending
    answer's ``openai-poll-after-ms``), over ``httpx2.MockTransport``."""

    label = "openai files.poll (1 s)"
    short = "openai"

    def __init__(self, bench: Bench) -> None:
        super().__init__(bench)
        import httpx2
        import openai

        self.client = openai.OpenAI(
            api_key="sk-bench",
            base_url=f"{BASE}/v1",
            max_retries=0,
            http_client=httpx2.Client(transport=httpx2.MockTransport(self._handle)),
        )
        # The resource's own sleep hook (SyncAPIResource._sleep), made virtual.
        files: Any = self.client.vector_stores.files
        files._sleep = self._sleep
        self.files = files

    def _sleep(self, seconds: float) -> None:
        self.bench.clock.sleep(seconds)

    def _handle(self, request: Any) -> Any:
        import httpx2

        done, hint = self.bench.status()
        body = {
            "id": "file-1",
            "object": "vector_store.file",
            "created_at": 0,
            "vector_store_id": "vs-1",
            "usage_bytes": 0,
            "last_error": None,
            "status": "completed" if done else "in_progress",
        }
        return httpx2.Response(200, headers=hint_headers(hint), json=body)

    def poll(self, rng: random.Random) -> None:
        # The job is already submitted (the 202); the helper starts with a retrieve.
        self.files.poll("file-1", vector_store_id="vs-1")


# --- the run ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """One strategy: its label, how it is called per job, and in which modes."""

    label: str
    run: Callable[[Provider, random.Random], object]
    modes: tuple[HintMode, ...]
    gives_up: tuple[type[Exception], ...] = ()
    short: str = ""
    """The plot's name for it (the label when empty)."""


def peer_rows(bench: Bench) -> list[Row]:
    """Every peer, set up once (clients built, waiter models loaded)."""
    runners: list[Runner] = [
        AzureRunner(bench),
        GoogleRunner(bench),
        BotocoreRunner(bench, "transcribe", "TranscriptionJobCompleted", "get_transcription_job"),
        BotocoreRunner(bench, "emr", "StepComplete", "describe_step"),
        TenacityRunner(bench),
        StaminaRunner(bench, "stamina (defaults: 10 attempts, 45 s)", "stamina"),
        StaminaRunner(
            bench,
            "stamina (attempts=None, timeout=None)",
            "stamina, no limits",
            attempts=None,
            timeout=None,
        ),
        BackoffRunner(bench),
        OpenAIRunner(bench),
    ]
    return [Row(r.label, r, r.modes, r.gives_up, r.short) for r in runners]


def parse_policy(text: str) -> tuple[str, dict[str, Any]]:
    """``[LABEL=]JSON`` → ``(label, keywords)``.

    Raises:
        ValueError: not a JSON object (one line).
    """
    label = None
    if not text.lstrip().startswith("{") and "=" in text:
        label, text = text.split("=", 1)
    try:
        keywords = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--policy {text[:60]!r} is not JSON ({exc.msg})") from None
    if not isinstance(keywords, dict):
        raise ValueError(f"--policy {text[:60]!r} must be a JSON object of Policy keywords")
    compact = json.dumps(keywords, separators=(", ", ": "))
    return label or f"waitbound {compact}", keywords


@contextmanager
def timed(what: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    print(f"  {what}: {time.perf_counter() - started:.1f} s", file=sys.stderr)


def run_all(
    durations: Sequence[float], seed: int, rows: Sequence[Row]
) -> dict[tuple[str, HintMode], Stats]:
    """Every row in every one of its modes, in the order given."""
    results: dict[tuple[str, HintMode], Stats] = {}
    for row in rows:
        for mode in row.modes:
            with timed(f"{row.label} / {mode.shown}"):
                results[row.label, mode] = summarize(
                    run_jobs(durations, mode, seed, row.run, gives_up=row.gives_up)
                )
    return results


def _points(
    results: Mapping[tuple[str, HintMode], Stats], mode: HintMode, labels: Sequence[str]
) -> dict[str, tuple[float, float]]:
    """(requests/job, mean lag) of *labels* in *mode*, for those that detected every job
    (one that abandons jobs has no comparable lag)."""
    return {
        label: (stats.requests_per_job, stats.lag_mean_s)
        for label in labels
        if (stats := results.get((label, mode))) is not None and stats.abandoned == 0
    }


def fronts_of(
    results: Mapping[tuple[str, HintMode], Stats], waitbound_labels: Sequence[str]
) -> tuple[dict[HintMode, list[str]], dict[HintMode, list[str]]]:
    """Each mode's Pareto front, and who is marked on it.

    The front (drawn in the plot) is over the peers and the first waitbound row
    (``waitbound (default)``); the hint-optimal line is a reference, not a competitor.
    Each further waitbound row (a ``--policy`` candidate) is judged against the peers
    alone: marked when it is on the front of the peers and itself.

    Returns:
        ``(fronts, marked)``, each mode to labels.
    """
    everyone = list(dict.fromkeys(label for label, _ in results))
    peers = [label for label in everyone if label not in [*waitbound_labels, HINT_OPTIMAL]]
    fronts: dict[HintMode, list[str]] = {}
    marked: dict[HintMode, list[str]] = {}
    for mode in HintMode:
        fronts[mode] = pareto_front(_points(results, mode, [*peers, *waitbound_labels[:1]]))
        marked[mode] = list(fronts[mode])
        for label in waitbound_labels[1:]:
            if label in pareto_front(_points(results, mode, [*peers, label])):
                marked[mode].append(label)
    return fronts, marked


def dominating(
    results: Mapping[tuple[str, HintMode], Stats], mode: HintMode, label: str, peers: Sequence[str]
) -> list[str]:
    """The peers that beat *label* in *mode* on both counts (no worse, better in one)."""
    points = _points(results, mode, [*peers, label])
    if label not in points:
        return []
    x, y = points[label]
    return [
        peer
        for peer, (px, py) in points.items()
        if peer != label and px <= x and py <= y and (px < x or py < y)
    ]


HINT_OPTIMAL = "hint-optimal (poll when the hint says)"

ENTRY_SUFFIX: Mapping[str, str] = {"submit": "", "wait": " [wait at t=0]"}
"""How a waitbound row's label names its entry (``--entry``)."""


def plot(
    results: Mapping[tuple[str, HintMode], Stats],
    fronts: Mapping[HintMode, Sequence[str]],
    names: Mapping[str, str],
    waitbound_labels: Sequence[str],
    path: Path,
    *,
    title: str,
) -> None:
    """One panel per hint mode: requests/job against mean lag (both log), each strategy a
    labelled point (*names*: its short name; strategies at one point share a label), the
    Pareto front dashed; waitbound's rows red (the first) and orange, the hint-optimal
    line green, strategies that abandoned jobs hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
    for ax, mode in zip(axes.flat, HintMode, strict=True):
        spots: dict[tuple[float, float], list[str]] = {}
        for (label, m), stats in results.items():
            x, y = stats.requests_per_job, stats.lag_mean_s
            if m is not mode or math.isnan(y):
                continue
            ours = label in waitbound_labels
            if ours:
                color = "tab:red" if label == waitbound_labels[0] else "tab:orange"
            else:
                color = "tab:green" if label == HINT_OPTIMAL else "tab:blue"
            hollow = stats.abandoned > 0
            ax.scatter(
                [x],
                [y],
                s=70 if ours else 40,
                facecolors="none" if hollow else color,
                edgecolors=color,
                zorder=3,
            )
            name = names[label] + (f" ({stats.abandoned * 100:.0f} % abandoned)" if hollow else "")
            spots.setdefault((round(x, 2), round(y, 2)), []).append(name)
        placed: list[tuple[float, float]] = []
        for (x, y), shared in sorted(spots.items()):
            # Points close together (log axes) get their labels stacked, not overlaid.
            near = sum(
                1
                for px, py in placed
                if abs(math.log10(x / px)) < 0.15 and abs(math.log10(y / py)) < 0.08
            )
            placed.append((x, y))
            ax.annotate(
                ", ".join(shared),
                (x, y),
                fontsize=7,
                xytext=(5, 3 - 10 * near),
                textcoords="offset points",
            )
        front = [results[label, mode] for label in fronts.get(mode, [])]
        if front:
            ax.step(
                [s.requests_per_job for s in front],
                [s.lag_mean_s for s in front],
                where="post",
                color="tab:gray",
                linestyle="--",
                linewidth=1,
                zorder=2,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(plain)
        ax.tick_params(which="minor", labelsize=6)
        ax.set_xlabel("status requests per job")
        ax.set_ylabel("mean detection lag (s)")
        ax.set_title(f"hints: {mode.shown}")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def missing_extra(names: Sequence[str]) -> str | None:
    """The first of *names* (modules) that is not installed, or None."""
    import importlib.util

    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except ModuleNotFoundError:
            return name
    return None


def report(
    results: Mapping[tuple[str, HintMode], Stats],
    waitbound_labels: Sequence[str],
    *,
    against_peers: bool = True,
) -> str:
    """Per waitbound row: on the front against the peers in each mode (and who beats it
    where not; skipped when no peer ran), and its distance to the hint-optimal line with
    exact hints."""
    everyone = list(dict.fromkeys(label for label, _ in results))
    peers = [label for label in everyone if label not in [*waitbound_labels, HINT_OPTIMAL]]
    lines = []
    optimal = results.get((HINT_OPTIMAL, HintMode.EXACT))
    for label in waitbound_labels:
        on, off = [], []
        for mode in HintMode:
            if (label, mode) not in results:
                continue
            beaten_by = dominating(results, mode, label, peers)
            if beaten_by:
                off.append(f"{mode.shown} (beaten by {', '.join(beaten_by)})")
            else:
                on.append(mode.shown)
        line = f"- {label}: on the Pareto front against the peers in {', '.join(on) or 'no mode'}"
        if off:
            line += f"; off it in {'; '.join(off)}"
        if not against_peers:
            line = f"- {label}: no peers run"
        mine = results.get((label, HintMode.EXACT))
        if optimal and mine:
            gap = mine.requests_per_job - optimal.requests_per_job
            verdict = "met" if gap <= 1.2 else "MISSED"
            line += (
                f"; exact hints: {gap:+.2f} requests/job from the hint-optimal line "
                f"(target <= 1.2: {verdict}), mean lag {mine.lag_mean_s:.1f} s against "
                f"{optimal.lag_mean_s:.1f} s"
            )
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 jobs, a smoke check")
    parser.add_argument("--jobs", type=int, default=None, help="jobs (default 2,000)")
    parser.add_argument("--seed", type=int, default=15, help="seed of durations and noise")
    parser.add_argument(
        "--out-dir", type=Path, default=Path("benchmarks/out"), help="where the table goes"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        help="the Pareto plot PNG (default docs/schedule_pareto.png; --quick: in --out-dir)",
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="[LABEL=]JSON",
        help="Policy keywords for one more waitbound row, e.g. '{\"max_delay_s\": 60}'",
    )
    parser.add_argument(
        "--entry",
        choices=("submit", "wait", "both"),
        default="submit",
        help="waitbound's entry: submit then wait (default), wait on the status URL at t=0, "
        "or both (each --policy row twice)",
    )
    parser.add_argument("--no-peers", action="store_true", help="waitbound rows only")
    parser.add_argument("--no-plot", action="store_true", help="no PNG (table only)")
    args = parser.parse_args(argv)
    jobs = args.jobs if args.jobs is not None else (40 if args.quick else 2000)
    if jobs < 1:
        parser.error(f"--jobs must be at least 1, got {jobs}")
    try:
        entries = ["submit", "wait"] if args.entry == "both" else [args.entry]
        given = [parse_policy(p) for p in args.policy]
        policies: list[tuple[str, dict[str, Any]]] = [("waitbound (default)", {}), *given]
        wb_rows = [
            (label + ENTRY_SUFFIX[entry], waitbound_policy(keywords), entry)
            for entry in entries
            for label, keywords in policies
        ]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if len({label for label, _, _ in wb_rows}) != len(wb_rows):
        print("error: two --policy rows share a label; label them LABEL=JSON", file=sys.stderr)
        return 2
    needed = [n for n in BENCH_EXTRA if n != "matplotlib"] if not args.no_peers else []
    missing = missing_extra(needed + ([] if args.no_plot else ["matplotlib"]))
    if missing is not None:
        print(
            f"error: {missing} is not installed; the schedule benchmark needs the bench "
            "extra: pip install -e '.[bench]' (or run with --no-peers --no-plot)",
            file=sys.stderr,
        )
        return 2

    from benchmarks._schedule_model import job_durations

    durations = job_durations(jobs, args.seed)
    bench = Bench()
    rows = [
        Row(label, runner, tuple(HintMode), runner.gives_up)
        for label, policy, entry in wb_rows
        for runner in [WaitboundRunner(bench, label, policy, entry=entry)]
    ]
    rows.append(Row(HINT_OPTIMAL, hint_optimal, (HintMode.EXACT,), short="hint-optimal"))
    if not args.no_peers:
        rows.extend(peer_rows(bench))
    print(f"schedule efficiency: {jobs} jobs, seed {args.seed}", file=sys.stderr)
    results = run_all(durations, args.seed, rows)
    wb_labels = [label for label, _, _ in wb_rows]
    fronts, marked = fronts_of(results, wb_labels)
    if args.no_peers:  # a front without the peers says nothing
        fronts, marked = {}, {}
    table = markdown_table(results, marked)
    summary = report(results, wb_labels, against_peers=not args.no_peers)
    front_note = (
        "no peers run: no Pareto front"
        if args.no_peers
        else "`◆`: on the mode's Pareto front (requests/job, mean lag) of the peers and "
        "waitbound's first row (a further waitbound row: of the peers and itself), among "
        "strategies that detect every job"
    )
    header = (
        f"Schedule efficiency: {jobs} jobs (log-normal, median 60 s, p95 600 s), seed "
        f"{args.seed}, waitbound entry `{args.entry}`. `*`: lag over the detected jobs "
        f"only. {front_note}.\n\n"
    )
    print(header + table + "\n" + summary)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "schedule_efficiency.md").write_text(header + table + "\n" + summary)
    png = args.plot or (
        args.out_dir / "schedule_pareto.png" if args.quick else Path("docs/schedule_pareto.png")
    )
    if not args.no_plot:
        names = {
            row.label: (row.short or row.label).replace(ENTRY_SUFFIX["wait"], " (wait at 0)")
            for row in rows
        }
        title = f"Schedule efficiency: {jobs} jobs, seed {args.seed}, waitbound entry {args.entry}"
        plot(results, fronts, names, wb_labels, png, title=title)
        print(f"plot: {png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
