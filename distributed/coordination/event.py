"""``distributed.Event``: a flag shared by every client and task of a cluster, by name."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dask.utils import parse_timedelta

from distributed.client.base import AsyncT
from distributed.client.dual import Work, dual_method
from distributed.coordination.names import name_or_new
from distributed.coordination.primitive import ClientBound
from distributed.protocol import coordination_messages as cm

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["Event"]


class Event(ClientBound[AsyncT], noun="event"):
    """A flag shared by every client and task of a cluster, by name, as :class:`asyncio.Event`.

    An event starts clear; :meth:`set` wakes everyone in :meth:`wait`
    until :meth:`clear` makes waiters wait again.

    Parameters
    ----------
    name
        Events with the same name are the same event: a string, bytes, a
        number, or a list or tuple of those (default: a new random name).
    client
        The client to use (default: the worker's client inside a task, else
        the default client, found when first used).

    Examples
    --------
    >>> event = Event("ready")  # doctest: +SKIP
    >>> event.wait(timeout=1)  # doctest: +SKIP
    False
    >>> event.set()  # doctest: +SKIP
    >>> event.wait()  # doctest: +SKIP
    True
    """

    def __init__(self, name: Any = None, client: Client[AsyncT] | None = None) -> None:
        super().__init__(client)
        self.name: Any = name_or_new(name, "event")

    @dual_method
    def wait(self, timeout: float | str | timedelta | None = None) -> Work[bool]:
        """Wait until the event is set (an awaitable with an asynchronous client).

        Parameters
        ----------
        timeout
            Longest wait (seconds, a string such as ``"200ms"``, or a
            ``timedelta``); None waits for as long as it takes.

        Returns
        -------
        bool
            Whether the event is set (False: ``timeout`` passed first).
        """
        t = parse_timedelta(timeout) if timeout is not None else None
        return self._request(cm.EventWait(op="event_wait", name=self.name, timeout=t))

    @dual_method
    def set(self) -> Work[None]:
        """Set the event, waking every waiter (an awaitable with an asynchronous client)."""
        return self._request(cm.EventSet(op="event_set", name=self.name))

    @dual_method
    def clear(self) -> Work[None]:
        """Clear the event: later waits wait again (an awaitable with an asynchronous client)."""
        return self._request(cm.EventClear(op="event_clear", name=self.name))

    @dual_method
    def is_set(self) -> Work[bool]:
        """Whether the event is set (an awaitable with an asynchronous client)."""
        return self._request(cm.EventIsSet(op="event_is_set", name=self.name))

    def __reduce__(self) -> tuple[type[Event[Any]], tuple[Any]]:
        return (Event, (self.name,))

    def __repr__(self) -> str:
        return f"<Event: {self.name}>"
