"""What libraries that deploy dask (dask-jobqueue, dask-kubernetes, dask-gateway...) call, with real clusters.

A batch-system library builds a :class:`SpecCluster` whose worker template is
a job (a :class:`ProcessInterface` running one or several workers: a
``group``), names workers after the cluster, scales by jobs, cores or memory,
and starts ``dask worker`` processes whose stderr it reads until they say
they registered.  Each test below is one thing such a library relies on.
"""

from __future__ import annotations

import asyncio
import io
import os
import ssl
import subprocess
import sys
import threading
import time
from contextlib import redirect_stdout
from typing import Any

import pytest

from distributed import SpecCluster
from distributed.client import Client
from distributed.comm import connect
from distributed.core import Status
from distributed.deploy import LocalCluster
from distributed.deploy.local import nprocesses_nthreads, split_cores
from distributed.deploy.spec import ProcessInterface
from distributed.scheduler import Scheduler
from distributed.security import Security
from distributed.tests.test_cli import REPO_ROOT
from distributed.utils import Log, Logs, LoopRunner, SyncMethodMixin, sync
from distributed.utils_test import async_poll_for, gen_test, poll_for
from distributed.worker import Worker

SCHEDULER: dict[str, Any] = {"cls": Scheduler, "options": {"dashboard": False, "host": "127.0.0.1", "protocol": "tcp"}}


