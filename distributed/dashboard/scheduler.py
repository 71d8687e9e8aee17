"""The scheduler's dashboard pages: ``/status``, ``/workers`` and ``/graph``.

Each page fills one bokeh document per browser session with components of
:mod:`distributed.dashboard.components` and adds one periodic callback, every
``distributed.dashboard.update-interval`` (500 ms by default), that updates
them all. Nothing is computed while no page is open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from distributed.dashboard.core import BokehDashboard, Page, update_interval_ms

if TYPE_CHECKING:
    import tornado.web
    from bokeh.document import Document
    from bokeh.models import Model

    from distributed.scheduler import Scheduler

__all__ = ["PAGES", "graph_doc", "start_dashboard", "status_doc", "workers_doc"]

logger = logging.getLogger(__name__)


def _nav(current: str) -> Model:
    from bokeh.models.widgets.markups import Div

    links = " | ".join(
        f"<b>{path[1:]}</b>" if path == current else f'<a href="{path}">{path[1:]}</a>' for path in PAGES
    )
    nav: Model = Div(
        text=f'<nav class="dask-nav">{links} | <a href="/info/main/workers.html">info</a></nav>', name="nav"
    )
    return nav


def _add_updates(doc: Document, updates: Sequence[Callable[[], None]]) -> None:
    """One periodic callback for the page's components; a failing one is logged, the others go on."""
    failed: set[int] = set()

    def tick() -> None:
        for i, update in enumerate(updates):
            try:
                update()
            except Exception:
                if i not in failed:  # once per component and session: not at every tick
                    failed.add(i)
                    logger.exception("Dashboard component update failed")

    doc.add_periodic_callback(tick, update_interval_ms())


def status_doc(scheduler: Scheduler, doc: Document) -> None:
    """``/status``: task stream, progress per task prefix, tasks processing and memory per worker."""
    from bokeh.layouts import column, row

    from distributed.dashboard.components.scheduler import MemoryByWorker, ProcessingByWorker, TaskProgress

    parts: list[Any] = []
    stream = _task_stream(scheduler)
    progress = TaskProgress(scheduler, sizing_mode="stretch_width")
    processing = ProcessingByWorker(scheduler, sizing_mode="stretch_width")
    memory = MemoryByWorker(scheduler, sizing_mode="stretch_width")
    updates = [progress.update, processing.update, memory.update]
    if stream is not None:
        parts.append(stream.root)
        updates.insert(0, stream.update)
    left = column(memory.root, processing.root, sizing_mode="stretch_width")
    right = column(*parts, progress.root, sizing_mode="stretch_width")
    doc.title = "Dask: Status"
    doc.add_root(column(_nav("/status"), row(left, right, sizing_mode="stretch_width"), sizing_mode="stretch_width"))
    _add_updates(doc, updates)


def _task_stream(scheduler: Scheduler) -> Any:
    """The live task stream; the first status page opened starts the scheduler's recording of it.

    Recording costs the scheduler a plugin call on every transition, so, as in
    dask.distributed, it starts when someone first looks (this page,
    ``get_task_stream``, ``performance_report``) rather than with the server.
    The stream then shows the tasks that finished since.
    """
    from distributed.dashboard.components.scheduler import LiveTaskStream
    from distributed.diagnostics.task_stream import TaskStreamPlugin, ensure_task_stream

    if not isinstance(scheduler.plugins.get(TaskStreamPlugin.name), TaskStreamPlugin):
        # Pages are built on the scheduler's loop; the plugin is added right after, on that loop.
        task = asyncio.ensure_future(ensure_task_stream(scheduler))
        _pending.add(task)
        task.add_done_callback(_pending.discard)
    return LiveTaskStream(scheduler, height=300, sizing_mode="stretch_width")


#: Tasks adding the task stream plugin, kept until done (the loop holds only weak references).
_pending: set[asyncio.Future[Any]] = set()


def workers_doc(scheduler: Scheduler, doc: Document) -> None:
    """``/workers``: a table of the workers."""
    from bokeh.layouts import column

    from distributed.dashboard.components.scheduler import WorkerTable

    table = WorkerTable(scheduler, sizing_mode="stretch_width")
    doc.title = "Dask: Workers"
    doc.add_root(column(_nav("/workers"), table.root, sizing_mode="stretch_width"))
    _add_updates(doc, [table.update])


def graph_doc(scheduler: Scheduler, doc: Document) -> None:
    """``/graph``: the task graph coloured by state, for graphs up to ``distributed.dashboard.graph-max-items``."""
    from bokeh.layouts import column

    from distributed.dashboard.components.scheduler import TaskGraph

    graph = TaskGraph(scheduler, sizing_mode="stretch_width")
    doc.title = "Dask: Graph"
    doc.add_root(column(_nav("/graph"), graph.root, sizing_mode="stretch_width"))
    _add_updates(doc, [graph.update])


#: The dashboard's pages by path.
PAGES: dict[str, Page] = {"/status": status_doc, "/workers": workers_doc, "/graph": graph_doc}


def start_dashboard(scheduler: Scheduler, app: tornado.web.Application) -> BokehDashboard:
    """Serve the dashboard's pages for ``scheduler`` behind ``app``, on the running loop."""
    dashboard = BokehDashboard(scheduler, PAGES)
    dashboard.attach(app)
    return dashboard
