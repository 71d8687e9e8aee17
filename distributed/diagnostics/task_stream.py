"""The task stream: a bounded record of every task that finished, where and when.

:class:`TaskStreamPlugin` is a scheduler plugin that keeps, for each task that
left ``processing`` for ``memory`` or ``erred``, a record shaped as
dask.distributed's::

    {"key": ..., "status": "OK" | "error", "worker": "tcp://...", "nbytes": int,
     "type": "int", "typename": "int",
     "startstops": [{"action": "transfer", "start": t0, "stop": t1, "source": "tcp://..."},
                    {"action": "compute", "start": t2, "stop": t3}]}

Times are the workers' ``time.time()``.  The plugin keeps each record with
its intervals as ``"spans"``, a tuple of :data:`Span` tuples, in place of
``"startstops"`` (see :meth:`TaskStreamPlugin.transition`); :meth:`~TaskStreamPlugin.collect`
gives records in dask's shape.  The plugin is added only when someone
asks for the stream (``Client.get_task_stream``, ``get_task_stream()``,
``performance_report``, the dashboard): without it the scheduler builds none of
this.  Readers that poll use :meth:`TaskStreamPlugin.since` with the index they
last saw.
"""

from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import dask.config
from dask.utils import key_split

from distributed.diagnostics.plugin import SchedulerPlugin

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["LanePacker", "Span", "StreamBars", "TaskStreamPlugin", "color_of", "ensure_task_stream", "rectangles"]

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
        if start != "processing" or (finish != "memory" and finish != "erred"):
            return
        # The scheduler built ``kwargs`` for this call alone: it becomes the record.
        record = kwargs
        record["key"] = key
        if finish == "memory":
            record["status"] = "OK"
        else:
            record["status"] = "error"
            record.setdefault("nbytes", 0)
            record.setdefault("type", None)
            record.setdefault("typename", record["type"])
        # Intervals kept as tuples of plain values, not the list of dicts the scheduler made: the garbage
        # collector then stops tracking a record once it has looked at it.  Lists and dicts would stay
        # tracked, and the buffer's records (100,000 by default) would lengthen every full collection,
        # which stops the scheduler's loop (twice as long on a busy scheduler, as measured).
        record["spans"] = tuple(_span(ss) for ss in record.pop("startstops", ()))
        self.buffer.append(record)
        self.index += 1

    def since(self, index: int) -> tuple[int, list[TaskRecord]]:
        """The records appended since ``index`` (an earlier value of :attr:`index`), and the index now.

        Records that fell off the buffer meanwhile are skipped.  They are the
        records as kept, for readers on the scheduler that do not change them:
        with ``spans`` (:data:`Span` tuples) for ``startstops`` (:meth:`collect`
        gives dask's shape).
        """
        now = self.index
        count = min(now - index, len(self.buffer))
        if count <= 0:
            return now, []
        # From the right end: O(new records), however long the buffer.
        out = list(itertools.islice(reversed(self.buffer), count))
        out.reverse()
        return now, out

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
        return [_shaped(r) for r in out]


#: An interval as the plugin keeps it: action, start, stop, source worker ("" for a computation), bytes moved.
Span = tuple[str, float, float, str, int]


def _span(ss: dict[str, Any]) -> Span:
    return (
        str(ss.get("action", "compute")),
        float(ss["start"]),
        float(ss["stop"]),
        str(ss.get("source", "")),
        int(ss.get("nbytes", 0)),
    )


def _startstop(span: Span) -> dict[str, Any]:
    action, start, stop, source, nbytes = span
    if action == "compute":
        return {"action": action, "start": start, "stop": stop}
    return {"action": action, "start": start, "stop": stop, "source": source, "nbytes": nbytes}


def _shaped(record: TaskRecord) -> TaskRecord:
    """A copy of a kept record as dask.distributed's are: ``startstops``, a list of dicts, for its ``spans``."""
    out = {k: v for k, v in record.items() if k != "spans"}
    out["startstops"] = [_startstop(span) for span in record["spans"]]
    return out


def _overlaps(record: TaskRecord, lo: float, hi: float) -> bool:
    spans: tuple[Span, ...] = record["spans"]
    if not spans:
        return False
    return spans[-1][2] >= lo and spans[0][1] <= hi


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


@functools.lru_cache(maxsize=4096)
def color_of(name: str) -> str:
    """A stable colour for a task prefix (the same in every process, unlike ``hash``)."""
    h = 0
    for ch in name:
        h = (h * 31 + ord(ch)) & 0xFFFFFFFF
    return PALETTE[h % len(PALETTE)]


class LanePacker:
    """Puts bars in lanes (a worker's threads) as they come: a bar takes its worker's first lane free at its start.

    Keeps only the end of each lane, so bars can be added a batch at a time
    (each batch sorted by start) at O(lanes) per bar.
    """

    def __init__(self) -> None:
        #: Per worker, the end of the last bar in each of its lanes.
        self.ends: dict[str, list[float]] = {}

    def place(self, worker: str, start: float, stop: float) -> int:
        """The lane of a bar from ``start`` to ``stop`` on ``worker`` (a new lane when all overlap it)."""
        ends = self.ends.get(worker)
        if ends is None:
            ends = self.ends[worker] = []
        for i, end in enumerate(ends):
            if end <= start:
                ends[i] = stop
                return i
        ends.append(stop)
        return len(ends) - 1


#: A bar before placement: worker, start, stop, its record, action, source worker.
_Bar = tuple[str, float, float, TaskRecord, str, str]

#: The columns :func:`rectangles` and :class:`StreamBars` fill.
BAR_COLUMNS = ("start", "duration", "worker", "lane", "y", "key", "name", "action", "color", "alpha", "source")


