"""Benchmark suite for ``distributed``.

Run ``python -m benchmarks run --quick`` from the repository root; see
``benchmarks/README.md``.  Everything outside ``benchmarks/micro`` uses only
the public API of ``distributed`` and ``dask``, so the same suite runs
unchanged against any ``distributed`` that is importable.
"""

from __future__ import annotations

SCHEMA_VERSION = 1
