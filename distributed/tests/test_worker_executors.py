"""``Worker(executor=)`` and the ``executor`` annotation: tasks run where they are told to."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest
from dask.base import annotate

from distributed import Client, get_worker
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster, inc
from distributed.worker import Worker

pytestmark = pytest.mark.timeout(60)


def thread_name(_: object = None) -> str:
    return threading.current_thread().name


def worker_address(_: object = None) -> str:
    return get_worker().address


@gen_cluster(client=True, nthreads=[])
async def test_an_executor_given_runs_every_task(c: Client, s: Scheduler) -> None:
    pool = ThreadPoolExecutor(2, thread_name_prefix="given-pool")
    async with Worker(s.address, nthreads=2, executor=pool) as w:
        assert await c.submit(thread_name, pure=False) == await c.submit(thread_name, 1)  # both in the given pool
        assert (await c.submit(thread_name, 2)).startswith("given-pool")
        # The task context is there: get_worker() finds the worker.
        assert await c.submit(worker_address) == w.address
        assert w.executors["default"] is pool
    # The worker shut its executor down as it closed.
    with pytest.raises(RuntimeError):
        pool.submit(inc, 1)


@gen_cluster(client=True, nthreads=[])
async def test_the_annotation_chooses_a_named_executor(c: Client, s: Scheduler) -> None:
    special = ThreadPoolExecutor(1, thread_name_prefix="special")
    async with Worker(s.address, nthreads=2, executor={"special": special}) as w:
        with annotate(executor="special"):
            there = c.submit(thread_name, 1)
        here = c.submit(thread_name, 2)
        assert (await there).startswith("special")
        assert (await here).startswith("Dask-Worker-Threads")
        assert set(w.executors) == {"default", "special", "actor"}


@gen_cluster(client=True, nthreads=[])
async def test_an_unknown_executor_fails_the_task_by_name(c: Client, s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1):
        with annotate(executor="nowhere"):
            bad = c.submit(inc, 1)
        with pytest.raises(ValueError, match="nowhere"):
            await bad
        # The worker goes on.
        assert await c.submit(inc, 2) == 3


@gen_cluster(client=True, nthreads=[])
async def test_a_process_pool_runs_tasks_in_another_process(c: Client, s: Scheduler) -> None:
    with ProcessPoolExecutor(1) as processes:
        async with Worker(s.address, nthreads=1, executor={"processes": processes}):
            with annotate(executor="processes"):
                pid = c.submit(os.getpid, pure=False)
                total = c.submit(sum, [1, 2, 3])
            assert await pid != os.getpid()
            assert await total == 6
            # Results from the other process feed the next tasks as any other.
            assert await c.submit(inc, total) == 7


@gen_cluster(client=True, nthreads=[])
async def test_offload_runs_tasks_in_the_offload_thread(c: Client, s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1, executor="offload"):
        assert (await c.submit(thread_name, 1)).startswith("Dask-Offload")
    async with Worker(s.address, nthreads=1, executor="offload"):
        # Shared by the process, it outlives a worker that used it.
        assert (await c.submit(thread_name, 2)).startswith("Dask-Offload")


def test_executor_must_be_an_executor() -> None:
    with pytest.raises(TypeError, match="executor"):
        Worker("tcp://127.0.0.1:1", nthreads=1, executor={"x": object()})  # type: ignore[dict-item]  # the wrong type is the point


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_worker_run_and_memory_manager_as_deployment_code_reads_them(c: Client, s: Scheduler, a: Worker) -> None:
    def where(dask_worker: Worker, plus: int = 0) -> tuple[str, int]:
        return dask_worker.address, plus

    async def later(x: int) -> int:
        return x + 1

    assert await a.run(None, where, kwargs={"plus": 2}) == (a.address, 2)
    assert await a.run(None, later, args=(1,)) == 2
    assert await a.run(None, later, args=(1,), wait=False) is None
    mm = a.memory_manager
    assert mm.memory_limit == a.memory_limit
    assert mm.data is a.data
    assert mm.memory_pause_fraction == 0.8 and mm.memory_spill_fraction == 0.7 and mm.memory_target_fraction == 0.6
    assert mm.max_spill is False
    assert mm.memory_monitor_interval == a.memory_monitor_interval
