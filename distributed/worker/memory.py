"""A worker's memory limit: spill results to disk, pause running new tasks.

Every ``distributed.worker.memory.monitor-interval`` the worker compares its
process memory (RSS) with its ``memory_limit``:

* above ``distributed.worker.memory.spill`` it moves least-recently-used
  results to disk (its data is a :class:`~distributed.spill.SpillBuffer`) until
  the process is back under ``target`` (or nothing is left to spill);
  ``target`` itself is applied by the buffer, on the bytes of results it holds;
* above ``distributed.worker.memory.pause`` it stops starting tasks (those
  running finish; their successors wait) and resumes once back below.

``False`` for a fraction turns that step off, as in dask.distributed.
Terminating (``terminate``) is the nanny's job.  After a failed spill write
(a full disk) the buffer spills no more: pausing is then what keeps the worker
under the nanny's terminate line.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Literal

import dask.config
import psutil
from dask.utils import parse_bytes

from distributed import heap
from distributed.core import Status
from distributed.protocol.messages import Key
from distributed.spill import SpillBuffer
from distributed.system import MEMORY_LIMIT

if TYPE_CHECKING:
    from distributed.worker import Worker

__all__ = ["WorkerMemoryMonitor", "parse_max_spill", "parse_memory_limit", "spill_target"]

logger = logging.getLogger(__name__)

#: Results stored, as a fraction of the memory limit, after which process memory is measured again.
_GROWTH_CHECK_FRACTION = 0.02


def _fraction(given: float | Literal[False] | None, config_key: str, default: float) -> float | None:
    """A threshold from the keyword, else from config; None when turned off (False)."""
    value = dask.config.get(config_key, default) if given is None else given
    if value is None or value is False:
        return None
    fraction = float(value)
    if not fraction >= 0:
        name = config_key.rsplit(".", 1)[-1]
        raise ValueError(f"memory_{name}_fraction={value!r} (or {config_key}) must be a fraction >= 0, or False")
    return fraction


def parse_memory_limit(memory_limit: str | float | None, nthreads: int, total_cores: int | None = None) -> int:
    """A memory limit in bytes from ``"auto"``, ``"4GiB"``, a fraction or a number.

    ``None`` or 0 means no limit (returns 0); a limit above the machine's memory
    is capped to it.  A negative or unparseable value raises ``ValueError``.
    The machine's memory is what this process may use (:data:`distributed.system.MEMORY_LIMIT`).
    """
    total = MEMORY_LIMIT
    given = memory_limit
    if memory_limit is None or memory_limit == 0:
        return 0
    if memory_limit == "auto":
        cores = total_cores or os.cpu_count() or 1
        return int(total * min(1, nthreads / cores))
    if isinstance(memory_limit, str):
        try:
            memory_limit = parse_bytes(memory_limit)
        except ValueError as e:
            raise ValueError(f"memory_limit={given!r} is not 'auto', a number of bytes or a size like '4GiB'") from e
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, (int, float)):
        raise TypeError(f"memory_limit={given!r} is not 'auto', a number of bytes or a size like '4GiB'")
    if memory_limit < 0:
        raise ValueError(f"memory_limit={given!r} is negative; give bytes, a size like '4GiB', 'auto', or 0 for none")
    if isinstance(memory_limit, float) and memory_limit <= 1:
        return int(total * memory_limit)
    return min(int(memory_limit), total)


def parse_max_spill(value: float | str | Literal[False] | None) -> int | None:
    """Bytes the spill files may take (None: no limit), from ``max_spill`` or the config."""
    if value is None:
        value = dask.config.get("distributed.worker.memory.max-spill")
    if value is None or value is False:
        return None
    limit = parse_bytes(value) if isinstance(value, str) else int(value)
    if limit < 0:
        raise ValueError(f"max_spill must be a number of bytes >= 0, not {value!r}")
    return limit


def spill_target(memory_limit: int, monitor: WorkerMemoryMonitor) -> float | None:
    """Bytes of results kept in memory before spilling (inf: only by process memory), None: no spilling."""
    if not memory_limit:
        return None
    if monitor.target_fraction is not None:
        return monitor.target_fraction * memory_limit
    if monitor.spill_fraction is not None:
        return float("inf")
    return None


class WorkerMemoryMonitor:
    """Spills, pauses and resumes a worker by its memory.

    Parameters
    ----------
    worker
        The worker watched; its ``memory_limit`` (bytes, 0 for none) is read at every check.
    target, spill, pause
        The thresholds as fractions of ``memory_limit``; ``None`` reads
        ``distributed.worker.memory.<name>``; ``False`` turns that step off.
    """

    def __init__(
        self,
        worker: Worker,
        target: float | Literal[False] | None = None,
        spill: float | Literal[False] | None = None,
        pause: float | Literal[False] | None = None,
    ) -> None:
        self.worker = worker
        self.pause_fraction = _fraction(pause, "distributed.worker.memory.pause", 0.8)
        self.spill_fraction = _fraction(spill, "distributed.worker.memory.spill", 0.7)
        self.target_fraction = _fraction(target, "distributed.worker.memory.target", 0.6)
        # Spilling by process memory stops below target (or below spill, when target is off).
        self.spill_to_fraction = self.target_fraction if self.target_fraction is not None else self.spill_fraction
        self._spill_logged = False
        self._process = psutil.Process()
        #: Bytes the spill files may take in all (None: no limit); set by the worker as it parses ``max_spill``.
        self.max_spill_bytes: int | None = None

    # -- dask's ``Worker.memory_manager`` names, read by deployment code -------------------------
    @property
    def data(self) -> MutableMapping[Key, Any]:
        """The worker's results (its spill buffer, or the mapping given as ``data=``)."""
        return self.worker.data

    @property
    def memory_limit(self) -> int | None:
        """The worker's memory limit in bytes; None without one."""
        return self.worker.memory_limit or None

    @property
    def memory_target_fraction(self) -> float | Literal[False]:
        """Managed memory, as a fraction of the limit, above which results spill; False when off."""
        return False if self.target_fraction is None else self.target_fraction

    @property
    def memory_spill_fraction(self) -> float | Literal[False]:
        """Process memory, as a fraction of the limit, above which results spill; False when off."""
        return False if self.spill_fraction is None else self.spill_fraction

    @property
    def memory_pause_fraction(self) -> float | Literal[False]:
        """Process memory, as a fraction of the limit, above which the worker pauses; False when off."""
        return False if self.pause_fraction is None else self.pause_fraction

    @property
    def max_spill(self) -> int | Literal[False]:
        """Bytes the spill files may take in all; False for no limit."""
        return False if self.max_spill_bytes is None else self.max_spill_bytes

    @property
    def memory_monitor_interval(self) -> float:
        """Seconds between two memory checks."""
        return self.worker.memory_monitor_interval

    def watch(self, data: SpillBuffer) -> None:
        """Check process memory as soon as ``data`` received a fiftieth of the memory limit in results.

        Between two periodic checks a worker can store results of many tens of
        MB (a thread makes 50 MB in a few milliseconds), which took a 300 MB
        worker past the nanny's terminate line before its next check spilled.
        Measuring process memory costs a system call: once per 2 % of the
        limit stored keeps that off the per-task path of small results.
        """
        step = self.large_result_bytes()
        if step is not None and (self.spill_fraction is not None or self.pause_fraction is not None):
            data.watch_growth(step, self.spill_or_pause_if_over)

    def large_result_bytes(self) -> int | None:
        """Bytes from which a result is large enough that process memory should be measured once it is stored.

        None without a memory limit.
        """
        limit = self.worker.memory_limit
        return max(int(limit * _GROWTH_CHECK_FRACTION), 1) if limit else None

    def spill_or_pause_if_over(self) -> None:
        """Spill now if process memory is above the spill threshold; pause if it stays above the pause threshold.

        Resuming stays with :meth:`check`: this runs from within storing a
        result, in the middle of a state-machine transition, where starting
        tasks must not happen (pausing only stops the next ones from starting).
        """
        w = self.worker
        if w.memory_limit and w.state is not None:
            self._spill_or_pause(self.memory())

    def _spill_or_pause(self, rss: int) -> int:
        """Spill above the spill threshold, then pause if still above the pause one; the process memory after."""
        limit = self.worker.memory_limit
        if self.spill_fraction is not None and rss > self.spill_fraction * limit:
            rss = self.spill(rss)
        if self.pause_fraction is not None and rss > self.pause_fraction * limit:
            self._pause(rss)
        return rss

    def memory(self) -> int:
        """The worker process's resident memory, in bytes."""
        return int(self._process.memory_info().rss)

    def check(self) -> None:
        """Pause or resume the worker according to its memory now."""
        w = self.worker
        if not w.memory_limit or w.state is None:
            return
        rss = self._spill_or_pause(self.memory())
        if self.pause_fraction is None:
            return
        frac = rss / w.memory_limit
        if frac <= self.pause_fraction and w.status == Status.paused:
            logger.info("Worker %s is at %.0f%% of its memory limit; resuming", w.address, frac * 100)
            w.status = Status.running
            w.state.paused = False
            w.handle_stimulus()  # start what waited

    def _pause(self, rss: int) -> None:
        """Pause a running worker whose process memory is ``rss``, above the pause threshold."""
        w = self.worker
        if w.status != Status.running or w.state is None or self.pause_fraction is None:
            return
        data = w.data
        disk_error = data.disk_error if isinstance(data, SpillBuffer) else None
        logger.warning(
            "Worker %s is at %.0f%% of its memory limit; pausing (no new tasks start until it drops below %.0f%%)%s",
            w.address,
            rss / w.memory_limit * 100,
            self.pause_fraction * 100,
            f"; spilling to disk is off since it failed ({disk_error})" if disk_error is not None else "",
        )
        w.status = Status.paused
        w.state.paused = True

    def spill(self, rss: int) -> int:
        """Spill least-recently-used results until process memory is below the spill-to level.

        Parameters
        ----------
        rss
            The process memory measured now.

        Returns
        -------
        The process memory after spilling.
        """
        w = self.worker
        data = w.data
        if not isinstance(data, SpillBuffer) or self.spill_to_fraction is None:
            return rss
        goal = self.spill_to_fraction * w.memory_limit
        count = 0
        freed = 0
        # Spilling blocks the event loop: leave the rest to the next check after a while.
        deadline = time.monotonic() + 0.5
        for _ in range(len(data.fast)):
            if rss <= goal or time.monotonic() > deadline:
                break
            weight = data.evict()
            if weight < 0:
                break
            count += weight > 0
            freed += weight
            rss = self.memory()
        if count and rss > goal:
            # Freed values may sit in the allocator's heap, still counted in RSS.
            heap.trim()
            rss = self.memory()
        if count and not self._spill_logged:
            # Once per worker: spilling repeats every interval under memory pressure.
            self._spill_logged = True
            logger.info(
                "Worker %s: process memory above %.0f%% of its limit; spilled %d results (%d bytes) to disk",
                w.address,
                self.spill_fraction * 100 if self.spill_fraction is not None else 0,
                count,
                freed,
            )
        return rss
