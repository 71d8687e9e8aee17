"""Statistical profiling: sample threads' stacks at an interval and count call paths.

A profile is a call tree in dask.distributed's format: each node is a
:class:`ProfileState` ``{"count", "children", "identifier", "description"}``
where ``count`` is how many samples passed through that frame, ``children``
maps each callee's identifier (``"name;filename;firstlineno"``) to its node,
and ``description`` tells the function's name, file, line number and source
line.  The root's identifier is ``"root"``.

:class:`Profiler` runs the sampling thread of a worker: every
``distributed.worker.profile.interval`` it reads :func:`sys._current_frames`,
adds the stack of each thread running a task to the worker's tree and to the
tree of the task's key prefix (and the event loop thread's stack to a tree of
its own), and every ``distributed.worker.profile.cycle`` it closes the current
trees into a bounded, timestamped history.
"""

from __future__ import annotations

import bisect
import linecache
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import Any, TypedDict

import dask.config
from dask.utils import key_split, parse_timedelta

__all__ = [
    "FrameInfo",
    "ProfileState",
    "Profiler",
    "create",
    "identifier",
    "info_frame",
    "merge",
    "plot_data",
    "process",
]

#: Timestamped trees kept (the history covers ``cycle * HISTORY_LENGTH``: an hour by default).
HISTORY_LENGTH = 3600


class FrameInfo(TypedDict):
    """Where a frame's function is: name, file, the line sampled first and its source."""

    filename: str
    name: str
    line_number: int
    line: str


class ProfileState(TypedDict):
    """A node of a call tree (the root is the whole profile)."""

    count: int
    children: dict[str, ProfileState]
    identifier: str
    description: FrameInfo


def create() -> ProfileState:
    """An empty profile."""
    return {
        "count": 0,
        "children": {},
        "identifier": "root",
        "description": {"filename": "", "name": "", "line_number": 0, "line": ""},
    }


def identifier(frame: FrameType | None) -> str:
    """A frame's function, the same for every call of it: ``"name;filename;firstlineno"``."""
    if frame is None:
        return "None"
    co = frame.f_code
    return f"{co.co_name};{co.co_filename};{co.co_firstlineno}"


def info_frame(frame: FrameType) -> FrameInfo:
    """Describe ``frame`` (reads its source line: called once per new node, not per sample)."""
    co = frame.f_code
    line_number = frame.f_lineno or co.co_firstlineno
    line = linecache.getline(co.co_filename, line_number, frame.f_globals).strip()
    return {"filename": co.co_filename, "name": co.co_name, "line_number": line_number, "line": line}


def process(frame: FrameType, state: ProfileState, stop: str | None = None, omit: Iterable[str] = ()) -> bool:
    """Add one sample, the stack ending at ``frame``, to ``state``.

    The stack is read from the outermost frame inwards, starting below the
    innermost frame whose file name ends with ``stop`` (so a worker's trees
    start at the task's own code); a stack with a frame from a file ending
    with one of ``omit`` is left out.  Returns whether the sample was added.
    """
    frames: list[FrameType] = []
    f: FrameType | None = frame
    while f is not None:
        filename = f.f_code.co_filename
        if stop is not None and filename.endswith(stop):
            break
        for o in omit:
            if filename.endswith(o):
                return False
        frames.append(f)
        f = f.f_back
    node = state
    node["count"] += 1
    for f in reversed(frames):
        ident = identifier(f)
        children = node["children"]
        child = children.get(ident)
        if child is None:
            child = children[ident] = {"count": 0, "children": {}, "identifier": ident, "description": info_frame(f)}
        child["count"] += 1
        node = child
    return True


def merge(*states: Mapping[str, Any]) -> ProfileState:
    """One tree with the counts of all of ``states`` added up (they are left unchanged)."""
    out = create()
    for state in states:
        _add_into(out, state)
    return out


def _add_into(out: ProfileState, state: Mapping[str, Any]) -> None:
    out["count"] += int(state["count"])
    for ident, child in state["children"].items():
        mine = out["children"].get(ident)
        if mine is None:
            desc = child["description"]
            mine = out["children"][ident] = {
                "count": 0,
                "children": {},
                "identifier": ident,
                "description": {
                    "filename": desc["filename"],
                    "name": desc["name"],
                    "line_number": desc["line_number"],
                    "line": desc["line"],
                },
            }
        _add_into(mine, child)


