"""distributed.MultiLock: several locks taken together, all or none, first come first served."""

from __future__ import annotations

import asyncio
import pickle
import threading
import time

import pytest

import distributed
from distributed import Client, LocalCluster, MultiLock, Scheduler, Worker
from distributed.coordination import MultiLockExtension
from distributed.scheduler.extensions import DEFAULT_EXTENSIONS
from distributed.utils_test import async_poll_for, gen_cluster


def test_multilock_import_paths() -> None:
    assert distributed.MultiLock is MultiLock
    assert DEFAULT_EXTENSIONS["multi_locks"] is MultiLockExtension


def _idle(ext: MultiLockExtension) -> bool:
    return not (ext.queues or ext.requests or ext.granted or ext.waiting or ext.clients or ext.clock.leases)


@gen_cluster(client=True)
async def test_all_or_none(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    ext = s.extensions["multi_locks"]
    assert isinstance(ext, MultiLockExtension)
    xy = MultiLock(["x", "y"], client=c)
    assert await xy.acquire() is True
    assert xy.locked() is True
    yz = MultiLock(["y", "z"], client=c)
    assert await yz.acquire(timeout=0.05) is False
    assert await yz.acquire(blocking=False) is False
    # z alone is free: a failed yz took nothing, not even z.
    z = MultiLock(["z"], client=c)
    assert await z.acquire(blocking=False) is True
    await z.release()
    waiting = asyncio.ensure_future(yz.acquire(timeout=10))
    await async_poll_for(lambda: yz.id in ext.waiting, timeout=5)
    await xy.release()
    assert xy.locked() is False
    assert await waiting is True
    await yz.release()
    assert _idle(ext)
    with pytest.raises(ValueError, match="not held"):
        yz.release()
    with pytest.raises(ValueError, match="non-blocking"):
        xy.acquire(blocking=False, timeout=1)


@gen_cluster(client=True)
async def test_first_come_first_served(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    """A waiting request keeps later ones off its free names: they cannot overtake it."""
    ext = s.extensions["multi_locks"]
    x = MultiLock(["x"], client=c)
    assert await x.acquire() is True
    xy = MultiLock(["x", "y"], client=c)
    first = asyncio.ensure_future(xy.acquire(timeout=10))
    await async_poll_for(lambda: xy.id in ext.waiting, timeout=5)
    y = MultiLock(["y"], client=c)
    assert await y.acquire(timeout=0.05) is False  # y is free, but xy came first
    second = asyncio.ensure_future(y.acquire(timeout=10))
    await async_poll_for(lambda: y.id in ext.waiting, timeout=5)
    await x.release()
    assert await first is True
    assert not second.done()
    await xy.release()
    assert await second is True
    await y.release()
    assert _idle(ext)


@gen_cluster(client=True)
async def test_num_locks(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    ext = s.extensions["multi_locks"]
    x = MultiLock(["x"], client=c)
    await x.acquire()
    two_of_three = MultiLock(["x", "y", "z"], client=c)
    assert await two_of_three.acquire(num_locks=2, timeout=1) is True
    assert ext.requests[two_of_three.id][0] == ["y", "z"]
    assert await MultiLock(["z"], client=c).acquire(blocking=False) is False
    await two_of_three.release()
    await x.release()
    assert _idle(ext)
    for bad in (0, 4):
        with pytest.raises(ValueError, match="num_locks"):
            two_of_three.acquire(num_locks=bad)


_holding: set[str] = set()
_clash = threading.Event()
_guard = threading.Lock()


def _critical(i: int, names: list[str]) -> int:
    with MultiLock(names):
        with _guard:
            if _holding & set(names):
                _clash.set()
            _holding.update(names)
        time.sleep(0.01)  # overlap with other threads if the locks let them in
        with _guard:
            _holding.difference_update(names)
    return i


@gen_cluster(client=True, nthreads=[("127.0.0.1", 4)])
async def test_multilock_excludes_tasks_without_deadlock(c: Client, s: Scheduler, a: Worker) -> None:
    _holding.clear()
    _clash.clear()
    orders = [["a", "b"], ["b", "a"], ["b", "c"], ["c", "a"]]
    futures = c.map(_critical, range(16), [orders[i % 4] for i in range(16)])
    assert await c.gather(futures) == list(range(16))
    assert not _clash.is_set()
    assert _idle(s.extensions["multi_locks"])
    copy = pickle.loads(pickle.dumps(MultiLock(["a", "b"])))
    assert copy.names == ["a", "b"] and not copy.locked()


def test_multilock_on_a_synchronous_client() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            lock = MultiLock(["p", "q"], client=client)
            assert lock.acquire() is True
            assert MultiLock(["q"], client=client).acquire(timeout=0.05) is False
            assert lock.release() is None
            with lock:
                assert lock.locked()
            assert not lock.locked()


@gen_cluster(client=True, config={"distributed.scheduler.locks.lease-validation-interval": "20ms"})
async def test_multilock_freed_when_its_client_leaves(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    c2 = await Client(s.address, asynchronous=True)
    try:
        assert await MultiLock(["x", "y"], client=c2).acquire() is True
        waiting = asyncio.ensure_future(MultiLock(["y"], client=c).acquire(timeout=10))
        await async_poll_for(lambda: len(s.extensions["multi_locks"].waiting) == 1, timeout=5)
    finally:
        await c2.close()
    assert await waiting is True
    assert s.extensions["multi_locks"].queues == {"y": [next(iter(s.extensions["multi_locks"].granted))]}
