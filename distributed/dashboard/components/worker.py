"""Dashboard components that read one worker's state: its tasks, memory, transfers, system and profile.

Each component owns a bokeh model (``root``) and an ``update()`` that a
page's periodic callback runs on the worker's event loop, between the
worker's own callbacks, so it reads the worker's attributes directly.

What an update costs is what it shows, never the number of tasks the worker
knows: task counts by state come from :class:`TransitionTally`, which reads
only the transitions made since its last refresh from the state machine's
transition log (one tally per dashboard, shared by every open page); time
series stream one new point per tick, or the system monitor's new samples
only; the profile's icicle is rebuilt only when asked (its button, or a
selection in its timeline). Per page, what is kept is bounded (rolled-over
series), and goes with the page's bokeh session.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter, deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, DataRange1d, FactorRange, HoverTool, Model, NumeralTickFormatter, Range1d
from bokeh.models.annotations import Span, Title
from bokeh.models.widgets import Button, Select
from bokeh.models.widgets.markups import Div
from bokeh.plotting import figure
from dask.utils import format_bytes, format_time

from distributed.core import Status
from distributed.dashboard.components.profile import ProfileFigure
from distributed.dashboard.components.shared import CategoryBars, Data, bar_figure, bytes_bar_axes, set_if_changed
from distributed.spill import SpillBuffer

if TYPE_CHECKING:
    from distributed.protocol.messages import Key
    from distributed.worker import Worker
    from distributed.worker.state_machine import WorkerStateMachine

__all__ = [
    "ExecutingHistory",
    "MemoryBar",
    "ProfilePanel",
    "SystemHistory",
    "TaskDurations",
    "TaskStateBars",
    "TickHistory",
    "TransferHistory",
    "TransferSummary",
    "TransitionCounts",
    "TransitionTally",
    "duration_histogram",
    "memory_parts",
    "transfer_state",
]

#: ``sizing_mode`` values bokeh accepts.
SizingMode = Literal["fixed", "stretch_width", "stretch_height", "stretch_both", "scale_width", "scale_height"]

#: Tasks the status page counts, in the order shown, with their colours.
STATE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("executing", "executing", "#2ca02c"),
    ("long-running", "long-running (seceded)", "#98df8a"),
    ("ready", "ready", "#ff7f0e"),
    ("waiting", "waiting for inputs", "#c7c7c7"),
    ("fetch", "to fetch", "#9467bd"),
    ("flight", "in flight", "#d62728"),
    ("memory", "in memory", "#1f77b4"),
    ("error", "erred", "#000000"),
    ("cancelled", "cancelled", "#8c564b"),
)

#: Most transition kinds drawn on the counters page (the busiest ones).
MAX_KINDS = 20

#: States in which a task's code runs on one of the worker's threads.
_RUNNING = frozenset({"executing", "long-running", "cancelled"})


def _now_ms() -> float:
    return time.time() * 1000


def _following(seconds: float) -> DataRange1d:
    """A time axis' range that shows the last ``seconds`` and moves on as points are added."""
    return DataRange1d(follow="end", follow_interval=seconds * 1000, range_padding=0)


def _history_figure(title: str, name: str, height: int, x_range: DataRange1d | None, sizing_mode: SizingMode) -> figure:
    """A figure of values over time, from 0 up; the last two minutes unless ``x_range`` (shared with another)."""
    return figure(
        title=title,
        name=name,
        x_axis_type="datetime",
        x_range=_following(120) if x_range is None else x_range,
        y_range=DataRange1d(start=0),
        height=height,
        tools="xpan,xwheel_zoom,reset",
        sizing_mode=sizing_mode,
    )


