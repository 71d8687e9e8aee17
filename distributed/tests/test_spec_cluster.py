"""SpecCluster: clusters from scheduler and worker specs, scaled by count, memory or cores."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import dask
import pytest

from distributed import Adaptive, SpecCluster
from distributed.client import Client
from distributed.core import Status
from distributed.deploy import LocalCluster
from distributed.deploy.spec import ProcessInterface, close_clusters
from distributed.nanny import Nanny
from distributed.scheduler import Scheduler
from distributed.tests.logs import caught_logs, messages
from distributed.tests.test_cli import REPO_ROOT, read_scheduler_file
from distributed.tests.test_cli import SCHEDULER as SCHEDULER_CMD
from distributed.utils_test import async_poll_for, gen_test, inc
from distributed.worker import Worker

SCHEDULER: dict[str, Any] = {"cls": Scheduler, "options": {"dashboard": False, "host": "127.0.0.1", "protocol": "tcp"}}


class MyWorker(Worker):
    """A worker class of the user's, to show the spec's cls is honoured."""


def worker_spec(cls: Any = Worker, **options: Any) -> dict[str, Any]:
    return {"cls": cls, "options": {"nthreads": 1, "host": "127.0.0.1", "protocol": "tcp", **options}}


def scheduler_names(cluster: SpecCluster) -> set[str]:
    s = cluster.scheduler
    assert isinstance(s, Scheduler)
    return {str(ws.name) for ws in s.workers.values()}


@gen_test()
async def test_custom_worker_spec_scale_up_and_down() -> None:
    async with SpecCluster(
        workers={"a": worker_spec(MyWorker), "b": worker_spec(MyWorker)},
        scheduler=SCHEDULER,
        worker=worker_spec(MyWorker, nthreads=2),
        asynchronous=True,
    ) as cluster:
        assert set(cluster.workers) == {"a", "b"}
        assert all(type(w) is MyWorker for w in cluster.workers.values())
        assert scheduler_names(cluster) == {"a", "b"}
        assert cluster.plan == cluster.requested == cluster.observed == {"a", "b"}
        async with Client(cluster, asynchronous=True) as c:
            await cluster.scale(4)
            assert len(cluster.worker_spec) == len(cluster.workers) == 4
            assert scheduler_names(cluster) == {"a", "b", "0", "1"}
            assert cluster.workers[0].state.nthreads == 2  # type: ignore[attr-defined]  # a MyWorker
            futures = c.map(inc, range(20))
            assert await c.gather(futures) == list(range(1, 21))
            # Scaling down retires the newest workers; the results they held move to the others.
            await cluster.scale(1)
            assert set(cluster.worker_spec) == set(cluster.workers) == {"a"}
            assert scheduler_names(cluster) == {"a"}
            assert await c.gather(futures) == list(range(1, 21))
            s = cluster.scheduler
            assert isinstance(s, Scheduler)
            assert all(ts.state == "memory" for ts in s.tasks.values())


@gen_test()
async def test_scale_down_by_name_and_address_and_correct_state() -> None:
    async with SpecCluster(
        workers={n: worker_spec() for n in "abc"}, scheduler=SCHEDULER, asynchronous=True
    ) as cluster:
        b_address = cluster.workers["b"].address
        await cluster.scale_down(["a", b_address])
        assert set(cluster.workers) == {"c"}
        assert scheduler_names(cluster) == {"c"}
        # Editing the spec by hand, then correcting the state, starts what is missing.
        cluster.worker_spec["d"] = worker_spec()
        await cluster._correct_state()
        assert set(cluster.workers) == {"c", "d"}
        assert scheduler_names(cluster) == {"c", "d"}


@gen_test()
async def test_a_worker_lost_past_the_lost_worker_timeout_is_closed_and_started_anew() -> None:
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "300ms"}):
        cluster = SpecCluster(
            workers={n: worker_spec() for n in "ab"},
            scheduler=SCHEDULER,
            asynchronous=True,
            scheduler_sync_interval=0.05,
        )
    async with cluster:
        assert cluster.lost_worker_timeout == 0.3
        await async_poll_for(lambda: scheduler_names(cluster) == {"a", "b"}, timeout=10)
        await async_poll_for(lambda: cluster._arrived_once == {"a", "b"}, timeout=10)
        lost = cluster.workers["a"]
        await lost.close()  # gone from the scheduler, behind the cluster's back
        await async_poll_for(lambda: "a" not in cluster.workers, timeout=10)
        assert set(cluster.workers) == {"b"} and set(cluster.worker_spec) == {"a", "b"}
        await cluster._correct_state()  # the next scaling starts it anew
        assert set(cluster.workers) == {"a", "b"} and cluster.workers["a"] is not lost
        await async_poll_for(lambda: scheduler_names(cluster) == {"a", "b"}, timeout=10)


@pytest.mark.parametrize("stage", ["retiring", "closing"])
@gen_test()
async def test_closing_the_cluster_during_a_scale_down_waits_for_the_leaving_worker(stage: str) -> None:
    # The scale-down is a task the cluster owns, cancelled as the cluster closes: the worker it had
    # taken out of ``workers`` to retire and close must still be closed, and before close() returns.
    cluster = await SpecCluster(
        workers={"a": worker_spec(), "b": worker_spec()}, scheduler=SCHEDULER, asynchronous=True
    )
    try:
        leaving = cluster.workers["b"]
        assert isinstance(leaving, Worker)
        s = cluster.scheduler
        assert isinstance(s, Scheduler)
        retiring = asyncio.Event()
        if stage == "retiring":
            # Hold the retirement up until the cluster closes, so that the cancellation comes while it runs.
            route = s.handlers["retire_workers"]

            async def slow_retire(comm: Any, msg: Any) -> Any:
                retiring.set()
                await async_poll_for(lambda: cluster.status in (Status.closing, Status.closed), timeout=10)
                return await route.func(comm, msg)

            s.handlers["retire_workers"] = dataclasses.replace(route, func=slow_retire)
        else:
            # A thread busy for a while: the worker's close waits for it, after leaving the scheduler.
            leaving.executor.submit(time.sleep, 2)
        cluster.scale(1)
        if stage == "retiring":
            await asyncio.wait_for(retiring.wait(), 10)
        else:
            await async_poll_for(lambda: leaving.status in (Status.closing, Status.closed), timeout=10)
        assert "b" not in cluster.workers
    finally:
        await cluster.close()
    assert leaving.status == Status.closed
    assert not leaving.executor.threads


@gen_test()
async def test_scale_by_memory_and_cores_rounds_up() -> None:
    async with SpecCluster(
        scheduler=SCHEDULER, worker=worker_spec(nthreads=2, memory_limit="1GB"), asynchronous=True
    ) as cluster:
        assert cluster.workers == {}
        await cluster.scale(cores=3)  # 3 threads need two 2-thread workers
        assert len(cluster.workers) == 2
        await cluster.scale(memory="2.5 GB")  # 2.5 GB needs three 1 GB workers
        assert len(cluster.workers) == 3
        await cluster.scale(2, cores=1)  # at least n
        assert len(cluster.workers) == 2
        await cluster.scale(memory=1, cores=1)
        assert len(cluster.workers) == 1
        await async_poll_for(lambda: len(cluster.scheduler.workers) == 1, timeout=10)
        assert sum(ws.nthreads for ws in cluster.scheduler.workers.values()) == 2


@gen_test()
async def test_scale_by_memory_needs_a_memory_limit() -> None:
    async with SpecCluster(scheduler=SCHEDULER, worker=worker_spec(memory_limit=None), asynchronous=True) as cluster:
        with pytest.raises(ValueError, match="memory_limit"):
            cluster.scale(memory="1GB")
        cluster.new_spec = None
        with pytest.raises(ValueError, match="no worker template"):
            cluster.new_worker_spec()
        with pytest.raises(ValueError, match="no worker template"):
            await cluster.scale(1)


@gen_test()
async def test_nanny_spec_keeps_results_across_scale_down() -> None:
    spec = worker_spec(Nanny)
    async with SpecCluster(workers={0: spec, 1: spec}, scheduler=SCHEDULER, worker=spec, asynchronous=True) as cluster:
        assert all(isinstance(w, Nanny) for w in cluster.workers.values())
        async with Client(cluster, asynchronous=True) as c:
            futures = c.map(inc, range(10))
            await c.gather(futures)
            await cluster.scale(1)
            assert len(cluster.workers) == 1
            assert scheduler_names(cluster) == {"0"}
            assert await c.gather(futures) == list(range(1, 11))
            await cluster.scale(2)
            assert scheduler_names(cluster) == {"0", "2"}  # names are never reused


def test_refused_parameters() -> None:
    with pytest.raises(TypeError, match=r"SpecCluster\(security="):
        SpecCluster(scheduler=SCHEDULER, security=object(), asynchronous=True)  # type: ignore[arg-type]  # the wrong type is the point
    with pytest.raises(TypeError, match="worker spec"):
        SpecCluster(scheduler=SCHEDULER, worker={"options": {}}, asynchronous=True)


def test_local_cluster_is_a_spec_cluster() -> None:
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None, memory_limit="1GB"
    ) as cluster:
        assert isinstance(cluster, SpecCluster)
        assert set(cluster.worker_spec) == set(cluster.workers) == {0, 1}
        assert cluster.scheduler_spec is not None and cluster.scheduler_spec["cls"] is Scheduler
        cluster.scale(cores=3)
        assert set(cluster.workers) == {0, 1, 2}
        cluster.scale(memory="1GB")
        assert set(cluster.workers) == {0}
        assert cluster.status == Status.running
        adaptive = cluster.adapt(minimum=1, maximum=2)
        assert isinstance(adaptive, Adaptive)


def test_shutdown_on_close_closes_open_clusters_at_exit() -> None:
    closing = SpecCluster(workers={"a": worker_spec()}, scheduler=SCHEDULER)
    staying = SpecCluster(workers={"a": worker_spec()}, scheduler=SCHEDULER, shutdown_on_close=False)
    try:
        close_clusters()  # what runs at exit
        assert closing.status == Status.closed
        assert staying.status == Status.running
    finally:
        closing.close()
        staying.close()


class InProcessJob(ProcessInterface):
    """A job class written the way dask-jobqueue writes its own: a worker behind ProcessInterface."""

    def __init__(self, scheduler: str | None = None, name: Any = None, **options: Any) -> None:
        super().__init__(scheduler=scheduler, name=name)
        self.worker = Worker(scheduler, name=name, nthreads=1, host="127.0.0.1", protocol="tcp", **options)

    async def start(self) -> None:
        await self.worker.start()
        self.address = self.worker.address
        await super().start()

    async def close(self) -> None:
        await self.worker.close()
        await super().close()


@gen_test()
async def test_process_interface_jobs_scale_up_and_down() -> None:
    async with SpecCluster(
        scheduler=SCHEDULER, worker={"cls": InProcessJob, "options": {}}, asynchronous=True
    ) as cluster:
        async with Client(cluster, asynchronous=True) as c:
            await cluster.scale(2)
            await c.wait_for_workers(2)
            handles: list[Any] = list(cluster.workers.values())
            assert len(handles) == 2 and all(isinstance(j, InProcessJob) for j in handles)
            jobs: list[InProcessJob] = handles
            assert all(j.status == Status.running for j in jobs)
            futures = c.map(inc, range(10))
            assert await c.gather(futures) == list(range(1, 11))
            await cluster.scale(1)
            assert len(cluster.workers) == 1
            assert await c.gather(futures) == list(range(1, 11))
            remaining: list[Any] = list(cluster.workers.values())
            closed = [j for j in jobs if j not in remaining]
            assert len(closed) == 1 and closed[0].status == Status.closed
            await closed[0].finished()


def status_of(process: ProcessInterface) -> Status:
    return process.status


@gen_test()
async def test_process_interface_awaits_and_context() -> None:
    job = ProcessInterface(scheduler="tcp://127.0.0.1:1", name="j")
    assert status_of(job) == Status.created and job.address is None
    assert await job is job
    assert status_of(job) == Status.running
    async with ProcessInterface() as other:
        assert status_of(other) == Status.running
    assert status_of(other) == Status.closed
    await other.finished()


def test_group_spec_must_be_a_list_of_suffixes() -> None:
    with pytest.raises(TypeError, match="group"):
        SpecCluster(scheduler=SCHEDULER, worker={**worker_spec(), "group": "-0"}, asynchronous=True)
    with pytest.raises(ValueError, match="group"):
        SpecCluster(scheduler=SCHEDULER, worker={**worker_spec(), "group": []}, asynchronous=True)


class TwoWorkerJob(ProcessInterface):
    """A job running two workers, named as dask-jobqueue's with processes=2: its name plus "-0" and "-1"."""

    def __init__(self, scheduler: str | None = None, name: Any = None, **options: Any) -> None:
        super().__init__(scheduler=scheduler, name=name)
        self.workers = [
            Worker(scheduler, name=f"{name}-{i}", nthreads=1, host="127.0.0.1", protocol="tcp", **options)
            for i in range(2)
        ]

    async def start(self) -> None:
        for w in self.workers:
            await w.start()
        await super().start()

    async def close(self) -> None:
        for w in self.workers:
            await w.close()
        await super().close()


