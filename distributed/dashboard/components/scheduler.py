"""Dashboard components that read the scheduler's state: progress, workers, memory, graph.

Each component owns a bokeh model (``root``) and a ``ColumnDataSource``; its
``update()`` runs in a document's periodic callback on the scheduler's loop,
reads the scheduler's state directly (no messages, no locks: callbacks run
between the scheduler's own), computes only what it shows, and sends only
what changed (the changed cells of a row, the new bars of the task stream),
so an idle page sends nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import dask.config
from bokeh.models import ColumnDataSource, HoverTool, Model, NumeralTickFormatter, Range1d
from bokeh.models.widgets.markups import Div
from bokeh.models.widgets.tables import DataTable, NumberFormatter, TableColumn
from bokeh.plotting import figure
from dask.utils import key_split

from distributed.dashboard.components.shared import (
    STATE_COLORS,
    CategoryBars,
    Data,
    layer_positions,
    set_if_changed,
    worker_label,
)

if TYPE_CHECKING:
    from distributed.diagnostics.task_stream import StreamBars, TaskStreamPlugin
    from distributed.scheduler import Scheduler
    from distributed.scheduler.records import TaskState

__all__ = [
    "LiveTaskStream",
    "MemoryByWorker",
    "ProcessingByWorker",
    "TaskGraph",
    "TaskProgress",
    "WorkerTable",
    "graph_layout",
    "prefix_progress",
    "with_total_row",
    "worker_memory",
    "worker_rows",
]


def prefix_progress(scheduler: Scheduler) -> Data:
    """Per task prefix with any task not yet forgotten: counts by state and the bars' extents.

    ``done`` counts tasks in memory, erred, and forgotten (mostly results
    released after running; a task cancelled before it ran is forgotten
    too, and counted here as well); the bar of a prefix goes from 0 to 1 in
    segments: in memory, forgotten, erred, processing, and still to run
    (waiting, queued, no-worker, released).
    """
    rows: list[tuple[str, int, int, int, int, int, int]] = []
    for name, tp in scheduler.task_prefixes.items():
        st = tp.state_counts()
        memory, erred, processing, forgotten = st["memory"], st["erred"], st["processing"], st["forgotten"]
        waiting = st["waiting"] + st["queued"] + st["no-worker"] + st["released"]
        if memory + erred + processing + waiting == 0:
            continue
        rows.append((name, memory, forgotten, erred, processing, waiting, memory + forgotten + erred))
    rows.sort(key=lambda r: r[0])
    data: Data = {
        k: []
        for k in (
            "name",
            "memory",
            "released",
            "erred",
            "processing",
            "waiting",
            "done",
            "total",
            "x_memory",
            "x_released",
            "x_erred",
            "x_processing",
            "label",
        )
    }
    for name, memory, forgotten, erred, processing, waiting, done in rows:
        total = memory + forgotten + erred + processing + waiting
        cum = 0
        data["name"].append(name)
        for col, n in (
            ("memory", memory),
            ("released", forgotten),
            ("erred", erred),
            ("processing", processing),
        ):
            data[col].append(n)
            cum += n
            data["x_" + col].append(cum / total)
        data["waiting"].append(waiting)
        data["done"].append(done)
        data["total"].append(total)
        data["label"].append(f"{name}: {done} / {total}")
    return data


class TaskProgress(CategoryBars):
    """One bar per task prefix: done in memory, released, erred, processing, waiting."""

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        self.scheduler = scheduler
        super().__init__(
            prefix_progress(scheduler),
            "name",
            "Progress",
            "task_progress",
            240,
            x_range=Range1d(start=0, end=1),
            **kwargs,
        )
        fig = self.figure
        bars: list[tuple[str, str | float, str, str]] = [
            ("x_memory", 0, STATE_COLORS["memory"], "in memory"),
            ("x_released", "x_memory", STATE_COLORS["released"], "done, released"),
            ("x_erred", "x_released", STATE_COLORS["erred"], "erred"),
            ("x_processing", "x_erred", STATE_COLORS["processing"], "processing"),
        ]
        for right, left, color, _label in bars:
            fig.hbar(y="name", left=left, right=right, height=0.8, color=color, source=self.source)
        fig.hbar(y="name", left="x_processing", right=1, height=0.8, color="#eeeeee", source=self.source)
        fig.text(x=0.01, y="name", text="label", text_baseline="middle", text_font_size="9pt", source=self.source)
        fig.xaxis.visible = False
        fig.add_tools(
            HoverTool(
                tooltips=[
                    ("prefix", "@name"),
                    ("in memory", "@memory"),
                    ("released", "@released"),
                    ("erred", "@erred"),
                    ("processing", "@processing"),
                    ("waiting", "@waiting"),
                ]
            )
        )

    def update(self) -> None:
        """Recount the prefixes' tasks by state."""
        self.refresh(prefix_progress(self.scheduler))


