"""``Worker(data=)``, ``Nanny(data=)``, ``metrics=``, ``startup_information=``, ``profile_cycle_interval=``, ``extensions=``."""

from __future__ import annotations

from collections import UserDict
from typing import Any, Literal

import pytest

from distributed import Client, Nanny, Scheduler, Worker
from distributed.scheduler.extensions import DEFAULT_EXTENSIONS
from distributed.utils_test import async_poll_for, gen_cluster, inc


class TaggedStore(UserDict[Any, Any]):
    """A mapping that records how it was made."""

    def __init__(self, tag: str = "plain", worker_local_directory: str | None = None) -> None:
        super().__init__()
        self.tag = tag
        self.directory = worker_local_directory


def not_a_mapping() -> list[int]:
    return []


@gen_cluster(client=True, nthreads=[])
async def test_data_as_mapping_class_pair_and_directory(c: Client[Literal[True]], s: Scheduler) -> None:
    given: dict[Any, Any] = {}
    async with Worker(s.address, data=given) as a:
        assert a.data is given
        assert await c.submit(inc, 1, key="x", workers=[a.address]) == 2
        assert given == {"x": 2}
    async with Worker(s.address, data=TaggedStore) as a:
        assert isinstance(a.data, TaggedStore) and a.data.tag == "plain"
        # The class has a worker_local_directory parameter: it gets the worker's directory.
        assert a.data.directory == a.local_directory
        assert await c.submit(inc, 2, key="y", workers=[a.address]) == 3
        assert dict(a.data) == {"y": 3}
    async with Worker(s.address, data=(TaggedStore, {"tag": "kw"})) as a:
        assert isinstance(a.data, TaggedStore) and a.data.tag == "kw"


@gen_cluster(nthreads=[])
async def test_bad_data_is_refused(s: Scheduler) -> None:
    with pytest.raises(TypeError, match=r"Worker\(data=\) takes a MutableMapping"):
        Worker(s.address, data=42)
    with pytest.raises(TypeError, match="made a list, not a MutableMapping"):
        async with Worker(s.address, data=not_a_mapping):
            pass
    with pytest.raises(TypeError, match=r"Nanny\(data=\)"):
        Nanny(s.address, data=(lambda: {}, {}))


@gen_cluster(client=True, nthreads=[])
async def test_nanny_passes_data_to_its_worker_process(c: Client[Literal[True]], s: Scheduler) -> None:
    async with Nanny(s.address, nthreads=1, data=(TaggedStore, {"tag": "child"})):
        await c.wait_for_workers(1)

        def store_of(dask_worker: Worker) -> tuple[str, str]:
            return type(dask_worker.data).__name__, getattr(dask_worker.data, "tag", "")

        assert list((await c.run(store_of)).values()) == [("TaggedStore", "child")]
        assert await c.submit(inc, 5) == 6


def answer(worker: Worker) -> int:
    return 42


async def async_name(worker: Worker) -> str:
    return str(worker.name)


def broken(worker: Worker) -> int:
    raise RuntimeError("no figure today")


@gen_cluster(client=True, nthreads=[])
async def test_custom_metrics_and_startup_information(c: Client[Literal[True]], s: Scheduler) -> None:
    async with Worker(
        s.address,
        name="w",
        heartbeat_interval="10ms",
        metrics={"answer": answer, "named": async_name, "broken": broken, "memory": answer},
        startup_information={"started_by": async_name, "broken": broken},
    ) as a:
        ws = s.workers[a.address]
        # Sent as the worker registered; a function that raised is left out.
        assert ws.extra == {"started_by": "w"}
        info = await c.scheduler_info()
        assert info["workers"][a.address]["started_by"] == "w"
        await async_poll_for(lambda: ws.metrics.get("answer") == 42, 10)
        assert ws.metrics["named"] == "w" and "broken" not in ws.metrics
        # The worker's own figure wins a clash of names.
        assert ws.metrics["memory"] > 1_000_000
    with pytest.raises(TypeError, match=r"Worker\(metrics=\) takes a mapping"):
        Worker(s.address, metrics={"x": 1})  # type: ignore[dict-item]  # refused at run time


@gen_cluster(nthreads=[], config={"distributed.worker.profile.enabled": True})
async def test_profile_cycle_interval_overrides_its_key(s: Scheduler) -> None:
    async with Worker(s.address, profile_cycle_interval="250ms") as a:
        assert a.profiler is not None and a.profiler.cycle == 0.25
    async with Worker(s.address, profile_cycle_interval=300) as a:  # milliseconds, as in dask
        assert a.profiler is not None and a.profiler.cycle == 0.3
    with pytest.raises(ValueError, match="profile_cycle_interval"):
        Worker(s.address, profile_cycle_interval="1us")


class BeatingExtension:
    """A worker extension: counts its heartbeats, and whether it was closed."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.beats = 0
        self.closed = False

    def heartbeat(self) -> dict[str, Any]:
        self.beats += 1
        return {"beats": self.beats, "name": self.worker.name}

    async def close(self) -> None:
        self.closed = True


class HeardExtension:
    """The scheduler's side: what each worker's extension said last."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.heard: dict[str, Any] = {}

    def heartbeat(self, ws: Any, value: Any) -> None:
        self.heard[ws.address] = value


@gen_cluster(nthreads=[], scheduler_kwargs={"extensions": {**DEFAULT_EXTENSIONS, "beating": HeardExtension}})
async def test_worker_extensions_heartbeat_to_their_scheduler_extension(s: Scheduler) -> None:
    heard = s.extensions["beating"]
    assert isinstance(heard, HeardExtension)
    async with Worker(s.address, name="w", heartbeat_interval="10ms", extensions={"beating": BeatingExtension}) as a:
        ext = a.extensions["beating"]
        assert isinstance(ext, BeatingExtension) and ext.worker is a
        await async_poll_for(lambda: heard.heard.get(a.address, {}).get("beats", 0) >= 2, 10)
        assert heard.heard[a.address]["name"] == "w"
    assert ext.closed
    with pytest.raises(TypeError, match=r"Worker\(extensions=\)"):
        Worker(s.address, extensions=[BeatingExtension])  # type: ignore[arg-type]  # refused at run time
