"""Event-loop health: how late a server's loop runs a callback due at a fixed interval.

Every server arms one timer callback (:meth:`LoopHealth.arm`) that fires every
``distributed.admin.tick.interval`` (20 ms by default) and re-arms itself.  The
time between two firings is a *tick duration*: the interval itself on an idle
loop, more when something held the loop (a long handler, a large message being
(de)serialised, a thread holding the GIL).  What exceeds the interval is counted
as *blocked time*.  A tick longer than ``distributed.admin.tick.limit`` (3 s) is
logged, as dask.distributed does.  Every ``distributed.admin.tick.cycle`` (1 s)
the mean tick duration over that cycle becomes :attr:`LoopHealth.interval_observed`.

The cost is one timer callback per interval and per server, independent of the
number of tasks.  The figures feed the ``/metrics`` routes
(``dask_*_tick_count_total``, ``dask_*_tick_duration_maximum_seconds``,
``dask_*_event_loop_blocked_time_seconds_total``).
"""

from __future__ import annotations

import asyncio
import logging
import time

from distributed.config import get_interval

__all__ = ["LoopHealth"]

logger = logging.getLogger("distributed.core")

#: Defaults of ``distributed.admin.tick.interval``, ``.limit`` and ``.cycle``, in seconds.
DEFAULT_TICK_INTERVAL = 0.02
DEFAULT_TICK_LIMIT = 3.0
DEFAULT_TICK_CYCLE = 1.0


class LoopHealth:
    """Tick statistics of one server's event loop.

    Parameters
    ----------
    owner
        The name used in the log line about a blocked loop (``"Scheduler"``, ``"Worker"``).
    interval
        Seconds between ticks (default ``distributed.admin.tick.interval``).
    limit
        A tick longer than this many seconds is logged (default ``distributed.admin.tick.limit``).
    cycle
        Seconds over which :attr:`interval_observed` averages (default ``distributed.admin.tick.cycle``).
    """

    __slots__ = (
        "owner",
        "interval",
        "limit",
        "count",
        "last_tick",
        "last_duration",
        "blocked_total",
        "cycle",
        "interval_observed",
        "_cycle_start",
        "_cycle_count",
        "_max_since_taken",
        "_handle",
    )

    def __init__(
        self, owner: str, interval: float | None = None, limit: float | None = None, cycle: float | None = None
    ) -> None:
        self.owner = owner
        if interval is None:
            interval = get_interval("distributed.admin.tick.interval", DEFAULT_TICK_INTERVAL)
        if limit is None:
            limit = get_interval("distributed.admin.tick.limit", DEFAULT_TICK_LIMIT)
        if cycle is None:
            cycle = get_interval("distributed.admin.tick.cycle", DEFAULT_TICK_CYCLE)
        if not interval > 0:
            raise ValueError(f"distributed.admin.tick.interval must be a positive duration, got {interval!r}")
        if not cycle > 0:
            raise ValueError(f"distributed.admin.tick.cycle must be a positive duration, got {cycle!r}")
        self.interval: float = interval
        self.limit: float = limit
        self.cycle: float = cycle
        #: Mean tick duration over the last full cycle (``interval`` until one has passed).
        self.interval_observed: float = interval
        #: Ticks observed since the loop was armed.
        self.count = 0
        #: ``time.monotonic()`` of the last tick (or of arming).
        self.last_tick = time.monotonic()
        #: Seconds between the last two ticks.
        self.last_duration = 0.0
        #: Seconds by which ticks came later than ``interval``, summed.
        self.blocked_total = 0.0
        self._cycle_start = self.last_tick
        self._cycle_count = 0
        self._max_since_taken = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start ticking on ``loop`` (idempotent); :meth:`disarm` stops it."""
        if self._handle is not None:
            return
        self.last_tick = self._cycle_start = time.monotonic()
        self._cycle_count = self.count
        self._handle = loop.call_later(self.interval, self._fire, loop)

    def disarm(self) -> None:
        """Stop ticking."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    @property
    def armed(self) -> bool:
        """Whether the tick callback is scheduled."""
        return self._handle is not None

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self.tick(time.monotonic())
        if self._handle is not None:
            self._handle = loop.call_later(self.interval, self._fire, loop)

    def tick(self, now: float) -> float:
        """Record a tick at ``now`` (monotonic seconds); return its duration."""
        duration = now - self.last_tick
        self.last_tick = now
        self.count += 1
        self.last_duration = duration
        if duration > self._max_since_taken:
            self._max_since_taken = duration
        if duration > self.interval:
            self.blocked_total += duration - self.interval
        if now - self._cycle_start >= self.cycle:
            self.interval_observed = (now - self._cycle_start) / (self.count - self._cycle_count)
            self._cycle_start = now
            self._cycle_count = self.count
        if duration > self.limit:
            logger.info(
                "Event loop was unresponsive in %s for %.2fs. Long-running functions holding the GIL, "
                "or large amounts of data being moved, block it; timeouts and instability may follow.",
                self.owner,
                duration,
            )
        return duration

    def take_maximum(self) -> float:
        """The longest tick since the previous call, counting the tick under way; resets it.

        Counting the time since the last tick makes a loop blocked right now show
        up, as dask.distributed's ``tick_duration_maximum`` does.
        """
        current = time.monotonic() - self.last_tick if self._handle is not None else 0.0
        out = max(self._max_since_taken, current)
        self._max_since_taken = 0.0
        return out
