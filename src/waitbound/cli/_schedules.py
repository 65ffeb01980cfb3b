"""``waitbound schedules``: list the store's schedule history per key, and forget one
(the learned schedule of that key starts cold again)."""

from __future__ import annotations

import json

import click

from waitbound._errors import UsageError
from waitbound._history import ScheduleSummary
from waitbound._learned import MIN_JOBS, estimate
from waitbound.cli._common import STORE_HELP, opened_store
from waitbound.cli._render import printable
from waitbound.stores import Store

__all__ = ["schedules"]


def _quantiles(store: Store, key: str) -> dict[str, float | None]:
    """The key's median and p95 duration by its estimate (seconds; ``None``: longer
    than every job seen, e.g. a history of timeouts)."""
    survival = estimate(store.schedule_history(key))
    return {"p50_s": survival.quantile_s(0.5), "p95_s": survival.quantile_s(0.95)}


def _json(row: ScheduleSummary, quantiles: dict[str, float | None]) -> dict[str, object]:
    ended = row.jobs - row.censored
    return {
        "key": row.key,
        "jobs": row.jobs,
        "ended": ended,
        "censored": row.censored,
        "learned": ended >= MIN_JOBS,
        "version": row.version,
        "newest_at": row.newest_at.isoformat() if row.newest_at else None,
        **{name: None if v is None else round(v, 3) for name, v in quantiles.items()},
    }


def _seconds(value: float | None, longest: str) -> str:
    return f"> {longest}" if value is None else f"{value:.3g}s"


@click.group(invoke_without_command=True)
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of keys.")
@click.pass_context
def schedules(ctx: click.Context, store: str | None, as_json: bool) -> None:
    """List (the default) or forget the schedule history kept per key.

    Each key (a profile, an origin and a path template, or a --schedule-key) shows how
    many finished jobs it holds, how many only say "longer than" (timed out,
    canceled), whether a learned schedule uses it (at least 20 ended jobs), and the
    median and p95 duration it estimates. Exit codes: 0 done; 2 a usage error; 5 the
    store failed.
    """
    if ctx.invoked_subcommand is None:
        with opened_store(store, read_only=True, then="run it again") as opened:
            rows = [(row, _quantiles(opened, row.key)) for row in opened.schedules()]
        if as_json:
            click.echo(json.dumps([_json(row, q) for row, q in rows]))
            return
        if not rows:
            click.echo("no schedule history")
        for row, q in rows:
            ended = row.jobs - row.censored
            state = "learned" if ended >= MIN_JOBS else f"cold (needs {MIN_JOBS} ended)"
            click.echo(
                f"{printable(row.key)}  {row.jobs} jobs ({row.censored} censored)  "
                f"p50 {_seconds(q['p50_s'], 'all seen')}  p95 {_seconds(q['p95_s'], 'all seen')}"
                f"  {state}  version {row.version}"
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
