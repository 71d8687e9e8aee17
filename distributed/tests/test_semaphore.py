"""distributed.Semaphore: at most max_leases holders, from clients and tasks, with timeouts."""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from typing import Any

import dask
import pytest

import distributed
from distributed import Client, LocalCluster, Scheduler, Semaphore, Worker
from distributed.coordination import SemaphoreExtension
from distributed.scheduler.extensions import DEFAULT_EXTENSIONS
from distributed.utils_test import async_poll_for, gen_cluster


def test_semaphore_import_paths() -> None:
    assert distributed.Semaphore is Semaphore
    assert DEFAULT_EXTENSIONS["semaphores"] is SemaphoreExtension


def test_semaphore_refuses_what_it_does_not_honour() -> None:
    with pytest.raises(NotImplementedError, match="scheduler_rpc"):
        Semaphore(name="x", scheduler_rpc=object())
    with pytest.raises(NotImplementedError, match="loop"):
        Semaphore(name="x", loop=object())
    bad: list[Any] = [0, -1, 1.5, True]
    for value in bad:
        with pytest.raises(ValueError, match="max_leases"):
            Semaphore(max_leases=value)
    with pytest.raises(TypeError, match="name"):
        Semaphore(name=object())


@gen_cluster(client=True)
async def test_leases_are_limited_and_handed_over(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    ext = s.extensions["semaphores"]
    assert isinstance(ext, SemaphoreExtension)
    sem = Semaphore(max_leases=2, name="x", client=c)
    assert await sem.acquire() is True
    assert await sem.acquire(timeout="1s") is True
    assert await sem.get_value() == 2
    other = Semaphore(max_leases=2, name="x", client=c)
    for timeout in (0, 0.05):
        assert await other.acquire(timeout=timeout) is False
    assert not ext.waiters
    waiting = asyncio.ensure_future(other.acquire(timeout=10))
    await async_poll_for(lambda: bool(ext.waiters.get("x")), timeout=5)
    assert await sem.release() is True
    assert await waiting is True
    assert await sem.get_value() == 2
    await sem.release()
    await other.release()
    assert await sem.get_value() == 0
    with pytest.raises(RuntimeError, match="Released too often"):
        sem.release()
    with pytest.raises(ValueError, match="max_leases=2"):
        await Semaphore(max_leases=3, name="x", client=c).acquire()
    assert not ext.leases and not ext.waiters and not ext.clock.leases


@gen_cluster(client=True)
async def test_context_managers_and_close(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    ext = s.extensions["semaphores"]
    sem = Semaphore(name="x", client=c)
    async with sem:
        assert await sem.get_value() == 1
    assert await sem.get_value() == 0
    await sem.acquire()
    waiting = asyncio.ensure_future(Semaphore(name="x", client=c).acquire(timeout=10))
    await async_poll_for(lambda: bool(ext.waiters.get("x")), timeout=5)
    await sem.close()
    assert await waiting is False  # closed: no lease for the waiter
    assert not ext.max_leases and not ext.leases and not ext.clock.leases
    with pytest.raises(RuntimeError, match="closed"):
        sem.acquire()
    # A new object starts the semaphore afresh, with any max_leases.
    again = Semaphore(max_leases=3, name="x", client=c)
    assert await again.acquire() is True
    await again.release()


@gen_cluster(
    client=True,
    config={
        "distributed.scheduler.locks.lease-timeout": "1s",
        "distributed.scheduler.locks.lease-validation-interval": "20ms",
    },
)
async def test_lease_lives_while_refreshed_and_ends_when_not(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    ext = s.extensions["semaphores"]
    holder = Semaphore(name="x", client=c)
    assert await holder.acquire() is True
    other = Semaphore(name="x", client=c)
    # Longer than the lease timeout: the holder's refreshes keep the lease.
    assert await other.acquire(timeout=1.5) is False
    assert await holder.get_value() == 1
    # A holder that stops refreshing (its loop blocked, say) loses its lease.
    holder._keeper.stop()
    start = time.monotonic()
    assert await other.acquire(timeout=10) is True
    assert 0.8 < time.monotonic() - start < 10
    assert await holder.release() is False  # the lease had ended
    await other.release()
    assert not ext.leases and not ext.clock.leases


@gen_cluster(client=True, config={"distributed.scheduler.locks.lease-validation-interval": "20ms"})
async def test_lease_ends_when_its_client_leaves(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    c2 = await Client(s.address, asynchronous=True)
    try:
        assert await Semaphore(name="x", client=c2).acquire() is True
    finally:
        await c2.close()
    # The default lease timeout is 30 s: the lease ends because its client left.
    assert await Semaphore(name="x", client=c).acquire(timeout=5) is True


_running = [0, 0]  # holders now, most holders at once (in-process workers share them)
_guard = threading.Lock()


def _limited(i: int, sem: Semaphore) -> int:
    with sem:
        with _guard:
            _running[0] += 1
            _running[1] = max(_running[1], _running[0])
        time.sleep(0.02)  # overlap with the other threads if the semaphore let them in
        with _guard:
            _running[0] -= 1
    return i


@gen_cluster(client=True, nthreads=[("127.0.0.1", 4)])
async def test_semaphore_limits_tasks(c: Client, s: Scheduler, a: Worker) -> None:
    _running[:] = [0, 0]
    sem = Semaphore(max_leases=2, name="tasks", client=c)
    assert await c.gather(c.map(_limited, range(12), sem=sem)) == list(range(12))
    assert _running[1] == 2
    assert await sem.get_value() == 0
    copy = pickle.loads(pickle.dumps(sem))
    assert copy.name == "tasks" and copy.max_leases == 2


def test_semaphore_on_a_synchronous_client() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            sem = Semaphore(max_leases=1, name="sync", client=client)
            assert sem.acquire() is True
            assert sem.acquire(timeout=0.05) is False
            assert sem.get_value() == 1
            assert sem.release() is True
            with sem:
                assert sem.get_value() == 1

            def in_task() -> bool:
                inner = Semaphore(max_leases=1, name="sync")
                got: bool = inner.acquire(timeout=5)
                inner.release()
                return got

            assert client.submit(in_task).result() is True
            with dask.config.set({"distributed.scheduler.locks.lease-timeout": "inf"}):
                assert sem.acquire() is True  # no refreshes needed, none started
                assert sem.release() is True


@gen_cluster(client=True, nthreads=[])
async def test_primitives_are_awaitable_as_in_dask(c: Client, s: Scheduler) -> None:
    from distributed import Event, Lock, Queue

    sem = await Semaphore(max_leases=2, name="awaited", client=c)
    assert isinstance(sem, Semaphore) and await sem.acquire() and await sem.acquire()
    assert not await sem.acquire(timeout=0.05)
    lock = await Lock("awaited-lock", client=c)
    async with lock:
        assert await lock.locked()
    queue = await Queue("awaited-queue", client=c)
    await queue.put(1)
    assert await queue.get() == 1
    event = await Event("awaited-event", client=c)
    await event.set()
    assert await event.is_set()