GROUP_SPEC: dict[str, Any] = {"cls": TwoWorkerJob, "options": {}, "group": ["-0", "-1"]}


@gen_test()
async def test_group_scale_starts_and_closes_whole_entries_handing_data_off() -> None:
    CALLS.clear()
    async with SpecCluster(scheduler=SCHEDULER, worker=GROUP_SPEC, asynchronous=True) as cluster:
        async with Client(cluster, asynchronous=True) as c:
            # scale counts entries (jobs), as in dask.distributed: two jobs of two workers each.
            await cluster.scale(2)
            await c.wait_for_workers(4)
            assert set(cluster.worker_spec) == {0, 1} and len(cluster.workers) == 2
            names = {"0-0", "0-1", "1-0", "1-1"}
            assert cluster.plan == names and cluster.requested == names
            await async_poll_for(lambda: scheduler_names(cluster) == names, timeout=5)
            await async_poll_for(lambda: cluster.observed == names, timeout=5)
            infos = (await c.scheduler_info())["workers"]
            by_name = {str(info["name"]): addr for addr, info in infos.items()}
            futures = [c.submit(counted_inc, i, workers=[by_name[sorted(names)[i % 4]]]) for i in range(12)]
            assert await c.gather(futures) == list(range(1, 13))
            jobs: list[Any] = list(cluster.workers.values())
            # scale_up counts workers: three round up to the same two entries.
            await cluster.scale_up(3)
            assert set(cluster.worker_spec) == {0, 1}
            await cluster.scale(1)
            assert set(cluster.worker_spec) == {0} and set(cluster.workers) == {0}
            assert scheduler_names(cluster) == {"0-0", "0-1"}
            assert cluster.plan == {"0-0", "0-1"}
            assert jobs[1].status == Status.closed
            # Both workers of the closed entry handed their data off: nothing was recomputed.
            assert await c.gather(futures) == list(range(1, 13))
            assert sorted(CALLS) == list(range(12))


