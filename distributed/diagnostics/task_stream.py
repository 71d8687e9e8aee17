"""The task stream: a bounded record of every task that finished, where and when.

:class:`TaskStreamPlugin` is a scheduler plugin that keeps, for each task that
left ``processing`` for ``memory`` or ``erred``, a record shaped as
dask.distributed's::

    {"key": ..., "status": "OK" | "error", "worker": "tcp://...", "nbytes": int,
     "type": "int", "typename": "int",
     "startstops": [{"action": "transfer", "start": t0, "stop": t1, "source": "tcp://..."},
                    {"action": "compute", "start": t2, "stop": t3}]}

Times are the workers' ``time.time()``.  The plugin is added only when someone
asks for the stream (``Client.get_task_stream``, ``get_task_stream()``,
``performance_report``, the dashboard): without it the scheduler builds none of
this.  Readers that poll use :meth:`TaskStreamPlugin.since` with the index they
last saw.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import dask.config
from dask.utils import key_split

from distributed.diagnostics.plugin import SchedulerPlugin

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["TaskStreamPlugin", "color_of", "ensure_task_stream", "rectangles"]

#: A task stream record (see the module docstring).
TaskRecord = dict[str, Any]


class TaskStreamPlugin(SchedulerPlugin):
    """Keep the last ``maxlen`` finished tasks of a scheduler.

    Parameters
    ----------
    scheduler
        The scheduler whose tasks are recorded (the plugin is added to it by
        :func:`ensure_task_stream`, or by the caller).
    maxlen
        Records kept; by default
        ``distributed.scheduler.dashboard.tasks.task-stream-length``.
    """

    name = "task-stream"

    def __init__(self, scheduler: Scheduler, maxlen: int | None = None) -> None:
        if maxlen is None:
            maxlen = int(dask.config.get("distributed.scheduler.dashboard.tasks.task-stream-length"))
        if maxlen < 1:
            raise ValueError(f"maxlen must be at least 1, got {maxlen}")
        self.scheduler = scheduler
        self.buffer: deque[TaskRecord] = deque(maxlen=maxlen)
        #: Records appended so far (the index the next record gets); only grows.
        self.index = 0

    def transition(self, key: Any, start: str, finish: str, *args: Any, stimulus_id: str, **kwargs: Any) -> None:
        """Record a task that left ``processing`` with its worker's report."""
        if start != "processing":
            return
        if finish == "memory":
            status = "OK"
        elif finish == "erred":
            status = "error"
        else:
            return
        record: TaskRecord = {
            "key": key,
            "status": status,
            "worker": kwargs.get("worker"),
            "nbytes": kwargs.get("nbytes", 0),
            "type": kwargs.get("type"),
            "typename": kwargs.get("typename", kwargs.get("type")),
            "startstops": kwargs.get("startstops", []),
        }
        self.buffer.append(record)
        self.index += 1

    def since(self, index: int) -> tuple[int, list[TaskRecord]]:
        """The records appended since ``index`` (an earlier value of :attr:`index`), and the index now.

        Records that fell off the buffer meanwhile are skipped.
        """
        now = self.index
        first = now - len(self.buffer)  # index of buffer[0]
        begin = max(index, first)
        if begin >= now:
            return now, []
        return now, list(itertools.islice(self.buffer, begin - first, None))

    def collect(
        self, start: float | None = None, stop: float | None = None, count: int | None = None
    ) -> list[TaskRecord]:
        """The records of tasks that ran between ``start`` and ``stop`` (``time.time()`` values).

        A task is in when its last interval ended at or after ``start`` and its
        first began at or before ``stop``.  With ``count``, at most that many:
        the first ``count`` after ``start`` when it is given, else the last.
        """
        records: Iterable[TaskRecord] = self.buffer
        if start is not None or stop is not None:
            lo = float("-inf") if start is None else start
            hi = float("inf") if stop is None else stop
            records = [r for r in records if _overlaps(r, lo, hi)]
        out = list(records)
        if count is not None:
            if count < 0:
                raise ValueError(f"count must not be negative, got {count}")
            out = out[:count] if start is not None else out[len(out) - count :] if count else []
        return out


