"""The workers' statistical profiler and Client.profile."""

from __future__ import annotations

import gc
import linecache
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import pytest

from distributed import Client
from distributed.profile import (
    LoopTrees,
    Profiler,
    Sampler,
    create,
    current_frames,
    merge,
    plot_data,
    process,
    sampler,
)
from distributed.scheduler import Scheduler
from distributed.utils_test import gen_cluster, gen_test, inc, poll_for
from distributed.worker import Worker

FAST = {"distributed.worker.profile.interval": "5ms", "distributed.worker.profile.cycle": "100ms"}


@pytest.fixture
def no_profiler_left() -> Iterator[None]:
    """Stop sampling for the profilers of workers that earlier tests left running (a failed start).

    They would keep the process's one sampling thread alive past the end of the workers of the test.
    """
    for p in sampler().profilers:
        p.close()
    yield


def spin_in_named_function(seconds: float) -> int:
    """Busy for ``seconds``: the profiler should find this frame."""
    deadline = time.time() + seconds
    n = 0
    while time.time() < deadline:
        n += 1
    return n


async def tree(c: Client[Literal[True]], **kwargs: Any) -> dict[str, Any]:
    """``c.profile(**kwargs)``, without a figure."""
    state = await c.profile(**kwargs)
    assert isinstance(state, dict)
    return state


def names(state: Mapping[str, Any]) -> set[str]:
    """Every function name in a profile tree."""
    out = set()
    todo: list[Mapping[str, Any]] = [state]
    while todo:
        node = todo.pop()
        for child in node["children"].values():
            out.add(child["description"]["name"])
            todo.append(child)
    return out


def test_process_and_merge_build_counted_trees() -> None:
    here = sys._getframe()
    state = create()
    assert process(here, state) and process(here, state)
    assert state["count"] == 2
    leaf_path = [state]
    while leaf_path[-1]["children"]:
        [child] = leaf_path[-1]["children"].values()
        assert child["count"] == 2
        leaf_path.append(child)
    leaf = leaf_path[-1]
    assert leaf["description"]["name"] == "test_process_and_merge_build_counted_trees"
    assert "process(here, state)" in leaf["description"]["line"]  # the line running when first sampled
    assert leaf["identifier"].startswith("test_process_and_merge_build_counted_trees;")
    both = merge(state, state)
    assert both["count"] == 4 and state["count"] == 2  # inputs unchanged
    # stop= cuts the stack at the innermost frame of that file (this one): nothing of it is left.
    cut = create()
    process(here, cut, stop=__file__)
    assert cut["count"] == 1 and cut["children"] == {}
    data = plot_data(state)
    assert data["name"][-1] == "test_process_and_merge_build_counted_trees"
    assert all(0 <= left < right <= 1 for left, right in zip(data["left"], data["right"], strict=True))


def test_profiler_samples_only_threads_running_tasks() -> None:
    active: dict[int, Any] = {}
    stop = threading.Event()
    ready = threading.Event()

    def busy() -> None:
        active[threading.get_ident()] = "spin-1"
        ready.set()
        while not stop.is_set():
            spin_in_named_function(0.001)

    t = threading.Thread(target=busy)
    t.start()
    ready.wait()
    prof = Profiler(active, None, interval=0.001, cycle=0.05, stop=None)
    try:
        for _ in range(5):
            prof.sample()
        prof.close_cycle()
        prof.sample()
    finally:
        stop.set()
        t.join()
    assert "spin_in_named_function" in names(prof.get_profile())
    assert prof.get_profile()["count"] == 6
    assert prof.get_profile(key="spin")["count"] == 6
    assert prof.get_profile(key="other")["count"] == 0
    assert prof.get_profile(stop=0)["count"] == 5  # the closed cycle only, not the current samples
    assert prof.get_metadata()["keys"][0][1] == {"spin": 5}


