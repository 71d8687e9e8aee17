"""Coordination primitives (the cluster-wide Lock) and the scheduler's extension mechanism."""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import dask
import pytest

import distributed.lock
from distributed import Client, Lock, Scheduler, Worker
from distributed.comm import Comm
from distributed.coordination import LockExtension
from distributed.core import Route, rpc
from distributed.protocol import messages as m
from distributed.scheduler.extensions import DEFAULT_EXTENSIONS
from distributed.utils_test import async_poll_for, gen_cluster, gen_test


def test_lock_import_paths() -> None:
    assert distributed.lock.Lock is Lock
    assert distributed.Lock is Lock
    assert DEFAULT_EXTENSIONS["locks"] is LockExtension


# -- Lock -----------------------------------------------------------------------------------
@gen_cluster(client=True)
async def test_lock_excludes_and_hands_over(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    ext = s.extensions["locks"]
    assert isinstance(ext, LockExtension)
    lock = Lock("x", client=c)
    assert await lock.acquire() is True
    assert await lock.locked() is True
    other = Lock("x", client=c)
    assert await other.acquire(timeout=0.05) is False
    assert not ext.waiters  # a waiter that timed out is forgotten
    waiting = asyncio.ensure_future(other.acquire(timeout=10))
    await async_poll_for(lambda: bool(ext.waiters.get("x")), timeout=5)
    await lock.release()
    assert await waiting is True
    assert ext.holders["x"] == other.id
    await other.release()
    assert await lock.locked() is False
    assert not ext.holders and not ext.waiters


@gen_cluster(client=True)
async def test_lock_names_of_any_key_type(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    for name in [1, 1.5, ("a", 1), ["a", 1], b"123", "123", ("nested", ["a", (1, 2)])]:
        lock = Lock(name, client=c)
        assert lock.name == name
        assert await lock.acquire(timeout=1) is True
        assert await Lock(name, client=c).acquire(blocking=False) is False
        await lock.release()
    # A list and a tuple with the same items name the same lock (msgpack sends lists as tuples).
    async with Lock(["a", 1], client=c):
        assert await Lock(("a", 1), client=c).acquire(blocking=False) is False
    ext = s.extensions["locks"]
    assert not ext.holders and not ext.waiters


def test_lock_rejects_unsendable_names() -> None:
    with pytest.raises(TypeError, match="name"):
        Lock(object())
    with pytest.raises(TypeError, match="name"):
        Lock(("a", {"b": 1}))


def test_lock_refuses_parameters_it_does_not_honour() -> None:
    with pytest.raises(NotImplementedError, match="scheduler_rpc"):
        Lock("x", scheduler_rpc=object())
    with pytest.raises(NotImplementedError, match="loop"):
        Lock("x", loop=object())


@gen_cluster(client=True)
async def test_lock_timeouts_and_blocking(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    lock = Lock("x", client=c)
    assert await lock.acquire(blocking=False) is True
    await lock.release()
    for timeout in (0, "1s", timedelta(seconds=1)):
        assert await lock.acquire(timeout=timeout) is True
        await lock.release()
    with pytest.raises(ValueError, match="non-blocking"):
        lock.acquire(blocking=False, timeout=1)
    with pytest.raises(RuntimeError, match="Released too often"):
        await lock.release()


@gen_cluster(client=True)
async def test_lock_in_tasks_and_pickling(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    def f(x: int, lock: Lock) -> int:
        with lock:
            assert lock.name == "x"
            return x + 1

    lock = Lock("x", client=c)
    assert await c.gather(c.map(f, range(10), lock=lock)) == list(range(1, 11))
    copy = pickle.loads(pickle.dumps(lock))
    assert copy.name == "x" and copy.id is None
    assert not s.extensions["locks"].holders


def test_lock_on_a_synchronous_client(tmp_path: Path) -> None:
    """Results are values, not coroutines, for the caller and inside tasks; one object excludes threads."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=4, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            lock = Lock("x", client=client)
            assert lock.acquire(blocking=False) is True
            assert lock.locked() is True
            assert Lock("x", client=client).acquire(blocking=False) is False
            assert Lock("x", client=client).acquire(timeout=0.05) is False
            with pytest.raises(ValueError, match="non-blocking"):
                lock.acquire(blocking=False, timeout=1)
            assert lock.release() is None
            assert lock.locked() is False

            # One Lock object shared by threads: each acquisition is a lease of its own.
            counter = tmp_path / "counter"
            counter.write_text("0")

            def bump() -> None:
                for _ in range(5):
                    with lock:
                        n = int(counter.read_text())
                        time.sleep(0.002)  # widen the race window a missing lock would lose
                        counter.write_text(str(n + 1))

            threads = [threading.Thread(target=bump) for _ in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert counter.read_text() == "15"

            def in_task(x: int) -> Any:
                inner = Lock("y")
                got = inner.acquire(blocking=False)
                if got is True:
                    inner.release()
                return got

            assert client.submit(in_task, 1).result(timeout=30) is True


# -- the extension mechanism -------------------------------------------------------------------
class EchoExtension:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.calls = 0

    def routes(self) -> Mapping[str, Route[Any]]:
        return {"echo_ext": Route(m.Empty, self.echo)}

    def echo(self, comm: Comm, msg: m.Empty) -> str:
        self.calls += 1
        return self.scheduler.id


class ClashingExtension:
    def __init__(self, scheduler: Scheduler) -> None:
        pass

    def routes(self) -> Mapping[str, Route[Any]]:
        return {"identity": Route(m.Empty, lambda comm, msg: None)}


def test_extensions_register_their_routes_at_construction() -> None:
    s = Scheduler(extensions={"echo": EchoExtension})
    assert set(s.extensions) == {"echo"}
    assert "echo_ext" in s.handlers
    assert "lock_acquire" not in s.handlers  # an explicit mapping replaces the defaults
    default = Scheduler()
    assert set(default.extensions) == set(DEFAULT_EXTENSIONS)
    assert {"lock_acquire", "lock_release", "lock_locked"} <= set(default.handlers)


def test_extensions_are_checked() -> None:
    with pytest.raises(TypeError, match="mapping"):
        Scheduler(extensions=[EchoExtension])  # type: ignore[arg-type]  # the error under test
    with pytest.raises(ValueError, match="identity"):
        Scheduler(extensions={"clash": ClashingExtension})
    with dask.config.set({"distributed.scheduler.blocked-handlers": ["echo_ext"]}):
        s = Scheduler(extensions={"echo": EchoExtension})
    assert "echo_ext" not in s.handlers


@gen_test()
async def test_extension_routes_answer_requests() -> None:
    async with Scheduler(host="127.0.0.1", dashboard=False, extensions={"echo": EchoExtension}) as s:
        async with rpc(s.address) as r:
            assert await r.call("echo_ext") == s.id
        assert s.extensions["echo"].calls == 1


@gen_cluster(
    client=True,
    config={
        "distributed.scheduler.locks.lease-timeout": "1s",
        "distributed.scheduler.locks.lease-validation-interval": "20ms",
    },
)
async def test_lock_lease_refreshed_while_held_and_ends_when_not(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    ext = s.extensions["locks"]
    holder = Lock("x", client=c)
    assert await holder.acquire() is True
    other = Lock("x", client=c)
    assert await other.acquire(timeout=1.5) is False  # refreshes keep the lease past its timeout
    holder._keeper.stop()  # a holder that stops refreshing loses the lock
    assert await other.acquire(timeout=10) is True
    assert ext.holders["x"] == other.id
    await other.release()
    assert not ext.holders and not ext.clock.leases and not ext.waiting_clients


@gen_cluster(client=True, config={"distributed.scheduler.locks.lease-validation-interval": "20ms"})
async def test_lock_freed_when_its_client_leaves(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    c2 = await Client(s.address, asynchronous=True)
    try:
        assert await Lock("x", client=c2).acquire() is True
        waiting = asyncio.ensure_future(Lock("x", client=c).acquire(timeout=10))
        await async_poll_for(lambda: bool(s.extensions["locks"].waiters.get("x")), timeout=5)
    finally:
        await c2.close()
    assert await waiting is True
