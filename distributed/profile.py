"""Statistical profiling: sample threads' stacks at an interval and count call paths.

A profile is a call tree in dask.distributed's format: each node is a
:class:`ProfileState` ``{"count", "children", "identifier", "description"}``
where ``count`` is how many samples passed through that frame, ``children``
maps each callee's identifier (``"name;filename;firstlineno"``) to its node,
and ``description`` tells the function's name, file, line number and source
line.  The root's identifier is ``"root"``.

:class:`Profiler` holds a worker's trees.  One thread per process
(:class:`Sampler`) samples for all of them: every
``distributed.worker.profile.interval`` it reads :func:`sys._current_frames`
once and adds the stack of each thread running a task to its worker's tree and
to the tree of the task's key prefix, and the event loop thread's stack to the
loop's trees (:class:`LoopTrees`, one per loop, whatever the number of servers
on it, as dask keeps one profile per event loop); every ``distributed.worker.profile.cycle`` each profiler
closes its current trees into a bounded, timestamped history.
"""

from __future__ import annotations

import bisect
import itertools
import linecache
import math
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from types import CodeType, FrameType
from typing import Any, TypedDict

import dask.config
from dask.utils import key_split, parse_timedelta

from distributed.gc_pause import collector_paused

__all__ = [
    "FrameInfo",
    "LoopTrees",
    "ProfileState",
    "Profiler",
    "Sampler",
    "create",
    "current_frames",
    "identifier",
    "info_frame",
    "merge",
    "plot_data",
    "process",
    "sampler",
]


def current_frames() -> dict[int, FrameType]:
    """:func:`sys._current_frames`, safe to call from a sampling thread on any Python we support.

    On Python 3.11 a collection started by the frame objects it makes runs while
    it holds the interpreter's thread-list lock; a finalizer that lets the GIL go
    then lets another thread take the GIL and wait for that lock (to start or end
    a thread): the process deadlocks (CPython issue 106883, fixed only in 3.12,
    where collections wait for the eval loop).  So on 3.11 no collection may
    start inside the call.
    """
    if sys.version_info >= (3, 12):
        return sys._current_frames()
    with collector_paused():
        return sys._current_frames()


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


# Resolved once per code object (and line), not once per sample: a sample then costs a dict lookup
# per frame, and the source of a line is read once per process, not once per new node per cycle.
# Keyed by id() with the code object kept in the value, so no id is reused while its entry lives
# (code objects take no weak references); emptied when large, as tasks' functions may be new
# code objects per task (functions pickled by value).
_CACHE_LIMIT = 20_000
_identifiers: dict[int, tuple[CodeType, str]] = {}
_descriptions: dict[tuple[int, int], tuple[CodeType, FrameInfo]] = {}


def _code_identifier(co: CodeType) -> str:
    entry = _identifiers.get(id(co))
    if entry is not None and entry[0] is co:
        return entry[1]
    ident = f"{co.co_name};{co.co_filename};{co.co_firstlineno}"
    if len(_identifiers) >= _CACHE_LIMIT:
        _identifiers.clear()
    _identifiers[id(co)] = (co, ident)
    return ident


def identifier(frame: FrameType | None) -> str:
    """A frame's function, the same for every call of it: ``"name;filename;firstlineno"``."""
    if frame is None:
        return "None"
    return _code_identifier(frame.f_code)


def info_frame(frame: FrameType) -> FrameInfo:
    """Describe ``frame``: its function, file, current line number and that line's source."""
    co = frame.f_code
    line_number = frame.f_lineno or co.co_firstlineno
    entry = _descriptions.get((id(co), line_number))
    if entry is not None and entry[0] is co:
        return entry[1].copy()
    line = linecache.getline(co.co_filename, line_number, frame.f_globals).strip()
    info: FrameInfo = {"filename": co.co_filename, "name": co.co_name, "line_number": line_number, "line": line}
    if len(_descriptions) >= _CACHE_LIMIT:
        _descriptions.clear()
    _descriptions[(id(co), line_number)] = (co, info)
    return info.copy()