@gen_cluster(client=True, config=FAST)
async def test_client_profile_finds_the_task_function(
    c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker
) -> None:
    await c.submit(spin_in_named_function, 0.3, key="spin-1", workers=[a.address])
    await c.submit(inc, 1, key="inc-1")
    state = await c.profile()
    assert isinstance(state, dict)
    assert state["count"] > 10
    assert "spin_in_named_function" in names(state)
    # The tree starts at the task's own code: none of the worker's frames.
    assert not any(
        child["description"]["filename"].endswith("distributed/worker.py") for child in state["children"].values()
    )
    only = await c.profile(key="spin")
    assert isinstance(only, dict)
    assert "spin_in_named_function" in names(only) and only["count"] <= state["count"]
    other = await c.profile(key="nothing-like-it")
    assert other == create()
    per_worker = await c.profile(merge_workers=False)
    assert isinstance(per_worker, dict)
    assert set(per_worker) == {a.address, b.address}
    assert "spin_in_named_function" in names(per_worker[a.address])
    assert "spin_in_named_function" not in names(per_worker[b.address])
    assert await c.profile(workers=[b.address], key="spin") == create()
    assert (await tree(c, start=time.time() + 3600))["count"] == 0
    plotted = await c.profile(plot=True)
    assert isinstance(plotted, tuple)
    fig: Any = plotted[1]
    assert "spin_in_named_function" in fig.renderers[0].data_source.data["name"]
    meta = await s.requests.handle_profile_metadata(None, {"op": "profile_metadata"})  # type: ignore[arg-type]
    assert sum(n for _, n in meta["counts"]) > 0


@pytest.mark.usefixtures("no_profiler_left")
@gen_cluster(client=True, config=FAST)
async def test_profile_of_event_loops(c: Client[Literal[True]], s: Scheduler, a: Worker, b: Worker) -> None:
    deadline = time.monotonic() + 10
    while (await tree(c, server=True))["count"] == 0:
        assert time.monotonic() < deadline
    assert s.requests.loop_profiler is None
    await c.profile(scheduler=True)  # starts sampling the scheduler's loop
    assert s.requests.loop_profiler is not None
    thread = s.requests.loop_profiler.thread
    while (await tree(c, scheduler=True))["count"] == 0:
        assert time.monotonic() < deadline
    await s.close()
    assert thread is not None and not thread.is_alive()


@pytest.mark.usefixtures("no_profiler_left")
@gen_test(config=FAST)
async def test_sampler_thread_stops_with_the_worker() -> None:
    async with Scheduler(port=0, dashboard=False) as s:
        w = Worker(s.address, nthreads=1)
        await w
        assert w.profiler is not None
        thread = w.profiler.thread
        assert thread is not None and thread.is_alive()
        assert thread.name == "Profile"
        await w.close()
        assert not thread.is_alive()


@gen_test(config={"distributed.worker.profile.enabled": False})
async def test_disabled_profiler_runs_no_thread() -> None:
    async with Scheduler(port=0, dashboard=False) as s, Worker(s.address, nthreads=1) as w:
        assert w.profiler is None
        assert w.get_profile() == create()


def test_low_level_is_refused() -> None:
    import dask

    with dask.config.set({"distributed.worker.profile.low-level": True}):
        with pytest.raises(NotImplementedError, match="low-level"):
            Worker("tcp://127.0.0.1:1", nthreads=1)


class Payload:
    """Stands for a task's data."""


class HeldTask:
    """A thread "running" task ``hold-1`` that holds a :class:`Payload` until released."""

    def __init__(self) -> None:
        self.active: dict[int, Any] = {}
        self.release = threading.Event()
        self.refs: list[weakref.ref[Payload]] = []
        started = threading.Event()

        def task() -> None:
            data = Payload()
            self.refs.append(weakref.ref(data))
            self.active[threading.get_ident()] = "hold-1"
            started.set()
            self.release.wait()
            del self.active[threading.get_ident()]

        self.thread = threading.Thread(target=task)
        self.thread.start()
        started.wait()

    def profiler(self, cycle: float) -> Profiler:
        """A profiler of the held task's thread, sampling every millisecond."""
        return Profiler(self.active, threading.get_ident(), interval=0.001, cycle=cycle, stop=None)

    def finish(self) -> None:
        """Let the task end, and wait for its thread."""
        self.release.set()
        self.thread.join()