class ProcessingByWorker(CategoryBars):
    """Tasks assigned to each worker (processing), beside its thread count."""

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        self.scheduler = scheduler
        super().__init__(self._data(), "worker", "Tasks processing", "processing", 200, index="address", **kwargs)
        fig = self.figure
        fig.hbar(
            y="worker", left=0, right="processing", height=0.8, color=STATE_COLORS["processing"], source=self.source
        )
        fig.add_tools(
            HoverTool(tooltips=[("worker", "@address"), ("processing", "@processing"), ("threads", "@nthreads")])
        )

    def _data(self) -> Data:
        data: Data = {"worker": [], "address": [], "processing": [], "nthreads": []}
        for addr, ws in self.scheduler.workers.items():
            data["worker"].append(worker_label(addr, ws.name))
            data["address"].append(addr)
            data["processing"].append(len(ws.processing))
            data["nthreads"].append(ws.nthreads)
        return data

    def update(self) -> None:
        """Re-read the workers' processing counts."""
        self.refresh(self._data())


def worker_memory(scheduler: Scheduler) -> Data:
    """Per worker: managed, unmanaged and spilled bytes (as of its last heartbeat) and bar extents."""
    data: Data = {
        k: []
        for k in (
            "worker",
            "address",
            "managed",
            "unmanaged",
            "spilled",
            "limit",
            "x_managed",
            "x_unmanaged",
            "x_spilled",
        )
    }
    for addr, ws in scheduler.workers.items():
        mem = ws.memory
        data["worker"].append(worker_label(addr, ws.name))
        data["address"].append(addr)
        data["managed"].append(mem.managed)
        data["unmanaged"].append(mem.unmanaged)
        data["spilled"].append(mem.spilled)
        data["limit"].append(ws.memory_limit)
        data["x_managed"].append(mem.managed)
        data["x_unmanaged"].append(mem.managed + mem.unmanaged)
        data["x_spilled"].append(mem.managed + mem.unmanaged + mem.spilled)
    return data


class MemoryByWorker(CategoryBars):
    """Each worker's memory: managed (results in memory), unmanaged, and spilled to disk."""

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        self.scheduler = scheduler
        super().__init__(
            worker_memory(scheduler),
            "worker",
            "Bytes stored per worker",
            "worker_memory",
            200,
            index="address",
            **kwargs,
        )
        fig = self.figure
        fig.hbar(y="worker", left=0, right="x_managed", height=0.8, color="#1f77b4", source=self.source)
        fig.hbar(y="worker", left="x_managed", right="x_unmanaged", height=0.8, color="#9ecae1", source=self.source)
        fig.hbar(y="worker", left="x_unmanaged", right="x_spilled", height=0.8, color="#969696", source=self.source)
        fig.xaxis.axis_label = "bytes"
        fig.xaxis.formatter = NumeralTickFormatter(format="0.0 b")
        fig.add_tools(
            HoverTool(
                tooltips=[
                    ("worker", "@address"),
                    ("managed", "@managed{0.00 b}"),
                    ("unmanaged", "@unmanaged{0.00 b}"),
                    ("spilled", "@spilled{0.00 b}"),
                    ("limit", "@limit{0.00 b}"),
                ]
            )
        )

    def update(self) -> None:
        """Re-read the workers' memory."""
        self.refresh(worker_memory(self.scheduler))


