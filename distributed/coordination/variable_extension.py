"""The scheduler side of :class:`distributed.Variable`.

Invariants: ``values[name]`` is the item variable ``name`` holds, and a name
is in ``values`` exactly while the variable has a value; a future's key in
it is wanted by the holder ``variable-<name>`` (see
:mod:`distributed.coordination.held`).  ``changed[name]`` exists while
someone waits for a value of ``name``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from distributed.comm import Comm
from distributed.coordination.key_holds import KeyHolds
from distributed.coordination.names import normalize_name
from distributed.coordination.waiting import counted
from distributed.core import Route
from distributed.protocol import coordination_messages as cm

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["VariableExtension"]


class VariableExtension:
    """Keeps every :class:`~distributed.Variable` of a cluster.

    Registered as ``scheduler.extensions["variables"]``; answers
    ``variable_set``, ``variable_get`` and ``variable_delete``.

    Parameters
    ----------
    scheduler
        The scheduler it belongs to.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.values: dict[Hashable, cm.HeldItem] = {}
        self.changed: dict[Hashable, asyncio.Condition] = {}
        self._waiting: dict[Hashable, int] = {}
        self.holds = KeyHolds(scheduler)

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests this extension answers."""
        return {
            "variable_set": Route(cm.VariableSet, self.set),
            "variable_get": Route(cm.VariableGet, self.get),
            "variable_delete": Route(cm.VariableDelete, self.delete),
            "variable_is_set": Route(cm.VariableIsSet, self.is_set),
        }

    @staticmethod
    def holder(name: Hashable) -> str:
        """The client id under which variable ``name`` wants the key it holds."""
        return f"variable-{name!r}"

    async def set(self, comm: Comm, msg: cm.VariableSet) -> None:
        """Hold ``msg["item"]`` as the value, letting the previous one go."""
        name = normalize_name(msg["name"])
        item = msg["item"]
        holder = self.holder(name)
        self.holds.check_known(item)
        self.holds.hold(holder, item)  # before dropping the old one: it may be the same key
        old = self.values.get(name)
        self.values[name] = item
        if old is not None:
            self.holds.drop(holder, old)
        cond = self.changed.get(name)
        if cond is not None:
            async with cond:
                cond.notify_all()

    async def get(self, comm: Comm, msg: cm.VariableGet) -> cm.VariableGetReply:
        """The value, once there is one; no ``item`` when ``timeout`` passed first."""
        name = normalize_name(msg["name"])
        if name not in self.values:
            timeout = msg.get("timeout")
            cond = self.changed.get(name)
            if cond is None:
                cond = self.changed[name] = asyncio.Condition()
            try:
                with counted(self._waiting, name):
                    async with asyncio.timeout(timeout):
                        async with cond:
                            await cond.wait_for(lambda: name in self.values)
            except TimeoutError:
                return cm.VariableGetReply()
            finally:
                if name not in self._waiting:
                    del self.changed[name]
        item = self.values[name]
        self.holds.hand_over(msg.get("client"), item)
        return cm.VariableGetReply(item=item)

    def is_set(self, comm: Comm, msg: cm.VariableIsSet) -> bool:
        """Whether the variable has a value now."""
        return normalize_name(msg["name"]) in self.values

    def delete(self, comm: Comm, msg: cm.VariableDelete) -> None:
        """Forget the value (keeping its future's task alive no more)."""
        name = normalize_name(msg["name"])
        old = self.values.pop(name, None)
        if old is not None:
            self.holds.drop(self.holder(name), old)
