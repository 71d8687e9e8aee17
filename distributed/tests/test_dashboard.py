"""The scheduler's dashboard: every route answers, and the pages show the scheduler's state."""

from __future__ import annotations

import json
import re
import urllib.parse
import warnings
from typing import Any

import dask
import pytest
from bokeh.document import Document
from bokeh.document.events import (
    ColumnDataChangedEvent,
    ColumnsPatchedEvent,
    ColumnsStreamedEvent,
    ModelChangedEvent,
)
from bokeh.models import ColumnDataSource
from bokeh.server.session import ServerSession
from dask.delayed import delayed
from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from distributed import Client, Event, Scheduler, Worker, wait
from distributed.dashboard.components.scheduler import (
    LiveTaskStream,
    MemoryByWorker,
    ProcessingByWorker,
    TaskGraph,
    TaskProgress,
    WorkerTable,
    graph_layout,
    prefix_progress,
    worker_memory,
)
from distributed.dashboard.core import BokehDashboard
from distributed.dashboard.scheduler import PAGES, STATUS_BARS_UP_TO, graph_doc, status_doc, workers_doc
from distributed.diagnostics.task_stream import TaskStreamPlugin, ensure_task_stream
from distributed.scheduler.records import TaskGroup, TaskPrefix, TaskState
from distributed.tests.machines import validating_scheduler
from distributed.utils_test import async_poll_for, gen_cluster, gen_test, inc, run_async

DASHBOARD: dict[str, Any] = {"dashboard": True, "dashboard_address": "127.0.0.1:0"}


async def fetch(port: int, path: str, **kwargs: Any) -> HTTPResponse:
    return await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}{path}", request_timeout=10, **kwargs)


async def open_page(board: BokehDashboard[Any], port: int, path: str) -> ServerSession:
    """Load the page at ``path`` as a browser that then leaves would: the bokeh session it opened, updating."""
    await fetch(port, path)
    (session,) = board.sessions()
    assert session.document.session_callbacks
    return session


def content_type(r: HTTPResponse) -> str:
    return r.headers["Content-Type"].split(";")[0].strip()


def block_on(ev: Event) -> int:
    ev.wait()
    return 1