@gen_test()
async def test_group_scale_down_by_member_name_or_address_closes_its_entry() -> None:
    async with SpecCluster(scheduler=SCHEDULER, worker=GROUP_SPEC, asynchronous=True) as cluster:
        async with Client(cluster, asynchronous=True) as c:
            await cluster.scale(3)
            await c.wait_for_workers(6)
            await cluster.scale_down(["1-1"])
            assert set(cluster.worker_spec) == {0, 2}
            assert scheduler_names(cluster) == {"0-0", "0-1", "2-0", "2-1"}
            infos = (await c.scheduler_info())["workers"]
            addr = next(a for a, info in infos.items() if str(info["name"]) == "2-0")
            await cluster.scale_down([addr])
            assert set(cluster.worker_spec) == {0}
            assert scheduler_names(cluster) == {"0-0", "0-1"}


class LookCountingAdaptive(Adaptive):
    """An Adaptive that counts its looks."""

    looks = 0

    async def target(self) -> int:
        self.looks += 1
        return await super().target()


@gen_test()
async def test_adapt_with_groups_grows_and_shrinks_by_entries() -> None:
    async with SpecCluster(scheduler=SCHEDULER, worker=GROUP_SPEC, asynchronous=True) as cluster:
        cluster.adapt(minimum=3, maximum=4, interval="10ms", wait_count=1)
        await async_poll_for(lambda: len(scheduler_names(cluster)) == 4, timeout=10)
        assert set(cluster.worker_spec) == {0, 1}
        # One worker wanted: one entry of two stays (closing both would leave fewer than wanted).
        adaptive = cluster.adapt(LookCountingAdaptive, minimum=1, maximum=1, interval="10ms", wait_count=1)
        assert isinstance(adaptive, LookCountingAdaptive)
        await async_poll_for(lambda: len(cluster.workers) == 1 and len(scheduler_names(cluster)) == 2, timeout=10)
        kept, looks, acted = set(cluster.worker_spec), adaptive.looks, len(adaptive.log)
        await async_poll_for(lambda: adaptive.looks >= looks + 10, timeout=10)
        # Settled: the entry left is not closed and started again.
        assert set(cluster.worker_spec) == kept and len(adaptive.log) == acted
        assert len(scheduler_names(cluster)) == 2


