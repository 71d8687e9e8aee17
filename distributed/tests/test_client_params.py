"""Client parameters either do what dask.distributed's do or are refused by name."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any, Literal

import dask.config
import pytest
from dask.delayed import delayed

from distributed import Client
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster, inc
from distributed.worker import Worker

UNREACHABLE = "tcp://127.0.0.1:1"


def test_client_extensions_must_be_a_mapping() -> None:
    # Refused before any connection is tried.
    with pytest.raises(TypeError, match=r"Client\(extensions="):
        Client(UNREACHABLE, timeout=0.2, extensions=[object])


class Recorder:
    """A client extension: made with the client, it sees it."""

    def __init__(self, client: Client[Any]) -> None:
        self.client = client


@gen_cluster()
async def test_client_extensions_are_made_with_the_client(s: Scheduler, a: Worker, b: Worker) -> None:
    async with Client(s.address, asynchronous=True, extensions={"recorder": Recorder}) as c:
        ext = c.extensions["recorder"]
        assert isinstance(ext, Recorder) and ext.client is c
        assert await c.submit(inc, 1) == 2


@pytest.mark.parametrize("value", [object(), True])
def test_client_refuses_a_security_it_cannot_use(value: Any) -> None:
    # True means temporary credentials, useful only for a cluster the client starts itself.
    with pytest.raises(TypeError, match=r"Client\(security="):
        Client(UNREACHABLE, timeout=0.2, security=value)


def test_client_refuses_cluster_options_with_an_address() -> None:
    with pytest.raises(TypeError, match="n_workers"):
        Client(UNREACHABLE, timeout=0.2, n_workers=2)


@gen_cluster()
async def test_client_accepts_the_defaults_and_what_is_true_here(s: Scheduler, a: Worker, b: Worker) -> None:
    async with Client(
        s.address,
        asynchronous=True,
        security=None,
        heartbeat_interval=None,
        serializers=None,
        deserializers=None,
        extensions=None,
        direct_to_workers=True,
    ) as c:
        assert await c.submit(inc, 1) == 2


@gen_cluster()
async def test_heartbeat_interval_keeps_an_idle_client_seen(s: Scheduler, a: Worker, b: Worker) -> None:
    # A bare number is milliseconds, as in dask.
    async with Client(s.address, asynchronous=True, heartbeat_interval=20) as c:
        assert c.link.heartbeat_interval == 0.02
        cs = s.clients[c.id]
        seen = cs.last_seen
        # The client sends nothing else while idle: only heartbeats move last_seen.
        deadline = time.monotonic() + 10
        while cs.last_seen == seen and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert cs.last_seen > seen
    async with Client(s.address, asynchronous=True, heartbeat_interval="0s") as c:
        assert c.link.heartbeat_interval == 0 and c.link._heartbeat is None


def test_heartbeat_default_is_the_config_key() -> None:
    with dask.config.set({"distributed.client.heartbeat": "250ms"}):
        link = Client(UNREACHABLE, timeout=0.2, asynchronous=True).link
    assert link.heartbeat_interval == 0.25


@gen_cluster(client=True)
async def test_work_submission_refusals(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = delayed(inc)(1)
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("Client.compute(optimize_kwarg=...)", lambda: c.compute(x, optimize_kwarg=1)),
        ("Client.persist(optimize_kwarg=...)", lambda: c.persist(x, optimize_kwarg=1)),
        ("Client.get(optimize_kwarg=...)", lambda: c.get({"a": 1}, "a", optimize_kwarg=1)),
    ]
    for message, call in cases:
        with pytest.raises(NotImplementedError, match="^" + re.escape(message)):
            call()
    assert not s.tasks  # nothing was submitted on the way


@gen_cluster(client=True)
async def test_hints_and_true_defaults_are_accepted(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    # fifo_timeout is a hint in dask.distributed as well; direct=True is what happens anyway.
    assert await c.submit(inc, 1, fifo_timeout="1s") == 2
    assert await c.gather(c.map(inc, [1, 2], fifo_timeout=0), direct=True) == [2, 3]
    assert await c.compute(delayed(inc)(1), fifo_timeout="1s", actors=None) == 2
    assert await c.get({"a": 1}, "a", direct=True, fifo_timeout="1s", sync=True) == 1
    assert await c.gather(await c.scatter(5, direct=True)) == 5
    assert (await c.get_versions())["client"]


class CountGraphs(SchedulerPlugin):
    def __init__(self) -> None:
        self.tasks_per_graph: list[int] = []

    def update_graph(self, scheduler: Scheduler, *, tasks: list[Any], **kwargs: Any) -> None:
        self.tasks_per_graph.append(len(tasks))


@gen_cluster(client=True)
async def test_map_batch_size_sets_tasks_per_message(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    plugin = CountGraphs()
    await s.add_plugin(plugin)
    futures = c.map(inc, range(35), batch_size=10)
    assert await c.gather(futures) == list(range(1, 36))
    assert plugin.tasks_per_graph == [10, 10, 10, 5]


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 3)
async def test_scheduler_info_n_workers(c: Client[Literal[True]], s: Scheduler, *workers: Worker) -> None:
    assert len((await c.scheduler_info())["workers"]) == 3
    assert len((await c.scheduler_info(n_workers=2))["workers"]) == 2
    assert len((await c.scheduler_info(n_workers=-1))["workers"]) == 3


@gen_cluster(client=True)
async def test_nbytes_summary(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(inc, range(3))
    await c.gather(futures)
    per_key = await c.nbytes(summary=False)
    assert set(per_key) == {f.key for f in futures}
    assert await c.nbytes(summary=True) == {"inc": sum(per_key.values())}
    assert await c.nbytes() == {"inc": sum(per_key.values())}  # dask's default


@gen_cluster(client=True)
async def test_scatter_timeout(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await c.scatter(1, workers=[UNREACHABLE], timeout=0.2)
    assert time.monotonic() - start < 5  # not the 30 s connect timeout


@gen_cluster()
async def test_close_timeout(s: Scheduler, a: Worker, b: Worker) -> None:
    c = await Client(s.address, asynchronous=True)
    try:
        with pytest.raises(TimeoutError):
            await c.close(timeout=0)
    finally:
        await c.close()
    c = await Client(s.address, asynchronous=True)
    await c.close(timeout="5s")
    assert c.status == "closed"


@gen_cluster(nthreads=[])
async def test_a_client_name_shows_in_its_id(s: Scheduler) -> None:
    async with (
        Client(s.address, asynchronous=True, name="etl-job") as named,
        Client(s.address, asynchronous=True) as plain,
    ):
        assert named.id.startswith("Client-etl-job-") and named.name == "etl-job"
        assert plain.id.startswith("Client-") and "etl-job" not in plain.id
        assert {named.id, plain.id} <= set(s.clients)


@gen_cluster(client=True, config={"distributed.client.scheduler-info-interval": "20ms"})
async def test_repr_shows_the_cluster_and_keeps_up(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    assert re.fullmatch(rf"<Client: '{s.address}' processes=2 threads=3, memory=[0-9.]+ [KMGT]?i?B>", repr(c)), repr(c)
    async with Worker(s.address, nthreads=4):
        # Every 20 ms the client refreshes its copy of the scheduler's summary.
        deadline = time.monotonic() + 10
        while "processes=3 threads=7" not in repr(c) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert "processes=3 threads=7" in repr(c)
    info = await c.scheduler_info(n_workers=1)
    assert len(info["workers"]) == 1 and info["n_workers"] >= 2


def test_repr_without_a_connection() -> None:
    c = Client(UNREACHABLE, timeout=0.2, asynchronous=True)
    assert repr(c) == f"<Client: {UNREACHABLE!r} status=newly-created>"
