"""What a running task sees: its key, its worker, that worker's client, and leaving or rejoining the pool.

A worker sets this thread-local state around each task it runs (and around each
actor method).  The client side, the coordination primitives and shuffle's task
bodies read it here instead of importing the worker, so that those layers sit
below it.  The worker is seen through :class:`TaskHost`: only what code in a
task may use of it.

:func:`distributed.worker.get_worker`, :func:`distributed.get_client`,
:func:`distributed.secede` and :func:`distributed.rejoin` are the public
faces of this module.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from distributed.protocol.messages import Key
from distributed.threadpool import current_pool

if TYPE_CHECKING:
    from distributed.core import ConnectionPool

__all__ = [
    "TaskHost",
    "TaskThreadState",
    "context_worker",
    "current_worker",
    "in_actor_thread",
    "rejoin",
    "secede",
    "task_worker",
]


class TaskHost(Protocol):
    """What code running in a task (or an actor method) may use of its worker."""

    @property
    def address(self) -> str:
        """The worker's address."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The worker's event loop (None before it starts)."""

    @property
    def rpc(self) -> ConnectionPool:
        """The worker's connection pool to its peers and the scheduler."""

    @property
    def actors(self) -> Mapping[Key, Any]:
        """The actor instances the worker holds, by key (user objects)."""

    def task_client(self, timeout: float | None = None) -> object:
        """The worker's client of its scheduler, made on first use (a ``Client``)."""

    def secede_task(self, key: Key) -> None:
        """Give the slot of task ``key`` to other tasks (called from the task's thread)."""


class TaskThreadState(threading.local):
    """The per-thread state: set by the worker while a task or an actor method runs on this thread.

    Attributes
    ----------
    worker
        The worker running the task, else None.
    key
        The task's key (None in an actor method).
    actor
        Whether this is an actor thread.
    execution_state
        ``{"worker": ..., "key": ...}`` while a task runs: the shape other
        libraries read from ``distributed.worker.thread_state``.
    """

    def __init__(self) -> None:
        self.worker: TaskHost | None = None
        self.key: Key | None = None
        self.actor = False
        self.execution_state: dict[str, object] | None = None


#: This process's task state, one per thread.
thread_state = TaskThreadState()

#: The worker whose task runs in this context, set with the thread state.  Coroutines a task starts on an event
#: loop (``client.sync(...)`` from a task) run in a copy of the task's context, so they see it too, as in dask.
task_worker: ContextVar[TaskHost | None] = ContextVar("task_worker", default=None)


def current_worker() -> TaskHost | None:
    """The worker running the task (or actor method) on this thread, else None."""
    return thread_state.worker


def context_worker() -> TaskHost | None:
    """:func:`current_worker`, or the worker of the task that started the coroutine running now; else None.

    What ``get_worker()`` and ``get_client()`` look for, as dask's do: a coroutine
    that a task runs on an event loop (``client.sync(...)`` from the task) is that
    task's too, though it holds no thread of the worker's pool (nothing to secede).
    """
    return thread_state.worker or task_worker.get()


def in_actor_thread() -> bool:
    """Whether this thread runs actor methods."""
    return thread_state.actor


def secede() -> None:
    """Leave the worker's thread pool while this task waits on others.

    The pool starts another thread in its place, and the worker tells the
    scheduler the task is long-running, so that both give its slot to other
    tasks.  A coroutine task (run on the worker's event loop, holding no pool
    thread) only gives up its slot.

    Raises
    ------
    ValueError
        When not called from within a task.
    """
    worker = thread_state.worker
    if worker is None:
        raise ValueError("No worker found: secede() must be called from within a task")
    key = thread_state.key
    if key is not None:
        pool = current_pool()
        if pool is not None:
            pool.secede_current_thread()
        worker.secede_task(key)


def rejoin() -> None:
    """Have a task that called :func:`secede` take a thread of the worker's pool again.

    Blocks until a slot frees: the next pool thread to finish its task leaves the
    pool to make room.  A no-op outside a seceded task.
    """
    pool = current_pool()
    if pool is not None:
        pool.rejoin_current_thread()
