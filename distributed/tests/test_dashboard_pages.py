"""The dashboard's pages and panes without a browser: template, routes, and each component against a real scheduler.

Components are driven as a page's periodic callback drives them, with the
scheduler's state made by real workers computing real graphs; what they
would send to a browser is read from their data sources. The browser tests
(``test_dashboard_pages_browser.py``) check the same pages as drawn.
"""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from typing import Any

import dask
import pytest
from bokeh.document import Document
from bokeh.document.events import ColumnsStreamedEvent
from dask.delayed import delayed
from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from distributed import Client, Event, Scheduler, Worker, wait
from distributed.dashboard.components.cluster import (
    ClusterMemory,
    ComputeTimePerPrefix,
    Occupancy,
    StateTotals,
    TransferByWorker,
    WorkerCPU,
    WorkerLoad,
    state_totals,
)
from distributed.dashboard.components.groups import GroupDependencies, GroupGraph, group_layout
from distributed.dashboard.components.live_profile import LiveProfile, workers_profile
from distributed.dashboard.components.scheduler import TaskGraph
from distributed.dashboard.components.system import SchedulerSystem, WorkersTimeseries
from distributed.dashboard.scheduler import INDIVIDUAL, PAGES, individual_plots
from distributed.dashboard.templates import (
    INDIVIDUAL_PAGES,
    NAV_PAGES,
    individual_title,
    page_variables,
    render_page,
)
from distributed.diagnostics.task_stream import TaskStreamPlugin
from distributed.scheduler.records import WorkerState
from distributed.utils_test import async_poll_for, gen_cluster, inc, slowinc

DASHBOARD: dict[str, Any] = {"dashboard": True, "dashboard_address": "127.0.0.1:0"}


async def fetch(port: int, path: str) -> HTTPResponse:
    return await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}{path}", request_timeout=10)


def block_on(ev: Event) -> int:
    ev.wait()
    return 1


# -- the template ----------------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_render_page_draws_the_bar_around_the_body() -> None:
    html = render_page(
        "Workers <&>", "/info/main/workers.html", "<h1 id='mine'>Mine</h1>", head_html="<style>p{}</style>"
    )
    assert "<title>Workers &lt;&amp;&gt;</title>" in html  # the title is escaped, the body is not
    assert "<h1 id='mine'>Mine</h1>" in html and "<style>p{}</style>" in html
    for title, path in NAV_PAGES:
        assert f'<a href="{path}"' in html and f">{title}</a>" in html
    assert html.count('aria-current="page"') == 1
    assert '<a href="/info/main/workers.html" class="active" aria-current="page">Info</a>' in html
    for path in INDIVIDUAL_PAGES:  # the "More" menu
        assert f'<a href="{path}">{individual_title(path)}</a>' in html
    assert individual_title("/individual-workers-cpu-timeseries") == "Workers CPU Timeseries"
    # Relative links for a page served one level down, and a bar of one's own.
    variables = page_variables("/a", root="../", nav=[("A", "/a"), ("B", "/b")], more=[])
    assert variables["nav"] == [
        {"title": "A", "href": "../a", "active": True},
        {"title": "B", "href": "../b", "active": False},
    ]
    assert variables["more"] == []
    assert 'class="dask-more"' not in render_page("t", "/a", "", nav=[("A", "/a")], more=[])


