"""``waitbound db``: the store's schema (``db upgrade``)."""

from __future__ import annotations

import click

from waitbound.stores import upgrade_store

__all__ = ["db"]

_STORE_HELP = (
    "SQLite file or PostgreSQL DSN (postgresql://user@host:5432/dbname); "
    "default $WAITBOUND_STORE or the user state directory."
)


@click.group()
def db() -> None:
    """Manage a store's schema."""


@db.command()
@click.option("--store", help=_STORE_HELP)
@click.option("--schema", help="PostgreSQL schema holding waitbound's tables (default: waitbound).")
def upgrade(store: str | None, schema: str | None) -> None:
    """Bring the store's schema up to this waitbound's version.

    PostgreSQL: applies every pending migration in one transaction (a concurrent
    upgrade waits, then has nothing to do); run it once per release before starting
    workers. A SQLite file is brought up to date whenever it is opened.
    Exit codes: 0 done (or nothing to do); 2 the store cannot be reached, is newer
    than this waitbound, or refused the change (nothing changed).
    """
    result = upgrade_store(store, schema=schema)
    if result.applied:
        versions = ", ".join(str(v) for v in result.applied)
        plural = "s" if len(result.applied) > 1 else ""
        click.echo(f"store {result.store}: applied version{plural} {versions}")
    else:
        click.echo(f"store {result.store}: already at version {result.version}")