@gen_test()
async def test_closing_workers_the_scheduler_already_retired_warns_nothing() -> None:
    # What Adaptive does: the scheduler retires the workers (moving their data), then the cluster closes them.
    async with SpecCluster(
        workers={"a": worker_spec(), "b": worker_spec()}, scheduler=SCHEDULER, asynchronous=True
    ) as cluster:
        async with Client(cluster, asynchronous=True) as c:
            futures = c.map(inc, range(10))
            await c.gather(futures)
            s = cluster.scheduler
            assert isinstance(s, Scheduler)
            retired = await s.retire_workers(names=["b"], remove=True, close_workers=False)
            assert len(retired) == 1
            with caught_logs("distributed.deploy.spec") as logged:
                await cluster.scale_down(["b"])
            assert set(cluster.workers) == {"a"}
            assert not logged, messages(logged)
            assert await c.gather(futures) == list(range(1, 11))


CALLS: list[int] = []


def counted_inc(x: int) -> int:
    CALLS.append(x)
    return x + 1


class AddresslessJob(InProcessJob):
    """Like dask-jobqueue's jobs: the job never learns its worker's address."""

    async def start(self) -> None:
        await super().start()
        self.address = None


@gen_test()
async def test_scaling_down_jobs_without_address_moves_their_data() -> None:
    CALLS.clear()
    async with SpecCluster(
        scheduler=SCHEDULER, worker={"cls": AddresslessJob, "options": {}}, asynchronous=True
    ) as cluster:
        async with Client(cluster, asynchronous=True) as c:
            await cluster.scale(2)
            await c.wait_for_workers(2)
            workers = list((await c.scheduler_info())["workers"])
            futures = [c.submit(counted_inc, i, workers=[workers[i % 2]]) for i in range(10)]
            assert await c.gather(futures) == list(range(1, 11))
            await cluster.scale(1)
            assert len(cluster.workers) == 1
            # The data of the job closed was handed over before it closed, not recomputed.
            assert await c.gather(futures) == list(range(1, 11))
            assert sorted(CALLS) == list(range(10))


