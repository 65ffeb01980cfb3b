"""The pace-far benchmark's measurement, run tiny on the memory store
(benchmarks/pace_far.py), so it cannot rot: a row per distance, each pace within its
bounds. No timing is asserted (``make test`` times nothing)."""

from __future__ import annotations

from benchmarks import pace_far
from waitbound import MemoryStore


def test_the_benchmark_measures_every_distance() -> None:
    """One row per distance, in order, each with a median no slower than its slowest."""
    rows = pace_far.measure(MemoryStore(), calls=3, wave=20)
    assert [name for name, _, _ in rows] == [name for name, _ in pace_far.DISTANCES]
    assert all(0 <= median <= slowest for _, median, slowest in rows)
