"""What a user reads and types at the command line: every flag explained, numbers and
durations read by one strict parser, and the memory store refused where it means
nothing. Run in process (the refusals come before any store or socket is opened)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from tests.cli.helpers import INLINE, closed_port
from waitbound._base._numbers import DURATION_SYNTAX
from waitbound.cli import cli, run
from waitbound.cli._params import NumberRange, WholeRange, duration, positive_duration

DURATION_CALLBACKS = (duration, positive_duration)


def _commands(
    command: click.Command = cli, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(("waitbound", *path)), command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


def _options() -> Iterator[tuple[str, click.Command, click.Option]]:
    for name, command in _commands():
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                yield name, command, param


def _refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run *argv*; it must exit 2 with one error line and nothing on stdout."""
    code = run(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("waitbound: error: ")
    return lines[0]


@pytest.fixture(autouse=True)
def _store_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's default store is a file in tmp_path, never the user's."""
    monkeypatch.setenv("WAITBOUND_STORE", str(tmp_path / "default.db"))
    monkeypatch.delenv("WAITBOUND_NOTIFY_SECRET", raising=False)


def test_the_walk_sees_every_command_and_their_flags() -> None:
    """The tree walk reaches nested commands (a walk that saw nothing would pass)."""
    names = {name for name, _ in _commands()}
    assert {"waitbound wait", "waitbound audit verify", "waitbound deliveries replay"} <= names
    assert sum(1 for _ in _options()) > 150


def test_every_option_of_every_command_has_help_text() -> None:
    """No flag of any command is listed in --help without saying what it does."""
    missing = [
        f"{name} {'/'.join(option.opts)}" for name, _, option in _options() if not option.help
    ]
    assert missing == []


def test_no_flags_help_shows_a_range_bound_of_none() -> None:
    """An unbounded number flag's help states no range: never click's ``[x<=None]``."""
    shown = [
        f"{name} {option.opts[0]}: {extra['range']}"
        for name, command, option in _options()
        if "None" in (extra := option.get_help_extra(click.Context(command))).get("range", "")
    ]
    assert shown == []


def test_every_number_flag_is_read_by_the_strict_parser() -> None:
    """A flag that takes a number is a WholeRange or NumberRange (never click's INT or
    FLOAT, which read 1_0 as 10 and take nan and inf)."""
    loose = [
        f"{name} {option.opts[0]}: {option.type!r}"
        for name, _, option in _options()
        if isinstance(option.type, click.types._NumberParamTypeBase)
        and not isinstance(option.type, WholeRange | NumberRange)
    ]
    assert loose == []


@pytest.mark.parametrize("text", ["1_0", "nan", "inf", "1e-320", "\u0661\u0660"])
def test_every_number_and_duration_flag_refuses_what_int_and_float_would_read(text: str) -> None:
    """Each number flag and each duration flag refuses underscores, nan, inf, subnormals
    and non-ASCII digits with one line."""
    checked = 0
    for name, command, option in _options():
        ctx = click.Context(command, info_name=name)
        if isinstance(option.type, WholeRange | NumberRange):
            convert = option.type.convert
            with pytest.raises(click.BadParameter) as caught:
                convert(text, option, ctx)
        elif option.callback in DURATION_CALLBACKS:
            with pytest.raises(click.BadParameter) as caught:
                option.callback(ctx, option, text)
        else:
            continue
        checked += 1
        assert "\n" not in caught.value.format_message(), (name, option.opts)
    assert checked > 40


def test_every_command_that_takes_a_duration_states_the_syntax_in_its_help() -> None:
    """--help of wait, submit, run, worker, serve … says how durations are written."""
    syntax = " ".join(DURATION_SYNTAX.split())
    lacking = []
    for name, command in _commands():
        if any(p.callback in DURATION_CALLBACKS for p in command.params):
            shown = " ".join(command.get_help(click.Context(command, info_name=name)).split())
            if syntax not in shown:
                lacking.append(name)
    assert lacking == []
    assert {
        name for name, c in _commands() if any(p.callback in DURATION_CALLBACKS for p in c.params)
    } >= {
        "waitbound wait",
        "waitbound run",
        "waitbound worker",
        "waitbound serve",
    }


def test_mcp_help_lists_every_tool() -> None:
    """`waitbound mcp --help` names all seven tools, request_extension included."""
    command = cli.commands["mcp"]
    shown = " ".join(command.get_help(click.Context(command, info_name="waitbound mcp")).split())
    for tool in ("start_job", "await_job", "check_job", "list_jobs", "get_result"):
        assert tool in shown
    assert "cancel_job" in shown
    assert "request_extension" in shown


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("wait", "{url}", *INLINE, "--max-requests", "1_0"), "without underscores"),
        (("wait", "{url}", *INLINE, "--deadline", "1_0m"), "without underscores"),
        (("wait", "{url}", *INLINE, "--deadline", "30m1h"), "largest first"),
        (("wait", "{url}", *INLINE, "--backoff-growth", "nan"), "not a number"),
        (("decide", "op-1", "extend", "--why", "w", "--minutes", "1_0"), "without underscores"),
        (("decide", "op-1", "extend", "--why", "w", "--minutes", "1e-320"), "too close to zero"),
        (("decide", "op-1", "extend", "--why", "w", "--checks", "1_0"), "without underscores"),
        (("worker", "--lease", "1_0s"), "without underscores"),
        (("worker", "--per-origin-rate", "inf"), "not a number"),
        (("deliveries", "--limit", "1_0"), "without underscores"),
        (("mcp", "--config", "c.toml", "--port", "8_765"), "without underscores"),
    ],
)
def test_underscored_and_meaningless_numbers_are_refused_on_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...], says: str
) -> None:
    """`--max-requests 1_0`, `--minutes 1e-320`, `--lease 1_0s`: one line naming the flag,
    exit 2, no store created."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    line = _refusal(capsys, *(url if word == "{url}" else word for word in argv))
    assert says in line
    assert "Invalid value for '--" in line
    assert not (tmp_path / "default.db").exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("wait", "{url}", *INLINE, "--detach"), "no worker could ever pick"),
        (("run", "POST", "{url}", *INLINE, "--detach"), "no worker could ever pick"),
        (("submit", "POST", "{url}", *INLINE), "nothing could wait for it"),
        (("wait", "--operation-id", "op-1"), "starts empty"),
        (("cancel", "op-1"), "starts empty"),
        (("show", "op-1"), "starts empty"),
        (("audit", "verify", "--all"), "starts empty"),
        (("escalations",), "starts empty"),
        (("decide", "op-1", "extend", "--why", "w"), "starts empty"),
        (("deliveries",), "starts empty"),
        (("worker", "--until-idle"), "nothing to drive"),
        (("serve", "--port", "0"), "no other command can add"),
    ],
)
@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_memory_store_is_refused_where_it_makes_the_command_meaningless(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: tuple[str, ...],
    says: str,
    how: str,
) -> None:
    """`wait --detach --store memory:` (or WAITBOUND_STORE=memory:) and every command
    that reads or drives stored operations: one line saying why, exit 2, nothing sent."""
    url = f"http://127.0.0.1:{closed_port()}/status"
    words = [url if word == "{url}" else word for word in argv]
    if how == "flag":
        words += ["--store", "memory:"]
    else:
        monkeypatch.setenv("WAITBOUND_STORE", "memory:")
    line = _refusal(capsys, *words)
    assert "memory store" in line
    assert says in line


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_zero_lease_is_refused_naming_the_flag(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--lease 0` is one line naming --lease (not the internal field lease_s)."""
    line = _refusal(capsys, command, "--lease", "0")
    assert "'--lease'" in line
    assert "lease_s" not in line
