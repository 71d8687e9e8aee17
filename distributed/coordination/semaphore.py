"""``distributed.Semaphore``: at most ``max_leases`` holders at once, cluster-wide.

Each successful acquisition takes a lease of its own, which this object
refreshes while it holds it (see :mod:`distributed.coordination.leases`): a
holder that dies, or whose client leaves, loses its leases, so a crashed task
does not keep others out for ever.  Leases are released first in, first out.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dask.utils import parse_timedelta

from distributed.coordination.leases import LeaseKeeper
from distributed.coordination.names import check_name
from distributed.protocol import messages as m
from distributed.utils import unsupported

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["Semaphore"]


class Semaphore:
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
        client: Client | None = None,
    ) -> None:
        if scheduler_rpc is not None:
            raise unsupported("Semaphore", "scheduler_rpc", "give client= instead")
        if loop is not None:
            raise unsupported("Semaphore", "loop", "the semaphore uses its client's loop")
        if isinstance(max_leases, bool) or not isinstance(max_leases, int) or max_leases < 1:
            raise ValueError(f"max_leases must be a positive int, got {max_leases!r}")
        self.max_leases = max_leases
        self.name: Any = check_name(name) if name is not None else f"semaphore-{uuid.uuid4().hex}"
        self._client = client
        self._leases: deque[str] = deque()
        self._leases_lock = threading.Lock()
        self._keeper = LeaseKeeper(self._held, self._refresh)
        self._closed = False

    @property
    def client(self) -> Client:
        """The client this semaphore talks through."""
        if self._client is None:
            from distributed.worker import get_client

            self._client = get_client()
        return self._client

    def _held(self) -> list[str]:
        with self._leases_lock:
            return list(self._leases)

    async def _refresh(self, ids: list[str]) -> None:
        await self.client.scheduler.call(m.SemaphoreRefresh(op="semaphore_refresh_leases", name=self.name, ids=ids))

    def acquire(self, timeout: float | str | timedelta | None = None) -> Any:
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
        return self.client.sync(self._acquire, t)

    async def _acquire(self, timeout: float | None) -> bool:
        client = self.client
        lease = uuid.uuid4().hex
        msg = m.SemaphoreAcquire(
            op="semaphore_acquire",
            name=self.name,
            id=lease,
            max_leases=self.max_leases,
            timeout=timeout,
            client=client.id,
        )
        acquired = bool(await client.scheduler.call(msg))
        if acquired:
            with self._leases_lock:
                self._leases.append(lease)
            self._keeper.start()
        return acquired

    def release(self) -> Any:
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
        with self._leases_lock:
            if not self._leases:
                raise RuntimeError(f"Released too often: {self!r} holds no lease")
            lease = self._leases.popleft()
        return self.client.sync(self._release, lease)

    async def _release(self, lease: str) -> bool:
        if not self._held():
            self._keeper.stop()
        msg = m.SemaphoreRelease(op="semaphore_release", name=self.name, id=lease)
        return bool(await self.client.scheduler.call(msg))

    def get_value(self) -> Any:
        """How many leases are held, by anyone (an awaitable with an asynchronous client)."""
        return self.client.sync(self._get_value)

    async def _get_value(self) -> int:
        n: int = await self.client.scheduler.call(m.SemaphoreValue(op="semaphore_value", name=self.name))
        return n

    def close(self) -> Any:
        """Remove the semaphore from the scheduler: every lease ends, waiters get none.

        This object cannot acquire again; a new ``Semaphore`` of the same
        name starts the semaphore afresh.  An awaitable with an asynchronous
        client.
        """
        self._closed = True
        return self.client.sync(self._close)

    async def _close(self) -> None:
        with self._leases_lock:
            self._leases.clear()
        self._keeper.stop()
        await self.client.scheduler.call(m.SemaphoreClose(op="semaphore_close", name=self.name))

    def __enter__(self) -> Semaphore:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> Semaphore:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    def __reduce__(self) -> tuple[type[Semaphore], tuple[int, Any]]:
        return (Semaphore, (self.max_leases, self.name))

    def __repr__(self) -> str:
        return f"<Semaphore: {self.name} max_leases={self.max_leases}>"