class TransitionTally:
    """The worker's tasks counted by state, transitions counted by kind, and recent run times.

    Kept up to date from the worker state machine's transition log
    (``(key, start, finish, stimulus_id, time)`` for every change of state):
    :meth:`refresh` reads only the entries added since its last call, so it
    costs O(transitions since), whatever the number of tasks.  The tasks are
    counted in full only on the first refresh, when the worker started a new
    state machine (it does so as it reconnects), or when more transitions
    happened between two refreshes than the log keeps.

    One tally serves every page of a worker's dashboard; it is refreshed only
    while a page is open.

    Parameters
    ----------
    worker
        The worker whose state machine is read.
    window
        Seconds over which :meth:`recent_kinds` counts transitions.
    durations
        How many of the latest run times :attr:`durations` keeps.
    """

    def __init__(self, worker: Worker, window: float = 60.0, durations: int = 1000) -> None:
        self.worker = worker
        self.window = window
        #: Tasks by state (``released`` is not counted: tasks are made in it without a transition).
        self.counts: Counter[str] = Counter()
        #: Seconds from starting to run to finishing (in memory or erred), newest last.
        self.durations: deque[float] = deque(maxlen=durations)
        #: Run times recorded so far (it only grows: pages compare it to see whether to redraw).
        self.durations_seen = 0
        self.machine: WorkerStateMachine | None = None
        self.read_up_to = 0
        # Per whole second: transitions by kind, the last ``window`` seconds of them.
        self.seconds: deque[tuple[int, Counter[str]]] = deque()
        # When each running task started (tasks enter on ready -> executing and leave as they finish).
        self.started: dict[Key, float] = {}

    def refresh(self) -> None:
        """Read the transitions made since the last refresh."""
        machine = self.worker.state
        if machine is None:
            return
        new = machine.transition_counter - self.read_up_to
        if machine is not self.machine or new > len(machine.log) or new < 0:
            self.recount(machine)
            return
        if new == 0:
            return
        # From the newest end: O(new), however long the log is.
        entries = list(itertools.islice(reversed(machine.log), new))
        entries.reverse()
        self.read_up_to = machine.transition_counter
        counts = self.counts
        for key, start, finish, _, when in entries:
            if start != "released":
                counts[start] -= 1
            if finish not in ("released", "forgotten"):
                counts[finish] += 1
            self._count_kind(f"{start} → {finish}", when)
            if finish == "executing" and start == "ready":
                self.started[key] = when
            elif start in _RUNNING and finish not in _RUNNING:
                began = self.started.pop(key, None)
                if began is not None and finish in ("memory", "error"):
                    self.durations.append(max(when - began, 0.0))
                    self.durations_seen += 1

    def recount(self, machine: WorkerStateMachine) -> None:
        """Count the tasks of ``machine`` by state, in full (O(tasks)); transitions are read from here on."""
        self.machine = machine
        self.read_up_to = machine.transition_counter
        self.counts = Counter(ts.state for ts in machine.tasks.values() if ts.state != "released")
        # Tasks already running started at a time the log may no longer say: their run times are not counted.
        self.started = {}

    def _count_kind(self, kind: str, when: float) -> None:
        second = int(when)
        seconds = self.seconds
        if not seconds or seconds[-1][0] < second:
            seconds.append((second, Counter()))
            while seconds and seconds[0][0] <= second - self.window:
                seconds.popleft()
        seconds[-1][1][kind] += 1

    def recent_kinds(self, now: float | None = None) -> Counter[str]:
        """Transitions by kind (``"executing → memory"``) over the last ``window`` seconds."""
        cutoff = (time.time() if now is None else now) - self.window
        total: Counter[str] = Counter()
        for second, kinds in self.seconds:
            if second > cutoff:
                total.update(kinds)
        return total


