"""Client.replicate and Client.rebalance: copies made peer to peer, nothing lost."""

from __future__ import annotations

import inspect
import threading
from typing import Any, Literal

import dask
import pytest

from distributed import Client, LocalCluster
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster, inc
from distributed.worker import Worker

AsyncClient = Client[Literal[True]]
THREE = [("127.0.0.1", 1)] * 3

#: The active memory manager's ReduceReplicas would drop the copies these tests make or
#: move (as in dask.distributed, replicate() and the manager do not mix): off here.
NO_AMM = {"distributed.scheduler.active-memory-manager.start": False}

#: In-process workers share one process, so its memory (and so the default
#: "optimistic" measure) is the same for all of them, and a few kB of data is
#: far below sender-min: measure by the results held, with no thresholds,
#: as dask.distributed's own tests of rebalance do.
BY_MANAGED = {
    **NO_AMM,
    "distributed.worker.memory.rebalance.measure": "managed",
    "distributed.worker.memory.rebalance.sender-min": 0,
    "distributed.worker.memory.rebalance.sender-recipient-gap": 0,
}


RELEASE = threading.Event()


def hold_then_add(x: int, y: int) -> int:
    # In-process workers: the test releases the task once it has looked.
    RELEASE.wait(10)
    return x + y


def holders(s: Scheduler, key: Any) -> set[str]:
    return {ws.address for ws in s.tasks[key].who_has}


@gen_cluster(client=True, nthreads=THREE, config=NO_AMM)
async def test_replicate_to_two_then_all_then_one(
    c: AsyncClient, s: Scheduler, a: Worker, b: Worker, w: Worker
) -> None:
    futures = c.map(inc, range(6))
    await c.gather(futures)
    await c.replicate(futures, n=2)
    for f in futures:
        assert len(holders(s, f.key)) == 2
        # The workers really hold the data, not only the scheduler's books.
        for addr in holders(s, f.key):
            assert f.key in next(x for x in (a, b, w) if x.address == addr).data
    await c.replicate(futures)
    everyone = {a.address, b.address, w.address}
    for f in futures:
        assert holders(s, f.key) == everyone
    assert await c.gather(futures) == [inc(i) for i in range(6)]

    # Fewer copies: the extra holders free theirs.
    await c.replicate(futures, n=1)
    for f in futures:
        assert len(holders(s, f.key)) == 1
    await async_poll_for(lambda: sum(len(x.data) for x in (a, b, w)) == 6, timeout=5)
    assert await c.gather(futures) == [inc(i) for i in range(6)]

    # At once back to every worker: the copies just freed are fetched again,
    # not mistaken for copies still there (the free and the fetch arrive in order).
    await c.replicate(futures)
    await c.replicate(futures, n=1)
    await c.replicate(futures)
    for f in futures:
        assert holders(s, f.key) == everyone
    await async_poll_for(lambda: sum(len(x.data) for x in (a, b, w)) == 18, timeout=5)
    assert await c.gather(futures) == [inc(i) for i in range(6)]


@gen_cluster(client=True, nthreads=THREE, config=NO_AMM)
async def test_replicate_within_the_workers_named(
    c: AsyncClient, s: Scheduler, a: Worker, b: Worker, w: Worker
) -> None:
    [x] = await c.scatter([123], workers=[a.address])
    await c.replicate([x], workers=[a.address, b.address])
    assert holders(s, x.key) == {a.address, b.address}
    assert x.key not in w.data
    # By worker name, and n capped at the pool's size.
    await c.replicate([x], n=5, workers=[w.name])
    assert holders(s, x.key) == {a.address, b.address, w.address}
    # A decrease within the pool leaves copies outside it alone.
    await c.replicate([x], n=1, workers=[a.address, b.address])
    assert len(holders(s, x.key) & {a.address, b.address}) == 1
    assert w.address in holders(s, x.key)
    assert await x == 123


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4, config=NO_AMM)
async def test_replicate_spreads_as_a_tree(c: AsyncClient, s: Scheduler, *workers: Worker) -> None:
    [x] = await c.scatter([b"x" * 1000], workers=[workers[0].address])
    await c.replicate([x], branching_factor=1)
    assert holders(s, x.key) == {wk.address for wk in workers}
    assert await x == b"x" * 1000


