"""distributed.Queue: FIFO by name, with timeouts, batches, maxsize; futures kept alive while queued."""

from __future__ import annotations

import asyncio
import pickle

import pytest

import distributed
from distributed import Client, Future, LocalCluster, Queue, Scheduler, Worker, wait
from distributed.coordination import QueueExtension
from distributed.protocol.serialize import Serialized
from distributed.scheduler.extensions import DEFAULT_EXTENSIONS
from distributed.utils_test import async_poll_for, gen_cluster, inc, slowinc


def test_queue_import_paths() -> None:
    assert distributed.Queue is Queue
    assert DEFAULT_EXTENSIONS["queues"] is QueueExtension


@gen_cluster(client=True)
async def test_put_get_in_order(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    q = Queue("x", client=c)
    for i in range(5):
        await q.put(i)
    assert await q.qsize() == 5
    assert await Queue("x", client=c).qsize() == 5
    assert isinstance(s.extensions["queues"].queues["x"].items[0]["value"], Serialized)
    assert [await q.get() for _ in range(2)] == [0, 1]
    assert await q.get(batch=2) == [2, 3]
    assert await q.get(batch=True) == [4]
    assert await q.get(batch=True) == []
    assert await q.qsize() == 0


@gen_cluster(client=True)
async def test_get_timeouts_take_nothing(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    q = Queue("x", client=c)
    for timeout in (0, 0.05, "50ms"):
        with pytest.raises(distributed.TimeoutError):
            await q.get(timeout=timeout)
    await q.put("a")
    with pytest.raises(distributed.TimeoutError):
        await q.get(batch=2, timeout=0.05)
    assert await q.qsize() == 1  # the item seen during the wait is still there
    waiting = asyncio.ensure_future(q.get(batch=2, timeout=10))
    await q.put("b")
    assert await waiting == ["a", "b"]


@gen_cluster(client=True)
async def test_maxsize_blocks_put(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    q = Queue("x", client=c, maxsize=2)
    await q.put(1)
    await q.put(2)
    with pytest.raises(distributed.TimeoutError):
        await q.put(3, timeout=0.05)
    assert await q.qsize() == 2
    putting = asyncio.ensure_future(q.put(3, timeout=10))
    assert await q.qsize() == 2
    assert not putting.done()
    assert await q.get() == 1
    await putting
    assert await q.get(batch=True) == [2, 3]
    with pytest.raises(ValueError, match="maxsize"):
        await Queue("x", client=c, maxsize=5).qsize()
    with pytest.raises(ValueError, match="maxsize"):
        Queue("y", maxsize=-1)
    with pytest.raises(ValueError, match="batch"):
        q.get(batch=-1)


@gen_cluster(client=True)
async def test_futures_kept_alive_while_queued(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    q = Queue("x", client=c)
    future = c.submit(inc, 1, key="queued")
    await q.put(future)
    await q.put(future)  # the same key twice: held until both are taken
    del future
    await async_poll_for(lambda: all(cs.client_key != c.id for cs in s.tasks["queued"].who_wants), timeout=5)
    first = await q.get()
    assert isinstance(first, Future) and await first == 2
    del first
    # The second copy is still queued: the queue still wants the key.
    assert QueueExtension.holder("x") in {cs.client_key for cs in s.tasks["queued"].who_wants}
    second = await q.get()
    assert await second == 2
    del second
    await async_poll_for(lambda: "queued" not in s.tasks, timeout=5)
    assert not any(cid.startswith("queue-") for cid in s.clients)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)])
async def test_queue_between_tasks(c: Client, s: Scheduler, a: Worker) -> None:
    def produce(q: Queue, n: int) -> None:
        from distributed import get_client

        client = get_client()
        for i in range(n):
            q.put(client.submit(inc, i, key=f"item-{i}"))

    def consume(q: Queue, n: int) -> list[int]:
        return [q.get(timeout=10).result() for _ in range(n)]

    q = Queue("x", client=c)
    total = c.submit(consume, q, 3, key="consume")
    await wait(c.submit(produce, q, 3, key="produce"))
    assert await total == [1, 2, 3]
    copy = pickle.loads(pickle.dumps(Queue("y", maxsize=3)))
    assert copy.name == "y" and copy.maxsize == 3


def test_queue_on_a_synchronous_client() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            q = Queue(client=client)
            assert q.put(1) is None
            q.put(client.submit(inc, 1))
            assert q.qsize() == 2
            assert q.get() == 1
            assert q.get().result() == 2
            with pytest.raises(distributed.TimeoutError):
                q.get(timeout=0.05)
            q.put("from the client")

            def take(name: str) -> object:
                return Queue(name).get(timeout=5)

            assert client.submit(take, q.name).result() == "from the client"


@gen_cluster(client=True)
async def test_getter_whose_client_left_takes_nothing(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    c2 = await Client(s.address, asynchronous=True)
    try:
        ghost = asyncio.ensure_future(Queue("x", client=c2).get())
        await async_poll_for(lambda: "x" in s.extensions["queues"].queues, timeout=5)
        await async_poll_for(lambda: s.extensions["queues"].queues["x"].getters == 1, timeout=5)
    finally:
        await c2.close()
    await async_poll_for(lambda: c2.id not in s.clients, timeout=5)
    q = Queue("x", client=c)
    await q.put("for the living")
    assert await q.get(timeout=5) == "for the living"
    ghost.cancel()
    await async_poll_for(lambda: s.extensions["queues"].queues["x"].getters == 0, timeout=5)


@gen_cluster(client=True)
async def test_get_right_after_dropping_the_put_future(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    # The release of the dropped future travels on the client's stream; the get must not overtake it,
    # or the release lands after the queue handed the key back to the same client and the task is lost.
    q = Queue("x", client=c)
    await q.put(c.submit(slowinc, 1, delay=0.2))
    fut = await q.get()
    assert await fut == 2