#: The workers table's columns: (field, title, number format or None for text).
WORKER_COLUMNS: Sequence[tuple[str, str, str | None]] = (
    ("name", "name", None),
    ("address", "address", None),
    ("nthreads", "threads", "0"),
    ("cpu", "cpu %", "0.0"),
    ("memory", "memory", "0.0 b"),
    ("memory_limit", "limit", "0.0 b"),
    ("managed", "managed", "0.0 b"),
    ("unmanaged", "unmanaged", "0.0 b"),
    ("spilled", "spilled", "0.0 b"),
    ("in_memory", "in memory", "0"),
    ("processing", "processing", "0"),
    ("last_seen", "last seen (s)", "0.0"),
    ("status", "status", None),
    ("spilling", "spilling", None),
)


def worker_rows(scheduler: Scheduler, now: float | None = None) -> Data:
    """The workers table's data: one row per worker."""
    now = time.time() if now is None else now
    data: Data = {field: [] for field, _, _ in WORKER_COLUMNS}
    for addr, ws in scheduler.workers.items():
        mem = ws.memory
        data["name"].append(str(ws.name))
        data["address"].append(addr)
        data["nthreads"].append(ws.nthreads)
        data["cpu"].append(float(ws.metrics.get("cpu", 0) or 0))
        data["memory"].append(mem.process)
        data["memory_limit"].append(ws.memory_limit)
        data["managed"].append(mem.managed)
        data["unmanaged"].append(mem.unmanaged)
        data["spilled"].append(mem.spilled)
        data["in_memory"].append(len(ws.has_what))
        data["processing"].append(len(ws.processing))
        # Rounded so that a table of idle workers does not change at every tick.
        data["last_seen"].append(round(max(now - ws.last_seen, 0.0), 0) if ws.last_seen else 0.0)
        data["status"].append(ws.status.name)
        # A worker whose spill write failed keeps everything in memory from then on: say so where its memory is.
        disk_error = ws.metrics.get("spill_disk_error")
        data["spilling"].append(f"off: {disk_error}" if disk_error else "")
    return data


def with_total_row(rows: Data) -> Data:
    """``rows`` (from :func:`worker_rows`) after a first row of their totals, named ``Total (<workers>)``.

    Counts, bytes and CPU (percent of one core) add up; ``last seen`` is the
    longest; ``spilling`` says how many workers stopped spilling.
    """
    n = len(rows["address"])
    total: dict[str, Any] = {"name": f"Total ({n})", "address": "", "status": ""}
    for field, _, fmt in WORKER_COLUMNS:
        if field in total:
            continue
        if field == "last_seen":
            total[field] = max(rows[field], default=0.0)
        elif fmt is not None:
            total[field] = round(sum(rows[field]), 1) if field == "cpu" else sum(rows[field])
        else:
            off = sum(1 for v in rows[field] if v)
            total[field] = f"off on {off}" if off else ""
    return {field: [total[field], *values] for field, values in rows.items()}


class WorkerTable:
    """A table of the workers: threads, CPU, memory (managed, unmanaged, spilled), tasks; their totals first."""

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        self.scheduler = scheduler
        self.source = ColumnDataSource(with_total_row(worker_rows(scheduler)))
        columns = [
            TableColumn(field=field, title=title, formatter=NumberFormatter(format=fmt))
            if fmt is not None
            else TableColumn(field=field, title=title)
            for field, title, fmt in WORKER_COLUMNS
        ]
        self.root: Model = DataTable(
            source=self.source, columns=columns, name="workers_table", index_position=None, **kwargs
        )

    def update(self) -> None:
        """Re-read the workers."""
        set_if_changed(self.source, with_total_row(worker_rows(self.scheduler)), index="address")


