"""Nanny plugins and ``Client.run(nanny=True)``, on real nannies with worker processes.

The nannies run in this process (as ``LocalCluster(processes=True)`` runs
them), their workers in child processes.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from distributed import Client, Environ, LocalCluster, Nanny, NannyPlugin, Scheduler, Status, Worker
from distributed.utils_test import async_poll_for, gen_test, poll_for

ENV_NAME = "DISTRIBUTED_TEST_NANNY_PLUGIN_ENV"


class Recorder(NannyPlugin):
    """Records what each nanny's copy of it saw (each nanny unpickles its own)."""

    name = "recorder"

    def __init__(self) -> None:
        self.setups: list[str] = []
        self.teardowns: list[str] = []

    def setup(self, nanny: Any) -> None:
        self.setups.append(nanny.address)

    def teardown(self, nanny: Any) -> None:
        self.teardowns.append(nanny.address)


class AsyncRecorder(NannyPlugin):
    name = "async-recorder"

    def __init__(self) -> None:
        self.done = False

    async def setup(self, nanny: Any) -> None:
        await asyncio.sleep(0)
        self.done = True


class Broken(NannyPlugin):
    name = "broken"

    def setup(self, nanny: Any) -> None:
        raise ValueError(f"cannot set up on {nanny.address}")


def read_env() -> str | None:
    return os.environ.get(ENV_NAME)


def own_pid() -> int:
    return os.getpid()


def nanny_address(dask_worker: Any) -> str:
    assert isinstance(dask_worker, Nanny)
    return str(dask_worker.address)


async def two_workers(s: Scheduler, old_pids: set[int | None] = frozenset()) -> set[int | None]:  # type: ignore[assignment]
    def ready() -> bool:
        ws = list(s.workers.values())
        return len(ws) == 2 and not ({w.pid for w in ws} & old_pids)

    await async_poll_for(ready, timeout=30)
    return {w.pid for w in s.workers.values()}


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_nanny_plugin_set_up_on_every_nanny_also_one_started_later() -> None:
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Nanny(s.address, nthreads=1) as b,
        Client(s.address, asynchronous=True) as c,
    ):
        await two_workers(s)
        pids = {a.pid, b.pid}
        replies = await c.register_plugin(Recorder())
        assert replies == {a.worker_address: {"status": "OK"}, b.worker_address: {"status": "OK"}}
        for n in (a, b):
            plugin = n.plugins["recorder"]
            assert isinstance(plugin, Recorder) and plugin.setups == [n.address]
        assert {a.pid, b.pid} == pids  # restart = False: the workers were left alone
        await c.register_plugin(AsyncRecorder())
        assert all(getattr(n.plugins["async-recorder"], "done", False) for n in (a, b))
        # A nanny that starts after the registration gets both from the scheduler.
        async with Nanny(s.address, nthreads=1) as late:
            plugin = late.plugins["recorder"]
            assert isinstance(plugin, Recorder) and plugin.setups == [late.address]
            assert "async-recorder" in late.plugins


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_restart_plugin_environ_reaches_the_workers() -> None:
    os.environ.pop(ENV_NAME, None)
    try:
        async with (
            Scheduler(host="127.0.0.1", dashboard=False) as s,
            Nanny(s.address, nthreads=1) as a,
            Nanny(s.address, nthreads=1) as b,
            Client(s.address, asynchronous=True) as c,
        ):
            old = await two_workers(s)
            assert set((await c.run(read_env)).values()) == {None}
            await c.register_plugin(Environ({ENV_NAME: "hello"}))
            # Each nanny replaced its worker process, which sees the variable.
            await two_workers(s, old_pids=old)
            assert a.restarts == b.restarts == 1
            assert set((await c.run(read_env)).values()) == {"hello"}
    finally:
        os.environ.pop(ENV_NAME, None)


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_teardown_on_unregister_and_on_close() -> None:
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Client(s.address, asynchronous=True) as c,
    ):
        async with Nanny(s.address, nthreads=1) as a:
            await c.register_plugin(Recorder())
            plugin = a.plugins["recorder"]
            assert isinstance(plugin, Recorder)
            replies = await c.unregister_worker_plugin("recorder", nanny=True)
            assert replies == {a.worker_address: {"status": "OK"}}
            assert "recorder" not in a.plugins and plugin.teardowns == [a.address]
            with pytest.raises(ValueError, match="recorder"):
                await c.unregister_worker_plugin("recorder", nanny=True)
            # Unregistered: a nanny that starts now does not get it.
            async with Nanny(s.address, nthreads=1) as late:
                assert late.plugins == {}
            await c.register_plugin(Recorder())
            plugin = a.plugins["recorder"]
            assert isinstance(plugin, Recorder)
        assert plugin.teardowns == [a.address]  # closing the nanny tore it down


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_setup_error_reaches_the_caller() -> None:
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Client(s.address, asynchronous=True) as c,
    ):
        with pytest.raises(ValueError, match=f"cannot set up on {a.address}"):
            await c.register_plugin(Broken())
        assert "broken" not in a.plugins
        # The nanny and its worker carry on.
        assert a.status == Status.running
        assert await c.submit(own_pid).result() == a.pid


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_nanny_plugins_given_at_construction() -> None:
    async with Scheduler(host="127.0.0.1", dashboard=False) as s, Nanny(s.address, plugins=[Recorder()]) as a:
        plugin = a.plugins["recorder"]
        assert isinstance(plugin, Recorder) and plugin.setups == [a.address]


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_run_on_nannies() -> None:
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Nanny(s.address, nthreads=1) as b,
        Client(s.address, asynchronous=True) as c,
    ):
        await two_workers(s)
        assert await c.run(nanny_address, nanny=True) == {
            a.worker_address: a.address,
            b.worker_address: b.address,
        }
        # The function runs in the nanny's process, not the worker's.
        assert await c.run(own_pid, nanny=True, workers=[a.worker_address]) == {a.worker_address: os.getpid()}
        assert await c.run(own_pid, workers=[a.worker_address]) == {a.worker_address: a.pid}
        # A worker without a nanny cannot run it there.
        async with Worker(s.address, nthreads=1) as bare:
            with pytest.raises(ValueError, match=f"no nanny.*{bare.address}"):
                await c.run(own_pid, nanny=True)
            assert await c.run(own_pid, nanny=True, workers=[a.worker_address]) == {a.worker_address: os.getpid()}