def _bars(records: Iterable[TaskRecord]) -> list[_Bar]:
    """The bars of ``records`` in their order (the order they finished in).

    A record is as :meth:`TaskStreamPlugin.collect` gives it (``startstops``)
    or as the plugin keeps it (``spans``).
    """
    rows: list[_Bar] = []
    for rec in records:
        worker = str(rec.get("worker"))
        spans = rec.get("spans")
        if spans is not None:
            for action, start, stop, source, _ in spans:
                rows.append((worker, start, stop, rec, action, source))
            continue
        for ss in rec.get("startstops", ()):
            action = str(ss.get("action", "compute"))
            rows.append((worker, float(ss["start"]), float(ss["stop"]), rec, action, str(ss.get("source", ""))))
    return rows


def _by_start(bars: list[_Bar]) -> list[int]:
    """Positions of ``bars`` by worker, then start: the order lanes are packed in."""
    return sorted(range(len(bars)), key=lambda i: (bars[i][0], bars[i][1]))


def _columns(
    placed: Iterable[tuple[int, int, _Bar]], start_boundary: float, name_of: Callable[[Any], str] = key_split
) -> dict[str, list[Any]]:
    """Column data of bars placed at (lane, y); ``name_of`` gives a key's prefix (its colour)."""
    rows: list[tuple[Any, ...]] = []
    append = rows.append
    error = ACTION_COLORS["error"]
    for lane, y, (worker, start, stop, rec, action, source) in placed:
        key = rec["key"]
        name = name_of(key)
        if action == "compute":
            color = color_of(name) if rec.get("status", "OK") == "OK" else error
            alpha = 1.0
        else:
            color = ACTION_COLORS.get(action, "#7f7f7f")
            alpha = 0.6
        append(
            (
                (start - start_boundary) * 1000,
                (stop - start) * 1000,
                worker,
                lane,
                y,
                str(key),
                name,
                action,
                color,
                alpha,
                source,
            )
        )
    if not rows:
        return {k: [] for k in BAR_COLUMNS}
    # Row tuples, then one transpose: cheaper than eleven appends per bar.
    return {k: list(col) for k, col in zip(BAR_COLUMNS, zip(*rows), strict=True)}


def rectangles(records: Iterable[TaskRecord], start_boundary: float = 0.0) -> dict[str, list[Any]]:
    """Bars to draw for ``records``: column-wise data (bokeh ``ColumnDataSource`` ready).

    One bar per interval: ``start``/``duration`` in milliseconds since
    ``start_boundary``, the ``worker`` and a ``lane`` within it (tasks that
    overlap on a worker get different lanes: its threads), ``y`` (a row
    number over all workers and lanes, workers in sorted order), ``key``,
    ``name`` (the prefix), ``action``, ``color`` and ``alpha``.
    """
    packer = LanePacker()
    bars = _bars(records)
    placed = [(packer.place(bar[0], bar[1], bar[2]), bar) for bar in (bars[i] for i in _by_start(bars))]
    offsets: dict[str, int] = {}
    total = 0
    for worker in sorted(packer.ends):
        offsets[worker] = total
        total += len(packer.ends[worker])
    return _columns(((lane, offsets[bar[0]] + lane, bar) for lane, bar in placed), start_boundary)


class StreamBars:
    """The bars of records that keep coming, a batch at a time, for a live figure that appends them.

    Unlike :func:`rectangles`, bars already drawn never move: lanes are
    packed on from where the last batch left them, and each (worker, lane)
    keeps the row it got when first used.  A worker's first bar reserves
    ``threads(worker)`` rows together, so that its threads' lanes are
    adjacent.  Times are milliseconds since the earliest start of the first
    batch.  Each batch costs O(its bars), whatever was drawn before.

    Parameters
    ----------
    threads
        The number of rows to reserve for a worker seen for the first time
        (its threads); at least one is reserved.
    name_of
        A key's task prefix, which names and colours its bars; by default
        :func:`dask.utils.key_split` of the key.  A scheduler knows the prefix
        of the tasks it holds, which costs less than parsing each key.
    """

    def __init__(self, threads: Callable[[str], int] | None = None, name_of: Callable[[Any], str] = key_split) -> None:
        self.threads = threads
        self.name_of = name_of
        self.packer = LanePacker()
        #: Row of each (worker, lane) used so far.
        self.rows: dict[tuple[str, int], int] = {}
        #: Rows handed out so far (the next free row).
        self.nrows = 0
        #: Time (``time.time()``) of x = 0, set by the first batch with a bar.
        self.start_boundary: float | None = None

    def add(self, records: Iterable[TaskRecord]) -> dict[str, list[Any]]:
        """Column data (:data:`BAR_COLUMNS`) of the bars of ``records`` (usually the newest few)."""
        bars = _bars(records)
        if not bars:
            return {k: [] for k in BAR_COLUMNS}
        if self.start_boundary is None:
            self.start_boundary = min(bar[1] for bar in bars)
        # Packed by start, sent in the order the tasks finished: what rolls over first is what finished first.
        placed: list[tuple[int, int, _Bar] | None] = [None] * len(bars)
        rows = self.rows
        for i in _by_start(bars):
            bar = bars[i]
            worker = bar[0]
            if worker not in self.packer.ends:
                for lane in range(max(self.threads(worker) if self.threads else 1, 1)):
                    rows[(worker, lane)] = self.nrows
                    self.nrows += 1
            lane = self.packer.place(worker, bar[1], bar[2])
            y = rows.get((worker, lane))
            if y is None:
                y = rows[(worker, lane)] = self.nrows
                self.nrows += 1
            placed[i] = (lane, y, bar)
        return _columns((p for p in placed if p is not None), self.start_boundary, self.name_of)
