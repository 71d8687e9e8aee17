"""A worker's memory limit: pause running new tasks while the process uses too much memory.

Every ``distributed.worker.memory.monitor-interval`` the worker compares its
process memory (RSS) with its ``memory_limit``.  Above the
``distributed.worker.memory.pause`` fraction it stops starting tasks (those
running finish; their successors wait) and resumes once back below.
``False`` for the fraction turns pausing off, as in dask.distributed.

Spilling to disk (``target``/``spill``) and terminating (``terminate``, a
nanny's job) are not implemented here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import dask.config
import psutil

from distributed.core import Status

if TYPE_CHECKING:
    from distributed.worker import Worker

__all__ = ["WorkerMemoryMonitor"]

logger = logging.getLogger(__name__)


class WorkerMemoryMonitor:
    """Pauses and resumes a worker by its process memory.

    Parameters
    ----------
    worker
        The worker watched; its ``memory_limit`` (bytes, 0 for none) is read at every check.
    """

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        pause = dask.config.get("distributed.worker.memory.pause", 0.8)
        self.pause_fraction: float | None = float(pause) if pause not in (None, False) else None
        self._process = psutil.Process()

    def memory(self) -> int:
        """The worker process's resident memory, in bytes."""
        return int(self._process.memory_info().rss)

    def check(self) -> None:
        """Pause or resume the worker according to its memory now."""
        w = self.worker
        if self.pause_fraction is None or not w.memory_limit or w.state is None:
            return
        frac = self.memory() / w.memory_limit
        if frac > self.pause_fraction and w.status == Status.running:
            logger.warning(
                "Worker %s is at %.0f%% of its memory limit; pausing (no new tasks start until it drops below %.0f%%)",
                w.address,
                frac * 100,
                self.pause_fraction * 100,
            )
            w.status = Status.paused
            w.state.paused = True
        elif frac <= self.pause_fraction and w.status == Status.paused:
            logger.info("Worker %s is at %.0f%% of its memory limit; resuming", w.address, frac * 100)
            w.status = Status.running
            w.state.paused = False
            w.handle_stimulus()  # start what waited
