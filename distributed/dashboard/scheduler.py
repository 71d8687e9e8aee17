"""The scheduler's dashboard pages: those of the navigation bar, and one page per pane (``/individual-*``).

The bar's pages (see :data:`~distributed.dashboard.templates.NAV_PAGES`):
``/status`` (memory, load per worker, task stream, progress), ``/workers``,
``/tasks`` (the task stream over a longer window), ``/system`` (the
scheduler process over time), ``/profile``, ``/graph`` and ``/groups``.
Each ``/individual-*`` page shows one of their panes alone, without the bar,
for embeddings such as dask-labextension, which lists them from
``/individual-plots.json`` (:func:`individual_plots`).

Each page fills one bokeh document per browser session with components of
:mod:`distributed.dashboard.components`, drawn on the Jinja2 template of
:mod:`distributed.dashboard.templates`, and adds one periodic callback, every
``distributed.dashboard.update-interval`` (500 ms by default), that updates
them all. Nothing is computed while no page is open, and a closed page's
document, with its components, is dropped with its bokeh session: nothing
of a session stays with the scheduler.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import dask.config
import tornado.web

from distributed.dashboard.core import BokehDashboard, Page, update_interval_ms
from distributed.dashboard.templates import (
    INDIVIDUAL_PAGES,
    bokeh_template,
    page_variables,
    pane_variables,
)

if TYPE_CHECKING:
    from bokeh.document import Document
    from bokeh.models import Model

    from distributed.scheduler import Scheduler

__all__ = [
    "INDIVIDUAL",
    "PAGES",
    "IndividualPlotsJSON",
    "graph_doc",
    "groups_doc",
    "individual_plots",
    "profile_doc",
    "start_dashboard",
    "status_doc",
    "system_doc",
    "tasks_doc",
    "workers_doc",
]

logger = logging.getLogger(__name__)


class Component(Protocol):
    """What a page is made of: a bokeh model to show, and an update that a tick runs."""

    @property
    def root(self) -> Model: ...

    def update(self) -> None: ...


def _add_updates(scheduler: Scheduler, doc: Document, path: str, updates: Sequence[Callable[[], None]]) -> None:
    """One periodic callback for the page's components; a failing one is logged, the others go on.

    Each tick's duration is recorded with the dashboard (:meth:`BokehDashboard.tick_durations`).
    """
    failed: set[int] = set()

    def tick() -> None:
        start, start_cpu = time.perf_counter(), time.thread_time()
        for i, update in enumerate(updates):
            try:
                update()
            except Exception:
                if i not in failed:  # once per component and session: not at every tick
                    failed.add(i)
                    logger.exception("Dashboard component update failed")
        board = scheduler.dashboard_server
        if board is not None:
            board.record_tick(path, time.perf_counter() - start, time.thread_time() - start_cpu)

    doc.add_periodic_callback(tick, update_interval_ms())


def _page(doc: Document, title: str, path: str, *roots: Model) -> None:
    """Put ``roots`` in ``doc`` drawn in the page template with the navigation bar, ``path`` marked."""
    doc.title = f"Dask: {title}"
    doc.template = bokeh_template()
    doc.template_variables.update(page_variables(path))
    for root in roots:
        doc.add_root(root)


def _ensure_task_stream(scheduler: Scheduler) -> None:
    """Start the scheduler's recording of the task stream, if it has not started yet.

    Recording costs the scheduler a plugin call on every transition, so, as in
    dask.distributed, it starts when someone first looks (these pages,
    ``get_task_stream``, ``performance_report``) rather than with the server.
    The stream then shows the tasks that finished since.
    """
    from distributed.diagnostics.task_stream import TaskStreamPlugin, ensure_task_stream

    if not isinstance(scheduler.plugins.get(TaskStreamPlugin.name), TaskStreamPlugin):
        # Pages are built on the scheduler's loop; the plugin is added right after, on that loop.
        task = asyncio.ensure_future(ensure_task_stream(scheduler))
        _pending.add(task)
        task.add_done_callback(_pending.discard)


#: Tasks adding the task stream plugin, kept until done (the loop holds only weak references).
_pending: set[asyncio.Future[Any]] = set()


def _status_stream(scheduler: Scheduler, **kwargs: Any) -> Component:
    from distributed.dashboard.components.scheduler import LiveTaskStream

    _ensure_task_stream(scheduler)
    return LiveTaskStream(scheduler, **kwargs)


def _tasks_stream(scheduler: Scheduler, **kwargs: Any) -> Component:
    from distributed.dashboard.components.scheduler import LiveTaskStream

    _ensure_task_stream(scheduler)
    n = int(dask.config.get("distributed.scheduler.dashboard.tasks.task-stream-length"))
    return LiveTaskStream(scheduler, n=n, **kwargs)


#: Up to this many workers (when it opens), ``/status`` draws a bar per worker; past it, histograms.
STATUS_BARS_UP_TO = 100


def status_doc(scheduler: Scheduler, doc: Document) -> None:
    """``/status``: bytes stored (all workers, and per worker), load per worker, task stream, progress.

    Past :data:`STATUS_BARS_UP_TO` workers when the page opens, bytes stored
    and tasks processing per worker are histograms instead of bars.
    """
    from bokeh.layouts import column, row

    from distributed.dashboard.components.cluster import ClusterMemory, StateTotals, WorkerHistogram, WorkerLoad
    from distributed.dashboard.components.scheduler import MemoryByWorker, TaskProgress

    wide: Final = "stretch_width"
    cluster = ClusterMemory(scheduler, sizing_mode=wide)
    memory: Component
    load: Component
    if len(scheduler.workers) <= STATUS_BARS_UP_TO:
        memory = MemoryByWorker(scheduler, sizing_mode=wide)
        load = WorkerLoad(scheduler, sizing_mode=wide)
    else:
        # Too many bars to read (or to send): how many workers have how much.
        memory = WorkerHistogram(
            scheduler,
            "Bytes stored per worker",
            "worker_memory_histogram",
            lambda ws: float(ws.memory.process or ws.nbytes),
            bytes_axis=True,
            sizing_mode=wide,
        )
        load = WorkerHistogram(
            scheduler,
            "Tasks processing per worker",
            "processing_histogram",
            lambda ws: float(len(ws.processing)),
            sizing_mode=wide,
        )
    stream = _status_stream(scheduler, height=300, sizing_mode=wide)
    totals = StateTotals(scheduler, sizing_mode=wide)
    progress = TaskProgress(scheduler, sizing_mode=wide)
    left = column(cluster.root, memory.root, load.root, width=420, sizing_mode="fixed")
    right = column(stream.root, totals.root, progress.root, sizing_mode=wide)
    _page(doc, "Status", "/status", row(left, right, sizing_mode=wide))
    _add_updates(scheduler, doc, "/status", [c.update for c in (cluster, memory, load, stream, totals, progress)])


def workers_doc(scheduler: Scheduler, doc: Document) -> None:
    """``/workers``: each worker's CPU and memory, and a table of the workers with their totals."""
    from bokeh.layouts import column, row

    from distributed.dashboard.components.cluster import WorkerCPU
    from distributed.dashboard.components.scheduler import MemoryByWorker, WorkerTable

    wide: Final = "stretch_width"
    cpu = WorkerCPU(scheduler, sizing_mode=wide)
    memory = MemoryByWorker(scheduler, sizing_mode=wide)
    table = WorkerTable(scheduler, sizing_mode=wide)
    page = column(row(cpu.root, memory.root, sizing_mode=wide), table.root, sizing_mode=wide)
    _page(doc, "Workers", "/workers", page)
    _add_updates(scheduler, doc, "/workers", [cpu.update, memory.update, table.update])


