"""The suite's own order (``tests/conftest.py``): every test it moves to the front
exists, so a renamed test cannot silently drop out of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import LONGEST_FIRST

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("prefix", LONGEST_FIRST)
def test_each_longest_first_prefix_names_a_test(prefix: str) -> None:
    path, _, name = prefix.partition("::")
    source = ROOT / path
    assert source.is_file(), f"{path} does not exist"
    tests = re.findall(r"^(?:async )?def (test_\w+)", source.read_text(), re.MULTILINE)
    assert tests, f"{path} holds no test"
    assert not name or any(t.startswith(name) for t in tests), f"no test in {path} is {name}…"
