"""Nannies: worker processes that come back, restarts, and the memory terminate threshold.

Real worker processes on 127.0.0.1, killed by PID.  One cluster of two nannies
serves most tests (starting worker processes is the slow part); each test
waits until both workers are back before it starts and leaves them running.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from typing import Any, Literal

import dask
import pytest

from distributed import Client, KilledWorker, LocalCluster, Nanny, Scheduler, SchedulerPlugin, Status
from distributed.exceptions import CancelledError
from distributed.scheduler.records import WorkerState
from distributed.utils_test import async_poll_for, poll_for


def slow_inc(x: int, delay: float = 0.02) -> int:
    time.sleep(delay)
    return x + 1


def exit_process() -> None:
    os._exit(1)


def hold_memory(nbytes: int) -> int:
    block = bytearray(nbytes)
    for i in range(0, nbytes, 4096):
        block[i] = 1  # touch every page, so it counts as resident
    time.sleep(30)  # holds the memory until the nanny kills the worker for it
    return len(block)


class RestartCounter(SchedulerPlugin):
    name = "restart-counter"

    def __init__(self) -> None:
        self.restarts = 0

    def restart(self, scheduler: Any) -> None:
        self.restarts += 1


def workers_of(cluster: LocalCluster) -> dict[str, WorkerState]:
    assert cluster.scheduler is not None
    return dict(cluster.scheduler.workers)


def wait_for_two_workers(cluster: LocalCluster, not_pids: set[int] = frozenset()) -> set[int]:  # type: ignore[assignment]
    """Wait until two workers are registered, none of them with a pid in ``not_pids``; their pids."""

    def ready() -> bool:
        ws = workers_of(cluster).values()
        return len(ws) == 2 and not ({w.pid for w in ws} & not_pids)

    poll_for(ready, timeout=30, what="two (new) worker processes")
    return {w.pid for w in workers_of(cluster).values() if w.pid is not None}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
    try:
        yield c
    finally:
        for h in list(c.workers.values()):
            if isinstance(h, Nanny) and h.process is not None:
                h.process.kill()
        c.close()


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client[Literal[False]]]:
    wait_for_two_workers(cluster)
    with Client(cluster) as c:
        yield c
    wait_for_two_workers(cluster)


@pytest.mark.timeout(60)
def test_nanny_registers_and_is_reachable(cluster: LocalCluster, client: Client[Literal[False]]) -> None:
    info = client.scheduler_info()["workers"]
    nannies = {h.address: h for h in cluster.workers.values() if isinstance(h, Nanny)}
    assert len(nannies) == 2
    for addr, w in info.items():
        assert w["nanny"] in nannies
        assert nannies[w["nanny"]].worker_address == addr
        assert w["pid"] == nannies[w["nanny"]].pid != os.getpid()


@pytest.mark.timeout(60)
def test_killed_worker_comes_back_and_the_computation_finishes(
    cluster: LocalCluster, client: Client[Literal[False]]
) -> None:
    futures = client.map(slow_inc, range(150))
    poll_for(lambda: sum(f.done() for f in futures) >= 10, timeout=30, what="the computation to be under way")
    victim = next(w.pid for w in workers_of(cluster).values() if w.pid is not None)
    os.kill(victim, signal.SIGKILL)
    assert client.gather(futures) == list(range(1, 151))
    wait_for_two_workers(cluster, not_pids={victim})
    # The nanny counts the restart once its new worker is up, which the scheduler may hear of first.
    poll_for(
        lambda: sum(h.restarts for h in cluster.workers.values() if isinstance(h, Nanny)) >= 1,
        timeout=30,
        what="the nanny to count its restart",
    )


@pytest.mark.timeout(60)
def test_task_that_kills_its_worker_ends_in_killed_worker(
    cluster: LocalCluster, client: Client[Literal[False]]
) -> None:
    assert cluster.scheduler is not None
    old = cluster.scheduler.allowed_failures
    cluster.scheduler.allowed_failures = 1  # two deaths, to keep the test short
    try:
        bad = client.submit(exit_process, key="suicidal")
        with pytest.raises(KilledWorker, match="suicidal"):
            bad.result(timeout=30)
    finally:
        cluster.scheduler.allowed_failures = old
    # The nannies brought the workers back: the cluster keeps computing.
    assert client.gather(client.map(slow_inc, range(20), delay=0)) == list(range(1, 21))
    wait_for_two_workers(cluster)


@pytest.mark.timeout(60)
def test_client_restart_cancels_futures_and_replaces_workers(
    cluster: LocalCluster, client: Client[Literal[False]]
) -> None:
    client.register_plugin(RestartCounter())
    assert cluster.scheduler is not None
    plugin = cluster.scheduler.plugins["restart-counter"]
    assert isinstance(plugin, RestartCounter)
    try:
        before = wait_for_two_workers(cluster)
        done = client.submit(slow_inc, 1, delay=0)
        assert done.result() == 2
        running = client.submit(slow_inc, 2, delay=0.5)
        with Client(cluster) as other:
            theirs = other.submit(slow_inc, 3, delay=0)
            assert theirs.result() == 4
            start = time.monotonic()
            client.restart(timeout=20)
            assert time.monotonic() - start < 20
            for f in (done, running):
                assert f.status == "cancelled"
                with pytest.raises(CancelledError, match="restart"):
                    f.result()
            poll_for(lambda: theirs.status == "cancelled", timeout=10, what="the other client's future to cancel")
        assert plugin.restarts == 1
        after = {w.pid for w in workers_of(cluster).values()}
        assert len(after) == 2 and not (after & before)
        assert client.submit(slow_inc, 10, delay=0).result() == 11
    finally:
        client.unregister_scheduler_plugin("restart-counter")


@pytest.mark.timeout(60)
def test_restart_workers_replaces_only_those(cluster: LocalCluster, client: Client[Literal[False]]) -> None:
    ws = sorted(workers_of(cluster).values(), key=lambda w: w.address)
    target, other = ws
    result = client.restart_workers([target.address], timeout=20)
    assert result == {target.address: "OK"}
    after = {w.pid for w in workers_of(cluster).values()}
    assert other.pid in after and target.pid not in after and len(after) == 2
    with pytest.raises(ValueError, match="No such workers"):
        client.restart_workers(["tcp://127.0.0.1:1"])


def test_restart_without_nannies() -> None:
    """restart_workers refuses a worker without a nanny; restart closes it (as in dask) and waits in vain."""
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        f = client.submit(slow_inc, 1, delay=0)
        assert f.result() == 2
        with pytest.raises(ValueError, match="nanny"):
            client.restart_workers([next(iter(client.scheduler_info()["workers"]))], timeout=5)
        assert f.status == "finished"  # nothing was cancelled
        with pytest.raises(TimeoutError, match="only 0 have"):
            client.restart(timeout=1)
        assert f.status == "cancelled"
        assert client.scheduler_info()["workers"] == {}


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"loop": object()}, "loop"),
    ],
)
def test_nanny_refuses_what_it_cannot_honour(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(NotImplementedError, match=name):
        Nanny("tcp://127.0.0.1:8786", **kwargs)


def test_nanny_refuses_unknown_worker_keywords() -> None:
    with pytest.raises(TypeError, match="no_such_keyword"):
        Nanny("tcp://127.0.0.1:8786", no_such_keyword=1)
    with pytest.raises(ValueError, match="in-process"):
        Nanny("inproc://abc")


@pytest.mark.timeout(60)
def test_worker_past_memory_terminate_is_restarted() -> None:
    async def main() -> None:
        with dask.config.set({"distributed.worker.memory.terminate": 0.5}):
            async with (
                Scheduler(host="127.0.0.1", dashboard=False, allowed_failures=0) as s,
                Nanny(s.address, nthreads=1, memory_limit="600MB") as nanny,
                Client(s.address, asynchronous=True) as client,
            ):
                first = nanny.pid
                f = client.submit(hold_memory, 400_000_000)
                with pytest.raises(KilledWorker):
                    await f.result(timeout=30)
                await async_poll_for(
                    lambda: len(s.workers) == 1 and nanny.pid != first and nanny.worker_address is not None,
                    timeout=30,
                )
                assert nanny.restarts == 1
                assert await client.submit(slow_inc, 1, delay=0).result() == 2

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_nanny_closes_with_its_worker_and_when_a_restart_fails() -> None:
    async def main() -> None:
        async with Scheduler(host="127.0.0.1", dashboard=False) as s, Client(s.address, asynchronous=True) as client:
            # A worker that closes on purpose (retired) ends its process cleanly: its nanny closes too.
            async with Nanny(s.address, nthreads=1) as nanny:
                proc = nanny.process
                await client.retire_workers([nanny.worker_address])
                await async_poll_for(lambda: nanny.status == Status.closed, timeout=20)
                assert proc is not None and proc.exitcode == 0 and nanny.restarts == 0
            # A crashed worker whose replacement cannot join: the nanny gives up and closes.
            async with Nanny(s.address, nthreads=1) as nanny:
                s.handlers.pop("register-worker")
                assert nanny.pid is not None
                os.kill(nanny.pid, signal.SIGKILL)
                await async_poll_for(lambda: nanny.status == Status.closed, timeout=30)
                assert nanny.process is None and nanny.restarts == 0

    asyncio.run(main())


def test_terminate_config_reader() -> None:
    from distributed.nanny import terminate_fraction

    assert terminate_fraction() == 0.95
    with dask.config.set({"distributed.worker.memory.terminate": False}):
        assert terminate_fraction() is None
    with dask.config.set({"distributed.worker.memory.terminate": 2}):
        with pytest.raises(ValueError, match="terminate"):
            terminate_fraction()


def worker_environ(
    names: tuple[str, ...] = ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "FROM_CONFIG", "BOTH"),
) -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in names}


def test_worker_process_gets_the_nannys_environment_settings() -> None:
    """pre-spawn-environ is in the worker from its start; environ and env= after; the nanny's own is left as it was."""
    settings = {
        "distributed.nanny.pre-spawn-environ": {"MALLOC_TRIM_THRESHOLD_": 32768, "OMP_NUM_THREADS": 1},
        "distributed.nanny.environ": {"FROM_CONFIG": "yes", "BOTH": "config"},
    }
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ
    with dask.config.set(settings):

        async def run() -> dict[str, dict[str, str | None]]:
            async with Scheduler(host="127.0.0.1", port=0, dashboard=False) as s:
                async with Nanny(s.address, nthreads=1, env={"BOTH": "argument"}):
                    async with Client(s.address, asynchronous=True) as c:
                        return await c.run(worker_environ)

        [seen] = asyncio.run(run()).values()
    assert seen == {"MALLOC_TRIM_THRESHOLD_": "32768", "OMP_NUM_THREADS": "1", "FROM_CONFIG": "yes", "BOTH": "argument"}
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ  # restored once the worker started
