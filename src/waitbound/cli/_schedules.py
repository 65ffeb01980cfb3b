"""``waitbound schedules``: list the store's schedule history per key, and forget one
(the learned schedule of that key starts cold again)."""

from __future__ import annotations

import json

import click

from waitbound._base._errors import UsageError
from waitbound._model._history import ScheduleSummary
from waitbound._rules._learned import MIN_JOBS, estimate
from waitbound.cli._flags import STORE_HELP
from waitbound.cli._render import printable
from waitbound.cli._store_access import opened_store
from waitbound.stores import Store

__all__ = ["schedules"]


USED_SAMPLE = 20
"""How many of a key's newest operations tell which schedule the key's operations used."""


def _quantiles(store: Store, key: str) -> tuple[dict[str, float | None], dict[str, int]]:
    """The key's median and p95 duration by its estimate (seconds; ``None``: longer
    than every job seen, e.g. a history of timeouts), and which schedule its newest
    operations asked for (``{"learned": n, "formula": m}``; operations no longer in the
    store are not counted)."""
    history = store.schedule_history(key)
    survival = estimate(history)
    used = {"learned": 0, "formula": 0}
    for evidence in history[:USED_SAMPLE]:
        record = store.get(evidence.operation_id)
        if record is not None:
            used["learned" if record.policy.schedule == "learned" else "formula"] += 1
    return {"p50_s": survival.quantile_s(0.5), "p95_s": survival.quantile_s(0.95)}, used


def _schedule_used(row: ScheduleSummary, used: dict[str, int]) -> str:
    """The schedule the key's operations actually used, in words: ``learned`` only for
    operations that asked for it (``Policy.schedule = "learned"``) once the key had
    :data:`MIN_JOBS` ended jobs; the formula otherwise ("formula (cold: …)" when they
    asked for the learned one too early), never "learned" for operations on the
    formula."""
    ended = row.jobs - row.censored
    learned, formula = used["learned"], used["formula"]
    if not learned and not formula:
        return "unknown (its operations are no longer in the store)"
    if not learned:
        return "formula"
    words = "learned" if ended >= MIN_JOBS else f"formula (cold: learned needs {MIN_JOBS} ended)"
    if formula:
        words += f"; formula for {formula} of the newest {learned + formula}"
    return words


def _json(
    row: ScheduleSummary, quantiles: dict[str, float | None], used: dict[str, int]
) -> dict[str, object]:
    ended = row.jobs - row.censored
    return {
        "key": row.key,
        "jobs": row.jobs,
        "ended": ended,
        "censored": row.censored,
        "learned": ended >= MIN_JOBS,
        "schedule_used": _schedule_used(row, used),
        "operations_learned": used["learned"],
        "operations_formula": used["formula"],
        "single_job": row.jobs == 1,
        "version": row.version,
        "newest_at": row.newest_at.isoformat() if row.newest_at else None,
        **{name: None if v is None else round(v, 3) for name, v in quantiles.items()},
    }


def _seconds(value: float | None, longest: str) -> str:
    return f"> {longest}" if value is None else f"{value:.3g}s"


_HEADER = ("KEY", "JOBS", "CENSORED", "P50", "P95", "SCHEDULE USED", "VERSION")


@click.group(invoke_without_command=True)
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of keys.")
@click.pass_context
def schedules(ctx: click.Context, store: str | None, as_json: bool) -> None:
    """List (the default) or forget the schedule history kept per key.

    A header row, then one row per key (a profile, a submit endpoint or an origin and
    a path template, or a --schedule-key): how many finished jobs it holds, how many
    only say "longer than" (timed out, canceled), the median and p95 duration it
    estimates, the schedule its operations actually used (learned only for operations
    that asked for it once the key had 20 ended jobs; the formula otherwise) and its
    history version. Keys that each hold one job are flagged: an id in the URL is
    leaking into the keys, so nothing is ever learned. Exit codes: 0 done; 2 a usage
    error; 5 the store failed.
    """
    if ctx.invoked_subcommand is None:
        with opened_store(store, read_only=True, then="run it again") as opened:
            rows = [(row, *_quantiles(opened, row.key)) for row in opened.schedules()]
        if as_json:
            click.echo(json.dumps([_json(row, q, used) for row, q, used in rows]))
            return
        if not rows:
            click.echo("no schedule history")
            return
        table = [_HEADER]
        for row, q, used in rows:
            table.append(
                (
                    printable(row.key) + ("  (1 job)" if row.jobs == 1 else ""),
                    str(row.jobs),
                    str(row.censored),
                    _seconds(q["p50_s"], "all seen"),
                    _seconds(q["p95_s"], "all seen"),
                    _schedule_used(row, used),
                    str(row.version),
                )
            )
        widths = [max(len(line[i]) for line in table) for i in range(len(_HEADER) - 1)]
        for line in table:
            cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
            click.echo("  ".join([*cells, line[-1]]).rstrip())
        single = sum(1 for row, _, _ in rows if row.jobs == 1)
        if single >= 2:
            click.echo(
                f"warning: {single} keys hold one job each: an id in the URL is likely "
                "leaking into the keys, so the learned schedule never learns. Name the "
                "kind of job with --schedule-key (Policy.schedule_key), or a profile's "
                "submit.status_url_template"
            )


@schedules.command("forget")
@click.argument("key")
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print what was forgotten as JSON.")
def forget_command(key: str, store: str | None, as_json: bool) -> None:
    """Forget KEY's history (as `waitbound schedules` lists it): its learned schedule
    starts cold again, on the formula, and learns anew."""
    with opened_store(store, then="run it again") as opened:
        forgotten = opened.forget_schedule(key)
    if not forgotten:
        raise UsageError(f"no schedule history for key {key[:200]!r}; see `waitbound schedules`")
    if as_json:
        click.echo(json.dumps({"key": key, "forgotten": forgotten}))
    else:
        click.echo(f"forgot {forgotten} job{'s' if forgotten != 1 else ''} of {printable(key)}")
