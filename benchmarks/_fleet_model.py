"""The fleet simulation's model: operations, workers and one database on a virtual clock.

A discrete-event simulation (one ``heapq`` of events, no sockets, no threads):

- **Operations** arrive at a steady rate. Each arrival is one ``insert`` transaction
  (``waitbound.start``); once it commits the operation is due at its arrival time
  (the first status poll at t = 0, as the controller schedules it today) and a
  ``NOTIFY`` wakes one sleeping worker. A job is done ``duration`` seconds after its
  arrival (log-normal). After every observation that is not the end, the next poll is
  scheduled by waitbound's real schedule: :func:`waitbound._profile._schedule.backoff_delay_s`
  with the attempt number and the real :class:`waitbound.Policy`'s base, cap, growth,
  jitter floor and floor; the deadline and the request budget end it as the controller
  would.
- **Workers**, each a loop (the batching worker): claim and reserve up to
  ``min(free slots, batch)`` due operations in ONE transaction; send each request
  (the worker's one core spends ``poll_cpu_s`` on it, then the provider answers after
  a log-normal latency); queue each observation; one group commit writes up to
  ``batch`` queued observations in ONE transaction (those that arrive during it go in
  the next); a slot frees when its observation is committed. A claim that filled its
  batch is followed at once by another; after one that did not, the next waits until
  ``claim_pause_s`` after it (0: at once). An empty claim puts the worker to sleep
  until the earliest ``next_poll_at`` (the claim is taken to return it), at most
  ``idle_s`` and at least the pause, or until one of its own commits lands or a
  ``NOTIFY`` arrives.
- **The database**: one server that runs at most ``cores`` transactions at once, first
  come first served, each occupying a core for ``fixed + per_row * rows`` seconds
  (:class:`Line`, per kind) and then waiting ``flush_s`` for its WAL flush without
  occupying one. The worker's core also spends the client's share of each transaction
  (psycopg encoding and decoding).

Everything is measured over a window in the steady part of the run (by default the
second half of the arrivals) and returned as a :class:`Result`.
"""

from __future__ import annotations

import heapq
import math
import random
from array import array
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from waitbound import Policy
from waitbound._profile._schedule import backoff_delay_s

Z95 = NormalDist().inv_cdf(0.95)
"""The standard normal's 95th percentile: a log-normal's ``sigma = ln(p95 / median) / Z95``."""

_CLAIM, _CLAIM_DONE, _RESPONSE, _FLUSH_DONE, _WAKE, _INSERTED, _MARK = range(7)

_SUCCEEDED, _TIMED_OUT, _BUDGET = "succeeded", "timed_out", "request_budget_exhausted"


@dataclass(frozen=True, slots=True, kw_only=True)
class Line:
    """A cost that grows with a transaction's rows: ``fixed_s + per_row_s * rows`` seconds."""

    fixed_s: float
    per_row_s: float

    def at(self, rows: int) -> float:
        """The cost of *rows* rows, in seconds."""
        return self.fixed_s + self.per_row_s * rows


@dataclass(frozen=True, slots=True, kw_only=True)
class DbCosts:
    """The database cost model, in seconds.

    Attributes:
        claim, observe, insert: core time at the server per transaction of each kind
            (claim and reserve; group commit of observations; a new operation).
        flush_s: the WAL flush after every commit (latency; no core is held).
        client_claim, client_observe: the worker's CPU time per transaction (psycopg).
    """

    claim: Line
    observe: Line
    insert: Line
    flush_s: float
    client_claim: Line
    client_observe: Line


