"""Large graphs sent in parts, later parts serialised in the background."""

from __future__ import annotations

import threading
from collections.abc import Awaitable
from typing import Any, Literal
from unittest import mock

import pytest
from dask._task_spec import GraphNode, Task

from distributed import Client, wait
from distributed.client.graph_parts import GraphPlan, dependencies_first
from distributed.client.outbox import Outbox
from distributed.client.registry import FutureRegistry
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.utils_test import async_poll_for, gen_cluster, inc, slowinc
from distributed.worker import Worker

_release_pickling = threading.Event()


class _WaitsToPickle:
    """Pickles to its value, but only once :data:`_release_pickling` is set."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self) -> Any:
        if not _release_pickling.wait(timeout=30):
            raise RuntimeError("never released")
        return (int, (self.value,))


def _plan(n: int, chunk_size: int, all_wanted: bool, wanted: list[str] | None = None) -> GraphPlan:
    keys: list[Key] = [f"t-{i}" for i in range(n)]
    tasks: dict[Key, GraphNode] = {k: Task(k, inc, i) for i, k in enumerate(keys)}
    return GraphPlan(
        "c",
        keys,
        tasks.__getitem__,
        list(wanted) if wanted is not None else keys,
        chunk_size=chunk_size,
        all_wanted=all_wanted,
    )


def test_small_graph_is_one_message_without_hold() -> None:
    plan = _plan(10, chunk_size=10, all_wanted=False, wanted=["t-9", "held-elsewhere"])
    assert len(plan) == 1
    msg = plan.message(0)
    assert "graph" not in msg and "final" not in msg
    assert [key for key, _ in msg["tasks"]] == [f"t-{i}" for i in range(10)]
    assert msg["keys"] == ["t-9", "held-elsewhere"]
    assert [spec["order"] for _, spec in msg["tasks"]] == list(range(10))


def test_large_graph_parts_held_until_final() -> None:
    plan = _plan(2_000, chunk_size=1_000, all_wanted=False, wanted=["t-1999", "held-elsewhere"])
    # A short first part, then full ones.
    assert [len(c) for c in plan.chunks] == [500, 1_000, 500]
    msgs = [plan.message(i) for i in range(len(plan))]
    assert {m["graph"] for m in msgs} == {plan.graph_id}
    assert [m["final"] for m in msgs] == [False, False, True]
    assert [m["keys"] for m in msgs] == [[], [], ["t-1999", "held-elsewhere"]]
    orders = [spec["order"] for m in msgs for _, spec in m["tasks"]]
    assert orders == list(range(2_000))
    end = plan.abandon_message()
    assert end is not None and end["final"] and end["graph"] == plan.graph_id and not end["tasks"]
    assert plan.wanted_in(1) == ["t-1999"]


def test_map_parts_are_not_held() -> None:
    plan = _plan(2_000, chunk_size=1_000, all_wanted=True)
    assert len(plan) == 3
    msgs = [plan.message(i) for i in range(len(plan))]
    assert all("graph" not in m for m in msgs)
    assert [len(m["keys"]) for m in msgs] == [500, 1_000, 500]
    assert plan.abandon_message() is None
    assert len(plan.wanted_in(2)) == 500


def test_dependencies_first_orders_a_reversed_chain() -> None:
    from dask._task_spec import TaskRef

    tasks: dict[Key, GraphNode] = {
        "c": Task("c", inc, TaskRef("b")),
        "b": Task("b", inc, TaskRef("a")),
        "a": Task("a", inc, 1),
    }
    assert dependencies_first(tasks, {"c": 0, "b": 1, "a": 2}) == ["a", "b", "c"]


@gen_cluster(client=True, config={"distributed.client.graph-chunk-size": 100})
async def test_map_in_parts_computes_everything(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(inc, range(1_050), pure=False)
    # Submitted right after map returns: goes out after every part.
    total = c.submit(sum, futures)
    assert await total == sum(range(1, 1_051))
    assert len({f.key for f in futures}) == 1_050
    assert set(s.clients) == {c.id}
    del futures, total
    await async_poll_for(lambda: not s.tasks, 10)


@gen_cluster(client=True, config={"distributed.client.graph-chunk-size": 100})
async def test_map_dropped_at_once_leaves_nothing(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(inc, range(1_000), pure=False)
    del futures
    # Releases wait behind the parts: no task is left wanted by nobody.
    await async_poll_for(lambda: not s.tasks and not c.futures, 10)
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True, config={"distributed.client.graph-chunk-size": 100})
async def test_cancel_right_after_map(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(slowinc, range(1_000), delay=0.05, pure=False)
    await c.cancel(futures)
    # The later parts reached the scheduler before the cancel did.
    assert all(f.status == "cancelled" for f in futures[500:])
    await async_poll_for(lambda: not s.tasks, 10)


@gen_cluster(client=True, config={"distributed.client.graph-chunk-size": 100})
async def test_map_returns_before_later_parts_are_serialised(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    _release_pickling.clear()
    args: list[Any] = list(range(400))
    args[300] = _WaitsToPickle(300)
    # Would deadlock if the part holding args[300] were pickled in this thread.
    futures = c.map(inc, args, pure=False)
    assert await futures[0] == 1
    assert not futures[-1].done()
    _release_pickling.set()
    assert await c.gather(futures) == list(range(1, 401))


@gen_cluster(client=True, config={"distributed.client.graph-chunk-size": 100})
async def test_unpicklable_argument_in_a_later_part(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    args: list[Any] = list(range(400))
    args[250] = threading.Lock()
    futures = c.map(inc, args, pure=False)
    await wait(futures)
    # Parts before the bad one ran; the bad part and those after it hold the error.
    assert await c.gather(futures[:200]) == list(range(1, 201))
    with pytest.raises(Exception, match="lock"):
        await futures[250]
    assert all(f.status == "error" for f in futures[200:])
    assert await c.submit(inc, 41) == 42
    del futures
    await async_poll_for(lambda: not s.tasks, 10)


@gen_cluster(client=True, config={"distributed.client.graph-chunk-size": 7})
async def test_collection_in_parts_with_unpicklable_leaf(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    from dask.delayed import delayed

    x = delayed(inc)(0)
    for _ in range(30):
        x = delayed(inc)(x)
    # The last task of a chain comes in the last part.
    last = delayed(lambda lock, x: x)(threading.Lock(), x)
    future = c.compute(last)
    with pytest.raises(Exception, match="lock"):
        await future
    # The scheduler held the parts it got, then let them go.
    del future
    await async_poll_for(lambda: not s.tasks and set(s.clients) == {c.id}, 10)
    assert await c.submit(inc, 1) == 2


@gen_cluster(client=True, config={"distributed.client.graph-chunk-size": 100})
async def test_large_map_sends_its_first_part_before_making_the_other_futures(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    events: list[tuple[str, int]] = []
    make_futures, post_graph = FutureRegistry.make_futures, Outbox.post_graph

    def making(self: FutureRegistry, keys: Any) -> Any:
        events.append(("futures", len(keys)))
        return make_futures(self, keys)

    def posting(self: Outbox, first: Any, parts: Any) -> None:
        events.append(("first part", len(first["tasks"])))
        post_graph(self, first, parts)

    # Record the order of the steps.
    with mock.patch.object(FutureRegistry, "make_futures", making), mock.patch.object(Outbox, "post_graph", posting):
        futures = c.map(inc, range(1_050), pure=False)
    (_, head), (_, first), (_, rest) = events
    assert events == [("futures", head), ("first part", head), ("futures", 1_050 - head)]
    assert first == head < 1_050
    assert len(futures) == 1_050
    assert await c.gather(futures) == list(range(1, 1_051))


def record_writes(c: Client) -> list[list[Any]]:
    """Every payload the client's stream writes from now on (each write is one list of messages)."""
    stream = c.link.stream
    assert stream is not None and stream.comm is not None
    comm = stream.comm
    writes: list[list[Any]] = []
    write, write_nowait = comm.write, comm.write_nowait

    async def recording_write(msg: Any) -> int:
        writes.append(list(msg))
        return await write(msg)

    def recording_write_nowait(msg: Any) -> int | Awaitable[int]:
        writes.append(list(msg))
        return write_nowait(msg)

    # Spies on this one comm (the stream writes with write_nowait).
    comm.write = recording_write  # type: ignore[method-assign]
    comm.write_nowait = recording_write_nowait  # type: ignore[method-assign]
    return writes


