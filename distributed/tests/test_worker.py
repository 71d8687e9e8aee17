"""Worker behaviour: tasks, transfers between peers, clients inside tasks."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any, Literal

import numpy as np
import psutil
import pytest
from dask.delayed import delayed

from distributed import Client, Future, Status, get_client, get_worker, rejoin, secede
from distributed.protocol.messages import Key
from distributed.scheduler import Scheduler
from distributed.tests.logs import caught_logs, messages
from distributed.utils_test import async_poll_for, gen_cluster, inc
from distributed.worker import Worker
from distributed.worker.running import LINED_UP_PER_THREAD
from distributed.worker.state_machine import WorkerStateMachine


def task_uses_client(x: int) -> int:
    client = get_client()
    future = client.submit(inc, x)
    return int(future.result()) + 100


def task_secedes(x: int) -> int:
    secede()
    client = get_client()
    result = client.gather(client.submit(inc, x))
    rejoin()
    return int(result)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)])
async def test_client_inside_task_without_secede(c: Client, s: Scheduler, a: Worker) -> None:
    assert await c.submit(task_uses_client, 1) == 102


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_get_client_inside_task(c: Client, s: Scheduler, a: Worker) -> None:
    # With one thread, waiting inside the task needs secede to avoid a deadlock.
    assert await c.submit(task_secedes, 1) == 2


def where_am_i() -> str:
    return str(get_worker().address)


@gen_cluster(client=True)
async def test_get_worker(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    addr = await c.submit(where_am_i, workers=[b.address], pure=False)
    assert addr == b.address
    with pytest.raises(ValueError):
        get_worker()


@gen_cluster(client=True)
async def test_data_moves_between_workers(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(np.arange, 1_000_000, workers=[a.address])
    y = c.submit(np.arange, 1_000_000, workers=[b.address])
    z = c.submit(np.add, x, y)
    result = await z
    assert (result == 2 * np.arange(1_000_000)).all()
    ws = s.tasks[z.key].who_has
    # The worker that ran z fetched the other input and told the scheduler.
    holder = next(iter(ws))
    assert holder.address in {a.address, b.address}
    other_key = x.key if holder.address == b.address else y.key
    assert holder in s.tasks[other_key].who_has


@gen_cluster(client=True)
async def test_worker_story_and_validation(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    x = c.submit(inc, 1, workers=[a.address])
    await x
    story = a.story(x.key)
    assert [t[2] for t in story] == ["ready", "executing", "memory"]
    assert a.state is not None
    a.state.validate_state()


async def async_task(x: int) -> int:
    await asyncio.sleep(0.01)  # the task's own work: it suspends, so the worker must await it
    return x + 1


@gen_cluster(client=True)
async def test_async_def_tasks_are_awaited(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    assert await c.submit(async_task, 1) == 2
    d = delayed(async_task)(10)
    assert await c.compute(d) == 11


@gen_cluster(client=True)
async def test_worker_close_while_running_keeps_cluster_working(c: Client, s: Scheduler, a: Worker, b: Worker) -> None:
    futures = c.map(inc, range(100))
    await a.close()
    assert await c.gather(futures) == list(range(1, 101))
    await async_poll_for(lambda: a.address not in s.workers, 5)


_GATE = threading.Event()
_RAN: list[str] = []


def _blocker() -> str:
    assert _GATE.wait(10)
    return "blocker"


def _records_cleared(a: Worker) -> WorkerStateMachine:
    """``a``'s state machine, with the gate closed and no task recorded as run."""
    _GATE.clear()
    _RAN.clear()
    state = a.state
    assert state is not None
    return state


def _thread_held(c: Client, a: Worker) -> tuple[WorkerStateMachine, Future]:
    """As :func:`_records_cleared`, with ``a``'s one thread held by a task until ``_GATE`` is set."""
    return _records_cleared(a), c.submit(_blocker, pure=False)


