"""The ``waitbound`` command group; each command lives in the module of its concern."""

from __future__ import annotations

import click

from waitbound._base._version import VERSION
from waitbound.cli._audit import audit
from waitbound.cli._db import db
from waitbound.cli._decisions import decide_command, escalations_command
from waitbound.cli._deliveries import deliveries
from waitbound.cli._exits import EXIT_CODES_HELP
from waitbound.cli._groups import wait_all_command, wait_any_command
from waitbound.cli._inspect import show
from waitbound.cli._mcp import mcp_command
from waitbound.cli._profiles import profiles
from waitbound.cli._schedules import schedules
from waitbound.cli._serve import serve_command
from waitbound.cli._sessions import sessions
from waitbound.cli._sim import sim
from waitbound.cli._telemetry import configure_sdk, otlp_wanted
from waitbound.cli._waiting import cancel_command, run, submit, wait
from waitbound.cli._watch import watch
from waitbound.cli._worker import worker

__all__ = ["cli"]


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    invoke_without_command=True,
    help="Wait on long-running operations at external APIs: bounded, durable, auditable.\n\n"
    + EXIT_CODES_HELP,
)
@click.version_option(VERSION, prog_name="waitbound")
@click.pass_context
def cli(ctx: click.Context) -> None:
    # OTEL_EXPORTER_OTLP_ENDPOINT: export this command's traces and metrics (serve
    # configures its own, with its Prometheus reader when --metrics).
    if ctx.invoked_subcommand not in (None, "serve") and otlp_wanted():
        configure_sdk()
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


for _command in (
    wait,
    wait_all_command,
    wait_any_command,
    submit,
    run,
    cancel_command,
    worker,
    show,
    audit,
    escalations_command,
    decide_command,
    deliveries,
    profiles,
    sim,
    db,
    mcp_command,
    serve_command,
    sessions,
    schedules,
    watch,
):
    cli.add_command(_command)
