"""Actors: ``submit(Cls, actor=True)`` keeps one instance on one worker, called through an Actor proxy."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from dask.delayed import delayed

import distributed
from distributed import Actor, ActorFuture, BaseActorFuture, Client, Future, LocalCluster, Scheduler, Worker, wait
from distributed.exceptions import ActorLostError
from distributed.utils_test import async_poll_for, gen_cluster, inc, poll_for


class Counter:
    """A counter; ``n`` is a class attribute too, so the proxy knows it is not a method."""

    n = 0

    def __init__(self, start: int = 0) -> None:
        self.n = start

    def increment(self) -> int:
        self.n += 1
        return self.n

    def add(self, x: int) -> int:
        self.n += x
        return self.n

    def thread_name(self) -> str:
        return threading.current_thread().name

    async def async_add(self, x: int) -> int:
        await asyncio.sleep(0)
        self.n += x
        return self.n

    def fail(self) -> None:
        raise KeyError("from the actor")

    def pid(self) -> int:
        return os.getpid()


@pytest.fixture
def c() -> Iterator[Client[Literal[False]]]:
    """A synchronous client of two in-process workers."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            yield client


def use_counter(counter: Actor, times: int) -> list[int]:
    """A task calling an actor it received as an argument, from its worker thread."""
    return [counter.increment().result(timeout=10) for _ in range(times)]


def test_public_names() -> None:
    assert distributed.Actor is Actor
    assert distributed.ActorFuture is ActorFuture
    assert distributed.BaseActorFuture is BaseActorFuture
    assert issubclass(ActorFuture, BaseActorFuture)
    assert issubclass(ActorLostError, ValueError)


