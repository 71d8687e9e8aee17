"""Objects a Queue or Variable holds: user values as opaque frames, futures as keys.

The scheduler never unpickles a user object: a value travels and is kept as
:class:`~distributed.protocol.serialize.Serialized` frames that only the
getter turns back into the object.  A :class:`~distributed.Future` travels as
its key; while the scheduler holds the item it wants the key on behalf of the
primitive (a client id of its own, such as ``"variable-x"``), so the task's
result stays in memory even after every future of it is gone.  Handing such
an item to a getter makes the getter's client want the key, in the same step,
before the primitive lets go of it.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from distributed.client.future import Future
from distributed.protocol import messages as m
from distributed.protocol.serialize import Serialize, unwrap

if TYPE_CHECKING:
    from distributed.client import Client
    from distributed.scheduler import Scheduler

__all__ = ["KeyHolds", "before_get", "from_item", "to_item"]


async def to_item(client: Client, value: Any) -> m.HeldItem:
    """``value`` as it travels to the scheduler.

    A future's task must be known to the scheduler before the scheduler can
    hold it, so this waits until the client's stream has been handled.
    """
    if isinstance(value, Future):
        await client.link.stream_handled()
        return m.HeldItem(key=value.key)
    return m.HeldItem(value=Serialize(value))


async def before_get(client: Client) -> None:
    """Wait until the scheduler has handled what ``client`` queued on its stream.

    A release of a future this client dropped (say the one it just put) may
    still be queued there; were the get to overtake it, the scheduler would
    hand the key to the client and then apply the stale release, forgetting
    the task.
    """
    await client.link.stream_handled()


def from_item(client: Client, item: m.HeldItem) -> Any:
    """The object ``item`` stands for, on ``client`` (run on its loop).

    A key becomes a future of ``client``; the scheduler already counts the
    client as wanting it, and sends its status when the new future asks for
    it (after the future's state exists to receive it).
    """
    if "key" in item:
        key = item["key"]
        return Future(key, client)  # a new future informs the scheduler, which then sends its status
    return unwrap(item.get("value"))


class KeyHolds:
    """Keys of futures that scheduler-side primitives hold, counted per holder.

    Parameters
    ----------
    scheduler
        The scheduler whose tasks are held.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.counts: Counter[tuple[str, Any]] = Counter()

    def hold(self, holder: str, item: m.HeldItem) -> None:
        """``holder`` keeps ``item``: want its key (a value needs nothing)."""
        if "key" not in item:
            return
        key = item["key"]
        self.counts[holder, key] += 1
        if self.counts[holder, key] == 1:
            s = self.scheduler
            s.send_all(s.client_desires_keys(holder, [key], f"{holder}-hold-{time.time()}"))

    def drop(self, holder: str, item: m.HeldItem) -> None:
        """``holder`` lets ``item`` go: stop wanting its key once nothing else of ``holder`` holds it."""
        if "key" not in item:
            return
        key = item["key"]
        n = self.counts[holder, key] - 1
        if n > 0:
            self.counts[holder, key] = n
            return
        del self.counts[holder, key]
        s = self.scheduler
        s.send_all(s.client_releases_keys(holder, [key], f"{holder}-drop-{time.time()}"))
        cs = s.clients.get(holder)
        if cs is not None and not cs.wants_what:
            del s.clients[holder]

    def hand_over(self, client: str | None, item: m.HeldItem) -> None:
        """Make ``client`` (a getter) want the key of ``item`` before its holder drops it."""
        if "key" in item and client is not None:
            s = self.scheduler
            s.send_all(s.client_desires_keys(client, [item["key"]], f"hand-over-{time.time()}"))
