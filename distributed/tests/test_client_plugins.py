"""Client.register_plugin / unregister_worker_plugin: worker plugins live on the scheduler."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from distributed import Client, LocalCluster, NannyPlugin, WorkerPlugin
from distributed.protocol.serialize import Serialized
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster
from distributed.worker import Worker


class Recorder(WorkerPlugin):
    """Notes which worker set it up and whether it was torn down (each worker holds its own copy)."""

    def __init__(self, tag: int = 0) -> None:
        self.tag = tag
        self.set_up_on: str | None = None
        self.torn_down = False

    def setup(self, worker: Worker) -> None:
        self.set_up_on = worker.address

    def teardown(self, worker: Worker) -> None:
        self.torn_down = True


class FailsSetup(WorkerPlugin):
    name = "fails-setup"

    def setup(self, worker: Worker) -> None:
        raise ZeroDivisionError("setup failed")


class Idempotent(Recorder):
    name = "idempotent"
    idempotent = True


@gen_cluster(client=True)
async def test_register_worker_plugin_returns_each_workers_reply(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    replies = await c.register_plugin(Recorder(), name="rec")
    assert replies == {a.address: {"status": "OK"}, b.address: {"status": "OK"}}
    for w in (a, b):
        plugin = w.plugins["rec"]
        assert isinstance(plugin, Recorder) and plugin.set_up_on == w.address


@gen_cluster(client=True, nthreads=[])
async def test_registered_worker_plugin_is_set_up_on_workers_that_join_later(
    c: Client[Literal[True]], s: Scheduler
) -> None:
    assert await c.register_plugin(Recorder(tag=7), name="later") == {}
    async with Worker(s.address, nthreads=1) as w:
        plugin = w.plugins["later"]
        assert isinstance(plugin, Recorder) and plugin.tag == 7 and plugin.set_up_on == w.address


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_register_worker_plugin_raises_the_setup_error(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    with pytest.raises(ZeroDivisionError, match="setup failed"):
        await c.register_plugin(FailsSetup())


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_idempotent_defaults_to_the_plugins_attribute(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    await c.register_plugin(Idempotent(tag=1))
    first = a.plugins["idempotent"]
    assert await c.register_plugin(Idempotent(tag=2)) == {}
    assert a.plugins["idempotent"] is first
    await c.register_plugin(Idempotent(tag=3), idempotent=False)
    replaced = a.plugins["idempotent"]
    assert isinstance(replaced, Idempotent) and replaced.tag == 3
    assert isinstance(first, Idempotent) and first.torn_down


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_unregister_worker_plugin(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    await c.register_plugin(Recorder(), name="gone")
    plugin = a.plugins["gone"]
    assert await c.unregister_worker_plugin("gone") == {a.address: {"status": "OK"}}
    assert "gone" not in a.plugins
    assert isinstance(plugin, Recorder) and plugin.torn_down
    async with Worker(s.address, nthreads=1) as late:
        assert "gone" not in late.plugins
    with pytest.raises(ValueError, match="gone"):
        await c.unregister_worker_plugin("gone")


@gen_cluster(client=True)
async def test_nanny_plugin_without_nannies(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    # Workers without a nanny do not run nanny plugins; the scheduler keeps it for nannies to come.
    assert await c.register_plugin(NannyPlugin(), name="kept") == {}
    assert list(s.requests.nanny_plugins) == ["kept"]
    assert isinstance(s.requests.nanny_plugins["kept"], Serialized)  # kept unopened
    assert await c.unregister_worker_plugin("kept", nanny=True) == {}
    with pytest.raises(ValueError, match="kept"):
        await c.unregister_worker_plugin("kept", nanny=True)


def test_register_worker_plugin_sync_with_worker_processes() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            (address,) = client.scheduler_info()["workers"]
            assert client.register_plugin(Recorder(), name="sync") == {address: {"status": "OK"}}

            def set_up_on(dask_worker: Any) -> str | None:
                plugin = dask_worker.plugins["sync"]
                assert isinstance(plugin, Recorder)
                return plugin.set_up_on

            assert client.run(set_up_on) == {address: address}
            assert client.unregister_worker_plugin("sync") == {address: {"status": "OK"}}