@gen_test()
async def test_adapt_keeps_an_entry_whole_while_one_of_its_workers_holds_the_only_results() -> None:
    CALLS.clear()
    async with SpecCluster(
        workers={0: GROUP_SPEC}, worker=GROUP_SPEC, scheduler=SCHEDULER, asynchronous=True
    ) as cluster:
        async with Client(cluster, asynchronous=True) as c:
            await c.wait_for_workers(2)
            infos = (await c.scheduler_info())["workers"]
            addr = next(a for a, info in infos.items() if str(info["name"]) == "0-0")
            futures = [c.submit(counted_inc, i, workers=[addr]) for i in range(4)]
            assert await c.gather(futures) == [1, 2, 3, 4]
            adaptive = cluster.adapt(LookCountingAdaptive, minimum=0, maximum=0, interval="10ms", wait_count=1)
            assert isinstance(adaptive, LookCountingAdaptive)
            await async_poll_for(lambda: adaptive.looks >= 20, timeout=10)
            # The scheduler cannot retire "0-0" (its results could go nowhere): its entry stays, both workers too.
            assert set(cluster.workers) == {0}
            assert await c.gather(futures) == [1, 2, 3, 4]
            assert sorted(CALLS) == [0, 1, 2, 3]
            del futures
            await async_poll_for(lambda: not cluster.workers and not scheduler_names(cluster), timeout=10)