@pytest.mark.timeout(30)
def test_every_listed_pane_has_a_page_and_the_json_reads_as_dask_s() -> None:
    assert set(INDIVIDUAL) == set(INDIVIDUAL_PAGES)
    assert set(INDIVIDUAL_PAGES) <= set(PAGES)
    assert {path for _, path in NAV_PAGES} - set(PAGES) == {"/info/main/workers.html"}
    plots = individual_plots()
    assert plots["Individual Task Stream"] == "/individual-task-stream"
    assert plots["Individual Cpu"] == "/individual-cpu"  # title-cased as dask's, acronyms and all
    assert sorted(plots.values()) == sorted(INDIVIDUAL_PAGES)


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_pages_are_served_in_the_template_with_bokehjs_from_the_server(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    port = s.http_server.port
    sitemap = json.loads((await fetch(port, "/sitemap.json")).body)["paths"]
    assert set(PAGES) | {"/individual-plots.json"} <= set(sitemap)
    assert json.loads((await fetch(port, "/individual-plots.json")).body) == individual_plots()
    status = (await fetch(port, "/status")).body.decode()
    assert '<nav class="dask-nav"' in status and '<a href="/status" class="active"' in status
    assert 'src="/static/js/bokeh.min.js' in status and "cdn.bokeh.org" not in status
    assert "<title>Dask: Status</title>" in status
    pane = (await fetch(port, "/individual-cpu")).body.decode()
    assert 'class="dask-pane"' in pane and '<nav class="dask-nav"' not in pane  # a pane fills its frame, no bar
    # Each open page's ticks are timed on the scheduler.
    board = s.dashboard_server
    assert board is not None
    await async_poll_for(lambda: len(board.tick_durations("/status")) >= 2, timeout=20)
    assert all(0 <= t < 5 for t in board.tick_durations("/status"))
    assert len(board.tick_durations("/status", cpu=True)) == len(board.tick_durations("/status"))
    assert all(0 <= t < 5 for t in board.tick_durations(cpu=True))


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_every_page_builds_and_ticks(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    await wait(c.map(slowinc, range(6), delay=0.05))
    for path, page in PAGES.items():
        doc = Document()
        page(s, doc)
        assert doc.roots, path
        assert doc.template is not None and doc.template_variables, path
        (callback,) = doc.session_callbacks
        callback.callback()


# -- per tick: O(workers + groups + new records), never O(tasks) ------------------------------
class NoScan(dict[Any, Any]):
    """The scheduler's tasks, refusing to be walked; each walk tried is noted in :attr:`walks`.

    (A page's tick logs a component's exception and goes on: the note is what the test reads.)
    """

    walks: list[str]

    def _refuse(self, *args: Any) -> Any:
        import traceback

        self.walks.append("".join(traceback.format_stack(limit=4)))
        raise AssertionError("a dashboard tick walked every task")

    __iter__ = values = items = keys = __reversed__ = _refuse


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD, config={"distributed.dashboard.graph-max-items": 3})
async def test_no_tick_walks_the_tasks(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.map(inc, range(10))
    await wait(x)
    ev = Event()
    blocked = c.map(block_on, [ev] * 4, pure=False)
    await async_poll_for(lambda: sum(len(ws.processing) for ws in s.workers.values()) >= 3)
    docs = []
    for page in PAGES.values():
        doc = Document()
        page(s, doc)
        docs.append(doc)
    # The pages add the task stream's and the group dependencies' plugins in the background.
    await async_poll_for(lambda: {TaskStreamPlugin.name, GroupDependencies.name} <= set(s.plugins), 5)
    shown_graph = TaskGraph(s)
    shown_graph.max_items = 1000  # a graph small enough to draw is read task by task
    tasks = s.tasks
    s.tasks = walled = NoScan(tasks)
    walled.walks = []
    try:
        for _ in range(2):
            for doc in docs:
                for callback in doc.session_callbacks:
                    callback.callback()
        assert walled.walks == []
        # The check bites: a component that reads every task is caught.
        with pytest.raises(AssertionError, match="walked every task"):
            shown_graph.update()
        assert len(walled.walks) == 1
    finally:
        s.tasks = tasks
    await ev.set()
    await wait(blocked)


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_closed_pages_leave_nothing_behind(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    await wait(c.map(inc, range(5)))
    refs: list[weakref.ref[Any]] = []

    def open_and_close(page: Any) -> weakref.ref[Any]:
        doc = Document()
        page(s, doc)
        for callback in doc.session_callbacks:
            callback.callback()
        return weakref.ref(doc.roots[0])

    for page in PAGES.values():
        refs.append(open_and_close(page))
    # The first pages add the task stream's and the group dependencies' plugins in the background.
    await async_poll_for(lambda: {TaskStreamPlugin.name, GroupDependencies.name} <= set(s.plugins), 5)
    plugins_before = set(s.plugins)
    for page in PAGES.values():
        refs.append(open_and_close(page))
    # Not a wait for a condition: a bounded window in which the second pages must add no plugin of their own.
    await asyncio.sleep(0.05)
    assert set(s.plugins) == plugins_before
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    assert not alive, alive[:3]


# -- components ------------------------------------------------------------------------------
@gen_cluster(client=True, worker_kwargs={"memory_limit": "1 GiB"})
async def test_cluster_memory_and_state_totals(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    done = c.map(inc, range(4))
    await wait(done)
    ev = Event()
    blocked = c.map(block_on, [ev] * 3, pure=False)  # two run (three threads), ...
    await async_poll_for(lambda: sum(len(ws.processing) for ws in s.workers.values()) == 3)
    totals = state_totals(s)
    assert (totals["memory"], totals["processing"], totals["erred"]) == (4, 3, 0)
    div = StateTotals(s)
    assert "processing: <b>3</b>" in div.root.text  # type: ignore[attr-defined]  # a Div
    assert "in memory: <b>4</b>" in div.root.text  # type: ignore[attr-defined]

    for ws, (process, managed, spilled) in zip(s.workers.values(), [(500, 300, 100), (1000, 200, 0)], strict=True):
        ws.metrics = {**ws.metrics, "memory": process, "managed_bytes": managed, "spilled_bytes": {"memory": spilled}}
    cluster = ClusterMemory(s)
    data = cluster.source.data
    assert (data["managed"], data["unmanaged"], data["spilled"]) == ([400], [1100], [100])
    assert data["limit"] == [2 * 2**30]
    assert cluster.figure.title.text.startswith("Bytes stored: 1.46 kiB of 2.00 GiB")  # type: ignore[union-attr]
    await ev.set()
    await wait(blocked)
    div.update()
    assert "processing: <b>0</b>" in div.root.text  # type: ignore[attr-defined]


@gen_cluster(client=True)
async def test_worker_load_tabs(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    await wait(c.map(slowinc, range(4), delay=0.05))
    ev = Event()
    blocked = c.submit(block_on, ev, workers=[a.address], pure=False)
    await async_poll_for(lambda: len(s.workers[a.address].processing) == 1)
    wa = s.workers[a.address]
    wa.metrics = {**wa.metrics, "cpu": 250.0}
    load = WorkerLoad(s)
    cpu, occupancy = load.cpu, load.occupancy
    assert isinstance(cpu, WorkerCPU) and isinstance(occupancy, Occupancy)
    i = list(cpu.source.data["address"]).index(a.address)
    assert cpu.source.data["cpu"][i] == 250.0
    cpu.update()
    assert cpu.figure.x_range.end == 300  # type: ignore[attr-defined]  # widened to whole cores
    assert occupancy.source.data["processing"][i] == 1
    assert occupancy.source.data["occupancy"][i] == round(wa.occupancy, 3)
    await ev.set()
    await blocked
    # Transfer rates from two heartbeats' totals (of a worker record of its own: real heartbeats change b's).
    transfer = load.transfer
    assert isinstance(transfer, TransferByWorker)
    ws = WorkerState("tcp://127.0.0.1:1", nthreads=1)
    ws.metrics = {"transfer": {"incoming_bytes_total": 1000, "outgoing_bytes_total": 0}}
    ws.last_seen = 100.0
    assert transfer.row(ws) == (0.0, 0.0)
    ws.metrics = {"transfer": {"incoming_bytes_total": 5000, "outgoing_bytes_total": 2000}}
    assert transfer.row(ws) == (0.0, 0.0)  # no new heartbeat: the rate stays
    ws.last_seen = 101.0
    assert transfer.row(ws) == (0.0, 0.0)  # a heartbeat, but the window is not over
    ws.last_seen = 102.0
    assert transfer.row(ws) == (2000.0, 1000.0)
    ws.last_seen = 103.0
    assert transfer.row(ws) == (2000.0, 1000.0)  # kept until the next window is over
    transfer.update()  # forgets the worker that is not the scheduler's
    assert ws.address not in transfer.source.data["address"]
    assert transfer.row(ws) == (0.0, 0.0)


@gen_cluster(client=True)
async def test_worker_load_updates_the_tab_shown_and_a_tab_when_picked(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    load = WorkerLoad(s)
    cpu = load.cpu
    i = list(cpu.source.data["address"]).index(a.address)
    wa = s.workers[a.address]
    wa.metrics = {**wa.metrics, "cpu": 170.0}
    load.update()  # the Processing tab is shown: the CPU tab is not re-read
    assert load.shown is load.processing
    assert cpu.source.data["cpu"][i] != 170.0
    load.tabs.active = 1  # as when the viewer clicks "CPU": brought up to date at once
    assert load.parts.index(load.shown) == 1  # the CPU tab
    assert cpu.source.data["cpu"][i] == 170.0
    wa.metrics = {**wa.metrics, "cpu": 20.0}
    load.update()
    assert cpu.source.data["cpu"][i] == 20.0


@gen_cluster(client=True)
async def test_compute_time_per_prefix(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    await wait(c.map(slowinc, range(4), delay=0.1))
    await wait(c.map(inc, range(4)))
    per_prefix = ComputeTimePerPrefix(s)
    data = per_prefix.source.data
    times = dict(zip(data["name"], data["time"], strict=True))
    assert times["slowinc"] >= 0.35
    assert data["name"][-1] == "slowinc"  # the longest last: at the top of the chart


@gen_cluster(client=True)
async def test_scheduler_system_streams_only_new_samples(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    system = SchedulerSystem(s)
    sent: list[Any] = []
    doc = Document()
    doc.add_root(system.source)
    doc.on_change(sent.append)
    shown = len(system.source.data["time"])
    assert shown >= 1
    system.update()
    assert sent == []  # nothing sampled since: nothing sent
    s.monitor.update()
    s.monitor.update()
    system.update()
    (event,) = sent
    assert isinstance(event, ColumnsStreamedEvent)
    assert len(event.data["time"]) == 2
    assert list(system.source.data["memory"])[-1] == s.monitor.quantities["memory"][-1]
    assert list(system.source.data["time"])[-1] == s.monitor.quantities["time"][-1] * 1000

    series = WorkersTimeseries(s)
    n = len(series.source.data["time"])
    series.update()
    assert len(series.source.data["time"]) == n  # no heartbeat since: no point
    ws = next(iter(s.workers.values()))
    ws.last_seen += 1
    series.update()
    assert len(series.source.data["time"]) == n + 1


def test_group_layout_places_groups_after_their_dependencies() -> None:
    pos = group_layout(["a", "b", "c", "d"], {"b": {"a"}, "c": {"a", "b"}, "d": {"c", "d", "elsewhere"}})
    assert pos["a"][0] < pos["b"][0] < pos["c"][0] < pos["d"][0]
    cyclic = group_layout(["x", "y"], {"x": {"y"}, "y": {"x"}})  # groups can depend on each other both ways
    assert set(cyclic) == {"x", "y"}


@gen_cluster(client=True)
async def test_group_graph_learns_dependencies_of_graphs_before_and_after_it(
    c: Client, s: Scheduler, a: Worker, b: Worker
) -> None:
    xs = [delayed(inc)(i, dask_key_name=("early", i)) for i in range(3)]
    early = c.compute(delayed(sum)(xs, dask_key_name="early-total"))
    await early
    graph = GroupGraph(s)  # adds the plugin; the tasks already there are read in slices
    await async_poll_for(lambda: isinstance(s.plugins.get(GroupDependencies.name), GroupDependencies))
    plugin = s.plugins[GroupDependencies.name]
    assert isinstance(plugin, GroupDependencies)
    await async_poll_for(lambda: plugin.dependencies.get("early-total") == {"early"})
    later = c.compute(delayed(inc)(early, dask_key_name="later"))
    await later
    assert plugin.dependencies["later"] == {"early-total"}
    graph.update()
    data = graph.node_source.data
    assert set(data["name"]) >= {"early", "early-total", "later"}
    names = list(data["name"])
    row = names.index("early")
    assert data["total"][row] == 3 and data["memory"][row] + data["released"][row] == 3
    assert data["label"][names.index("early-total")] == "early-total"
    # Boxes are filled by state: done ones end at the box's right edge.
    assert data["x_processing"][row] == pytest.approx(data["right"][row])
    assert len(graph.edge_source.data["x0"]) == 2
    x = dict(zip(data["name"], data["x"], strict=True))
    assert x["early"] < x["early-total"] < x["later"]


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_live_profile_draws_the_workers_samples(c: Client, s: Scheduler, a: Worker) -> None:
    with dask.config.set({"distributed.worker.profile.cycle": "100ms"}):
        await wait(c.map(slowinc, range(4), delay=0.3))
    state = await workers_profile(s, "slowinc")
    assert state["count"] > 0
    assert (await workers_profile(s, "no-such-prefix"))["count"] == 0
    profile = LiveProfile(s)
    assert "slowinc" in profile.select.options
    profile.select.value = "slowinc"  # no document yet: nothing asked
    await profile.fetch()
    assert len(profile.source.data["name"]) > 1
    assert "slowinc" in profile.source.data["name"]
    assert "samples of tasks of 'slowinc'" in profile.message.text
