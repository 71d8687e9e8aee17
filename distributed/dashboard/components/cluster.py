"""Dashboard components of the cluster as a whole and of its workers' load: what ``/status`` and ``/workers`` show
beside the progress bars and the task stream.

* :class:`ClusterMemory`: the bytes stored over all workers (managed,
  unmanaged, spilled), one bar;
* :class:`StateTotals`: the tasks in each state, a line of counts over the
  progress bars;
* :class:`WorkerCPU`, :class:`Occupancy`, :class:`TransferByWorker`: one bar
  per worker of its CPU use, its expected work, its data transfer rate;
  :class:`WorkerLoad` puts them in tabs beside the tasks processing;
* :class:`ComputeTimePerPrefix`: the run time spent per task prefix.

As in :mod:`distributed.dashboard.components.scheduler`, ``update()`` reads
the scheduler's records directly, costs O(workers) or O(task groups) (never
O(tasks)) and sends only what changed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from bokeh.models import ColumnDataSource, DataRange1d, FactorRange, HoverTool, Model, NumeralTickFormatter, Range1d
from bokeh.models.widgets.markups import Div
from bokeh.plotting import figure
from bokeh.transform import dodge

from distributed.dashboard.components.scheduler import ProcessingByWorker
from distributed.dashboard.components.shared import (
    STATE_COLORS,
    CategoryBars,
    Data,
    bytes_bar_axes,
    set_if_changed,
    worker_label,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from distributed.scheduler import Scheduler
    from distributed.scheduler.records import WorkerState

__all__ = [
    "ClusterMemory",
    "ComputeTimePerPrefix",
    "Occupancy",
    "StateTotals",
    "TransferByWorker",
    "WorkerCPU",
    "WorkerHistogram",
    "WorkerLoad",
    "cluster_memory",
    "state_totals",
]

#: Colours of memory kinds, shared with the per-worker memory bars.
MEMORY_COLORS: dict[str, str] = {"managed": "#1f77b4", "unmanaged": "#9ecae1", "spilled": "#969696"}


def cluster_memory(scheduler: Scheduler) -> dict[str, int]:
    """The workers' memory added up, as of their last heartbeats: managed, unmanaged, spilled, process, limit."""
    out = dict.fromkeys(("managed", "unmanaged", "spilled", "process", "limit"), 0)
    for ws in scheduler.workers.values():
        mem = ws.memory
        out["managed"] += mem.managed
        out["unmanaged"] += mem.unmanaged
        out["spilled"] += mem.spilled
        out["process"] += mem.process
        out["limit"] += ws.memory_limit
    return out


