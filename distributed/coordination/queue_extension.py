"""The scheduler side of :class:`distributed.Queue`.

Invariants: ``queues[name]`` holds the items of queue ``name`` in order, and
each future's key in it is wanted by the holder ``queue-<name>`` (once per
key, however often it is queued; see :mod:`distributed.coordination.held`).
Items are taken only after every wait of the request is over, in one step,
so a request that times out takes nothing, and only while the getter's
client is still connected, so a getter that died while waiting (its
process killed, say) takes nothing from those alive.

With a scheduler journal, each item put and each taking of items is kept
as it happens (a request that waits changes nothing until it is served), and
a scheduler taking over replays them (:meth:`QueueExtension.replay`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from distributed.comm import Comm
from distributed.coordination.key_holds import KeyHolds
from distributed.coordination.names import normalize_name
from distributed.core import Route
from distributed.protocol import coordination_messages as cm

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["NamedQueue", "QueueExtension"]


class NamedQueue:
    """The items of one queue, and the condition its waiters wait on."""

    __slots__ = ("maxsize", "items", "changed", "getters")

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.items: deque[cm.HeldItem] = deque()
        self.changed = asyncio.Condition()
        #: Requests waiting for items.
        self.getters = 0

    def has_room(self) -> bool:
        return not self.maxsize or len(self.items) < self.maxsize


class QueueExtension:
    """Keeps every :class:`~distributed.Queue` of a cluster.

    Registered as ``scheduler.extensions["queues"]``; answers ``queue_put``,
    ``queue_get`` and ``queue_qsize``.

    Parameters
    ----------
    scheduler
        The scheduler it belongs to.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.queues: dict[Hashable, NamedQueue] = {}
        self.holds = KeyHolds(scheduler)

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests this extension answers."""
        return {
            "queue_put": Route(cm.QueuePut, self.put),
            "queue_get": Route(cm.QueueGet, self.get),
            "queue_qsize": Route(cm.QueueSize, self.qsize),
        }

    @staticmethod
    def holder(name: Hashable) -> str:
        """The client id under which queue ``name`` wants the keys it holds."""
        return f"queue-{name!r}"

    def _queue(self, name: Hashable, maxsize: int) -> NamedQueue:
        if maxsize < 0:
            raise ValueError(f"A queue's maxsize must be >= 0, got {maxsize}")
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = NamedQueue(maxsize)
        elif maxsize and maxsize != q.maxsize:
            raise ValueError(f"Queue {name!r} exists with maxsize={q.maxsize}, not {maxsize}")
        return q

    async def put(self, comm: Comm, msg: cm.QueuePut) -> bool:
        """Append the item once there is room; False when ``timeout`` passed first."""
        name = normalize_name(msg["name"])
        q = self._queue(name, msg["maxsize"])
        self.holds.check_known(msg["item"])
        try:
            async with asyncio.timeout(msg.get("timeout")):
                async with q.changed:
                    await q.changed.wait_for(q.has_room)
                    q.items.append(msg["item"])
                    self.holds.hold(self.holder(name), msg["item"])
                    put = {"name": msg["name"], "maxsize": msg["maxsize"], "item": msg["item"]}
                    self.scheduler.keep_in_journal("queue_put", put)
                    q.changed.notify_all()
        except TimeoutError:
            return False
        return True

    async def get(self, comm: Comm, msg: cm.QueueGet) -> cm.QueueGetReply:
        """Take one item, ``batch`` items, or (``batch=True``) all there are."""
        name = normalize_name(msg["name"])
        q = self._queue(name, msg["maxsize"])
        batch, client = msg["batch"], msg.get("client")
        taken: list[cm.HeldItem] = []
        if batch is True:
            taken = list(q.items)
            q.items.clear()
            self._journal_taken(msg, len(taken))
        else:
            n = 1 if batch is False else batch
            q.getters += 1
            try:
                async with asyncio.timeout(msg.get("timeout")):
                    async with q.changed:
                        await q.changed.wait_for(lambda: len(q.items) >= n)
                        if client is not None and client not in self.scheduler.clients:
                            # Nobody would receive them: leave them to the living.
                            raise ConnectionError(f"Client {client} left while waiting for queue {name!r}")
                        taken = [q.items.popleft() for _ in range(n)]
                        self._journal_taken(msg, n)
            except TimeoutError:
                return cm.QueueGetReply(items=[], timed_out=True)
            finally:
                q.getters -= 1
        holder = self.holder(name)
        for item in taken:
            self.holds.hand_over(client, item)
            self.holds.drop(holder, item)
        if taken:
            async with q.changed:
                q.changed.notify_all()  # room for waiting puts
        return cm.QueueGetReply(items=taken, timed_out=False)

    def _journal_taken(self, msg: cm.QueueGet, n: int) -> None:
        if n:
            self.scheduler.keep_in_journal("queue_take", {"name": msg["name"], "maxsize": msg["maxsize"], "n": n})

    def replay(self, op: str, msg: Mapping[str, Any]) -> None:
        """Apply a journaled change of a queue (``queue_put``: an item in; ``queue_take``: ``n`` items out)."""
        name = normalize_name(msg["name"])
        q = self._queue(name, msg["maxsize"])
        holder = self.holder(name)
        if op == "queue_put":
            self.holds.check_known(msg["item"])
            q.items.append(msg["item"])
            self.holds.hold(holder, msg["item"])
        else:
            for _ in range(min(int(msg["n"]), len(q.items))):
                self.holds.drop(holder, q.items.popleft())

    def qsize(self, comm: Comm, msg: cm.QueueSize) -> int:
        """How many items queue ``name`` holds."""
        return len(self._queue(normalize_name(msg["name"]), msg["maxsize"]).items)