def _overlaps(record: TaskRecord, lo: float, hi: float) -> bool:
    spans = record["startstops"]
    if not spans:
        return False
    return bool(spans[-1]["stop"] >= lo and spans[0]["start"] <= hi)


async def ensure_task_stream(scheduler: Scheduler) -> TaskStreamPlugin:
    """The scheduler's task stream plugin, added first if it has none."""
    plugin = scheduler.plugins.get(TaskStreamPlugin.name)
    if isinstance(plugin, TaskStreamPlugin):
        return plugin
    plugin = TaskStreamPlugin(scheduler)
    await scheduler.add_plugin(plugin, name=TaskStreamPlugin.name)
    return plugin


# -- drawing helpers (shared by the figures and the dashboard) ------------------------------
#: Colours of the compute bars, by task prefix (a fixed palette, chosen by hash).
PALETTE: Sequence[str] = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#c5b0d5",
)
#: Colours of the bars that are not computations.
ACTION_COLORS = {"transfer": "#d62728", "disk-read": "#7f7f7f", "disk-write": "#7f7f7f", "error": "#000000"}


def color_of(name: str) -> str:
    """A stable colour for a task prefix (the same in every process, unlike ``hash``)."""
    h = 0
    for ch in name:
        h = (h * 31 + ord(ch)) & 0xFFFFFFFF
    return PALETTE[h % len(PALETTE)]


def rectangles(records: Iterable[TaskRecord], start_boundary: float = 0.0) -> dict[str, list[Any]]:
    """Bars to draw for ``records``: column-wise data (bokeh ``ColumnDataSource`` ready).

    One bar per interval: ``start``/``duration`` in milliseconds since
    ``start_boundary``, the ``worker`` and a ``lane`` within it (tasks that
    overlap on a worker get different lanes: its threads), ``y`` (a row
    number over all workers and lanes, workers in sorted order), ``key``,
    ``name`` (the prefix), ``action``, ``color`` and ``alpha``.
    """
    rows: list[tuple[str, float, float, TaskRecord, dict[str, Any]]] = []
    for rec in records:
        worker = str(rec.get("worker"))
        for ss in rec.get("startstops", ()):
            rows.append((worker, float(ss["start"]), float(ss["stop"]), rec, ss))
    rows.sort(key=lambda r: (r[0], r[1]))
    # Greedy lane packing per worker: a bar takes the first lane free at its start.
    lanes: dict[str, list[float]] = {}
    placed: list[tuple[int, tuple[str, float, float, TaskRecord, dict[str, Any]]]] = []
    for row in rows:
        ends = lanes.setdefault(row[0], [])
        for i, end in enumerate(ends):
            if end <= row[1]:
                ends[i] = row[2]
                lane = i
                break
        else:
            ends.append(row[2])
            lane = len(ends) - 1
        placed.append((lane, row))
    offsets: dict[str, int] = {}
    total = 0
    for worker in sorted(lanes):
        offsets[worker] = total
        total += len(lanes[worker])
    data: dict[str, list[Any]] = {
        k: [] for k in ("start", "duration", "worker", "lane", "y", "key", "name", "action", "color", "alpha", "source")
    }
    for lane, (worker, start, stop, rec, ss) in placed:
        action = str(ss.get("action", "compute"))
        name = key_split(rec["key"])
        if action == "compute":
            color = color_of(name) if rec.get("status", "OK") == "OK" else ACTION_COLORS["error"]
        else:
            color = ACTION_COLORS.get(action, "#7f7f7f")
        data["start"].append((start - start_boundary) * 1000)
        data["duration"].append((stop - start) * 1000)
        data["worker"].append(worker)
        data["lane"].append(lane)
        data["y"].append(offsets[worker] + lane)
        data["key"].append(str(rec["key"]))
        data["name"].append(name)
        data["action"].append(action)
        data["color"].append(color)
        data["alpha"].append(1.0 if action == "compute" else 0.6)
        data["source"].append(str(ss.get("source", "")))
    return data
