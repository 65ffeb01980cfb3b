"""What a command prints at its end: the outcome, as text or one JSON object, and its
exit code."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from waitbound._model._outcome import Outcome
from waitbound.cli._render import option_lines, printable


def print_outcome(outcome: Outcome, as_json: bool, costs: Sequence[tuple[str, str]] = ()) -> int:
    """Print an outcome (one JSON object with ``--json``); return its exit code.

    *costs* are the open options with their costs (see ``option_costs``): in JSON as
    ``option_costs``, in text one line each; ``decided_by`` is shown when set.
    """
    if as_json:
        document = outcome.as_json()
        if costs:
            document["option_costs"] = [{"option": o, "cost": c} for o, c in costs]
        click.echo(json.dumps(document, ensure_ascii=False))
    else:
        reason = f" ({outcome.reason.value})" if outcome.reason else ""
        status = outcome.outcome.value if outcome.outcome else "still waiting"
        click.echo(f"{outcome.operation_id}: {status}{reason}")
        click.echo(printable(outcome.message))
        for label, value, limit in (
            ("job id", outcome.job_id, 200),
            ("request id", outcome.request_id, 200),
            ("error", outcome.error, 500),
            ("note", outcome.note, 500),
            ("counts", outcome.counts, 500),
            ("usage", outcome.usage, 500),
            ("result url (not fetched)", outcome.result_url, 500),
            ("errors url", outcome.errors_url, 2000),
            ("result", outcome.result, 2000),
        ):
            if value is not None:
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                click.echo(f"{label}: {printable(text[:limit])}")
        if outcome.decided_by is not None:
            click.echo(f"decided by: {printable(outcome.decided_by)}")
        shown = list(costs) or [(name, name) for name in outcome.options]
        for line in option_lines(outcome.operation_id, shown, indent=""):
            click.echo(line)
    return outcome.exit_code