def _record(name: str, seconds: float = 0.0) -> str:
    _RAN.append(name)
    time.sleep(seconds)  # the task's own work: long enough for the loop to line up the next one
    return name


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.scheduler.worker-saturation": float("inf")})
async def test_busy_thread_goes_on_with_the_next_ready_task(c: Client, s: Scheduler, a: Worker) -> None:
    # A thread that finishes while tasks wait takes the next one itself instead of
    # sleeping until the event loop hands it over: few tasks go through the pool's queue.
    state = _records_cleared(a)
    handed_over = 0
    submit_nowait = a.executor.submit_nowait

    def counting(fn: Any, *args: Any) -> None:
        nonlocal handed_over
        handed_over += 1
        submit_nowait(fn, *args)

    a.executor.submit_nowait = counting  # type: ignore[method-assign]  # count hand-offs to the pool
    block = c.submit(_blocker, pure=False)
    names = [f"t{i}" for i in range(30)]
    futures = c.map(_record, names, seconds=0.02, key=list[Key](names))
    await async_poll_for(lambda: len(state.ready) == 30, timeout=10)
    _GATE.set()
    assert await c.gather(futures) == names
    assert await block == "blocker"
    assert sorted(_RAN) == sorted(names)  # each ran once
    assert handed_over <= 15, handed_over  # 31 when every task goes through the queue
    ts_story = [e for e in state.story("t0", "t1") if e[2] == "executing"]
    assert len(ts_story) == 2


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.scheduler.worker-saturation": float("inf")})
async def test_a_thread_goes_on_with_several_lined_up_tasks_while_the_loop_is_busy(
    c: Client, s: Scheduler, a: Worker
) -> None:
    # Short tasks: the thread runs the lined-up ones back to back, not one per turn of the loop.
    state, block = _thread_held(c, a)
    lined_up = LINED_UP_PER_THREAD * state.nthreads
    assert lined_up > 1
    names = [f"q{i:02d}" for i in range(lined_up + 5)]
    futures = c.map(_record, names, key=list[Key](names))
    await async_poll_for(lambda: len(state.ready) == len(names), timeout=10)
    # Hold the event loop (this test runs on it): only the pool thread can move now.
    _GATE.set()
    deadline = time.monotonic() + 10
    while len(_RAN) < lined_up and time.monotonic() < deadline:
        time.sleep(0.001)
    assert names[:lined_up] == _RAN  # in priority order, without the loop
    assert await c.gather(futures) == names
    assert await block == "blocker"
    assert sorted(_RAN) == names  # each ran once
    assert [e[2] for e in state.story("q00") if e[1] == "ready"] == ["executing"]


def _record_with(name: str, dep: object) -> str:
    return _record(name)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.scheduler.worker-saturation": float("inf")})
async def test_tasks_with_inputs_are_not_lined_up_beyond_one_per_thread(c: Client, s: Scheduler, a: Worker) -> None:
    # A lined-up task holds its inputs: only the next one per thread is, the others wait for the loop.
    x = c.submit(inc, 1, key="x")
    await x
    state, block = _thread_held(c, a)
    names = [f"d{i}" for i in range(6)]
    futures = c.map(_record_with, names, dep=x, key=list[Key](names))
    await async_poll_for(lambda: len(state.ready) == len(names), timeout=10)
    assert [ts.key for ts in state.next_ready_tasks(LINED_UP_PER_THREAD * state.nthreads)] == names
    assert [runnable[2] for runnable in a._lined_up] == names[: state.nthreads]
    _GATE.set()
    assert await c.gather(futures) == names
    assert await block == "blocker"


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.scheduler.worker-saturation": float("inf")})
async def test_task_lined_up_for_a_thread_yields_to_a_later_one_of_higher_priority(
    c: Client, s: Scheduler, a: Worker
) -> None:
    state, block = _thread_held(c, a)
    low = c.submit(_record, "low", key="low", priority=0)
    await async_poll_for(lambda: len(state.ready) == 1, timeout=10)
    high = c.submit(_record, "high", key="high", priority=10)
    await async_poll_for(lambda: len(state.ready) == 2, timeout=10)
    _GATE.set()
    await c.gather([block, low, high])
    assert _RAN == ["high", "low"]


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.scheduler.worker-saturation": float("inf")})
async def test_task_lined_up_for_a_thread_and_then_cancelled_does_not_run(
    c: Client[Literal[True]], s: Scheduler, a: Worker
) -> None:
    state, block = _thread_held(c, a)
    doomed = c.submit(_record, "doomed", key="doomed")
    await async_poll_for(lambda: len(state.ready) == 1, timeout=10)
    await c.cancel(doomed)
    await async_poll_for(lambda: "doomed" not in state.tasks, timeout=10)
    _GATE.set()
    assert await block == "blocker"
    after = c.submit(_record, "after", key="after")
    assert await after == "after"
    assert _RAN == ["after"]


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.scheduler.worker-saturation": float("inf")})
async def test_tasks_ready_on_a_paused_worker_start_when_it_resumes(c: Client, s: Scheduler, a: Worker) -> None:
    # As the memory monitor does: pause, then resume with an event-less handle_stimulus().
    state, block = _thread_held(c, a)
    later = c.map(_record, ["x", "y"], key=["x", "y"])
    await async_poll_for(lambda: len(state.ready) == 2, timeout=10)
    a.status = Status.paused
    state.paused = True
    _GATE.set()
    assert await block == "blocker"
    assert _RAN == [] and {state.tasks["x"].state, state.tasks["y"].state} == {"ready"}
    a.status = Status.running
    state.paused = False
    a.handle_stimulus()
    assert await c.gather(later) == ["x", "y"]


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], config={"distributed.worker.batched-send-interval": "60s"})
async def test_dependent_tasks_on_an_idle_worker_do_not_wait_out_the_batching_interval(
    c: Client, s: Scheduler, a: Worker
) -> None:
    # Each link's report finds the worker with nothing to run, and each next link finds it idle:
    # both go at once, so the chain ends long before one interval of the streams has passed.
    x = c.submit(inc, 0, pure=False)
    for _ in range(4):
        x = c.submit(inc, x, pure=False)
    assert await asyncio.wait_for(x, 30) == 5