def tasks_doc(scheduler: Scheduler, doc: Document) -> None:
    """``/tasks``: the task stream over ``distributed.scheduler.dashboard.tasks.task-stream-length`` tasks."""
    stream = _tasks_stream(scheduler, height=700, sizing_mode="stretch_width")
    _page(doc, "Tasks", "/tasks", stream.root)
    _add_updates(scheduler, doc, "/tasks", [stream.update])


def system_doc(scheduler: Scheduler, doc: Document) -> None:
    """``/system``: the scheduler process's CPU, memory, network bandwidth and file descriptors over time."""
    from bokeh.layouts import gridplot

    from distributed.dashboard.components.system import SchedulerSystem

    system = SchedulerSystem(scheduler, height=300, sizing_mode="stretch_width")
    grid = gridplot([list(system.figures[:2]), list(system.figures[2:])], sizing_mode="stretch_width")
    _page(doc, "System", "/system", grid)
    _add_updates(scheduler, doc, "/system", [system.update])


def profile_doc(scheduler: Scheduler, doc: Document) -> None:
    """``/profile``: the workers' statistical profile, of all tasks or of one task prefix, as a flame graph."""
    from distributed.dashboard.components.live_profile import LiveProfile

    profile = LiveProfile(scheduler, height=600, sizing_mode="stretch_width")
    _page(doc, "Profile", "/profile", profile.root)
    _add_updates(scheduler, doc, "/profile", [profile.update])


def graph_doc(scheduler: Scheduler, doc: Document) -> None:
    """``/graph``: the task graph coloured by state, for graphs up to ``distributed.dashboard.graph-max-items``."""
    from distributed.dashboard.components.scheduler import TaskGraph

    graph = TaskGraph(scheduler, sizing_mode="stretch_width")
    _page(doc, "Graph", "/graph", graph.root)
    _add_updates(scheduler, doc, "/graph", [graph.update])


def groups_doc(scheduler: Scheduler, doc: Document) -> None:
    """``/groups``: the task groups, their progress and their dependencies."""
    from distributed.dashboard.components.groups import GroupGraph

    groups = GroupGraph(scheduler, sizing_mode="stretch_width")
    _page(doc, "Groups", "/groups", groups.root)
    _add_updates(scheduler, doc, "/groups", [groups.update])