#: A sampled stack: (identifier, frame) pairs, innermost first.
_Path = list[tuple[str, FrameType]]


def _path(frame: FrameType, stop: str | None, omit: Iterable[str] = ()) -> _Path | None:
    """The stack ending at ``frame``, up to the innermost frame of the file ending with ``stop``.

    None when a frame's file ends with one of ``omit``.
    """
    ids = _identifiers
    path: _Path = []
    f: FrameType | None = frame
    while f is not None:
        co = f.f_code
        if stop is not None or omit:
            filename = co.co_filename
            if stop is not None and filename.endswith(stop):
                break
            for o in omit:
                if filename.endswith(o):
                    return None
        # An entry found is this code object's: the cache keeps it alive, so no other has its id.
        entry = ids.get(id(co))
        path.append((_code_identifier(co) if entry is None else entry[1], f))
        f = f.f_back
    return path


def _add_path(state: ProfileState, path: _Path) -> None:
    """Count one sample of ``path`` in ``state``."""
    node = state
    node["count"] += 1
    for ident, f in reversed(path):
        children = node["children"]
        child = children.get(ident)
        if child is None:
            child = children[ident] = {"count": 0, "children": {}, "identifier": ident, "description": info_frame(f)}
        child["count"] += 1
        node = child


def process(frame: FrameType, state: ProfileState, stop: str | None = None, omit: Iterable[str] = ()) -> bool:
    """Add one sample, the stack ending at ``frame``, to ``state``.

    The stack is read from the outermost frame inwards, starting below the
    innermost frame whose file name ends with ``stop`` (so a worker's trees
    start at the task's own code); a stack with a frame from a file ending
    with one of ``omit`` is left out.  Returns whether the sample was added.
    A new node's description tells the line its frame ran when first sampled.
    """
    path = _path(frame, stop, omit)
    if path is None:
        return False
    _add_path(state, path)
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
    """``distributed.worker.profile.*``, read and checked once.

    ``cycle`` overrides ``distributed.worker.profile.cycle`` (``Worker(profile_cycle_interval=)``).
    """

    def __init__(self, cycle: float | str | None = None) -> None:
        self.enabled = bool(dask.config.get("distributed.worker.profile.enabled"))
        self.interval = parse_timedelta(dask.config.get("distributed.worker.profile.interval"), default="ms")
        if cycle is None:
            cycle = dask.config.get("distributed.worker.profile.cycle")
        self.cycle = parse_timedelta(cycle, default="ms")
        if dask.config.get("distributed.worker.profile.low-level"):
            raise NotImplementedError("distributed.worker.profile.low-level=True is not supported yet")
        if self.interval is None or self.interval <= 0:
            raise ValueError(f"distributed.worker.profile.interval must be positive, got {self.interval!r}")
        if self.cycle is None or self.cycle < self.interval:
            raise ValueError(
                "distributed.worker.profile.cycle (or Worker(profile_cycle_interval=)) must be at least the "
                f"interval, got {self.cycle!r} < {self.interval!r}"
            )


