"""The ``waitbound`` command: one clear line on bad input, never a traceback.

Exit codes: 0 succeeded; 1 completed_with_errors, failed, canceled, expired; 2 a usage
or configuration error; 3 timed_out, escalated; 4 still waiting (``--detach``,
``cancel --no-wait``); 5 the store failed (disk full, read-only, unreachable); 6 an
audit chain is broken (``audit verify``, ``show``, ``audit story``); 130 interrupted.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence

import click

from waitbound._base._clock import Clock
from waitbound._base._errors import (
    SchemaVersionError,
    StoreError,
    UsageError,
    WaitboundError,
)
from waitbound._model._outcome import OutcomeError
from waitbound.cli._app import cli
from waitbound.cli._exits import EXIT_INTERRUPTED, EXIT_STORE, EXIT_USAGE, Interrupted, StoreFailed
from waitbound.cli._time import using

__all__ = ["cli", "main"]


def _fail(message: str, code: int) -> int:
    click.echo(f"waitbound: error: {message}", err=True)
    return code


def run(
    argv: Sequence[str] | None = None,
    *,
    clock: Clock | None = None,
    sleep: Callable[[float], None] | None = None,
    rng: random.Random | None = None,
) -> int:
    """Run the command line with *argv*; return the exit code.

    *clock*, *sleep* (seconds) and *rng* (the backoff's jitter) replace the system's for
    the commands that wait (``wait``, ``run``, ``submit``, ``cancel``, ``wait-all``,
    ``wait-any``): tests run them in-process on virtual time with
    :class:`waitbound.testing.FakeClock` and a seeded ``random.Random``. ``None``: the
    system's.
    """
    try:
        with using(clock, sleep, rng):
            result = cli.main(
                args=list(argv) if argv is not None else None,
                prog_name="waitbound",
                standalone_mode=False,
            )
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        return _fail(exc.format_message().splitlines()[0], EXIT_USAGE)
    except Interrupted as exc:
        return _fail(str(exc), EXIT_INTERRUPTED)
    except (click.Abort, KeyboardInterrupt):
        return _fail("interrupted", EXIT_INTERRUPTED)
    except (UsageError, SchemaVersionError) as exc:
        return _fail(str(exc), EXIT_USAGE)
    except StoreFailed as exc:
        return _fail(str(exc), EXIT_STORE)
    except StoreError as exc:
        return _fail(f"{exc}; fix the store, then run the command again", EXIT_STORE)
    except OutcomeError as exc:
        return _fail(str(exc), exc.outcome.exit_code)
    except WaitboundError as exc:
        return _fail(str(exc), EXIT_USAGE)
    return result if isinstance(result, int) else 0


def main() -> None:
    """Console entry point."""
    sys.exit(run())
