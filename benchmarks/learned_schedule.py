"""The learned schedule against the formula, azure-core and the limit, on three job mixes.

For each mix (log-normal, bimodal, Pareto; ``benchmarks._schedule_model.Mix``) and no
hint, every strategy polls the same jobs (durations of the measuring seed) on a
virtual clock, through the schedule benchmark's fake provider, which counts:

- ``azure-core LROBasePolling`` (its real code, as in the schedule benchmark);
- ``waitbound (formula)``: ``waitbound run``'s default (``submit`` then ``wait``);
- ``waitbound learned after N``: the same with ``Policy(schedule="learned")``, its
  store holding the history of N jobs of the same mix (N = 5, 50, 200, 1,000)
  finished earlier by waitbound itself on the formula (the learning seed: other jobs
  than those measured); the history is frozen while measuring;
- the limit line: the dynamic programme's schedule on the mix's TRUE survival
  function, within the same floor (1 s) and cap (60 s), at a sweep of lag targets,
  polled exactly (no jitter).

Then the adaptation: after 1,000 log-normal jobs, the key's jobs suddenly take 5x as
long; 400 such jobs run on the learned schedule (its history live: the jobs of each
batch of 20 share one model, recomputed between batches, as a fleet does once per
check interval) and on the formula, and the requests and lag spent per job are
reported by job index.

Usage: ``python -m benchmarks.learned_schedule [--quick] [--jobs N] [--seed N]
[--out-dir DIR] [--no-plot] [--no-peers]``. Needs the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._schedule_model import (
    HintMode,
    JobRun,
    Mix,
    Stats,
    interpolate_front,
    mix_durations,
    poll_with,
    run_jobs,
    summarize,
    true_plan,
)
from benchmarks.schedule_efficiency import (
    WAITBOUND_BENCH_DEFAULTS,
    AzureRunner,
    Bench,
    WaitboundRunner,
    WaitboundStopped,
    missing_extra,
)
from waitbound import MemoryStore, Policy
from waitbound._model._history import Evidence

LEARN_KEY = "learning"
"""The key the learning jobs add to; measured jobs add to their own key (the history
they read stays the learning one)."""
LEARNED_AFTER = (5, 50, 200, 1000)
LIMIT_TARGETS_S = (4.0, 6.0, 8.0, 10.0, 12.5, 15.0, 17.5, 20.0, 25.0, 30.0, 40.0)
"""The lag targets (seconds) of the limit line's points."""
BATCH = 20
"""Adaptation: the jobs that share one model (a fleet's jobs of one check interval)."""


class FrozenHistory(MemoryStore):
    """A memory store whose history reads are a snapshot (:meth:`freeze`), while its
    writes go on: measuring never learns from the jobs being measured."""

    def __init__(self) -> None:
        super().__init__()
        self._snapshot: tuple[int, list[Evidence]] | None = None

    def freeze(self, *, newest: int | None = None) -> None:
        """Read the learning key's history from now on as it is now (its oldest
        *newest* pieces only, when given: the first jobs learned)."""
        history = super().schedule_history(LEARN_KEY)
        kept = history[-newest:] if newest else history
        self._snapshot = (super().history_version(LEARN_KEY) * 10_000 + len(kept), kept)

    def history_version(self, key: str) -> int:
        if self._snapshot is None:
            return super().history_version(key)
        return self._snapshot[0]

    def schedule_history(self, key: str) -> list[Evidence]:
        if self._snapshot is None:
            return super().schedule_history(key)
        return list(self._snapshot[1])


def _policy(**changes: object) -> Policy:
    return Policy(**{**WAITBOUND_BENCH_DEFAULTS, **changes})  # type: ignore[arg-type]


def _runs(durations: Sequence[float], seed: int, runner: object) -> list[JobRun]:
    return run_jobs(durations, HintMode.NONE, seed, runner, gives_up=(WaitboundStopped,))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class MixResult:
    mix: Mix
    rows: dict[str, Stats]
    limit: list[tuple[float, float]]
    """The limit line: (requests/job, mean lag s) of the true-survival plan per target."""


def _timed(what: str, started: float) -> None:
    print(f"  {what}: {time.perf_counter() - started:.1f} s", file=sys.stderr)


