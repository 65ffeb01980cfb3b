"""What the README and docs/ say about the command line is true of the code.

Every ``waitbound …`` command in a ``sh``/``console`` block parses (its flags exist, its
values are valid), every ``waitbound SUBCOMMAND … --flag`` written inline names a flag
that command has, the MCP tools the docs list are the server's, the built-in profiles
they name are the shipped ones, and the keys the README lists for ``--json`` are the
outcome's. Placeholders (``URL``, ``ID``, ``…``) are arguments like any other, so a
command is checked for what it claims, not for the words around it.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import click
import pytest

import waitbound
from waitbound.cli import cli
from waitbound.cli._mcp import MCP_TOOLS
from waitbound.profiles import builtin_names

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs/profiles").glob("*.md")]
)
_BLOCK = re.compile(r"```(sh|console)\n(.*?)```", re.S)
_SPAN = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")
_SHELL_ENDS = frozenset({"|", "||", "&&", ">", ">>", ";", "2>", "<"})


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _block_commands(text: str) -> Iterator[str]:
    """The ``waitbound …`` command lines of *text*'s sh and console blocks (continued
    lines joined; in a console block only the ``$ `` lines, the rest is output)."""
    for kind, body in _BLOCK.findall(text):
        joined = re.sub(r"\\\n\s*", " ", body)
        for raw in joined.splitlines():
            line = raw.strip()
            if kind == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if line.startswith("waitbound "):
                yield line


def _words(command: str) -> list[str]:
    """*command* as argv, without its shell comment, pipes and redirections."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    for word in lexer:
        if word in _SHELL_ENDS:
            break
        words.append(word)
    return words[1:]  # without "waitbound"


