"""Shared by every test: the Hypothesis profiles (``tests/hypothesis_profiles.py``)."""

from __future__ import annotations

from tests.hypothesis_profiles import register

register()