@dataclass(frozen=True, slots=True, kw_only=True)
class Fleet:
    """One simulated fleet. Durations in seconds.

    Attributes:
        operations: operations that arrive, one every ``1 / rate_per_s`` seconds.
        rate_per_s: arrivals per second (steady).
        workers, concurrency: worker loops, and requests each keeps in flight at most.
        batch: the most rows one claim or one group commit writes.
        db_cores: transactions the database server runs at once.
        costs: the database cost model.
        poll_cpu_s: the worker's CPU time per poll outside the store (HTTP client,
            controller step).
        job_median_s, job_p95_s: the log-normal job durations.
        latency_median_s, latency_p95_s: the log-normal provider latency.
        idle_s: the longest sleep of a worker that found nothing due.
        claim_pause_s: the least time between two claims of one worker, unless the
            last one filled its batch (0: claim again at once, wake at the earliest
            ``next_poll_at``).
        policy: the operations' policy (schedule, deadline, request budget).
        seed: the random streams (durations, latencies, jitter) derive from it.
        window: the measured span as fractions of the arrival span ``operations / rate``.
        window_s: the measured span in seconds of virtual time (instead of ``window``).
    """

    operations: int
    rate_per_s: float
    workers: int
    concurrency: int
    batch: int
    db_cores: int
    costs: DbCosts
    poll_cpu_s: float
    job_median_s: float = 60.0
    job_p95_s: float = 600.0
    latency_median_s: float = 0.05
    latency_p95_s: float = 0.1
    idle_s: float = 1.0
    claim_pause_s: float = 0.0
    policy: Policy = field(default_factory=lambda: Policy(deadline_s=3600.0))
    seed: int = 15
    window: tuple[float, float] = (0.5, 1.0)
    window_s: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """What one run measured. Rates are per second of virtual time over the window.

    Attributes:
        window_s: the measured window's length.
        claims_per_s: operations claimed (rows of claim transactions).
        claim_txns_per_s, empty_claims_per_s: claim transactions; those that found none.
        polls_per_s: status requests sent.
        txns_per_s, rows_per_s: every transaction at the database and the rows they wrote.
        db_utilisation: busy core-seconds / (cores * window).
        db_wait_p50_s, db_wait_p99_s: a transaction's wait for a core.
        lag_p50_s, lag_p95_s, lag_p99_s: ``next_poll_at`` to the request being sent.
        worker_utilisation: each worker's CPU busy fraction.
        slot_utilisation: the mean fraction of the workers' slots in use.
        in_flight_at_end, due_backlog_at_end: at the window's end, operations not
            finished, and due ones not claimed.
        outcomes: how the operations ended (all of them, the whole run).
        requests_per_job: status requests per operation (the whole run).
        detection_lag_mean_s: the job's end to the answer that showed it (succeeded ones).
        end_s: virtual time when the last operation ended.
        events: events processed.
    """

    window_s: float
    claims_per_s: float
    claim_txns_per_s: float
    empty_claims_per_s: float
    polls_per_s: float
    txns_per_s: float
    rows_per_s: float
    db_utilisation: float
    db_wait_p50_s: float
    db_wait_p99_s: float
    lag_p50_s: float
    lag_p95_s: float
    lag_p99_s: float
    worker_utilisation: tuple[float, ...]
    slot_utilisation: float
    in_flight_at_end: int
    due_backlog_at_end: int
    outcomes: dict[str, int]
    requests_per_job: float
    detection_lag_mean_s: float
    end_s: float
    events: int


def _quantile(values: array[float], q: float) -> float:
    """The nearest-rank *q* quantile (0 < q <= 1) of *values* (NaN when empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _overlap(start: float, end: float, low: float, high: float) -> float:
    """How much of ``[start, end]`` lies in ``[low, high]``."""
    return max(0.0, min(end, high) - max(start, low))


class _Worker:
    """One worker's state."""

    __slots__ = (
        "claimed_at",
        "claiming",
        "cpu_busy_s",
        "cpu_free_at",
        "flushing",
        "gen",
        "in_flight",
        "pending",
        "sleeping",
    )

    def __init__(self) -> None:
        self.claimed_at = 0.0
        self.cpu_free_at = 0.0
        self.cpu_busy_s = 0.0
        self.in_flight = 0
        self.claiming = False
        self.sleeping = False
        self.flushing = False
        self.gen = 0
        self.pending: list[tuple[int, float, bool, float]] = []
        """Observations to commit: (operation, answered at, job seen done, claimed at)."""


