"""The scheduler side of :class:`distributed.Lock`.

Invariants: ``holders[name]`` is the lease id holding lock ``name``, and a
name is in ``holders`` exactly while someone holds it; ``waiters[name]`` holds,
in arrival order, the lease ids waiting for it with the future that grants
it.  Releasing hands the lock straight to the first waiter, so a lock never
looks free while someone waits for it, and waiters are served first come,
first served.

A holder that goes away without releasing keeps the lock (as with
dask.distributed's lock when lease timeouts are off).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from distributed.comm import Comm
from distributed.coordination.names import normalize_name
from distributed.core import Route
from distributed.protocol import messages as m

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["LockExtension"]


class LockExtension:
    """Keeps every :class:`~distributed.Lock` of a cluster.

    Registered as ``scheduler.extensions["locks"]``; answers ``lock_acquire``,
    ``lock_release`` and ``lock_locked``.

    Parameters
    ----------
    scheduler
        The scheduler it belongs to.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.holders: dict[Hashable, str] = {}
        self.waiters: defaultdict[Hashable, deque[tuple[str, asyncio.Future[None]]]] = defaultdict(deque)

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests this extension answers."""
        return {
            "lock_acquire": Route(m.LockAcquire, self.acquire),
            "lock_release": Route(m.LockRelease, self.release),
            "lock_locked": Route(m.LockLocked, self.locked),
        }

    async def acquire(self, comm: Comm, msg: m.LockAcquire) -> bool:
        """Hold the lock as ``msg["id"]``; False when ``timeout`` passed first."""
        name, lease = normalize_name(msg["name"]), msg["id"]
        if self.holders.get(name) == lease:
            raise RuntimeError(f"Lease {lease!r} already holds lock {name!r}")
        if name not in self.holders:
            self.holders[name] = lease
            return True
        timeout = msg.get("timeout")
        if timeout is not None and timeout <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (lease, fut)
        self.waiters[name].append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            if fut.done():
                return True  # granted right at the deadline
            self._forget_waiter(name, entry)
            return False
        except asyncio.CancelledError:
            # The request went away (the scheduler closes): nobody will use
            # or release the lock, so do not keep it or wait for it.
            if fut.done():
                self._release(name, lease)
            else:
                self._forget_waiter(name, entry)
            raise
        return True

    def _forget_waiter(self, name: Hashable, entry: tuple[str, asyncio.Future[None]]) -> None:
        queue = self.waiters[name]
        queue.remove(entry)
        if not queue:
            del self.waiters[name]

    def release(self, comm: Comm, msg: m.LockRelease) -> bool:
        """Give the lock up; an error unless ``msg["id"]`` holds it."""
        name, lease = normalize_name(msg["name"]), msg["id"]
        if self.holders.get(name) != lease:
            raise RuntimeError(f"Released too often: lock {name!r} is not held by lease {lease!r}")
        self._release(name, lease)
        return True

    def _release(self, name: Hashable, lease: str) -> None:
        queue = self.waiters.get(name)
        if queue:
            next_lease, fut = queue.popleft()
            if not queue:
                del self.waiters[name]
            self.holders[name] = next_lease
            fut.set_result(None)
        else:
            del self.holders[name]

    def locked(self, comm: Comm, msg: m.LockLocked) -> bool:
        """Whether anyone holds the lock."""
        return normalize_name(msg["name"]) in self.holders
