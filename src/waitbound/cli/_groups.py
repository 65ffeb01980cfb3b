"""``wait-all`` and ``wait-any``: wait on stored operations as one group, and the group
lines ``show`` and ``escalations`` print.

Thin adapters over :func:`waitbound.wait_all` and :func:`waitbound.wait_any`: the
group's deadline, budget and scheduling are the API's; the exit code is ``wait``'s,
applied to the group (:meth:`waitbound.GroupResult.exit_code`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from waitbound._base._errors import UsageError
from waitbound._engine._fan_in import GroupResult, wait_all, wait_any
from waitbound.cli._exits import EXIT_CODES_HELP
from waitbound.cli._flags import STORE_HELP, http_settings
from waitbound.cli._params import (
    DURATION_HELP,
    STORED_TEXT,
    WholeRange,
    parse_header,
    positive_duration,
)
from waitbound.cli._render import printable
from waitbound.cli._store_access import opened_store
from waitbound.cli._time import timing
from waitbound.stores._groups import groups_of

__all__ = ["wait_all_command", "wait_any_command"]

_GROUP_HELP = (
    "The group's own deadline and request budget bound it on top of each operation's "
    "own; its spending is stored before each request, so a group resumed with --group "
    "keeps its bound. One scheduler drives every member with per-origin pacing. When "
    "the group's bound stops it, the members left keep waiting within their own bounds."
)


def _group_options(fn: Any) -> Any:
    for option in reversed(
        [
            click.argument("operation_ids", nargs=-1, type=STORED_TEXT),
            click.option(
                "--group",
                "group_id",
                type=STORED_TEXT,
                help="Resume this group (grp_…) with its stored members and bounds, or give "
                "a new group this id.",
            ),
            click.option(
                "--deadline",
                callback=positive_duration,
                help="The group's own deadline, from now (e.g. 90s, 10m).",
            ),
            click.option(
                "--max-requests",
                type=WholeRange(min=1, max=1_000_000),
                help="The group's own request budget, over every member's requests.",
            ),
            click.option(
                "--header", "headers", multiple=True, help="'Name: value': sent, never stored."
            ),
            click.option("--store", help=STORE_HELP),
            click.option(
                "--json", "as_json", is_flag=True, help="Print one JSON object on stdout."
            ),
        ]
    ):
        fn = option(fn)
    return fn


def _run_group(flags: dict[str, Any], *, kind: str, cancel_rest: bool = False) -> int:
    ids: Sequence[str] = flags["operation_ids"]
    group_id: str | None = flags["group_id"]
    if not ids and group_id is None:
        raise UsageError("give the OPERATION_IDs to wait on, or --group to resume a group")
    sent = [parse_header(h) for h in flags["headers"]]
    options: dict[str, Any] = {
        "deadline": flags["deadline"],
        "max_requests": flags["max_requests"],
        "group_id": group_id,
        "headers": dict(sent),
        "http": http_settings(None),
        **timing(),
    }
    with opened_store(flags["store"], then="resume with --group (printed above)") as opened:
        if kind == "any":
            result = wait_any(list(ids), store=opened, cancel_rest=cancel_rest, **options)
        else:
            result = wait_all(list(ids), store=opened, **options)
        row = groups_of(opened).get_group(result.group_id)
    stored_kind = row.kind if row is not None else kind
    exit_code = result.exit_code("any" if stored_kind == "any" else "all")
    if flags["as_json"]:
        document = result.as_json()
        document["kind"] = stored_kind
        document["exit_code"] = exit_code
        click.echo(json.dumps(document, ensure_ascii=False))
        return exit_code
    for line in _result_lines(result):
        click.echo(line)
    return exit_code


def _result_lines(result: GroupResult) -> list[str]:
    lines = []
    if result.stopped is not None:
        head = f"group {result.group_id}: stopped ({result.stopped.value})"
    else:
        head = f"group {result.group_id}: done"
    budget = f" of {result.max_requests}" if result.max_requests is not None else ""
    lines.append(f"{head}; {result.requests_used}{budget} requests used")
    for outcome in result.outcomes:
        status = outcome.outcome.value if outcome.outcome else "still waiting"
        reason = f" ({outcome.reason.value})" if outcome.reason else ""
        lines.append(f"  {outcome.operation_id}: {status}{reason}")
        lines.append(f"    {printable(outcome.message)}")
    if result.stopped is not None and result.pending:
        lines.append(
            f"the group's own bound stopped it; {len(result.pending)} still wait within their "
            f"own bounds: resume with `waitbound wait-all --group {result.group_id}`"
        )
    return lines


@click.command(
    name="wait-all",
    help="Wait until every OPERATION_ID has an outcome, as one group.\n\n"
    + _GROUP_HELP
    + "\n\n"
    + DURATION_HELP
    + "\n\nExit codes as `wait`'s, applied to the group: 0 every member succeeded; 1 every "
    "member ended and one did not succeed; 3 a member timed out or escalated, or the "
    "group's own deadline or budget stopped it. " + EXIT_CODES_HELP,
)
@_group_options
def wait_all_command(**flags: Any) -> int:
    return _run_group(flags, kind="all")


@click.command(
    name="wait-any",
    help="Wait until the first OPERATION_ID has an outcome, as one group; the others are "
    "left untouched (--cancel-rest: canceled where they are cancelable).\n\n"
    + _GROUP_HELP
    + "\n\n"
    + DURATION_HELP
    + "\n\nExit codes as `wait`'s for the first member that ended; 3 when the group's own "
    "deadline or budget stopped it before any ended. " + EXIT_CODES_HELP,
)
@_group_options
@click.option(
    "--cancel-rest",
    is_flag=True,
    help="Once one ended, cancel the others that are cancelable (each cancel is sent).",
)
def wait_any_command(cancel_rest: bool, **flags: Any) -> int:
    return _run_group(flags, kind="any", cancel_rest=cancel_rest)
