"""``waitbound db``: the store's schema (``db upgrade``)."""

from __future__ import annotations

import json

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
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"store", "applied", "version"} as one JSON object.',
)
def upgrade(store: str | None, schema: str | None, as_json: bool) -> None:
    """Bring the store's schema up to this waitbound's version.

    PostgreSQL: applies every pending migration in one transaction (a concurrent
    upgrade waits, then has nothing to do); run it once per release before starting
    workers. A SQLite file is brought up to date whenever it is opened; a missing one
    is not created. Exit codes: 0 done (or nothing to do); 2 no such store, a newer
    schema, or a usage error; 5 the store cannot be reached or refused the change
    (nothing changed).
    """
    result = upgrade_store(store, schema=schema, create=False)
    if as_json:
        document = {
            "store": result.store,
            "applied": list(result.applied),
            "version": result.version,
        }
        click.echo(json.dumps(document, ensure_ascii=False))
    elif result.applied:
        versions = ", ".join(str(v) for v in result.applied)
        plural = "s" if len(result.applied) > 1 else ""
        click.echo(f"store {result.store}: applied version{plural} {versions}")
    else:
        click.echo(f"store {result.store}: already at version {result.version}")
