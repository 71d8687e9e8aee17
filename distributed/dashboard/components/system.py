"""Dashboard components of resource use over time: the scheduler's process, and the workers added up.

* :class:`SchedulerSystem`: the scheduler process's CPU, memory, the host's
  network bandwidth and the process's open file descriptors, as sampled by
  its :class:`~distributed.system_monitor.SystemMonitor` (``scheduler.monitor``);
* :class:`WorkersTimeseries`: the workers' mean CPU use and total memory,
  sampled by the page itself at each tick.

A tick streams only the samples taken since the last one (O(new samples));
the browser keeps the last ``distributed.admin.system-monitor.log-length``.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any

import dask.config
from bokeh.models import ColumnDataSource, DataRange1d, HoverTool, Model, NumeralTickFormatter
from bokeh.plotting import figure

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler
    from distributed.system_monitor import SystemMonitor

__all__ = ["SchedulerSystem", "WorkersTimeseries"]

#: Samples shown when ``distributed.admin.system-monitor.log-length`` keeps them all.
DEFAULT_SHOWN = 7200


def _shown() -> int:
    configured = dask.config.get("distributed.admin.system-monitor.log-length")
    return DEFAULT_SHOWN if configured is None else max(int(configured), 1)


def _time_figure(title: str, name: str, height: int, **kwargs: Any) -> figure:
    fig = figure(
        title=title,
        name=name,
        x_axis_type="datetime",
        y_range=DataRange1d(start=0),
        height=height,
        tools="xpan,xwheel_zoom,box_zoom,reset",
        toolbar_location="above",
        **kwargs,
    )
    return fig


class SchedulerSystem:
    """The scheduler process over time: CPU (%), memory, network bandwidth, open file descriptors.

    Reads ``scheduler.monitor`` (sampled every
    ``distributed.admin.system-monitor.interval`` whether or not a page is
    open): at each tick, only the samples it took since the last tick.
    """

    #: Columns of the source: the monitor's quantity for each (``time`` in ms for the datetime axis).
    QUANTITIES: tuple[tuple[str, str], ...] = (
        ("cpu", "cpu"),
        ("memory", "memory"),
        ("read_bps", "host_net_io.read_bps"),
        ("write_bps", "host_net_io.write_bps"),
        ("num_fds", "num_fds"),
    )

    def __init__(self, scheduler: Scheduler, height: int = 200, **kwargs: Any) -> None:
        from bokeh.layouts import column

        self.monitor: SystemMonitor = scheduler.monitor
        self.shown = _shown()
        self.count = max(self.monitor.count - self.shown, 0)
        self.source = ColumnDataSource({"time": [], **{column: [] for column, _ in self.QUANTITIES}})
        self.cpu = _time_figure("Scheduler CPU (%)", "system_cpu", height, **kwargs)
        self.cpu.line(x="time", y="cpu", color="#9467bd", line_width=2, source=self.source)
        self.memory = _time_figure("Scheduler memory", "system_memory", height, **kwargs)
        self.memory.line(x="time", y="memory", color="#1f77b4", line_width=2, source=self.source)
        self.memory.yaxis.formatter = NumeralTickFormatter(format="0.0 b")
        self.bandwidth = _time_figure("Host network (bytes/s)", "system_bandwidth", height, **kwargs)
        self.bandwidth.line(
            x="time", y="read_bps", color="#d62728", line_width=2, source=self.source, legend_label="received"
        )
        self.bandwidth.line(
            x="time", y="write_bps", color="#17becf", line_width=2, source=self.source, legend_label="sent"
        )
        self.bandwidth.yaxis.formatter = NumeralTickFormatter(format="0.0 b")
        self.bandwidth.legend.location = "top_left"
        self.fds = _time_figure("Scheduler open file descriptors", "system_fds", height, **kwargs)
        self.fds.line(x="time", y="num_fds", color="#2ca02c", line_width=2, source=self.source)
        for fig, fields in (
            (self.cpu, [("CPU", "@cpu{0.0} %")]),
            (self.memory, [("memory", "@memory{0.00 b}")]),
            (self.bandwidth, [("received", "@read_bps{0.00 b}/s"), ("sent", "@write_bps{0.00 b}/s")]),
            (self.fds, [("file descriptors", "@num_fds")]),
        ):
            fig.add_tools(HoverTool(tooltips=[("time", "@time{%H:%M:%S}"), *fields], formatters={"@time": "datetime"}))
        self.figures = (self.cpu, self.memory, self.bandwidth, self.fds)
        self.root: Model = column(*self.figures, sizing_mode=kwargs.get("sizing_mode", "stretch_width"))
        self.update()

    def new_samples(self) -> dict[str, Any]:
        """The monitor's samples taken since the last call (at most the shown window), as the source's columns."""
        monitor = self.monitor
        wanted = min(monitor.count - self.count, self.shown)
        self.count = monitor.count
        if wanted <= 0:
            return {}
        out: dict[str, Any] = {}
        for column, quantity in (("time", "time"), *self.QUANTITIES):
            values = monitor.quantities.get(quantity)
            if values is None:  # no such quantity here (file descriptors on Windows)
                out[column] = [0.0] * wanted
                continue
            # From the right end: O(new samples), however long the monitor's log.
            newest = list(itertools.islice(reversed(values), min(wanted, len(values))))
            newest.reverse()
            out[column] = [0.0] * (wanted - len(newest)) + newest
        out["time"] = [t * 1000 for t in out["time"]]
        # The first samples may predate the log's start (zeros above): keep only those with a time.
        keep = [i for i, t in enumerate(out["time"]) if t > 0]
        if len(keep) < wanted:
            out = {k: [v[i] for i in keep] for k, v in out.items()}
        return out

    def update(self) -> None:
        """Stream the samples taken since the last update."""
        new = self.new_samples()
        if new and new["time"]:
            self.source.stream(new, rollover=self.shown)


class WorkersTimeseries:
    """The workers over time, sampled by this page at each tick: mean CPU use (%) and total memory.

    A point is added only when some worker sent a heartbeat since the last
    one, so an idle page of an idle cluster sends nothing. The page keeps
    the last ``distributed.admin.system-monitor.log-length`` points.
    """

    def __init__(self, scheduler: Scheduler, height: int = 250, **kwargs: Any) -> None:
        self.scheduler = scheduler
        self.shown = _shown()
        self.last_seen = 0.0
        self.source = ColumnDataSource({"time": [], "cpu": [], "memory": [], "limit": []})
        self.cpu = _time_figure("Workers: mean CPU use (%)", "workers_cpu_timeseries", height, **kwargs)
        self.cpu.line(x="time", y="cpu", color="#9467bd", line_width=2, source=self.source)
        self.cpu.add_tools(
            HoverTool(tooltips=[("time", "@time{%H:%M:%S}"), ("CPU", "@cpu{0.0} %")], formatters={"@time": "datetime"})
        )
        self.memory = _time_figure("Workers: total memory", "workers_memory_timeseries", height, **kwargs)
        self.memory.line(x="time", y="memory", color="#1f77b4", line_width=2, source=self.source)
        self.memory.yaxis.formatter = NumeralTickFormatter(format="0.0 b")
        self.memory.add_tools(
            HoverTool(
                tooltips=[("time", "@time{%H:%M:%S}"), ("memory", "@memory{0.00 b}"), ("limit", "@limit{0.00 b}")],
                formatters={"@time": "datetime"},
            )
        )
        self.update()

    def update(self) -> None:
        """Add a point if a worker sent a heartbeat since the last one."""
        workers = self.scheduler.workers.values()
        newest = max((ws.last_seen for ws in workers), default=0.0)
        if newest <= self.last_seen:
            return
        self.last_seen = newest
        cpu = [float(ws.metrics.get("cpu", 0) or 0) for ws in workers]
        memory = sum(int(ws.metrics.get("memory", 0) or 0) for ws in workers)
        limit = sum(ws.memory_limit for ws in workers)
        point = {
            "time": [time.time() * 1000],
            "cpu": [round(sum(cpu) / len(cpu), 1) if cpu else 0.0],
            "memory": [memory],
            "limit": [limit],
        }
        self.source.stream(point, rollover=self.shown)
