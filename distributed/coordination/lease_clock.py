"""The scheduler side of Lock and Semaphore leases: ending those whose holder is gone (see :mod:`.leases`)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from distributed.coordination.leases import lease_timeout, validation_interval

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["LeaseClock"]

logger = logging.getLogger(__name__)


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