@pytest.mark.timeout(90)
def test_environ_on_a_local_cluster_with_processes() -> None:
    os.environ.pop(ENV_NAME, None)
    try:
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
            Client(cluster) as c,
        ):
            c.wait_for_workers(2)
            old = set(c.scheduler_info()["workers"])
            replies = c.register_plugin(Environ({ENV_NAME: 42}))
            assert isinstance(replies, dict) and set(replies) == old
            assert all(r == {"status": "OK"} for r in replies.values())
            # The workers were replaced (new addresses), and the new ones see the variable.
            poll_for(lambda: len(now := set(c.scheduler_info()["workers"])) == 2 and not now & old, timeout=30)
            assert set(c.run(read_env).values()) == {"42"}
            assert c.submit(read_env).result() == "42"
    finally:
        os.environ.pop(ENV_NAME, None)


@pytest.mark.timeout(90)
@gen_test(timeout=80)
async def test_plugin_reaches_a_nanny_without_a_worker_and_skips_a_closed_one() -> None:
    async with (
        Scheduler(host="127.0.0.1", dashboard=False) as s,
        Nanny(s.address, nthreads=1) as a,
        Client(s.address, asynchronous=True) as c,
    ):
        async with Nanny(s.address, nthreads=1) as gone:
            pass
        await a.kill()  # a has no worker now (as while it replaces one)
        await async_poll_for(lambda: not s.workers, timeout=30)
        replies = await c.register_plugin(Recorder())
        assert replies == {a.address: {"status": "OK"}}
        assert "recorder" in a.plugins
        assert gone.address not in s.requests.nannies  # forgotten once found closed
