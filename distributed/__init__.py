"""A pure-Python, fully typed Dask distributed scheduler."""

from __future__ import annotations

from distributed import config  # noqa: F401  (registers config defaults)