def _resolve(words: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The command *words* name (descending through groups), its path and its argv."""
    command: click.Command = cli
    path: list[str] = []
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        path.append(words[0])
        command = command.commands[words[0]]
        words = words[1:]
    return command, path, words


def _flags(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


def _all_commands(
    command: click.Command = cli, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _all_commands(sub, (*path, name))


def _documented_commands() -> list[tuple[str, str]]:
    return [(_relative(doc), line) for doc in DOCS for line in _block_commands(doc.read_text())]


def _inline_spans() -> list[tuple[str, str]]:
    spans = []
    for doc in DOCS:
        text = _BLOCK.sub("", doc.read_text())
        for found in _SPAN.findall(text):
            span = " ".join(found.split())
            if span.startswith("waitbound ") and " " in span:
                spans.append((_relative(doc), span))
    return spans


def test_the_docs_show_commands_and_spans_to_check() -> None:
    """The extraction finds what it checks (a regex that matched nothing would pass)."""
    assert len(_documented_commands()) >= 15
    assert len(_inline_spans()) >= 80


def _parse_error(line: str) -> str | None:
    """Why click refuses the documented command *line*, or ``None``."""
    command, path, argv = _resolve(_words(line))
    try:
        command.make_context(" ".join(["waitbound", *path]), list(argv))
    except click.ClickException as exc:
        return exc.format_message()
    return None


def test_the_block_check_finds_a_bad_value_and_an_unknown_flag() -> None:
    """The check itself: a duration out of order, a missing flag and a bad choice fail;
    shell comments, pipes and redirections are not the command's."""
    assert "30m1h" in str(_parse_error("waitbound wait URL --state-path s --deadline 30m1h"))
    assert "--no-such" in str(_parse_error("waitbound worker --no-such 1"))
    assert "stdio" in str(_parse_error("waitbound mcp --config c.toml --transport carrier"))
    assert _words("waitbound audit checkpoint --json > x.json  # nightly") == [
        "audit",
        "checkpoint",
        "--json",
    ]
    assert _parse_error("waitbound profiles show azure > azure.json") is None


@pytest.mark.parametrize(("doc", "line"), _documented_commands())
def test_every_command_in_a_docs_console_block_parses(
    doc: str, line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each command of a sh/console block names real subcommands and flags, and click
    accepts its values (choices, numbers, durations) as written."""
    command, path, argv = _resolve(_words(line))
    assert path, f"{doc}: {line!r} names no subcommand"
    monkeypatch.chdir(tmp_path)
    for param in command.params:  # a file the command reads exists here, empty
        if isinstance(param, click.Option) and isinstance(param.type, click.File):
            for index, word in enumerate(argv[:-1]):
                if word in param.opts and argv[index + 1] != "-":
                    (tmp_path / argv[index + 1]).write_text("{}")
    try:
        command.make_context(" ".join(["waitbound", *path]), list(argv))
    except click.ClickException as exc:
        pytest.fail(f"{doc}: {line!r}: {exc.format_message()}")


def _unknown_flags(span: str) -> tuple[list[str], list[str]]:
    """The command path *span* names, and the flags in it that command does not have."""
    words = [w.strip("[]()") for w in span.split()[1:]]
    command, path, rest = _resolve(words)
    flags = {
        flag
        for word in rest
        for flag in re.split(r"[/|=]", word)
        if re.fullmatch(r"--[a-z][a-z0-9-]*", flag)
    }
    return path, sorted(flags - _flags(command))


def test_the_inline_check_finds_a_flag_the_command_lacks() -> None:
    """The check itself: a flag of another command, or of none, is found."""
    assert _unknown_flags("waitbound worker --until-idle --deadline 5m") == (
        ["worker"],
        ["--deadline"],
    )
    assert _unknown_flags("waitbound audit verify --all [--json]") == (["audit", "verify"], [])
    assert _unknown_flags("waitbound wait URL --progress/--quiet --detach") == (["wait"], [])


@pytest.mark.parametrize(("doc", "span"), _inline_spans())
def test_every_flag_written_inline_after_a_subcommand_is_that_commands(doc: str, span: str) -> None:
    """`waitbound SUBCOMMAND … --flag` in prose: SUBCOMMAND exists and has --flag."""
    path, unknown = _unknown_flags(span)
    assert not unknown, f"{doc}: `{span}`: waitbound {' '.join(path)} has no {unknown}"


_OTHER_TOOLS_FLAGS = frozenset({"--hypothesis-seed"})
"""Flags the docs name that belong to another tool (pytest's hypothesis plugin, in
docs/testing.md), not to a waitbound command."""


def test_every_flag_the_docs_name_is_some_commands() -> None:
    """No `--flag` in the README or docs/ is a flag no command has (docs/benchmarks.md
    is left out: its flags are the benchmark scripts')."""
    known = {flag for _, command in _all_commands() for flag in _flags(command)}
    known |= _OTHER_TOOLS_FLAGS
    found: dict[str, str] = {}
    for doc in DOCS:
        if doc.name == "benchmarks.md":
            continue
        for span in _SPAN.findall(doc.read_text()):
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", span):
                found.setdefault(flag, _relative(doc))
    unknown = {flag: doc for flag, doc in found.items() if flag not in known}
    assert not unknown
    assert len(found) > 60


def test_every_command_in_the_tree_is_in_docs_cli_md() -> None:
    """docs/cli.md describes every command (a heading or a span names it)."""
    text = (ROOT / "docs/cli.md").read_text()
    missing = [
        " ".join(path)
        for path, command in _all_commands()
        if path
        and not command.hidden
        and f"waitbound {' '.join(path)}" not in text
        and f"`{' '.join(path)} " not in text  # under its group's heading
    ]
    assert not missing


def _tools_in_table(text: str, heading: str) -> set[str]:
    section = text.split(heading, 1)[1]
    section = section.split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)", section, re.M))


def _server_tools() -> set[str]:
    from waitbound.mcp import Jobs, create_server, parse_config

    config = parse_config(
        {
            "providers": {
                "p": {
                    "base_url": "http://127.0.0.1:9",
                    "profile": "aip151",
                    "submit_path": "/jobs",
                    "allowed_paths": ["/jobs"],
                }
            }
        },
        base_dir=ROOT,
        environ={},
    )
    store = waitbound.MemoryStore()
    server = create_server(Jobs(config, store))

    async def listed() -> set[str]:
        return {tool.name for tool in await server.list_tools()}

    try:
        return anyio.run(listed)
    finally:
        store.close()


def test_the_mcp_tools_the_docs_list_are_the_servers() -> None:
    """docs/mcp.md's table, the README's table, their counts in words and
    `waitbound mcp --help` name exactly the tools the MCP server offers."""
    tools = _server_tools()
    assert set(MCP_TOOLS) == tools
    mcp_md = (ROOT / "docs/mcp.md").read_text()
    readme = (ROOT / "README.md").read_text()
    assert _tools_in_table(mcp_md, "## The tools") == tools
    assert _tools_in_table(readme, "## For AI agents") == tools
    words = {6: "six", 7: "seven", 8: "eight", 9: "nine"}
    assert f"gives an agent {words[len(tools)]}\ntools" in mcp_md
    assert f"serves\n{words[len(tools)]} tools" in readme
    shown = " ".join((cli.commands["mcp"].help or "").split())
    assert all(tool in shown for tool in tools)
    assert " ".join(_section(ROOT / "docs/cli.md", "waitbound mcp").split()).count("`") >= 2
    cli_md = " ".join(_section(ROOT / "docs/cli.md", "waitbound mcp").split())
    assert all(f"`{tool}`" in cli_md for tool in tools)


def _section(doc: Path, heading: str) -> str:
    text = doc.read_text()
    start = text.index(f"## `{heading}")
    return text[start : text.find("\n## ", start + 1)]


def test_the_builtin_profiles_the_docs_name_are_the_shipped_ones() -> None:
    """The README's list of built-in profiles, and docs/profiles/ (a page each, each in
    its index), are exactly the shipped profiles."""
    names = set(builtin_names())
    readme = " ".join((ROOT / "README.md").read_text().split())
    listed = readme.split("Built-in profiles (", 1)[1].split("— each documented", 1)[0]
    assert set(re.findall(r"`([a-z0-9-]+)`", listed.split("):", 1)[1])) <= names
    index = (ROOT / "docs/profiles/README.md").read_text()
    pages = {p.stem for p in (ROOT / "docs/profiles").glob("*.md")} - {"README"}
    assert pages == names
    assert all(f"{name}.md" in index for name in names)


def test_the_readme_lists_every_json_key_of_an_outcome_and_no_other() -> None:
    """The README's `--json` key list is the outcome's JSON object, key for key."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    listed = readme.split("With `--json`, stdout is one JSON object: `", 1)[1].split("`", 1)[0]
    keys = {key.strip() for key in listed.split(",")}
    now = datetime(2026, 1, 1, tzinfo=UTC)
    handle = waitbound.start(
        waitbound.Operation(
            status_url="http://127.0.0.1:9/s",
            profile=waitbound.parse_profile({"state": "s", "pending": ["p"], "succeeded": ["d"]}),
        ),
        store=waitbound.MemoryStore(),
        clock=_Fixed(now),
    )
    assert keys == set(handle.status().outcome.as_json())


class _Fixed:
    """A clock that stands still."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return 0.0


def _table_keys(text: str, marker: str) -> set[str]:
    """The first-column keys of the markdown table that follows *marker*."""
    after = text.split(marker, 1)[1].lstrip("\n")
    rows = after.split("\n\n", 1)[0].splitlines()[2:]  # past the header and its rule
    return {match[1] for row in rows if (match := re.match(r"\| `([a-z_]+)`", row))}


def test_the_worker_summary_keys_docs_cli_md_lists_are_the_printed_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`worker --until-idle --json` prints exactly the keys docs/cli.md's table lists."""
    from waitbound.cli import run

    store = tmp_path / "empty.db"
    waitbound.open_store(str(store)).close()
    assert run(["worker", "--until-idle", "--json", "--quiet", "--store", str(store)]) == 0
    printed = json.loads(capsys.readouterr().out)
    text = (ROOT / "docs/cli.md").read_text()
    assert _table_keys(text, "With\n`--json` it is one object:") == set(printed)


def _documented_keys(section: str) -> set[str]:
    """The top-level keys of the first ``--json` prints `{…}`` object in *section*."""
    text = " ".join(section.split())
    shape = text.split("`--json` prints `{", 1)[1]
    depth, top = 0, []
    for char in shape:
        if char in "[{":
            depth += 1
        elif char in "]}":
            if depth == 0:
                break
            depth -= 1
        top.append(char if depth == 0 else " ")
    return set(re.findall(r'"([a-z_]+)"', "".join(top)))


@pytest.mark.parametrize(
    ("heading", "argv"),
    [
        ("waitbound show", ["show", "op-doc", "--json"]),
        ("waitbound escalations", ["escalations", "--json"]),
        ("waitbound deliveries", ["deliveries", "--json"]),
        ("waitbound db upgrade", ["db", "upgrade", "--json"]),
    ],
)
def test_the_json_keys_docs_cli_md_gives_are_the_printed_ones(
    heading: str, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show`, `escalations`, `deliveries` and `db upgrade` with --json print exactly the
    top-level keys their section of docs/cli.md lists."""
    from waitbound.cli import run

    store = str(tmp_path / "s.db")
    opened = waitbound.open_store(store)
    waitbound.start(
        waitbound.Operation(
            status_url="http://127.0.0.1:9/s",
            profile=waitbound.parse_profile({"state": "s", "pending": ["p"], "succeeded": ["d"]}),
        ),
        operation_id="op-doc",
        store=opened,
    )
    opened.close()
    assert run([*argv, "--store", store]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert _documented_keys(_section(ROOT / "docs/cli.md", heading)) == set(printed)


def test_the_all_extra_installs_every_extra_the_readme_says() -> None:
    """`[all]` is every optional extra but the development ones, as the README lists."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (spec,) = extras["all"]
    included = set(re.fullmatch(r"waitbound\[([a-z,]+)\]", spec)[1].split(","))  # type: ignore[index]
    assert included == set(extras) - {"all", "test", "bench"}
    readme = " ".join((ROOT / "README.md").read_text().split())
    listed = readme.split("`pip install 'waitbound[all]'` installs every optional extra (", 1)[1]
    assert set(re.findall(r"`([a-z]+)`", listed.split(";", 1)[0])) == included


def test_every_flag_of_every_command_is_in_docs_cli_md() -> None:
    """docs/cli.md mentions every flag of every command ("every command and flag")."""
    text = (ROOT / "docs/cli.md").read_text()
    missing = [
        f"waitbound {' '.join(path)} {flag}"
        for path, command in _all_commands()
        if not isinstance(command, click.Group)
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden
        for flag in (*param.opts, *param.secondary_opts)
        if flag.startswith("--") and not re.search(re.escape(flag) + r"(?![a-z0-9-])", text)
    ]
    assert missing == []


def test_a_flag_table_under_a_commands_heading_lists_that_commands_flags() -> None:
    """A `| --flag |` row in docs/cli.md's section of a command, or in docs/serve.md,
    is a flag of that command."""
    sections = [
        (match[1], section)
        for section in re.split(r"\n(?=## )", (ROOT / "docs/cli.md").read_text())
        if (match := re.match(r"## `waitbound ([^`]*)`", section))
    ]
    sections.append(("serve", (ROOT / "docs/serve.md").read_text()))
    checked = 0
    for heading, section in sections:
        command, path, _ = _resolve(heading.split())
        rows = set(re.findall(r"^\| `(--[a-z][a-z0-9-]*)", section, re.M))
        checked += len(rows)
        assert rows <= _flags(command), (path, sorted(rows - _flags(command)))
    assert checked > 30
