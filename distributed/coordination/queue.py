"""``distributed.Queue``: a first-in, first-out queue shared by every client and task of a cluster."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dask.utils import parse_timedelta

from distributed.client.base import AsyncT
from distributed.client.dual import Work, dual_method
from distributed.coordination.held import before_get, from_item, to_item
from distributed.coordination.names import name_or_new
from distributed.coordination.primitive import ClientBound
from distributed.protocol import coordination_messages as cm

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["Queue"]


class Queue(ClientBound[AsyncT], noun="queue"):
    """A first-in, first-out queue shared by every client and task of a cluster, by name.

    Items are :class:`~distributed.Future` objects or any picklable objects.  A
    future's task stays computed while the queue holds it; a getter receives
    a future of its own client.  Other items are pickled where they are put
    and unpickled where they are got: the scheduler only keeps their bytes.

    Parameters
    ----------
    name
        Queues with the same name are the same queue: a string, bytes, a
        number, or a list or tuple of those (default: a new random name).
    client
        The client to use (default: the worker's client inside a task, else
        the default client, found when first used).
    maxsize
        Most items the queue holds; ``put`` waits while it is full (0: no
        limit).  The first use of a name sets its size; a different non-zero
        ``maxsize`` for an existing queue is an error.

    Examples
    --------
    >>> q = Queue("x")  # doctest: +SKIP
    >>> q.put(123)  # doctest: +SKIP
    >>> q.put(client.submit(inc, 1))  # doctest: +SKIP
    >>> q.get()  # doctest: +SKIP
    123
    >>> q.get().result()  # doctest: +SKIP
    2
    """

    def __init__(self, name: Any = None, client: Client[AsyncT] | None = None, maxsize: int = 0) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"Queue(maxsize=...) must be an int >= 0, got {maxsize!r}")
        super().__init__(client)
        self.name: Any = name_or_new(name, "queue")
        self.maxsize = maxsize

    @dual_method
    def put(self, value: Any, timeout: float | str | timedelta | None = None) -> Work[None]:
        """Append ``value``, waiting while the queue is full (an awaitable with an asynchronous client).

        Parameters
        ----------
        value
            A future (kept computed while queued) or any picklable object.
        timeout
            Longest wait for room (None: as long as it takes).

        Raises
        ------
        TimeoutError
            When there was no room within ``timeout``; nothing was put.
        FutureUnknownError
            (a ``TimeoutError``) For a future the scheduler does not know:
            cancelled or released.
        """
        t = parse_timedelta(timeout) if timeout is not None else None
        return functools.partial(self._put, value, t)

    async def _put(self, value: Any, timeout: float | None) -> None:
        item = await to_item(self.client, value)
        msg = cm.QueuePut(op="queue_put", name=self.name, maxsize=self.maxsize, item=item, timeout=timeout)
        if not await self.client.scheduler.call(msg):
            raise TimeoutError(f"Queue {self.name!r} had no room within {timeout} s")

    @dual_method
    def get(self, timeout: float | str | timedelta | None = None, batch: bool | int = False) -> Work[Any]:
        """Take the first item (an awaitable with an asynchronous client).

        Parameters
        ----------
        timeout
            Longest wait for items (None: as long as it takes).
        batch
            False: take one item, waiting for it.  True: take every item
            there is now, without waiting (possibly none).  An int ``n``: take
            ``n`` items, waiting until there are that many.

        Returns
        -------
        The item (a future of this queue's client for a future), or a list of
        them with ``batch``.

        Raises
        ------
        TimeoutError
            When the items were not there within ``timeout``; nothing was taken.
        """
        if not isinstance(batch, (bool, int)) or (not isinstance(batch, bool) and batch < 0):
            raise ValueError(f"Queue.get(batch=...) must be a bool or an int >= 0, got {batch!r}")
        t = parse_timedelta(timeout) if timeout is not None else None
        return functools.partial(self._get, t, batch)

    async def _get(self, timeout: float | None, batch: bool | int) -> Any:
        client = self.client
        msg = cm.QueueGet(
            op="queue_get",
            name=self.name,
            maxsize=self.maxsize,
            batch=batch,
            timeout=timeout,
            client=client.id,
        )
        await before_get(client)
        reply: cm.QueueGetReply = await client.scheduler.call(msg)
        if reply["timed_out"]:
            raise TimeoutError(f"Queue {self.name!r} had no items within {timeout} s")
        items = [from_item(client, item) for item in reply["items"]]
        if batch is False:
            return items[0]
        return items

    @dual_method
    def qsize(self) -> Work[int]:
        """How many items the queue holds (an awaitable with an asynchronous client)."""
        return self._request(cm.QueueSize(op="queue_qsize", name=self.name, maxsize=self.maxsize))

    def __reduce__(self) -> tuple[type[Queue[Any]], tuple[Any, None, int]]:
        return (Queue, (self.name, None, self.maxsize))

    def __repr__(self) -> str:
        return f"<Queue: {self.name}>"
