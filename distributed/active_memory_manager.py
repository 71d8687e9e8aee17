"""``from distributed.active_memory_manager import ReduceReplicas`` and the rest, as in dask.distributed.

The active memory manager lives in :mod:`distributed.scheduler.amm`.
"""

from __future__ import annotations

from distributed.scheduler.amm import (
    ActiveMemoryManagerExtension,
    ActiveMemoryManagerPolicy,
    ReduceReplicas,
    RetireWorker,
    Suggestion,
)

__all__ = [
    "ActiveMemoryManagerExtension",
    "ActiveMemoryManagerPolicy",
    "ReduceReplicas",
    "RetireWorker",
    "Suggestion",
]