class TaskStateBars:
    """The worker's tasks by state: executing (of its threads), ready, waiting, fetching, in flight, in memory."""

    def __init__(self, worker: Worker, tally: TransitionTally, sizing_mode: SizingMode = "stretch_width") -> None:
        self.worker = worker
        self.tally = tally
        labels = [label for _, label, _ in STATE_ROWS]
        self.source = ColumnDataSource(self._data())
        fig = bar_figure(
            "Tasks on this worker", "worker_tasks", FactorRange(factors=labels[::-1]), 260, sizing_mode=sizing_mode
        )
        fig.hbar(y="label", left=0, right="count", height=0.8, color="color", source=self.source)
        fig.text(
            x="count",
            y="label",
            text="text",
            text_baseline="middle",
            x_offset=4,
            text_font_size="9pt",
            source=self.source,
        )
        fig.add_tools(HoverTool(tooltips=[("state", "@label"), ("tasks", "@count")]))
        self.root: Model = fig

    def _data(self) -> Data:
        self.tally.refresh()
        counts = self.tally.counts
        w = self.worker
        data: Data = {"label": [], "count": [], "color": [], "text": []}
        for state, label, color in STATE_ROWS:
            n = max(counts.get(state, 0), 0)
            data["label"].append(label)
            data["count"].append(n)
            data["color"].append(color)
            data["text"].append(f"{n} / {w.nthreads} threads" if state == "executing" else str(n))
        return data

    def update(self) -> None:
        """Re-read the counts (sent only when one changed)."""
        set_if_changed(self.source, self._data(), index="label")


def memory_parts(worker: Worker) -> dict[str, float]:
    """The worker's memory now: ``managed`` (results in memory), ``unmanaged``, ``spilled`` (on disk), ``limit``.

    ``process`` is the newest sample of the worker's system monitor (taken
    every ``distributed.admin.system-monitor.interval``), so reading it here
    makes no system call.
    """
    state = worker.state
    data = worker.data
    spilled = data.spilled if isinstance(data, SpillBuffer) else None
    held = state.nbytes_in_memory if state is not None else 0
    process = float(worker.monitor.recent().get("memory", 0.0))
    managed = float(max(held - (spilled.memory if spilled is not None else 0), 0))
    return {
        "process": process,
        "managed": managed,
        "unmanaged": max(process - managed, 0.0),
        "spilled": float(spilled.disk if spilled is not None else 0),
        "limit": float(worker.memory_limit or 0),
    }


class MemoryBar:
    """The worker's memory as one bar: managed, unmanaged, spilled to disk; a line at its memory limit.

    The managed part turns orange past the spill threshold and red while
    the worker is paused.
    """

    def __init__(self, worker: Worker, sizing_mode: SizingMode = "stretch_width") -> None:
        self.worker = worker
        self.source = ColumnDataSource(self._data())
        self.shown_end = self._extent()
        self.x_range = Range1d(start=0, end=self.shown_end)
        self.title = Title(text=self._title())
        fig = bar_figure(
            self.title, "worker_memory", FactorRange(factors=["memory"]), 130, self.x_range, sizing_mode=sizing_mode
        )
        fig.hbar(y="row", left=0, right="x_managed", height=0.7, color="color", source=self.source)
        fig.hbar(y="row", left="x_managed", right="x_unmanaged", height=0.7, color="#9ecae1", source=self.source)
        fig.hbar(y="row", left="x_unmanaged", right="x_spilled", height=0.7, color="#969696", source=self.source)
        self.figure = fig
        self.limit = Span(location=self._limit(), dimension="height", line_color="#d62728", line_dash="dashed")
        fig.add_layout(self.limit)
        bytes_bar_axes(
            fig,
            [
                ("managed", "@managed_text"),
                ("unmanaged", "@unmanaged_text"),
                ("spilled to disk", "@spilled_text"),
                ("limit", "@limit_text"),
            ],
        )
        self.root: Model = fig

    def _limit(self) -> float:
        return float(self.worker.memory_limit or 0)

    def _extent(self) -> float:
        data = self.source.data
        return max(self._limit(), float(data["x_spilled"][0]), 1.0) * 1.05

    def _data(self) -> Data:
        parts = memory_parts(self.worker)
        managed, unmanaged, spilled, limit = parts["managed"], parts["unmanaged"], parts["spilled"], parts["limit"]
        color = "#1f77b4"
        spill_fraction = self.worker.memory_monitor.spill_fraction
        if self.worker.status == Status.paused:
            color = "#d62728"
        elif limit and spill_fraction and managed + unmanaged > spill_fraction * limit:
            color = "#ff7f0e"
        return {
            "row": ["memory"],
            "x_managed": [managed],
            "x_unmanaged": [managed + unmanaged],
            "x_spilled": [managed + unmanaged + spilled],
            "color": [color],
            "managed_text": [format_bytes(int(managed))],
            "unmanaged_text": [format_bytes(int(unmanaged))],
            "spilled_text": [format_bytes(int(spilled))],
            "limit_text": [format_bytes(int(limit)) if limit else "none"],
        }

    def _title(self) -> str:
        data = self.source.data
        return (
            f"Memory: {format_bytes(int(data['x_unmanaged'][0]))} of {data['limit_text'][0]} "
            f"(managed {data['managed_text'][0]}, spilled to disk {data['spilled_text'][0]})"
        )

    def update(self) -> None:
        """Re-read the worker's memory."""
        if set_if_changed(self.source, self._data(), index="row"):
            end = self._extent()
            if not math.isclose(self.shown_end, end, rel_tol=0.02):
                self.x_range.end = self.shown_end = end
            title = self._title()
            if self.title.text != title:
                self.title.text = title