def graph_layout(tasks: Mapping[Any, TaskState]) -> tuple[dict[Any, tuple[float, float]], list[tuple[Any, Any]]]:
    """Positions of ``tasks`` in layers (x: longest chain of dependencies below it) and the edges among them.

    Each task sits one layer right of its deepest dependency; within a layer
    tasks are spread in the order they came. O(tasks + edges).
    """
    depth: dict[Any, int] = {}
    edges: list[tuple[Any, Any]] = []
    # Iterative longest-path depth: a task's depth is known once its dependencies' are.
    for key, ts in tasks.items():
        if key in depth:
            continue
        stack: list[tuple[TaskState, bool]] = [(ts, False)]
        while stack:
            cur, expanded = stack.pop()
            if cur.key in depth:
                continue
            deps = [d for d in cur.dependencies if d.key in tasks]
            if expanded:
                depth[cur.key] = 1 + max((depth.get(d.key, 0) for d in deps), default=-1)
                continue
            stack.append((cur, True))
            stack.extend((d, False) for d in deps if d.key not in depth)
    for key, ts in tasks.items():
        for d in ts.dependencies:
            if d.key in tasks:
                edges.append((d.key, key))
    return layer_positions(tasks, depth), edges


class TaskGraph:
    """The task graph, coloured by state, while it has at most ``distributed.dashboard.graph-max-items`` tasks.

    The layout is recomputed only when the set of tasks changes (seen from
    its size and its newest key, both O(1)); each tick otherwise re-reads
    the states of the shown tasks only. Larger graphs are not drawn.
    """

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        self.scheduler = scheduler
        self.max_items = int(dask.config.get("distributed.dashboard.graph-max-items"))
        self.node_source = ColumnDataSource({"x": [], "y": [], "key": [], "state": [], "color": []})
        self.edge_source = ColumnDataSource({"x0": [], "y0": [], "x1": [], "y1": []})
        fig = figure(title="Task graph", name="task_graph", height=500, tools="pan,wheel_zoom,reset", **kwargs)
        fig.segment(x0="x0", y0="y0", x1="x1", y1="y1", line_color="#bbbbbb", source=self.edge_source)
        fig.scatter(x="x", y="y", size=10, color="color", source=self.node_source)
        fig.add_tools(HoverTool(tooltips=[("key", "@key"), ("state", "@state")]))
        fig.axis.visible = False
        fig.grid.visible = False
        self.figure = fig
        self.message = Div(text="", name="task_graph_message")
        from bokeh.layouts import column

        self.root: Model = column(self.message, fig, sizing_mode="stretch_width")
        self._signature: tuple[int, Any] | None = None
        self._keys: list[Any] = []
        self.update()

    def update(self) -> None:
        """Re-lay the graph if its tasks changed, then re-read their states."""
        tasks = self.scheduler.tasks
        n = len(tasks)
        if n > self.max_items:
            text = f"The graph has {n} tasks, more than distributed.dashboard.graph-max-items ({self.max_items})."
            if self.message.text != text:
                self.message.text = text
                self._signature = None
                self._keys = []
                self.node_source.data = {"x": [], "y": [], "key": [], "state": [], "color": []}
                self.edge_source.data = {"x0": [], "y0": [], "x1": [], "y1": []}
            return
        signature = (n, next(reversed(tasks)) if tasks else None)
        if signature != self._signature:
            self._signature = signature
            self.message.text = f"{n} tasks"
            pos, edges = graph_layout(tasks)
            self._keys = list(pos)
            states = [tasks[k].state for k in self._keys]
            self.node_source.data = {
                "x": [pos[k][0] for k in self._keys],
                "y": [pos[k][1] for k in self._keys],
                "key": [str(k) for k in self._keys],
                "state": states,
                "color": [STATE_COLORS.get(s, "#c7c7c7") for s in states],
            }
            self.edge_source.data = {
                "x0": [pos[a][0] for a, _ in edges],
                "y0": [pos[a][1] for a, _ in edges],
                "x1": [pos[b][0] for _, b in edges],
                "y1": [pos[b][1] for _, b in edges],
            }
            return
        shown = self.node_source.data["state"]
        changed = [
            (i, state)
            for i, (k, old) in enumerate(zip(self._keys, shown, strict=True))
            if (state := tasks[k].state if k in tasks else "forgotten") != old
        ]
        if changed:  # only the tasks whose state changed go to the browser
            self.node_source.patch(
                {"state": changed, "color": [(i, STATE_COLORS.get(state, "#c7c7c7")) for i, state in changed]}
            )


