"""Shared by the kit's tests: the plugin loaded by name in pytester runs."""

from __future__ import annotations

# ``no:waitbound`` first: once ``waitbound[testing]`` is installed its pytest11 entry point
# loads the same module under the name ``waitbound``; blocking that name keeps one copy.
PLUGIN_ARGS = ("-p", "no:waitbound", "-p", "waitbound.testing._plugin")
