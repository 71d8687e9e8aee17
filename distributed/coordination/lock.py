"""``distributed.Lock``: a lock shared by every client and task of a cluster.

dask uses it through ``get_scheduler_lock`` (for example to write one HDF5
file from many tasks), so a ``Lock()`` is constructible with no client at all,
binds to one lazily (the worker's client inside a task, else the default
client), and pickles by name.

Each successful acquisition takes a fresh lease id, so one ``Lock`` object
shared by threads excludes them from each other as it excludes other objects
of the same name; the leases this object holds are released first in, first
out.  Leases end when their holder dies, as a Semaphore's do (see
:mod:`distributed.coordination.leases`).
"""

from __future__ import annotations

import functools
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dask.utils import parse_timedelta

from distributed.client.base import AsyncT
from distributed.client.dual import Work, dual_method
from distributed.coordination.lease_holder import LeaseHolder
from distributed.coordination.names import name_or_new
from distributed.protocol import coordination_messages as cm
from distributed.utils import unsupported

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["Lock"]


class Lock(LeaseHolder[AsyncT], noun="lock"):
    """A lock shared by every client and task of a cluster.

    A holder that dies loses the lock: when its client leaves the scheduler,
    or when it has not refreshed its lease for
    ``distributed.scheduler.locks.lease-timeout``.  A holder alive but too
    busy to refresh for that long (its event loop blocked) can lose it too.

    Parameters
    ----------
    name
        Locks with the same name are the same lock: a string, bytes, a number,
        or a list or tuple of those (default: a new random name).
    client
        The client to use (default: the worker's client inside a task, else
        the default client, found when first used).
    scheduler_rpc, loop
        Accepted for signature compatibility; only None is supported.

    Examples
    --------
    >>> lock = Lock("x")  # doctest: +SKIP
    >>> with lock:  # doctest: +SKIP
    ...     ...  # only one holder at a time, cluster-wide
    >>> lock.acquire(timeout="200ms")  # doctest: +SKIP
    True
    """

    def __init__(
        self, name: Any = None, client: Client[AsyncT] | None = None, scheduler_rpc: Any = None, loop: Any = None
    ) -> None:
        if scheduler_rpc is not None:
            raise unsupported("Lock", "scheduler_rpc", "give client= instead")
        if loop is not None:
            raise unsupported("Lock", "loop", "the lock uses its client's loop")
        super().__init__(client)
        self.name: Any = name_or_new(name, "lock")

    async def _refresh(self, ids: list[str]) -> None:
        await self.client.scheduler.call(cm.LockRefresh(op="lock_refresh_leases", name=self.name, ids=ids))

    @property
    def id(self) -> str | None:
        """The lease id this object holds the lock by (None when it holds none)."""
        held = self._held()
        return held[0] if held else None

    @dual_method
    def acquire(self, blocking: bool = True, timeout: float | str | timedelta | None = None) -> Work[bool]:
        """Acquire the lock.

        Parameters
        ----------
        blocking
            False: do not wait at all if someone else holds the lock.
        timeout
            Longest wait in the scheduler (seconds, or a string such as
            ``"200ms"``, or a ``timedelta``); None waits for as long as it takes.
            Forbidden together with ``blocking=False``.

        Returns
        -------
        bool
            Whether the lock was acquired (an awaitable of it with an
            asynchronous client).

        Raises
        ------
        ValueError
            For ``blocking=False`` with a ``timeout``.
        """
        t = parse_timedelta(timeout) if timeout is not None else None
        if not blocking:
            if t is not None:
                raise ValueError("can't specify a timeout for a non-blocking call")
            t = 0.0
        return functools.partial(self._acquire, t)

    async def _acquire(self, timeout: float | None) -> bool:
        lease = uuid.uuid4().hex
        msg = cm.LockAcquire(op="lock_acquire", name=self.name, id=lease, timeout=timeout, client=self.client.id)
        return await self._take(lease, msg)

    @dual_method
    def release(self) -> Work[None]:
        """Release the lock (an awaitable with an asynchronous client).

        Raises
        ------
        RuntimeError
            When this object does not hold the lock.
        """
        lease = self._pop_oldest(f"Released too often: {self!r} is not held")
        return functools.partial(self._release, lease)

    async def _release(self, lease: str) -> None:
        await self._give_back(cm.LockRelease(op="lock_release", name=self.name, id=lease))

    @dual_method
    def locked(self) -> Work[bool]:
        """Whether anyone holds the lock (an awaitable with an asynchronous client)."""
        return self._request(cm.LockLocked(op="lock_locked", name=self.name))

    def _acquiring(self) -> Work[bool]:
        return Lock.acquire.body(self)

    def _releasing(self) -> Work[None]:
        return Lock.release.body(self)

    def __reduce__(self) -> tuple[type[Lock[Any]], tuple[Any]]:
        return (Lock, (self.name,))

    def __repr__(self) -> str:
        return f"<Lock: {self.name}>"
