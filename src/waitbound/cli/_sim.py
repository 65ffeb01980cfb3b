"""``sim``: the provider simulator on loopback."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from waitbound._base._errors import UsageError
from waitbound.cli._params import WholeRange
from waitbound.cli._store_access import stop_on_sigterm

__all__ = ["sim"]


@click.command()
@click.argument("scenario_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--port",
    type=WholeRange(0, 65535),
    default=0,
    show_default=True,
    help="Port on 127.0.0.1 (0 picks a free one).",
)
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append every answered request to this file as JSON lines (credentials redacted).",
)
def sim(scenario_file: Path, port: int, log_path: Path | None) -> int:
    """Serve a scripted provider (a scenario file) on 127.0.0.1 until stopped."""
    from waitbound.sim import Simulator, load_scenario

    scenario = load_scenario(scenario_file)
    simulator = Simulator(scenario, port=port, log_path=log_path)
    stop_on_sigterm()
    try:
        simulator.start()
    except OSError as exc:
        raise UsageError(f"cannot serve on 127.0.0.1:{port} ({exc.strerror})") from None
    click.echo(f"serving scenario {scenario.id} on {simulator.base_url}", err=False)
    sys.stdout.flush()
    try:
        simulator.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        simulator.stop()
    return 0
