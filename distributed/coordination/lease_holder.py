"""The holder side of Lock and Semaphore leases: the lease ids one object holds.

Each successful acquisition takes a fresh lease id, so one object shared by
threads holds several; they are given back first in, first out, and are
refreshed (see :class:`LeaseKeeper`) while
the object holds any.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from distributed.client.base import AsyncT
from distributed.coordination.leases import lease_timeout
from distributed.coordination.primitive import Acquirable

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["LeaseHolder", "LeaseKeeper"]

logger = logging.getLogger(__name__)


class LeaseHolder(Acquirable[AsyncT]):
    """A primitive whose acquisitions are leases the scheduler ends when their holder dies.

    Subclasses send the refresh message of their kind in :meth:`_refresh`.

    Parameters
    ----------
    client
        The client to use (None: found when first used).
    """

    def __init__(self, client: Client[AsyncT] | None) -> None:
        super().__init__(client)
        self._leases: deque[str] = deque()
        # Threads sharing one object take and give back leases concurrently.
        self._leases_lock = threading.Lock()
        self._keeper = LeaseKeeper(self._held, self._refresh)

    def _held(self) -> list[str]:
        with self._leases_lock:
            return list(self._leases)

    async def _refresh(self, ids: list[str]) -> None:
        raise NotImplementedError

    async def _take(self, lease: str, msg: Any) -> bool:
        """Ask the scheduler for ``lease`` with ``msg``; hold and refresh it when granted."""
        acquired = bool(await self.client.scheduler.call(msg))
        if acquired:
            with self._leases_lock:
                self._leases.append(lease)
            self._keeper.start()
        return acquired

    def _pop_oldest(self, error: str) -> str:
        """The oldest lease, no longer held; ``RuntimeError(error)`` when none is held."""
        with self._leases_lock:
            if not self._leases:
                raise RuntimeError(error)
            return self._leases.popleft()

    async def _give_back(self, msg: Any) -> Any:
        """Send ``msg`` releasing a popped lease (on the client's loop); stop refreshing once none is held."""
        if not self._held():
            self._keeper.stop()
        return await self.client.scheduler.call(msg)

    def _drop_all(self) -> None:
        """Forget every lease held (on the client's loop), the scheduler having ended them."""
        with self._leases_lock:
            self._leases.clear()
        self._keeper.stop()


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
