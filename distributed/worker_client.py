"""A client for use inside a task, that lets the task leave its thread while it waits."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar

from distributed.client.client import Client, get_client
from distributed.task_context import current_worker, rejoin, secede

__all__ = ["local_client", "worker_client"]

#: How many seceding ``worker_client`` blocks the running task has open (a context
#: variable, not a thread-local: coroutine tasks share the event loop's thread).
_depth: ContextVar[int] = ContextVar("worker_client_depth", default=0)


@contextmanager
def worker_client(timeout: float | str | None = None, separate_thread: bool = True) -> Iterator[Client]:
    """The client of the worker running the current task, for use in a ``with`` block.

    Inside the block the task can submit tasks, and wait for them, from its
    worker.  With ``separate_thread`` (the default) the task leaves its
    worker's thread pool for the block (:func:`distributed.secede`), so that
    the tasks it waits on can take its thread, and takes a thread of the pool
    again on the way out (:func:`distributed.rejoin`), waiting for one to be
    free.  Tasks that launch tasks that launch tasks, many levels deep, thus
    finish on a worker with a single thread.

    Parameters
    ----------
    timeout
        How long to wait for the client to connect to the scheduler (a number
        of seconds or a string such as ``"10s"``); defaults to
        ``distributed.comm.timeouts.connect``.
    separate_thread
        Whether the task leaves its worker's thread pool within the block.

    Raises
    ------
    ValueError
        When not called from within a task.

    Examples
    --------
    >>> def fib(n):  # doctest: +SKIP
    ...     if n < 2:
    ...         return n
    ...     with worker_client() as client:
    ...         a, b = client.submit(fib, n - 1), client.submit(fib, n - 2)
    ...         return a.result() + b.result()
    """
    if current_worker() is None:
        raise ValueError("No worker found: worker_client() must be called from within a task")
    client = get_client(timeout=timeout)
    # Only the outermost seceding block of a task rejoins: an inner one that rejoined
    # would hold the thread while the outer block still waits on other tasks.
    depth = _depth.get()
    leaves = separate_thread and depth == 0
    if leaves:
        secede()
    token = _depth.set(depth + 1 if separate_thread else depth)
    try:
        yield client
    finally:
        _depth.reset(token)
        if leaves:
            rejoin()


def local_client(timeout: float | str | None = None, separate_thread: bool = True) -> AbstractContextManager[Client]:
    """The former name of :func:`worker_client`: warns, then is the same."""
    warnings.warn("local_client has moved to worker_client", UserWarning, stacklevel=2)
    return worker_client(timeout=timeout, separate_thread=separate_thread)
