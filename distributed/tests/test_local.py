"""LocalCluster and the Cluster base class, with real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import operator
import threading
from collections.abc import Iterator

import dask
import dask.array as da
import numpy as np
import psutil
import pytest
from tornado.ioloop import IOLoop

import distributed.utils
import distributed.worker
from distributed.client import Client
from distributed.config import stderr_handlers
from distributed.core import Status
from distributed.deploy import Cluster, LocalCluster, ServerProcess
from distributed.deploy.local import split_cores
from distributed.nanny import Nanny
from distributed.utils_test import async_poll_for, poll_for
from distributed.worker import Worker


def live_children() -> list[psutil.Process]:
    """Child processes of this test process, minus multiprocessing's helpers."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" in " ".join(p.cmdline()):
                continue
        except psutil.NoSuchProcess:
            continue
        out.append(p)
    return out


def status_of(cluster: Cluster) -> Status:
    return cluster.status  # (a call, so checks after a state change are not narrowed away)


def non_daemon_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if not t.daemon and t.is_alive()}


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fail when a test leaves child processes or non-daemon threads behind."""
    threads_before = non_daemon_threads()
    children_before = {p.pid for p in live_children()}
    yield
    try:
        poll_for(lambda: not ({p.pid for p in live_children()} - children_before), what="child processes to exit")
        poll_for(lambda: not (non_daemon_threads() - threads_before), what="threads to finish")
    finally:
        for p in live_children():
            if p.pid not in children_before:
                p.kill()  # by PID, only what this test started
                try:
                    p.wait(10)
                except psutil.Error:
                    pass


def kill_cluster_children(cluster: LocalCluster) -> None:
    for handle in list(cluster.workers.values()):
        if isinstance(handle, ServerProcess):
            handle.kill()
        elif isinstance(handle, Nanny) and handle.process is not None:
            handle.process.kill()


def wait_for_idle(cluster: LocalCluster) -> None:
    """Wait until the scheduler has forgotten every task.

    Works around a worker bug (``Worker.execute`` returns early for a task freed
    before it started, leaving it in ``executing`` and its thread slot taken):
    retiring a worker while the client is still releasing futures can trigger
    it, so scale down only once released futures are gone.
    """
    assert cluster.scheduler is not None
    scheduler = cluster.scheduler
    poll_for(lambda: not scheduler.tasks, what="the scheduler to forget released tasks")


def compute_checks(client: Client) -> None:
    x = da.arange(10_000, chunks=1_000)
    assert x.sum().compute() == np.arange(10_000).sum()
    y = da.ones((200, 200), chunks=(50, 50))
    assert (y + y.T).sum().compute() == 80_000
    futures = client.map(operator.add, range(100), range(100))
    assert client.gather(futures) == [2 * i for i in range(100)]
    assert client.submit(operator.add, 1, 2).result() == 3


# -- sizing -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cores, expected",
    [
        (1, (1, 1)),
        (2, (2, 1)),
        (4, (4, 1)),
        (6, (3, 2)),
        (7, (7, 1)),
        (8, (4, 2)),
        (12, (4, 3)),
        (16, (4, 4)),
        (64, (8, 8)),
    ],
)
def test_split_cores(cores: int, expected: tuple[int, int]) -> None:
    assert split_cores(cores) == expected
    workers, threads = split_cores(cores)
    assert workers * threads == cores


def test_default_sizes(no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    with LocalCluster(processes=False, dashboard_address=None) as c:
        assert len(c.workers) == 1 and c.threads_per_worker == 4
    with LocalCluster(processes=False, n_workers=2, dashboard_address=None) as c:
        assert c.threads_per_worker == 2
    with LocalCluster(processes=False, threads_per_worker=2, dashboard_address=None) as c:
        assert len(c.workers) == 2
    with LocalCluster(processes=False, n_workers=1, nthreads=3, dashboard_address=None) as c:
        assert c.threads_per_worker == 3
        assert c.scheduler_info["total_threads"] == 3
    with pytest.raises(ValueError, match="contradicts"):
        LocalCluster(processes=False, threads_per_worker=1, nthreads=2, asynchronous=True)


def test_memory_limit_auto_splits_total(no_leaks: None) -> None:
    from distributed.system import MEMORY_LIMIT

    total = MEMORY_LIMIT  # the machine's, or less in a container
    with LocalCluster(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None) as c:
        limits = [w["memory_limit"] for w in c.scheduler_info["workers"].values()]
        assert limits == [total // 2, total // 2]
    with LocalCluster(processes=False, n_workers=1, memory_limit="1GiB", dashboard_address=None) as c:
        assert [w["memory_limit"] for w in c.scheduler_info["workers"].values()] == [2**30]


# -- in-process clusters --------------------------------------------------------------------
def test_inprocess_cluster(no_leaks: None) -> None:
    with LocalCluster(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("inproc://")
        assert status_of(cluster) == Status.running
        assert cluster.asynchronous is False
        assert cluster.event_loop is not None and cluster.event_loop.is_running()
        # dask's Cluster.loop: a tornado IOLoop over that loop.
        assert isinstance(cluster.loop, IOLoop) and getattr(cluster.loop, "asyncio_loop", None) is cluster.event_loop
        assert sorted(cluster.workers) == [0, 1]
        assert all(isinstance(w, Worker) for w in cluster.workers.values())
        assert cluster.scheduler_info["n_workers"] == 2
        assert cluster.dashboard_link is None
        assert "workers=2" in repr(cluster) and "threads=2" in repr(cluster)
        with Client(cluster) as client:
            assert client.scheduler_address == cluster.scheduler_address
            compute_checks(client)
        loop_thread = cluster._loop_runner.thread if cluster._loop_runner else None
    assert status_of(cluster) == Status.closed
    assert loop_thread is not None and not loop_thread.is_alive()
    assert cluster.scheduler is not None and cluster.scheduler.status == Status.closed
    cluster.close()  # closing twice is fine


def test_client_shares_the_clusters_loop(no_leaks: None) -> None:
    with LocalCluster(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            # No loop thread of its own: messages to the scheduler and the
            # in-process worker need no thread hop.
            assert client.event_loop is cluster.event_loop
            assert client.loop is cluster.loop
            assert client._loop_runner.thread is None
            assert client.submit(operator.add, 1, 2).result() == 3
        # Closing the client leaves the cluster's loop running for the next one.
        assert cluster.event_loop is not None and cluster.event_loop.is_running()
        with Client(cluster) as again:
            assert again.submit(operator.add, 2, 2).result() == 4
        # A client given a loop keeps it.
        other = distributed.utils.LoopRunner()
        other.start()
        try:
            with Client(cluster, loop=other.loop) as own:
                assert own.event_loop is other.loop
                assert own.submit(operator.add, 3, 2).result() == 5
        finally:
            other.stop()


def test_inprocess_cluster_over_tcp(no_leaks: None) -> None:
    with LocalCluster(processes=False, n_workers=1, protocol="tcp", dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        with Client(cluster) as client:
            assert client.submit(operator.add, 1, 2).result() == 3


def test_scheduler_kwargs_and_blocked_handlers(no_leaks: None) -> None:
    with LocalCluster(
        processes=False,
        n_workers=1,
        scheduler_port=0,
        dashboard_address=":0",
        scheduler_kwargs={"dashboard": False},
        blocked_handlers=["who_has"],
    ) as cluster:
        assert cluster.scheduler is not None
        assert cluster.scheduler.dashboard is False
        assert "who_has" not in cluster.scheduler.handlers
        assert cluster.dashboard_link is None


def test_dashboard_link(no_leaks: None) -> None:
    pytest.importorskip("distributed.http.server")
    with LocalCluster(processes=False, n_workers=1, dashboard_address=":0") as cluster:
        link = cluster.dashboard_link
        assert link is not None and link.startswith("http://127.0.0.1:") and link.endswith("/status")
    assert "workers=0" in repr(cluster) and status_of(cluster) == Status.closed


def test_scale_inprocess(no_leaks: None) -> None:
    with LocalCluster(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            cluster.scale(4)
            assert len(cluster.workers) == 4
            assert cluster.scheduler is not None and len(cluster.scheduler.workers) == 4
            assert client.submit(operator.add, 1, 2).result() == 3
            wait_for_idle(cluster)
            cluster.scale(2)
            assert sorted(cluster.workers) == [0, 1]
            assert len(cluster.scheduler.workers) == 2
            assert client.gather(client.map(operator.neg, range(20))) == [-i for i in range(20)]
            wait_for_idle(cluster)
            cluster.scale(0)
            assert not cluster.workers and not cluster.scheduler.workers
            cluster.scale(1)
            assert sorted(cluster.workers) == [4]  # names are never reused
            cluster.wait_for_workers(1, timeout=10)
            assert client.submit(operator.add, 2, 2).result() == 4
        with pytest.raises(ValueError):
            cluster.scale(-1)


def test_wait_for_workers_times_out(no_leaks: None) -> None:
    with LocalCluster(processes=False, n_workers=0, dashboard_address=None) as cluster:
        with pytest.raises(TimeoutError):
            cluster.wait_for_workers(1, timeout=0.2)
        cluster.scale(1)
        cluster.wait_for_workers(1, timeout=10)


def test_worker_class(no_leaks: None) -> None:
    class MyWorker(Worker):
        pass

    with LocalCluster(n_workers=1, worker_class=MyWorker, dashboard_address=None) as cluster:
        assert cluster.processes is False  # a given worker class runs in process by default
        assert all(type(w) is MyWorker for w in cluster.workers.values())
    with LocalCluster(
        n_workers=1, processes=False, worker_class="distributed.Worker", dashboard_address=None
    ) as cluster:
        assert all(type(w) is distributed.worker.Worker for w in cluster.workers.values())
    with pytest.raises(ValueError, match="processes=True"):
        LocalCluster(n_workers=1, processes=False, worker_class="distributed.Nanny", dashboard_address=None)
    with pytest.raises(ValueError, match="child process"):
        LocalCluster(n_workers=1, processes=True, worker_class=MyWorker, asynchronous=True)


def test_worker_kwargs_reach_workers(no_leaks: None) -> None:
    with LocalCluster(processes=False, n_workers=1, resources={"GPU": 2}, dashboard_address=None) as cluster:
        (info,) = cluster.scheduler_info["workers"].values()
        assert info["resources"] == {"GPU": 2}


def test_silence_logs_is_restored(no_leaks: None) -> None:
    # silence_logs sets the level of the distributed stderr handler, not of the logger
    # (whose INFO records the servers keep for get_logs).
    # The test runner may put handlers of its own on the logger (pytest 9.2 does): they keep their levels.
    others = [h for h in logging.getLogger("distributed").handlers if h not in stderr_handlers()]
    others_levels = [h.level for h in others]
    (handler,) = stderr_handlers()
    old = handler.level
    with LocalCluster(processes=False, n_workers=0, silence_logs=logging.ERROR, dashboard_address=None):
        assert handler.level == logging.ERROR
        assert logging.getLogger("distributed").getEffectiveLevel() == logging.INFO
        assert [h.level for h in others] == others_levels
    assert handler.level == old


def test_base_cluster_cannot_start() -> None:
    async def main() -> None:
        cluster = Cluster(asynchronous=True)
        with pytest.raises(AttributeError):
            cluster.scheduler_address
        assert getattr(cluster, "scheduler_address", None) is None
        with pytest.raises(NotImplementedError):
            await cluster
        await cluster.close()

    asyncio.run(main())


# -- asynchronous clusters ------------------------------------------------------------------
def test_async_cluster_and_client(no_leaks: None) -> None:
    async def main() -> None:
        async with LocalCluster(asynchronous=True, processes=False, n_workers=2, dashboard_address=None) as cluster:
            assert cluster.asynchronous and cluster.event_loop is asyncio.get_running_loop()
            async with Client(cluster, asynchronous=True) as client:
                assert await client.submit(operator.add, 1, 2) == 3
                results = await client.gather(client.map(operator.mul, range(100), range(100)))
                assert results == [i * i for i in range(100)]
                await cluster.scale(3)
                assert len(cluster.workers) == 3
                await cluster.wait_for_workers(3, timeout=10)
                scheduler = cluster.scheduler
                assert scheduler is not None
                await async_poll_for(lambda: not scheduler.tasks, 10)  # see wait_for_idle
                task = cluster.scale(1)  # runs even when not awaited
                await async_poll_for(lambda: len(cluster.workers) == 1, 10)
                await task
                assert await client.submit(operator.add, 2, 3) == 5
        assert cluster.status == Status.closed

    asyncio.run(asyncio.wait_for(main(), 50))


def test_await_async_cluster(no_leaks: None) -> None:
    async def main() -> None:
        cluster = LocalCluster(asynchronous=True, processes=False, n_workers=1, dashboard_address=None)
        with pytest.raises(AttributeError):
            cluster.scheduler_address
        assert await cluster is cluster
        assert await cluster is cluster  # awaiting again is harmless
        assert cluster.scheduler_address.startswith("inproc://")
        async with Client(cluster, asynchronous=True) as client:
            assert await client.submit(operator.add, 1, 2) == 3
        await cluster.close()
        await cluster.close()
        assert cluster.status == Status.closed

    asyncio.run(asyncio.wait_for(main(), 50))


def test_client_starts_inprocess_cluster(no_leaks: None) -> None:
    with Client(processes=False, n_workers=1, dashboard_address=":0") as client:
        cluster = client.cluster
        assert isinstance(cluster, LocalCluster)
        assert cluster.processes is False
        assert len(cluster.workers) == 1
        assert client.submit(operator.add, 1, 2).result() == 3
        assert da.ones(100, chunks=10).sum().compute() == 100
    assert cluster.status == Status.closed


def test_sync_cluster_inside_running_loop_thread(no_leaks: None) -> None:
    # A synchronous cluster built from a thread that runs another loop.
    async def main() -> None:
        cluster = LocalCluster(processes=False, n_workers=1, dashboard_address=None)
        try:
            assert cluster.event_loop is not asyncio.get_running_loop()
            async with Client(cluster, asynchronous=True) as client:
                assert await client.submit(operator.add, 1, 2) == 3
        finally:
            cluster.close()

    asyncio.run(main())


# -- clusters of worker processes ----------------------------------------------------------------
@pytest.mark.timeout(120)
def test_process_cluster(no_leaks: None) -> None:
    cluster = LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None)
    try:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        handles = list(cluster.workers.values())
        assert all(isinstance(h, Nanny) for h in handles)  # processes=True: each worker under a nanny
        nannies = [h for h in handles if isinstance(h, Nanny)]
        pids = {h.pid for h in nannies}
        assert len(pids) == 2 and pids <= {p.pid for p in live_children()}
        procs = [h.process for h in nannies]
        with Client(cluster) as client:
            compute_checks(client)
            worker_pids = set(
                client.gather(
                    [client.submit(__import__("os").getpid, pure=False, workers=[h.worker_address]) for h in nannies]
                )
            )
            assert worker_pids == pids
        cluster.close()
        assert all(h.status == Status.closed for h in nannies)
        assert all(p is not None and p.exitcode == 0 for p in procs)  # closed cleanly, not killed
    finally:
        kill_cluster_children(cluster)
        cluster.close()


@pytest.mark.timeout(120)
def test_process_cluster_config_and_scale(no_leaks: None) -> None:
    with dask.config.set({"distributed.worker.validate": True}):
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None)
    try:
        with Client(cluster) as client:
            assert client.submit(dask.config.get, "distributed.worker.validate", pure=False).result() is True
            cluster.scale(2)
            assert len(cluster.workers) == 2
            assert cluster.scheduler is not None and len(cluster.scheduler.workers) == 2
            assert client.gather(client.map(operator.neg, range(50))) == [-i for i in range(50)]
            removed = cluster.workers[1]
            assert isinstance(removed, Nanny)
            removed_proc = removed.process
            wait_for_idle(cluster)
            cluster.scale(1)
            assert list(cluster.workers) == [0]
            assert removed.status == Status.closed
            assert removed_proc is not None and removed_proc.exitcode == 0
            assert client.submit(operator.add, 1, 2).result() == 3
    finally:
        kill_cluster_children(cluster)
        cluster.close()


@pytest.mark.timeout(120)
def test_client_without_address_starts_local_cluster(no_leaks: None) -> None:
    client = Client()
    try:
        cluster = client.cluster
        assert isinstance(cluster, LocalCluster)
        assert cluster.processes is True
        # The dashboard is on, as in dask.distributed (:8787, or a free port when that is taken).
        assert cluster.dashboard_link is not None and cluster.dashboard_link.endswith("/status")
        assert client.dashboard_link == cluster.dashboard_link
        assert client.submit(operator.add, 1, 2).result() == 3
        handles = list(cluster.workers.values())
        assert handles and all(isinstance(h, Nanny) for h in handles)
    finally:
        client.close()
    assert cluster.status == Status.closed
    assert all(isinstance(h, Nanny) and h.status == Status.closed for h in handles)


# -- logs -----------------------------------------------------------------------------------------
def test_get_logs_inprocess(no_leaks: None) -> None:
    async def main() -> None:
        async with LocalCluster(
            n_workers=2, processes=False, dashboard_address=None, asynchronous=True, silence_logs=False
        ) as cluster:
            assert cluster.scheduler is not None
            workers = list(cluster.scheduler.workers)
            logging.getLogger("distributed.scheduler").warning("scheduler-marker %d", 1)
            logging.getLogger("distributed.worker").warning("worker-marker")
            logging.getLogger("distributed.deploy.local").warning("cluster-marker")
            logs = await cluster.get_logs()
            assert set(logs) == {"Cluster", "Scheduler", *workers}
            assert "scheduler-marker 1" in logs["Scheduler"] and "WARNING" in logs["Scheduler"]
            assert "worker-marker" not in logs["Scheduler"]
            assert all("worker-marker" in logs[w] for w in workers)
            assert "cluster-marker" in logs["Cluster"]
            some = await cluster.get_logs(cluster=False, scheduler=False, workers=workers[:1])
            assert set(some) == {workers[0]}
            assert cluster.scheduler.get_logs(n=1, timestamps=True)[0][:2] == (
                "WARNING",
                cluster.scheduler.get_logs(n=1)[0][1],
            )
        # Closed servers stop collecting.
        logging.getLogger("distributed.scheduler").warning("after-close")
        assert "after-close" not in str(cluster.scheduler.get_logs())

    asyncio.run(main())


def test_get_logs_are_bounded(no_leaks: None) -> None:
    with dask.config.set({"distributed.admin.log-length": 3}):
        with LocalCluster(n_workers=0, processes=False, dashboard_address=None, silence_logs=False) as cluster:
            for i in range(10):
                logging.getLogger("distributed.scheduler").warning("record-%d", i)
            text = cluster.get_logs(cluster=False, workers=False)["Scheduler"]
    assert [line.rsplit(" - ", 1)[1] for line in text.splitlines()] == ["record-7", "record-8", "record-9"]


@pytest.mark.timeout(120)
def test_get_logs_of_worker_processes(no_leaks: None) -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster:
        (address,) = (h.worker_address for h in cluster.workers.values() if isinstance(h, Nanny))
        logs = cluster.get_logs()
        assert set(logs) == {"Cluster", "Scheduler", address}
        # Default silence_logs quiets stderr, not the servers' INFO records.
        assert all("INFO" in text for text in logs.values()), logs


def test_get_logs_keep_info_while_stderr_is_silenced(no_leaks: None, capfd: pytest.CaptureFixture[str]) -> None:
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
        assert client.submit(operator.add, 1, 2).result() == 3
        logs = cluster.get_logs()
    assert all("INFO" in text for text in logs.values()), logs
    assert "scheduler at" in logs["Cluster"]
    assert " - INFO - " not in capfd.readouterr().err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("processes", [False, True])
def test_worker_dashboard_address_serves_each_workers_dashboard(no_leaks: None, processes: bool) -> None:
    import urllib.request

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=None,
            worker_dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as client,
    ):
        workers = client.scheduler_info()["workers"]
        ports = {addr: info["services"]["dashboard"] for addr, info in workers.items()}
        assert len(set(ports.values())) == 2, ports  # one dashboard each, on a free port each
        for addr, port in ports.items():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30) as r:
                assert r.status == 200
                assert f"({addr}): status</title>" in r.read().decode()  # the page of that very worker


# -- parameters that cannot be honoured yet are refused by name ------------------------------------
@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"security": object()}, TypeError),
        ({"services": {"x": object}}, NotImplementedError),
        ({"worker_services": {"x": object}}, NotImplementedError),
        ({"service_kwargs": {"x": {}}}, NotImplementedError),
        ({"start": True}, ValueError),
    ],
)
def test_local_cluster_refuses_what_it_cannot_honour(
    no_leaks: None, kwargs: dict[str, object], error: type[Exception]
) -> None:
    (name,) = kwargs
    with pytest.raises(error, match=rf"LocalCluster\({name}="):
        LocalCluster(processes=False, n_workers=0, dashboard_address=None, **kwargs)  # type: ignore[arg-type]


def test_in_process_cluster_hands_tasks_over_unpickled(no_leaks: None) -> None:
    # As with dask's threads: the workers run the very objects the client made.
    lock = threading.Lock()
    data = np.arange(5)
    with (
        LocalCluster(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        # A lambda holding a lock cannot be pickled; in process it need not be.
        assert client.submit(lambda: lock.locked(), pure=False).result() is False
        assert client.submit(id, data, pure=False).result() == id(data)
        assert client.compute(da.arange(5, chunks=2).sum()).result() == 10
