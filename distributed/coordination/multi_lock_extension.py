"""The scheduler side of :class:`distributed.MultiLock`.

Invariants: ``queues[name]`` lists, in arrival order, the requests (ids)
for lock ``name``; the first one holds it or waits for others of its names.
``requests[id]`` holds the names and ``num_locks`` of each request in some
queue.  A request is granted once it is first in ``num_locks`` of its
queues; it then leaves every other queue, so it holds exactly ``num_locks``
locks.  Requests join all their queues in one step, so queue orders agree
and no two requests can wait for each other.  A granted request whose
client left the scheduler is withdrawn (see :mod:`.leases`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from distributed.comm import Comm
from distributed.coordination.lease_clock import LeaseClock
from distributed.coordination.names import normalize_name
from distributed.coordination.waiting import await_grant, gives_up_at_once
from distributed.core import Route
from distributed.protocol import coordination_messages as cm

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["MultiLockExtension"]


class MultiLockExtension:
    """Keeps every :class:`~distributed.MultiLock` of a cluster.

    Registered as ``scheduler.extensions["multi_locks"]``; answers
    ``multi_lock_acquire`` and ``multi_lock_release``.

    Parameters
    ----------
    scheduler
        The scheduler it belongs to.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.queues: dict[Hashable, list[str]] = {}
        self.requests: dict[str, tuple[list[Hashable], int]] = {}
        self.granted: set[str] = set()
        self.waiting: dict[str, asyncio.Future[bool]] = {}
        #: The client of each request, until it is granted.
        self.clients: dict[str, str | None] = {}
        self.clock = LeaseClock(scheduler, self._expire, refreshed=False)

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests this extension answers."""
        return {
            "multi_lock_acquire": Route(cm.MultiLockAcquire, self.acquire),
            "multi_lock_release": Route(cm.MultiLockRelease, self.release),
        }

    def _heads(self, rid: str) -> list[Hashable]:
        names, _ = self.requests[rid]
        return [n for n in names if self.queues[n][0] == rid]

    def _try_grant(self, rid: str) -> list[Hashable]:
        """Grant ``rid`` if it is first often enough; the names it left (their next request may go)."""
        names, num_locks = self.requests[rid]
        heads = self._heads(rid)
        if len(heads) < num_locks:
            return []
        keep = set(heads[:num_locks])
        left = [n for n in names if n not in keep]
        for n in left:
            self._leave(n, rid)
        self.requests[rid] = ([n for n in names if n in keep], num_locks)
        self.granted.add(rid)
        self.clock.add(tuple(keep), rid, self.clients.pop(rid, None))
        fut = self.waiting.pop(rid, None)
        if fut is not None and not fut.done():
            fut.set_result(True)
        return left

    def _leave(self, name: Hashable, rid: str) -> None:
        queue = self.queues[name]
        queue.remove(rid)
        if not queue:
            del self.queues[name]

    def _advance(self, names: Iterable[Hashable]) -> None:
        """Grant what the requests now first in ``names`` can take, and so on."""
        todo = list(names)
        while todo:
            name = todo.pop()
            queue = self.queues.get(name)
            if not queue:
                continue
            rid = queue[0]
            if rid not in self.granted:
                todo.extend(self._try_grant(rid))

    def _withdraw(self, rid: str) -> None:
        names, _ = self.requests.pop(rid)
        self.granted.discard(rid)
        self.waiting.pop(rid, None)
        self.clients.pop(rid, None)
        self.clock.discard(rid)
        for n in names:
            self._leave(n, rid)
        self._advance(names)

    async def acquire(self, comm: Comm, msg: cm.MultiLockAcquire) -> bool:
        """Hold ``num_locks`` of the locks as ``msg["id"]``; False when ``timeout`` passed first."""
        rid = msg["id"]
        if rid in self.requests:
            raise RuntimeError(f"MultiLock {rid!r} holds or waits for its locks already")
        names = list(dict.fromkeys(normalize_name(n) for n in msg["names"]))
        num_locks = msg["num_locks"]
        if not 0 < num_locks <= len(names):
            raise ValueError(f"num_locks must be between 1 and {len(names)}, got {num_locks}")
        self.requests[rid] = (names, num_locks)
        self.clients[rid] = msg.get("client")
        for n in names:
            self.queues.setdefault(n, []).append(rid)
        self._try_grant(rid)
        if rid in self.granted:
            return True
        timeout = msg.get("timeout")
        if gives_up_at_once(timeout):
            self._withdraw(rid)
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waiting[rid] = fut
        return await await_grant(
            fut, timeout, forget=lambda: self._withdraw(rid), give_back=lambda: self._withdraw_if_there(rid)
        )

    def _withdraw_if_there(self, rid: str) -> None:
        # A granted request may have ended already (its client left).
        if rid in self.requests:
            self._withdraw(rid)

    def _expire(self, names: Hashable, rid: str) -> None:
        if rid in self.granted:
            self._withdraw(rid)

    def release(self, comm: Comm, msg: cm.MultiLockRelease) -> None:
        """Give the locks of ``msg["id"]`` up; an error unless it holds them."""
        rid = msg["id"]
        if rid not in self.granted:
            raise ValueError(f"MultiLock {rid!r} does not hold its locks")
        self._withdraw(rid)
