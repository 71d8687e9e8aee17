"""Published datasets: publish_dataset, get_dataset, list_datasets, unpublish_dataset, client.datasets."""

from __future__ import annotations

from typing import Any, Literal

import dask.array as da
import numpy as np
import pytest

from distributed import Client, Future, LocalCluster, Scheduler, Worker, wait
from distributed.coordination.publish_extension import PublishExtension
from distributed.protocol.serialize import Serialized
from distributed.scheduler.extensions import DEFAULT_EXTENSIONS
from distributed.utils_test import async_poll_for, gen_cluster, inc


def test_publish_is_a_default_extension() -> None:
    assert DEFAULT_EXTENSIONS["publish"] is PublishExtension


@gen_cluster(client=True)
async def test_publish_get_list_unpublish(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    assert isinstance(s.extensions["publish"], PublishExtension)
    x = c.submit(inc, 1)
    await c.publish_dataset(x=x, y=[1, 2, 3])
    assert await c.list_datasets() == ["x", "y"]
    got = await c.get_dataset("x")
    assert isinstance(got, Future) and got.key == x.key
    assert await got == 2
    assert await c.get_dataset("y") == [1, 2, 3]
    await c.unpublish_dataset("y")
    assert await c.list_datasets() == ["x"]
    with pytest.raises(KeyError, match="Dataset 'y' not found"):
        await c.get_dataset("y")
    assert await c.get_dataset("y", default=None) is None
    assert await c.get_dataset("y", "fallback") == "fallback"
    await c.unpublish_dataset("never-published")  # nothing to do


@gen_cluster(client=True)
async def test_positional_dataset_needs_a_name(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    await c.publish_dataset(5, name="five")
    await c.publish_dataset(1, 2, name="pair")
    assert await c.get_dataset("five") == 5
    assert await c.get_dataset("pair") == (1, 2)
    with pytest.raises(ValueError, match="name"):
        await c.publish_dataset(5)
    with pytest.raises(ValueError, match="name"):
        await c.publish_dataset(name="nothing")


@gen_cluster(client=True)
async def test_published_futures_outlive_the_publishing_client(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    async with Client(s.address, asynchronous=True, set_as_default=False) as publisher:
        x = publisher.submit(inc, 10, key="published-x")
        await wait(x)
        await publisher.publish_dataset(data=[x, {"nested": x}])
        del x
    # The publisher left and dropped its future: the dataset still holds the key.
    assert s.tasks["published-x"].state == "memory"
    got = await c.get_dataset("data")
    assert got[0].client is c and got[1]["nested"].client is c
    assert await got[0] == 11
    assert await c.gather(got[1]["nested"]) == 11
    # Unpublished and no longer held by the getter: the result goes.
    await c.unpublish_dataset("data")
    del got
    await async_poll_for(lambda: "published-x" not in s.tasks, timeout=5)
    assert not any(name.startswith("published-") for name in s.clients)


@gen_cluster(client=True)
async def test_the_getter_holds_its_futures_after_unpublishing(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    async with Client(s.address, asynchronous=True, set_as_default=False) as publisher:
        await publisher.publish_dataset(x=publisher.submit(inc, 1, key="held-x"))
    got = await c.get_dataset("x")
    await c.unpublish_dataset("x")
    assert await got == 2
    assert s.tasks["held-x"].state == "memory"
    assert {cs.client_key for cs in s.tasks["held-x"].who_wants} == {c.id}


@gen_cluster(client=True)
async def test_override(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1, key="first")
    await c.publish_dataset(x, name="d")
    with pytest.raises(KeyError, match="already exists"):
        await c.publish_dataset(c.submit(inc, 2), name="d")
    y = c.submit(inc, 2, key="second")
    await c.publish_dataset(y, name="d", override=True)
    del x, y
    # The replaced dataset's key is held no more; the new one's is.
    await async_poll_for(lambda: "first" not in s.tasks, timeout=5)
    assert s.tasks["second"].state in ("processing", "memory")
    assert await (await c.get_dataset("d")) == 3
    # Publishing the same future again under override keeps it alive throughout.
    again = await c.get_dataset("d")
    await c.publish_dataset(again, name="d", override=True)
    del again
    await c.publish_dataset(c.submit(inc, 5, key="third"), name="d", override=True)
    await async_poll_for(lambda: "second" not in s.tasks, timeout=5)


class Opaque:
    """A user class the scheduler never unpickles."""

    def __init__(self, v: int) -> None:
        self.v = v


@gen_cluster(client=True)
async def test_scheduler_keeps_datasets_as_frames(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    await c.publish_dataset(o=Opaque(3))
    ext = s.extensions["publish"]
    assert isinstance(ext, PublishExtension)
    assert isinstance(ext.datasets["o"].data, Serialized)
    first = await c.get_dataset("o")
    second = await c.get_dataset("o")
    assert first.v == second.v == 3
    assert first is not second  # each getter unpickles its own copy


@gen_cluster(client=True)
async def test_persisted_collection_travels_between_clients(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    x = da.arange(20, chunks=5)
    async with Client(s.address, asynchronous=True, set_as_default=False) as publisher:
        px = publisher.persist(x + 1)
        await wait(publisher.futures_of(px))
        await publisher.publish_dataset(arr=px)
        del px
    got = await c.get_dataset("arr")
    assert {f.client for f in c.futures_of(got)} == {c}
    result = await c.compute(got.sum())
    assert result == int(np.arange(1, 21).sum())


@gen_cluster(client=True)
async def test_non_string_names(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    await c.publish_dataset(1, name=("a", 1))
    assert await c.get_dataset(["a", 1]) == 1
    assert await c.list_datasets() == [("a", 1)]


def test_datasets_mapping_on_a_sync_client() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as c, Client(cluster, set_as_default=False) as other:
            c.datasets["x"] = c.submit(inc, 1)
            c.datasets["y"] = 5
            assert "x" in other.datasets and "z" not in other.datasets
            assert len(other.datasets) == 2
            assert sorted(other.datasets) == ["x", "y"]
            assert other.datasets["x"].result() == 2
            assert other.datasets["y"] == 5
            assert dict(other.datasets.items())["y"] == 5
            del other.datasets["x"]
            assert c.list_datasets() == ["y"]
            with pytest.raises(KeyError):
                other.datasets["x"]
            with pytest.raises(KeyError):
                c.datasets["y"] = 6  # taken: as publish_dataset without override
            with pytest.raises(TypeError, match="synchronous"):
                c.datasets.__aiter__()  # as dask: 'async for' needs an asynchronous client


@gen_cluster(client=True)
async def test_datasets_mapping_on_an_async_client(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    await c.publish_dataset(x=1, y=2)
    assert await c.datasets["x"] == 1
    names: list[Any] = [name async for name in c.datasets]
    assert names == ["x", "y"]
    with pytest.raises(TypeError, match="asynchronous"):
        c.datasets["z"] = 3
    with pytest.raises(TypeError, match="asynchronous"):
        del c.datasets["x"]
    with pytest.raises(TypeError, match="asynchronous"):
        len(c.datasets)
    with pytest.raises(TypeError, match="asynchronous"):
        list(c.datasets)
