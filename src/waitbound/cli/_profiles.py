"""``profiles``: the built-in profiles (state tables)."""

from __future__ import annotations

import json

import click

from waitbound.profiles import builtin_names, builtin_profile, profile_schema

__all__ = ["profiles"]


def _summary(name: str) -> str:
    description = str(builtin_profile(name).source.get("description", ""))
    return description.split(". ", maxsplit=1)[0]


@click.group(invoke_without_command=True)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print a JSON list of {"name", "description"} objects.',
)
@click.pass_context
def profiles(ctx: click.Context, as_json: bool) -> None:
    """List the built-in profiles; `profiles show NAME` prints one, `profiles schema` the format."""
    if ctx.invoked_subcommand is not None:
        return
    if as_json:
        listing = [
            {"name": name, "description": str(builtin_profile(name).source.get("description", ""))}
            for name in builtin_names()
        ]
        click.echo(json.dumps(listing, ensure_ascii=False))
        return
    for name in builtin_names():
        click.echo(f"{name:<20} {_summary(name)[:76]}")


@profiles.command(name="show")
@click.argument("name")
def profiles_show(name: str) -> int:
    """Print the built-in profile NAME as JSON."""
    click.echo(json.dumps(dict(builtin_profile(name).source), indent=2, ensure_ascii=False))
    return 0


@profiles.command(name="schema")
def profiles_schema() -> int:
    """Print the profile format's JSON Schema (draft 2020-12), e.g. for an editor."""
    click.echo(json.dumps(profile_schema(), indent=2, ensure_ascii=False))
    return 0