class LoopTrees:
    """The call trees of one event loop thread, shared by the profilers of every server on that loop.

    The servers of one loop (an in-process cluster, a process of many
    workers) see the same stacks, so the loop's stack is added once per tick
    whatever the number of profilers, and its cycles are closed once: a
    process of 250 workers on one loop spent a third of a core, idle, adding
    the same stack to 250 trees a hundred times a second.  dask.distributed
    keeps one profile per event loop too.  See :meth:`shared`.
    """

    __slots__ = ("lock", "cycle", "recent", "history", "last_closed", "sampled_in", "__weakref__")

    #: The trees in use, by (loop thread, interval, cycle, history length): dropped with their last profiler.
    _shared: weakref.WeakValueDictionary[tuple[int, float, float, int], LoopTrees] = weakref.WeakValueDictionary()
    _shared_lock = threading.Lock()

    def __init__(self, cycle: float, history_length: int = HISTORY_LENGTH) -> None:
        self.lock = threading.Lock()
        self.cycle = cycle
        #: The tree being filled, and the closed ones: (time closed, tree), oldest first.
        self.recent = create()
        self.history: deque[tuple[float, ProfileState]] = deque(maxlen=history_length)
        #: When a cycle was last closed (the profilers' clock; -inf: never).
        self.last_closed = -math.inf
        #: The sampling tick that last added the loop's stack.
        self.sampled_in = -1

    @classmethod
    def shared(cls, loop_thread: int, interval: float, cycle: float, history_length: int) -> LoopTrees:
        """The trees of ``loop_thread`` for profilers sampling at ``interval`` and closing every ``cycle``."""
        key = (loop_thread, interval, cycle, history_length)
        with cls._shared_lock:
            trees = cls._shared.get(key)
            if trees is None:
                trees = cls._shared[key] = cls(cycle, history_length)
            return trees

    def wants(self, tick: int) -> bool:
        """Whether a sample in sampling ``tick`` counts: one a tick (-1, a sample of its own, always counts)."""
        return tick < 0 or tick != self.sampled_in

    def add(self, path: _Path, tick: int) -> None:
        """Count one sample of the loop's stack, taken in sampling ``tick`` (see :meth:`wants`)."""
        with self.lock:
            if tick >= 0:
                self.sampled_in = tick
            _add_path(self.recent, path)

    def close_cycle(self, now: float) -> None:
        """Move the current tree into the history, stamped ``now``, unless a sharer did within half a cycle."""
        with self.lock:
            if now - self.last_closed < self.cycle / 2:
                return
            self.last_closed = now
            self.history.append((now, self.recent))
            self.recent = create()


