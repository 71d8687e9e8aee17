"""Running a task's code on a worker: the thread state around it, and the events its end makes.

A task runs in a pool thread (:func:`run_in_thread`) or, a coroutine, on the
worker's event loop (:class:`StepsInTaskContext`); either way
:class:`TaskContext` sets what :mod:`distributed.task_context` reads (the
worker, the key) for as long as the task's code runs, and puts back what was
there (a task may run inside another on the same thread).  The outcome
becomes a :class:`~distributed.worker.state_machine.ExecuteSuccess` or
:class:`~distributed.worker.state_machine.ExecuteFailure` for the state machine.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
from collections.abc import Callable, Generator
from contextvars import Token
from typing import TYPE_CHECKING, Any

from dask.sizeof import sizeof
from dask.utils import typename

from distributed.core import error_message
from distributed.protocol.messages import Key
from distributed.protocol.serialize import unwrap
from distributed.task_context import TaskHost, task_worker, thread_state
from distributed.worker.state_machine import ExecuteFailure, ExecuteSuccess

if TYPE_CHECKING:
    from distributed.threadpool import ThreadPool
    from distributed.worker.server import Worker

logger = logging.getLogger("distributed.worker")

__all__ = [
    "FailureLog",
    "Runnable",
    "StepsInTaskContext",
    "TaskContext",
    "consume",
    "deserialize_spec",
    "failure_event",
    "failure_log",
    "run_actor_method",
    "run_in_thread",
    "success_event",
]

#: A task ready for a pool thread: ``(task object, its inputs, key, run_id)``.
Runnable = tuple[Any, dict[Key, Any], Key, int]


async def deserialize_spec(run_spec: Any, loop: asyncio.AbstractEventLoop, executor: ThreadPool) -> Any:
    """The task object behind a run_spec, unpickled off the event loop when large."""
    if run_spec is None:
        raise RuntimeError("Task has no run specification")
    frames = getattr(run_spec, "frames", None)
    if frames is not None and sum(len(f) for f in frames) > 100_000:
        return await loop.run_in_executor(None, unwrap, run_spec)
    return unwrap(run_spec)


def success_event(key: Key, run_id: int, value: object, nbytes: int, type_name: str, start: float) -> ExecuteSuccess:
    """The event for a task that returned ``value``."""
    stop = time.time()
    return ExecuteSuccess(
        # By run, not time (the story has the time): formatting a float took half a microsecond a task.
        stimulus_id=f"task-finished-{run_id}",
        key=key,
        run_id=run_id,
        value=value,
        nbytes=nbytes,
        type=type_name,
        start=start,
        stop=stop,
    )


class FailureLog:
    """Logs tasks that raised, as dask's workers do, at most :attr:`limit` per :attr:`period` seconds.

    A graph whose thousand tasks all fail would otherwise flood the log: past
    the limit the failures are counted, and the next one logged says how many
    were left out.
    """

    def __init__(self, limit: int = 10, period: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.period = period
        self.clock = clock
        self._window_start = 0.0
        self._in_window = 0
        #: Failures not logged since the last one that was.
        self.left_out = 0
        self._lock = threading.Lock()

    def failed(self, key: Key, exc: BaseException) -> None:
        """Log that task ``key`` raised ``exc`` (unless over the limit)."""
        now = self.clock()
        with self._lock:
            if now - self._window_start > self.period:
                self._window_start, self._in_window = now, 0
            if self._in_window >= self.limit:
                self.left_out += 1
                return
            self._in_window += 1
            left_out, self.left_out = self.left_out, 0
        more = f" ({left_out} more failures not logged)" if left_out else ""
        logger.warning("Compute failed: task %r raised %s: %s%s", key, type(exc).__name__, exc, more)


#: The log of failed tasks of this process's workers.
failure_log = FailureLog()


def failure_event(exc: BaseException, key: Key, run_id: int, start: float) -> ExecuteFailure:
    """The event for a task that raised ``exc`` (logged, within the rate limit of :data:`failure_log`)."""
    stop = time.time()
    failure_log.failed(key, exc)
    err = error_message(exc, exc.__traceback__)
    return ExecuteFailure(
        stimulus_id=f"task-erred-{stop}",
        key=key,
        run_id=run_id,
        exception=err["exception"],
        traceback=err["traceback"],
        text=err["text"],
        start=start,
        stop=stop,
        traceback_text="".join(traceback.format_tb(exc.__traceback__)),
    )


class TaskContext:
    """Sets the thread state that ``get_worker``/``get_client`` read."""

    __slots__ = ("worker", "key", "old_state", "old_key", "old_worker", "ident", "token")

    def __init__(self, worker: Worker, key: Key) -> None:
        self.worker = worker
        self.key = key
        self.old_state: dict[str, object] | None = None
        self.old_key: Key | None = None
        self.old_worker: TaskHost | None = None
        self.ident = 0
        self.token: Token[TaskHost | None] | None = None

    def __enter__(self) -> None:
        ts = thread_state
        self.old_state = ts.execution_state
        self.old_key = ts.key
        self.old_worker = ts.worker
        ts.execution_state = {"worker": self.worker, "key": self.key}
        ts.key = self.key
        ts.worker = self.worker
        self.token = task_worker.set(self.worker)
        # One dict store per task: which task this thread runs, for the profiler.
        self.ident = threading.get_ident()
        self.worker.active_threads[self.ident] = self.key

    def __exit__(self, *exc: object) -> None:
        ts = thread_state
        ts.execution_state = self.old_state
        ts.key = self.old_key
        ts.worker = self.old_worker
        if self.token is not None:
            task_worker.reset(self.token)
            self.token = None
        outer = self.old_key
        if outer is None:
            self.worker.active_threads.pop(self.ident, None)
        else:  # a task run inside another on this thread (the outer one resumes)
            self.worker.active_threads[self.ident] = outer


class StepsInTaskContext:
    """Await a coroutine task with its thread state set during each of its steps only.

    Coroutine tasks share the event loop's thread: state set for the whole
    ``await`` would be seen by whatever else runs on the loop meanwhile, and
    tasks that interleave would restore each other's state on leaving.
    """

    def __init__(self, coro: Any, worker: Worker, key: Key) -> None:
        self.coro = coro
        self.worker = worker
        self.key = key

    def __await__(self) -> Generator[Any, Any, Any]:
        steps = self.coro.__await__()
        send: Any = None
        error: BaseException | None = None
        while True:
            with TaskContext(self.worker, self.key):
                try:
                    yielded = steps.throw(error) if error is not None else steps.send(send)
                except StopIteration as stop:
                    return stop.value
            try:
                send, error = (yield yielded), None
            except BaseException as e:  # delivered into the coroutine (cancellation included)
                send, error = None, e


def run_actor_method(worker: Worker, method: Any, args: Any, kwargs: Any) -> Any:
    """Run in the actor thread, which ``get_worker``/``get_client`` and actor proxies recognise."""
    thread_state.worker = worker
    thread_state.actor = True
    return method(*args, **kwargs)


def run_in_thread(
    worker: Worker, node: Any, args: dict[Key, Any], key: Key, loop: asyncio.AbstractEventLoop
) -> tuple[Any, int, str]:
    with TaskContext(worker, key):
        value = node(args)
        return value, sizeof(value), typename(type(value))


async def consume(aw: Any) -> None:
    await aw
