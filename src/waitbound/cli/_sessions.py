"""``waitbound sessions``: list and revoke the inbox's sign-in sessions kept in the store
(as ``GET /sessions`` and ``POST /sessions/…/revoke`` do for an admin token)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

import click

from waitbound._base._clock import SystemClock
from waitbound._base._errors import UsageError
from waitbound.cli._flags import STORE_HELP
from waitbound.cli._render import printable
from waitbound.cli._store_access import opened_store
from waitbound.stores._sessions import SessionRow, sessions_of

__all__ = ["sessions"]


def _line(row: SessionRow, now: datetime) -> str:
    state = "open" if row.is_open(now) else ("revoked" if row.revoked_at else "expired")
    return (
        f"{row.shown_id}  {printable(row.who)}  {row.role}  via {printable(row.via)}  "
        f"since {row.created_at:%Y-%m-%d %H:%M} UTC  seen {row.last_seen_at:%Y-%m-%d %H:%M} "
        f"UTC  until {row.expires_at:%Y-%m-%d %H:%M} UTC  {state}"
    )


def _print(rows: list[SessionRow], as_json: bool, now: datetime, empty: str) -> None:
    if as_json:
        click.echo(json.dumps([row.shown_json() for row in rows]))
    elif not rows:
        click.echo(empty)
    else:
        for row in rows:
            click.echo(_line(row, now))


@click.group(invoke_without_command=True)
@click.option("--store", help=STORE_HELP)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Listing (no subcommand): also the revoked and expired ones.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of sessions.")
@click.pass_context
def sessions(ctx: click.Context, store: str | None, everything: bool, as_json: bool) -> None:
    """List (the default) or revoke the inbox's sign-in sessions kept in the store.

    A revoked session's cookie is refused at its next request. Exit codes: 0 done; 2
    a usage error (no such session, an id too short); 5 the store failed.
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_command, store=store, everything=everything, as_json=as_json)
    elif everything:
        raise UsageError(
            f"--all before '{ctx.invoked_subcommand}' means nothing: "
            f"write it after, 'waitbound sessions {ctx.invoked_subcommand} --all'"
        )


@sessions.command("list")
@click.option("--store", help=STORE_HELP)
@click.option("--all", "everything", is_flag=True, help="Also the revoked and expired ones.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of sessions.")
def list_command(store: str | None = None, everything: bool = False, as_json: bool = False) -> None:
    """The open sessions, newest first: id, who, role, how they signed in, times."""
    now = SystemClock().now()
    with opened_store(store, read_only=True, then="run it again") as opened:
        rows = sessions_of(opened).list_sessions(now=now, ended=everything)
    _print(rows, as_json, now, "no sessions")


@sessions.command("revoke")
@click.argument("session_id", required=False)
@click.option("--all", "everything", is_flag=True, help="Revoke every open session.")
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of the revoked.")
def revoke_command(
    session_id: str | None, everything: bool, store: str | None, as_json: bool
) -> None:
    """Revoke the session SESSION_ID (its 12 characters, as listed), or --all."""
    if (session_id is None) == (not everything):
        raise UsageError("give one session id (as `waitbound sessions` lists it), or --all")
    now = SystemClock().now()
    with opened_store(store, then="run it again") as opened:
        found = sessions_of(opened).revoke_sessions(at=now, shown_id=session_id)
    rows = [replace(row, revoked_at=now) for row in found]
    if session_id is not None and not rows:
        raise UsageError(f"no open session {session_id[:64]!r}; see `waitbound sessions`")
    _print(rows, as_json, now, "no open sessions to revoke")
    if not as_json and rows:
        click.echo(f"revoked {len(rows)} session{'s' if len(rows) != 1 else ''}")
