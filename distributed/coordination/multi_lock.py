"""``distributed.MultiLock``: several cluster-wide locks taken together, all or none."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dask.utils import parse_timedelta

from distributed.client.base import AsyncT
from distributed.client.dual import Work, dual_method
from distributed.coordination.names import check_name, normalize_name
from distributed.coordination.primitive import Acquirable
from distributed.protocol import coordination_messages as cm

if TYPE_CHECKING:
    from distributed.client import Client

__all__ = ["MultiLock"]


class MultiLock(Acquirable[AsyncT], noun="lock"):
    """Several locks, by name, taken together: all of them (or ``num_locks`` of them) or none.

    Requests are served in arrival order: a request waits behind every
    earlier request for any of its names, and holds nothing until it holds
    enough, so two MultiLocks over the same names in different orders never
    deadlock.  These locks are apart from :class:`~distributed.Lock` objects
    of the same names.  A holder whose client leaves the scheduler (its
    process died, say) loses them.

    Parameters
    ----------
    names
        The names of the locks: strings, bytes, numbers, or lists or tuples
        of those (duplicates count once).
    client
        The client to use (default: the worker's client inside a task, else
        the default client, found when first used).

    Examples
    --------
    >>> lock = MultiLock(["x", "y"])  # doctest: +SKIP
    >>> with lock:  # doctest: +SKIP
    ...     ...  # holds both x and y
    """

    def __init__(self, names: Iterable[Any] = (), client: Client[AsyncT] | None = None) -> None:
        super().__init__(client)
        self.names: list[Any] = [check_name(n) for n in names]
        self.id = uuid.uuid4().hex
        self._locked = False

    @dual_method
    def acquire(
        self, blocking: bool = True, timeout: float | str | timedelta | None = None, num_locks: int | None = None
    ) -> Work[bool]:
        """Acquire the locks.

        Parameters
        ----------
        blocking
            False: do not wait at all if they are not free.
        timeout
            Longest wait (seconds, a string such as ``"200ms"``, or a
            ``timedelta``); None waits for as long as it takes.  Forbidden
            together with ``blocking=False``.
        num_locks
            How many of the locks to hold (default: all).

        Returns
        -------
        bool
            Whether the locks were acquired (an awaitable of it with an
            asynchronous client).

        Raises
        ------
        ValueError
            For ``blocking=False`` with a ``timeout``, or ``num_locks`` out of range.
        RuntimeError
            When this object holds its locks already.
        """
        t = parse_timedelta(timeout) if timeout is not None else None
        if not blocking:
            if t is not None:
                raise ValueError("can't specify a timeout for a non-blocking call")
            t = 0.0
        distinct = len({normalize_name(name) for name in self.names})
        n = distinct if num_locks is None else num_locks
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= distinct:
            raise ValueError(f"num_locks must be between 1 and the number of names ({distinct}), got {n!r}")
        if self._locked:
            raise RuntimeError(f"{self!r} is held already")
        return functools.partial(self._acquire, t, n)

    async def _acquire(self, timeout: float | None, num_locks: int) -> bool:
        client = self.client
        msg = cm.MultiLockAcquire(
            op="multi_lock_acquire",
            names=self.names,
            id=self.id,
            num_locks=num_locks,
            timeout=timeout,
            client=client.id,
        )
        self._locked = bool(await client.scheduler.call(msg))
        return self._locked

    @dual_method
    def release(self) -> Work[Any]:
        """Release the locks (an awaitable with an asynchronous client).

        Raises
        ------
        ValueError
            When this object does not hold its locks.
        """
        if not self._locked:
            raise ValueError(f"{self!r} is not held")
        self._locked = False
        return self._request(cm.MultiLockRelease(op="multi_lock_release", id=self.id))

    def locked(self) -> bool:
        """Whether this object holds its locks."""
        return self._locked

    def _acquiring(self) -> Work[bool]:
        return MultiLock.acquire.body(self)

    def _releasing(self) -> Work[Any]:
        return MultiLock.release.body(self)

    def __reduce__(self) -> tuple[type[MultiLock[Any]], tuple[list[Any]]]:
        return (MultiLock, (self.names,))

    def __repr__(self) -> str:
        return f"<MultiLock: names={self.names}>"