class ExecutingHistory:
    """Tasks executing and ready over time (one point per update, the last ``n`` kept)."""

    def __init__(
        self, worker: Worker, tally: TransitionTally, n: int = 1200, sizing_mode: SizingMode = "stretch_width"
    ) -> None:
        self.worker = worker
        self.tally = tally
        self.n = n
        self.source = ColumnDataSource({"time": [], "executing": [], "ready": []})
        #: The time axis' range (other time series of the page share it, to scroll together).
        self.x_range = _following(120)
        fig = _history_figure("Executing and ready over time", "executing_history", 180, self.x_range, sizing_mode)
        fig.line(x="time", y="executing", color="#2ca02c", line_width=2, legend_label="executing", source=self.source)
        fig.line(x="time", y="ready", color="#ff7f0e", line_width=2, legend_label="ready", source=self.source)
        fig.legend.location = "top_left"
        fig.add_tools(HoverTool(tooltips=[("executing", "@executing"), ("ready", "@ready")]))
        self.root: Model = fig
        self.update()

    def update(self) -> None:
        """Add the current counts."""
        self.tally.refresh()
        counts = self.tally.counts
        self.source.stream(
            {
                "time": [_now_ms()],
                "executing": [max(counts.get("executing", 0), 0) + max(counts.get("long-running", 0), 0)],
                "ready": [max(counts.get("ready", 0), 0)],
            },
            rollover=self.n,
        )


def transfer_state(worker: Worker) -> dict[str, float]:
    """What the worker is moving now: keys and bytes it fetches, peers it fetches from and serves, and totals."""
    state = worker.state
    peers = keys = in_bytes = 0
    if state is not None:
        flights = state.in_flight_workers
        peers = len(flights)
        keys = sum(len(batch) for batch in flights.values())  # O(keys in flight): what is shown
        in_bytes = sum(state.in_flight_bytes.values())
    return {
        "fetching_keys": float(keys),
        "fetching_bytes": float(in_bytes),
        "fetching_peers": float(peers),
        "serving_peers": float(worker.outgoing_to_peers),
        "received_total": float(worker.transfer_incoming_bytes_total),
        "sent_total": float(worker.transfer_outgoing_bytes_total),
        "fetches_total": float(worker.incoming_transfer_count),
        "served_total": float(worker.outgoing_transfer_count),
    }


