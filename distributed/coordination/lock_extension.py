"""The scheduler side of :class:`distributed.Lock`.

Invariants: ``holders[name]`` is the lease id holding lock ``name``, and a
name is in ``holders`` exactly while someone holds it; ``waiters[name]`` holds,
in arrival order, the lease ids waiting for it with the future that grants
it.  Releasing hands the lock straight to the first waiter, so a lock never
looks free while someone waits for it, and waiters are served first come,
first served.

Each holder's lease is timed by :attr:`LockExtension.clock`: a holder that
goes away without releasing (its client left, or it stopped refreshing its
lease) loses the lock, which goes to the next waiter.

With a scheduler journal, each lease that comes to hold a lock and each that
stops holding it is kept as it happens, and a scheduler taking over replays
them (:meth:`LockExtension.replay`): a lock held when the scheduler died is
held still, by the same lease, timed from the takeover on.  Waiting requests
are not kept: their callers see the scheduler go.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from distributed.comm import Comm
from distributed.coordination.lease_clock import LeaseClock
from distributed.coordination.names import normalize_name
from distributed.coordination.waiting import await_grant, gives_up_at_once
from distributed.core import Route
from distributed.protocol import coordination_messages as cm
from distributed.protocol import journal_records as jr

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
        self.waiters: defaultdict[Hashable, deque[tuple[str, asyncio.Future[bool]]]] = defaultdict(deque)
        #: The client of each waiting lease (its holder once granted).
        self.waiting_clients: dict[str, str | None] = {}
        self.clock = LeaseClock(scheduler, self._expire)

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests this extension answers."""
        return {
            "lock_acquire": Route(cm.LockAcquire, self.acquire),
            "lock_release": Route(cm.LockRelease, self.release),
            "lock_locked": Route(cm.LockLocked, self.locked),
            "lock_refresh_leases": Route(cm.LockRefresh, self.refresh),
        }

    async def acquire(self, comm: Comm, msg: cm.LockAcquire) -> bool:
        """Hold the lock as ``msg["id"]``; False when ``timeout`` passed first."""
        name, lease = normalize_name(msg["name"]), msg["id"]
        if self.holders.get(name) == lease:
            raise RuntimeError(f"Lease {lease!r} already holds lock {name!r}")
        if name not in self.holders:
            self._hold(name, lease, msg.get("client"))
            return True
        timeout = msg.get("timeout")
        if gives_up_at_once(timeout):
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (lease, fut)
        self.waiters[name].append(entry)
        self.waiting_clients[lease] = msg.get("client")
        return await await_grant(
            fut,
            timeout,
            forget=lambda: self._forget_waiter(name, entry),
            give_back=lambda: self._release(name, lease),
        )

    def _forget_waiter(self, name: Hashable, entry: tuple[str, asyncio.Future[bool]]) -> None:
        self.waiting_clients.pop(entry[0], None)
        queue = self.waiters[name]
        queue.remove(entry)
        if not queue:
            del self.waiters[name]

    def release(self, comm: Comm, msg: cm.LockRelease) -> bool:
        """Give the lock up; an error unless ``msg["id"]`` holds it."""
        name, lease = normalize_name(msg["name"]), msg["id"]
        if self.holders.get(name) != lease:
            raise RuntimeError(f"Released too often: lock {name!r} is not held by lease {lease!r}")
        self._release(name, lease)
        return True

    def _hold(self, name: Hashable, lease: str, client: str | None) -> None:
        self.holders[name] = lease
        self.clock.add(name, lease, client)
        self.scheduler.keep_in_journal(
            "lock_granted", jr.LockGranted(op="lock_granted", name=name, id=lease, client=client)
        )

    def _release(self, name: Hashable, lease: str) -> None:
        self.clock.discard(lease)
        self.scheduler.keep_in_journal("lock_freed", jr.LockFreed(op="lock_freed", name=name, id=lease))
        queue = self.waiters.get(name)
        if queue:
            next_lease, fut = queue.popleft()
            if not queue:
                del self.waiters[name]
            self._hold(name, next_lease, self.waiting_clients.pop(next_lease, None))
            fut.set_result(True)
        else:
            del self.holders[name]

    def replay(self, op: str, msg: Mapping[str, Any]) -> None:
        """Apply a journaled change of a lock (``lock_granted``: a lease holds it; ``lock_freed``: no more)."""
        name, lease = normalize_name(msg["name"]), msg["id"]
        if op == "lock_granted":
            self.holders[name] = lease
            self.clock.add(name, lease, msg.get("client"))
        elif self.holders.get(name) == lease:
            del self.holders[name]
            self.clock.discard(lease)

    def _expire(self, name: Hashable, lease: str) -> None:
        if self.holders.get(name) == lease:
            self._release(name, lease)

    def refresh(self, comm: Comm, msg: cm.LockRefresh) -> None:
        """The holder of these leases lives."""
        self.clock.refresh(msg["ids"])

    def locked(self, comm: Comm, msg: cm.LockLocked) -> bool:
        """Whether anyone holds the lock."""
        return normalize_name(msg["name"]) in self.holders