def plot_data(state: Mapping[str, Any], profile_interval: float = 0.010) -> dict[str, list[Any]]:
    """Icicle chart rectangles of a tree (column-wise, for a bokeh ``ColumnDataSource``).

    Each node becomes a box whose width is its share of the root's samples
    (``left``/``right`` in [0, 1]) at the depth of its frame (``bottom``/``top``),
    with ``name``, ``filename``, ``line_number``, ``line``, ``time`` (a
    readable estimate: samples times ``profile_interval``), ``percentage``,
    ``count`` and ``color`` (by file).
    """
    cols = ("left", "right", "bottom", "top", "color", "name", "filename", "line_number", "line", "time")
    data: dict[str, list[Any]] = {c: [] for c in cols}
    data["percentage"] = []
    data["count"] = []
    total = int(state["count"])
    if total == 0:
        return data
    colors: dict[str, str] = {}

    def walk(node: Mapping[str, Any], left: float, depth: int) -> None:
        for child in sorted(node["children"].values(), key=lambda c: c["identifier"]):
            width = child["count"] / total
            desc = child["description"]
            filename = desc["filename"]
            if filename not in colors:
                colors[filename] = _PALETTE[len(colors) % len(_PALETTE)]
            data["left"].append(left)
            data["right"].append(left + width)
            data["bottom"].append(depth)
            data["top"].append(depth + 1)
            data["color"].append(colors[filename])
            data["name"].append(desc["name"])
            data["filename"].append(filename)
            data["line_number"].append(desc["line_number"])
            data["line"].append(desc["line"])
            data["time"].append(_format_seconds(child["count"] * profile_interval))
            data["percentage"].append(f"{100 * width:.1f}%")
            data["count"].append(child["count"])
            walk(child, left, depth + 1)
            left += width

    walk(state, 0.0, 0)
    return data


_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")


def _format_seconds(t: float) -> str:
    if t >= 1:
        return f"{t:.2f} s"
    return f"{t * 1000:.0f} ms"


class ProfileSettings:
    """``distributed.worker.profile.*``, read and checked once."""

    def __init__(self) -> None:
        self.enabled = bool(dask.config.get("distributed.worker.profile.enabled"))
        self.interval = parse_timedelta(dask.config.get("distributed.worker.profile.interval"), default="ms")
        self.cycle = parse_timedelta(dask.config.get("distributed.worker.profile.cycle"), default="ms")
        if dask.config.get("distributed.worker.profile.low-level"):
            raise NotImplementedError("distributed.worker.profile.low-level=True is not supported yet")
        if self.interval is None or self.interval <= 0:
            raise ValueError(f"distributed.worker.profile.interval must be positive, got {self.interval!r}")
        if self.cycle is None or self.cycle < self.interval:
            raise ValueError(
                f"distributed.worker.profile.cycle must be at least the interval, got {self.cycle!r} < {self.interval!r}"
            )