@gen_cluster(nthreads=[])
async def test_closed_workers_leave_no_descriptor_behind_without_the_cycle_collector(s: Scheduler) -> None:
    # A closed worker must let go of its descriptors itself: a finalizer that waits for the cyclic
    # collector leaks one per worker in a process that starts and closes many (a cluster's tests, adapting).
    async def start_and_close() -> None:
        async with Worker(s.address, nthreads=1) as w:
            # One job, so that the pool's thread runs and sleeps on the descriptor before the close.
            assert await asyncio.wrap_future(w.executor.submit(int, "1")) == 1
        await async_poll_for(lambda: not s.workers, timeout=10)

    proc = psutil.Process()
    await start_and_close()  # what is opened once per process (loggers, the loop's own) opens now
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        before = proc.num_fds()
        n = 10
        for _ in range(n):
            await start_and_close()
        grown = proc.num_fds() - before
    finally:
        if was_enabled:
            gc.enable()
    assert grown < n // 2, f"{grown} more open descriptors after {n} workers started and closed"


# -- failed tasks are logged, within a rate limit -------------------------------------------
def test_failure_log_is_rate_limited() -> None:
    from distributed.worker.execution import FailureLog

    now = [0.0]
    log = FailureLog(limit=2, period=10, clock=lambda: now[0])
    with caught_logs("distributed.worker") as records:
        for i in range(5):
            log.failed(f"k-{i}", ValueError(i))
        assert messages(records) == [
            "Compute failed: task 'k-0' raised ValueError: 0",
            "Compute failed: task 'k-1' raised ValueError: 1",
        ]
        now[0] = 11  # a new period
        log.failed("k-5", KeyError("x"))
    assert records[-1].getMessage() == "Compute failed: task 'k-5' raised KeyError: 'x' (3 more failures not logged)"


def fails(x: int) -> int:
    return x // 0


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_a_failed_task_is_logged_on_its_worker(
    c: Client[Literal[True]], s: Scheduler, a: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distributed.worker import execution

    monkeypatch.setattr(execution, "failure_log", execution.FailureLog())  # not spent by earlier tests
    with caught_logs("distributed.worker") as records:
        with pytest.raises(ZeroDivisionError):
            await c.submit(fails, 1, key="failing-task")
    assert any(m.startswith("Compute failed: task 'failing-task' raised ZeroDivisionError") for m in messages(records))


def current_task_key(x: int) -> Any:
    return get_worker().get_current_task()


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)])
async def test_get_current_task(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    assert await c.submit(current_task_key, 1, key="which-task") == "which-task"
    with pytest.raises(ValueError, match="no task of this worker"):
        a.get_current_task()


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)], worker_kwargs={"memory_limit": "1 GiB"})
async def test_periodic_callbacks_by_name(c: Client[Literal[True]], s: Scheduler, a: Worker) -> None:
    assert {"heartbeat", "memory-monitor"} <= set(a.periodic_callbacks)
    assert a.periodic_callbacks["heartbeat"].callback_time == a.heartbeat_interval * 1000
    assert {"worker-ttl", "events-cleanup"} <= set(s.periodic_callbacks)
    assert all(pc.is_running() for pc in a.periodic_callbacks.values())