@gen_cluster(client=True, nthreads=[], config={"distributed.client.graph-chunk-size": 1_000})
async def test_large_parts_go_one_per_write(c: Client, s: Scheduler) -> None:
    # The scheduler decodes a whole write at once: a backlog of parts in one write would stop it
    # from answering anyone for as long as decoding them all takes.  No workers: what is checked
    # is how the graph travels, and running 20,000 validated tasks only made the test slow.
    writes = record_writes(c)
    futures = c.map(inc, range(20_000), pure=False)
    await async_poll_for(lambda: len(s.tasks) == 20_000, 60)
    assert all(f.key in s.tasks for f in futures)
    parts = [[msg for msg in w if msg["op"] == "update-graph"] for w in writes]
    assert sum(len(msg["tasks"]) for p in parts for msg in p) == 20_000
    # Smaller messages (the first part, of 500 tasks) ride along with a large one.
    assert max(sum(len(msg["tasks"]) >= 1_000 for msg in p) for p in parts) == 1
    assert sum(map(len, parts)) == 21


@gen_cluster(client=True, config={"distributed.client.graph-chunk-size": 100})
async def test_close_releases_held_keys_in_chunks(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    # Chunks of graph-chunk-size keys (2,000 by default; 100 here, so that a few hundred tasks make several).
    futures = c.map(inc, range(240), pure=False)
    await wait(futures)
    writes = record_writes(c)
    await c.close()
    releases = [msg["keys"] for w in writes for msg in w if msg["op"] == "client-releases-keys"]
    assert sorted(k for keys in releases for k in keys) == sorted(f.key for f in futures)
    assert sorted(map(len, releases)) == [40, 100, 100]
    await async_poll_for(lambda: not s.tasks, 10)