class Profiler:
    """The trees of one worker (or scheduler), filled by the process's sampling thread.

    One thread per process samples for every started profiler: it reads
    :func:`sys._current_frames` once per tick and adds each thread's stack to
    the trees of the profiler that owns that thread (see :class:`Sampler`).

    Parameters
    ----------
    active_threads
        The worker's map of thread id -> key of the task that thread runs;
        read (copied) at each sample.
    loop_thread
        The id of the worker's event loop thread, sampled into the
        ``server`` profile (None: not sampled), the :class:`LoopTrees` it
        shares with the other profilers of that loop.
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
        #: Closed trees: (time closed, tree), oldest first.
        self.history: deque[tuple[float, ProfileState]] = deque(maxlen=history_length)
        self.keys_history: deque[tuple[float, dict[str, ProfileState]]] = deque(maxlen=history_length)
        #: The event loop's trees, shared with the other profilers of that loop (None: not sampled).
        self.loop_trees = (
            None if loop_thread is None else LoopTrees.shared(loop_thread, interval, cycle, history_length)
        )
        #: When the sampler takes this profiler's next sample (time.monotonic) and last closed a cycle (clock).
        self.next_sample = 0.0
        self.last_cycle = 0.0

    @property
    def thread(self) -> threading.Thread | None:
        """The process's sampling thread, while this profiler is started."""
        return sampler().thread_of(self)

    def start(self) -> None:
        """Have the process's sampling thread sample for this profiler (starting it if needed)."""
        sampler().add(self)

    def close(self) -> None:
        """Stop sampling for this profiler; the sampling thread ends with the last profiler."""
        sampler().remove(self)

    def sample(self, me: int | None = None) -> None:
        """Add the current stack of each task thread (and of the event loop thread), ``me`` excepted."""
        frames = current_frames()
        try:
            # Our own frame in the dict would close a reference cycle (this frame's locals hold the
            # dict) keeping every sampled frame, and the task data in their locals, until the
            # garbage collector runs.
            frames.pop(threading.get_ident(), None)
            if me is not None:
                frames.pop(me, None)
            self.sample_frames(frames, {})
        finally:
            frames.clear()

    def sample_frames(
        self, frames: Mapping[int, FrameType], paths: dict[tuple[int, str | None], Any], tick: int = -1
    ) -> None:
        """Add the stacks of this profiler's threads from ``frames`` (thread id -> innermost frame).

        ``paths`` holds the stacks already read this tick, by (thread id,
        ``stop``): profilers sharing a thread (an event loop) read it once.
        ``tick`` numbers the sampler's tick: the loop's trees take one sample
        a tick (-1: this call is a sample of its own).
        """
        loop = self.loop_thread
        active: Mapping[int, Any] = self.active_threads
        if active:
            active = dict(active)  # copied in one step: the loop and pool threads change it
            stop = self.stop_at
            with self.lock:
                for ident, key in active.items():
                    path = _stack_of(ident, stop, frames, paths)
                    if path is None:
                        continue
                    prefix = key_split(key)
                    tree = self.keys.get(prefix)
                    if tree is None:
                        tree = self.keys[prefix] = create()
                    _add_path(self.recent, path)
                    _add_path(tree, path)
        trees = self.loop_trees
        if loop is not None and trees is not None and loop not in active and trees.wants(tick):
            path = _stack_of(loop, None, frames, paths)
            if path is not None:
                trees.add(path, tick)

    def close_cycle(self, now: float | None = None) -> None:
        """Move the current trees into the history, stamped ``now``."""
        now = self.clock() if now is None else now
        with self.lock:
            self.history.append((now, self.recent))
            self.keys_history.append((now, self.keys))
            self.recent = create()
            self.keys = {}
        if self.loop_trees is not None:
            self.loop_trees.close_cycle(now)

    def get_profile(
        self, start: float | None = None, stop: float | None = None, key: str | None = None, server: bool = False
    ) -> ProfileState:
        """The tree of the samples taken between ``start`` and ``stop`` (of the key prefix ``key``).

        Whole cycles count: those closed after ``start`` up to the first
        closed after ``stop``, plus the current one when ``stop`` is None
        (and ``start`` is not in the future).
        """
        if server:
            trees = self.loop_trees
            if trees is None:
                return create()
            with trees.lock:
                return self._select(list(trees.history), trees.recent, start, stop)
        with self.lock:
            history: list[tuple[float, ProfileState]]
            if key is None:
                history = list(self.history)
                recent = self.recent
            else:
                history = [(t, d[key]) for t, d in self.keys_history if key in d]
                recent = self.keys.get(key, create())
            return self._select(history, recent, start, stop)

    def _select(
        self, history: list[tuple[float, ProfileState]], recent: ProfileState, start: float | None, stop: float | None
    ) -> ProfileState:
        times = [t for t, _ in history]
        istart = 0 if start is None else bisect.bisect_left(times, start)
        istop = len(history) if stop is None else min(bisect.bisect_right(times, stop) + 1, len(history))
        trees = [tree for _, tree in history[istart:istop]]
        if stop is None and (start is None or start <= self.clock()):
            trees.append(recent)
        return merge(*trees)

    def cycles_after(self, after: float, server: bool = False) -> list[tuple[float, Any]]:
        """The closed cycles later than ``after``, oldest first: (time closed, ``{prefix: tree}``).

        With ``server``, the event loop's: (time closed, tree).
        """
        history: Iterable[tuple[float, Any]]
        if server:
            trees = self.loop_trees
            if trees is None:
                return []
            lock, history = trees.lock, trees.history
        else:
            lock, history = self.lock, self.keys_history
        with lock:
            newest = list(itertools.takewhile(lambda e: e[0] > after, reversed(history)))
        newest.reverse()
        return newest

    def get_metadata(self, start: float = 0, stop: float | None = None) -> dict[str, Any]:
        """Sample counts per closed cycle: ``{"counts": [(t, n)], "keys": [(t, {prefix: n})]}``."""
        hi = float("inf") if stop is None else stop
        with self.lock:
            counts = [(t, d["count"]) for t, d in self.history if start < t <= hi]
            keys = [(t, {k: v["count"] for k, v in d.items()}) for t, d in self.keys_history if start < t <= hi]
        return {"counts": counts, "keys": keys}


def _stack_of(
    ident: int, stop: str | None, frames: Mapping[int, FrameType], paths: dict[tuple[int, str | None], Any]
) -> _Path | None:
    """The stack of thread ``ident`` in ``frames``, read once per tick (None: no such thread)."""
    k = (ident, stop)
    if k in paths:
        path: _Path | None = paths[k]
        return path
    frame = frames.get(ident)
    path = None if frame is None else _path(frame, stop)
    paths[k] = path
    return path