def test_sampling_keeps_no_frame_and_its_data_alive() -> None:
    # A sampled frame that outlives its function keeps its locals (a task's data) alive: nothing
    # the sampler does may keep one past the sample, not even until the garbage collector runs.
    held = HeldTask()
    prof = held.profiler(cycle=1.0)
    gc.disable()
    try:
        prof.sample()
        held.finish()
        assert held.refs[0]() is None
    finally:
        gc.enable()
    assert prof.get_profile(key="hold")["count"] == 1


def spin_on_a(seconds: float) -> int:
    """Runs only on worker a."""
    return spin_in_named_function(seconds)


def spin_on_b(seconds: float) -> int:
    """Runs only on worker b."""
    return spin_in_named_function(seconds)


def profile_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "Profile" and t.is_alive()]


@pytest.mark.usefixtures("no_profiler_left")
@gen_test(config=FAST)
async def test_workers_of_one_process_share_one_sampler_thread() -> None:
    async with Scheduler(port=0, dashboard=False) as s:
        a = await Worker(s.address, nthreads=1)
        b = await Worker(s.address, nthreads=1)
        try:
            assert a.profiler is not None and b.profiler is not None
            thread = a.profiler.thread
            assert thread is not None and thread is b.profiler.thread
            assert profile_threads() == [thread]
            async with Client(s.address, asynchronous=True) as c:
                # At the same time: ticks see both task threads and must give each stack to its worker.
                fa = c.submit(spin_on_a, 0.3, key="on_a-1", workers=[a.address])
                fb = c.submit(spin_on_b, 0.3, key="on_b-1", workers=[b.address])
                await c.gather([fa, fb])
            on_a, on_b = names(a.get_profile()), names(b.get_profile())
            assert "spin_on_a" in on_a and "spin_on_b" not in on_a
            assert "spin_on_b" in on_b and "spin_on_a" not in on_b
            assert a.get_profile(key="on_a")["count"] > 0 and a.get_profile(key="on_b") == create()
            assert b.get_profile(key="on_b")["count"] > 0 and b.get_profile(key="on_a") == create()
            # Both workers' event loop profiles are filled (the loop is one thread, read once per tick).
            assert a.get_profile(server=True)["count"] > 0 and b.get_profile(server=True)["count"] > 0
        finally:
            await a.close()
            assert thread.is_alive()  # b still samples
            await b.close()
        assert not thread.is_alive()
        assert profile_threads() == []
        assert sampler().profilers == ()


@pytest.mark.usefixtures("no_profiler_left")
def test_sampler_samples_each_profiler_at_its_own_interval() -> None:
    me = threading.get_ident()
    fast = Profiler({}, me, interval=0.002, cycle=10.0)
    slow = Profiler({}, me, interval=0.05, cycle=10.0)
    start = time.monotonic()
    fast.start()
    slow.start()
    try:
        assert fast.thread is slow.thread is not None
        poll_for(lambda: fast.get_profile(server=True)["count"] >= 40, timeout=10)
    finally:
        fast.close()
        slow.close()
    elapsed = time.monotonic() - start
    # Sampled at most every half interval (due samples are taken together to share a tick).
    assert slow.get_profile(server=True)["count"] <= elapsed / 0.025 + 1
    assert fast.thread is None and slow.thread is None


def test_sampler_restarts_after_its_last_profiler_left() -> None:
    s = Sampler()
    p = Profiler({}, threading.get_ident(), interval=0.001, cycle=10.0)
    s.add(p)
    first = s.thread
    s.remove(p)
    assert first is not None and not first.is_alive()
    s.add(p)
    try:
        second = s.thread
        assert second is not None and second is not first and second.is_alive()
        assert s.thread_of(p) is second
    finally:
        s.remove(p)
    assert s.thread is None and not second.is_alive()


