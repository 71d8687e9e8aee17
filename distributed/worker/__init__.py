"""The worker: a server that runs tasks in a thread pool and serves their results.

- :mod:`~distributed.worker.server`: :class:`Worker`, the I/O shell (comms,
  heartbeats, peer transfers, request handlers, actors);
- :mod:`~distributed.worker.state_machine`: the task state machine, free of I/O;
- :mod:`~distributed.worker.execution`: running a task's code, and what it sees;
- :mod:`~distributed.worker.memory`: the memory monitor (pause, spill, terminate);
- :mod:`~distributed.worker.executors`: where tasks run (``executor=``, the ``executor`` annotation);
- :mod:`~distributed.worker.hardware`: memory, disk and network bandwidths (``benchmark_hardware``);
- :mod:`~distributed.worker.options`: the ``Worker`` keywords refused by name.

``distributed.worker.get_worker`` and the task-context functions (``get_client``,
``secede``, ``rejoin``, ``thread_state``) and the ``benchmark_*`` measures stay
importable from here, as in dask.
"""

from __future__ import annotations

from distributed.client.client import get_client
from distributed.task_context import rejoin, secede, thread_state
from distributed.worker.hardware import benchmark_disk, benchmark_memory, benchmark_network
from distributed.worker.server import FIRST_CONNECT_TIMEOUT, Worker, get_worker, parse_memory_limit

__all__ = [
    "FIRST_CONNECT_TIMEOUT",
    "Worker",
    "benchmark_disk",
    "benchmark_memory",
    "benchmark_network",
    "get_client",
    "get_worker",
    "parse_memory_limit",
    "rejoin",
    "secede",
    "thread_state",
]