class TransferSummary:
    """A line saying what the worker is fetching and serving now, and what it moved so far."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.div = Div(text=self._text(), name="transfer_summary")
        self.root: Model = self.div

    def _text(self) -> str:
        t = transfer_state(self.worker)
        return (
            f"<p><b>Fetching</b> {int(t['fetching_keys'])} keys ({format_bytes(int(t['fetching_bytes']))}) "
            f"from {int(t['fetching_peers'])} peers; <b>serving</b> {int(t['serving_peers'])} peers. "
            f"<b>So far</b> received {format_bytes(int(t['received_total']))} in {int(t['fetches_total'])} fetches, "
            f"sent {format_bytes(int(t['sent_total']))} in {int(t['served_total'])} replies.</p>"
        )

    def update(self) -> None:
        """Re-read the transfer counters."""
        text = self._text()
        if self.div.text != text:
            self.div.text = text


class TransferHistory:
    """Bytes per second received from and sent to other workers, over time (from the worker's byte totals).

    ``x_range`` shares a time axis with another plot.
    """

    def __init__(
        self,
        worker: Worker,
        n: int = 1200,
        sizing_mode: SizingMode = "stretch_width",
        x_range: DataRange1d | None = None,
    ) -> None:
        self.worker = worker
        self.n = n
        self.last = (time.monotonic(), worker.transfer_incoming_bytes_total, worker.transfer_outgoing_bytes_total)
        self.source = ColumnDataSource({"time": [], "incoming": [], "outgoing": [], "in_text": [], "out_text": []})
        fig = _history_figure("Transfers with other workers (bytes/s)", "transfer_history", 180, x_range, sizing_mode)
        fig.line(x="time", y="incoming", color="#d62728", line_width=2, legend_label="received", source=self.source)
        fig.line(x="time", y="outgoing", color="#1f77b4", line_width=2, legend_label="sent", source=self.source)
        fig.yaxis.formatter = NumeralTickFormatter(format="0.0 b")
        fig.legend.location = "top_left"
        fig.add_tools(HoverTool(tooltips=[("received", "@in_text/s"), ("sent", "@out_text/s")]))
        self.root: Model = fig

    def update(self) -> None:
        """Add the rates since the last update."""
        w = self.worker
        now = time.monotonic()
        then, received, sent = self.last
        elapsed = max(now - then, 1e-3)
        incoming = max(w.transfer_incoming_bytes_total - received, 0) / elapsed
        outgoing = max(w.transfer_outgoing_bytes_total - sent, 0) / elapsed
        self.last = (now, w.transfer_incoming_bytes_total, w.transfer_outgoing_bytes_total)
        self.source.stream(
            {
                "time": [_now_ms()],
                "incoming": [incoming],
                "outgoing": [outgoing],
                "in_text": [format_bytes(int(incoming))],
                "out_text": [format_bytes(int(outgoing))],
            },
            rollover=self.n,
        )


#: The system page's plots: (bokeh model name, title, [(monitor quantity, legend, colour)], tick format).
SYSTEM_PLOTS: tuple[tuple[str, str, tuple[tuple[str, str, str], ...], str], ...] = (
    ("system_cpu", "CPU (% of one core)", (("cpu", "cpu", "#1f77b4"),), "0"),
    ("system_memory", "Memory (RSS)", (("memory", "memory", "#2ca02c"),), "0.0 b"),
    (
        "system_network",
        "Host network (bytes/s)",
        (("host_net_io.read_bps", "read", "#d62728"), ("host_net_io.write_bps", "write", "#1f77b4")),
        "0.0 b",
    ),
    (
        "system_disk",
        "Host disk (bytes/s)",
        (("host_disk_io.read_bps", "read", "#d62728"), ("host_disk_io.write_bps", "write", "#1f77b4")),
        "0.0 b",
    ),
    ("system_fds", "Open file descriptors", (("num_fds", "file descriptors", "#9467bd"),), "0"),
    ("system_gil", "GIL contention", (("gil_contention", "contention", "#8c564b"),), "0.00"),
)


class SystemHistory:
    """The worker process's CPU, memory and open files, and its host's network and disk, over time.

    Drawn from the worker's system monitor (``worker.monitor``): each update
    streams only the samples taken since the last one.  Quantities the
    monitor does not sample (disk without ``distributed.admin.system-monitor.disk``,
    GIL contention without ``gilknocker``) have no plot.
    """

    def __init__(self, worker: Worker, sizing_mode: SizingMode = "stretch_width") -> None:
        self.worker = worker
        monitor = worker.monitor
        self.quantities = [q for q in monitor.quantities if q != "time"]
        self.rollover = monitor.maxlen or 10_000
        # Start from the samples kept (at most ``rollover``): the history that is there to show.
        kept = len(monitor.quantities["time"])
        self.seen = monitor.count - kept
        self.source = ColumnDataSource({"time": [], **{q: [] for q in self.quantities}})
        x_range = _following(300)
        figures = []
        for name, title, lines, fmt in SYSTEM_PLOTS:
            present = [line for line in lines if line[0] in monitor.quantities]
            if not present:
                continue
            fig = _history_figure(title, name, 170, x_range, sizing_mode)
            for quantity, legend, color in present:
                fig.line(x="time", y=quantity, color=color, line_width=2, legend_label=legend, source=self.source)
            fig.yaxis.formatter = NumeralTickFormatter(format=fmt)
            fig.legend.location = "top_left"
            figures.append(fig)
        self.figures = figures
        self.root: Model = column(*figures, sizing_mode=sizing_mode)
        self.update()

    def update(self) -> None:
        """Stream the samples taken since the last update."""
        monitor = self.worker.monitor
        new = min(monitor.count - self.seen, self.rollover)
        if new <= 0:
            return
        self.seen = monitor.count
        data: dict[str, Any] = {}
        for name in ("time", *self.quantities):
            values = monitor.quantities.get(name)
            newest = list(itertools.islice(reversed(values), new)) if values is not None else []
            newest.reverse()
            # A quantity with fewer samples (started later) is padded at the front.
            data[name] = [math.nan] * (new - len(newest)) + newest
        data["time"] = [t * 1000 for t in data["time"]]
        self.source.stream(data, rollover=self.rollover)


class TransitionCounts(CategoryBars):
    """Transitions by kind (``executing → memory``) over the last minute, busiest first."""

    def __init__(self, tally: TransitionTally, sizing_mode: SizingMode = "stretch_width") -> None:
        self.tally = tally
        title = f"Transitions in the last {int(tally.window)} s"
        super().__init__({"kind": [], "count": []}, "kind", title, "transition_counts", 360, sizing_mode=sizing_mode)
        self.figure.hbar(y="kind", left=0, right="count", height=0.8, color="#1f77b4", source=self.source)
        self.figure.add_tools(HoverTool(tooltips=[("transition", "@kind"), ("count", "@count")]))
        self.update()

    def update(self) -> None:
        """Recount the transitions of the window (O(window seconds x kinds))."""
        self.tally.refresh()
        top = self.tally.recent_kinds().most_common(MAX_KINDS)
        top.reverse()  # the busiest at the top
        self.refresh({"kind": [k for k, _ in top], "count": [n for _, n in top]})


def duration_histogram(durations: Iterable[float], bins: int = 30) -> Data:
    """A histogram of run times on a log scale: ``left``/``right`` edges (s), ``count`` and a label per bin."""
    values = [d for d in durations if d > 0]
    data: Data = {"left": [], "right": [], "count": [], "label": []}
    if not values:
        return data
    lo, hi = math.log10(min(values)), math.log10(max(values))
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    width = (hi - lo) / bins
    counts = [0] * bins
    for d in values:
        counts[min(int((math.log10(d) - lo) / width), bins - 1)] += 1
    edges = [10 ** (lo + i * width) for i in range(bins + 1)]
    lefts, rights = edges[:-1], edges[1:]
    labels = [f"{format_time(left)} - {format_time(right)}" for left, right in zip(lefts, rights)]
    return {"left": lefts, "right": rights, "count": counts, "label": labels}


class TaskDurations:
    """How long the worker's latest tasks ran (up to the tally's ``durations`` of them), as a histogram."""

    def __init__(self, tally: TransitionTally, sizing_mode: SizingMode = "stretch_width") -> None:
        self.tally = tally
        self.drawn = -1
        self.source = ColumnDataSource(duration_histogram(()))
        fig = figure(
            title="Task run times (latest tasks)",
            name="task_durations",
            x_axis_type="log",
            x_axis_label="seconds",
            y_range=DataRange1d(start=0),
            height=260,
            toolbar_location=None,
            tools="",
            sizing_mode=sizing_mode,
        )
        fig.quad(left="left", right="right", bottom=0, top="count", color="#2ca02c", source=self.source)
        fig.add_tools(HoverTool(tooltips=[("run time", "@label"), ("tasks", "@count")]))
        self.root: Model = fig
        self.update()

    def update(self) -> None:
        """Redraw when tasks finished since the last update."""
        self.tally.refresh()
        if self.tally.durations_seen == self.drawn:
            return
        self.drawn = self.tally.durations_seen
        self.source.data = duration_histogram(self.tally.durations)


class TickHistory:
    """The event loop's tick: mean duration over the last cycle and time blocked, over time (milliseconds)."""

    def __init__(self, worker: Worker, n: int = 1200, sizing_mode: SizingMode = "stretch_width") -> None:
        self.worker = worker
        self.n = n
        self.last = (time.monotonic(), worker.loop_health.blocked_total)
        self.source = ColumnDataSource({"time": [], "tick": [], "blocked": []})
        title = "Event loop: mean tick and time blocked (ms per second)"
        fig = _history_figure(title, "tick_history", 180, None, sizing_mode)
        fig.line(x="time", y="tick", color="#1f77b4", line_width=2, legend_label="mean tick (ms)", source=self.source)
        fig.line(
            x="time", y="blocked", color="#d62728", line_width=2, legend_label="blocked (ms/s)", source=self.source
        )
        fig.legend.location = "top_left"
        self.root: Model = fig

    def update(self) -> None:
        """Add the loop's latest figures."""
        health = self.worker.loop_health
        now = time.monotonic()
        then, blocked = self.last
        self.last = (now, health.blocked_total)
        rate = max(health.blocked_total - blocked, 0.0) / max(now - then, 1e-3)
        self.source.stream(
            {"time": [_now_ms()], "tick": [health.interval_observed * 1000], "blocked": [rate * 1000]},
            rollover=self.n,
        )


