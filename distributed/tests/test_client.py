"""Client and Future behaviour against a real scheduler and workers (TCP)."""

from __future__ import annotations

import asyncio
import operator
import pickle
import threading
import traceback
from typing import Any, Literal

import dask
import numpy as np
import pytest

from distributed import Client, Future, Lock, as_completed, default_client, futures_of, get_client, wait
from distributed.core import Route
from distributed.exceptions import FutureCancelledError
from distributed.protocol import messages as m
from distributed.protocol.serialize import SerializationError
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster, inc, slowinc
from distributed.worker import Worker


class Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("I refuse to be pickled")


class MyError(Exception):
    pass


def raise_my_error(x: int) -> int:
    raise MyError(f"bad value {x}")


@gen_cluster(client=True)
async def test_map_and_gather_nested(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(inc, range(20))
    assert len(futures) == 20
    result = await c.gather({"x": futures[:3], "y": (futures[3], [futures[4]])})
    assert result == {"x": [1, 2, 3], "y": (4, [5])}
    total = c.submit(sum, futures)
    assert await total == sum(range(1, 21))
    # Futures inside nested structures are dependencies.
    d = c.submit(lambda m: m["a"] + m["b"][0], {"a": futures[0], "b": [futures[1]]})
    assert await d == 3


@gen_cluster(client=True)
async def test_same_key_is_computed_once(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1)
    y = c.submit(inc, 1)
    assert x.key == y.key
    assert await x == await y == 2
    assert sum(1 for t in s.transition_log if t[0] == x.key and t[2] == "memory") == 1


@gen_cluster(client=True)
async def test_remote_traceback_is_the_task_s_frames_and_a_note_says_where_it_ran(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    f = c.submit(raise_my_error, 3, key="bad", workers=[a.address])
    with pytest.raises(MyError) as info:
        await f
    # After the client's own frames, the remote part holds only the user's function (no worker internals).
    files = [fs.filename for fs in traceback.extract_tb(info.value.__traceback__)]
    names = [fs.name for fs in traceback.extract_tb(info.value.__traceback__)]
    first_remote = names.index("raise_my_error")
    assert not any("/distributed/worker/" in name for name in files[first_remote:])
    assert getattr(info.value, "__notes__", None) == [f"Raised in task 'bad' on worker {a.address}"]
    # A dependent fails with the same exception, and the note names the task to blame.
    g = c.submit(inc, f, key="dependent")
    with pytest.raises(MyError) as info2:
        await g
    assert getattr(info2.value, "__notes__", None) == [f"Raised in task 'bad' on worker {a.address}"]


@gen_cluster(client=True)
async def test_exception_type_message_and_traceback(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    f = c.submit(raise_my_error, 3)
    with pytest.raises(MyError, match="bad value 3") as info:
        await f
    names = []
    tb = info.value.__traceback__
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "raise_my_error" in names
    assert f.status == "error"
    exc = await f.exception()
    assert isinstance(exc, MyError)
    # Dependents fail with the same exception.
    g = c.submit(inc, f)
    with pytest.raises(MyError):
        await g
    # The cluster keeps working.
    assert await c.submit(inc, 41) == 42


@gen_cluster(client=True)
async def test_unpicklable_argument_raises_in_caller(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    with pytest.raises(SerializationError, match="refuse"):
        c.submit(inc, Unpicklable())
    assert await c.submit(inc, 1) == 2


_event = threading.Event()


def wait_on_event(x: int) -> int:
    _event.wait(5)
    return x


@gen_cluster(client=True)
async def test_cancel(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    event = _event
    event.clear()
    x = c.submit(wait_on_event, 1)
    y = c.submit(inc, x)
    await async_poll_for(lambda: x.key in s.tasks and s.tasks[x.key].state == "processing", 5)
    await c.cancel([x])
    event.set()
    assert x.cancelled()
    with pytest.raises(FutureCancelledError):
        await x
    with pytest.raises(FutureCancelledError):
        await y
    await async_poll_for(lambda: not s.tasks, 5)
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True)
async def test_release_forgets_keys(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1)
    y = c.submit(inc, x)
    await y
    assert x.key in s.tasks
    del x, y
    await async_poll_for(lambda: not s.tasks, 5)
    await async_poll_for(lambda: not a.data and not b.data, 5)


# Placement only: stealing may rightly move a consumer while the sum's duration is still unknown.
@gen_cluster(client=True, config={"distributed.scheduler.work-stealing": False})
async def test_dependencies_prefer_worker_holding_data(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    big = c.submit(np.ones, 5_000_000, workers=[a.address])
    await big
    results = [c.submit(np.sum, big, pure=False) for _ in range(5)]
    assert await c.gather(results) == [5_000_000.0] * 5
    # Every consumer ran where the big input already was.
    ran_on = {ws.address for f in results for ws in s.tasks[f.key].who_has}
    assert ran_on == {a.address}


@gen_cluster(client=True)
async def test_scatter_and_use(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    [x] = await c.scatter([np.arange(10)])
    assert isinstance(x, Future)
    assert x.status == "finished"
    y = c.submit(np.sum, x)
    assert await y == 45
    d = await c.scatter({"k1": 1, "k2": 2})
    assert set(d) == {"k1", "k2"}
    assert await c.submit(operator.add, d["k1"], d["k2"]) == 3
    single = await c.scatter(10)
    assert await single == 10


@gen_cluster(client=True)
async def test_wait_and_as_completed(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(slowinc, range(5), delay=0.01)
    done, not_done = await wait(futures)
    assert len(done) == 5 and not not_done
    seen = []
    async for f in as_completed(c.map(inc, range(10))):
        seen.append(await f)
    assert sorted(seen) == list(range(1, 11))


@gen_cluster(client=True)
async def test_add_done_callback(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    got: list[Any] = []
    event = threading.Event()

    def cb(fut: Future) -> None:
        got.append(fut.status)
        event.set()

    x = c.submit(inc, 1)
    x.add_done_callback(cb)
    await x
    await asyncio.get_running_loop().run_in_executor(None, event.wait, 5)
    assert got == ["finished"]


@gen_cluster(client=True)
async def test_retries(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    from distributed.utils_test import varying

    flaky = varying([ZeroDivisionError("one"), ZeroDivisionError("two"), 42])
    x = c.submit(flaky, retries=2, pure=False)
    assert await x == 42
    flaky2 = varying([ZeroDivisionError("one"), ZeroDivisionError("two"), 42])
    y = c.submit(flaky2, retries=1, pure=False)
    with pytest.raises(ZeroDivisionError, match="two"):
        await y


@gen_cluster(client=True)
async def test_retry_erred(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    from distributed.utils_test import varying

    flaky = varying([ZeroDivisionError("once"), 7])
    x = c.submit(flaky, pure=False)
    with pytest.raises(ZeroDivisionError):
        await x
    await c.retry([x])
    assert await x == 7


@gen_cluster(client=True)
async def test_workers_restriction(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(inc, range(10), workers=[b.address])
    await wait(futures)
    assert all(s.tasks[f.key].who_has == {s.workers[b.address]} for f in futures)


@gen_cluster(client=True)
async def test_run_and_run_on_scheduler(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    def where(dask_worker: Any) -> str:
        return str(dask_worker.address)

    result = await c.run(where)
    assert result == {a.address: a.address, b.address: b.address}

    def n_workers(dask_scheduler: Any) -> int:
        return len(dask_scheduler.workers)

    assert await c.run_on_scheduler(n_workers) == 2


@gen_cluster(client=True)
async def test_compute_collections(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    import dask.array as da
    import dask.bag as db

    x = da.arange(100, chunks=10)
    fut = c.compute(x.sum())
    assert isinstance(fut, Future)
    assert await fut == sum(range(100))
    [f1, f2] = c.compute([x.mean(), db.from_sequence(range(10), npartitions=3).sum()])  # type: ignore[no-untyped-call]  # dask.bag is untyped
    assert await f1 == 49.5
    assert await f2 == 45
    y = c.persist(x + 1)
    assert futures_of(y)
    await wait(y)
    assert (await c.compute(y)).tolist() == list(range(1, 101))


@gen_cluster(client=True)
async def test_story_and_scheduler_info(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1)
    await x
    story = await c.story(x.key)
    # As in dask: the scheduler's entries first, each led by where it was told, then the workers'.
    told = [entry for entry in story if entry[0] == "scheduler"]
    assert told and told[-1][1] == x.key and told[-1][3] == "memory"
    holder = next(iter(s.tasks[x.key].who_has)).address
    assert any(entry[0] == holder and x.key in entry for entry in story)
    with pytest.raises(ValueError, match="on_error"):
        c.story(x.key, on_error="skip")
    info = await c.scheduler_info()
    assert set(info["workers"]) == {a.address, b.address}
    assert await c.nthreads() == {a.address: 1, b.address: 2}


@gen_cluster(client=True)
async def test_story_on_error(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1, workers=[a.address])
    await x

    def refuse(comm: Any, msg: Any) -> Any:
        raise RuntimeError("no story here")

    b.handlers["story"] = Route(m.StoryRequest, refuse)
    with pytest.raises(RuntimeError, match="no story here"):
        await c.story(x.key)
    story = await c.story(x.key, on_error="ignore")
    assert {entry[0] for entry in story} == {"scheduler", a.address}


@gen_cluster(client=True)
async def test_lock(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    lock = Lock("x", client=c)
    assert await lock.acquire()
    other = Lock("x", client=c)
    assert not await other.acquire(timeout=0.05)
    await lock.release()
    assert await other.acquire(timeout=1)
    await other.release()
    assert pickle.loads(pickle.dumps(lock)).name == "x"


def test_no_client_raises_value_error() -> None:
    with pytest.raises(ValueError):
        default_client()
    with pytest.raises(ValueError):
        get_client()
    with pytest.raises(ValueError):
        Client.current()
    with pytest.raises(ValueError):
        wait([])


def test_future_is_task_ref() -> None:
    from dask._task_spec import TaskRef

    f = Future("x")
    assert isinstance(f, TaskRef)
    assert dask.base.tokenize(f) == dask.base.tokenize(f)
    assert dask.base.tokenize(f) != dask.base.tokenize(Future("x"))  # another future object


@gen_cluster(client=True, config={"distributed.client.graph-chunk-size": 7})
async def test_large_graphs_go_in_held_chunks(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    import dask.array as da

    x = da.arange(400, chunks=10)  # 40 chunks and a reduction tree: several parts
    total = c.compute((x + 1).sum())
    assert await total == sum(range(1, 401))
    futures = c.map(inc, range(50))
    assert await c.gather(futures) == list(range(1, 51))
    # The stand-in clients that held the parts are gone, and nothing is left held.
    assert set(s.clients) == {c.id}
    del total, futures
    await async_poll_for(lambda: not s.tasks, 5)


def test_long_chain_of_dependent_submits_with_dropped_futures() -> None:
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            f = client.submit(inc, 0, pure=False)
            for _ in range(299):
                # The previous future is dropped at once: its release must not
                # reach the scheduler before the task that depends on it.
                f = client.submit(inc, f, pure=False)
            assert f.result(timeout=30) == 300


def test_cancelled_future_raises_with_reason_in_sync_client() -> None:
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            f = client.submit(wait_on_event, 1, pure=False)
            client.cancel([f], reason="no longer needed")
            with pytest.raises(FutureCancelledError, match="no longer needed"):
                f.result(timeout=10)
            _event.set()
