"""The scheduler side of :class:`distributed.Semaphore`.

Invariants: ``max_leases[name]`` exists while semaphore ``name`` does (from
its first acquisition until it is closed); ``leases[name]`` holds the lease
ids holding it, never more than ``max_leases[name]``, each timed by
:attr:`SemaphoreExtension.clock`; ``waiters[name]`` holds, in arrival order,
the requests waiting for a lease with the future that answers them (True: a
lease, False: the semaphore was closed).  A lease that ends goes straight to
the first waiter, so waiters are served first come, first served.

With a scheduler journal, each lease granted and each that ends is kept as it
happens, and a scheduler taking over replays them
(:meth:`SemaphoreExtension.replay`): leases held when the scheduler died are
held still, timed from the takeover on.  Waiting requests are not kept.
"""

from __future__ import annotations

import asyncio
import logging
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

__all__ = ["SemaphoreExtension"]

logger = logging.getLogger(__name__)

#: A waiting request: its lease id, its client, and the future that answers it.
Waiter = tuple[str, str | None, "asyncio.Future[bool]"]


class SemaphoreExtension:
    """Keeps every :class:`~distributed.Semaphore` of a cluster.

    Registered as ``scheduler.extensions["semaphores"]``; answers
    ``semaphore_acquire``, ``semaphore_release``,
    ``semaphore_refresh_leases``, ``semaphore_value`` and ``semaphore_close``.

    Parameters
    ----------
    scheduler
        The scheduler it belongs to.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.max_leases: dict[Hashable, int] = {}
        self.leases: defaultdict[Hashable, set[str]] = defaultdict(set)
        self.waiters: defaultdict[Hashable, deque[Waiter]] = defaultdict(deque)
        self.clock = LeaseClock(scheduler, self._expire)

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests this extension answers."""
        return {
            "semaphore_acquire": Route(cm.SemaphoreAcquire, self.acquire),
            "semaphore_release": Route(cm.SemaphoreRelease, self.release),
            "semaphore_refresh_leases": Route(cm.SemaphoreRefresh, self.refresh),
            "semaphore_value": Route(cm.SemaphoreValue, self.value),
            "semaphore_close": Route(cm.SemaphoreClose, self.close),
        }

    def _grant(self, name: Hashable, lease: str, client: str | None) -> None:
        self.leases[name].add(lease)
        self.clock.add(name, lease, client)
        granted = jr.SemaphoreGranted(
            op="semaphore_granted", name=name, id=lease, client=client, max_leases=self.max_leases[name]
        )
        self.scheduler.keep_in_journal("semaphore_granted", granted)

    def _journal_freed(self, name: Hashable, lease: str) -> None:
        self.scheduler.keep_in_journal("semaphore_freed", jr.SemaphoreFreed(op="semaphore_freed", name=name, id=lease))

    def replay(self, op: str, msg: Mapping[str, Any]) -> None:
        """Apply a journaled change of a semaphore (``semaphore_granted``: a lease; ``semaphore_freed``: its end)."""
        name, lease = normalize_name(msg["name"]), msg["id"]
        if op == "semaphore_granted":
            self.max_leases.setdefault(name, int(msg["max_leases"]))
            self.leases[name].add(lease)
            self.clock.add(name, lease, msg.get("client"))
        else:
            held = self.leases.get(name)
            if held is not None and lease in held:
                held.discard(lease)
                self.clock.discard(lease)
                if not held:
                    del self.leases[name]

    async def acquire(self, comm: Comm, msg: cm.SemaphoreAcquire) -> bool:
        """Hold a lease as ``msg["id"]``; False when ``timeout`` passed first."""
        name, lease, client = normalize_name(msg["name"]), msg["id"], msg.get("client")
        max_leases = msg["max_leases"]
        if max_leases < 1:
            raise ValueError(f"max_leases must be >= 1, got {max_leases}")
        known = self.max_leases.setdefault(name, max_leases)
        if known != max_leases:
            raise ValueError(f"Semaphore {name!r} exists with max_leases={known}, not {max_leases}")
        held = self.leases[name]
        if lease in held:
            raise RuntimeError(f"Lease {lease!r} already holds semaphore {name!r}")
        if len(held) < known and not self.waiters.get(name):
            self._grant(name, lease, client)
            return True
        timeout = msg.get("timeout")
        if gives_up_at_once(timeout):
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry: Waiter = (lease, client, fut)
        self.waiters[name].append(entry)
        return await await_grant(
            fut,
            timeout,
            forget=lambda: self._forget_waiter(name, entry),
            give_back=lambda: self._release(name, lease),
        )

    def _forget_waiter(self, name: Hashable, entry: Waiter) -> None:
        queue = self.waiters.get(name)
        if queue is not None:
            queue.remove(entry)
            if not queue:
                del self.waiters[name]

    def release(self, comm: Comm, msg: cm.SemaphoreRelease) -> bool:
        """Give a lease back; False when it had ended already."""
        name, lease = normalize_name(msg["name"]), msg["id"]
        if lease not in self.leases.get(name, ()):
            logger.warning("Lease %s of semaphore %r released after it ended", lease, name)
            return False
        self._release(name, lease)
        return True

    def _release(self, name: Hashable, lease: str) -> None:
        held = self.leases[name]
        held.discard(lease)
        self.clock.discard(lease)
        self._journal_freed(name, lease)
        queue = self.waiters.get(name)
        while queue and len(held) < self.max_leases.get(name, 0):
            next_lease, client, fut = queue.popleft()
            self._grant(name, next_lease, client)
            fut.set_result(True)
        if not queue:
            self.waiters.pop(name, None)
        if not held:
            del self.leases[name]

    def _expire(self, name: Hashable, lease: str) -> None:
        if lease in self.leases.get(name, ()):
            self._release(name, lease)

    def refresh(self, comm: Comm, msg: cm.SemaphoreRefresh) -> None:
        """The holder of these leases lives."""
        self.clock.refresh(msg["ids"])

    def value(self, comm: Comm, msg: cm.SemaphoreValue) -> int:
        """How many leases of the semaphore are held."""
        return len(self.leases.get(normalize_name(msg["name"]), ()))

    def close(self, comm: Comm, msg: cm.SemaphoreClose) -> None:
        """Forget the semaphore: its leases end and its waiters get none."""
        name = normalize_name(msg["name"])
        held = self.leases.pop(name, set())
        if held:
            logger.warning("Semaphore %r closed while %d leases were held", name, len(held))
        for lease in held:
            self.clock.discard(lease)
            self._journal_freed(name, lease)
        for _, _, fut in self.waiters.pop(name, deque()):
            fut.set_result(False)
        self.max_leases.pop(name, None)