#: The columns a live task stream sends: what its bars and their hover show (no lane, start or prefix name).
LIVE_COLUMNS = ("x", "duration", "y", "key", "action", "color", "alpha", "worker", "source")

#: The most task stream records a page draws at one tick. Each costs the scheduler's loop some 10-20 µs
#: (placing its bars, sending them); at 500 a page's tick stays near 10 ms however fast tasks finish.
PER_TICK = 500


class LiveTaskStream:
    """The task stream of the last ``n`` bars (finished tasks and their transfers), read incrementally from the plugin.

    Each tick asks the scheduler's :class:`TaskStreamPlugin` (looked up by
    name, so the page may be built before the plugin is added) only for the
    records added since the last one (:meth:`TaskStreamPlugin.since`), places
    their bars after those already drawn (:class:`StreamBars`: lanes and rows
    carry over from tick to tick) and streams only them to the browser, which
    keeps the last ``n`` (``rollover``). A tick thus costs O(new records),
    at most ``n``; with none, nothing is computed or sent. Times are
    milliseconds since the first record shown, so the axis stays put.

    Parameters
    ----------
    scheduler
        The scheduler whose task stream plugin is read.
    n
        Bars shown (one per task, plus one per transfer it waited for); by
        default ``distributed.scheduler.dashboard.status.task-stream-length``.
    per_tick
        Most records drawn at one tick (by default ``n``, at most
        :data:`PER_TICK`): when more finished since the last one, the newest
        are drawn and the older ones skipped, so that a tick's cost stays
        bounded however fast tasks finish and however long the window.
    """

    def __init__(self, scheduler: Scheduler, n: int | None = None, per_tick: int | None = None, **kwargs: Any) -> None:
        from distributed.dashboard.components.task_stream import TaskStream

        if n is None:
            n = int(dask.config.get("distributed.scheduler.dashboard.status.task-stream-length"))
        self.scheduler = scheduler
        self.n = max(n, 1)
        self.per_tick = max(1, min(self.n, PER_TICK) if per_tick is None else per_tick)
        self.plugin: TaskStreamPlugin | None = None
        self.index = 0
        self.bars = self._new_bars()
        self.stream = TaskStream(columns=LIVE_COLUMNS, **kwargs)
        self.source = self.stream.source
        self.root: Model = self.stream.root
        self.update()

    def _threads(self, address: str) -> int:
        ws = self.scheduler.workers.get(address)
        return ws.nthreads if ws is not None else 1

    def _prefix(self, key: Any) -> str:
        ts = self.scheduler.tasks.get(key)
        return ts.prefix.name if ts is not None else key_split(key)

    def _new_bars(self) -> StreamBars:
        from distributed.diagnostics.task_stream import StreamBars

        return StreamBars(self._threads, self._prefix)

    def update(self) -> None:
        """Stream the bars of the tasks finished since the last update, if any."""
        from distributed.diagnostics.task_stream import TaskStreamPlugin

        plugin = self.scheduler.plugins.get(TaskStreamPlugin.name)
        if not isinstance(plugin, TaskStreamPlugin):
            return
        if plugin is not self.plugin:  # first seen, or replaced: start over from its last n records
            if self.plugin is not None:
                self.bars = self._new_bars()
                self.source.data = {k: [] for k in self.source.data}
            self.plugin = plugin
            self.index = max(plugin.index - self.per_tick, 0)
        # More new records than a tick draws (or than the window holds): skip the older ones.
        self.index = max(self.index, plugin.index - self.per_tick)
        self.index, new = plugin.since(self.index)
        if not new:
            return
        bars = self.bars.add(new)
        if bars["key"]:
            self.stream.stream(bars, rollover=self.n)
