"""Objects a Queue or Variable holds: user values as opaque frames, futures as keys.

The scheduler never unpickles a user object: a value travels and is kept as
:class:`~distributed.protocol.serialize.Serialized` frames that only the
getter turns back into the object.  A :class:`~distributed.Future` travels as
its key; while the scheduler holds the item it wants the key on behalf of the
primitive (a client id of its own, such as ``"variable-x"``), so the task's
result stays in memory even after every future of it is gone.  Handing such
an item to a getter makes the getter's client want the key, in the same step,
before the primitive lets go of it.

This module is the client's half; the scheduler's half is
:class:`~distributed.coordination.key_holds.KeyHolds`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distributed.client.future import Future
from distributed.protocol import coordination_messages as cm
from distributed.protocol.serialize import Serialize, unwrap

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["before_get", "from_item", "to_item"]


async def to_item(client: Client, value: Any) -> cm.HeldItem:
    """``value`` as it travels to the scheduler.

    A future's task must be known to the scheduler before the scheduler can
    hold it, so this waits until the client's stream has been handled.
    """
    if isinstance(value, Future):
        await client.link.stream_handled()
        return cm.HeldItem(key=value.key)
    return cm.HeldItem(value=Serialize(value))


async def before_get(client: Client) -> None:
    """Wait until the scheduler has handled what ``client`` queued on its stream.

    A release of a future this client dropped (say the one it just put) may
    still be queued there; were the get to overtake it, the scheduler would
    hand the key to the client and then apply the stale release, forgetting
    the task.
    """
    await client.link.stream_handled()


def from_item(client: Client, item: cm.HeldItem) -> Any:
    """The object ``item`` stands for, on ``client`` (run on its loop).

    A key becomes a future of ``client``; the scheduler already counts the
    client as wanting it, and sends its status when the new future asks for
    it (after the future's state exists to receive it).
    """
    if "key" in item:
        key = item["key"]
        return Future(key, client)  # a new future informs the scheduler, which then sends its status
    return unwrap(item.get("value"))