def _bytes(n: float) -> str:
    for unit in ("B", "kiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class ClusterMemory:
    """One bar of the bytes stored over all workers: managed (results in memory), unmanaged, spilled to disk.

    The title says the totals and the workers' memory limits added up.
    """

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        self.scheduler = scheduler
        self.source = ColumnDataSource(self._data())
        fig = figure(
            title=self._title(),
            name="cluster_memory",
            x_range=DataRange1d(start=0),
            y_range=FactorRange(factors=["memory"]),
            height=110,
            toolbar_location=None,
            tools="",
            **kwargs,
        )
        left: str | int = 0
        for kind in ("managed", "unmanaged", "spilled"):
            right = "x_" + kind
            fig.hbar(y="row", left=left, right=right, height=0.8, color=MEMORY_COLORS[kind], source=self.source)
            left = right
        bytes_bar_axes(
            fig,
            [
                ("managed", "@managed{0.00 b}"),
                ("unmanaged", "@unmanaged{0.00 b}"),
                ("spilled", "@spilled{0.00 b}"),
                ("limit", "@limit{0.00 b}"),
            ],
        )
        self.figure = fig
        self.root: Model = fig

    def _data(self) -> Data:
        self.totals = t = cluster_memory(self.scheduler)
        return {
            "row": ["memory"],
            "managed": [t["managed"]],
            "unmanaged": [t["unmanaged"]],
            "spilled": [t["spilled"]],
            "limit": [t["limit"]],
            "x_managed": [t["managed"]],
            "x_unmanaged": [t["managed"] + t["unmanaged"]],
            "x_spilled": [t["managed"] + t["unmanaged"] + t["spilled"]],
        }

    def _title(self) -> str:
        t = self.totals
        stored = t["managed"] + t["unmanaged"]
        limit = f" of {_bytes(t['limit'])}" if t["limit"] else ""
        return f"Bytes stored: {_bytes(stored)}{limit} (spilled: {_bytes(t['spilled'])})"

    def update(self) -> None:
        """Re-add the workers' memory."""
        if set_if_changed(self.source, self._data(), index="row"):
            title = self._title()
            if self.figure.title.text != title:  # type: ignore[union-attr]  # a figure's title is a Title
                self.figure.title.text = title  # type: ignore[union-attr]


#: The states :class:`StateTotals` counts, with their labels.
TOTALS: tuple[tuple[str, str], ...] = (
    ("waiting", "waiting"),
    ("queued", "queued"),
    ("processing", "processing"),
    ("memory", "in memory"),
    ("erred", "erred"),
)


def state_totals(scheduler: Scheduler) -> dict[str, int]:
    """The tasks not forgotten in each state, added up from the task groups' counts (O(groups)).

    ``waiting`` includes tasks with no worker to run on (``no-worker``).
    """
    totals = dict.fromkeys(("waiting", "queued", "processing", "memory", "erred", "released"), 0)
    for prefix in scheduler.task_prefixes.values():
        for group in prefix.groups.values():
            states = group.states
            totals["waiting"] += states["waiting"] + states["no-worker"]
            totals["queued"] += states["queued"]
            totals["processing"] += states["processing"]
            totals["memory"] += states["memory"]
            totals["erred"] += states["erred"]
            totals["released"] += states["released"]
    return totals


class StateTotals:
    """A line of counts over the progress bars: tasks waiting, queued, processing, in memory, erred."""

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        self.scheduler = scheduler
        self.root: Model = Div(text=self._text(), name="state_totals", **kwargs)

    def _text(self) -> str:
        self.totals = totals = state_totals(self.scheduler)
        items = "".join(
            f'<span style="margin-right:1.5em"><span style="display:inline-block;width:0.8em;height:0.8em;'
            f'background:{STATE_COLORS[state]};margin-right:0.3em"></span>{label}: <b>{totals[state]}</b></span>'
            for state, label in TOTALS
        )
        return f'<div class="dask-totals">{items}</div>'

    def update(self) -> None:
        """Recount."""
        text = self._text()
        div: Any = self.root
        if div.text != text:
            div.text = text


class PerWorkerBars(CategoryBars):
    """A horizontal bar per worker of what :meth:`row` reads from its :class:`WorkerState`.

    Subclasses say the figure's title, name, columns and bars; rows are
    patched cell by cell, keyed by address, so a tick sends only what changed.
    """

    title = ""
    name = ""
    #: Columns :meth:`row` fills besides ``worker`` and ``address``.
    columns: tuple[str, ...] = ()
    #: Hover lines: (label, bokeh field format).
    tooltips: tuple[tuple[str, str], ...] = ()

    def __init__(self, scheduler: Scheduler, height: int = 200, **kwargs: Any) -> None:
        self.scheduler = scheduler
        super().__init__(
            self._data(), "worker", self.title, self.name, height, index="address", x_range=self._x_range(), **kwargs
        )
        self.draw(self.figure)
        self.figure.add_tools(HoverTool(tooltips=[("worker", "@address"), *self.tooltips]))

    def _x_range(self) -> Range1d | DataRange1d:
        return DataRange1d(start=0)

    def draw(self, fig: figure) -> None:
        """Add the bars to ``fig``."""
        raise NotImplementedError

    def row(self, ws: WorkerState) -> tuple[Any, ...]:
        """The values of :attr:`columns` for one worker."""
        raise NotImplementedError

    def _data(self) -> Data:
        data: Data = {"worker": [], "address": [], **{c: [] for c in self.columns}}
        for addr, ws in self.scheduler.workers.items():
            data["worker"].append(worker_label(addr, ws.name))
            data["address"].append(addr)
            for column, value in zip(self.columns, self.row(ws), strict=True):
                data[column].append(value)
        return data

    def update(self) -> None:
        """Re-read the workers."""
        self.refresh(self._data())


class WorkerCPU(PerWorkerBars):
    """Each worker process's CPU use, in percent of one core (as its last heartbeat said), beside its threads."""

    title = "CPU use (%)"
    name = "worker_cpu"
    columns = ("cpu", "nthreads", "cpu_per_thread")
    tooltips = (("CPU", "@cpu{0.0} %"), ("threads", "@nthreads"), ("per thread", "@cpu_per_thread{0.0} %"))

    def _x_range(self) -> Range1d | DataRange1d:
        # A fixed scale, so that an idle worker's bar looks idle; widened by whole cores when a process uses more.
        return Range1d(start=0, end=100)

    def draw(self, fig: figure) -> None:
        fig.hbar(y="worker", left=0, right="cpu", height=0.8, color="#9467bd", source=self.source)

    def row(self, ws: WorkerState) -> tuple[Any, ...]:
        cpu = round(float(ws.metrics.get("cpu", 0) or 0), 1)
        return cpu, ws.nthreads, round(cpu / max(ws.nthreads, 1), 1)

    def update(self) -> None:
        """Re-read the workers; widen the scale to the busiest worker's cores."""
        super().update()
        x_range: Any = self.figure.x_range
        end = 100 * max(1, math.ceil(max(self.source.data["cpu"], default=0) / 100))
        if x_range.end != end:
            x_range.end = end


class Occupancy(PerWorkerBars):
    """Each worker's occupancy: the expected run time (seconds) of the tasks assigned to it."""

    title = "Occupancy (s)"
    name = "occupancy"
    columns = ("occupancy", "processing", "per_thread")
    tooltips = (("occupancy", "@occupancy{0.000} s"), ("tasks", "@processing"), ("per thread", "@per_thread{0.000} s"))

    def draw(self, fig: figure) -> None:
        fig.hbar(y="worker", left=0, right="occupancy", height=0.8, color="#ff7f0e", source=self.source)

    def row(self, ws: WorkerState) -> tuple[Any, ...]:
        occupancy = round(ws.occupancy, 3)
        return occupancy, len(ws.processing), round(occupancy / max(ws.nthreads, 1), 3)


class TransferByWorker(PerWorkerBars):
    """Each worker's data transfer rate, bytes per second received from and sent to other workers.

    Rates come from the transfer totals the worker's heartbeats report, over
    :attr:`WINDOW` seconds or more, so they change every few heartbeats, not
    at every tick.
    """

    #: Seconds the rates are averaged over (at least).
    WINDOW = 2.0

    title = "Data transfer (bytes/s)"
    name = "workers_transfer_bytes"
    columns = ("incoming", "outgoing")
    tooltips = (("received", "@incoming{0.00 b}/s"), ("sent", "@outgoing{0.00 b}/s"))

    def __init__(self, scheduler: Scheduler, height: int = 200, **kwargs: Any) -> None:
        #: Per worker address: (heartbeat time, incoming total, outgoing total, incoming rate, outgoing rate).
        self._seen: dict[str, tuple[float, int, int, float, float]] = {}
        super().__init__(scheduler, height=height, **kwargs)

    def draw(self, fig: figure) -> None:
        # Two thin bars per worker, side by side, so that both rates read against the one worker label.
        for column, offset, color, label in (
            ("incoming", -0.2, "#d62728", "received"),
            ("outgoing", 0.2, "#17becf", "sent"),
        ):
            fig.hbar(
                y=dodge("worker", offset, range=self.y_range),
                left=0,
                right=column,
                height=0.4,
                color=color,
                source=self.source,
                legend_label=label,
            )
        fig.xaxis.formatter = NumeralTickFormatter(format="0.0 b")
        fig.legend.location = "bottom_right"
        fig.legend.background_fill_alpha = 0.6

    def row(self, ws: WorkerState) -> tuple[Any, ...]:
        transfer = ws.metrics.get("transfer") or {}
        incoming = int(transfer.get("incoming_bytes_total", 0) or 0)
        outgoing = int(transfer.get("outgoing_bytes_total", 0) or 0)
        seen = self._seen.get(ws.address)
        if seen is None:
            self._seen[ws.address] = (ws.last_seen, incoming, outgoing, 0.0, 0.0)
            return 0.0, 0.0
        when, last_in, last_out, rate_in, rate_out = seen
        # Over a window of several heartbeats: between two close ones the totals often have not moved yet.
        if ws.last_seen >= when + self.WINDOW:
            elapsed = ws.last_seen - when
            rate_in = round(max(incoming - last_in, 0) / elapsed, 0)
            rate_out = round(max(outgoing - last_out, 0) / elapsed, 0)
            self._seen[ws.address] = (ws.last_seen, incoming, outgoing, rate_in, rate_out)
        return rate_in, rate_out

    def update(self) -> None:
        """Re-read the workers' transfer totals; forget workers that left."""
        if len(self._seen) > len(self.scheduler.workers):
            for address in [a for a in self._seen if a not in self.scheduler.workers]:
                del self._seen[address]
        super().update()


class WorkerLoad:
    """Tabs of per-worker load: tasks processing, CPU, occupancy, data transfer.

    A tick updates the tab shown only: the others would each send the
    browser a message that changes nothing it shows.  When the viewer picks
    another tab, that tab is brought up to date at once (the change of
    ``active`` reaches the server as a document change), so it never shows
    data older than the switch.
    """

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        from bokeh.models import TabPanel, Tabs

        self.processing = ProcessingByWorker(scheduler, **kwargs)
        self.cpu = WorkerCPU(scheduler, **kwargs)
        self.occupancy = Occupancy(scheduler, **kwargs)
        self.transfer = TransferByWorker(scheduler, **kwargs)
        tabs: list[tuple[str, CategoryBars]] = [
            ("Processing", self.processing),
            ("CPU", self.cpu),
            ("Occupancy", self.occupancy),
            ("Data transfer", self.transfer),
        ]
        self.parts = [part for _, part in tabs]
        self.tabs = Tabs(
            tabs=[TabPanel(child=part.figure, title=title) for title, part in tabs],
            name="worker_load",
            **kwargs,
        )
        self.tabs.on_change("active", self._switched)
        self.root: Model = self.tabs

    @property
    def shown(self) -> CategoryBars:
        """The part of the tab shown."""
        return self.parts[min(max(self.tabs.active, 0), len(self.parts) - 1)]

    def _switched(self, attr: str, old: int, new: int) -> None:
        self.shown.update()

    def update(self) -> None:
        """Update the tab shown."""
        self.shown.update()


class WorkerHistogram:
    """How many workers have how much of something (bytes stored, tasks processing): a histogram.

    For pages that would otherwise draw a bar per worker: past a hundred
    workers the bars are too thin to read, and a tick reads and sends a
    row per worker (10,000 workers: a fifth of a second to open ``/status``).

    Parameters
    ----------
    scheduler
        Whose workers.
    title, name
        The figure's.
    value
        What a worker has: its bytes stored, its tasks processing.
    bytes_axis
        Whether ``value`` is in bytes (the x axis says so).
    bins
        Into how many equal bins from 0 to the largest value the workers go.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        title: str,
        name: str,
        value: Callable[[WorkerState], float],
        *,
        bytes_axis: bool = False,
        bins: int = 20,
        height: int = 200,
        **kwargs: Any,
    ) -> None:
        self.scheduler = scheduler
        self.value = value
        self.bins = bins
        self.source = ColumnDataSource(self._data())
        self.figure = figure(
            title=title,
            name=name,
            height=height,
            toolbar_location=None,
            tools="",
            y_range=DataRange1d(start=0),
            **kwargs,
        )
        self.figure.quad(
            left="left", right="right", bottom=0, top="workers", color="#1f77b4", alpha=0.8, source=self.source
        )
        self.figure.yaxis.axis_label = "workers"
        if bytes_axis:
            self.figure.xaxis.formatter = NumeralTickFormatter(format="0.0 b")
        self.figure.add_tools(HoverTool(tooltips=[("from", "@left"), ("to", "@right"), ("workers", "@workers")]))
        self.root: Model = self.figure

    def _data(self) -> Data:
        values = [self.value(ws) for ws in self.scheduler.workers.values()]
        top = max(values, default=0.0)
        width = top / self.bins if top > 0 else 1.0
        counts = [0] * self.bins
        for v in values:
            counts[min(int(v / width), self.bins - 1)] += 1
        return {
            "left": [i * width for i in range(self.bins)],
            "right": [(i + 1) * width for i in range(self.bins)],
            "workers": counts,
        }

    def update(self) -> None:
        """Re-count the workers."""
        set_if_changed(self.source, self._data())


class ComputeTimePerPrefix(CategoryBars):
    """The run time spent per task prefix, finished tasks of forgotten groups included (a bar each)."""

    def __init__(self, scheduler: Scheduler, **kwargs: Any) -> None:
        self.scheduler = scheduler
        data = self._data()
        x_range = Range1d(start=0, end=max([1.0, *data["time"]]) * 1.05)
        super().__init__(
            data, "name", "Compute time per task prefix", "compute_time_per_key", 400, x_range=x_range, **kwargs
        )
        fig = self.figure
        fig.hbar(y="name", left=0, right="time", height=0.8, color="color", source=self.source)
        fig.xaxis.axis_label = "seconds"
        fig.add_tools(
            HoverTool(tooltips=[("prefix", "@name"), ("time", "@time{0.000} s"), ("bytes", "@nbytes{0.0 b}")])
        )

    def _data(self) -> Data:
        from distributed.diagnostics.task_stream import color_of

        rows = []
        for name, prefix in self.scheduler.task_prefixes.items():
            duration, nbytes = prefix.totals()
            if duration > 0:
                rows.append((name, round(duration, 3), nbytes))
        rows.sort(key=lambda r: r[1])
        return {
            "name": [r[0] for r in rows],
            "time": [r[1] for r in rows],
            "nbytes": [r[2] for r in rows],
            "color": [color_of(r[0]) for r in rows],
        }

    def update(self) -> None:
        """Re-add the prefixes' run times."""
        data = self._data()
        if self.refresh(data):
            x_range: Any = self.figure.x_range
            end = max([1.0, *data["time"]]) * 1.05
            if x_range.end < end or x_range.end > 2 * end:  # rescale in steps, not at every tick
                x_range.end = end
