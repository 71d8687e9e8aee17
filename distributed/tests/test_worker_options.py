"""Worker keywords and methods: each does what dask.distributed's does, or is refused by name."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from distributed import Client, rejoin, secede
from distributed.core import Status
from distributed.scheduler import Scheduler
from distributed.threadpool import ThreadPool
from distributed.utils_test import async_poll_for, gen_cluster, inc, poll_for
from distributed.worker import Worker


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"nonsense": 1}, TypeError, "nonsense"),
        ({"security": object()}, TypeError, "security"),
        ({"executor": 3}, TypeError, "executor"),
        ({"services": {"x": object}}, NotImplementedError, "services"),
        ({"http_prefix": "/dask"}, NotImplementedError, "http_prefix"),
        ({"lifetime_restart": True}, NotImplementedError, "lifetime_restart"),
        ({"reconnect": True}, ValueError, "reconnect"),
        ({"interface": "no-such-interface0"}, ValueError, "no-such-interface0"),
        ({"interface": "lo", "host": "127.0.0.1"}, ValueError, "interface"),
    ],
)
def test_unsupported_keywords_are_refused_by_name(kwargs: dict[str, Any], error: type, name: str) -> None:
    with pytest.raises(error, match=name):
        Worker("tcp://127.0.0.1:1", nthreads=1, **kwargs)


def test_default_values_of_unsupported_keywords_are_accepted() -> None:
    Worker(
        "tcp://127.0.0.1:1",
        nthreads=1,
        preload=None,
        executor=None,
        services={},
        http_prefix="/",
        reconnect=False,
        memory_spill_fraction=None,
    )


@gen_cluster(client=True, nthreads=[])
async def test_interface_chooses_the_listening_address(c: Client, s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1, interface="lo") as w:
        assert w.address.startswith("tcp://127.0.0.1:")
        assert await c.submit(inc, 1) == 2


@gen_cluster(client=True)
async def test_close_gracefully_hands_data_off(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    # Scattered data cannot be recomputed: it survives only if it is moved.
    [x] = await c.scatter([123], workers=[a.address])
    y = c.submit(inc, 1, key="y", workers=[a.address])
    await y
    assert s.tasks[x.key].who_has == {s.workers[a.address]}
    await a.close_gracefully()
    assert a.address not in s.workers
    assert s.tasks[x.key].who_has == {s.workers[b.address]}
    assert x.key in b.data and "y" in b.data
    # Tasks that read them run on the data moved to b.
    assert await asyncio.wait_for(c.submit(inc, x), 10) == 124
    assert await asyncio.wait_for(c.submit(inc, y), 10) == 3
    # y was moved, not recomputed.
    assert ("y", "flight", "memory") in [e[:3] for e in b.story("y")]
    assert not any(e[2] == "executing" for e in b.story("y"))


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_close_gracefully_with_no_other_worker_still_closes(c: Client, s: Scheduler, a: Worker) -> None:
    await c.submit(inc, 1, key="z")
    await a.close_gracefully()
    assert a.status.name == "closed"
    await async_poll_for(lambda: not s.workers, 5)


def test_close_gracefully_restart_is_refused() -> None:
    w = Worker("tcp://127.0.0.1:1", nthreads=1)
    with pytest.raises(NotImplementedError, match="restart"):
        asyncio.run(w.close_gracefully(restart=True))


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_lifetime_closes_the_worker_gracefully(c: Client, s: Scheduler, a: Worker) -> None:
    w = await Worker(s.address, nthreads=1, lifetime="1s", lifetime_stagger="100ms")
    [x] = await c.scatter(["moved"], workers=[w.address])
    await asyncio.wait_for(w.finished(), 10)
    assert x.key in a.data
    assert await asyncio.wait_for(c.submit(str.upper, x), 10) == "MOVED"


@gen_cluster(client=True, nthreads=[])
async def test_dashboard_serves_health_and_metrics(c: Client, s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1, dashboard=True, dashboard_address="127.0.0.1:0") as w:
        assert w.http_server is not None
        port = w.http_server.port
        held = c.submit(inc, 1, key="in-memory")
        await held

        def get(path: str) -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return str(r.read().decode())

        assert await asyncio.to_thread(get, "/health") == "ok"
        metrics = await asyncio.to_thread(get, "/metrics")
        assert 'dask_worker_tasks{state="memory"} 1.0' in metrics
        assert "dask_worker_threads 1.0" in metrics
        assert w.address in await asyncio.to_thread(get, "/info")
    assert w.http_server.sockets[0].fileno() == -1  # closed with the worker


@gen_cluster(nthreads=[])
async def test_no_dashboard_by_default(s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1) as w:
        assert w.http_server is None


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_heartbeat_reports_cpu_percent(s: Scheduler, a: Worker) -> None:
    a.get_metrics()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass  # burn CPU in this process
    assert a.get_metrics()["cpu"] > 0
    s.workers[a.address].metrics = {}
    await a.heartbeat()  # sent on the worker's stream: it arrives a moment later
    await async_poll_for(lambda: "cpu" in s.workers[a.address].metrics, timeout=10)
    assert isinstance(s.workers[a.address].metrics["cpu"], float)


def test_rejoin_waits_for_a_free_slot() -> None:
    pool = ThreadPool(1)
    other_started = threading.Event()
    release_other = threading.Event()
    other_done = threading.Event()
    seen: list[bool] = []

    def seceding_job() -> None:
        pool.secede_current_thread()
        pool.submit(other_job)
        other_started.wait(5)
        pool.rejoin_current_thread()
        # Back in the pool: the job that held the only slot had to finish first.
        seen.append(other_done.is_set())

    def other_job() -> None:
        other_started.set()
        release_other.wait(5)
        other_done.set()

    fut = pool.submit(seceding_job)
    poll_for(lambda: pool.waiting_to_rejoin == 1, 5, what="the rejoin to wait")
    assert not other_done.is_set()
    release_other.set()
    fut.result(timeout=5)
    assert seen == [True]
    poll_for(lambda: len(pool.threads) == 1, 5, what="one thread in the pool")
    assert pool.submit(lambda: 42).result(timeout=5) == 42
    pool.shutdown()


def secede_and_rejoin(x: int) -> int:
    secede()
    rejoin()
    return x + 1


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_rejoin_in_a_task(c: Client, s: Scheduler, a: Worker) -> None:
    futures = c.map(secede_and_rejoin, range(5))
    assert await c.gather(futures) == [1, 2, 3, 4, 5]
    await async_poll_for(lambda: len(a.executor.threads) <= 1, 5)


@gen_cluster(nthreads=[])
async def test_workers_get_their_own_local_directory(s: Scheduler, tmp_path: Path) -> None:
    async with (
        Worker(s.address, nthreads=1, local_directory=str(tmp_path)) as w1,
        Worker(s.address, nthreads=1, local_directory=str(tmp_path)) as w2,
    ):
        assert w1.local_directory != w2.local_directory
        for w in (w1, w2):
            assert Path(w.local_directory).parent == tmp_path / "dask-scratch-space"
            assert os.path.isdir(w.local_directory)
        d1 = w1.local_directory
    assert not os.path.exists(d1)
    assert not os.path.exists(w2.local_directory)


def slow_identity(x: Any, delay: float) -> Any:
    time.sleep(delay)
    return x


@gen_cluster(client=True, nthreads=[])
async def test_close_without_executor_wait_does_not_wait_for_running_tasks(c: Client, s: Scheduler) -> None:
    w = await Worker(s.address, nthreads=1)
    fut = c.submit(slow_identity, 1, 2.0)
    await async_poll_for(lambda: bool(w.state and w.state.executing), 5)
    start = time.monotonic()
    await w.close(executor_wait=False)
    assert time.monotonic() - start < 1.5
    del fut


def test_close_refuses_unknown_keywords() -> None:
    w = Worker("tcp://127.0.0.1:1", nthreads=1)
    with pytest.raises(TypeError):
        asyncio.run(w.close(nonsense=True))  # type: ignore[call-arg]  # the point of the test


@gen_cluster(client=True, nthreads=[], config={"distributed.worker.memory.monitor-interval": "10ms"})
async def test_worker_over_its_memory_limit_pauses_and_resumes(c: Client, s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1, memory_limit=1, validate=True) as w:
        await async_poll_for(lambda: w.status.name == "paused", 5)
        # The worker tells the scheduler, which sends a paused worker no new tasks (as dask's).
        await async_poll_for(lambda: s.workers[w.address].status == Status.paused, 5)
        fut = c.submit(inc, 1, key="held-back")
        await async_poll_for(
            lambda: "held-back" in s.tasks and s.tasks["held-back"].state in ("queued", "no-worker"), 5
        )
        assert "held-back" not in w.tasks
        w.memory_limit = 10**15  # plenty: the monitor resumes the worker
        assert await asyncio.wait_for(fut, 5) == 2
        assert w.status.name == "running"


@gen_cluster(client=True, nthreads=[], config={"distributed.worker.memory.pause": False})
async def test_memory_pause_can_be_turned_off(c: Client, s: Scheduler) -> None:
    async with Worker(s.address, nthreads=1, memory_limit=1) as w:
        assert await asyncio.wait_for(c.submit(inc, 1), 5) == 2
        assert w.status.name == "running"
