"""A worker's own dashboard: its routes, the port it announces, and what each page shows of the worker."""

from __future__ import annotations

import gc
import re
import sys
import threading
import weakref
from collections import Counter, deque
from types import SimpleNamespace
from typing import Any, Literal, cast

import dask
import numpy as np
import pytest
from bokeh.document import Document
from bokeh.models import ColumnDataSource

from distributed import Client, Event, Scheduler, Worker, wait
from distributed.dashboard.components.worker import (
    ProfilePanel,
    TaskDurations,
    TaskStateBars,
    TransitionCounts,
    TransitionTally,
    duration_histogram,
)
from distributed.dashboard.worker import PAGES, WorkerDashboard, status_doc
from distributed.profile import Profiler
from distributed.tests.test_dashboard import DASHBOARD as WORKER_DASHBOARD
from distributed.tests.test_dashboard import fetch, open_page
from distributed.utils_test import async_poll_for, gen_cluster, inc, run_async, slowinc


def board_of(w: Worker) -> WorkerDashboard:
    assert w.dashboard_server is not None
    return w.dashboard_server


def source_of(doc: Document, name: str) -> ColumnDataSource:
    """The data source of the first glyph of the named figure of ``doc``."""
    model = doc.get_model_by_name(name)
    assert model is not None, name
    source = model.renderers[0].data_source  # type: ignore[attr-defined]  # a figure
    assert isinstance(source, ColumnDataSource)
    return source


def tick(doc: Document) -> None:
    """Run the page's periodic update once, as its session would."""
    (callback,) = doc.session_callbacks
    callback.callback()


def full_count(w: Worker) -> Counter[str]:
    assert w.state is not None
    return Counter(ts.state for ts in w.state.tasks.values() if ts.state != "released")


def block_on(ev: Event, x: Any = None) -> int:
    ev.wait()
    return 1


