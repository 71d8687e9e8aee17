"""Event-loop health: how late a server's loop runs a callback due at a fixed interval.

Every server arms its :class:`LoopHealth` on its loop (:meth:`LoopHealth.arm`):
it ticks every ``distributed.admin.tick.interval`` (20 ms by default), driven
by one timer callback per loop and interval that ticks every server armed on
that loop (a process of 250 workers on one loop spent a tenth of a core on
12,500 timer callbacks a second, idle).  The
time between two ticks is a *tick duration*: the interval itself on an idle
loop, more when something held the loop (a long handler, a large message being
(de)serialised, a thread holding the GIL).  What exceeds the interval is counted
as *blocked time*.  A tick longer than ``distributed.admin.tick.limit`` (3 s) is
logged, as dask.distributed does.  Every ``distributed.admin.tick.cycle`` (1 s)
the mean tick duration over that cycle becomes :attr:`LoopHealth.interval_observed`.

The cost is one timer callback per interval and per loop, and a call per
server, independent of the number of tasks.  The figures feed the ``/metrics`` routes
(``dask_*_tick_count_total``, ``dask_*_tick_duration_maximum_seconds``,
``dask_*_event_loop_blocked_time_seconds_total``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref

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
        "_ticker",
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
        self._ticker: _LoopTicker | None = None

    def arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start ticking on ``loop`` (idempotent); :meth:`disarm` stops it."""
        if self._ticker is not None:
            return
        self.last_tick = self._cycle_start = time.monotonic()
        self._cycle_count = self.count
        self._ticker = _LoopTicker.of(loop, self.interval)
        self._ticker.add(self)

    def disarm(self) -> None:
        """Stop ticking."""
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.remove(self)

    @property
    def armed(self) -> bool:
        """Whether this server's loop ticks it."""
        return self._ticker is not None

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
        current = time.monotonic() - self.last_tick if self._ticker is not None else 0.0
        out = max(self._max_since_taken, current)
        self._max_since_taken = 0.0
        return out


class _LoopTicker:
    """The one timer of a loop for an interval: it ticks every :class:`LoopHealth` armed on that loop.

    The servers of one loop (an in-process cluster, a process of many
    workers) see the same lateness: one timer measures it for all of them.
    """

    __slots__ = ("loop_ref", "interval", "members", "handle")

    #: Per loop, the ticker of each interval in use.
    _of_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, _LoopTicker]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        # Neither the loop nor its timer (which refers to the loop): the registry's entry would keep
        # its own key alive, and a loop whose servers never closed would never be freed.
        self.loop_ref = weakref.ref(loop)
        self.interval = interval
        #: Replaced, never changed in place: a tick may arm or disarm a member while it runs.
        self.members: tuple[LoopHealth, ...] = ()
        self.handle: weakref.ref[asyncio.TimerHandle] | None = None

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop, interval: float) -> _LoopTicker:
        """The ticker of ``loop`` for ``interval`` (made at the first use)."""
        tickers = cls._of_loop.setdefault(loop, {})
        ticker = tickers.get(interval)
        if ticker is None:
            ticker = tickers[interval] = cls(loop, interval)
        return ticker

    def add(self, health: LoopHealth) -> None:
        """Tick ``health`` from the next tick on."""
        self.members = (*self.members, health)
        if self.handle is None or self.handle() is None:
            self._arm()

    def remove(self, health: LoopHealth) -> None:
        """Stop ticking ``health``; the timer stops with the last member."""
        self.members = tuple(m for m in self.members if m is not health)
        if self.members:
            return
        handle = None if self.handle is None else self.handle()
        if handle is not None:
            handle.cancel()
        self.handle = None
        loop = self.loop_ref()
        tickers = None if loop is None else self._of_loop.get(loop)
        if loop is not None and tickers is not None and tickers.get(self.interval) is self:
            del tickers[self.interval]
            if not tickers:
                del self._of_loop[loop]

    def _fire(self) -> None:
        now = time.monotonic()
        for health in self.members:
            health.tick(now)
        self.handle = None
        if self.members:
            self._arm()

    def _arm(self) -> None:
        loop = self.loop_ref()
        if loop is not None:
            self.handle = weakref.ref(loop.call_later(self.interval, self._fire))
