"""The scheduler side of :class:`distributed.Event`.

Invariants: ``events[name]`` exists while event ``name`` is set or someone
waits on it (``waiters[name]`` counts them); a clear event nobody waits on
is forgotten, as it is indistinguishable from one never used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from distributed.comm import Comm
from distributed.coordination.names import normalize_name
from distributed.coordination.waiting import counted, gives_up_at_once
from distributed.core import Route
from distributed.protocol import coordination_messages as cm
from distributed.utils import wait_for

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["EventExtension"]


class EventExtension:
    """Keeps every :class:`~distributed.Event` of a cluster.

    Registered as ``scheduler.extensions["events"]``; answers ``event_set``,
    ``event_clear``, ``event_is_set`` and ``event_wait``.

    Parameters
    ----------
    scheduler
        The scheduler it belongs to.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.events: dict[Hashable, asyncio.Event] = {}
        self.waiters: dict[Hashable, int] = {}

    def routes(self) -> Mapping[str, Route[Any]]:
        """The requests this extension answers."""
        return {
            "event_set": Route(cm.EventSet, self.set),
            "event_clear": Route(cm.EventClear, self.clear),
            "event_is_set": Route(cm.EventIsSet, self.is_set),
            "event_wait": Route(cm.EventWait, self.wait),
        }

    def _event(self, name: Hashable) -> asyncio.Event:
        event = self.events.get(name)
        if event is None:
            event = self.events[name] = asyncio.Event()
        return event

    def _forget_if_unused(self, name: Hashable) -> None:
        event = self.events.get(name)
        if event is not None and not event.is_set() and not self.waiters.get(name):
            del self.events[name]

    async def wait(self, comm: Comm, msg: cm.EventWait) -> bool:
        """Whether the event is set, waiting at most ``timeout`` for it."""
        name = normalize_name(msg["name"])
        event = self._event(name)
        if event.is_set():
            return True
        timeout = msg.get("timeout")
        if gives_up_at_once(timeout):
            self._forget_if_unused(name)
            return False
        try:
            with counted(self.waiters, name):
                await wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self._forget_if_unused(name)
        return True

    def set(self, comm: Comm, msg: cm.EventSet) -> None:
        """Set the event, waking its waiters."""
        self._event(normalize_name(msg["name"])).set()

    def clear(self, comm: Comm, msg: cm.EventClear) -> None:
        """Clear the event."""
        name = normalize_name(msg["name"])
        event = self.events.get(name)
        if event is not None:
            event.clear()
            self._forget_if_unused(name)

    def is_set(self, comm: Comm, msg: cm.EventIsSet) -> bool:
        """Whether the event is set."""
        event = self.events.get(normalize_name(msg["name"]))
        return event is not None and event.is_set()