def run_mix(
    mix: Mix, jobs: int, seed: int, *, peers: bool, learned_after: Sequence[int] = LEARNED_AFTER
) -> tuple[MixResult, FrozenHistory]:
    """Every strategy on *jobs* jobs of *mix* (measuring seed *seed* + 1), learned
    after each of *learned_after* earlier jobs."""
    bench = Bench()
    measured = mix_durations(mix, jobs, seed + 1)
    rows: dict[str, Stats] = {}
    started = time.perf_counter()
    if peers:
        rows["azure-core"] = summarize(_runs(measured, seed + 1, AzureRunner(bench)))
        _timed(f"{mix} azure-core", started)
    started = time.perf_counter()
    formula = WaitboundRunner(bench, "formula", _policy())
    rows["waitbound (formula)"] = summarize(_runs(measured, seed + 1, formula))
    _timed(f"{mix} formula", started)
    store = FrozenHistory()
    learner = WaitboundRunner(bench, "learn", _policy(schedule_key=LEARN_KEY), store=store)
    started = time.perf_counter()
    _runs(mix_durations(mix, max(learned_after), seed), seed, learner)
    _timed(f"{mix} learning ({max(learned_after)} jobs)", started)
    for count in learned_after:
        store.freeze(newest=count)
        policy = _policy(schedule="learned", schedule_key=f"measured {count}")
        runner = WaitboundRunner(bench, f"learned {count}", policy, store=store)
        started = time.perf_counter()
        rows[f"waitbound learned after {count}"] = summarize(_runs(measured, seed + 1, runner))
        _timed(f"{mix} learned after {count}", started)
    started = time.perf_counter()
    limit = []
    for target in LIMIT_TARGETS_S:
        planned = true_plan(mix, floor_s=1.0, cap_s=60.0, lag_target_s=target)
        stats = summarize([poll_with(planned.next_delay_s, d, 60.0) for d in measured])
        limit.append((stats.requests_per_job, stats.lag_mean_s))
    _timed(f"{mix} limit line", started)
    store.freeze()
    return MixResult(mix=mix, rows=rows, limit=limit), store


def adaptation(store: FrozenHistory, jobs: int, seed: int) -> tuple[list[JobRun], list[JobRun]]:
    """After the log-normal history in *store*, *jobs* jobs 5x slower: the learned
    schedule (history live between batches) and the formula, job by job."""
    bench = Bench()
    slower = mix_durations(Mix.LOGNORMAL, jobs, seed + 2, slower=5.0)
    formula = _runs(slower, seed + 2, WaitboundRunner(bench, "formula", _policy()))
    policy = _policy(schedule="learned", schedule_key=LEARN_KEY)
    runner = WaitboundRunner(bench, "learned", policy, store=store)
    learned: list[JobRun] = []
    started = time.perf_counter()
    for first in range(0, jobs, BATCH):
        store.freeze()  # the history as it is now, new jobs included
        batch = slower[first : first + BATCH]
        learned.extend(_runs(batch, seed + 2 + first, runner))
    _timed("adaptation", started)
    return learned, formula


def _within(result: MixResult, label: str) -> float:
    """*label*'s requests per job above the limit line at its own mean lag (a share)."""
    stats = result.rows[label]
    limit = interpolate_front(result.limit, stats.lag_mean_s)
    return stats.requests_per_job / limit - 1.0 if not math.isnan(limit) else math.nan


def _saving(result: MixResult, label: str, against: str) -> float:
    """How many fewer requests *label* makes than *against*, at *against*'s lag: the
    limit-line-shaped interpolation is not needed, the learned schedule is planned at
    the formula's own lag; a share (0.25 = 25 % fewer)."""
    return 1.0 - result.rows[label].requests_per_job / result.rows[against].requests_per_job


