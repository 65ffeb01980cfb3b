"""Hypothesis profiles: ``fast`` (the default: ``make check``, the inner loop), ``ci``
(``make test``, the gate CI runs) and ``deep`` (``HYPOTHESIS_PROFILE=deep``: ``make
test-deep``, a longer hunt).

``tests/conftest.py`` registers and loads them. A property test that names its own
example count wraps it in :func:`examples`, so that the profile scales it: ``ci`` runs
the count as written (what the gate has always proved), ``fast`` a third of it (at least
20), ``deep`` four times it. The same properties are checked in every profile.
"""

from __future__ import annotations

import os

from hypothesis import settings

__all__ = ["DEEP", "PROFILE", "examples", "register"]

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "fast")
DEEP = PROFILE == "deep"


def examples(written: int) -> int:
    """The example count for a test written with *written* examples, in this profile."""
    if DEEP:
        return written * 4
    return written if PROFILE == "ci" else max(20, written // 3)


def register() -> None:
    """Register ``fast``, ``ci`` and ``deep``; load the one ``$HYPOTHESIS_PROFILE`` names."""
    settings.register_profile("fast", deadline=None, print_blob=True)
    settings.register_profile("ci", deadline=None, print_blob=True)
    settings.register_profile("deep", max_examples=1000, deadline=None, print_blob=True)
    settings.load_profile(PROFILE)
