"""The ``waitbound`` command: one clear line on bad input, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from waitbound._errors import OutcomeError, StoreError, UsageError, WaitboundError
from waitbound.cli._app import Interrupted, cli
from waitbound.cli._db import db
from waitbound.cli._mcp import mcp_command

cli.add_command(db)
cli.add_command(mcp_command)

__all__ = ["cli", "main"]


def _fail(message: str, code: int) -> int:
    click.echo(f"waitbound: error: {message}", err=True)
    return code


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line with *argv*; return the exit code."""
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="waitbound",
            standalone_mode=False,
        )
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        return _fail(exc.format_message().splitlines()[0], 2)
    except Interrupted as exc:
        return _fail(str(exc), 130)
    except (click.Abort, KeyboardInterrupt):
        return _fail("interrupted", 130)
    except (UsageError, StoreError) as exc:
        return _fail(str(exc), 2)
    except OutcomeError as exc:
        return _fail(str(exc), exc.outcome.exit_code)
    except WaitboundError as exc:
        return _fail(str(exc), 2)
    return result if isinstance(result, int) else 0


def main() -> None:
    """Console entry point."""
    sys.exit(run())
