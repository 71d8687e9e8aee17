"""The Client's sync/async return types: checked by mypy (``assert_type``) and at run time."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import Any, Literal, assert_type

import dask.array as da
import dask.bag as db

from distributed import Client, Event, Future, LocalCluster, Lock, MultiLock, Queue, Semaphore, Variable, WorkerPlugin
from distributed.client.client import SchedulerHandle
from distributed.protocol import coordination_messages as cm
from distributed.protocol import messages as m
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster, inc
from distributed.worker import Worker


def sync_client_types(c: Client[Literal[False]], x: da.Array, b: db.Bag) -> None:
    """A synchronous client returns values (checked by mypy only)."""
    assert_type(c.compute(x), Future)
    assert_type(c.compute([x, x]), list[Future])
    assert_type(c.compute((x, x)), list[Future])
    assert_type(c.compute(x, sync=True), Any)
    assert_type(c.persist(x), da.Array)
    assert_type(c.persist(b), db.Bag)
    assert_type(c.persist([x, x]), list[da.Array])
    assert_type(c.get({"k": 1}, "k"), Any)
    assert_type(c.get({"k": 1}, "k", sync=False), Future)
    assert_type(c.get({"k": 1}, ["k"], sync=False), list[Any])
    assert_type(c.get({"k": 1}, "k", asynchronous=True), Awaitable[Any])
    assert_type(c.nthreads(), dict[str, int])
    assert_type(c.who_has(), dict[Key, list[str]])
    assert_type(c.has_what(), dict[str, list[Key]])
    assert_type(c.scheduler_info(), dict[str, Any])
    assert_type(c.run(inc, 1), dict[str, Any])
    assert_type(c.run(inc, 1, wait=False), None | Awaitable[None])
    assert_type(c.cancel([]), None)
    assert_type(c.close(), None)
    assert_type(c.get_versions(), dict[str, Any])
    assert_type(c.wait_for_workers(1), None)
    assert_type(c.register_plugin(WorkerPlugin()), str | dict[str, Any])
    assert_type(c.unregister_worker_plugin("p"), dict[str, Any])
    # Asked for explicitly, an awaitable.
    assert_type(c.nthreads(asynchronous=True), Awaitable[dict[str, int]])
    assert_type(c.gather([], asynchronous=True), Awaitable[Any])


async def async_client_types(c: Client[Literal[True]], x: da.Array) -> None:
    """An asynchronous client returns awaitables (checked by mypy only)."""
    # Futures and persisted collections come back at once, on either kind of client.
    assert_type(c.compute(x), Future)
    assert_type(c.compute([x]), list[Future])
    assert_type(c.persist(x), da.Array)
    assert_type(c.compute(x, sync=True), Awaitable[Any])
    assert_type(c.get({"k": 1}, "k"), Awaitable[Any])
    assert_type(c.get({"k": 1}, "k", sync=False), Future)
    assert_type(c.nthreads(), Awaitable[dict[str, int]])
    assert_type(await c.nthreads(), dict[str, int])
    assert_type(c.who_has(), Awaitable[dict[Key, list[str]]])
    assert_type(c.scheduler_info(), Awaitable[dict[str, Any]])
    assert_type(c.run(inc, 1), Awaitable[dict[str, Any]])
    assert_type(c.gather([]), Awaitable[Any])
    assert_type(c.scatter(1), Awaitable[Any])
    assert_type(c.cancel([]), Awaitable[None])
    assert_type(c.close(), Awaitable[None])
    assert_type(c.shutdown(), Awaitable[None])
    assert_type(c.get_versions(), Awaitable[dict[str, Any]])
    assert_type(c.register_plugin(WorkerPlugin()), Awaitable[str | dict[str, Any]])
    assert_type(c.unregister_worker_plugin("p"), Awaitable[dict[str, Any]])


def sync_primitive_types(c: Client[Literal[False]]) -> None:
    """Primitives given a synchronous client return values (checked by mypy only)."""
    lock = Lock("x", client=c)
    assert_type(lock, Lock[Literal[False]])
    assert_type(lock.acquire(), bool)
    assert_type(lock.acquire(timeout="1s"), bool)
    assert_type(lock.release(), None)
    assert_type(lock.locked(), bool)
    assert_type(lock.acquire(asynchronous=True), Awaitable[bool])
    sem = Semaphore(2, "s", client=c)
    assert_type(sem.acquire(), bool)
    assert_type(sem.release(), bool)
    assert_type(sem.get_value(), int)
    assert_type(MultiLock(["a", "b"], client=c).acquire(num_locks=1), bool)
    q = Queue("q", client=c)
    assert_type(q.put(1), None)
    assert_type(q.get(), Any)
    assert_type(q.qsize(), int)
    v = Variable("v", client=c)
    assert_type(v.set(1), None)
    assert_type(v.get(), Any)
    assert_type(v.delete(), None)
    e = Event("e", client=c)
    assert_type(e.set(), None)
    assert_type(e.wait(1), bool)
    assert_type(e.is_set(), bool)


async def async_primitive_types(c: Client[Literal[True]]) -> None:
    """Primitives given an asynchronous client return awaitables (checked by mypy only)."""
    lock = Lock("x", client=c)
    assert_type(lock, Lock[Literal[True]])
    assert_type(lock.acquire(), Awaitable[bool])
    assert_type(await lock.acquire(timeout=1), bool)
    assert_type(lock.release(), Awaitable[None])
    assert_type(Semaphore(client=c).get_value(), Awaitable[int])
    assert_type(Queue(client=c).qsize(), Awaitable[int])
    assert_type(Variable(client=c).get(), Awaitable[Any])
    assert_type(Event(client=c).is_set(), Awaitable[bool])
    assert_type(Event(client=c).is_set(asynchronous=False), bool)
    async with Lock("y", client=c) as held:
        assert_type(held, Lock[Literal[True]])


def unknown_mode_primitive_types() -> None:
    """A primitive made without a client finds one when used: its form is not known statically."""
    lock = Lock("x")
    assert_type(lock.acquire(), Any)
    assert_type(Queue().get(), Any)


@gen_cluster(client=True)
async def test_primitives_return_awaitables_on_an_async_client(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    lock = Lock("x", client=c)
    call = lock.acquire()
    assert inspect.isawaitable(call)
    assert await call is True
    assert await lock.locked() is True
    await lock.release()
    q = Queue("q", client=c)
    await q.put(1)
    assert await q.qsize() == 1
    assert await q.get() == 1
    e = Event("e", client=c)
    await e.set()
    assert await e.is_set() is True
    assert "asynchronous" in str(inspect.signature(lock.acquire))


def construction_types() -> None:
    """The constructor fixes the mode statically (checked by mypy only)."""
    with Client("tcp://127.0.0.1:1", timeout=0.1) as c:
        assert_type(c, Client[Literal[False]])


async def async_construction_types() -> None:
    async with Client("tcp://127.0.0.1:1", asynchronous=True, timeout=0.1) as c:
        assert_type(c, Client[Literal[True]])


@gen_cluster(client=True)
async def test_async_client_returns_awaitables(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    for call in (
        c.nthreads(),
        c.who_has(),
        c.has_what(),
        c.processing(),
        c.nbytes(),
        c.scheduler_info(),
        c.story(),
        c.run(inc, 1),
        c.retire_workers([]),
        c.get_versions(),
        c.wait_for_workers(2),
    ):
        assert inspect.isawaitable(call)
        await call


@gen_cluster(client=True)
async def test_compute_persist_get_shapes_on_an_async_client(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    x = da.ones(4, chunks=2)
    assert isinstance(c.compute(x), Future)
    fs = c.compute([x, x.sum()])
    assert isinstance(fs, list) and all(isinstance(f, Future) for f in fs)
    persisted = c.persist(x)
    assert isinstance(persisted, da.Array)
    both = c.persist((x, x + 1))
    assert isinstance(both, list) and all(isinstance(p, da.Array) for p in both)
    computed = c.compute(x.sum(), sync=True)
    assert inspect.isawaitable(computed)
    assert await computed == 4
    got = c.get({"k": (inc, 1)}, "k")
    assert inspect.isawaitable(got)
    assert await got == 2
    future = c.get({"j": (inc, 2)}, "j", sync=False)
    assert isinstance(future, Future)
    assert await future == 3


def test_compute_persist_get_shapes_on_a_sync_client() -> None:
    x = da.ones(4, chunks=2)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as c:
            assert c.compute(x.sum(), sync=True) == 4
            assert c.compute([x.sum(), x.max()], sync=True) == [4, 1]
            assert c.compute(x.sum()).result() == 4
            assert c.persist(x).sum().compute() == 4
            assert c.get({"k": (inc, 1)}, "k") == 2
            assert c.get({"k": (inc, 1), "j": (inc, "k")}, [["k"], "j"]) == [[2], 3]


@gen_cluster(client=True, nthreads=[])
async def test_scheduler_handle_sends_a_declared_request(c: Client[Literal[True]], s: Scheduler) -> None:
    assert_type(c.scheduler, SchedulerHandle)
    assert c.scheduler.address == s.address
    assert await c.scheduler.call(cm.LockLocked(op="lock_locked", name="free")) is False
    assert await c.scheduler.call(m.WorkersRequest(op="nthreads")) == {}
