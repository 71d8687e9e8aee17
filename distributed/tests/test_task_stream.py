"""The task stream: records of finished tasks with their compute and transfer intervals."""

from __future__ import annotations

import gc
import operator
from typing import Any, Literal

import dask
import dask.bag as db
import pytest

from distributed import Client, LocalCluster, get_task_stream
from distributed.diagnostics.task_stream import StreamBars, TaskStreamPlugin, ensure_task_stream, rectangles
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster, inc, slowinc
from distributed.worker import Worker


def plus_one(x: int) -> int:
    return x + 1


@gen_cluster(client=True)
async def test_kept_records_leave_the_garbage_collectors_view(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    """Once collected past, the buffer's records cost full collections nothing; readers still get dask's shape."""
    plugin = await ensure_task_stream(s)
    x = c.map(inc, range(10), key=[f"x-{i}" for i in range(10)], workers=[a.address])
    y = c.map(plus_one, x, key=[f"y-{i}" for i in range(10)], workers=[b.address])  # with transfers
    await c.gather(y)
    assert len(plugin.buffer) == 20
    gc.collect()
    gc.collect()
    assert [r["key"] for r in plugin.buffer if gc.is_tracked(r)] == []
    records = plugin.collect()
    assert all(type(r["startstops"]) is list for r in records)
    assert {len(r["startstops"]) for r in records if str(r["key"]).startswith("y-")} == {2}
    records[0]["startstops"].clear()  # a copy: what the plugin keeps is unchanged
    assert plugin.collect()[0]["startstops"]


@gen_cluster(client=True)
async def test_records_compute_and_transfer_between_workers(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    plugin = await ensure_task_stream(s)
    x = c.submit(slowinc, 1, key="x-1", workers=[a.address])
    y = c.submit(plus_one, x, key="y-1", workers=[b.address])
    assert await y == 3

    records = {r["key"]: r for r in plugin.collect()}
    assert set(records) == {"x-1", "y-1"}
    rx, ry = records["x-1"], records["y-1"]
    assert (rx["worker"], ry["worker"]) == (a.address, b.address)
    assert rx["status"] == ry["status"] == "OK"
    assert rx["typename"] == "int" and rx["nbytes"] > 0
    assert [ss["action"] for ss in rx["startstops"]] == ["compute"]
    # y's input came from a: the fetch, then the computation, each start <= stop, in order.
    assert [ss["action"] for ss in ry["startstops"]] == ["transfer", "compute"]
    transfer, compute = ry["startstops"]
    assert transfer["source"] == a.address
    assert transfer["start"] <= transfer["stop"] <= compute["start"] <= compute["stop"]
    assert rx["startstops"][0]["stop"] <= transfer["start"]
    # x's computation took its 20 ms sleep.
    assert rx["startstops"][0]["stop"] - rx["startstops"][0]["start"] >= 0.015


@gen_cluster(client=True)
async def test_real_graph_and_incremental_reads(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    plugin = await ensure_task_stream(s)
    assert await ensure_task_stream(s) is plugin  # added once
    index, new = plugin.since(0)
    assert (index, new) == (0, [])

    bag = db.from_sequence(range(20), npartitions=4).map(inc)  # type: ignore[no-untyped-call]  # dask.bag is untyped
    assert await c.compute(bag.sum()) == sum(range(1, 21))
    index, new = plugin.since(0)
    assert index == len(new) == plugin.index
    names = {dask.utils.key_split(r["key"]) for r in new}
    assert any("from_sequence" in n for n in names), names
    assert all(r["spans"] and r["worker"] in (a.address, b.address) for r in new)

    assert await c.submit(inc, 100, key="later-1") == 101
    index2, newer = plugin.since(index)
    assert [r["key"] for r in newer] == ["later-1"] and index2 == index + 1

    # collect: by time window and count.
    t = newer[0]["spans"][-1][2]  # (action, start, stop, source, nbytes)
    assert [r["key"] for r in plugin.collect(start=t)] == ["later-1"]
    assert [r["key"] for r in plugin.collect(count=1)] == ["later-1"]
    assert len(plugin.collect(count=3, start=0)) == 3
    assert plugin.collect(stop=0) == []


@gen_cluster(client=True)
async def test_erred_task_is_recorded_as_error(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    plugin = await ensure_task_stream(s)
    fut = c.submit(operator.truediv, 1, 0, key="div-0")
    with pytest.raises(ZeroDivisionError):
        await fut
    [rec] = [r for r in plugin.collect() if r["key"] == "div-0"]
    assert rec["status"] == "error"
    assert [ss["action"] for ss in rec["startstops"]] == ["compute"]


@gen_cluster(client=True, config={"distributed.scheduler.dashboard.tasks.task-stream-length": 5})
async def test_buffer_is_bounded(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    plugin = await ensure_task_stream(s)
    assert await c.gather(c.map(inc, range(12))) == list(range(1, 13))
    assert len(plugin.buffer) == 5 and plugin.index == 12
    index, recs = plugin.since(3)  # records 3..6 fell off: only what is left
    assert index == 12 and len(recs) == 5


@gen_cluster()
async def test_no_plugin_no_record(s: Scheduler, a: Worker, b: Worker) -> None:
    assert TaskStreamPlugin.name not in s.plugins


def test_rectangles_lanes() -> None:
    recs: list[dict[str, Any]] = [
        {
            "key": "a-1",
            "worker": "w1",
            "status": "OK",
            "startstops": [{"action": "compute", "start": 1.0, "stop": 2.0}],
        },
        {
            "key": "a-2",
            "worker": "w1",
            "status": "OK",
            "startstops": [{"action": "compute", "start": 1.5, "stop": 2.5}],
        },
        {
            "key": "b-1",
            "worker": "w2",
            "status": "error",
            "startstops": [
                {"action": "transfer", "start": 0.5, "stop": 0.9, "source": "w1"},
                {"action": "compute", "start": 1.0, "stop": 1.1},
            ],
        },
    ]
    data = rectangles(recs, start_boundary=1.0)
    assert data["key"] == ["a-1", "a-2", "b-1", "b-1"]
    assert data["lane"] == [0, 1, 0, 0]
    assert data["y"] == [0, 1, 2, 2]
    assert data["action"] == ["compute", "compute", "transfer", "compute"]
    assert data["start"][0] == 0.0 and data["duration"][0] == 1000.0
    assert data["source"][2] == "w1"


def test_stream_bars_keep_their_rows_across_batches() -> None:
    def rec(key: str, worker: str, start: float, stop: float) -> dict[str, Any]:
        return {
            "key": key,
            "worker": worker,
            "status": "OK",
            "startstops": [{"action": "compute", "start": start, "stop": stop}],
        }

    bars = StreamBars(threads=lambda w: 2 if w == "w1" else 1)
    first = bars.add([rec("a-2", "w1", 1.5, 2.5), rec("a-1", "w1", 1.0, 2.0)])
    assert first["key"] == ["a-2", "a-1"]  # in the order they came (finished)
    assert first["lane"] == [1, 0] and first["y"] == [1, 0]  # packed by start
    assert first["start"] == [500.0, 0.0]  # ms since the first batch's earliest start
    # Next batch: lanes go on from where they were (a-3 fits after a-1, a-4 needs a third lane, a new row),
    # and w2, first seen, gets the next free row.
    second = bars.add([rec("b-1", "w2", 2.0, 3.0), rec("a-3", "w1", 2.0, 3.0), rec("a-4", "w1", 2.1, 2.2)])
    assert second["key"] == ["b-1", "a-3", "a-4"]
    assert second["lane"] == [0, 0, 2]
    assert second["y"] == [3, 0, 2]
    assert bars.add([]) == {k: [] for k in first}


# -- Client.get_task_stream and the get_task_stream context manager ----------------------------
@gen_cluster(client=True)
async def test_client_get_task_stream_starts_recording(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    assert TaskStreamPlugin.name not in s.plugins
    assert await c.get_task_stream() == []
    assert TaskStreamPlugin.name in s.plugins
    await c.gather(c.map(inc, range(5), key=[f"inc-{i}" for i in range(5)]))
    records = await c.get_task_stream()
    assert isinstance(records, list)
    assert sorted(r["key"] for r in records) == [f"inc-{i}" for i in range(5)]
    assert len(await c.get_task_stream(count=2)) == 2
    assert await c.get_task_stream(start="1h", stop=0) == []
    plotted = await c.get_task_stream(plot=True)
    assert isinstance(plotted, tuple)
    records2, fig = plotted
    assert len(records2) == 5
    renderer: Any = fig.renderers[0]
    assert len(renderer.data_source.data["key"]) == 5
    with pytest.raises(ValueError, match="plot"):
        await c.get_task_stream(plot="yes")


@gen_cluster(client=True)
async def test_get_task_stream_context_manager_async(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    await c.submit(inc, 0, key="before-1")
    async with get_task_stream(client=c) as ts:
        await c.gather([c.submit(inc, 1, key="inside-1"), c.submit(inc, 2, key="inside-2")])
    assert sorted(r["key"] for r in ts.data) == ["inside-1", "inside-2"]


def test_get_task_stream_context_manager_sync_with_processes(tmp_path: Any) -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            w1, w2 = sorted(client.scheduler_info()["workers"])
            x = client.submit(inc, 1, key="x-1", workers=[w1])
            with get_task_stream(plot="save", filename=str(tmp_path / "ts.html")) as ts:
                y = client.submit(plus_one, x, key="y-1", workers=[w2])
                assert y.result() == 3
    keys = {r["key"] for r in ts.data}
    assert "y-1" in keys
    [ry] = [r for r in ts.data if r["key"] == "y-1"]
    assert [ss["action"] for ss in ry["startstops"]] == ["transfer", "compute"]
    assert ts.figure is not None
    assert "y-1" in (tmp_path / "ts.html").read_text()