# -- the single panes ----------------------------------------------------------------------
#: Makes a pane's component: (scheduler, figure keywords) -> component.
Make = Callable[..., Component]


def _make(module: str, name: str) -> Make:
    """The component class ``name`` of ``distributed.dashboard.components.<module>``, imported when first used.

    Components import bokeh, which takes a while: importing this module
    (the HTTP routes do, to list the pages) must not.
    """

    def make(scheduler: Scheduler, **kwargs: Any) -> Component:
        import importlib

        cls = getattr(importlib.import_module(f"distributed.dashboard.components.{module}"), name)
        component: Component = cls(scheduler, **kwargs)
        return component

    return make


class _Part:
    """One figure of a component that has several (``WorkersTimeseries.cpu``), as a component of its own."""

    def __init__(self, component: Any, attribute: str) -> None:
        self.component = component
        self.root: Model = getattr(component, attribute)

    def update(self) -> None:
        self.component.update()


def _part(make: Make, attribute: str) -> Make:
    def make_part(scheduler: Scheduler, **kwargs: Any) -> Component:
        return _Part(make(scheduler, **kwargs), attribute)

    return make_part


class _Progress:
    """The progress bars under their totals, as on ``/status``."""

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        from bokeh.layouts import column

        from distributed.dashboard.components.cluster import StateTotals
        from distributed.dashboard.components.scheduler import TaskProgress

        self.totals = StateTotals(scheduler, sizing_mode="stretch_width")
        self.progress = TaskProgress(scheduler, **kwargs)
        self.root: Model = column(self.totals.root, self.progress.root, **kwargs)

    def update(self) -> None:
        self.totals.update()
        self.progress.update()


#: The component of each single-pane page, by path (every path of ``INDIVIDUAL_PAGES``).
INDIVIDUAL: dict[str, Make] = {
    "/individual-task-stream": _status_stream,
    "/individual-progress": _Progress,
    "/individual-graph": _make("scheduler", "TaskGraph"),
    "/individual-groups": _make("groups", "GroupGraph"),
    "/individual-workers-memory": _make("scheduler", "MemoryByWorker"),
    "/individual-cluster-memory": _make("cluster", "ClusterMemory"),
    "/individual-cpu": _make("cluster", "WorkerCPU"),
    "/individual-nprocessing": _make("scheduler", "ProcessingByWorker"),
    "/individual-occupancy": _make("cluster", "Occupancy"),
    "/individual-workers-transfer-bytes": _make("cluster", "TransferByWorker"),
    "/individual-workers": _make("scheduler", "WorkerTable"),
    "/individual-workers-cpu-timeseries": _part(_make("system", "WorkersTimeseries"), "cpu"),
    "/individual-workers-memory-timeseries": _part(_make("system", "WorkersTimeseries"), "memory"),
    "/individual-compute-time-per-key": _make("cluster", "ComputeTimePerPrefix"),
    "/individual-scheduler-system": _make("system", "SchedulerSystem"),
    "/individual-profile": _make("live_profile", "LiveProfile"),
}


def individual_doc(path: str, scheduler: Scheduler, doc: Document) -> None:
    """A single-pane page: the component of ``path`` (see :data:`INDIVIDUAL`) alone, filling the window."""
    component = INDIVIDUAL[path](scheduler, sizing_mode="stretch_both")
    doc.title = f"Dask: {path.removeprefix('/individual-').replace('-', ' ')}"
    doc.template = bokeh_template()
    doc.template_variables.update(pane_variables())
    doc.add_root(component.root)
    _add_updates(scheduler, doc, path, [component.update])


def individual_plots() -> dict[str, str]:
    """What ``/individual-plots.json`` answers: each single-pane page's title to its path, as dask.distributed's.

    The title is the path title-cased: ``"Individual Task Stream": "/individual-task-stream"``.
    """
    return {path.strip("/").replace("-", " ").title(): path for path in INDIVIDUAL_PAGES}


class IndividualPlotsJSON(tornado.web.RequestHandler):
    """``/individual-plots.json``: :func:`individual_plots` (empty when the dashboard is not served)."""

    plots: Mapping[str, str]

    def initialize(self, plots: Mapping[str, str]) -> None:
        self.plots = plots

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(dict(self.plots)))


#: The dashboard's pages by path: the bar's, then the single panes.
PAGES: dict[str, Page] = {
    "/status": status_doc,
    "/workers": workers_doc,
    "/tasks": tasks_doc,
    "/system": system_doc,
    "/profile": profile_doc,
    "/graph": graph_doc,
    "/groups": groups_doc,
    **{path: functools.partial(individual_doc, path) for path in INDIVIDUAL_PAGES},
}


def start_dashboard(scheduler: Scheduler, app: tornado.web.Application) -> BokehDashboard:
    """Serve the dashboard's pages for ``scheduler`` behind ``app``, on the running loop."""
    dashboard = BokehDashboard(scheduler, PAGES)
    dashboard.attach(app)
    return dashboard
