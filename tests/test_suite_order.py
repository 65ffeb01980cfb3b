"""How the suite is run (``tests/conftest.py``, the Makefile): every test moved to the
front of the run or grouped on one worker exists, so a renamed test cannot silently
drop out of the order or its group; and the end-to-end tests live where the
end-to-end tier collects them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import GROUPS, LONGEST_FIRST

ROOT = Path(__file__).resolve().parents[1]
E2E_FOLDERS = ("tests/e2e", "tests/browser")
"""The folders ``make test``'s end-to-end tier collects (``pytest … -m e2e tests/e2e
tests/browser``: collecting only them spares each worker the other 400 modules)."""


@pytest.mark.parametrize("prefix", [*LONGEST_FIRST, *GROUPS])
def test_each_longest_first_or_group_prefix_names_a_test(prefix: str) -> None:
    path, _, name = prefix.partition("::")
    source = ROOT / path
    assert source.is_file(), f"{path} does not exist"
    tests = re.findall(r"^(?:async )?def (test_\w+)", source.read_text(), re.MULTILINE)
    assert tests, f"{path} holds no test"
    assert not name or any(t.startswith(name) for t in tests), f"no test in {path} is {name}…"


def test_every_end_to_end_test_is_in_a_folder_the_e2e_tier_collects() -> None:
    """A test marked ``e2e`` elsewhere would run in neither tier."""
    elsewhere = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if "node_modules" not in path.parts
        and not str(path.relative_to(ROOT)).startswith(E2E_FOLDERS)
        and re.search(r"\bmark\.e2e\b", path.read_text(encoding="utf-8"))
    ]
    assert elsewhere == [], f"marked e2e outside {E2E_FOLDERS}: {elsewhere}"
    makefile = (ROOT / "Makefile").read_text()
    assert f"-m e2e {' '.join(E2E_FOLDERS)}" in makefile
