"""docs/testing.md's example, run as a user's test file: it passes against the four
canonical scenarios, under plain pytest and pytest-xdist, and each classic bug fails with
a message that names it."""

from __future__ import annotations

import re
from pathlib import Path

import httpcore  # noqa: F401  # imported before any in-process run: see below
import pytest

from tests.testing.conftest import PLUGIN_ARGS

pytest_plugins = ["pytester"]
"""``pytester.runpytest`` runs in this process and, after the run, drops every module the
run imported first. httpx imports httpcore at its first transport and keeps httpcore's
exception classes to translate them: had a run here been a worker's first use of httpx,
the httpcore imported again later would raise exceptions httpx no longer recognises
(``httpcore.RemoteProtocolError`` escaping as itself, not ``httpx.RemoteProtocolError``)
in whatever tests that worker ran next. Importing it with this module keeps one httpcore
for the whole process."""

DOC = Path(__file__).parents[2] / "docs" / "testing.md"
_FILE = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)```", re.DOTALL)


def _doc_files() -> dict[str, str]:
    """The files docs/testing.md shows, by name."""
    return dict(_FILE.findall(DOC.read_text(encoding="utf-8")))


def _bugged(old: str, new: str) -> str:
    wrapper = _doc_files()["tool_wrapper.py"]
    assert old in wrapper, f"the docs' wrapper no longer has {old!r}"
    return wrapper.replace(old, new)


ANY_2XX = _bugged(
    '            if body.get("status") in DONE:\n                break\n',
    "            if answer.is_success:  # BUG: any 2xx is success\n"
    '                body = {**body, "status": "succeeded",\n'
    '                        "result_url": status_url.replace("status", "result")}\n'
    "                break\n",
)
NO_DEADLINE = _bugged(
    "            if clock() + wait_s > give_up_at:\n"
    '                return {"outcome": "timed_out", "job_id": job_id}\n',
    "",
)
RESULT_TWICE = _bugged(
    '            final["result"] = http.get(body["result_url"]).json()\n',
    '            http.get(body["result_url"]).raise_for_status()  # BUG: a second fetch\n'
    '            final["result"] = http.get(body["result_url"]).json()\n',
)


def _user_project(pytester: pytest.Pytester, wrapper: str | None = None) -> None:
    files = _doc_files()
    pytester.makepyfile(
        tool_wrapper=wrapper or files["tool_wrapper.py"],
        test_tool_wrapper=files["test_tool_wrapper.py"],
    )


def test_the_docs_show_the_wrapper_and_its_test() -> None:
    """The page holds both files, and the test is about a dozen lines."""
    files = _doc_files()
    assert set(files) == {"tool_wrapper.py", "test_tool_wrapper.py"}
    assert len(files["test_tool_wrapper.py"].strip().splitlines()) <= 20


def test_the_docs_example_passes_against_the_four_scenarios(pytester: pytest.Pytester) -> None:
    """The correct wrapper meets all four canonical scenarios."""
    _user_project(pytester)
    result = pytester.runpytest(*PLUGIN_ARGS)
    result.assert_outcomes(passed=4)


def test_the_docs_example_passes_under_xdist(pytester: pytest.Pytester) -> None:
    """Under pytest-xdist with two workers (own ports, own clocks) it passes too."""
    _user_project(pytester)
    result = pytester.runpytest_subprocess(*PLUGIN_ARGS, "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=4)


def test_any_2xx_is_success_fails_naming_the_bug(pytester: pytest.Pytester) -> None:
    """A wrapper that reads any 2xx as success fails all four, saying so."""
    _user_project(pytester, ANY_2XX)
    result = pytester.runpytest(*PLUGIN_ARGS)
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(["*bug: any 2xx is success*", "*provider log (*requests):*"])


def test_no_deadline_fails_naming_the_bug(pytester: pytest.Pytester) -> None:
    """A wrapper without a deadline fails the timeout scenario fast, in virtual time."""
    _user_project(pytester, NO_DEADLINE)
    result = pytester.runpytest(*PLUGIN_ARGS)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*timeout-returns-job-id*", "*VirtualTimeExceeded: no deadline?*"])


def test_fetching_the_result_twice_fails_naming_the_bug(pytester: pytest.Pytester) -> None:
    """A wrapper that fetches the result twice fails where there is a result."""
    _user_project(pytester, RESULT_TWICE)
    result = pytester.runpytest(*PLUGIN_ARGS)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*bug: fetches the result twice*"])
