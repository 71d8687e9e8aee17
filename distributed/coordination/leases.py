"""Leases of Locks and Semaphores: held while the holder lives.

A lease ends when its holder releases it, or else when the holder stops
showing that it lives:

* its client leaves the scheduler (the process died, or the client closed);
* it has not been refreshed for ``distributed.scheduler.locks.lease-timeout``
  (``inf``: never for that reason), checked every
  ``distributed.scheduler.locks.lease-validation-interval``.

The scheduler side is :class:`LeaseClock`; the holder side is
:class:`LeaseKeeper`, which refreshes the leases one primitive object holds
five times per lease timeout.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any

import dask
from dask.utils import parse_timedelta

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["LeaseClock", "LeaseKeeper", "lease_timeout", "validation_interval"]

logger = logging.getLogger(__name__)


def _seconds(value: Any) -> float:
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, (int, float)) and math.isinf(value):
        return math.inf
    seconds = parse_timedelta(value, default="s")
    assert seconds is not None
    return float(seconds)


def lease_timeout() -> float:
    """``distributed.scheduler.locks.lease-timeout`` in seconds (``inf`` allowed)."""
    return _seconds(dask.config.get("distributed.scheduler.locks.lease-timeout"))


def validation_interval() -> float:
    """``distributed.scheduler.locks.lease-validation-interval`` in seconds."""
    return _seconds(dask.config.get("distributed.scheduler.locks.lease-validation-interval"))


class LeaseClock:
    """The scheduler's record of which leases live, ending those whose holder is gone.

    Parameters
    ----------
    scheduler
        The scheduler whose clients hold the leases.
    expire
        Called with ``(name, lease)`` for each lease that ends because its
        holder is gone; it gives the lease up as a release would.
    refreshed
        False for leases nobody refreshes: they end only when their client leaves.
    """

    def __init__(
        self, scheduler: Scheduler, expire: Callable[[Hashable, str], None], *, refreshed: bool = True
    ) -> None:
        self.scheduler = scheduler
        self.expire = expire
        self.timeout = lease_timeout() if refreshed else math.inf
        self.interval = validation_interval()
        if not self.interval > 0:
            raise ValueError(f"distributed.scheduler.locks.lease-validation-interval must be > 0, got {self.interval}")
        #: lease id -> (primitive name, holder's client id or None, last seen).
        self.leases: dict[str, tuple[Hashable, str | None, float]] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, name: Hashable, lease: str, client: str | None) -> None:
        """Start timing ``lease`` of ``name``, held through ``client``."""
        self.leases[lease] = (name, client, time.monotonic())
        if self._task is None or self._task.done():
            self._task = self.scheduler.spawn(self._run(), name="lease-validation")

    def refresh(self, leases: Any) -> None:
        """The holder of ``leases`` lives (ids that ended already are ignored)."""
        now = time.monotonic()
        for lease in leases:
            entry = self.leases.get(lease)
            if entry is not None:
                self.leases[lease] = (entry[0], entry[1], now)

    def discard(self, lease: str) -> None:
        """Stop timing ``lease`` (released)."""
        self.leases.pop(lease, None)

    async def _run(self) -> None:
        while self.leases:
            await asyncio.sleep(self.interval)
            self.validate()

    def validate(self) -> None:
        """End every lease whose client left or whose refresh is overdue."""
        now = time.monotonic()
        clients = self.scheduler.clients
        for lease, (name, client, seen) in list(self.leases.items()):
            gone = client is not None and client not in clients
            if gone or now - seen > self.timeout:
                del self.leases[lease]
                logger.warning(
                    "Lease %s of %r ended: %s",
                    lease,
                    name,
                    f"its client {client} left" if gone else f"not refreshed for {now - seen:.1f} s",
                )
                self.expire(name, lease)


class LeaseKeeper:
    """Refreshes the leases one primitive object holds, while it holds any.

    Parameters
    ----------
    held
        The lease ids held now.
    refresh
        Sends the scheduler a refresh of these ids.
    """

    def __init__(self, held: Callable[[], list[str]], refresh: Callable[[list[str]], Awaitable[Any]]) -> None:
        self.held = held
        self.refresh = refresh
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Keep refreshing (call on the client's loop after each acquisition)."""
        if self._task is None or self._task.done():
            interval = lease_timeout() / 5
            if math.isfinite(interval):
                self._task = asyncio.ensure_future(self._run(max(interval, 0.01)))

    def stop(self) -> None:
        """Stop refreshing (nothing left to refresh)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            ids = self.held()
            if not ids:
                return
            try:
                await self.refresh(ids)
            except Exception as e:
                # The client closed or lost the scheduler: the leases end there anyway.
                logger.debug("Refreshing leases %s failed: %r", ids, e)
                return