class Sampler:
    """The process's one sampling thread, shared by every started :class:`Profiler`.

    Each tick reads :func:`sys._current_frames` once and gives it to the
    profilers whose next sample is due; a profiler with no task running only
    adds its event loop's stack, read once for all the profilers sharing that
    loop.  The thread starts with the first profiler added and ends when the
    last one is removed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Replaced, never changed in place: the thread reads it without holding the lock.
        self._profilers: tuple[Profiler, ...] = ()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        #: Ticks taken (numbering them for the loops' trees: see LoopTrees.add).
        self._ticks = 0

    @property
    def profilers(self) -> tuple[Profiler, ...]:
        """The profilers sampled now."""
        return self._profilers

    @property
    def thread(self) -> threading.Thread | None:
        """The sampling thread, while there are profilers."""
        return self._thread

    def thread_of(self, profiler: Profiler) -> threading.Thread | None:
        """The sampling thread if ``profiler`` is sampled, else None."""
        with self._lock:
            return self._thread if profiler in self._profilers else None

    def add(self, profiler: Profiler) -> None:
        """Sample for ``profiler`` from its next interval on."""
        with self._lock:
            if profiler in self._profilers:
                return
            profiler.next_sample = time.monotonic() + profiler.interval
            profiler.last_cycle = profiler.clock()
            self._profilers = (*self._profilers, profiler)
            if self._thread is None:
                self._wake = threading.Event()
                self._thread = threading.Thread(target=self._run, args=(self._wake,), name="Profile", daemon=True)
                self._thread.start()
            else:
                self._wake.set()  # its interval may be shorter than the thread's current wait

    def remove(self, profiler: Profiler) -> None:
        """Stop sampling for ``profiler``; the last one out waits for the thread to end."""
        with self._lock:
            if profiler not in self._profilers:
                return
            self._profilers = tuple(p for p in self._profilers if p is not profiler)
            if self._profilers or self._thread is None:
                return
            thread, self._thread = self._thread, None
            self._wake.set()
        if thread is not threading.current_thread():
            thread.join()  # wakes at once; waits at most for the sample under way

    def _run(self, wake: threading.Event) -> None:
        me = threading.get_ident()
        this = threading.current_thread()
        while True:
            with self._lock:
                if self._thread is not this:  # removed with the last profiler (maybe replaced since)
                    return
                profilers = self._profilers
            now = time.monotonic()
            # Profilers due within half their interval are sampled now too: after one tick their
            # samples line up and share one read of the threads' frames.
            due = [p for p in profilers if p.next_sample - now <= p.interval / 2]
            if not due:
                wake.wait(min(p.next_sample for p in profilers) - now)
                wake.clear()
                continue
            self._tick(due, me)
            now = time.monotonic()
            for p in due:
                p.next_sample = now + p.interval
                t = p.clock()
                if t - p.last_cycle >= p.cycle:
                    p.close_cycle(t)
                    p.last_cycle = t

    def _tick(self, due: list[Profiler], me: int) -> None:
        self._ticks += 1
        tick = self._ticks
        frames = current_frames()
        paths: dict[tuple[int, str | None], Any] = {}
        try:
            # This thread's frame in the dict would close a reference cycle keeping every sampled
            # frame (and the task data in their locals) alive until the garbage collector runs.
            frames.pop(me, None)
            for p in due:
                try:
                    p.sample_frames(frames, paths, tick)
                except Exception:  # a sample must never end the thread
                    continue
        finally:
            paths.clear()
            frames.clear()


_sampler = Sampler()


def sampler() -> Sampler:
    """The process's :class:`Sampler`."""
    return _sampler


def _reset_after_fork() -> None:
    # The child has none of the parent's threads: a sampler that thinks its thread runs would not sample.
    global _sampler
    _sampler = Sampler()


os.register_at_fork(after_in_child=_reset_after_fork)
