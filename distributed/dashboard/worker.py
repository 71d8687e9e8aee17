"""A worker's own dashboard: bokeh pages on the worker's HTTP port, beside ``/health``, ``/info`` and ``/metrics``.

Served when the worker is made with ``dashboard=True`` (``dask worker``
does so unless given ``--no-dashboard``), as in dask.distributed.  The port is
the worker's ``services["dashboard"]``, which the scheduler shows
(``scheduler_info()["workers"][address]["services"]``) and links to from its
info pages.

Pages
-----
``/status``
    Tasks by state (executing of the worker's threads, ready, waiting for
    inputs, to fetch, in flight, in memory, ...), memory (managed, unmanaged,
    spilled, the limit), executing and ready over time, and transfers with
    other workers (now, so far, and bytes per second over time).
``/system``
    The worker process's CPU, memory and open files and its host's network
    and disk over time (the worker's system monitor).
``/profile``, ``/profile-server``
    The statistical profile of the worker's tasks (by key prefix), and of its
    event loop, with a timeline to restrict it to some cycles.
``/counters``
    Transitions by kind over the last minute, the run times of the latest
    tasks, and the event loop's tick over time.

Any other path is 404.  Each page builds one bokeh document per browser
session with components of :mod:`distributed.dashboard.components.worker`
and one periodic callback (``distributed.dashboard.update-interval``) that
updates them on the worker's loop.  Nothing runs while no page is open.
Sessions whose browser left are dropped by bokeh (its unused-session
settings come from ``distributed.scheduler.dashboard.bokeh-application``,
which dask.distributed reads for workers too); closing the worker stops every
page's updates and closes their websockets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import tornado.web

from distributed.dashboard.core import BokehDashboard, Page

if TYPE_CHECKING:
    from bokeh.document import Document

    from distributed.dashboard.components.worker import TransitionTally
    from distributed.worker import Worker

__all__ = [
    "PAGES",
    "WORKER_NAV",
    "WorkerDashboard",
    "WorkerPage",
    "counters_doc",
    "profile_doc",
    "profile_server_doc",
    "start_worker_dashboard",
    "status_doc",
    "system_doc",
]

logger = logging.getLogger(__name__)

#: A page: fills a new bokeh document (one per browser session) for a worker's dashboard.
WorkerPage = Page["WorkerDashboard"]


class WorkerDashboard(BokehDashboard["WorkerDashboard"]):
    """A worker's bokeh pages, served behind the worker's tornado application.

    Each page is given this dashboard (the worker, and the tally its pages
    share) with the document to fill.

    Parameters
    ----------
    worker
        The worker whose state the pages show.
    pages
        URL path (``"/status"``) to the function that fills a new document.
    """

    def __init__(self, worker: Worker, pages: Mapping[str, WorkerPage] | None = None) -> None:
        from distributed.dashboard.components.worker import TransitionTally

        self.worker = worker
        #: The worker's tasks by state, shared by the open pages (refreshed only while one is open).
        self.tally: TransitionTally = TransitionTally(worker)
        super().__init__(self, PAGES if pages is None else pages)

    def add_updates(self, doc: Document, updates: Sequence[Callable[[], None]]) -> None:
        """One periodic callback for a page's components; a failing one is logged once, the others go on."""
        failed: set[int] = set()

        def tick() -> None:
            for i, update in enumerate(updates):
                try:
                    update()
                except Exception:
                    if i not in failed:  # once per component and page, not at every tick
                        failed.add(i)
                        logger.exception("Worker dashboard: a component's update failed")

        doc.add_periodic_callback(tick, self.interval_ms)


#: The worker dashboard's navigation bar: (title, path) of each page.
WORKER_NAV: tuple[tuple[str, str], ...] = (
    ("Status", "/status"),
    ("System", "/system"),
    ("Profile", "/profile"),
    ("Profile (event loop)", "/profile-server"),
    ("Counters", "/counters"),
)


