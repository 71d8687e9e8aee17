"""Adaptive scaling: clusters that grow under load and shrink when idle, losing no result."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import dask
import pytest

from distributed import Adaptive, LocalCluster, SpecCluster
from distributed.client import Client
from distributed.deploy.adaptive import AdaptiveCore
from distributed.scheduler import Scheduler
from distributed.tests.test_spec_cluster import SchedulerProcess
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc, poll_for, slowinc
from distributed.worker import Worker


def local(**kwargs: Any) -> LocalCluster:
    options: dict[str, Any] = {
        "n_workers": 0,
        "threads_per_worker": 1,
        "processes": False,
        "dashboard_address": None,
        "memory_limit": "1GB",
        "asynchronous": True,
    }
    options.update(kwargs)
    return LocalCluster(**options)


def n_workers(cluster: LocalCluster) -> int:
    s = cluster.scheduler
    assert isinstance(s, Scheduler)
    return len(s.workers)


class CountingAdaptive(Adaptive):
    """An Adaptive that counts its looks."""

    looks = 0

    async def target(self) -> int:
        self.looks += 1
        return await super().target()


@gen_test()
async def test_grows_under_load_and_shrinks_when_idle_without_losing_results() -> None:
    async with local() as cluster, Client(cluster, asynchronous=True) as c:
        adaptive = cluster.adapt(minimum=1, maximum=3, interval="20ms", target_duration="100ms", wait_count=2)
        await async_poll_for(lambda: n_workers(cluster) == 1, timeout=10)
        most = 0

        def grown() -> bool:
            nonlocal most
            most = max(most, n_workers(cluster))
            return most == 3

        futures = c.map(slowinc, range(30), delay=0.2)
        await async_poll_for(grown, timeout=15)
        assert len(cluster.workers) <= 3
        assert await c.gather(futures) == list(range(1, 31))
        # Idle now: back to the minimum, the results moved to the worker that stays.
        await async_poll_for(lambda: n_workers(cluster) == 1 and len(cluster.workers) == 1, timeout=15)
        assert await c.gather(futures) == list(range(1, 31))
        assert any(rec["status"] == "up" for _, rec in adaptive.log)
        assert any(rec["status"] == "down" for _, rec in adaptive.log)


@gen_test()
async def test_keeps_the_last_worker_while_it_holds_results() -> None:
    async with local() as cluster, Client(cluster, asynchronous=True) as c:
        adaptive = cluster.adapt(
            CountingAdaptive, minimum=0, maximum=2, interval="10ms", target_duration="100ms", wait_count=1
        )
        assert isinstance(adaptive, CountingAdaptive)
        futures = c.map(slowinc, range(6), delay=0.1)
        assert await c.gather(futures) == list(range(1, 7))
        # Idle, but the results must stay somewhere: one worker is kept while they are held.
        await async_poll_for(lambda: n_workers(cluster) == 1, timeout=15)
        looks = adaptive.looks
        await async_poll_for(lambda: adaptive.looks >= looks + 10, timeout=10)
        assert n_workers(cluster) == len(cluster.workers) == 1
        assert await c.gather(futures) == list(range(1, 7))
        # Released, nothing is held: down to zero.
        del futures
        await async_poll_for(lambda: n_workers(cluster) == 0 and not cluster.workers, timeout=15)


@gen_test()
async def test_wait_count_is_honoured() -> None:
    async with local(n_workers=2) as cluster:
        adaptive = cluster.adapt(CountingAdaptive, minimum=0, interval="10ms", wait_count=1000)
        assert isinstance(adaptive, CountingAdaptive)
        await async_poll_for(lambda: adaptive.looks >= 10, timeout=10)
        # Ten looks in, both idle workers are picked each time but not yet let go.
        assert n_workers(cluster) == 2
        assert set(adaptive.close_counts) == {0, 1}
        assert min(adaptive.close_counts.values()) >= 5
        adaptive2 = cluster.adapt(CountingAdaptive, wait_count=3)
        await async_poll_for(lambda: n_workers(cluster) == 0, timeout=10)
        assert isinstance(adaptive2, CountingAdaptive)
        assert adaptive2.looks >= 3


class FakeAdaptive(AdaptiveCore):
    """The policy alone, against a made-up cluster."""

    def __init__(self, planned: Iterable[Any], arrived: Iterable[Any], want: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.planned = set(planned)
        self.arrived = set(arrived)
        self.want = want
        self.closed: list[Any] = []
        self.scaled_to: list[int] = []

    @property
    def plan(self) -> set[Any]:
        return self.planned

    @property
    def requested(self) -> set[Any]:
        return self.planned

    @property
    def observed(self) -> set[Any]:
        return self.arrived

    async def target(self) -> int:
        return self.want

    async def workers_to_close(self, target: int) -> list[Any]:
        return sorted(self.arrived)[: len(self.planned) - target]

    async def scale_up(self, n: int) -> None:
        self.scaled_to.append(n)

    async def scale_down(self, workers: Iterable[Any]) -> None:
        self.closed.extend(workers)
        self.planned -= set(workers)


@gen_test()
async def test_policy_counts_looks_and_drops_pending_workers_first() -> None:
    core = FakeAdaptive({"a", "b", "c"}, {"a", "b"}, want=2, wait_count=3)
    # "c" never arrived: it is the one to drop.
    for _ in range(2):
        await core.adapt()
        assert core.closed == []
    await core.adapt()
    assert core.closed == ["c"]
    # A look that wants the workers again resets the count.
    core = FakeAdaptive({"a", "b"}, {"a", "b"}, want=1, wait_count=2)
    await core.adapt()
    core.want = 2
    await core.adapt()
    assert core.close_counts == {}
    core.want = 1
    await core.adapt()
    assert core.closed == []
    await core.adapt()
    assert core.closed == ["a"]
    # Up at once, within the bounds.
    core = FakeAdaptive({"a"}, {"a"}, want=10, maximum=4)
    await core.adapt()
    assert core.scaled_to == [4]
    core = FakeAdaptive(set(), set(), want=0, minimum=2)
    await core.adapt()
    assert core.scaled_to == [2]


@gen_test()
async def test_adapt_replaces_and_scale_stops() -> None:
    async with local() as cluster:
        first = cluster.adapt(minimum=1, interval="10ms")
        await async_poll_for(lambda: n_workers(cluster) == 1, timeout=10)
        second = cluster.adapt(minimum=2, interval="10ms")
        assert first._task is not None
        await async_poll_for(lambda: first._task is not None and first._task.done(), timeout=5)
        await async_poll_for(lambda: n_workers(cluster) == 2, timeout=10)
        assert second.minimum == 2
        # The user sets the size: adapting stops, the size stays.
        await cluster.scale(3)
        await async_poll_for(lambda: second._task is not None and second._task.done(), timeout=5)
        assert cluster._adaptive is None
        assert n_workers(cluster) == 3


@gen_test()
async def test_bounds_in_cores_and_memory() -> None:
    async with local(threads_per_worker=2, memory_limit="1GB") as cluster:
        adaptive = cluster.adapt(minimum_cores=3, maximum_memory="3.5GB", interval="10ms")
        assert adaptive.minimum == 2  # 3 threads: two 2-thread workers
        assert adaptive.maximum == 3  # 3.5 GB: three 1 GB workers
        await async_poll_for(lambda: n_workers(cluster) == 2, timeout=10)
        adaptive = cluster.adapt(maximum_cores=5, interval="10ms")
        assert adaptive.maximum == 2


@gen_test(config={"distributed.adaptive.interval": "15ms", "distributed.adaptive.wait-count": 7})
async def test_defaults_from_config() -> None:
    async with local() as cluster:
        adaptive = Adaptive(cluster, target_duration="3s")
        try:
            assert adaptive.interval == 0.015
            assert adaptive.wait_count == 7
            assert adaptive.target_duration == 3
            assert adaptive.minimum == 0 and adaptive.maximum == math.inf
        finally:
            adaptive.stop()
        with pytest.raises(TypeError, match=r"worker_key='host'"):
            Adaptive(cluster, worker_key="host")
        with pytest.raises(TypeError, match="bogus"):
            Adaptive(cluster, bogus=1)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_adaptive_target(c: Client[Any], s: Scheduler, a: Worker, b: Worker) -> None:
    # Idle: both could go, as they hold nothing.
    assert s.adaptive_target() == 0
    held = await c.scatter(list(range(4)))
    assert s.adaptive_target() == 1  # one stays for the data
    # 40 tasks of about 0.5 s (the unknown duration) ask for 20 s of work: 20 threads within 1 s.
    futures = c.map(slowinc, range(40), delay=0.5)
    await async_poll_for(lambda: len(s.tasks) >= 44, timeout=5)
    assert 16 <= s.adaptive_target(target_duration="1s") <= 20
    assert 4 <= s.adaptive_target() <= 5  # within the default 5 s
    assert 36 <= s.adaptive_target(target_duration="0.1s") <= 40  # never more threads than tasks
    assert s.adaptive_target(target_duration="1h") == 2  # never fewer than the busy workers
    with dask.config.set({"distributed.adaptive.target-duration": "1s"}):
        assert 16 <= s.adaptive_target() <= 20
    del futures, held
    with pytest.raises(ValueError, match="target_duration"):
        s.adaptive_target(target_duration=0)


@gen_test()
async def test_adaptive_target_without_workers_asks_for_one() -> None:
    async with local() as cluster, Client(cluster, asynchronous=True) as c:
        future = c.submit(inc, 1)
        s = cluster.scheduler
        assert isinstance(s, Scheduler)
        await async_poll_for(lambda: bool(s.unrunnable) or s.n_queued > 0, timeout=5)
        assert s.adaptive_target() >= 1
        cluster.adapt(maximum=1, interval="10ms")
        start = time.monotonic()
        assert await future == 2
        assert time.monotonic() - start < 10


def test_synchronous_cluster_adapts_from_its_loop_thread() -> None:
    with LocalCluster(
        n_workers=0, threads_per_worker=1, processes=False, dashboard_address=None, memory_limit="1GB"
    ) as cluster:
        adaptive = cluster.adapt(minimum=2, maximum=3, interval="10ms")
        poll_for(lambda: len(cluster.workers) == 2, timeout=10, what="adaptive to start the minimum")
        assert isinstance(adaptive, Adaptive)
        cluster.scale(1)  # the user takes over: adapting stops, the size stays
        assert len(cluster.workers) == 1
        poll_for(lambda: adaptive._task is not None and adaptive._task.done(), timeout=5, what="adaptive to stop")
        assert len(cluster.workers) == 1


@gen_test()
async def test_worker_processes_grow_and_shrink_keeping_results() -> None:
    async with (
        local(processes=True, protocol="tcp") as cluster,
        Client(cluster, asynchronous=True) as c,
    ):
        cluster.adapt(minimum=0, maximum=2, interval="20ms", target_duration="100ms", wait_count=2)
        futures = c.map(slowinc, range(12), delay=0.2)
        await async_poll_for(lambda: n_workers(cluster) == 2, timeout=30)
        assert await c.gather(futures) == list(range(1, 13))
        # Idle: one worker process is retired, its results handed to the other.
        await async_poll_for(lambda: n_workers(cluster) == 1 and len(cluster.workers) == 1, timeout=30)
        assert await c.gather(futures) == list(range(1, 13))


def pair_of(ws: Any) -> int:
    """Workers 0 and 1 are one group, 2 and 3 another (one job running two workers).

    Importable by name, so a scheduler in another process can unpickle it.
    """
    return int(ws.name) // 2


def worker(**options: Any) -> dict[str, Any]:
    return {"cls": Worker, "options": {"nthreads": 1, "host": "127.0.0.1", "protocol": "tcp", **options}}


SCHEDULER: dict[str, Any] = {"cls": Scheduler, "options": {"dashboard": False, "host": "127.0.0.1", "protocol": "tcp"}}


def scheduler_elsewhere(tmp_path: Path) -> dict[str, Any]:
    return {"cls": SchedulerProcess, "options": {"directory": str(tmp_path)}}


async def names_at_the_scheduler(c: Client[Literal[True]]) -> set[str]:
    info = await c.scheduler_info()
    return {str(w["name"]) for w in info["workers"].values()}


async def hold_data_on_0_and_2(c: Client[Literal[True]], cluster: SpecCluster) -> list[Any]:
    """More data on worker 0 than on worker 2; 1 and 3 hold none."""
    await c.wait_for_workers(4)
    addresses = {str(w["name"]): a for a, w in (await c.scheduler_info())["workers"].items()}
    big = await c.scatter([b"x" * 200_000], workers=[addresses["0"]])
    small = await c.scatter([b"y"], workers=[addresses["2"]])
    return [*big, *small]


@gen_test()
async def test_worker_key_closes_whole_groups_in_process() -> None:
    workers = {i: worker() for i in range(4)}
    async with (
        SpecCluster(workers=workers, scheduler=SCHEDULER, worker=worker(), asynchronous=True) as cluster,
        Client(cluster, asynchronous=True) as c,
    ):
        held = await hold_data_on_0_and_2(c, cluster)
        # Worker by worker, 1 and 3 (holding nothing) would go; by pairs, the pair {2, 3} holding less.
        cluster.adapt(minimum=2, maximum=2, interval="10ms", wait_count=1, worker_key=pair_of)
        await async_poll_for(lambda: set(cluster.workers) == {0, 1}, timeout=10)
        assert await names_at_the_scheduler(c) == {"0", "1"}
        assert await c.gather(held) == [b"x" * 200_000, b"y"]


@gen_test(timeout=60)
async def test_adapt_with_a_scheduler_in_another_process(tmp_path: Path) -> None:
    cluster = SpecCluster(scheduler=scheduler_elsewhere(tmp_path), worker=worker(), asynchronous=True)
    try:
        async with cluster, Client(cluster, asynchronous=True) as c:
            adaptive = cluster.adapt(minimum=1, maximum=3, interval="20ms", target_duration="100ms", wait_count=2)
            assert isinstance(adaptive, Adaptive)
            with pytest.raises(NotImplementedError, match="does not run in this process"):
                adaptive.scheduler  # the property refuses: everything goes through requests
            await async_poll_for(lambda: len(cluster.workers) == 1, timeout=10)
            most = 0

            def grown() -> bool:
                nonlocal most
                most = max(most, len(cluster.workers))
                return most == 3

            futures = c.map(slowinc, range(30), delay=0.2)
            await async_poll_for(grown, timeout=20)
            assert await c.gather(futures) == list(range(1, 31))
            # Idle: back to the minimum, retired by the scheduler over its address, no result lost.
            await async_poll_for(lambda: len(cluster.workers) == 1, timeout=20)
            assert len(await names_at_the_scheduler(c)) == 1
            assert await c.gather(futures) == list(range(1, 31))
            assert any(rec["status"] == "up" for _, rec in adaptive.log)
            assert any(rec["status"] == "down" for _, rec in adaptive.log)
        job = cluster.scheduler
        assert isinstance(job, SchedulerProcess) and job.proc is not None
        assert job.proc.poll() is not None and not job.killed
    finally:
        if isinstance(cluster.scheduler, SchedulerProcess):
            cluster.scheduler.kill()


@gen_test(timeout=60)
async def test_worker_key_runs_on_a_scheduler_in_another_process(tmp_path: Path) -> None:
    workers = {i: worker() for i in range(4)}
    cluster = SpecCluster(workers=workers, scheduler=scheduler_elsewhere(tmp_path), worker=worker(), asynchronous=True)
    try:
        async with cluster, Client(cluster, asynchronous=True) as c:
            held = await hold_data_on_0_and_2(c, cluster)
            cluster.adapt(minimum=2, maximum=2, interval="10ms", wait_count=1, worker_key=pair_of)
            await async_poll_for(lambda: set(cluster.workers) == {0, 1}, timeout=10)
            assert await names_at_the_scheduler(c) == {"0", "1"}
            assert await c.gather(held) == [b"x" * 200_000, b"y"]
    finally:
        if isinstance(cluster.scheduler, SchedulerProcess):
            cluster.scheduler.kill()