def table(results: Sequence[MixResult]) -> str:
    lines = [
        "| mix | strategy | requests/job | lag mean (s) | lag p95 (s) "
        "| above the limit at its lag |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for result in results:
        for label, stats in result.rows.items():
            gap = _within(result, label)
            shown = "-" if math.isnan(gap) else f"{gap * 100:+.0f} %"
            lines.append(
                f"| {result.mix} | {label} | {stats.requests_per_job:.2f} | "
                f"{stats.lag_mean_s:.1f} | {stats.lag_p95_s:.1f} | {shown} |"
            )
        points = ", ".join(f"{r:.2f} @ {lag:.1f} s" for r, lag in result.limit)
        lines.append(f"| {result.mix} | limit line (requests @ lag) | {points} | | | |")
    return "\n".join(lines) + "\n"


def goals(results: Sequence[MixResult]) -> str:
    """The issue's goals, each with its verdict."""
    lines = []
    for result in results:
        learned = "waitbound learned after 200"
        gap = _within(result, learned)
        verdict = "met" if gap <= 0.10 else "MISSED"
        lines.append(
            f"- {result.mix}: learned after 200 is {gap * 100:+.1f} % from the limit line's "
            f"requests at its lag (target <= +10 %: {verdict})"
        )
        formula = result.rows["waitbound (formula)"]
        mine = result.rows[learned]
        lines.append(
            f"  - against the formula: {_saving(result, learned, 'waitbound (formula)') * 100:.1f} "
            f"% fewer requests ({mine.requests_per_job:.2f} vs {formula.requests_per_job:.2f}) "
            f"at mean lag {mine.lag_mean_s:.1f} s vs {formula.lag_mean_s:.1f} s"
        )
        if "azure-core" in result.rows:
            azure = result.rows["azure-core"]
            at_azure = interpolate_front(
                [
                    (s.requests_per_job, s.lag_mean_s)
                    for k, s in result.rows.items()
                    if "learned" in k
                ],
                azure.lag_mean_s,
            )
            lines.append(
                f"  - azure-core: {azure.requests_per_job:.2f} requests at {azure.lag_mean_s:.1f} s"
                + ("" if math.isnan(at_azure) else f" (learned rows at that lag: {at_azure:.2f})")
            )
        cold = result.rows["waitbound learned after 5"]
        lines.append(
            f"  - cold start (5 jobs): {cold.requests_per_job:.2f} requests at "
            f"{cold.lag_mean_s:.1f} s, the formula {formula.requests_per_job:.2f} at "
            f"{formula.lag_mean_s:.1f} s ({'same' if cold == formula else 'DIFFERENT'})"
        )
    return "\n".join(lines) + "\n"


def adaptation_table(learned: Sequence[JobRun], formula: Sequence[JobRun]) -> str:
    lines = [
        "| jobs after the change | learned requests/job | learned lag (s) | formula requests/job "
        "| formula lag (s) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    spans = [(0, 20), (20, 60), (60, 200), (200, len(learned))]
    for lo, hi in spans:
        if lo >= len(learned):
            break
        a, b = summarize(list(learned[lo:hi])), summarize(list(formula[lo:hi]))
        lines.append(
            f"| {lo + 1}-{min(hi, len(learned))} | {a.requests_per_job:.2f} | {a.lag_mean_s:.1f} "
            f"| {b.requests_per_job:.2f} | {b.lag_mean_s:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(
    results: Sequence[MixResult],
    learned: Sequence[JobRun],
    formula: Sequence[JobRun],
    out: Path,
    adapt_out: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 5))
    for ax, result in zip(axes if len(results) > 1 else [axes], results, strict=True):
        xs = [r for r, _ in result.limit]
        ys = [lag for _, lag in result.limit]
        ax.plot(xs, ys, "--", color="tab:green", label="limit (DP on the true distribution)")
        for label, stats in result.rows.items():
            color = (
                "tab:blue"
                if label == "azure-core"
                else "tab:red"
                if "formula" in label
                else "tab:orange"
            )
            ax.scatter([stats.requests_per_job], [stats.lag_mean_s], color=color, zorder=3)
            ax.annotate(
                label.replace("waitbound ", ""),
                (stats.requests_per_job, stats.lag_mean_s),
                fontsize=7,
                xytext=(4, 3),
                textcoords="offset points",
            )
        ax.set_xscale("log")
        ax.set_xlabel("status requests per job")
        ax.set_ylabel("mean detection lag (s)")
        ax.set_title(f"{result.mix} (no hints, floor 1 s, cap 60 s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for runs, name, color in ((learned, "learned", "tab:orange"), (formula, "formula", "tab:red")):
        window = 20
        req = [
            statistics.fmean(r.requests for r in runs[max(0, i - window + 1) : i + 1])
            for i in range(len(runs))
        ]
        lag = [
            statistics.fmean(r.lag_s or 0.0 for r in runs[max(0, i - window + 1) : i + 1])
            for i in range(len(runs))
        ]
        top.plot(range(1, len(runs) + 1), req, color=color, label=name)
        bottom.plot(range(1, len(runs) + 1), lag, color=color, label=name)
    top.set_ylabel("requests/job (mean of the last 20)")
    bottom.set_ylabel("lag (s, mean of the last 20)")
    bottom.set_xlabel("jobs since they became 5x slower (after 1,000 log-normal jobs)")
    top.legend()
    top.grid(True, alpha=0.3)
    bottom.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(adapt_out, dpi=100)
    plt.close(fig)


def _dump(
    results: Sequence[MixResult], learned: Sequence[JobRun], formula: Sequence[JobRun]
) -> dict[str, object]:
    """Everything the plots need, as JSON (``--plot-from``)."""
    return {
        "mixes": [
            {
                "mix": r.mix.value,
                "rows": {k: dataclasses.asdict(v) for k, v in r.rows.items()},
                "limit": r.limit,
            }
            for r in results
        ],
        "learned": [dataclasses.asdict(run) for run in learned],
        "formula": [dataclasses.asdict(run) for run in formula],
    }


def _load(data: dict[str, Any]) -> tuple[list[MixResult], list[JobRun], list[JobRun]]:
    results = [
        MixResult(
            mix=Mix(m["mix"]),
            rows={k: Stats(**v) for k, v in m["rows"].items()},
            limit=[(float(a), float(b)) for a, b in m["limit"]],
        )
        for m in data["mixes"]
    ]
    return (
        results,
        [JobRun(**run) for run in data["learned"]],
        [JobRun(**run) for run in data["formula"]],
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 jobs per mix, a smoke check")
    parser.add_argument("--jobs", type=int, default=None, help="measured jobs per mix (500)")
    parser.add_argument("--adapt-jobs", type=int, default=None, help="adaptation jobs (300)")
    parser.add_argument("--seed", type=int, default=25, help="the learning seed (+1 measures)")
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/out"))
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--no-peers", action="store_true", help="no azure-core row")
    parser.add_argument(
        "--mix", action="append", choices=[m.value for m in Mix], help="only these mixes"
    )
    parser.add_argument(
        "--combine",
        type=Path,
        nargs="+",
        default=None,
        help="no run: join the JSON of earlier runs (--mix in parallel) into the table and plots",
    )
    args = parser.parse_args(argv)
    if args.combine is not None:
        joined: list[MixResult] = []
        adapted: list[JobRun] = []
        plain: list[JobRun] = []
        for path in args.combine:
            got, more_adapted, more_plain = _load(json.loads(path.read_text()))
            joined.extend(got)
            adapted.extend(more_adapted)
            plain.extend(more_plain)
        order = list(Mix)
        joined.sort(key=lambda r: order.index(r.mix))
        _report(joined, adapted, plain, args, f"(joined from {len(args.combine)} runs)")
        return 0
    jobs = args.jobs or (100 if args.quick else 500)
    adapt = args.adapt_jobs or (60 if args.quick else 300)
    needed = ([] if args.no_peers else ["azure.core"]) + ([] if args.no_plot else ["matplotlib"])
    missing = missing_extra(needed)
    if missing is not None:
        print(
            f"error: {missing} is not installed; pip install -e '.[bench]' "
            "(or run with --no-peers --no-plot)",
            file=sys.stderr,
        )
        return 2
    results = []
    lognormal_store: FrozenHistory | None = None
    mixes = [Mix(m) for m in args.mix] if args.mix else list(Mix)
    after = LEARNED_AFTER[:3] if args.quick else LEARNED_AFTER
    for mix in mixes:
        result, store = run_mix(mix, jobs, args.seed, peers=not args.no_peers, learned_after=after)
        results.append(result)
        if mix is Mix.LOGNORMAL:
            lognormal_store = store
    learned: list[JobRun] = []
    formula: list[JobRun] = []
    if lognormal_store is not None:
        learned, formula = adaptation(lognormal_store, adapt, args.seed)
    suffix = "-" + "-".join(m.value for m in mixes) if args.mix else ""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"learned_schedule{suffix}.json").write_text(
        json.dumps(_dump(results, learned, formula))
    )
    _report(results, learned, formula, args, f"{jobs} measured jobs per mix")
    return 0


def _report(
    results: Sequence[MixResult],
    learned: Sequence[JobRun],
    formula: Sequence[JobRun],
    args: argparse.Namespace,
    what: str,
) -> None:
    """Print and write the table, and draw the plots (all three mixes only)."""
    after = LEARNED_AFTER[:3] if args.quick else LEARNED_AFTER
    header = (
        f"Learned schedule: {what} (seed {args.seed + 1}), history "
        f"from the learning seed {args.seed}; no hints; floor 1 s, cap 60 s.\n\n"
    )
    text = (
        header
        + table(results)
        + "\n"
        + goals(results)
        + f"\nAdaptation (jobs 5x slower after {after[-1]:,} log-normal jobs):\n\n"
        + adaptation_table(learned, formula)
    )
    print(text)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "learned_schedule.md").write_text(text)
    if not args.no_plot and len(results) == len(Mix) and learned:
        where = args.out_dir if args.quick else Path("docs")
        plot(
            results,
            learned,
            formula,
            where / "learned_schedule.png",
            where / "learned_adaptation.png",
        )
        print(
            f"plots: {where}/learned_schedule.png, {where}/learned_adaptation.png", file=sys.stderr
        )


if __name__ == "__main__":
    sys.exit(main())