class Job(ProcessInterface):
    """A job as dask-jobqueue's: ``cores`` and ``memory`` for the whole job, split among ``processes`` workers.

    The workers run in this process (the batch system is not what is tested)
    and are named as dask-jobqueue names them: the job's name, plus ``-<i>``
    when the job runs several.
    """

    def __init__(
        self, scheduler: str | None = None, name: Any = None, cores: int = 1, memory: str = "1GB", processes: int = 1
    ) -> None:
        super().__init__(scheduler=scheduler, name=name)
        names = [str(name)] if processes == 1 else [f"{name}-{i}" for i in range(processes)]
        self.workers = [
            Worker(scheduler, name=n, nthreads=max(1, cores // processes), host="127.0.0.1", protocol="tcp")
            for n in names
        ]

    async def start(self) -> None:
        for w in self.workers:
            await w.start()
        await super().start()

    async def close(self) -> None:
        for w in self.workers:
            await w.close()
        await super().close()


class JobCluster(SpecCluster):
    """A cluster of :class:`Job` s, built as dask-jobqueue's ``JobQueueCluster`` builds its specs."""

    def __init__(self, processes: int = 1, cores: int = 2, memory: str = "2GB", **kwargs: Any) -> None:
        worker: dict[str, Any] = {"cls": Job, "options": {"cores": cores, "memory": memory, "processes": processes}}
        if processes > 1:
            worker["group"] = [f"-{i}" for i in range(processes)]
        super().__init__(scheduler=SCHEDULER, worker=worker, **kwargs)

    def _new_worker_name(self, worker_number: int) -> Any:
        # dask-jobqueue's naming: after the cluster's name, so job arrays can be told apart.
        return f"{self._name}-{worker_number}"


def names_on_scheduler(cluster: SpecCluster) -> set[str]:
    assert isinstance(cluster.scheduler, Scheduler)
    return {str(ws.name) for ws in cluster.scheduler.workers.values()}


# -- sizing -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("cores", "expected"), [(1, (1, 1)), (4, (4, 1)), (6, (3, 2)), (32, (8, 4)), (7, (7, 1))])
def test_nprocesses_nthreads(cores: int, expected: tuple[int, int]) -> None:
    assert nprocesses_nthreads(cores) == expected


def test_nprocesses_nthreads_defaults_to_this_machine() -> None:
    assert nprocesses_nthreads() == split_cores(os.cpu_count() or 1)


# -- the cluster's name, scaling by jobs, cores and memory ------------------------------------
@gen_test()
async def test_workers_are_named_after_the_cluster() -> None:
    async with JobCluster(name="foo", asynchronous=True) as cluster:
        assert cluster._name == "foo"
        await cluster.scale(2)
        assert names_on_scheduler(cluster) == {"foo-0", "foo-1"}
    async with JobCluster(asynchronous=True) as cluster:
        assert cluster._name == "JobCluster"


@gen_test()
async def test_scale_edits_the_spec_at_once_and_awaiting_the_cluster_starts_the_jobs() -> None:
    async with JobCluster(asynchronous=True) as cluster:
        cluster.scale(2)  # not awaited, as dask-jobqueue's tests and users do
        assert len(cluster.worker_spec) == 2
        await cluster
        assert len(cluster.workers) == 2
        assert all(isinstance(job, Job) and job.status == Status.running for job in cluster.workers.values())
        assert len(names_on_scheduler(cluster)) == 2
        cluster.scale(1)
        assert len(cluster.worker_spec) == 1
        await cluster
        assert len(cluster.workers) == 1 and len(names_on_scheduler(cluster)) == 1


@gen_test()
async def test_scale_before_start_is_what_the_start_runs() -> None:
    cluster = JobCluster(asynchronous=True)
    cluster.scale(2)  # dask-jobqueue's constructor does this with n_workers
    assert len(cluster.worker_spec) == 2
    async with cluster:
        assert len(cluster.workers) == 2


@gen_test()
async def test_scale_counts_jobs_and_reads_a_job_templates_cores_and_memory() -> None:
    async with JobCluster(processes=2, cores=2, memory="4GB", asynchronous=True) as cluster:
        await cluster.scale(cores=2)  # one job of two workers
        assert len(cluster.worker_spec) == 1
        assert len(names_on_scheduler(cluster)) == 2
        assert cluster.plan == names_on_scheduler(cluster)
        await cluster.scale(cores=1)  # still one whole job
        assert len(names_on_scheduler(cluster)) == 2
        cluster.scale(2)
        assert len(cluster.worker_spec) == 2
        cluster.scale(memory="10GB")
        assert len(cluster.worker_spec) == 3
        cluster.scale(cores=3, memory="1GB")
        assert len(cluster.worker_spec) == 2
        await cluster
        assert len(names_on_scheduler(cluster)) == 4
        # scale_up (what Adaptive calls) counts workers: five round up to three jobs.
        await cluster.scale_up(5)
        assert len(cluster.worker_spec) == 3


@gen_test()
async def test_adapt_counts_workers_and_bounds_in_cores_per_job() -> None:
    async with JobCluster(processes=2, cores=2, asynchronous=True) as cluster:
        adaptive = cluster.adapt(minimum=2, maximum=4, interval="10ms")
        await adaptive.adapt()
        await cluster
        assert len(cluster.workers) == 1  # two workers: one job
        # Two jobs' worth of cores: four workers.
        adaptive = cluster.adapt(minimum_cores=4, maximum_cores=8, interval="10ms")
        assert (adaptive.minimum, adaptive.maximum) == (4, 8)
        await adaptive.adapt()
        await cluster
        assert len(cluster.workers) == 2


# -- closing ----------------------------------------------------------------------------------
@gen_test()
async def test_shutdown_scheduler_false_leaves_the_scheduler_running() -> None:
    async with JobCluster(shutdown_scheduler=False, asynchronous=True) as cluster:
        await cluster.scale(1)
        scheduler = cluster.scheduler
        address = cluster.scheduler_address
        job = next(iter(cluster.workers.values()))
    assert isinstance(job, Job)
    try:
        assert job.status == Status.closed  # the workers go
        assert scheduler.status == Status.running
        comm = await connect(address, timeout=5)
        await comm.close()
    finally:
        await scheduler.close()
    async with JobCluster(asynchronous=True) as cluster:
        scheduler = cluster.scheduler
    assert scheduler.status == Status.closed


# -- clients and logs -------------------------------------------------------------------------
def test_get_client_returns_the_current_client_of_this_cluster() -> None:
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        with cluster.get_client() as client:
            assert isinstance(client, Client)
            assert client.cluster is cluster
            assert client.submit(sum, [1, 2]).result(timeout=10) == 3
            assert cluster.get_client() is client
        with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as other:
            with other.get_client() as c2:
                # The current client belongs to another cluster: this one gets a client of its own.
                with cluster.get_client() as c3:
                    assert c3 is not c2 and c3.cluster is cluster


@gen_test()
async def test_get_client_of_an_asynchronous_cluster() -> None:
    async with LocalCluster(n_workers=1, processes=False, dashboard_address=None, asynchronous=True) as cluster:
        async with cluster.get_client() as client:
            assert client.asynchronous and client.cluster is cluster
            assert await client.submit(sum, [1, 2]) == 3


def test_log_messages_print_unless_quiet_and_are_kept_for_get_logs() -> None:
    for quiet in (False, True):
        out = io.StringIO()
        with redirect_stdout(out):
            cluster = SpecCluster(scheduler=SCHEDULER, quiet=quiet, shutdown_on_close=False)
            try:
                cluster._log("Submitted job 1234")
                logs = cluster.get_logs(scheduler=False, workers=False)
            finally:
                cluster.close()
        assert cluster.quiet is quiet
        assert out.getvalue() == ("" if quiet else "Submitted job 1234\n")
        assert isinstance(logs, Logs) and isinstance(logs["Cluster"], Log)
        assert "Submitted job 1234" in logs["Cluster"]


def test_get_logs_gives_logs_of_log_texts() -> None:
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        logs = cluster.get_logs()
    assert isinstance(logs, Logs)
    assert {"Cluster", "Scheduler"} <= set(logs) and len(logs) == 3
    assert all(isinstance(v, Log) for v in logs.values())


def test_log_and_logs_show_as_html() -> None:
    log = Log("INFO all well\nWARNING <careful>\nERROR broke")
    assert log == "INFO all well\nWARNING <careful>\nERROR broke"  # still the text
    html = log._repr_html_()
    assert html.count("<p ") == 3
    assert "&lt;careful&gt;" in html and "<careful>" not in html
    assert "color: orange" in html and "color: crimson" in html
    logs = Logs({"Scheduler": log, "tcp://1.2.3.4:5": Log("x")})
    html = logs._repr_html_()
    assert html.count("<details>") == 2 and "tcp://1.2.3.4:5" in html and "&lt;careful&gt;" in html


# -- the scheduler ----------------------------------------------------------------------------
@gen_test()
async def test_scheduler_ip() -> None:
    s = Scheduler(host="127.0.0.1", dashboard=False)
    assert getattr(s, "ip", None) is None  # not listening yet
    async with s:
        assert s.ip == "127.0.0.1"
    async with Scheduler(dashboard=False) as s:
        assert s.ip == "0.0.0.0"  # every interface, as dask-jobqueue's test expects (gethostbyname(""))


@gen_test()
async def test_scheduler_services() -> None:
    async with Scheduler(host="127.0.0.1", dashboard=True, dashboard_address="127.0.0.1:0") as s:
        assert set(s.services) == {"dashboard"}
        port = s.services["dashboard"].port
        assert port > 0 and s.identity()["services"] == {"dashboard": port}
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        assert s.services == {} and s.identity()["services"] == {}


@gen_test()
async def test_scheduler_stop_refuses_new_connections() -> None:
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        comm = await connect(s.address, timeout=5)
        s.stop()
        with pytest.raises(OSError):
            await connect(s.address, timeout=0.5)
        assert s.status == Status.running  # still to be closed
        await comm.close()
    assert s.status == Status.closed


#: Lets :func:`_block` return (the worker runs in this process, so the task sees the same object).
RELEASE = threading.Event()


def _block() -> int:
    RELEASE.wait(30)
    return 1


@gen_test()
async def test_scheduler_check_idle() -> None:
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        async with Worker(s.address, nthreads=1, host="127.0.0.1") as w:
            since = s.check_idle()
            assert since is not None and since <= time.time()
            assert s.check_idle() == since  # still idle since then
            RELEASE.clear()
            async with Client(s.address, asynchronous=True) as c:
                fut = c.submit(_block, pure=False)
                await async_poll_for(lambda: any(ws.processing for ws in s.workers.values()), timeout=10)
                assert s.check_idle() is None and s.idle_since is None
                RELEASE.set()
                assert await fut == 1
                await async_poll_for(lambda: not any(ws.processing for ws in s.workers.values()), timeout=10)
                again = s.check_idle()
                assert again is not None and again > since
            assert w.status == Status.running


@gen_test()
async def test_check_idle_closes_the_scheduler_past_idle_timeout() -> None:
    async with Scheduler(host="127.0.0.1", dashboard=False) as s:
        s.idle_timeout = 0.05
        s.idle_since = time.time() - 1
        assert s.check_idle() is not None
        await async_poll_for(lambda: s.status == Status.closed, timeout=10)
        assert s.check_idle() is None


# -- TLS settings as libraries read them -------------------------------------------------------
def test_tls_config_for_role_is_the_flat_dict_libraries_turn_into_cli_options() -> None:
    sec = Security(
        tls_ca_file="ca.pem",
        tls_worker_cert="cert.pem",
        tls_worker_key="key.pem",
        tls_min_version=ssl.TLSVersion.TLSv1_3,
    )
    conf = sec.get_tls_config_for_role("worker")
    assert dict(conf) == {"ca_file": "ca.pem", "ciphers": None, "cert": "cert.pem", "key": "key.pem"}
    # What dask-jobqueue does with it: look for PEM text, then pass --tls-<key> to dask worker.
    assert not any(isinstance(v, str) and "\n" in v for v in conf.values())
    args = [a for k, v in conf.items() if v is not None for a in (f"--tls-{k.replace('_', '-')}", str(v))]
    assert args == ["--tls-ca-file", "ca.pem", "--tls-cert", "cert.pem", "--tls-key", "key.pem"]


# -- LocalCluster keeps where it listens in the specs -------------------------------------------
@gen_test()
async def test_local_cluster_keeps_interface_in_the_specs() -> None:
    async with LocalCluster(
        n_workers=0, processes=False, protocol="tcp", interface="lo", dashboard_address=None, asynchronous=True
    ) as cluster:
        assert cluster.scheduler_spec is not None
        assert "'interface': 'lo'" in str(cluster.scheduler_spec)
        cluster.scale(1)
        assert "'interface': 'lo'" in str(cluster.worker_spec)
        await cluster
        assert len(cluster.workers) == 1


# -- sync/async helpers runners build on ------------------------------------------------------
class Runner(SyncMethodMixin):
    """A class in the image of dask-jobqueue's runners: a loop and coroutine methods."""

    def __init__(self, loop: Any, asynchronous: bool = False) -> None:
        self.loop = loop
        self._asynchronous = asynchronous

    async def _double(self, x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    def double(self, x: int) -> Any:
        return self.sync(self._double, x)


def test_sync_method_mixin_blocks_outside_the_loop_and_returns_awaitables_on_it() -> None:
    runner = LoopRunner()
    runner.start()
    try:
        r = Runner(runner.loop)
        assert not r.asynchronous
        assert r.double(21) == 42

        async def on_loop() -> int:
            assert r.asynchronous
            result: int = await r.double(5)
            return result

        assert sync(runner.loop, on_loop) == 10
        with pytest.raises(TimeoutError):
            r.sync(asyncio.sleep, 5, callback_timeout=0.05)
    finally:
        runner.stop()


@gen_test()
async def test_loop_runner_asynchronous_uses_the_running_loop() -> None:
    runner = LoopRunner(asynchronous=True)
    assert runner.loop is asyncio.get_running_loop()
    runner.start()  # nothing to start: the loop is the caller's
    runner.stop()
    assert asyncio.get_running_loop().is_running()
    r = Runner(runner.loop, asynchronous=True)
    assert await r.double(2) == 4


def test_loop_runner_asynchronous_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError, match="running event loop"):
        LoopRunner(asynchronous=True)


# -- dask worker says when it registered --------------------------------------------------------
def test_dask_worker_process_says_registered_before_any_error() -> None:
    """dask-jobqueue's local jobs read the worker's stderr until ``Registered to:``; a line saying "error" fails them."""
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address, "--nthreads", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=REPO_ROOT,
        )
        lines: list[str] = []
        assert proc.stderr is not None
        stderr = proc.stderr

        def read() -> None:
            for raw in stderr:
                lines.append(raw.decode())
                if "Registered to:" in lines[-1]:
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            poll_for(lambda: any("Registered to:" in line for line in lines) or proc.poll() is not None, timeout=60)
            assert any("Registered to:" in line for line in lines), "".join(lines)
            assert cluster.scheduler_address in lines[-1]
            assert not any("error" in line.lower() for line in lines), "".join(lines)
            # Registered means the scheduler knows it.
            assert isinstance(cluster.scheduler, Scheduler) and len(cluster.scheduler.workers) == 1
        finally:
            proc.terminate()
            proc.wait(20)
            reader.join(5)
            stderr.close()