def simulate(fleet: Fleet) -> Result:
    """Run *fleet* to its end (every operation finished) and measure it.

    Raises:
        ValueError: a size or rate that is not positive.
    """
    if min(fleet.operations, fleet.workers, fleet.concurrency, fleet.batch, fleet.db_cores) < 1:
        raise ValueError("operations, workers, concurrency, batch and db_cores must be >= 1")
    if not fleet.rate_per_s > 0:
        raise ValueError(f"rate_per_s must be > 0, got {fleet.rate_per_s}")
    policy, costs = fleet.policy, fleet.costs
    base_s, cap_s, floor_s = policy.base_delay_s, policy.max_delay_s, policy.floor_s
    growth, jitter_floor = policy.backoff_growth, policy.backoff_jitter_floor
    deadline_s, max_requests = policy.deadline_s, policy.max_requests
    n, batch, concurrency = fleet.operations, fleet.batch, fleet.concurrency
    poll_cpu_s, idle_s, flush_s = fleet.poll_cpu_s, fleet.idle_s, costs.flush_s
    pause_s = fleet.claim_pause_s
    span_s = n / fleet.rate_per_s
    w0, w1 = fleet.window_s or (fleet.window[0] * span_s, fleet.window[1] * span_s)

    durations = random.Random(f"{fleet.seed}/durations")
    latencies = random.Random(f"{fleet.seed}/latencies")
    jitter = random.Random(f"{fleet.seed}/jitter")
    job_mu = math.log(fleet.job_median_s)
    job_sigma = math.log(fleet.job_p95_s / fleet.job_median_s) / Z95
    lat_mu = math.log(fleet.latency_median_s)
    lat_sigma = math.log(fleet.latency_p95_s / fleet.latency_median_s) / Z95

    done_at = array("d", bytes(8 * n))
    deadline_at = array("d", bytes(8 * n))
    attempt = array("l", bytes(array("l").itemsize * n))
    requests = array("l", bytes(array("l").itemsize * n))
    outcomes = {_SUCCEEDED: 0, _TIMED_OUT: 0, _BUDGET: 0}
    detection_s = 0.0

    due: list[tuple[float, int]] = []  # the database's due index: (next_poll_at, operation)
    events: list[tuple[float, int, int, int, Any]] = []  # (time, seq, kind, worker, data)
    seq = 0
    slots = [0.0] * fleet.db_cores  # when each database core is next free (a heap)
    workers = [_Worker() for _ in range(fleet.workers)]
    sleepers: list[int] = []

    # window counters
    claim_rows = claim_txns = empty_claims = polls = txns = rows_written = 0
    db_busy_s = slot_s = 0.0
    lags: array[float] = array("d")
    waits: array[float] = array("d")
    in_flight_at_end = backlog_at_end = 0
    finished = 0

    def db(at: float, service_s: float, rows: int) -> float:
        """Run a transaction submitted at *at*; return when its commit is durable."""
        nonlocal txns, rows_written, db_busy_s
        start = max(at, slots[0])
        heapq.heapreplace(slots, start + service_s)
        if w0 <= at < w1:
            txns += 1
            rows_written += rows
            waits.append(start - at)
        db_busy_s += _overlap(start, start + service_s, w0, w1)
        return start + service_s + flush_s

    def cpu(worker: _Worker, at: float, cost_s: float) -> float:
        """Spend *cost_s* of *worker*'s core from *at* on; return when it is spent."""
        begin = max(at, worker.cpu_free_at)
        worker.cpu_free_at = begin + cost_s
        worker.cpu_busy_s += _overlap(begin, begin + cost_s, w0, w1)
        return worker.cpu_free_at

    def push(at: float, kind: int, index: int, data: Any = None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, index, data))

    def finish(outcome: str) -> None:
        nonlocal finished
        outcomes[outcome] += 1
        finished += 1

    def flush(worker: _Worker, index: int, at: float) -> None:
        """Group commit: write up to *batch* queued observations in one transaction."""
        written = worker.pending[:batch]
        del worker.pending[:batch]
        rows = len(written)
        push(db(at, costs.observe.at(rows), rows), _FLUSH_DONE, index, written)

    def claim_soon(worker: _Worker, index: int, at: float) -> None:
        """Claim at *at*, or once ``claim_pause_s`` has passed since the last claim."""
        worker.claiming = True
        push(max(at, worker.claimed_at + pause_s), _CLAIM, index)

    def sleep(worker: _Worker, index: int, at: float) -> None:
        """Nothing was due: sleep until the earliest ``next_poll_at``, at most ``idle_s``."""
        wake = at + idle_s
        if due:
            wake = min(wake, due[0][0])
        worker.sleeping = True
        worker.gen += 1
        sleepers.append(index)
        push(max(wake, at, worker.claimed_at + pause_s), _WAKE, index, worker.gen)

    def wake_up(worker: _Worker, index: int) -> None:
        """End *worker*'s sleep (its pending wake-up is ignored)."""
        worker.sleeping = False
        worker.gen += 1
        sleepers.remove(index)

    push(w1, _MARK, -1)
    for index, worker in enumerate(workers):
        worker.claimed_at = -pause_s
        claim_soon(worker, index, 0.0)

    arrived = 0
    next_arrival = 0.0
    count = 0
    now = 0.0
    while finished < n:
        if arrived < n and (not events or next_arrival <= events[0][0]):
            now, op = next_arrival, arrived
            arrived += 1
            next_arrival = arrived / fleet.rate_per_s
            done_at[op] = now + durations.lognormvariate(job_mu, job_sigma)
            deadline_at[op] = now + deadline_s
            push(db(now, costs.insert.at(1), 1), _INSERTED, op, now)
            count += 1
            continue
        now, _, kind, index, data = heapq.heappop(events)
        count += 1
        if kind == _CLAIM:
            worker = workers[index]
            worker.claimed_at = now
            limit = min(concurrency - worker.in_flight, batch)
            taken: list[tuple[int, float]] = []
            rows = 0
            while due and due[0][0] <= now and rows < limit:
                poll_at, op = heapq.heappop(due)
                rows += 1
                if now >= deadline_at[op]:  # step 2: the deadline before any request
                    finish(_TIMED_OUT)
                elif requests[op] >= max_requests:  # step 3: the budget
                    finish(_BUDGET)
                else:
                    requests[op] += 1
                    taken.append((op, poll_at))
            worker.in_flight += len(taken)
            if w0 <= now < w1:
                claim_txns += 1
                claim_rows += rows
                empty_claims += rows == 0
            done = db(now, costs.claim.at(rows), rows)
            push(done, _CLAIM_DONE, index, (taken, rows, rows == limit, now))
        elif kind == _CLAIM_DONE:
            worker = workers[index]
            taken, rows, filled, claimed_at = data
            worker.claiming = False
            ready = cpu(worker, now, costs.client_claim.at(rows))
            for op, poll_at in taken:
                sent = cpu(worker, ready, poll_cpu_s)
                if w0 <= sent < w1:
                    polls += 1
                    lags.append(sent - poll_at)
                answer = sent + latencies.lognormvariate(lat_mu, lat_sigma)
                push(answer, _RESPONSE, index, (op, sent >= done_at[op], claimed_at))
            if not rows:
                sleep(worker, index, now)
            elif worker.in_flight < concurrency:
                if filled:  # more may be due at once: no pause
                    worker.claiming = True
                    push(now, _CLAIM, index)
                else:
                    claim_soon(worker, index, now)
        elif kind == _RESPONSE:
            worker = workers[index]
            op, seen, claimed_at = data
            worker.pending.append((op, now, seen, claimed_at))
            if not worker.flushing:
                worker.flushing = True
                flush(worker, index, now)
        elif kind == _FLUSH_DONE:
            worker = workers[index]
            written: list[tuple[int, float, bool, float]] = data
            cpu(worker, now, costs.client_observe.at(len(written)))
            worker.in_flight -= len(written)
            for op, answered_at, seen, claimed_at in written:
                if w0 <= claimed_at < w1:
                    slot_s += now - claimed_at
                if seen:
                    finish(_SUCCEEDED)
                    detection_s += answered_at - done_at[op]
                    continue
                delay = backoff_delay_s(
                    attempt[op],
                    base_delay_s=base_s,
                    max_delay_s=cap_s,
                    rng=jitter,
                    growth=growth,
                    jitter_floor=jitter_floor,
                )
                attempt[op] += 1
                if answered_at + floor_s >= deadline_at[op]:
                    finish(_TIMED_OUT)
                    continue
                heapq.heappush(due, (min(answered_at + max(delay, floor_s), deadline_at[op]), op))
            if worker.pending:
                flush(worker, index, now)
            else:
                worker.flushing = False
            if not worker.claiming and worker.in_flight < concurrency:
                if worker.sleeping:  # a step ended: the worker looks again
                    wake_up(worker, index)
                claim_soon(worker, index, now)
        elif kind == _WAKE:
            worker = workers[index]
            if worker.sleeping and data == worker.gen:
                wake_up(worker, index)
                worker.claiming = True
                push(now, _CLAIM, index)
        elif kind == _INSERTED:
            heapq.heappush(due, (data, index))
            if sleepers:  # NOTIFY: one sleeping worker looks again
                woken = sleepers[0]
                wake_up(workers[woken], woken)
                claim_soon(workers[woken], woken, now)
        else:  # _MARK: the window's end
            in_flight_at_end = arrived - finished
            backlog_at_end = sum(1 for poll_at, _ in due if poll_at <= now)

    span = w1 - w0
    total_requests = sum(requests)
    return Result(
        window_s=span,
        claims_per_s=claim_rows / span,
        claim_txns_per_s=claim_txns / span,
        empty_claims_per_s=empty_claims / span,
        polls_per_s=polls / span,
        txns_per_s=txns / span,
        rows_per_s=rows_written / span,
        db_utilisation=db_busy_s / (fleet.db_cores * span),
        db_wait_p50_s=_quantile(waits, 0.5),
        db_wait_p99_s=_quantile(waits, 0.99),
        lag_p50_s=_quantile(lags, 0.5),
        lag_p95_s=_quantile(lags, 0.95),
        lag_p99_s=_quantile(lags, 0.99),
        worker_utilisation=tuple(w.cpu_busy_s / span for w in workers),
        slot_utilisation=slot_s / (span * fleet.workers * concurrency),
        in_flight_at_end=in_flight_at_end,
        due_backlog_at_end=backlog_at_end,
        outcomes=outcomes,
        requests_per_job=total_requests / n,
        detection_lag_mean_s=detection_s / max(outcomes[_SUCCEEDED], 1),
        end_s=now,
        events=count,
    )