#: What each kind of route must answer with.
EXPECTED_TYPES = {
    "/health": "text/plain",
    "/metrics": "text/plain",
    "/info": "application/json",
}


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_every_route_answers(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(inc, range(5))
    await wait(futures)
    port = s.http_server.port
    sitemap = json.loads((await fetch(port, "/sitemap.json")).body)
    paths = sitemap["paths"]
    for required in (
        "/status",
        "/workers",
        "/graph",
        "/json/counts.json",
        "/json/identity.json",
        "/sitemap.json",
        "/info/main/workers.html",
        "/health",
        "/metrics",
        "/info",
    ):
        assert required in paths
    fill = {
        "/info/worker/{}.html": urllib.parse.quote(a.address, safe=""),
        "/info/task/{}.html": urllib.parse.quote(str(futures[0].key), safe=""),
    }
    for path in paths:  # the other pages of one task or one worker
        if "{}" in path and path not in fill:
            one_task = "/task/" in path or "/call-stack/" in path
            fill[path] = fill["/info/task/{}.html" if one_task else "/info/worker/{}.html"]
    seen_scripts: set[str] = set()
    for path in paths:
        url = path.replace("{}", fill[path]) if "{}" in path else path
        r = await fetch(port, url)
        assert r.code == 200, path
        kind = content_type(r)
        if path in EXPECTED_TYPES:
            assert kind == EXPECTED_TYPES[path], path
        elif path.endswith(".json"):
            assert kind == "application/json", path
            json.loads(r.body)
        else:
            assert kind == "text/html", path
        body = r.body.decode()
        if path in PAGES:
            # A bokeh page, with BokehJS from this server, not a CDN.
            assert "cdn.bokeh.org" not in body
            scripts = re.findall(r'<script[^>]+src="([^"]+)"', body)
            assert any(src.startswith("/static/js/bokeh.min.js") for src in scripts), scripts
            seen_scripts.update(scripts)
    # "/" goes to the status page.
    r = await fetch(port, "/", follow_redirects=False, raise_error=False)
    assert r.code == 302 and r.headers["Location"] == "status"
    for src in sorted(seen_scripts):
        r = await fetch(port, src)
        assert r.code == 200 and "javascript" in content_type(r), src
    # Specific pages show what they are about.
    workers_html = (await fetch(port, "/info/main/workers.html")).body.decode()
    assert a.address in workers_html and b.address in workers_html
    worker_html = (await fetch(port, "/info/worker/" + fill["/info/worker/{}.html"] + ".html")).body.decode()
    assert "In memory" in worker_html and a.address in worker_html
    task_html = (await fetch(port, "/info/task/" + fill["/info/task/{}.html"] + ".html")).body.decode()
    assert "memory" in task_html
    r = await fetch(port, "/info/worker/tcp%3A%2F%2Fnowhere%3A1.html", raise_error=False)
    assert r.code == 404


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_counts_and_identity_json(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    ev = Event()
    blocked = c.submit(block_on, ev, key="blocked")
    done = c.map(inc, range(3))
    await wait(done)
    await async_poll_for(lambda: "blocked" in s.tasks and s.tasks["blocked"].state == "processing")
    port = s.http_server.port
    counts = json.loads((await fetch(port, "/json/counts.json")).body)
    assert counts["workers"] == 2
    assert counts["cores"] == 3
    assert counts["memory"] == 3
    assert counts["processing"] == 1
    assert counts["tasks"] == 4
    # This test's client, and the one the worker made for the task waiting on the Event.
    assert counts["clients"] == 2
    assert counts["hosts"] == 1
    assert counts["erred"] == 0
    identity = json.loads((await fetch(port, "/json/identity.json")).body)
    assert identity["address"] == s.address
    assert set(identity["workers"]) == {a.address, b.address}
    await ev.set()
    await blocked


@gen_cluster(client=True)
async def test_component_data_follows_the_scheduler(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    done = c.map(inc, range(4))
    await wait(done)
    ev = Event()
    blocked = c.map(block_on, [ev] * 2, pure=False)
    await async_poll_for(lambda: sum(len(ws.processing) for ws in s.workers.values()) == 2)

    data = prefix_progress(s)
    rows = {name: i for i, name in enumerate(data["name"])}
    assert set(rows) >= {"inc", "block_on"}
    i, j = rows["inc"], rows["block_on"]
    assert (data["memory"][i], data["total"][i], data["done"][i]) == (4, 4, 4)
    assert (data["processing"][j], data["done"][j], data["total"][j]) == (2, 0, 2)
    # The bars' segments end where the counts say: inc all in memory, block_on all processing.
    assert data["x_memory"][i] == 1.0
    assert data["x_memory"][j] == 0.0 and data["x_processing"][j] == 1.0

    progress = TaskProgress(s)
    assert list(progress.y_range.factors) == data["name"]
    processing = ProcessingByWorker(s)
    assert sum(processing.source.data["processing"]) == 2
    assert sorted(processing.source.data["address"]) == sorted(s.workers)
    table = WorkerTable(s)
    # A first row of totals, then one row per worker.
    assert table.source.data["name"][0] == "Total (2)"
    assert sorted(table.source.data["address"][1:]) == sorted(s.workers)
    assert sum(table.source.data["in_memory"][1:]) == table.source.data["in_memory"][0] == 4
    assert table.source.data["processing"][0] == 2

    # Updating with nothing changed sends nothing (the data object is kept).
    before = progress.source.data
    progress.update()
    assert progress.source.data is before

    await ev.set()
    await wait(blocked)
    del done
    await async_poll_for(lambda: "inc" not in prefix_progress(s)["name"])
    progress.update()
    assert "inc" not in progress.source.data["name"]
    assert "inc" not in list(progress.y_range.factors)
    processing.update()
    assert sum(processing.source.data["processing"]) == 0


@gen_cluster(client=True, worker_kwargs={"memory_limit": "1 GiB"})
async def test_memory_by_worker_splits_managed_unmanaged_spilled(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    ws = s.workers[a.address]
    ws.metrics = {**ws.metrics, "memory": 500, "managed_bytes": 300, "spilled_bytes": {"memory": 100, "disk": 80}}
    data = worker_memory(s)
    i = data["address"].index(a.address)
    assert (data["managed"][i], data["unmanaged"][i], data["spilled"][i]) == (200, 300, 100)
    assert (data["x_managed"][i], data["x_unmanaged"][i], data["x_spilled"][i]) == (200, 500, 600)
    assert data["limit"][i] == 2**30
    memory = MemoryByWorker(s)
    assert memory.source.data["spilled"][i] == 100


def test_graph_layout_places_tasks_after_their_dependencies() -> None:
    async def body() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard=False) as s:
            async with Worker(s.address, nthreads=1), Client(s.address, asynchronous=True) as c:
                x = delayed(inc)(1, dask_key_name="x")
                y = delayed(inc)(x, dask_key_name="y")
                z = delayed(inc)(x, dask_key_name="z")
                total = delayed(sum)([y, z], dask_key_name="total")
                fut = c.compute(total)
                assert await fut == 6
                pos, edges = graph_layout(s.tasks)
                assert pos["x"][0] < pos["y"][0] == pos["z"][0] < pos["total"][0]
                assert pos["y"][1] != pos["z"][1]
                assert sorted(edges) == [("x", "y"), ("x", "z"), ("y", "total"), ("z", "total")]

                graph = TaskGraph(s)
                assert sorted(graph.node_source.data["key"]) == sorted(str(k) for k in s.tasks)
                assert set(graph.node_source.data["state"]) == {s.tasks[k].state for k in s.tasks}
                with dask.config.set({"distributed.dashboard.graph-max-items": 2}):
                    capped = TaskGraph(s)
                assert capped.node_source.data["key"] == []
                assert "graph-max-items" in capped.message.text

    run_async(body, timeout=45)


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_pages_build_documents_with_periodic_updates(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    # Nothing is recorded for the task stream until a status page is opened: it costs every transition.
    assert TaskStreamPlugin.name not in s.plugins
    await fetch(s.http_server.port, "/status")
    await async_poll_for(lambda: isinstance(s.plugins.get(TaskStreamPlugin.name), TaskStreamPlugin))
    await wait(c.map(inc, range(3)))
    for page in (status_doc, workers_doc, graph_doc):
        doc = Document()
        page(s, doc)
        assert doc.roots
        callbacks = doc.session_callbacks
        assert len(callbacks) == 1
        (callback,) = callbacks
        assert callback.period == 500  # type: ignore[attr-defined]  # a PeriodicCallback
        callback.callback()  # an update with the scheduler as it is runs cleanly
    names = {m.name for m in Document().models}  # an empty document has no named models
    assert not names
    doc = Document()
    with dask.config.set({"distributed.dashboard.update-interval": "2s"}):
        status_doc(s, doc)
    assert next(iter(doc.session_callbacks)).period == 2000  # type: ignore[attr-defined]  # a PeriodicCallback
    assert doc.get_model_by_name("task_progress") is not None
    stream = doc.get_model_by_name("task_stream")
    assert stream is not None
    (source,) = {r.data_source for r in stream.renderers}  # type: ignore[attr-defined]  # a figure
    assert sorted(source.data["key"]) == sorted(str(k) for k in s.tasks)
    # Later tasks reach the page's stream at the next tick: their bars alone go to the browser.
    streamed: list[ColumnsStreamedEvent] = []
    doc.on_change(lambda event: streamed.append(event) if isinstance(event, ColumnsStreamedEvent) else None)
    await wait(c.map(inc, range(10, 12)))
    next(iter(doc.session_callbacks)).callback()
    ((event,),) = [[e for e in streamed if e.model is source]]
    assert len(event.data["key"]) == 2


@gen_test()
async def test_status_shows_histograms_past_a_hundred_workers() -> None:
    # On a loop, as pages are built (the task stream's recording starts there).
    s = validating_scheduler()
    for i in range(STATUS_BARS_UP_TO):
        s.add_worker_state(f"tcp://10.0.{i // 250}.{i % 250}:1", 1)
    doc = Document()
    status_doc(s, doc)
    assert doc.get_model_by_name("worker_memory") is not None
    assert doc.get_model_by_name("processing_histogram") is None
    s.add_worker_state("tcp://10.1.0.0:1", 1)
    group = TaskGroup("t", TaskPrefix("t"))
    for i in range(1, 4):  # workers with 1, 2 and 3 tasks among idle ones (only the counts matter to the page)
        s.workers[f"tcp://10.0.0.{i}:1"].processing.update(
            {TaskState(f"t-{i}-{j}", None, group): 0.1 for j in range(i)}
        )
    doc = Document()
    status_doc(s, doc)
    assert doc.get_model_by_name("worker_memory") is None
    fig = doc.get_model_by_name("processing_histogram")
    assert fig is not None
    (source,) = {r.data_source for r in fig.renderers}  # type: ignore[attr-defined]  # a figure
    counts = source.data["workers"]
    assert sum(counts) == STATUS_BARS_UP_TO + 1
    assert (counts[0], counts[-1]) == (STATUS_BARS_UP_TO + 1 - 3, 1)  # the idle ones; the one with 3 tasks
    assert source.data["right"][-1] == 3
    s.workers["tcp://10.0.0.3:1"].processing.clear()
    next(iter(doc.session_callbacks)).callback()  # the page's tick: counted again
    assert source.data["right"][-1] == 2
    assert (source.data["workers"][0], source.data["workers"][-1]) == (STATUS_BARS_UP_TO + 1 - 2, 1)


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_worker_rows_send_only_changed_cells(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    processing = ProcessingByWorker(s)
    table = WorkerTable(s)
    sent: list[Any] = []
    doc = Document()
    doc.add_root(processing.source)
    doc.add_root(table.source)
    doc.on_change(sent.append)
    ev = Event()
    fut = c.submit(block_on, ev, workers=[a.address], pure=False)
    await async_poll_for(lambda: len(s.workers[a.address].processing) == 1)
    processing.update()
    row = list(processing.source.data["address"]).index(a.address)
    (event,) = sent
    assert isinstance(event, ColumnsPatchedEvent)  # one cell: a's count, not the whole table
    assert event.patches == {"processing": [(row, 1)]}
    processing.update()
    assert len(sent) == 1  # nothing changed: nothing sent
    table.update()
    patched = [e for e in sent[1:] if isinstance(e, ColumnsPatchedEvent)]
    assert len(patched) == len(sent) - 1 == 1
    # a's row (after the totals row) and the totals.
    table_row = list(table.source.data["address"]).index(a.address)
    assert sorted(patched[0].patches["processing"]) == [(0, 1), (table_row, 1)]
    await ev.set()
    await wait(fut)


class BrowserReplica:
    """What a browser showing ``source`` holds: its data as sent, with the changes applied as a browser applies them."""

    def __init__(self, source: ColumnDataSource) -> None:
        self.doc = Document()
        self.doc.add_root(source)
        self.data: dict[str, list[Any]] = {k: list(v) for k, v in source.data.items()}
        #: Per change sent: ("stream", new rows) or ("replace", rows).
        self.sent: list[tuple[str, int]] = []
        self.doc.on_change(self.apply)

    def apply(self, event: Any) -> None:
        if isinstance(event, ColumnsStreamedEvent):
            new = {k: list(v) for k, v in event.data.items()}
            self.sent.append(("stream", len(new["key"])))
            for k, v in new.items():
                self.data[k].extend(v)
                if event.rollover is not None:
                    del self.data[k][: max(len(self.data[k]) - event.rollover, 0)]
        elif isinstance(event, ColumnDataChangedEvent | ModelChangedEvent):
            self.data = {k: list(v) for k, v in event.model.data.items()}  # type: ignore[attr-defined]  # a source
            self.sent.append(("replace", len(self.data["key"])))


@gen_cluster(client=True, scheduler_kwargs=DASHBOARD)
async def test_live_task_stream_streams_only_new_bars(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    live = LiveTaskStream(s, n=4)  # before the plugin exists: shows nothing until it does
    browser = BrowserReplica(live.source)
    live.update()
    assert browser.sent == []
    plugin = await ensure_task_stream(s)
    await wait(c.map(inc, range(3)))
    live.update()
    assert browser.sent == [("stream", 3)]
    live.update()
    assert browser.sent == [("stream", 3)]  # nothing new: nothing computed or sent
    await wait(c.map(inc, range(3, 5)))
    live.update()
    assert browser.sent == [("stream", 3), ("stream", 2)]  # only the two new bars
    shown = [str(r["key"]) for r in list(plugin.buffer)[-4:]]
    assert browser.data["key"] == shown  # the browser keeps the last n (rollover)
    assert list(live.source.data["key"]) == []  # and the server none: only the browser reads them
    # Each worker's rows are its own (test_task_stream checks that drawn bars keep their rows).
    by_worker: dict[str, set[int]] = {}
    for worker, y in zip(browser.data["worker"], browser.data["y"], strict=True):
        by_worker.setdefault(worker, set()).add(y)
    assert sum(map(len, by_worker.values())) == len(set().union(*by_worker.values()))
    # Many more records than shown at once: only the last n are placed and sent.
    await wait(c.map(inc, range(10, 30)))
    live.update()
    assert browser.sent[-1] == ("stream", 4)
    assert browser.data["key"] == [str(r["key"]) for r in list(plugin.buffer)[-4:]]
    # A new page on the same plugin starts from its last n records.
    assert list(LiveTaskStream(s, n=4).source.data["key"]) == browser.data["key"]


def test_sessions_stop_updating_when_the_scheduler_closes() -> None:
    async def body() -> None:
        s = Scheduler(host="127.0.0.1", port=0, **DASHBOARD)
        await s
        try:
            assert s.dashboard_server is not None
            assert s.dashboard_server.session_count() == 0
            session = await open_page(s.dashboard_server, s.http_server.port, "/status")
            assert s.dashboard_server.session_count() == 1
        finally:
            await s.close()
        # The page no longer reads the (closed) scheduler.
        assert not session.document.session_callbacks

    run_async(body, timeout=45)


def test_client_without_address_serves_the_dashboard() -> None:
    """``Client()`` starts a LocalCluster with its dashboard, as dask.distributed does (":8787" or a free port)."""
    import urllib.request

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Port 8787 is already in use", category=UserWarning)
        with Client(n_workers=1, threads_per_worker=1, processes=False) as client:
            link = client.dashboard_link
            assert link is not None and link.endswith("/status")
            with urllib.request.urlopen(link, timeout=10) as r:
                assert r.status == 200
                assert b"/static/js/bokeh" in r.read()


def test_bokeh_application_config_is_checked() -> None:
    async def body() -> None:
        bad = {"distributed.scheduler.dashboard.bokeh-application": {"no_such_option": 1}}
        with dask.config.set(bad):
            s = Scheduler(host="127.0.0.1", port=0, dashboard=False)
            await s
            try:
                from distributed.http.scheduler import start_http_server

                with pytest.raises(ValueError, match="no_such_option"):
                    await start_http_server(s, "127.0.0.1:0")
                with (
                    dask.config.set({"distributed.scheduler.dashboard.bokeh-application": {}}),
                    dask.config.set({"distributed.dashboard.update-interval": "0s"}),
                    pytest.raises(ValueError, match="update-interval"),
                ):
                    await start_http_server(s, "127.0.0.1:0")
            finally:
                await s.close()

    run_async(body, timeout=45)
