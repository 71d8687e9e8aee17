"""Calls that libraries built on dask.distributed make, as they make them.

Each case is one that a downstream project's own test suite (xgboost,
LightGBM, dask-ml, xarray) runs against the client and failed here.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Literal

import dask.array as da
import numpy as np
import pytest
from dask._task_spec import Task
from tornado.ioloop import IOLoop

from distributed import Client, futures_of, get_client, get_worker, wait
from distributed.core import Status, rpc
from distributed.scheduler import Scheduler
from distributed.utils import sync
from distributed.utils_test import gen_cluster, inc
from distributed.worker import Worker


@gen_cluster(client=True)
async def test_scheduler_requests_by_name(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    # xgboost: ``await client.scheduler.who_has(keys=...)`` and ``client.scheduler.identity()``.
    x = c.submit(inc, 1, key="x", workers=[a.address])
    await x
    # Sequences come back as msgpack gives them (tuples), as from dask's scheduler.
    assert await c.scheduler.who_has(keys=["x"]) == {"x": (a.address,)}
    info = await c.scheduler.identity()
    assert set(info["workers"]) == {a.address, b.address}
    assert await c.scheduler.ncores() == {a.address: 1, b.address: 2}
    assert await c.scheduler.ncores(workers=[b.address]) == {b.address: 2}
    assert await c.scheduler.ncores_running() == {a.address: 1, b.address: 2}


@gen_cluster(client=True)
async def test_scheduler_request_by_name_is_checked_by_the_scheduler(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    with pytest.raises(ValueError, match="no_such_request"):
        await c.scheduler.no_such_request(x=1)
    with pytest.raises(Exception, match="keys"):
        await c.scheduler.who_has(keys="x")
    with pytest.raises(AttributeError):
        c.scheduler._private
    # The client still works after both refusals.
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True)
async def test_ncores_running_leaves_out_a_paused_worker(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    s.workers[b.address].status = Status.paused
    assert await c.scheduler.ncores_running() == {a.address: 1}
    assert await c.scheduler.ncores() == {a.address: 1, b.address: 2}


@gen_cluster(client=True)
async def test_who_has_of_a_persisted_collection(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    # LightGBM: ``client.who_has(persisted)`` (released dask looks the futures up in the collection).
    x = c.persist(da.ones(10, chunks=5))
    await wait(x)
    keys = {f.key for f in futures_of(x)}
    assert len(keys) == 2
    who = await c.who_has(x)
    assert set(who) == keys
    assert all(who[k] for k in keys)
    assert await c.who_has(futures_of(x)) == who


@gen_cluster(client=True)
async def test_scattered_keys_are_named_by_the_type_s_short_name(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    # dask-ml checks ``key.startswith("ndarray-")``, as released dask names them.
    [f] = await c.scatter([np.arange(3)])
    assert f.key.startswith("ndarray-")
    [g] = await c.scatter([np.arange(3)], hash=False)
    assert g.key.startswith("ndarray-")
    assert (await c.scatter(5)).key.startswith("int-")


def test_get_takes_what_dask_store_passes_on_and_refuses_other_keywords() -> None:
    # xarray's to_netcdf/to_zarr call da.store(..., flush=True), which dask hands to the scheduler's get.
    with Client(processes=False, n_workers=1, dashboard_address=None) as c:
        with pytest.raises(NotImplementedError, match="not_a_keyword"):
            c.get({"x": (inc, 1)}, "x", not_a_keyword=1)
        kwargs: dict[str, Any] = {"flush": True, "num_workers": 4}
        assert c.get({"x": (inc, 1)}, "x", **kwargs) == 2
        target = np.zeros(10)
        da.store(da.arange(10, chunks=5), target, lock=False, flush=True)
        assert (target == np.arange(10)).all()


def test_client_loop_is_a_tornado_ioloop_over_the_client_s_event_loop() -> None:
    # streamz runs its streams on ``client.loop`` with tornado's API (add_callback, call_later).
    with Client(processes=False, n_workers=1, dashboard_address=None) as c:
        assert isinstance(c.loop, IOLoop)
        assert getattr(c.loop, "asyncio_loop", None) is c.event_loop
        assert c.io_loop is c.loop
        ran = threading.Event()
        seen: list[asyncio.AbstractEventLoop] = []

        def on_loop() -> None:
            seen.append(asyncio.get_running_loop())
            c.loop.call_later(0.01, ran.set)

        c.loop.add_callback(on_loop)
        assert ran.wait(10)
        assert seen == [c.event_loop]

        async def two() -> int:
            return 2

        assert sync(c.loop, two) == 2
        assert c.submit(inc, 1).result() == 2


@gen_cluster(client=True)
async def test_asynchronous_client_loop_is_the_current_ioloop(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    assert c.loop is IOLoop.current()
    assert c.event_loop is asyncio.get_running_loop()


@gen_cluster(client=True)
async def test_worker_state_status_is_the_status_enum(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    # Scheduler plugins written for dask compare ``ws.status == Status.running``.
    assert s.workers[a.address].status is Status.running
    # What goes out to clients and the dashboard stays the status's name.
    info = await c.scheduler.identity()
    assert info["workers"][a.address]["status"] == "running"
    await c.retire_workers([a.address], close_workers=False, remove=False)
    assert s.workers[a.address].status is Status.closing_gracefully


def ask_scheduler_from_task(key: str) -> Any:
    worker = get_worker()

    async def ask() -> Any:
        return await worker.scheduler.who_has(keys=[key])

    return worker.client.sync(ask)


@gen_cluster(client=True)
async def test_worker_scheduler_and_client_members(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    # Deployment code and plugins written for dask use worker.scheduler.<op>(...) and worker.client.
    x = c.submit(inc, 1, key="x", workers=[a.address])
    await x
    assert await a.scheduler.who_has(keys=["x"]) == {"x": (a.address,)}
    with pytest.raises(ValueError, match="no_such_request"):
        await a.scheduler.no_such_request()
    assert await c.submit(ask_scheduler_from_task, "x", workers=[b.address]) == {"x": (a.address,)}
    assert b.client is b.client  # one client per worker, made on first use
    async with rpc(s.address) as r:
        assert (await r.identity())["type"] == "Scheduler"


@gen_cluster(client=True)
async def test_futures_of_a_collection_come_in_partition_order(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    # xgboost pairs the partitions of its data and its labels by position in futures_of.
    x = c.persist(da.arange(40, chunks=5))
    keys = [f.key for f in futures_of(x)]
    assert keys == [(x.name, i) for i in range(8)]
    f1, f2 = c.submit(inc, 1, key="f1"), c.submit(inc, 2, key="f2")
    # As dask orders them: a future found twice takes the place of its last occurrence.
    assert [f.key for f in futures_of([f1, f2, [f1]])] == ["f2", "f1"]
    assert [f.key for f in futures_of([f1, f2])] == ["f1", "f2"]


def sync_from_task_then_get_client() -> str:
    # xgboost: a task's own client runs a coroutine on the worker's event loop, which asks get_client() again.
    async def on_the_worker_loop() -> str:
        return str(get_client().scheduler.address) + " " + get_worker().address

    return str(get_client().sync(on_the_worker_loop))


@gen_cluster(client=True)
async def test_get_client_in_a_coroutine_a_task_runs_on_the_worker_loop(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    assert await c.submit(sync_from_task_then_get_client, workers=[a.address]) == f"{s.address} {a.address}"
    # Outside a task, on the client's own loop, there is still no worker.
    with pytest.raises(ValueError, match="No worker found"):
        get_worker()


def writeable_flags(*arrays: np.ndarray) -> list[bool]:
    return [bool(a.flags.writeable) for a in arrays]


def small_array() -> np.ndarray:
    return np.arange(10.0)


def test_numpy_buffers_arrive_writable_as_they_were_sent() -> None:
    # scikit-learn (through dask-ml) writes into its inputs: a task's array must be writable where it was.
    from distributed.protocol.serialize import deserialize, serialize, serialize_task

    writable = np.arange(100_000.0)
    readonly = np.frombuffer(b"\x00" * 800_000, dtype="f8")
    header, frames = serialize([writable, readonly])
    # As frames arrive cut from a shared read buffer: read-only bytes.
    got = deserialize(header, [bytes(f) for f in frames])
    assert writeable_flags(*got) == [True, False]
    spec = serialize_task(Task("t", writeable_flags, writable, readonly))
    task = deserialize(spec.header, [bytes(f) for f in spec.frames])
    assert task({}) == [True, False]


@gen_cluster(client=True)
async def test_array_from_another_worker_is_writable(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    x = c.submit(small_array, workers=[a.address])
    y = c.submit(writeable_flags, x, workers=[b.address])
    assert await y == [True]


def wait_in_a_coroutine_of_a_task() -> bool:
    # xgboost: distributed.wait(...) awaited inside a coroutine the task's client runs on the worker's loop.
    client = get_client()
    x = client.submit(inc, 1, pure=False)

    async def on_the_worker_loop() -> bool:
        await wait([x])
        return x.done()

    return bool(client.sync(on_the_worker_loop))


def test_wait_in_a_worker_process_finds_the_worker_s_client() -> None:
    with Client(n_workers=1, processes=True, dashboard_address=None) as c:
        assert c.submit(wait_in_a_coroutine_of_a_task).result() is True
