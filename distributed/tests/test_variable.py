"""distributed.Variable: a value shared by name, futures kept alive while held."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any, Literal

import pytest

import distributed
from distributed import Client, Future, LocalCluster, Queue, Scheduler, Variable, Worker, wait
from distributed.coordination import VariableExtension
from distributed.exceptions import FutureUnknownError
from distributed.scheduler.extensions import DEFAULT_EXTENSIONS
from distributed.utils_test import async_poll_for, gen_cluster, inc, slowinc


def test_variable_import_paths() -> None:
    assert distributed.Variable is Variable
    assert DEFAULT_EXTENSIONS["variables"] is VariableExtension


@gen_cluster(client=True)
async def test_set_get_delete_values(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = Variable("x", client=c)
    await x.set(123)
    assert await x.get() == 123
    y = Variable("x", client=c)
    assert await y.get() == 123
    await y.set({"a": [1, 2], "b": b"bytes"})
    assert await x.get() == {"a": [1, 2], "b": b"bytes"}
    await x.delete()
    with pytest.raises(distributed.TimeoutError):
        await y.get(timeout=0.05)
    ext = s.extensions["variables"]
    assert isinstance(ext, VariableExtension)
    assert not ext.values and not ext.changed


class Opaque:
    """A user class: the scheduler keeps its pickled bytes only."""

    def __init__(self, v: int) -> None:
        self.v = v


@gen_cluster(client=True)
async def test_scheduler_keeps_values_as_frames(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    from distributed.protocol.serialize import Serialized

    x = Variable("x", client=c)
    await x.set(Opaque(5))
    held = s.extensions["variables"].values["x"]
    assert isinstance(held["value"], Serialized)
    got = await x.get()
    assert isinstance(got, Opaque) and got.v == 5


@gen_cluster(client=True)
async def test_get_waits_for_set(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = Variable("x", client=c)
    waiting = asyncio.ensure_future(x.get(timeout=10))
    await async_poll_for(lambda: "x" in s.extensions["variables"].changed, timeout=5)
    assert not waiting.done()
    await x.set(1)
    assert await waiting == 1
    for timeout in (0, 0.05, "50ms"):
        with pytest.raises(distributed.TimeoutError):
            await Variable("empty", client=c).get(timeout=timeout)


@gen_cluster(client=True)
async def test_future_kept_alive_while_held(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = Variable("x", client=c)
    future = c.submit(inc, 1, key="held")
    await x.set(future)
    del future
    await async_poll_for(lambda: c.id not in {cs.client_key for cs in s.tasks["held"].who_wants}, timeout=5)
    assert "held" in s.tasks  # the variable alone holds it
    got = await x.get()
    assert isinstance(got, Future) and got.client is c
    assert await got == 2

    # Replaced by a plain value: the task goes once the getter's future goes too.
    await x.set(0)
    assert "held" in s.tasks
    del got
    await async_poll_for(lambda: "held" not in s.tasks, timeout=5)

    future = c.submit(inc, 10, key="deleted")
    await x.set(future)
    del future
    await x.delete()
    await async_poll_for(lambda: "deleted" not in s.tasks, timeout=5)
    assert not any(cid.startswith("variable-") for cid in s.clients)


@gen_cluster(client=True)
async def test_future_handed_to_another_client(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    async with Client(s.address, asynchronous=True) as c2:
        x = Variable("x", client=c)
        await x.set(c.submit(inc, 1, key="shared"))
        got = await Variable("x", client=c2).get()
        assert isinstance(got, Future) and got.client is c2
        await x.delete()  # c2's future keeps it now
        assert await got.result() == 2
        assert "shared" in s.tasks


@gen_cluster(client=True)
async def test_variable_inside_tasks(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    def producer(v: Variable) -> None:
        from distributed import get_client

        client = get_client()
        v.set(client.submit(inc, 41, key="from-task"))

    def consumer(v: Variable) -> int:
        result: int = v.get(timeout=10).result()
        return result

    v = Variable("x", client=c)
    consumed = c.submit(consumer, v, key="consumer")
    await wait(c.submit(producer, v, key="producer"))
    assert await consumed == 42
    got = await v.get()
    assert await got == 42

    copy = pickle.loads(pickle.dumps(v))
    assert copy.name == "x"


def test_variable_on_a_synchronous_client() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            v = Variable(client=client)
            assert v.set(1) is None
            assert v.get() == 1
            future = client.submit(inc, 1)
            v.set(future)
            assert v.get().result() == 2
            assert v.delete() is None
            with pytest.raises(distributed.TimeoutError):
                v.get(timeout=0.05)
            v.set("from the client")

            def read(name: str) -> Any:
                return Variable(name).get(timeout=5)

            assert client.submit(read, v.name).result() == "from the client"


@gen_cluster(client=True)
async def test_get_right_after_dropping_the_set_future(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    # as for Queue: the get must not overtake the release of the dropped future on the client's stream
    v = Variable("x", client=c)
    await v.set(c.submit(slowinc, 1, delay=0.2))
    fut = await v.get()
    await v.delete()
    assert await fut == 2


@gen_cluster(client=True, nthreads=[])
async def test_a_cancelled_future_cannot_be_held(c: Client[Literal[True]], s: Scheduler) -> None:
    # dask waits for such a key until the timeout passes; here the scheduler says at once that it will not come.
    x = c.submit(inc, 1)
    await x.cancel()
    v = Variable("x")
    with pytest.raises(TimeoutError, match="unknown to scheduler"):  # the answer, long before the timeout
        await v.set(x, timeout="30s")
    with pytest.raises(FutureUnknownError, match="unknown to scheduler"):
        await v.set(x)
    q = Queue("x")
    with pytest.raises(FutureUnknownError, match="unknown to scheduler"):
        await q.put(x, timeout="100ms")
    assert not await v.is_set() and await q.qsize() == 0
    # Both go on working.
    await v.set(1)
    await q.put(2)
    assert await v.get() == 1 and await q.get() == 2


@gen_cluster(client=True, nthreads=[])
async def test_is_set(c: Client[Literal[True]], s: Scheduler) -> None:
    x, same = Variable("x"), Variable("x")
    assert not await x.is_set()
    await x.set(1)
    assert await same.is_set()
    await x.delete()
    assert not await same.is_set()
