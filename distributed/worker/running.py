"""Running tasks on a worker: straight to its thread pool, or through a coroutine.

:class:`TaskRunning` is a part of :class:`~distributed.worker.Worker` (a base
class of it).  The common case hands a ready task to a pool thread without a
coroutine (:meth:`TaskRunning._execute_now`); the thread posts its result and
may take the task lined up next, so a busy worker wakes its event loop once
per batch of results.  Async tasks, large run specs and tasks for another
executor (:mod:`distributed.worker.executors`) go through
:meth:`TaskRunning.execute`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, MutableMapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, cast

from dask._task_spec import Task
from dask.sizeof import sizeof
from dask.utils import typename

from distributed.core import Status
from distributed.exceptions import Reschedule
from distributed.protocol.messages import Key
from distributed.protocol.serialize import unwrap
from distributed.utils import iscoroutinefunction
from distributed.worker.actors import ActorHost
from distributed.worker.execution import (
    Runnable,
    StepsInTaskContext,
    TaskContext,
    deserialize_spec,
    failure_event,
    run_in_thread,
    success_event,
)
from distributed.worker.executors import DEFAULT, executor_name, run_in_executor
from distributed.worker.state_machine import (
    ExecuteAbandoned,
    ExecuteStarted,
    ExecuteSuccess,
    RescheduleEvent,
    StateMachineEvent,
    WorkerTask,
)

if TYPE_CHECKING:
    from distributed.threadpool import ThreadPool
    from distributed.worker.server import Worker
    from distributed.worker.state_machine import WorkerStateMachine

__all__ = ["TaskRunning"]

logger = logging.getLogger("distributed.worker")

#: Ready tasks lined up per pool thread for threads to go on with, without the loop (see TaskRunning._line_up_next).
LINED_UP_PER_THREAD = 16


class TaskRunning:
    """Running ready tasks and reporting their outcome; the :class:`~distributed.worker.Worker` provides the rest.

    Only ever a part of a worker: the task context is given ``self`` as that worker.
    """

    # Set by the worker.
    loop: asyncio.AbstractEventLoop | None
    state: WorkerStateMachine | None
    data: MutableMapping[Key, Any]
    executor: ThreadPool
    task_executors: dict[str, Executor]
    actor_host: ActorHost
    actor_executor: Any
    status: Status
    _results: list[StateMachineEvent]
    _results_lock: threading.Lock
    _results_wake_pending: bool
    _lined_up: deque[Runnable]
    _lineup_open: bool
    _large_result_bytes: float
    _prepared: dict[Key, Runnable]

    @property
    def address(self) -> str:
        """The worker's address (defined by the server)."""
        raise NotImplementedError

    def handle_stimulus(self, *events: StateMachineEvent) -> None:
        """Feed events to the state machine (defined by the worker)."""
        raise NotImplementedError

    def _start_task(self, coro: Any, name: str) -> None:
        """Run ``coro`` as a task the worker tracks (defined by the worker)."""
        raise NotImplementedError

    def _prune_actors(self, keys: Iterable[Key]) -> None:
        """Drop the actors among ``keys`` no longer in memory (defined by the worker)."""
        raise NotImplementedError

    def _execute_now(self, key: Key, run_id: int) -> None:
        """Hand a task to the thread pool straight away.

        The common case skips a coroutine per task: the thread reports its
        result through :meth:`_post_result`, which wakes the loop once for
        however many results are waiting.  Async tasks and large run specs
        take the :meth:`execute` coroutine instead.
        """
        state = self.state
        assert state is not None and self.loop is not None
        ts = state.tasks.get(key)
        if ts is None:
            return
        runnable = self._prepare(ts) if ts.state == "executing" else None
        self._prepared.pop(key, None)
        if runnable is None or ((self.task_executors or ts.annotations) and self._runs_elsewhere(ts)):
            self._start_task(self.execute(key, run_id), f"execute-{key}")
            return
        self.executor.submit_nowait(self._run_task_in_thread, runnable)

    def _runs_elsewhere(self, ts: WorkerTask) -> bool:
        """Whether ``ts`` runs in an executor other than the worker's own pool (``executor=``, annotations)."""
        name = executor_name(ts.annotations)
        return name != DEFAULT or DEFAULT in self.task_executors

    @property
    def executors(self) -> dict[str, Any]:
        """The executors tasks run in, by name, as dask's ``Worker.executors`` (``"actor"``: actors' methods)."""
        return {DEFAULT: self.executor, **self.task_executors, "actor": self.actor_executor}

    def _prepare(self, ts: WorkerTask) -> Runnable | None:
        """What a pool thread needs to run ``ts``, or None for the :meth:`execute` coroutine.

        That takes async tasks, large run specs (unpickled off the loop), tasks
        for another executor and whatever fails here (it reports the error).
        """
        prepared = self._prepared.get(ts.key)
        if prepared is not None and prepared[3] == ts.run_id:
            return prepared
        if (self.task_executors or ts.annotations) and self._runs_elsewhere(ts):
            return None
        run_spec = ts.run_spec
        frames = getattr(run_spec, "frames", None)
        if frames is not None and sum(map(len, frames)) > 100_000:
            return None
        try:
            node = unwrap(run_spec)
            args = {dep.key: self.data[dep.key] for dep in ts.dependencies} if ts.dependencies else {}
        except Exception:
            return None
        if type(node) is Task:
            # What dask's Task.is_coro answers, without its import and property on every task.
            if iscoroutinefunction(node.func):
                return None
        elif getattr(node, "is_coro", False):
            return None
        self._prepared[ts.key] = prepared = (node, args, ts.key, ts.run_id)
        return prepared

    def _line_up_next(self, state: WorkerStateMachine) -> None:
        """Offer the next ready tasks, in order, to whichever pool threads finish first.

        With every thread busy and tasks waiting, a thread that finishes would
        otherwise post its result, sleep, and be woken again once the loop has
        handed it the next task: two context switches per task.  Taking a
        lined-up task instead, it goes straight on; the loop hears of it
        (:class:`ExecuteStarted`) with the result before any other event.
        Up to :data:`LINED_UP_PER_THREAD` per thread are lined up: with one in
        all, no-op tasks ran about two to a wake of the loop, and a worker
        spent 42 µs of CPU per task of a map where it spends 25 with 16.  The
        loop closes the line at its next event and opens it again after: as it
        was, when what is left of it still comes first (see
        :meth:`_line_still_holds`), or lined up afresh.
        """
        if self.status is not Status.running:
            return
        if self._line_still_holds(state):
            with self._results_lock:
                self._lineup_open = not self._results
            return
        # A prepared task holds its inputs: lined up far ahead, it would keep spilled data in memory.
        tasks = state.next_ready_tasks(LINED_UP_PER_THREAD * state.nthreads, with_inputs=state.nthreads)
        state.mark_ready_order()
        runnables: list[Runnable] = []
        for ts in tasks:
            runnable = self._prepare(ts)
            if runnable is None:
                break  # that one starts from the loop, and those after it wait for it
            runnables.append(runnable)
        # Keep the prepared specs of the tasks lined up only (each holds its arguments).
        self._prepared = {r[2]: r for r in runnables}
        with self._results_lock:
            self._lined_up.clear()
            # With a thread's news not applied yet, the state machine's order is stale: the loop,
            # woken for that news already, lines up again once it is applied.
            if not self._results:
                self._lined_up.extend(runnables)
            self._lineup_open = bool(self._lined_up)

    def _line_still_holds(self, state: WorkerStateMachine) -> bool:
        """Whether what is left of the line (threads took its first tasks) is still the order to run in.

        Lining up afresh at every event took 12 % of the event loop's samples
        on an in-process tree of dependent tasks, where results come a few at
        a time: most events change nothing of the order.  The line holds while at least half of it
        is left, its first task is the one to start next, each task in it is
        still ready (the same run), and no task made ready since it was lined
        up goes before its last one.
        """
        lined = self._lined_up
        if len(lined) * 2 < LINED_UP_PER_THREAD * state.nthreads:
            return False
        tasks = state.tasks
        last = tasks.get(lined[-1][2])
        first_since = state.first_ready_since_mark
        if last is None or (first_since is not None and not last.priority < first_since):
            return False
        first = state.next_ready()
        if first is None or first.key != lined[0][2]:
            return False
        for _, _, key, run_id in lined:
            ts = tasks.get(key)
            if ts is None or ts.state != "ready" or ts.run_id != run_id:
                return False
        if len(self._prepared) != len(lined):
            self._prepared = {r[2]: r for r in lined}
        return True

    def _take_back_lined_up(self) -> None:
        """No pool thread may start the lined-up task any more (pausing, closing, a new state machine)."""
        lock = getattr(self, "_results_lock", None)
        if lock is not None:
            with lock:
                self._lined_up.clear()
                self._lineup_open = False
            self._prepared = {}

    def _run_task_in_thread(self, runnable: Runnable) -> None:
        """Run a task, then the lined-up one if this thread may take it, and so on."""
        next_one: Runnable | None = runnable
        while next_one is not None:
            next_one = self._post_result(self._run_one(*next_one), take_next=True)

    def _run_one(self, node: Any, args: dict[Key, Any], key: Key, run_id: int) -> StateMachineEvent:
        start = time.time()
        try:
            with TaskContext(cast("Worker", self), key):
                value = node(args)
            nbytes, type_name = sizeof(value), typename(type(value))
            if key in self.actor_host.keys:
                value = self.actor_host.keep(key, value, self.address)
            return success_event(key, run_id, value, nbytes, type_name, start)
        except Reschedule:
            return RescheduleEvent(stimulus_id=f"reschedule-{time.time()}", key=key, run_id=run_id)
        except BaseException as e:
            return failure_event(e, key, run_id, start)

    def _post_result(self, ev: StateMachineEvent, take_next: bool = False) -> Runnable | None:
        """Queue a result from a pool thread; wake the loop once per batch.

        With ``take_next``, take the lined-up task if this thread may run another.
        """
        taken: Runnable | None = None
        with self._results_lock:
            self._results.append(ev)
            # After a large result the loop must store it (and spill, if memory is short) before
            # the next task makes another: two unstored results of tens of MB each took a
            # 300 MB worker past the nanny's terminate line.
            if (
                take_next
                and self._lineup_open
                and self._lined_up
                and self.executor.may_continue()
                and (type(ev) is not ExecuteSuccess or ev.nbytes < self._large_result_bytes)
            ):
                taken = self._lined_up.popleft()
                self._results.append(ExecuteStarted(stimulus_id="ensure-computing", key=taken[2]))
            if self._results_wake_pending:
                return taken
            self._results_wake_pending = True
        loop = self.loop
        try:
            if loop is not None:
                loop.call_soon_threadsafe(self._drain_results)
        except RuntimeError:
            pass  # the loop closed: the worker is gone
        return taken

    def _drain_results(self) -> None:
        with self._results_lock:
            self._results_wake_pending = False
        self.handle_stimulus()

    async def execute(self, key: Key, run_id: int) -> None:
        """Run one task and report how it went."""
        state = self.state
        assert state is not None
        ts = state.tasks.get(key)
        if ts is None:
            return
        if ts.state != "executing":
            # Freed before it started: give its thread slot back.
            self.handle_stimulus(ExecuteAbandoned(stimulus_id=f"execute-abandoned-{time.time()}", key=key))
            return
        run_spec = ts.run_spec
        try:
            args = {dep.key: self.data[dep.key] for dep in ts.dependencies}
        except KeyError as e:
            ev: StateMachineEvent = RescheduleEvent(stimulus_id=f"missing-dep-{key}", key=key, run_id=run_id)
            logger.warning("Dependency %s of %s vanished before it ran; rescheduling", e, key)
            self.handle_stimulus(ev)
            return
        loop = asyncio.get_running_loop()
        start = time.time()
        try:
            node = await deserialize_spec(run_spec, loop, self.executor)
            if getattr(node, "is_coro", False):
                value = await StepsInTaskContext(node(args), cast("Worker", self), key)
                nbytes, type_name = sizeof(value), typename(type(value))
            elif self._runs_elsewhere(ts):
                name = executor_name(ts.annotations)
                chosen = self.task_executors.get(name)
                if chosen is None:
                    raise ValueError(
                        f"Invalid executor {name!r} for task {key!r}; this worker has {sorted(self.executors)}"
                    )
                value, nbytes, type_name = await run_in_executor(chosen, cast("Worker", self), node, args, key, loop)
            else:
                value, nbytes, type_name = await asyncio.wrap_future(
                    self.executor.submit(run_in_thread, self, node, args, key, loop)
                )
            if key in self.actor_host.keys:
                value = self.actor_host.keep(key, value, self.address)
            ev = success_event(key, run_id, value, nbytes, type_name, start)
        except Reschedule:
            ev = RescheduleEvent(stimulus_id=f"reschedule-{time.time()}", key=key, run_id=run_id)
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            ev = failure_event(e, key, run_id, start)
        self.handle_stimulus(ev)
        if self.actor_host.keys:
            self._prune_actors([key])