@gen_cluster(client=True)
async def test_replicate_refuses_bad_arguments(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    [x] = await c.scatter([1], workers=[a.address])
    with pytest.raises(ValueError, match="n must be at least 1"):
        await c.replicate([x], n=0)
    with pytest.raises(ValueError, match="branching_factor"):
        await c.replicate([x], branching_factor=0)
    with pytest.raises(ValueError, match="no such workers.*tcp://127.0.0.1:1"):
        await c.replicate([x], workers=[a.address, "tcp://127.0.0.1:1"])
    with pytest.raises(ValueError, match="no such workers"):
        await c.rebalance(workers=["nobody"])
    y = c.submit(lambda: 1 / 0)
    with pytest.raises(ValueError, match="not in memory"):
        await c.replicate([y])
    with pytest.raises(ValueError, match="not in memory"):
        await c.rebalance([y])
    # Nothing changed on the way.
    assert holders(s, x.key) == {a.address}
    assert await x == 1


@gen_cluster(client=True, nthreads=THREE, config=BY_MANAGED)
async def test_rebalance_spreads_keys_held_by_one_worker(
    c: AsyncClient, s: Scheduler, a: Worker, b: Worker, w: Worker
) -> None:
    values = [bytes([i]) * 10_000 for i in range(12)]
    futures = await c.scatter(values, workers=[a.address])
    assert all(holders(s, f.key) == {a.address} for f in futures)
    await c.rebalance()
    counts = {x.address: sum(holders(s, f.key) == {x.address} for f in futures) for x in (a, b, w)}
    assert counts == {a.address: 4, b.address: 4, w.address: 4}, counts
    # The givers free their copies soon after (told on their streams).
    await async_poll_for(lambda: [sum(f.key in x.data for f in futures) for x in (a, b, w)] == [4, 4, 4], timeout=5)
    for f in futures:
        # Moved, not copied: exactly one holder, and it really has the data.
        [addr] = holders(s, f.key)
        assert f.key in next(x for x in (a, b, w) if x.address == addr).data
    await async_poll_for(lambda: sum(len(x.data) for x in (a, b, w)) == 12, timeout=5)
    assert await c.gather(futures) == values


@gen_cluster(client=True, nthreads=THREE, config=BY_MANAGED)
async def test_rebalance_within_the_workers_and_keys_named(
    c: AsyncClient, s: Scheduler, a: Worker, b: Worker, w: Worker
) -> None:
    values = [bytes([i]) * 10_000 for i in range(8)]
    futures = await c.scatter(values, workers=[a.address])
    await c.rebalance(workers=[a.address, b.address])
    assert not any(f.key in w.data for f in futures)
    assert sum(holders(s, f.key) == {b.address} for f in futures) == 4

    # Only the futures named move.
    others = await c.scatter([bytes([i]) * 10_000 for i in range(8, 12)], workers=[a.address])
    await c.rebalance(others)
    assert all(holders(s, f.key) == {b.address} for f in futures if a.address not in holders(s, f.key))
    assert sum(a.address in holders(s, f.key) for f in futures) == 4
    assert any(holders(s, f.key) == {w.address} for f in others)
    assert await c.gather(futures) == values


@gen_cluster(client=True, config=BY_MANAGED)
async def test_rebalance_of_balanced_data_moves_nothing(c: AsyncClient, s: Scheduler, a: Worker, b: Worker) -> None:
    xs = await c.scatter([b"a" * 1000, b"b" * 1000], workers=[a.address])
    ys = await c.scatter([b"c" * 1000, b"d" * 1000], workers=[b.address])
    await c.rebalance()
    assert all(holders(s, f.key) == {a.address} for f in xs)
    assert all(holders(s, f.key) == {b.address} for f in ys)


@gen_cluster(client=True, config=BY_MANAGED)
async def test_replicate_and_rebalance_are_awaitable_on_an_async_client(
    c: AsyncClient, s: Scheduler, a: Worker, b: Worker
) -> None:
    [x] = await c.scatter([1], workers=[a.address])
    call = c.replicate([x])
    assert inspect.isawaitable(call)
    await call
    call = c.rebalance()
    assert inspect.isawaitable(call)
    await call
    assert holders(s, x.key) == {a.address, b.address}


def test_replicate_and_rebalance_on_a_synchronous_client() -> None:
    with (
        dask.config.set(NO_AMM),
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        a, b = sorted(client.scheduler_info()["workers"])
        futures = client.scatter([b"x" * 1000, b"y" * 1000], workers=[a])
        client.replicate(futures, n=2)
        assert all(set(v) == {a, b} for v in client.who_has(futures).values())
        client.replicate(futures, n=1)
        assert all(len(v) == 1 for v in client.who_has(futures).values())
        client.rebalance(futures)
        assert client.gather(futures) == [b"x" * 1000, b"y" * 1000]


@gen_cluster(client=True, config=NO_AMM)
async def test_fewer_replicas_keeps_copies_running_tasks_need(
    c: AsyncClient, s: Scheduler, a: Worker, b: Worker
) -> None:
    RELEASE.clear()
    [x] = await c.scatter([1], broadcast=True)
    running = [c.submit(hold_then_add, x, i, workers=[w.address]) for i, w in enumerate((a, b))]
    await async_poll_for(lambda: all(len(w.state.executing) == 1 for w in (a, b) if w.state is not None), timeout=5)
    await c.replicate([x], n=1)
    assert holders(s, x.key) == {a.address, b.address}, "both holders run a task that needs x"
    RELEASE.set()
    assert await c.gather(running) == [1, 2]
    await c.replicate([x], n=1)
    assert len(holders(s, x.key)) == 1
    assert await x == 1
