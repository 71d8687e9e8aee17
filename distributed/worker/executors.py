"""The executors a worker runs tasks in, as ``Worker(executor=)`` and the ``executor`` annotation choose them.

Without ``executor=``, every task runs in the worker's own thread pool
(:class:`~distributed.threadpool.ThreadPool`), on its fast path.  Given one,
as in dask.distributed:

- an :class:`~concurrent.futures.Executor` becomes the ``"default"`` one,
  which runs every task not annotated otherwise;
- a mapping names several; without a ``"default"`` entry the worker's own
  pool stays the default;
- ``"offload"`` runs tasks in the process's single offload thread.

A task annotated ``executor="name"`` (``dask.annotate(executor="name")``)
runs in the executor of that name, and fails with a :class:`ValueError`
naming the executors there are when the worker has none of that name.  A
thread pool runs the task with its task context (``get_worker()`` works in
it); any other executor (a process pool) gets the task and its inputs
pickled, and runs them as they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from dask.sizeof import sizeof
from dask.utils import typename

from distributed.offload import offload_executor
from distributed.protocol.messages import Key
from distributed.worker.execution import run_in_thread

if TYPE_CHECKING:
    from distributed.worker.server import Worker

__all__ = ["DEFAULT", "executor_name", "named_executors", "offload_executor", "run_in_executor", "run_plain"]

#: The name of the executor a task runs in when its annotations name none.
DEFAULT = "default"


def named_executors(executor: Any) -> dict[str, Executor]:
    """The executors ``Worker(executor=executor)`` asks for, by name; empty for the worker's own pool alone.

    Raises
    ------
    TypeError
        For anything but None, ``"offload"``, an Executor or a mapping of names to Executors.
    """
    if executor is None:
        return {}
    if executor == "offload":
        return {DEFAULT: offload_executor()}
    if isinstance(executor, Executor):
        return {DEFAULT: executor}
    if isinstance(executor, Mapping):
        named: dict[str, Executor] = {}
        for name, value in executor.items():
            if not isinstance(name, str) or not isinstance(value, Executor):
                raise TypeError(
                    f"Worker(executor=) maps names to concurrent.futures.Executor instances, got {name!r}: {value!r}"
                )
            named[name] = value
        return named
    raise TypeError(
        "Worker(executor=) takes a concurrent.futures.Executor, a mapping of names to them, or 'offload'; "
        f"got {executor!r}"
    )


def executor_name(annotations: Mapping[str, Any] | None) -> str:
    """The executor a task's annotations choose (:data:`DEFAULT` when they name none)."""
    if annotations:
        name = annotations.get("executor", DEFAULT)
        if name is not None:
            return str(name)
    return DEFAULT


def run_plain(node: Any, args: dict[Key, Any]) -> Any:
    """Run a task as it is: what another process's executor is given (picklable, module level)."""
    return node(args)


async def run_in_executor(
    executor: Executor, worker: Worker, node: Any, args: dict[Key, Any], key: Key, loop: asyncio.AbstractEventLoop
) -> tuple[Any, int, str]:
    """Run a task in ``executor``: its value, size and type name.

    A thread pool runs it with the task context of this worker; any other
    executor is given the task and its inputs to pickle.
    """
    if isinstance(executor, ThreadPoolExecutor):
        return await asyncio.wrap_future(executor.submit(run_in_thread, worker, node, args, key, loop))
    value = await asyncio.wrap_future(executor.submit(run_plain, node, args))
    return value, sizeof(value), typename(type(value))