@gen_cluster(client=True)
async def test_counter_async_client(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    future = c.submit(Counter, 5, actor=True)
    counter = await future
    assert isinstance(counter, Actor)
    assert repr(counter) == f"<Actor: Counter, key={future.key}>"
    call = counter.increment()
    assert isinstance(call, ActorFuture)
    assert await call == 6
    assert await counter.add(10) == 16
    assert await counter.async_add(1) == 17
    assert await counter.n == 17  # an attribute read on a loop is awaited
    # The instance lives in one worker's actors; its data store holds only the proxy.
    holder = a if future.key in a.actors else b
    other = b if holder is a else a
    assert isinstance(holder.actors[future.key], Counter)
    assert isinstance(holder.data[future.key], Actor)
    assert future.key not in other.actors
    ts = s.tasks[future.key]
    assert ts.actor and ts.state == "memory"
    assert [ws.address for ws in ts.who_has] == [holder.address]
    assert s.workers[holder.address].actors == {ts}


def test_counter_sync_client(c: Client[Literal[False]]) -> None:
    future = c.submit(Counter, actor=True)
    counter = future.result(timeout=10)
    assert isinstance(counter, Actor)
    assert counter.increment().result(timeout=10) == 1
    assert counter.add(2).result() == 3
    assert counter.n == 3  # a plain read returns the value
    # Methods run one at a time in the worker's actor thread, async ones on its loop.
    assert counter.thread_name().result().startswith("Dask-Actor-Threads")
    assert counter.async_add(1).result() == 4
    with pytest.raises(KeyError, match="from the actor"):
        counter.fail().result()
    assert counter.increment().result() == 5  # an error leaves the actor as it was

    async def read_in_another_loop() -> Any:
        return counter.n

    # A synchronous client's proxy read inside some other event loop (a notebook's) still gives the value.
    assert asyncio.run(read_in_another_loop()) == 5


@gen_cluster(client=True)
async def test_actor_as_task_argument(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    future = c.submit(Counter, actor=True, workers=[a.address])
    counter = await future
    # The future as argument: the task receives the proxy, here on another worker.
    assert await c.submit(use_counter, future, 3, workers=[b.address]) == [1, 2, 3]
    # The proxy itself as argument: the key is a dependency as with a future.
    assert await c.submit(use_counter, counter, 2, workers=[a.address]) == [4, 5]
    assert await counter.n == 5
    assert not b.actors


@gen_cluster(client=True)
async def test_two_actors_on_two_workers(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    f1 = c.submit(Counter, actor=True, pure=False)
    await wait(f1)
    f2 = c.submit(Counter, actor=True, pure=False)
    one, two = await c.gather([f1, f2])
    assert {len(a.actors), len(b.actors)} == {1}  # the second goes where there is no actor yet
    assert await one.increment() == 1
    assert await one.increment() == 2
    assert await two.increment() == 1
    assert one.address != two.address


@gen_cluster(client=True)
async def test_workers_restriction(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    futures = [c.submit(Counter, i, actor=True, workers=[b.address]) for i in range(3)]
    counters = await c.gather(futures)
    assert len(b.actors) == 3 and not a.actors
    assert [await x.increment() for x in counters] == [1, 2, 3]


@gen_cluster(client=True)
async def test_release_frees_the_actor(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    future = c.submit(Counter, actor=True)
    counter = await future
    key = future.key
    holder = a if key in a.actors else b
    del future
    # The proxy holds the actor too: it still answers.
    assert await counter.increment() == 1
    assert key in holder.actors
    del counter
    gc.collect()
    await async_poll_for(lambda: key not in holder.actors and key not in s.tasks, timeout=10)
    assert not a.actors and not b.actors
    assert key not in holder.data


@gen_cluster(client=True)
async def test_compute_and_persist_with_actors(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = delayed(Counter)(3)
    future = c.compute(x, actors=True)
    counter = await future
    assert isinstance(counter, Actor)
    assert await counter.increment() == 4
    plain = await c.compute(delayed(Counter)(1))
    assert isinstance(plain, Counter)  # without actors=, the object itself travels
    assert s.tasks[future.key].actor


@gen_cluster(client=True)
async def test_actors_named_by_a_delayed_object(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    # As in dask: actors= names which of the computed objects become actors.
    counter_task = delayed(Counter)(5)
    plain_task = delayed(Counter)(7)
    counter, plain = await c.gather(c.compute([counter_task, plain_task], actors=counter_task))
    assert isinstance(counter, Actor) and isinstance(plain, Counter)
    assert await counter.increment() == 6
    lazy = delayed(Counter)(1)
    (persisted,) = c.persist([lazy], actors=[lazy])
    await wait(persisted)
    assert s.tasks[persisted.key].actor


@gen_cluster(client=True)
async def test_map_actors(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(Counter, [10, 20], actor=True)
    counters = await c.gather(futures)
    assert [await x.increment() for x in counters] == [11, 21]
    assert len(a.actors) + len(b.actors) == 2


@pytest.mark.timeout(120)
def test_worker_killed_gives_clear_error() -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            future = client.submit(Counter, actor=True)
            counter = future.result(timeout=30)
            assert counter.increment().result(timeout=30) == 1
            pid = counter.pid().result(timeout=30)
            assert pid != os.getpid()
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(ActorLostError, match="Worker holding Actor .* was lost"):
                counter.increment().result(timeout=30)
            # The scheduler errs the actor's key rather than making a fresh instance elsewhere.
            poll_for(lambda: future.status == "error", timeout=30, what="the actor's future to err")
            with pytest.raises(ActorLostError, match="was lost"):
                future.result(timeout=30)
            with pytest.raises(ActorLostError):
                counter.increment()


def test_actor_future_result_timeout(c: Client[Literal[False]]) -> None:
    class Slow:
        def wait(self, event_name: str) -> str:
            from distributed import Event

            Event(event_name).wait(timeout=30)
            return "done"

    from distributed import Event

    event = Event("slow-actor", client=c)
    slow = c.submit(Slow, actor=True).result(timeout=10)
    call = slow.wait("slow-actor")
    with pytest.raises(TimeoutError):
        call.result(timeout=0.05)
    assert not call.done()
    event.set()
    assert call.result(timeout=10) == "done"


def test_pickled_proxy_binds_where_it_lands(c: Client[Literal[False]]) -> None:
    import pickle

    future: Future = c.submit(Counter, 1, actor=True)
    counter = future.result(timeout=10)
    copy: Any = pickle.loads(pickle.dumps(counter))
    assert copy.key == counter.key and copy.address == counter.address
    assert copy.increment().result(timeout=10) == 2


class Caller:
    """An actor holding another actor's proxy, which it calls from its own methods."""

    def __init__(self, other: Actor) -> None:
        self.other = other

    def poke(self) -> tuple[int, int]:
        return self.other.increment().result(timeout=5), self.other.n


@gen_cluster(client=True)
async def test_actor_calls_actor_on_same_worker(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    # Both live on a, whose one actor thread runs poke: the inner call must not wait for that thread.
    counter = c.submit(Counter, actor=True, workers=[a.address])
    caller = await c.submit(Caller, counter, actor=True, workers=[a.address])
    assert await caller.poke() == (1, 1)
    assert await caller.poke() == (2, 2)


@gen_cluster(client=True)
async def test_home_worker_leaves_while_proxies_are_held_elsewhere(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    future = c.submit(Counter, actor=True, workers=[a.address])
    counter = await future
    assert await c.submit(use_counter, future, 1, workers=[b.address]) == [1]
    ts = s.tasks[future.key]
    assert {ws.address for ws in ts.who_has} == {a.address, b.address}  # b holds a proxy
    assert s.workers[a.address].actors == {ts} and not s.workers[b.address].actors
    await a.close()
    await async_poll_for(lambda: future.status == "error", timeout=10)
    with pytest.raises(ActorLostError, match="was lost"):
        await future
    with pytest.raises(ActorLostError):
        counter.increment()
    await async_poll_for(lambda: future.key not in b.data, timeout=10)
    assert ts.state == "erred" and not ts.who_has


@gen_cluster(client=True, config={"distributed.scheduler.active-memory-manager.start": False})
async def test_replicate_keeps_the_home_copy(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    future = c.submit(Counter, actor=True, workers=[a.address])
    counter = await future
    await c.replicate([future], n=2)
    assert future.key in b.data  # a proxy copy
    # What replicate(n=1) and rebalance do to a copy they move away: the home copy stays.
    s.send_all(s.drop_replicas(a.address, [future.key]))
    # A task on a's stream comes after any free-keys sent to a before it.
    assert await c.submit(inc, 1, workers=[a.address]) == 2
    assert future.key in a.actors
    assert await counter.increment() == 1


@gen_cluster(client=True, config={"distributed.comm.timeouts.connect": "60s"})
async def test_call_to_an_actor_whose_worker_closed_fails_soon(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    """No wait for the whole connect timeout: the actor's worker was up, so a refused connection means it is gone."""
    import time

    from distributed.client.actor import ACTOR_CONNECT_TIMEOUT

    counter = await c.submit(Counter, actor=True, workers=[a.address])
    assert await counter.increment() == 1
    address = a.address
    await a.close()
    # The client's idle connection to the worker has seen the close: the next call must connect anew.
    await async_poll_for(lambda: all(comm.closed() for comm in c.pool.available.get(address, ())), timeout=10)
    start = time.monotonic()
    with pytest.raises(ActorLostError):
        await counter.increment()
    assert time.monotonic() - start < ACTOR_CONNECT_TIMEOUT + 5


class ThreadReporter:
    def thread(self) -> str:
        return threading.current_thread().name


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_separate_thread_false_runs_the_method_on_the_workers_loop(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    actor = await c.submit(ThreadReporter, actor=True)
    assert (await actor.thread()).startswith("Dask-Actor-Threads")
    # On the worker's event loop: here, in process, the thread running this test.
    assert await actor.thread(separate_thread=False) == threading.current_thread().name


class AsksWhere:
    """An actor that asks another actor on its worker where a call of each kind runs."""

    def __init__(self, other: Actor) -> None:
        self.other = other

    def where(self) -> tuple[str, str, str]:
        here = self.other.thread().result(timeout=5)
        on_loop = self.other.thread(separate_thread=False).result(timeout=5)
        return threading.current_thread().name, here, on_loop


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_a_call_on_the_same_worker_honours_separate_thread(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    reporter = c.submit(ThreadReporter, actor=True)
    asker = await c.submit(AsksWhere, reporter, actor=True)
    caller_thread, default, on_loop = await asker.where()
    assert caller_thread.startswith("Dask-Actor-Threads") and default == caller_thread  # runs at once, here
    assert on_loop == threading.current_thread().name  # the worker's loop: in process, this test's thread
