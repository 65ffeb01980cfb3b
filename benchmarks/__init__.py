"""Benchmarks of issue 4: store throughput, scale, fleet pressure (``make bench``).

Plain scripts, run from the repository root as modules, e.g.
``python -m benchmarks.store_throughput [--quick]``. Results: ``docs/benchmarks.md``.
"""