@pytest.mark.usefixtures("no_profiler_left")
def test_sampler_thread_keeps_no_frame_and_its_data_alive() -> None:
    held = HeldTask()
    prof = held.profiler(cycle=10.0)
    gc.disable()
    try:
        prof.start()
        poll_for(lambda: prof.get_profile(key="hold")["count"] >= 3, timeout=10)
        held.finish()
        # Without the garbage collector, only a reference the sampler kept would hold the data.
        poll_for(lambda: held.refs[0]() is None, timeout=5, what="the task's data to be freed")
    finally:
        held.release.set()
        prof.close()
        gc.enable()


def test_descriptions_read_each_source_line_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    real = linecache.getline

    def counting(*args: Any) -> str:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(linecache, "getline", counting)
    here = sys._getframe()
    first, second = create(), create()
    reads = []
    for state in (first, second):  # the second a new tree (a new cycle): new nodes, the same frames and lines
        process(here, state)
        reads.append(len(calls))
    assert reads[1] == reads[0]
    assert merge(first) == merge(second)
    leaf_first, leaf_second = first, second
    while leaf_first["children"]:
        [leaf_first] = leaf_first["children"].values()
        [leaf_second] = leaf_second["children"].values()
    assert leaf_first["description"]["name"] == "test_descriptions_read_each_source_line_once"
    assert "process(here, state)" in leaf_first["description"]["line"]
    assert leaf_first["description"] is not leaf_second["description"]  # trees share no mutable parts


def test_frames_are_read_with_no_collection_on_python_3_11(monkeypatch: pytest.MonkeyPatch) -> None:
    # On 3.11 a collection inside sys._current_frames can deadlock the process against a thread
    # starting or ending (CPython issue 106883); 3.12 collects only between bytecodes.
    collector_on: list[bool] = []
    real = sys._current_frames

    def recording() -> dict[int, Any]:
        collector_on.append(gc.isenabled())
        return real()

    monkeypatch.setattr(sys, "_current_frames", recording)
    frames = current_frames()
    assert threading.get_ident() in frames
    assert collector_on == [sys.version_info >= (3, 12)]
    assert gc.isenabled()


def test_profilers_of_one_loop_share_its_trees_sampled_once_a_tick() -> None:
    # 250 workers on one loop added the same stack to 250 trees every tick: a third of a core, idle.
    me = threading.get_ident()
    profilers = [Profiler({}, me, interval=0.01, cycle=10.0) for _ in range(3)]
    other_cycle = Profiler({}, me, interval=0.01, cycle=5.0)
    trees = profilers[0].loop_trees
    assert trees is not None and all(p.loop_trees is trees for p in profilers)
    assert other_cycle.loop_trees is not trees
    assert LoopTrees.shared(me, 0.01, 10.0, profilers[0].history.maxlen or 0) is trees
    frames = {me: sys._getframe()}
    for tick in (1, 2):
        paths: dict[Any, Any] = {}
        for p in profilers:
            p.sample_frames(frames, paths, tick)
    assert all(p.get_profile(server=True)["count"] == 2 for p in profilers)  # one sample a tick, not three
    profilers[0].sample_frames(frames, {})  # a sample of its own (no tick) always counts
    assert profilers[1].get_profile(server=True)["count"] == 3
    now = time.time()
    for p in profilers:
        p.close_cycle(now)  # each sharer closes its cycle: the loop's trees close once
    assert len(trees.history) == 1 and trees.recent["count"] == 0
    assert [len(p.cycles_after(0, server=True)) for p in profilers] == [1, 1, 1]
    assert profilers[2].get_profile(server=True, start=0, stop=now)["count"] == 3


def test_a_profilers_own_sample_counts_the_loop_before_any_tick() -> None:
    # A sample of its own (no sampler tick) always counts, even before the sampler's first tick.
    me = threading.get_ident()
    prof = Profiler({}, me, interval=0.01, cycle=7.0)
    prof.sample_frames({me: sys._getframe()}, {})
    assert prof.get_profile(server=True)["count"] == 1