@pytest.mark.timeout(60)
@gen_cluster(client=True, worker_kwargs=WORKER_DASHBOARD)
async def test_pages_answer_and_other_paths_404(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    assert a.http_server is not None
    port = a.http_server.port
    for path in PAGES:
        r = await fetch(port, path)
        body = r.body.decode()
        assert r.code == 200 and r.headers["Content-Type"].startswith("text/html"), path
        # BokehJS from this server, not a CDN; the navigation bar's links are relative (the pages work behind a proxy).
        assert "cdn.bokeh.org" not in body
        assert re.search(r'<script[^>]+src="/static/js/bokeh\.min\.js', body), path
        assert 'href="system"' in body and 'href="counters"' in body, path
        assert not re.search(r'<a href="/', body), path
    for missing in ("/graph", "/workers", "/tasks", "/nowhere"):
        r = await fetch(port, missing, raise_error=False)
        assert r.code == 404, missing
    r = await fetch(port, "/", follow_redirects=False, raise_error=False)
    assert r.code == 302 and r.headers["Location"] == "status"
    for path in ("/health", "/info", "/metrics"):
        assert (await fetch(port, path)).code == 200


@pytest.mark.timeout(60)
@gen_cluster(client=True, worker_kwargs=WORKER_DASHBOARD)
async def test_the_scheduler_knows_each_workers_dashboard_port(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    info = await c.scheduler_info(n_workers=-1)
    for w in (a, b):
        assert w.http_server is not None
        assert w.service_ports == {"dashboard": w.http_server.port}
        assert info["workers"][w.address]["services"] == {"dashboard": w.http_server.port}
        assert s.workers[w.address].extra["services"] == {"dashboard": w.http_server.port}
    # Routes without the pages (an address alone, as in dask), and nothing at all.
    async with (
        Worker(s.address, dashboard_address="127.0.0.1:0") as routes_only,
        Worker(s.address, dashboard=False) as bare,
    ):
        assert routes_only.http_server is not None and routes_only.dashboard_server is None
        assert (await fetch(routes_only.http_server.port, "/health")).code == 200
        assert (await fetch(routes_only.http_server.port, "/status", raise_error=False)).code == 404
        assert bare.http_server is None and bare.service_ports == {}
        info = await c.scheduler_info(n_workers=-1)
        assert info["workers"][routes_only.address]["services"] == {"dashboard": routes_only.http_server.port}
        assert "services" not in info["workers"][bare.address]  # it serves nothing


@pytest.mark.timeout(60)
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], worker_kwargs=WORKER_DASHBOARD)
async def test_status_page_shows_executing_ready_and_memory(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    board = board_of(a)
    held = c.submit(np.ones, 2_000_000, key="held")  # 16 MB of managed memory
    await wait(held)
    ev = Event()
    # Pinned to the worker (so not queued on the scheduler): one runs, two are ready.
    blockers = [c.submit(block_on, ev, i, key=f"block-{i}", workers=[a.address]) for i in range(3)]
    await async_poll_for(lambda: len(a.active_threads) == 1 and full_count(a)["ready"] == 2)
    doc = Document()
    status_doc(board, doc)
    tick(doc)
    rows = dict(zip(source_of(doc, "worker_tasks").data["label"], source_of(doc, "worker_tasks").data["count"]))
    assert rows["executing"] == 1
    assert rows["ready"] == 2
    assert rows["waiting for inputs"] == 0
    assert rows["in memory"] == 1
    texts = source_of(doc, "worker_tasks").data["text"]
    assert "1 / 1 threads" in texts
    memory = source_of(doc, "worker_memory").data
    assert memory["x_managed"][0] >= 16_000_000
    assert memory["managed_text"][0].endswith("MiB")
    history = source_of(doc, "executing_history").data
    assert history["executing"][-1] == 1 and history["ready"][-1] == 2
    await ev.set()
    await wait(blockers)
    tick(doc)
    rows = dict(zip(source_of(doc, "worker_tasks").data["label"], source_of(doc, "worker_tasks").data["count"]))
    assert rows["executing"] == rows["ready"] == 0
    assert rows["in memory"] == 4
    # An update with nothing new sends nothing: the counts' source is patched only where a value changed.
    before = dict(source_of(doc, "worker_tasks").data)
    tick(doc)
    assert source_of(doc, "worker_tasks").data == before


@pytest.mark.timeout(60)
@gen_cluster(client=True, worker_kwargs=WORKER_DASHBOARD)
async def test_tally_agrees_with_a_full_count(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    tally = TransitionTally(a)
    tally.refresh()
    assert +tally.counts == full_count(a)
    ev = Event()
    roots = c.map(block_on, [ev] * 4, range(4), workers=[a.address], pure=False)
    # Inputs from the other worker: tasks to fetch, in flight, then in memory here.
    others = c.map(inc, range(10), workers=[b.address])
    await wait(others)
    # Run on a behind the blocked roots: their inputs are fetched (fetch, flight, memory), then they wait ready.
    sums = [c.submit(inc, o, workers=[a.address]) for o in others]
    await async_poll_for(lambda: full_count(a)["memory"] == 10 and full_count(a)["ready"] == 13)
    tally.refresh()
    assert +tally.counts == full_count(a) == Counter({"executing": 1, "ready": 13, "memory": 10})
    await ev.set()
    await wait(sums + roots)
    tally.refresh()
    assert +tally.counts == full_count(a)
    assert len(tally.durations) == 14  # the roots and the sums ran after the tally began
    kinds = tally.recent_kinds()
    assert kinds["executing → memory"] == 14 and kinds["flight → memory"] == 10
    # A page drawing the tally: run times and transitions of the last minute.
    durations = TaskDurations(tally)
    assert sum(durations.source.data["count"]) == len(tally.durations)
    counts = TransitionCounts(tally)
    assert "executing → memory" in counts.source.data["kind"]


class CountingTasks(dict[Any, Any]):
    """A task mapping that counts how often all its tasks are read."""

    reads = 0

    def values(self) -> Any:
        self.reads += 1
        return super().values()


def fake_machine(states: list[str], log_length: int = 100) -> Any:
    tasks = CountingTasks({f"t{i}": SimpleNamespace(key=f"t{i}", state=st) for i, st in enumerate(states)})
    return SimpleNamespace(tasks=tasks, log=deque(maxlen=log_length), transition_counter=0)


def transition(machine: Any, key: str, start: str, finish: str, when: float = 1000.0) -> None:
    machine.tasks[key].state = finish
    machine.transition_counter += 1
    machine.log.append((key, start, finish, "test", when))


@pytest.mark.timeout(10)
def test_tally_reads_only_the_transitions_since_its_last_refresh() -> None:
    machine = fake_machine(["waiting"] * 50 + ["memory"] * 50)
    worker = SimpleNamespace(state=machine)
    tally = TransitionTally(cast(Any, worker))
    tally.refresh()  # the first refresh counts every task
    assert machine.tasks.reads == 1
    assert tally.counts == Counter({"waiting": 50, "memory": 50})
    for i in range(3):
        transition(machine, f"t{i}", "waiting", "ready", 1000.0)
        transition(machine, f"t{i}", "ready", "executing", 1001.0)
    transition(machine, "t0", "executing", "memory", 1003.5)
    for _ in range(5):
        tally.refresh()
    assert machine.tasks.reads == 1  # no task was read again: only the log's new entries
    assert +tally.counts == Counter({"waiting": 47, "memory": 51, "executing": 2})
    assert list(tally.durations) == [2.5]
    # More transitions than the log keeps, or a new state machine: counted in full again.
    for i in range(3, 48):
        transition(machine, f"t{i}", "waiting", "ready")
        transition(machine, f"t{i}", "ready", "waiting")
        transition(machine, f"t{i}", "waiting", "ready")
    tally.refresh()
    assert machine.tasks.reads == 2
    assert +tally.counts == Counter({"ready": 45, "waiting": 2, "memory": 51, "executing": 2})
    worker.state = fake_machine(["memory"])
    tally.refresh()
    assert +tally.counts == Counter({"memory": 1})


@pytest.mark.timeout(10)
def test_duration_histogram_bins_on_a_log_scale() -> None:
    data = duration_histogram([0.001, 0.01, 0.1, 1.0, 1.0], bins=4)
    assert sum(data["count"]) == 5
    assert data["left"][0] == pytest.approx(0.001) and data["right"][-1] == pytest.approx(1.0)
    assert data["count"][-1] == 2  # the two one-second tasks
    assert duration_histogram([])["count"] == []
    one = duration_histogram([0.5])
    assert sum(one["count"]) == 1


@pytest.mark.timeout(60)
@gen_cluster(client=True, worker_kwargs=WORKER_DASHBOARD)
async def test_every_page_builds_and_updates(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    board = board_of(a)
    await wait(c.map(slowinc, range(10), delay=0.01))
    names = {
        "/status": ("worker_tasks", "worker_memory", "executing_history", "transfer_history", "transfer_summary"),
        "/system": ("system_cpu", "system_memory", "system_network"),
        "/profile": ("profile_timeline", "profile", "profile_key", "profile_update"),
        "/profile-server": ("profile_timeline", "profile", "profile_update"),
        "/counters": ("transition_counts", "task_durations", "tick_history"),
    }
    assert set(names) == set(PAGES)
    for path, page in PAGES.items():
        doc = Document()
        page(board, doc)
        assert doc.title.startswith("Dask worker") and path[1:] in doc.title
        for name in names[path]:
            assert doc.get_model_by_name(name) is not None, (path, name)
        (callback,) = doc.session_callbacks
        assert callback.period == 500  # type: ignore[attr-defined]  # a PeriodicCallback
        tick(doc)
    # The system page starts from the samples the worker's monitor kept, and then streams only new ones.
    doc = Document()
    PAGES["/system"](board, doc)
    cpu = source_of(doc, "system_cpu")
    assert len(cpu.data["time"]) == len(a.monitor.quantities["time"]) > 0
    before = len(cpu.data["time"])
    await async_poll_for(lambda: len(a.monitor.quantities["time"]) > before or a.monitor.count > before + 1)
    tick(doc)
    assert len(cpu.data["time"]) > before


@pytest.mark.timeout(60)
@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1)],
    worker_kwargs={**WORKER_DASHBOARD, "profile_cycle_interval": "100ms"},
)
async def test_profile_page_shows_the_tasks_code(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    await wait(c.map(slowinc, range(20), delay=0.05, key=[f"slowinc-{i}" for i in range(20)]))
    assert a.profiler is not None
    await async_poll_for(lambda: a.profiler is not None and len(a.profiler.history) >= 2)
    panel = ProfilePanel(a)
    assert len(panel.timeline.data["time"]) >= 2
    assert "slowinc" in panel.select.options
    names = set(panel.icicle.source.data["name"])
    assert "slowinc" in names  # the task's own function, sampled while it slept
    # One key prefix only, and a selection of one cycle of the timeline.
    panel.select.value = "slowinc"
    assert "slowinc" in set(panel.icicle.source.data["name"])
    assert "key prefix 'slowinc'" in panel.note.text
    busiest = max(range(len(panel.timeline.data["count"])), key=lambda i: panel.timeline.data["count"][i])
    panel.timeline.selected.indices = [busiest]
    assert "selected cycles" in panel.note.text
    chosen = panel.timeline.data["count"][busiest]
    assert chosen > 0 and panel.note.text.startswith(f"<p>{chosen} samples")
    server = ProfilePanel(a, server=True)
    assert "event loop" in server.note.text


@pytest.mark.timeout(30)
def test_selecting_a_cycle_profiles_that_cycle_whatever_its_time() -> None:
    # Times whose milliseconds divided back by 1000 are a larger float: a cycle looked up by that
    # value was missed (0 samples) about one time in eighty.
    start = 1_764_800_000.0
    times = [t for t in (start + i * 0.0123457 for i in range(20_000)) if (t * 1000) / 1000 > t][:3]
    assert len(times) == 3
    profiler = Profiler({threading.get_ident(): "slowinc-1"}, None, interval=0.01, cycle=0.1, stop=None)
    for n, t in enumerate(times, start=1):
        for _ in range(n):  # n samples in the n-th cycle
            profiler.sample_frames({threading.get_ident(): sys._getframe()}, {})
        profiler.close_cycle(now=t)
    panel = ProfilePanel(cast(Worker, SimpleNamespace(profiler=profiler)))
    assert panel.timeline.data["count"] == [1, 2, 3]
    for key in ("All", "slowinc"):
        panel.select.value = key
        for i in range(3):
            panel.timeline.selected.indices = [i]
            assert panel.note.text.startswith(f"<p>{i + 1} samples"), (key, i, panel.note.text)
        panel.timeline.selected.indices = [0, 2]
        assert panel.note.text.startswith("<p>6 samples")


@pytest.mark.timeout(60)
def test_sessions_of_pages_closed_are_dropped_and_closing_stops_updates() -> None:
    async def body() -> None:
        quick = {
            "distributed.scheduler.dashboard.bokeh-application": {
                "check_unused_sessions_milliseconds": 100,
                "unused_session_lifetime_milliseconds": 200,
            }
        }
        async with Scheduler(host="127.0.0.1", port=0, dashboard=False) as s:
            with dask.config.set(quick):
                w = Worker(s.address, **WORKER_DASHBOARD)
                await w
            try:
                board = board_of(w)
                assert w.http_server is not None
                # A page loaded without its websocket (the browser left): its session goes, with its document.
                await fetch(w.http_server.port, "/status")
                (session,) = board.sessions()
                doc = weakref.ref(session.document)
                del session
                await async_poll_for(lambda: board.session_count() == 0, timeout=10)
                # Bokeh lets go of the document a moment after discarding its session.
                await async_poll_for(lambda: gc.collect() >= 0 and doc() is None, timeout=10, period=0.2)
                # A page still open when the worker closes stops reading the worker.
                session = await open_page(board, w.http_server.port, "/counters")
            finally:
                await w.close()
            assert not session.document.session_callbacks

    run_async(body, timeout=45)


@pytest.mark.timeout(60)
@gen_cluster(client=True, worker_kwargs=WORKER_DASHBOARD)
async def test_state_bars_count_fetches_and_flights(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    """Inputs held by another worker show as "to fetch" / "in flight", then "in memory"."""
    tally = TransitionTally(a)
    bars = TaskStateBars(a, tally)
    parts = c.map(np.ones, [100_000] * 4, workers=[b.address], pure=False)
    await wait(parts)
    total = c.submit(lambda *xs: sum(float(x.sum()) for x in xs), *parts, workers=[a.address])
    assert await total == 400_000.0
    bars.update()
    rows = dict(zip(bars.source.data["label"], bars.source.data["count"]))
    assert rows["in memory"] == full_count(a)["memory"] >= 5
    assert rows["to fetch"] == rows["in flight"] == 0
    kinds = tally.recent_kinds()
    assert kinds["fetch → flight"] >= 1 and kinds["flight → memory"] == 4
