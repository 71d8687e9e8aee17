"""``distributed.Semaphore``: at most ``max_leases`` holders at once, cluster-wide.

Each successful acquisition takes a lease of its own, which this object
refreshes while it holds it (see :mod:`distributed.coordination.leases`): a
holder that dies, or whose client leaves, loses its leases, so a crashed task
does not keep others out for ever.  Leases are released first in, first out.
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

__all__ = ["Semaphore"]


class Semaphore(LeaseHolder[AsyncT], noun="semaphore"):
    """A semaphore shared by every client and task of a cluster: at most ``max_leases`` holders at once.

    Leases of a holder that dies end: when its client leaves the scheduler,
    or when the holder has not refreshed them for
    ``distributed.scheduler.locks.lease-timeout`` (checked every
    ``distributed.scheduler.locks.lease-validation-interval``).  A holder
    that is alive but too busy to refresh (its event loop blocked longer
    than the timeout) can lose its lease too: then more than ``max_leases``
    holders may run at once.

    Parameters
    ----------
    max_leases
        How many holders at once.  Every semaphore of one name must agree.
    name
        Semaphores with the same name are the same semaphore: a string,
        bytes, a number, or a list or tuple of those (default: a new random name).
    scheduler_rpc, loop
        Accepted for signature compatibility; only None is supported.
    client
        The client to use (default: the worker's client inside a task, else
        the default client, found when first used).

    Examples
    --------
    >>> sem = Semaphore(max_leases=2, name="database")  # doctest: +SKIP
    >>> with sem:  # doctest: +SKIP
    ...     ...  # at most two holders at a time, cluster-wide
    """

    def __init__(
        self,
        max_leases: int = 1,
        name: Any = None,
        scheduler_rpc: Any = None,
        loop: Any = None,
        *,
        client: Client[AsyncT] | None = None,
    ) -> None:
        if scheduler_rpc is not None:
            raise unsupported("Semaphore", "scheduler_rpc", "give client= instead")
        if loop is not None:
            raise unsupported("Semaphore", "loop", "the semaphore uses its client's loop")
        if isinstance(max_leases, bool) or not isinstance(max_leases, int) or max_leases < 1:
            raise ValueError(f"max_leases must be a positive int, got {max_leases!r}")
        super().__init__(client)
        self.max_leases = max_leases
        self.name: Any = name_or_new(name, "semaphore")
        self._closed = False

    async def _refresh(self, ids: list[str]) -> None:
        await self.client.scheduler.call(cm.SemaphoreRefresh(op="semaphore_refresh_leases", name=self.name, ids=ids))

    @dual_method
    def acquire(self, timeout: float | str | timedelta | None = None) -> Work[bool]:
        """Take a lease, waiting for one to be free.

        Parameters
        ----------
        timeout
            Longest wait (seconds, a string such as ``"200ms"``, or a
            ``timedelta``); None waits for as long as it takes.

        Returns
        -------
        bool
            Whether a lease was taken (an awaitable of it with an asynchronous client).

        Raises
        ------
        ValueError
            When the semaphore exists with another ``max_leases``.
        RuntimeError
            When this object was closed.
        """
        if self._closed:
            raise RuntimeError(f"{self!r} was closed")
        t = parse_timedelta(timeout) if timeout is not None else None
        return functools.partial(self._acquire, t)

    async def _acquire(self, timeout: float | None) -> bool:
        lease = uuid.uuid4().hex
        msg = cm.SemaphoreAcquire(
            op="semaphore_acquire",
            name=self.name,
            id=lease,
            max_leases=self.max_leases,
            timeout=timeout,
            client=self.client.id,
        )
        return await self._take(lease, msg)

    @dual_method
    def release(self) -> Work[bool]:
        """Give the oldest lease of this object back.

        Returns
        -------
        bool
            True; False when the lease had ended already (its holder was
            taken for dead).  An awaitable of it with an asynchronous client.

        Raises
        ------
        RuntimeError
            When this object holds no lease.
        """
        lease = self._pop_oldest(f"Released too often: {self!r} holds no lease")
        return functools.partial(self._release, lease)

    async def _release(self, lease: str) -> bool:
        return bool(await self._give_back(cm.SemaphoreRelease(op="semaphore_release", name=self.name, id=lease)))

    @dual_method
    def get_value(self) -> Work[int]:
        """How many leases are held, by anyone (an awaitable with an asynchronous client)."""
        return self._request(cm.SemaphoreValue(op="semaphore_value", name=self.name))

    @dual_method
    def close(self) -> Work[None]:
        """Remove the semaphore from the scheduler: every lease ends, waiters get none.

        This object cannot acquire again; a new ``Semaphore`` of the same
        name starts the semaphore afresh.  An awaitable with an asynchronous
        client.
        """
        self._closed = True
        return self._close

    async def _close(self) -> None:
        self._drop_all()
        await self.client.scheduler.call(cm.SemaphoreClose(op="semaphore_close", name=self.name))

    def _acquiring(self) -> Work[bool]:
        return Semaphore.acquire.body(self)

    def _releasing(self) -> Work[bool]:
        return Semaphore.release.body(self)

    def __reduce__(self) -> tuple[type[Semaphore[Any]], tuple[int, Any]]:
        return (Semaphore, (self.max_leases, self.name))

    def __repr__(self) -> str:
        return f"<Semaphore: {self.name} max_leases={self.max_leases}>"