class ProfilePanel:
    """The worker's statistical profile: a timeline of samples per cycle, and an icicle chart of the call tree.

    The timeline gains the cycles closed since the last update (read from the
    newest end of the profiler's history); the icicle is computed when the
    page opens, on *Update*, and when a key prefix is chosen or a range of
    the timeline is selected (then only those cycles count).  With
    ``server`` the profile is of the worker's event loop instead of its
    tasks (no key prefixes then).
    """

    def __init__(self, worker: Worker, server: bool = False, sizing_mode: SizingMode = "stretch_width") -> None:
        self.worker = worker
        self.server = server
        self.key: str | None = None
        self.last_cycle = 0.0
        profiler = worker.profiler
        interval = profiler.interval if profiler is not None else 0.01
        # "closed" keeps each cycle's own time in seconds: "time" (milliseconds, for the axis) divided back
        # is not always the same float, and a selection must find its cycle in the history exactly.
        self.timeline = ColumnDataSource({"time": [], "closed": [], "count": [], "width": []})
        timeline = figure(
            title="Samples per cycle (select a range to profile it only)",
            name="profile_timeline",
            x_axis_type="datetime",
            y_range=DataRange1d(start=0),
            height=150,
            tools="xbox_select,xpan,xwheel_zoom,reset",
            sizing_mode=sizing_mode,
        )
        timeline.vbar(x="time", top="count", width="width", color="#1f77b4", source=self.timeline)
        self.timeline_figure = timeline
        self.icicle = ProfileFigure(
            profile_interval=interval,
            sizing_mode=sizing_mode,
            title="Event loop profile" if server else "Task profile",
        )
        #: Key prefixes offered in the choice (those seen in the timeline's cycles).
        self.prefixes: set[str] = set()
        first: list[str | tuple[Any, str]] = ["All"]
        self.select = Select(title="Key prefix", value="All", options=first, name="profile_key", width=300)
        self.button = Button(label="Update", name="profile_update", width=120)
        self.note = Div(text="", name="profile_note")
        controls = row(self.button, self.note) if server else row(self.select, self.button, self.note)
        self.root: Model = column(controls, timeline, self.icicle.root, sizing_mode=sizing_mode)
        if profiler is None:
            self.note.text = "<p>Profiling is off on this worker (<code>distributed.worker.profile.enabled</code>).</p>"
            return
        self.select.on_change("value", self._on_key)
        self.button.on_click(self._on_button)
        self.timeline.selected.on_change("indices", self._on_selection)
        self.update()
        self.draw()

    def _on_key(self, attr: str, old: Any, new: Any) -> None:
        self.key = None if new == "All" else str(new)
        self.draw()

    def _on_button(self, event: Any = None) -> None:
        self.draw()

    def _on_selection(self, attr: str, old: Any, new: Any) -> None:
        self.draw()

    def _cycles(self, after: float) -> list[tuple[float, Any]]:
        """The closed cycles later than ``after``, oldest first: (time closed, tree or {prefix: tree})."""
        profiler = self.worker.profiler
        if profiler is None:
            return []
        return profiler.cycles_after(after, server=self.server)

    def update(self) -> None:
        """Add the cycles closed since the last update to the timeline (and new key prefixes to the choice)."""
        profiler = self.worker.profiler
        if profiler is None:
            return
        cycles = self._cycles(self.last_cycle)
        if not cycles:
            return
        self.last_cycle = cycles[-1][0]
        width = profiler.cycle * 1000 * 0.9
        counts: list[int] = []
        prefixes: set[str] = set()
        for _, tree in cycles:
            if self.server:
                counts.append(int(tree["count"]))
            else:
                counts.append(sum(int(t["count"]) for t in tree.values()))
                prefixes.update(tree)
        self.timeline.stream(
            {
                "time": [t * 1000 for t, _ in cycles],
                "closed": [t for t, _ in cycles],
                "count": counts,
                "width": [width] * len(cycles),
            },
            rollover=profiler.history.maxlen,
        )
        if prefixes - self.prefixes:
            self.prefixes |= prefixes
            options: list[str | tuple[Any, str]] = ["All", *sorted(self.prefixes)]
            self.select.options = options

    def draw(self) -> None:
        """Compute the icicle chart of the selected cycles (all of them when none is selected)."""
        profiler = self.worker.profiler
        if profiler is None:
            return
        start = stop = None
        picked = list(self.timeline.selected.indices)
        times = self.timeline.data["closed"]
        if picked and times:
            chosen = [times[i] for i in picked if 0 <= i < len(times)]
            if chosen:
                # A cycle is filed under the time it closed; the profiler's stop takes one cycle past it.
                start, stop = min(chosen), max(chosen) - 1e-6
        state = profiler.get_profile(start=start, stop=stop, key=None if self.server else self.key, server=self.server)
        self.icicle.update(state)
        what = "event loop" if self.server else (f"key prefix {self.key!r}" if self.key else "all tasks")
        span = "selected cycles" if start is not None else "all cycles kept"
        self.note.text = f"<p>{int(state['count'])} samples of {what}, {span}.</p>"