class Profiler:
    """A worker's sampling thread and the trees it fills.

    Parameters
    ----------
    active_threads
        The worker's map of thread id -> key of the task that thread runs;
        read (copied) by the sampling thread at each sample.
    loop_thread
        The id of the worker's event loop thread, sampled into the
        ``server`` profile (None: not sampled).
    interval, cycle
        Seconds between samples, and between closing the current trees into
        the history.
    stop
        Stacks of task threads are read from below the innermost frame of
        the file ending with this (the worker's own code).
    """

    def __init__(
        self,
        active_threads: Mapping[int, Any],
        loop_thread: int | None,
        interval: float,
        cycle: float,
        stop: str | None = "distributed/worker.py",
        history_length: int = HISTORY_LENGTH,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.active_threads = active_threads
        self.loop_thread = loop_thread
        self.interval = interval
        self.cycle = cycle
        self.stop_at = stop
        self.clock = clock
        self.lock = threading.Lock()
        #: The trees being filled: all tasks, per key prefix, and the event loop.
        self.recent = create()
        self.keys: dict[str, ProfileState] = {}
        self.server_recent = create()
        #: Closed trees: (time closed, tree), oldest first.
        self.history: deque[tuple[float, ProfileState]] = deque(maxlen=history_length)
        self.keys_history: deque[tuple[float, dict[str, ProfileState]]] = deque(maxlen=history_length)
        self.server_history: deque[tuple[float, ProfileState]] = deque(maxlen=history_length)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def thread(self) -> threading.Thread | None:
        """The sampling thread, while it runs."""
        return self._thread

    def start(self) -> None:
        """Start the sampling thread."""
        if self._thread is not None:
            return
        self._stopped.clear()
        self._thread = threading.Thread(target=self._run, name="Profile", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the sampling thread and wait for it."""
        self._stopped.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        last_cycle = self.clock()
        me = threading.get_ident()
        while not self._stopped.wait(self.interval):
            try:
                self.sample(me)
                now = self.clock()
                if now - last_cycle >= self.cycle:
                    self.close_cycle(now)
                    last_cycle = now
            except Exception:  # a sample must never end the thread (e.g. a frame gone mid-walk)
                continue

    def sample(self, me: int | None = None) -> None:
        """Add the current stack of each task thread (and of the event loop thread)."""
        frames = sys._current_frames()
        try:
            # Our own frame in the dict would close a reference cycle (this frame's locals hold the
            # dict) keeping every sampled frame, and the task data in their locals, until the
            # garbage collector runs.
            frames.pop(threading.get_ident(), None)
            active = dict(self.active_threads)  # copied in one step: the loop and pool threads change it
            with self.lock:
                for ident, key in active.items():
                    frame = frames.get(ident)
                    if frame is None or ident == me:
                        continue
                    prefix = key_split(key)
                    tree = self.keys.get(prefix)
                    if tree is None:
                        tree = self.keys[prefix] = create()
                    if process(frame, self.recent, stop=self.stop_at):
                        process(frame, tree, stop=self.stop_at)
                if self.loop_thread is not None and self.loop_thread not in active:
                    frame = frames.get(self.loop_thread)
                    if frame is not None:
                        process(frame, self.server_recent)
        finally:
            frames.clear()
            frame = None

    def close_cycle(self, now: float | None = None) -> None:
        """Move the current trees into the history, stamped ``now``."""
        now = self.clock() if now is None else now
        with self.lock:
            self.history.append((now, self.recent))
            self.keys_history.append((now, self.keys))
            self.server_history.append((now, self.server_recent))
            self.recent = create()
            self.keys = {}
            self.server_recent = create()

    def get_profile(
        self, start: float | None = None, stop: float | None = None, key: str | None = None, server: bool = False
    ) -> ProfileState:
        """The tree of the samples taken between ``start`` and ``stop`` (of the key prefix ``key``).

        Whole cycles count: those closed after ``start`` up to the first
        closed after ``stop``, plus the current one when ``stop`` is None
        (and ``start`` is not in the future).
        """
        with self.lock:
            history: list[tuple[float, ProfileState]]
            if server:
                history = list(self.server_history)
                recent = self.server_recent
            elif key is None:
                history = list(self.history)
                recent = self.recent
            else:
                history = [(t, d[key]) for t, d in self.keys_history if key in d]
                recent = self.keys.get(key, create())
            times = [t for t, _ in history]
            istart = 0 if start is None else bisect.bisect_left(times, start)
            istop = len(history) if stop is None else min(bisect.bisect_right(times, stop) + 1, len(history))
            trees = [tree for _, tree in history[istart:istop]]
            if stop is None and (start is None or start <= self.clock()):
                trees.append(recent)
            return merge(*trees)

    def get_metadata(self, start: float = 0, stop: float | None = None) -> dict[str, Any]:
        """Sample counts per closed cycle: ``{"counts": [(t, n)], "keys": [(t, {prefix: n})]}``."""
        hi = float("inf") if stop is None else stop
        with self.lock:
            counts = [(t, d["count"]) for t, d in self.history if start < t <= hi]
            keys = [(t, {k: v["count"] for k, v in d.items()}) for t, d in self.keys_history if start < t <= hi]
        return {"counts": counts, "keys": keys}