class SchedulerProcess(ProcessInterface):
    """A scheduler in a process of its own (``dask scheduler``), as dask-cloudprovider runs one on a VM.

    Only its address is known here, read from the scheduler file it writes.
    :meth:`close` waits for the process to exit (the cluster asks the
    scheduler to terminate first) and kills it by PID only past a deadline,
    noting it in ``killed``.
    """

    def __init__(self, directory: str, dashboard: bool = False) -> None:
        super().__init__()
        self.scheduler_file = Path(directory) / "scheduler.json"
        self.log = Path(directory) / "scheduler.log"
        self.dashboard = dashboard
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed = False

    async def start(self) -> None:
        args = [*SCHEDULER_CMD, "--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(self.scheduler_file)]
        args += ["--dashboard-address", "127.0.0.1:0"] if self.dashboard else ["--no-dashboard"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env)
        deadline = time.monotonic() + 30
        while (info := read_scheduler_file(self.scheduler_file)) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"The scheduler process wrote no scheduler file:\n{self.log.read_text()}")
            await asyncio.sleep(0.05)
        self.address = str(info["address"])
        await super().start()

    async def close(self) -> None:
        if self.proc is not None:
            deadline = time.monotonic() + 15
            while self.proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if self.proc.poll() is None:
                self.killed = True
                self.kill()
        await super().close()

    def kill(self) -> None:
        """Kill the process by PID if it still runs (test cleanup)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def started_scheduler(cluster: SpecCluster) -> SchedulerProcess:
    job = cluster.scheduler
    assert isinstance(job, SchedulerProcess)
    return job


@gen_test(timeout=60)
async def test_scheduler_in_a_process_of_its_own(tmp_path: Path) -> None:
    spec = {"cls": SchedulerProcess, "options": {"directory": str(tmp_path), "dashboard": True}}
    cluster = SpecCluster(scheduler=spec, worker=worker_spec(), asynchronous=True)
    try:
        async with cluster:
            job = started_scheduler(cluster)
            assert job.proc is not None and job.proc.poll() is None
            assert not isinstance(cluster.scheduler, Scheduler)
            assert cluster.scheduler_address == job.address
            assert cluster.scheduler_info["address"] == job.address
            port = cluster.scheduler_info["services"]["dashboard"]
            assert cluster.dashboard_link == f"http://127.0.0.1:{port}/status"
            async with Client(cluster, asynchronous=True) as c:
                await cluster.scale(3)
                await c.wait_for_workers(3)
                assert set(cluster.workers) == {0, 1, 2}
                assert {str(w["name"]) for w in cluster.scheduler_info["workers"].values()} == {"0", "1", "2"}
                futures = c.map(inc, range(30))
                assert await c.gather(futures) == list(range(1, 31))
                # Down to one: the scheduler (over its address) moves the results to the worker that stays.
                await cluster.scale(1)
                assert set(cluster.workers) == {0}
                assert len(cluster.scheduler_info["workers"]) == 1
                assert len((await c.scheduler_info())["workers"]) == 1
                assert await c.gather(futures) == list(range(1, 31))
                await cluster.scale_down([0])
                assert not cluster.workers and not cluster.scheduler_info["workers"]
                await cluster.scale(1)
                assert await c.submit(inc, 41) == 42
                logs = await cluster.get_logs()
                assert set(logs) == {"Cluster", "Scheduler", *cluster.scheduler_info["workers"]}
                # The scheduler's records come from its own process, over its address.
                assert "Register worker" in logs["Scheduler"]
        # Closing asked the scheduler to terminate: its process exited without being killed.
        assert job.proc.poll() is not None and not job.killed
        assert cluster.status == Status.closed
    finally:
        started = cluster.scheduler
        if isinstance(started, SchedulerProcess):
            started.kill()


class SchedulerBehindANat(ProcessInterface):
    """A scheduler reached at its ``external_address``; its own ``address`` is not reachable from here."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Scheduler(dashboard=False, host="127.0.0.1", protocol="tcp")

    async def start(self) -> None:
        await self.inner.start()
        self.address = "tcp://10.255.255.1:1"  # what the scheduler calls itself inside its network
        self.external_address = self.inner.address
        await super().start()

    async def close(self) -> None:
        # The cluster asked it to terminate first: by now it is closing on its own.
        await self.inner.finished()
        await super().close()


@gen_test()
async def test_scheduler_handle_external_address_and_terminate() -> None:
    async with SpecCluster(
        scheduler={"cls": SchedulerBehindANat, "options": {}}, workers={"a": worker_spec()}, asynchronous=True
    ) as cluster:
        handle = cluster.scheduler
        assert isinstance(handle, SchedulerBehindANat)
        assert cluster.scheduler_address == handle.inner.address
        assert set(cluster.scheduler_info["workers"]) == {cluster.workers["a"].address}
    assert handle.inner.status == Status.closed
    assert handle.status == Status.closed