def _frame(doc: Document, path: str, title: str) -> None:
    """Draw ``doc`` inside the dashboard's page template, with the worker's navigation bar."""
    from distributed.dashboard.templates import bokeh_template, page_variables

    doc.title = title
    doc.template = bokeh_template()
    # Relative links (root ""): the pages also work behind a proxy that serves them under a prefix.
    doc.template_variables.update(page_variables(path, root="", nav=WORKER_NAV, more=()))


def _title(board: WorkerDashboard, page: str) -> str:
    name = board.worker.name
    address = board.worker.address
    who = address if name is None or str(name) == address else f"{name} ({address})"
    return f"Dask worker {who}: {page}"


def status_doc(board: WorkerDashboard, doc: Document) -> None:
    """``/status``: tasks by state, memory, executing over time, and transfers."""
    from bokeh.layouts import column, row

    from distributed.dashboard.components.worker import (
        ExecutingHistory,
        MemoryBar,
        TaskStateBars,
        TransferHistory,
        TransferSummary,
    )

    w = board.worker
    states = TaskStateBars(w, board.tally)
    memory = MemoryBar(w)
    executing = ExecutingHistory(w, board.tally)
    summary = TransferSummary(w)
    transfers = TransferHistory(w, x_range=executing.x_range)
    left = column(states.root, memory.root, sizing_mode="stretch_width")
    right = column(executing.root, summary.root, transfers.root, sizing_mode="stretch_width")
    _frame(doc, "/status", _title(board, "status"))
    doc.add_root(row(left, right, sizing_mode="stretch_width"))
    board.add_updates(doc, [states.update, memory.update, executing.update, summary.update, transfers.update])


def system_doc(board: WorkerDashboard, doc: Document) -> None:
    """``/system``: the worker process's CPU, memory, open files, and its host's network and disk over time."""
    from distributed.dashboard.components.worker import SystemHistory

    system = SystemHistory(board.worker)
    _frame(doc, "/system", _title(board, "system"))
    doc.add_root(system.root)
    board.add_updates(doc, [system.update])


def _profile(board: WorkerDashboard, doc: Document, server: bool) -> None:
    from distributed.dashboard.components.worker import ProfilePanel

    panel = ProfilePanel(board.worker, server=server)
    path = "/profile-server" if server else "/profile"
    _frame(doc, path, _title(board, path[1:]))
    doc.add_root(panel.root)
    board.add_updates(doc, [panel.update])


def profile_doc(board: WorkerDashboard, doc: Document) -> None:
    """``/profile``: the statistical profile of the worker's tasks, by key prefix."""
    _profile(board, doc, server=False)


def profile_server_doc(board: WorkerDashboard, doc: Document) -> None:
    """``/profile-server``: the statistical profile of the worker's event loop."""
    _profile(board, doc, server=True)


def counters_doc(board: WorkerDashboard, doc: Document) -> None:
    """``/counters``: transitions by kind over the last minute, task run times, the event loop's tick."""
    from bokeh.layouts import column, row

    from distributed.dashboard.components.worker import TaskDurations, TickHistory, TransitionCounts

    kinds = TransitionCounts(board.tally)
    durations = TaskDurations(board.tally)
    ticks = TickHistory(board.worker)
    _frame(doc, "/counters", _title(board, "counters"))
    doc.add_root(
        column(row(kinds.root, durations.root, sizing_mode="stretch_width"), ticks.root, sizing_mode="stretch_width")
    )
    board.add_updates(doc, [kinds.update, durations.update, ticks.update])


#: The worker dashboard's pages by path.
PAGES: dict[str, WorkerPage] = {
    "/status": status_doc,
    "/system": system_doc,
    "/profile": profile_doc,
    "/profile-server": profile_server_doc,
    "/counters": counters_doc,
}


def start_worker_dashboard(worker: Worker, app: tornado.web.Application) -> WorkerDashboard:
    """Serve ``worker``'s dashboard pages behind ``app``, on the running loop (the worker's)."""
    board = WorkerDashboard(worker)
    board.attach(app)
    return board
