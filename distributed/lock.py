"""A cluster-wide lock: ``distributed.lock.Lock``.

The scheduler side (:class:`LockExtension`) keeps, per lock name, the holder's
id and a queue of waiters; the client side (:class:`Lock`) asks to acquire and
release it.  dask uses it through ``get_scheduler_lock`` (for example to write
HDF files from many tasks), so a ``Lock()`` must be constructible with no
client at all, bind to one lazily, and survive pickling into tasks.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from dask.utils import parse_timedelta

from distributed.comm import Comm
from distributed.core import Route

if TYPE_CHECKING:
    from distributed.client import Client
    from distributed.scheduler import Scheduler

__all__ = ["Lock", "LockExtension"]


class LockAcquire(TypedDict):
    op: str
    name: str
    id: str
    timeout: NotRequired[float | None]


class LockRelease(TypedDict):
    op: str
    name: str
    id: str


class LockName(TypedDict):
    op: str
    name: str


class LockExtension:
    """Scheduler side of :class:`Lock`."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.holders: dict[str, str] = {}
        self.waiters: defaultdict[str, deque[tuple[str, asyncio.Future[None]]]] = defaultdict(deque)
        scheduler.handlers.update(
            {
                "lock_acquire": Route(LockAcquire, self.acquire),
                "lock_release": Route(LockRelease, self.release),
                "lock_locked": Route(LockName, self.locked),
            }
        )

    async def acquire(self, comm: Comm, msg: LockAcquire) -> bool:
        name, id_ = msg["name"], msg["id"]
        if self.holders.get(name) == id_:
            raise RuntimeError(f"Lock {name!r} is already held by this Lock object")
        if name not in self.holders:
            self.holders[name] = id_
            return True
        timeout = msg.get("timeout")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (id_, fut)
        self.waiters[name].append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            return True
        except TimeoutError:
            if fut.done():
                return True
            self.waiters[name].remove(entry)
            return False

    def release(self, comm: Comm, msg: LockRelease) -> bool:
        name, id_ = msg["name"], msg["id"]
        if self.holders.get(name) != id_:
            raise RuntimeError(f"Tried to release lock {name!r}, which is not held by this Lock object")
        waiters = self.waiters.get(name)
        if waiters:
            next_id, fut = waiters.popleft()
            self.holders[name] = next_id
            fut.set_result(None)
        else:
            del self.holders[name]
            self.waiters.pop(name, None)
        return True

    def locked(self, comm: Comm, msg: LockName) -> bool:
        return msg["name"] in self.holders


class Lock:
    """A lock shared by every client and task of a cluster.

    Parameters
    ----------
    name
        Locks with the same name are the same lock (default: a new name).
    client
        The client to use (default: found when first used).

    Examples
    --------
    >>> lock = Lock("x")  # doctest: +SKIP
    >>> with lock:  # doctest: +SKIP
    ...     ...  # only one holder at a time, cluster-wide
    """

    def __init__(
        self, name: str | None = None, client: Client | None = None, scheduler_rpc: Any = None, loop: Any = None
    ) -> None:
        self.name = name or f"lock-{uuid.uuid4().hex}"
        self.id = uuid.uuid4().hex
        self._client = client
        self._held = False

    @property
    def client(self) -> Client:
        """The client this lock talks through."""
        if self._client is None:
            from distributed.worker import get_client

            self._client = get_client()
        return self._client

    def acquire(self, blocking: bool = True, timeout: float | str | None = None) -> Any:
        """Acquire the lock; return whether it was acquired."""
        t = parse_timedelta(timeout) if timeout is not None else None
        if not blocking:
            t = 0.0
        client = self.client

        async def run() -> bool:
            result = await client._scheduler_call(
                {"op": "lock_acquire", "name": self.name, "id": self.id, "timeout": t}
            )
            self._held = bool(result)
            return self._held

        return client.sync(run)

    def release(self) -> Any:
        """Release the lock."""
        client = self.client

        async def run() -> None:
            await client._scheduler_call({"op": "lock_release", "name": self.name, "id": self.id})
            self._held = False

        return client.sync(run)

    def locked(self) -> Any:
        """Whether someone holds the lock."""
        return self.client.sync(self.client._scheduler_call, {"op": "lock_locked", "name": self.name})

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> Lock:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    def __reduce__(self) -> Any:
        return (Lock, (self.name,))

    def __repr__(self) -> str:
        return f"<Lock: {self.name}>"
